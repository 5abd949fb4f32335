"""`epochguard watch`'s face: the command line, the event log, the state file, the metrics' names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from epochguard.__main__ import build_parser, main
from epochguard.client.watcher import GroupAffected, Truncation, Watcher
from epochguard.ops.watch import EXIT_COULD_NOT_RUN, EventLog, WatchMetrics, load_state, save_state
from epochguard.types import TopicPartition


def test_watch_starts_without_importing_spark() -> None:
    probe = ("import sys\nfrom epochguard.__main__ import build_parser\nbuild_parser('watch')\n"
             "print(sorted(m for m in ('pyspark', 'pandas', 'epochguard.spark') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]"]


def test_the_options_are_kafkas_and_the_defaults_are_read_only() -> None:
    args = build_parser("watch").parse_args(["watch", "-b", "k:9092", "--topic", "orders-*", "--group", "g"])
    assert (args.topic, args.group, args.interval, args.once, args.rewind_groups) == (["orders-*"], ["g"], 5.0,
                                                                                      False, False)


def test_no_broker_answering_is_exit_2_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = main(["watch", "-b", f"127.0.0.1:{port}", "--once", "--request-timeout-ms", "500",
                 "--events", str(tmp_path / "events.jsonl")])
    assert code == EXIT_COULD_NOT_RUN
    assert "no broker answered" in capsys.readouterr().err


def test_a_state_file_that_is_not_ours_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state.json"
    state.write_text('{"something": "else"}')
    assert main(["watch", "-b", "127.0.0.1:1", "--once", "--state", str(state)]) == EXIT_COULD_NOT_RUN
    assert "not an epochguard watch state file" in capsys.readouterr().err
    assert state.read_text() == '{"something": "else"}'  # left as it was


def test_the_state_round_trips_and_is_replaced_atomically(tmp_path: Path) -> None:
    w = Watcher()
    w.restore({"partitions": [["t", 0, 20, 3, 4]]})
    path = tmp_path / "deep" / "state.json"
    save_state(path, w)
    assert load_state(path) == {"version": 1, "partitions": [["t", 0, 20, 3, 4, -1]]}
    assert not list(path.parent.glob("*.tmp"))
    w2 = Watcher()
    w2.restore(load_state(path) or {})
    p = w2.partitions[TopicPartition("t", 0)]
    assert (p.hw, p.hw_epoch, p.position_epoch) == (20, 3, 4)


def test_events_are_appended_as_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    for t in (Truncation("t", 0, 1, 2, 10, 20, 123), Truncation("t", 0, 2, 3, 10, 15, 456)):
        log = EventLog(path)
        log.write([t.to_json()])
        log.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 2 and lines[0] == {
        "event": "truncation", "topic": "t", "partition": 0, "old_epoch": 1, "new_epoch": 2, "lost_from": 10,
        "lost_until": 20, "lost_count": 10, "detected_at": 123, "divergent_epoch": -1, "replaced_by_epoch": -1}


def test_metrics_are_named_as_kafka_exporter_names_its() -> None:
    m = WatchMetrics()
    m.on_event(Truncation("orders", 3, 1, 2, 10, 25, 0))
    m.on_event(GroupAffected("billing", "orders", 3, 17, 1, (10, 17), (10, 17), 0))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for metric in m.registry.collect() for s in metric.samples}
    labels = (("partition", "3"), ("topic", "orders"))
    assert samples[("epochguard_topic_partition_truncations_total", labels)] == 1
    assert samples[("epochguard_topic_partition_lost_offsets_total", labels)] == 15
    assert samples[("epochguard_consumergroup_affected_total", (("consumergroup", "billing"), *labels))] == 1


def test_a_loss_already_logged_is_not_logged_twice_and_a_torn_line_is_skipped(tmp_path: Path) -> None:
    """A watcher killed after logging a loss and before saving its state finds it again when restarted:
    the event log keeps it once. Wrong rules: appending it again; taking the detection time as part of the
    loss (every re-detection is new); choking on the torn line a crash mid-write leaves; deduplicating
    warnings (they are not losses) or a loss of another epoch at the same offsets."""
    path = tmp_path / "events.jsonl"
    t = Truncation("t", 0, 1, 2, 10, 20, 123)
    g = GroupAffected("billing", "t", 0, 17, 1, (10, 17), (10, 17), 123)
    log = EventLog(path)
    log.write([t.to_json(), g.to_json()])
    log.close()
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"event": "truncation", "topic": "t", "parti')  # torn by a crash
    log = EventLog(path)
    again = Truncation("t", 0, 1, 2, 10, 20, 456)
    later = Truncation("t", 0, 2, 3, 10, 20, 456)
    warning = {"event": "warning", "message": "not authorized", "topic": None, "partition": None, "detected_at": 1}
    log.write([again.to_json(), GroupAffected("billing", "t", 0, 17, 1, (10, 17), (10, 17), 456).to_json(),
               later.to_json(), warning, warning])
    log.close()
    lines = path.read_text().splitlines()
    assert lines[2] == '{"event": "truncation", "topic": "t", "parti'  # the torn line stays, ended
    events = [json.loads(line) for n, line in enumerate(lines) if n != 2]
    assert [(e["event"], e.get("old_epoch"), e["detected_at"]) for e in events] == [
        ("truncation", 1, 123), ("group-affected", None, 123), ("truncation", 2, 456), ("warning", None, 1),
        ("warning", None, 1)]

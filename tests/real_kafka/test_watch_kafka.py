"""`epochguard watch` against Apache Kafka itself (issue 34): an unclean election that loses committed records
is exactly one truncation event with exactly the lost range, a group committed past the divergence point is
named with its phantoms and skips (and, rewound, its kafka-python consumer reads the replacements), and
clean leader changes (a preferred election, a controlled shutdown, a broker restart) give no event.

The watcher runs as a cron job would (`--once` with a state file, the CLI's own `watch` coroutine) between
the steps: a topic with replicas [1, 2] and min.insync.replicas=1; ten records while both replicas are in
sync; broker 2 stops (ISR [1]); ten more, acknowledged by broker 1 alone (committed: the high watermark is
20); a kafka-python group commits offset 15; broker 1 stops, broker 2 starts and is elected UNCLEAN. Broker
2 holds [0, 10): the committed records [10, 20) are gone.

Two more shapes, each checked against the truth of the same brokers' disks: `epochguard audit` of copies of
their log dirs (its driver path, `epochguard.spark.local`: local dirs with small divergent tails start no
Spark session, seconds saved per audit), whose lost records below the old leader's high watermark must be
exactly the watcher's committed-lost range: an unclean election to an empty leader (the watcher SIGKILLed
right after logging the loss, before its state is saved: restarted, the loss is found again and logged
once; real clients' groups, kafka-python's and confluent-kafka's compat drivers, read the lost records
before and, restarted after it, skip their replacements: the watcher's phantom and skip ranges are what
their delivery logs show), and two unclean elections in a row, the second to a replica that never had the
first one's epoch (out of a KIP-320 consumer's sight, not of the watcher's).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from epochguard.client import KafkaProducer
from epochguard.kafka import KafkaCluster
from epochguard.ops.watch import EXIT_CLEAN, EXIT_LOSS, EventLog, watch
from epochguard.wire.drivers.registry import Client

from .conftest import require_drivers, under_ci

pytestmark = [pytest.mark.kafka, pytest.mark.no_mutants]

kafka = pytest.importorskip("kafka", reason="kafka-python (the dev extra) is missing")


def run_once(c: KafkaCluster, topic: str, state: Path, events: Path, groups: tuple[str, ...] = (),
             rewind: bool = False) -> tuple[int, list]:
    log = EventLog(events)
    try:
        summary = asyncio.run(watch(c.bootstrap, topics=[topic], groups=groups, rewind_groups=rewind, once=True,
                                    events=log, state_path=state, request_timeout_ms=5000))
    finally:
        log.close()
    lines = [json.loads(line) for line in events.read_text().splitlines()] if events.exists() else []
    return summary.exit_code, lines


def produce(c: KafkaCluster, topic: str, prefix: str, n: int) -> None:
    producer = KafkaProducer(bootstrap_servers=c.bootstrap, acks="all")
    try:
        for i in range(n):
            producer.send(topic, f"{prefix}-{i}".encode(), partition=0).get(60)
    finally:
        producer.close()


def commit(c: KafkaCluster, group: str, topic: str, offset: int) -> None:
    consumer = kafka.KafkaConsumer(bootstrap_servers=c.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.commit({tp: kafka.OffsetAndMetadata(offset, "", -1)})
    finally:
        consumer.close()


def test_an_unclean_election_is_one_truncation_with_the_exact_range_and_the_group_past_it(
    kafka_cluster: KafkaCluster, tmp_path: Path,
) -> None:
    c, topic = kafka_cluster, "watch-unclean"
    state, events = tmp_path / "state.json", tmp_path / "events.jsonl"
    c.create_topic(topic, {0: [1, 2]}, {"min.insync.replicas": "1", "unclean.leader.election.enable": "false"})
    try:
        produce(c, topic, "a", 10)
        assert run_once(c, topic, state, events) == (EXIT_CLEAN, [])
        c.stop_broker(2)
        c.wait_partition(topic, 0, lambda s: s.isr == (1,), "ISR [1]")
        produce(c, topic, "b", 10)
        commit(c, "watch-past", topic, 15)
        commit(c, "watch-at", topic, 10)
        assert run_once(c, topic, state, events) == (EXIT_CLEAN, [])
        assert json.loads(state.read_text())["partitions"] == [[topic, 0, 20, 0, 0, 0]]
        c.stop_broker(1)
        c.wait_partition(topic, 0, lambda s: s.leader == -1, "no leader")
        c.start_broker(2)
        c.elect_leaders(topic, 0, unclean=True)
        c.wait_partition(topic, 0, lambda s: s.leader == 2, "leader 2 (unclean)")
        produce(c, topic, "c", 3)  # the replacements [10, 13), in the new epoch

        code, lines = run_once(c, topic, state, events, groups=("watch-past", "watch-at"))
        assert code == EXIT_LOSS
        truncation = [e for e in lines if e["event"] == "truncation"]
        assert [(e["lost_from"], e["lost_until"], e["lost_count"], e["old_epoch"]) for e in truncation] == [
            (10, 20, 10, 0)]
        assert truncation[0]["new_epoch"] > 0 and truncation[0]["replaced_by_epoch"] == truncation[0]["new_epoch"]
        groups = [e for e in lines if e["event"] == "group-affected"]
        assert [(e["group"], e["committed"], e["phantoms"], e["skips"], e["rewound"]) for e in groups] == [
            ("watch-past", 15, [10, 15], [10, 15], False)]
        # Later, as the event's line says: `--rewind-groups --once --group watch-past` with the same state.
        code, lines = run_once(c, topic, state, events, groups=("watch-past",), rewind=True)
        assert code == EXIT_CLEAN
        groups = [e for e in lines if e["event"] == "group-affected"]
        assert [(e["group"], e["committed"], e["phantoms"], e["rewound"]) for e in groups] == [
            ("watch-past", 15, [10, 15], False), ("watch-past", 15, [10, 15], True)]
        # The group's next consumer (kafka-python, which does not validate committed epochs) reads the
        # replacements from the divergence point instead of skipping them.
        reader = kafka.KafkaConsumer(topic, bootstrap_servers=c.bootstrap, group_id="watch-past",
                                     enable_auto_commit=False, consumer_timeout_ms=10_000)
        try:
            got = [(r.offset, r.value) for r in reader]
        finally:
            reader.close()
        assert got == [(10, b"c-0"), (11, b"c-1"), (12, b"c-2")]
        # Reported once: the next run validates against the same leader and stays quiet.
        assert run_once(c, topic, state, events)[0] == EXIT_CLEAN
        assert len(events.read_text().splitlines()) == len(lines)
    finally:
        c.start_broker(1)
        c.wait_partition(topic, 0, lambda s: set(s.isr) == {1, 2}, "ISR [1, 2] again", timeout_s=120)


def test_clean_leader_changes_give_no_event(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    """A preferred election and a controlled shutdown move leadership without losing a committed record."""
    c, topic = kafka_cluster, "watch-clean"
    state, events = tmp_path / "state.json", tmp_path / "events.jsonl"
    c.create_topic(topic, {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
    produce(c, topic, "a", 10)
    assert run_once(c, topic, state, events) == (EXIT_CLEAN, [])
    c.reorder_replicas(topic, 0, [2, 1, 3])
    c.elect_leaders(topic, 0, unclean=False)
    c.wait_partition(topic, 0, lambda s: s.leader == 2, "leader 2 (preferred)")
    produce(c, topic, "b", 5)
    assert run_once(c, topic, state, events) == (EXIT_CLEAN, [])
    try:
        c.stop_broker(2)  # a controlled shutdown: leadership moves to an in-sync replica
        c.wait_partition(topic, 0, lambda s: s.leader in (1, 3), "leader moved off 2")
        assert run_once(c, topic, state, events) == (EXIT_CLEAN, [])
        epochs = json.loads(state.read_text())["partitions"]
        assert [(t, p, hw) for t, p, hw, *_ in epochs] == [(topic, 0, 15)] and epochs[0][4] >= 2
    finally:
        c.start_broker(2)  # a broker restart: it rejoins the ISR as a follower
        c.wait_partition(topic, 0, lambda s: set(s.isr) == {1, 2, 3}, "ISR [1, 2, 3] again", timeout_s=120)
    assert run_once(c, topic, state, events) == (EXIT_CLEAN, [])


def audit_lost(c: KafkaCluster, topic: str, dest: Path, old_leader: int) -> list[int]:
    """The truth from the disks: copies of the topic's log dirs on every broker, audited; the offsets the
    audit lists as lost on `old_leader` (the log the watcher read) below that replica's high watermark."""
    try:
        from epochguard.spark import audit
        from epochguard.spark.session import LazySession
    except ImportError as exc:
        if under_ci():
            pytest.fail(f"the audit: {exc}", pytrace=False)
        pytest.skip(f"the audit: {exc}")
    for b in c.broker_ids:
        c.copy_data_dir(b, dest / f"broker-{b}", topics=[topic])
    session = LazySession()
    result = audit(session, [str(dest / f"broker-{b}") for b in c.broker_ids], out=None, html=False)
    assert not session.ready, "the audit of a few records started Spark"
    assert result.error_count == 0
    (hw,) = [r.high_watermark for r in result.replicas if r.topic == topic and r.broker == old_leader]
    assert hw is not None
    lost = result.arrow("lost_records")  # the local path: no Spark
    assert lost is not None
    return sorted(r["offset"] for r in lost.to_pylist()
                  if r["topic"] == topic and r["broker"] == old_leader and r["kind"] == "lost" and r["offset"] < hw)


def lost_ranges(lines: list) -> list[tuple[int, int, int, int]]:
    return [(e["lost_from"], e["lost_until"], e["old_epoch"], e["new_epoch"]) for e in lines
            if e["event"] == "truncation"]


# The crash rule's moment: a loss found and logged (fsynced), the state that no longer holds its position not
# yet saved. The watcher (the CLI) is SIGKILLed there.
CRASH_BEFORE_THE_STATE = """\
import os, signal, sys
from epochguard.ops import watch

real, events = watch.save_state, sys.argv[1]

def crash_once_logged(path, watcher):
    with open(events, encoding="utf-8") as f:
        if '"truncation"' in f.read():
            os.kill(os.getpid(), signal.SIGKILL)
    real(path, watcher)

watch.save_state = crash_once_logged
from epochguard.__main__ import main
sys.exit(main(sys.argv[2:]))
"""


# Real clients' groups (their compat drivers, `epochguard.wire.drivers`). kafka-python and librdkafka do not
# validate a committed offset's epoch (docs/serve.md, handoff-truncation): each resumes at its committed
# offset and skips the replacements. Apache Kafka's classic consumer and franz-go validate it (KIP-320): they
# go back to the divergence point and skip nothing, which the watcher's "unless its client validates" says.
SKIPPING, VALIDATING = ("kafka-python", "confluent-kafka"), ("java-classic", "franz-go")
GROUP_CLIENTS = SKIPPING + VALIDATING
REWOUND = "watch-confluent-kafka"  # `--rewind-groups` once the loss is found: restarted, it skips nothing


def read_as_groups(c: KafkaCluster, clients: list[Client], topic: str, out: Path, run: str) -> dict[str, list[int]]:
    """Each client's driver, a member of its own group `watch-<client>`, reads `topic` from the group's committed
    offset (the start without one) until 2 s pass without a record, commits its position and leaves: the
    offsets its delivery log shows it read."""
    logs = {d.name: out / f"{d.name}-{run}.jsonl" for d in clients}
    procs = {d.name: d.start(c.bootstrap, logs[d.name], "--consume-topic", topic, "--produce-interval-ms", "0",
                             "--group", f"watch-{d.name}", "--leave-when-idle", "2") for d in clients}

    def entries(name: str) -> list[dict]:
        text = logs[name].read_text() if logs[name].exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.endswith("}")]

    def left(name: str) -> bool:
        return any(e["kind"] == "log" and "left its group" in e.get("text", "") for e in entries(name))

    try:
        deadline = time.monotonic() + 120
        while not all(left(n) for n in procs):
            for n, proc in procs.items():
                assert proc.poll() is None or left(n), f"{n}: {logs[n].with_suffix('.stderr').read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"not every driver read and left: {[n for n in procs if not left(n)]}"
            time.sleep(0.1)
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return {n: [e["offset"] for e in entries(n) if e["kind"] == "consumed" and e["topic"] == topic] for n in procs}


def unclean_to(c: KafkaCluster, topic: str, old: int, new: int) -> int:
    """The leader `old` stops (no broker may be left to ask), `new` starts and is elected UNCLEAN; its epoch."""
    c.stop_broker(old)
    c.start_broker(new)
    c.elect_leaders(topic, 0, unclean=True)
    return c.wait_partition(topic, 0, lambda s: s.leader == new, f"leader {new} (unclean)").leader_epoch


def test_an_unclean_election_to_an_empty_leader_is_the_audits_loss_its_groups_read_and_skip_and_survives_a_crash(
    kafka_cluster: KafkaCluster, tmp_path: Path,
) -> None:
    """Broker 2 stops before anything is written; broker 1 alone acknowledges [0, 12) (ISR [1]), which each
    real client's group reads and commits (12); 1 stops and 2, empty, is elected UNCLEAN: everything
    committed is gone. The watcher is SIGKILLed right after logging the loss; restarted, it logs nothing
    twice (and rewinds confluent-kafka's group, asked to). 15 replacements are written; each group, restarted,
    resumes at 12 and skips [0, 12), or reads them all: rewound, or with a client that validates its
    committed epoch."""
    c, topic = kafka_cluster, "watch-empty-leader"
    state, events = tmp_path / "state.json", tmp_path / "events.jsonl"
    clients = require_drivers(GROUP_CLIENTS)
    groups = [f"watch-{d.name}" for d in clients]
    c.create_topic(topic, {0: [1, 2]}, {"min.insync.replicas": "1", "unclean.leader.election.enable": "false"})
    try:
        c.stop_broker(2)
        c.wait_partition(topic, 0, lambda s: s.isr == (1,), "ISR [1]")
        produce(c, topic, "a", 12)
        read_before = read_as_groups(c, clients, topic, tmp_path, "before")
        assert run_once(c, topic, state, events) == (EXIT_CLEAN, [])
        saved = state.read_text()
        assert json.loads(saved)["partitions"] == [[topic, 0, 12, 0, 0, 0]]
        epoch = unclean_to(c, topic, old=1, new=2)

        crashed = subprocess.run(
            [sys.executable, "-c", CRASH_BEFORE_THE_STATE, str(events), "watch", "-b", c.bootstrap, "--topic",
             topic, *(a for g in groups for a in ("--group", g)), "--once", "--state", str(state), "--events",
             str(events), "--request-timeout-ms", "5000"],
            capture_output=True, text=True, timeout=180)
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr
        assert state.read_text() == saved  # killed before the state moved on
        logged = [json.loads(line) for line in events.read_text().splitlines()]
        assert lost_ranges(logged) == [(0, 12, 0, epoch)]
        assert logged[0]["replaced_by_epoch"] == -1  # the new leader holds nothing at 0
        affected = {e["group"]: e for e in logged if e["event"] == "group-affected"}
        assert sorted(affected) == sorted(groups)

        # Restarted from the state file: the loss is found again (exit 1), logged once. Asked to rewind
        # confluent-kafka's group (empty: its member left), it commits it back to the divergence point.
        code, lines = run_once(c, topic, state, events, groups=(REWOUND,), rewind=True)
        rewound = lines[len(logged):]
        assert (code, lines[:len(logged)]) == (EXIT_LOSS, logged)
        assert [(e["event"], e["group"], e["phantoms"], e["rewound"]) for e in rewound] == [
            ("group-affected", REWOUND, [0, 12], True)]
        logged = lines
        produce(c, topic, "c", 15)  # the replacements [0, 15), in the new epoch
        assert run_once(c, topic, state, events) == (EXIT_CLEAN, logged)
        assert json.loads(state.read_text())["partitions"] == [[topic, 0, 15, epoch, epoch, 0]]
        read_after = read_as_groups(c, clients, topic, tmp_path, "after")

        # The truth of the disks: the audit's lost records below broker 1's high watermark.
        lost = audit_lost(c, topic, tmp_path / "logs", old_leader=1)
        assert lost == list(range(logged[0]["lost_from"], logged[0]["lost_until"])) == list(range(12))
        # Each group's delivery logs: what it read that is gone (phantoms), and the replacements it never read.
        for d in clients:
            e, before, after = affected[f"watch-{d.name}"], read_before[d.name], read_after[d.name]
            phantoms = [o for o in before if o in lost]
            skipped = [o for o in range(min(after, default=0)) if o not in after]
            assert e["committed"] == max(before) + 1 and e["rewound"] is False, (d.name, e)
            assert list(range(*e["phantoms"])) == phantoms == before, (d.name, e, before)
            if f"watch-{d.name}" == REWOUND:  # rewound to 0: every replacement read, none skipped
                assert skipped == [] and after == list(range(15)), (d.name, after)
            elif d.name in SKIPPING:
                assert list(range(*e["skips"])) == skipped, (d.name, e, after)
                assert after == list(range(12, 15)), (d.name, after)
            else:  # it validated its committed epoch: back to the divergence point, every replacement read
                assert skipped == [] and after == list(range(15)), (d.name, after)
    finally:
        c.start_broker(1)
        c.wait_partition(topic, 0, lambda s: set(s.isr) == {1, 2}, "ISR [1, 2] again", timeout_s=120)


def test_consecutive_unclean_elections_are_each_the_audits_loss_reported_once(
    kafka_cluster: KafkaCluster, tmp_path: Path,
) -> None:
    """Replicas [1, 2, 3]: [0, 10) on all three; 2 stops, [10, 20) on 1 and 3; 3 stops, [20, 25) on 1 alone
    (all acknowledged, ISR [1]). 1 stops, 2 (holding [0, 10)) is elected UNCLEAN and takes [10, 13) in its
    epoch; 2 stops, 3 (holding [0, 20) of epoch 0, never 2's epoch) is elected UNCLEAN. Asked where 2's epoch
    ends, 3 answers 20, above the watcher's position 13: a KIP-320 consumer sees nothing (tests/real_kafka/
    test_compat_kafka.py), the watcher reports 2's records [10, 13) gone."""
    c, topic = kafka_cluster, "watch-consecutive"
    state, events = tmp_path / "state.json", tmp_path / "events.jsonl"
    c.create_topic(topic, {0: [1, 2, 3]}, {"min.insync.replicas": "1", "unclean.leader.election.enable": "false"})
    try:
        produce(c, topic, "a", 10)
        c.stop_broker(2)
        c.wait_partition(topic, 0, lambda s: s.isr == (1, 3), "ISR [1, 3]")
        produce(c, topic, "b", 10)
        c.stop_broker(3)
        c.wait_partition(topic, 0, lambda s: s.isr == (1,), "ISR [1]")
        produce(c, topic, "c", 5)
        assert run_once(c, topic, state, events) == (EXIT_CLEAN, [])

        first = unclean_to(c, topic, old=1, new=2)
        produce(c, topic, "d", 3)  # [10, 13) in 2's epoch
        lost_first = audit_lost(c, topic, tmp_path / "first", old_leader=1)
        code, lines = run_once(c, topic, state, events)
        assert (code, lost_ranges(lines)) == (EXIT_LOSS, [(10, 25, 0, first)])
        assert list(range(10, 25)) == lost_first
        assert run_once(c, topic, state, events) == (EXIT_CLEAN, lines)  # reported once
        assert json.loads(state.read_text())["partitions"] == [[topic, 0, 13, first, first, 10]]

        second = unclean_to(c, topic, old=2, new=3)
        # Written by broker 3 before its log dirs are copied: then its epoch is surely on its disk (metadata
        # from another broker may name it the leader before it made itself one, and the audit takes the
        # replica with the newest epoch as the reference).
        produce(c, topic, "e", 2)
        lost_second = audit_lost(c, topic, tmp_path / "second", old_leader=2)
        code, lines = run_once(c, topic, state, events)
        assert (code, lost_ranges(lines)) == (EXIT_LOSS, [(10, 25, 0, first), (10, 13, first, second)])
        assert list(range(10, 13)) == lost_second
        assert run_once(c, topic, state, events) == (EXIT_CLEAN, lines)  # reported once
    finally:
        for b in (1, 2, 3):
            if not c.running(b):
                c.start_broker(b)
        c.wait_partition(topic, 0, lambda s: set(s.isr) == {1, 2, 3}, "ISR [1, 2, 3] again", timeout_s=120)

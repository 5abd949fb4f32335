from __future__ import annotations

import json

import pytest

from epochguard.__main__ import main
from epochguard.storage.logdir import read_log_dir
from epochguard.types import TopicPartition


def test_simulate_prints_a_timeline_and_exits_1_on_a_violation(capsys) -> None:
    assert main(["simulate", "zombie-replica", "--protocol", "pre-kip-320"]) == 1
    out = capsys.readouterr().out
    assert "VIOLATION isr-agreement" in out and "zombie" in out


def test_simulate_exits_0_when_every_invariant_holds(capsys) -> None:
    assert main(["simulate", "zombie-replica", "--seed", "2"]) == 0
    assert "no invariant violated" in capsys.readouterr().out


def test_simulate_json(capsys) -> None:
    assert main(["simulate", "stale-metadata", "--protocol", "pre-kip-320", "--json", "--steps", "120"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert {"scenario", "seed", "protocol", "violations", "events"} <= set(doc)
    assert (doc["scenario"], doc["seed"], doc["protocol"], doc["steps"]) == ("stale-metadata", 0, "pre-kip-320", 120)
    assert {v["invariant"] for v in doc["violations"]} == {"metadata-epoch-monotonic"}
    assert all({"step", "time_ms", "kind", "node", "message"} <= set(e) for e in doc["events"])


def test_simulate_writes_kafka_log_dirs(tmp_path, capsys) -> None:
    assert main(["simulate", "unclean-election", "--log-dir", str(tmp_path)]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broker-1", "broker-2", "broker-3"]
    old, new = read_log_dir(tmp_path / "broker-1"), read_log_dir(tmp_path / "broker-2")
    assert old.node_id == 1 and new.node_id == 2
    assert old.topic_ids == new.topic_ids and set(old.topic_ids) == {"events"}
    tp = TopicPartition("events", 0)
    assert sorted(old.logs) == [TopicPartition("events", p) for p in range(3)]
    # broker 1 died with records broker 2 never got; broker 2 started epoch 1 below broker 1's end.
    assert old.logs[tp].leader_epoch_cache.entries() == [(0, 0)]
    [(e0, _), (e1, start1)] = new.logs[tp].leader_epoch_cache.entries()
    assert (e0, e1) == (0, 1) and start1 < old.logs[tp].log_end_offset


def test_simulate_refuses_a_used_log_dir(tmp_path, capsys) -> None:
    (tmp_path / "broker-1").mkdir()
    (tmp_path / "broker-1" / "something").write_text("x")
    assert main(["simulate", "leader-bounce", "--log-dir", str(tmp_path)]) == 2
    assert "not empty" in capsys.readouterr().err


@pytest.mark.no_mutants  # two runs of the same mutant compared, as in test_determinism
def test_run_scenario_can_overwrite_its_own_log_dirs(tmp_path) -> None:
    from epochguard.sim import run_scenario

    first = run_scenario("unclean-election", seed=1, log_dir=tmp_path)
    second = run_scenario("unclean-election", seed=1, log_dir=tmp_path, overwrite=True)
    assert [e.to_json() for e in first.events] == [e.to_json() for e in second.events]
    assert sorted(second.log_dirs) == [1, 2, 3] and (tmp_path / "broker-1" / "meta.properties").exists()

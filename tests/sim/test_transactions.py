"""The transactional scenario: a producer writing transactions (some aborted) through leader bounces,
a read_committed and a read_uncommitted consumer, and the checker's read-committed invariant."""

from __future__ import annotations

from epochguard.sim import invariants as inv
from epochguard.sim.cluster import Cluster, ClusterConfig
from epochguard.sim.scenarios import run_scenario
from epochguard.types import ConsumerRecord, TopicPartition

TP = TopicPartition("events", 0)


def test_read_committed_consumer_never_sees_aborted_records_and_skips_nothing_else() -> None:
    result = run_scenario("transactions", seed=0, protocol="kip-320")
    assert result.ok, "\n".join(map(str, result.violations))
    cluster = result.cluster
    assert cluster is not None
    aborted = cluster.producers[0].aborted
    assert aborted, "the scenario must abort transactions"
    read_committed = {r.value for r in result.consumed if r.consumer == "consumer-0"}
    read_uncommitted = {r.value for r in result.consumed if r.consumer == "consumer-1"}
    assert not read_committed & aborted
    assert aborted & read_uncommitted  # read_uncommitted sees aborted records
    # every committed transactional record below the last stable offset reached the read_committed consumer
    lso = cluster.brokers[cluster.acting_leader(TP)].logs[TP].last_stable_offset
    transactional = [r for r in result.produced if r.acks == -1 and r.value.startswith(b"producer-0-")]
    committed = {r.value for r in transactional if r.value not in aborted and r.offset < lso - 20}
    assert committed and committed <= read_committed
    assert any(e.kind == "txn" and e.detail["committed"] is False for e in result.events)


def test_checker_flags_an_aborted_record_delivered_to_a_read_committed_consumer() -> None:
    cluster = Cluster(ClusterConfig(), seed=1)
    checker = cluster.checker
    record = ConsumerRecord(TP.topic, 0, 4, 0, 0, b"k", b"gone", (), 0)
    checker.on_consumed("c", record, 1, read_committed=True)
    assert checker.violations == []
    checker.on_txn_aborted(TP, (b"gone",))  # the abort becomes known after the delivery
    [v] = checker.violations
    assert v.invariant == inv.READ_COMMITTED and "aborted transaction" in v.message
    checker.on_consumed("u", record, 1, read_committed=False)  # read_uncommitted may read it
    assert len(checker.violations) == 1

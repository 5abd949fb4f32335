"""Invariant-checker behaviours pinned: the unclean-election excuse needs an unclean election, the skip
excuse by a truncation reported right after the last delivery, re-reading what was delivered, and
metadata going back to epoch 0."""

from __future__ import annotations

import struct

import pytest

from epochguard._core import encode_batch
from epochguard.sim import invariants as inv
from epochguard.sim.cluster import Cluster, ClusterConfig
from epochguard.sim.controller import Election
from epochguard.types import ConsumerRecord, FetchPosition, TruncationEvent

from .checker_support import TP, record


def _real(cluster: Cluster, offset: int) -> ConsumerRecord:
    epoch, key, value = cluster.log(1, TP).records_between(offset, offset + 1)[offset]
    return ConsumerRecord(TP.topic, TP.partition, offset, 0, 0, key, value, (), epoch)


def _truncation(divergent: int | None) -> TruncationEvent:
    return TruncationEvent(TP, FetchPosition(divergent or 0, 0), divergent, 0, 1, "rewound", 0)


def test_a_log_lacking_the_epoch_without_an_unclean_election_is_flagged(cluster: Cluster) -> None:
    checker = cluster.checker
    assert all(e != 7 for e, _ in cluster.log(1, TP).leader_epoch_cache.entries())
    checker.on_consumed("c", record(0, b"phantom", epoch=7), 1)
    checker.on_fetch_served("c", TP, 1, 1)
    [v] = checker.violations
    assert v.invariant == inv.CONSUMER_CONTINUITY and "phantom" in v.message


def test_a_log_lacking_the_epoch_after_an_unclean_election_is_only_noted(cluster: Cluster) -> None:
    checker = cluster.checker
    cluster.controller.elections.append(Election(cluster.timeline.step, TP, 2, 8, clean=False))
    checker.on_consumed("c", record(0, b"phantom", epoch=7), 1)
    checker.on_fetch_served("c", TP, 1, 1)
    assert checker.violations == []
    assert any(e.kind == "note" and "cannot see" in e.message for e in cluster.timeline.events)


def test_an_unclean_election_does_not_excuse_a_log_that_has_the_epoch(cluster: Cluster) -> None:
    checker = cluster.checker
    cluster.controller.elections.append(Election(cluster.timeline.step, TP, 2, 8, clean=False))
    checker.on_consumed("c", record(0, b"phantom", epoch=0), 1)  # epoch 0 is in broker 1's log
    checker.on_fetch_served("c", TP, 1, 1)
    assert [v.invariant for v in checker.violations] == [inv.CONSUMER_CONTINUITY]


def test_a_skip_is_excused_by_a_truncation_reported_right_after_the_last_delivery(cluster: Cluster) -> None:
    checker = cluster.checker
    for o in (0, 1):
        checker.on_consumed("c", _real(cluster, o), 1)
    checker.on_truncation("c", _truncation(None))
    checker.on_consumed("c", _real(cluster, 3), 1)
    assert checker.violations == []


def test_a_truncation_reported_before_the_last_delivery_does_not_excuse_a_skip(cluster: Cluster) -> None:
    checker = cluster.checker
    checker.on_consumed("c", _real(cluster, 0), 1)
    checker.on_truncation("c", _truncation(None))
    checker.on_consumed("c", _real(cluster, 1), 1)
    checker.on_consumed("c", _real(cluster, 3), 1)
    [v] = checker.violations
    assert "skipped offsets 2..2" in v.message


def test_re_reading_delivered_offsets_without_a_truncation_is_not_a_violation(cluster: Cluster) -> None:
    checker = cluster.checker
    for o in (0, 1, 2, 3, 2, 3, 4):  # a re-fetch of 2..3 (same records), then on
        checker.on_consumed("c", _real(cluster, o), 1)
    checker.on_fetch_served("c", TP, 1, 2)
    checker.on_fetch_served("c", TP, 1, 5)
    assert checker.violations == []


def test_metadata_going_back_to_epoch_zero(cluster: Cluster) -> None:
    checker = cluster.checker
    checker.on_metadata_accepted("c", TP, 1, 0)
    checker.on_metadata_accepted("c", TP, 1, 0)
    assert checker.violations == []
    checker.on_metadata_accepted("c", TP, 2, 2)
    checker.on_metadata_accepted("c", TP, 1, 0)
    [v] = checker.violations
    assert v.invariant == inv.METADATA_EPOCH_MONOTONIC and "epoch 0 after having epoch 2" in v.message


def test_a_violation_reads_as_one_line_per_trace_entry() -> None:
    with_partition = inv.Violation(inv.ISR_AGREEMENT, 3, 150, "broker-2", "events-0", "differs", ("a", "b"))
    assert str(with_partition) == "VIOLATION isr-agreement at step 3 (150 ms) on broker-2 events-0: differs\n    a\n    b"
    without = inv.Violation(inv.CONSUMER_PROGRESS, 4, 200, "consumer-0", None, "stuck")
    assert str(without) == "VIOLATION consumer-progress at step 4 (200 ms) on consumer-0: stuck"


def test_a_violation_as_json() -> None:
    v = inv.Violation(inv.ISR_AGREEMENT, 3, 150, "broker-2", "events-0", "differs", ("a",))
    assert v.to_json() == {
        "invariant": "isr-agreement",
        "step": 3,
        "time_ms": 150,
        "node": "broker-2",
        "partition": "events-0",
        "message": "differs",
        "trace": ["a"],
    }


def test_an_isr_disagreement_shows_both_records(cluster: Cluster) -> None:
    leader_record = cluster.log(1, TP).records_between(2, 3)[2]
    follower = cluster.log(2, TP)
    follower.truncate_to(2)
    follower.append_as_leader([(b"k", b"forged")], 0)
    cluster.checker.check_step()
    [v] = cluster.checker.violations
    assert f"leader has {leader_record[2].decode()!r} (epoch {leader_record[0]})" in v.message
    assert "replica has 'forged' (epoch 0)" in v.message


def test_a_lost_acknowledged_record_says_the_leader_has_nothing_there(cluster: Cluster) -> None:
    acked = cluster.checker.acked[TP][0]
    cluster.log(1, TP).truncate_to(acked.offset)
    cluster.checker.check_step()
    [v] = [v for v in cluster.checker.violations if v.invariant == inv.ACKED_DURABLE][:1]
    assert f"at offset {acked.offset}" in v.message and "has nothing there" in v.message


# --- skips the checker excuses, and the ones it must not -------------------------------------------
def _txn(pid: int, base: int, value: bytes) -> bytes:
    return encode_batch([(b"k", value)], base_offset=base, partition_leader_epoch=0, producer_id=pid, producer_epoch=0,
                        base_sequence=0, is_transactional=True)


def _marker(pid: int, base: int, commit: bool) -> bytes:
    return encode_batch([(struct.pack(">hh", 0, 1 if commit else 0), struct.pack(">hi", 0, 0))], base_offset=base,
                        partition_leader_epoch=0, producer_id=pid, producer_epoch=0, is_transactional=True, is_control=True)


def _at(cluster: Cluster, broker: int, offset: int) -> ConsumerRecord:
    epoch, key, value = cluster.log(broker, TP).records_between(offset, offset + 1)[offset]
    return ConsumerRecord(TP.topic, TP.partition, offset, 0, 0, key, value, (), epoch)


@pytest.fixture
def interleaved(cluster: Cluster) -> Cluster:
    """Broker 2's log from offset 2: producer 8's transaction (aborted) and producer 9's (committed)
    interleaved, their markers, then a plain record: 2 txn-8, 3 txn-9, 4 ABORT(8), 5 COMMIT(9), 6 plain."""
    log = cluster.log(2, TP)
    log.truncate_to(2)
    for raw in (_txn(8, 2, b"aborted"), _txn(9, 3, b"committed"), _marker(8, 4, False), _marker(9, 5, True)):
        log.append_as_follower(raw)
    log.append_as_follower(encode_batch([(b"k", b"plain")], base_offset=6, partition_leader_epoch=0))
    return cluster


def test_read_committed_skips_over_aborted_records_and_markers_are_excused(interleaved: Cluster) -> None:
    checker = interleaved.checker
    for offset in (0, 1, 3, 6):  # 2 (aborted) and the markers at 4, 5 are not returned
        checker.on_consumed("rc", _at(interleaved, 2, offset), 2, read_committed=True)
    assert checker.violations == []


def test_read_committed_skipping_a_committed_transaction_is_flagged(interleaved: Cluster) -> None:
    checker = interleaved.checker
    for offset in (0, 1, 6):  # producer 9's committed record at 3 lies inside producer 8's aborted range
        checker.on_consumed("rc", _at(interleaved, 2, offset), 2, read_committed=True)
    [v] = checker.violations
    assert v.invariant == inv.CONSUMER_CONTINUITY and "skipped offsets 2..5" in v.message


def test_read_uncommitted_skipping_an_aborted_record_is_flagged(interleaved: Cluster) -> None:
    checker = interleaved.checker
    for offset in (0, 1, 3):
        checker.on_consumed("ru", _at(interleaved, 2, offset), 2)
    [v] = checker.violations
    assert "skipped offsets 2..2" in v.message


def test_a_skip_over_offsets_missing_from_the_log_is_flagged(cluster: Cluster) -> None:
    log = cluster.log(2, TP)
    log.truncate_to(2)
    log.append_as_follower(_marker(8, 5, False))  # offsets 2..4 are not in broker 2's log at all
    log.append_as_follower(encode_batch([(b"k", b"later")], base_offset=6, partition_leader_epoch=0))
    checker = cluster.checker
    for offset in (0, 1, 6):
        checker.on_consumed("c", _at(cluster, 2, offset), 2)
    [v] = checker.violations
    assert "skipped offsets 2..5" in v.message


def test_a_skip_served_by_a_broker_the_cluster_does_not_have_is_flagged(cluster: Cluster) -> None:
    checker = cluster.checker
    checker.on_consumed("c", _real(cluster, 0), 1)
    checker.on_consumed("c", _real(cluster, 2), 99)
    [v] = checker.violations
    assert "skipped offsets 1..1" in v.message


def test_an_abort_known_before_the_delivery_is_flagged_at_the_delivery() -> None:
    cluster = Cluster(ClusterConfig(consumers=0, monitor=False), seed=1)
    checker = cluster.checker
    checker.on_txn_aborted(TP, (b"gone",))
    checker.on_consumed("u", ConsumerRecord(TP.topic, 0, 4, 0, 0, b"k", b"gone", (), 0), 1)  # read_uncommitted may
    assert checker.violations == []
    checker.on_consumed("c", ConsumerRecord(TP.topic, 0, 4, 0, 0, b"k", b"gone", (), 0), 1, read_committed=True)
    [v] = checker.violations
    assert (v.invariant, v.node, v.partition) == (inv.READ_COMMITTED, "c", "events-0")
    assert "delivered 'gone' at offset 4, a record of an aborted transaction" in v.message


def test_an_abort_learned_after_the_delivery_names_the_consumer_partition_and_offset() -> None:
    cluster = Cluster(ClusterConfig(consumers=0, monitor=False), seed=1)
    checker = cluster.checker
    checker.on_consumed("c", ConsumerRecord(TP.topic, 0, 4, 0, 0, b"k", b"gone", (), 0), 1, read_committed=True)
    checker.on_consumed("c", ConsumerRecord(TP.topic, 0, 5, 0, 0, b"k", b"kept", (), 0), 1, read_committed=True)
    checker.on_txn_aborted(TP, (b"gone",))
    [v] = checker.violations
    assert (v.invariant, v.node, v.partition) == (inv.READ_COMMITTED, "c", "events-0")
    assert "delivered 'gone' at offset 4, a record of an aborted transaction" in v.message
    checker.on_txn_aborted(TP, (b"other",))  # the same delivery is not reported twice
    assert len(checker.violations) == 1

"""Leader side: Fetch validation (SPEC (b)), OffsetsForLeaderEpoch (c), KIP-207 ListOffsets (g),
high watermark, ISR rules (d), produce."""

from __future__ import annotations

import pytest
from protocol_support import TP, recs, state

from epochguard._core import iter_batches
from epochguard.broker.partition import Partition
from epochguard.broker.replica_manager import ReplicaManager
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    AlterPartitionResponse,
    BrokerRegistration,
    DivergingEpoch,
    FetchPartition,
    FetchRequest,
    ListOffsetsPartition,
    ListOffsetsRequest,
    OffsetForLeaderPartition,
    OffsetsForLeaderEpochRequest,
    ProducePartition,
    ProduceRequest,
)
from epochguard.storage.log import PartitionLog
from epochguard.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP


def leader(batches=((0, 4), (2, 6), (5, 2)), epoch=5, isr=(1,), replicas=(1, 2, 3), protocol="kip-320", hw=None, brokers=None):
    """Broker 1 leading TP; the log has `batches` of (epoch, count) -> cache [(0,0),(2,4),(5,10)], LEO 12."""
    log = PartitionLog(TP)
    for e, n in batches:
        log.append_as_leader(recs(n), e, timestamp_ms=1000 + 100 * e)
    p = Partition(TP, 1, log, protocol=protocol, brokers=brokers)
    p.make_leader(state(1, epoch, isr=isr, replicas=replicas), 0)
    if hw is not None:
        p.log.update_high_watermark(hw)
    return p


def fetch(p, offset, *, cle=-1, lfe=-1, replica_id=-1, replica_epoch=-1, version=17, now_ms=0):
    return p.fetch(
        FetchPartition(TP.topic, TP.partition, offset, cle, lfe),
        replica_id=replica_id,
        replica_epoch=replica_epoch,
        version=version,
        now_ms=now_ms,
    )


# --- (b) fencing matrix --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cle, expected",
    [(-1, Errors.NONE), (-7, Errors.NONE), (5, Errors.NONE), (4, Errors.FENCED_LEADER_EPOCH), (6, Errors.UNKNOWN_LEADER_EPOCH)],
)
@pytest.mark.parametrize("replica_id", [-1, 2])
def test_fetch_fencing_matrix(cle, expected, replica_id):
    p = leader(hw=12)
    assert fetch(p, 0, cle=cle, replica_id=replica_id).error_code == expected


def test_fencing_is_checked_before_the_role():
    follower = Partition(TP, 2, PartitionLog(TP))
    follower.make_follower(state(1, 5))
    assert fetch(follower, 0, cle=4, replica_id=3).error_code == Errors.FENCED_LEADER_EPOCH
    assert fetch(follower, 0, cle=6).error_code == Errors.UNKNOWN_LEADER_EPOCH
    assert fetch(follower, 0, cle=5, replica_id=3).error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert fetch(follower, 0, cle=5, version=10).error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert fetch(follower, 0, cle=5, version=11).error_code == Errors.NONE  # KIP-392: a follower serves consumers


def test_pre_kip_320_leader_ignores_current_leader_epoch():
    p = leader(protocol="pre-kip-320", hw=12)
    assert fetch(p, 0, cle=1).error_code == Errors.NONE
    assert fetch(p, 0, cle=99).error_code == Errors.NONE


def test_follower_not_in_assignment():
    p = leader(replicas=(1, 2))
    assert fetch(p, 0, cle=5, replica_id=3).error_code == Errors.UNKNOWN_LEADER_EPOCH
    assert fetch(p, 0, cle=-1, replica_id=3).error_code == Errors.NOT_LEADER_OR_FOLLOWER


# --- (b) diverging epoch ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "lfe, offset, diverging",
    [
        (2, 10, None),  # epoch 2 ends at 10: consistent
        (5, 12, None),  # the current epoch, at the LEO
        (2, 12, DivergingEpoch(2, 10)),  # follower has epoch-2 records beyond where epoch 2 ended
        (3, 11, DivergingEpoch(2, 10)),  # an epoch the leader never had
        (1, 5, DivergingEpoch(0, 4)),
        (0, 3, None),
    ],
)
def test_diverging_epoch(lfe, offset, diverging):
    p = leader(isr=(1, 2), hw=4)
    data = fetch(p, offset, cle=5, lfe=lfe, replica_id=2, now_ms=10)
    assert data.error_code == Errors.NONE
    assert data.diverging_epoch == diverging
    if diverging is not None:
        assert data.records == b""
        assert p.replicas[2].log_end_offset == -1  # follower progress not recorded
        assert p.log.high_watermark == 4
    else:
        assert p.replicas[2].log_end_offset == offset


def test_last_fetched_epoch_above_the_leaders_is_out_of_range():
    p = leader()
    assert fetch(p, 12, cle=5, lfe=6, replica_id=2).error_code == Errors.OFFSET_OUT_OF_RANGE


def test_fetch_offset_below_log_start_with_last_fetched_epoch_is_out_of_range():
    p = leader(hw=12)
    p.log.increment_log_start_offset(4)
    assert fetch(p, 2, cle=5, lfe=0, replica_id=2).error_code == Errors.OFFSET_OUT_OF_RANGE


def test_pre_kip_320_leader_never_returns_diverging_epochs():
    p = leader(protocol="pre-kip-320", isr=(1, 2))
    data = fetch(p, 11, lfe=3, replica_id=2)
    assert data.error_code == Errors.NONE and data.diverging_epoch is None
    assert [b.base_offset for b in iter_batches(data.records)] == [10]


# --- (b) read ----------------------------------------------------------------------------------------
def test_read_range_and_visibility():
    p = leader(hw=6)
    assert fetch(p, 13).error_code == Errors.OFFSET_OUT_OF_RANGE
    consumer = fetch(p, 0)
    assert consumer.high_watermark == 6
    assert [b.base_offset for b in iter_batches(consumer.records)] == [0, 4]  # below the HW only
    between = fetch(p, 8)
    assert between.error_code == Errors.NONE and between.records == b""  # HW <= offset <= LEO: empty
    at_leo = fetch(p, 12)
    assert at_leo.error_code == Errors.NONE and at_leo.records == b""
    follower = fetch(p, 4, cle=5, replica_id=2)
    assert [b.base_offset for b in iter_batches(follower.records)] == [4, 10]  # followers read to the LEO


# --- high watermark and ISR (d) ---------------------------------------------------------------------
def test_high_watermark_is_min_leo_of_isr_and_only_moves_up():
    p = leader(isr=(1, 2, 3))
    assert p.log.high_watermark == 0
    fetch(p, 12, cle=5, replica_id=2)
    assert p.log.high_watermark == 0  # replica 3 unknown yet
    fetch(p, 8, cle=5, replica_id=3)
    assert p.log.high_watermark == 8
    fetch(p, 4, cle=5, replica_id=3)  # a lower fetch offset does not move the HW back
    assert p.log.high_watermark == 8
    fetch(p, 12, cle=5, replica_id=3)
    assert p.log.high_watermark == 12


def test_isr_expansion_needs_hw_and_epoch_start_offset():
    p = leader(isr=(1,), hw=12)  # leader alone in the ISR; epoch 5 started at LEO 12
    p.append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0)  # LEO 14; HW follows (ISR = {1})
    assert p.log.high_watermark == 14 and p.leader_epoch_start_offset == 12
    fetch(p, 10, cle=5, replica_id=2)  # below HW and below the epoch start
    assert not p.isr_change_in_flight
    fetch(p, 14, cle=5, replica_id=2)
    request = p.poll_isr_change(0)
    assert request is not None and request.new_isr == (1, 2) and request.leader_epoch == 5
    assert p.maximal_isr == (1, 2) and p.isr == (1,)
    assert p.on_alter_partition_response(AlterPartitionResponse(TP.topic, 0, Errors.NONE, 1, 5, (1, 2), 1), 0)
    assert p.isr == (1, 2) and not p.isr_change_in_flight


def test_epoch_start_offset_blocks_a_follower_behind_it_even_at_hw():
    p = leader(isr=(1, 2), hw=8)  # HW 8 < epoch start 12
    fetch(p, 9, cle=5, replica_id=2)  # HW -> 9
    fetch(p, 10, cle=5, replica_id=3)  # 3 is at 10 >= HW 9 but < epoch start 12
    assert p.log.high_watermark == 9
    assert not p.is_follower_in_sync(3) and not p.isr_change_in_flight


@pytest.mark.parametrize(
    "registration, eligible",
    [
        (BrokerRegistration(2, broker_epoch=7), True),
        (BrokerRegistration(2, broker_epoch=7, fenced=True), False),
        (BrokerRegistration(2, broker_epoch=7, in_controlled_shutdown=True), False),
        (BrokerRegistration(2, broker_epoch=9), False),  # the fetch carries an older broker epoch than registered
    ],
)
def test_isr_eligibility(registration, eligible):
    brokers = {2: registration}
    p = leader(isr=(1,), hw=12, brokers=brokers)
    data = fetch(p, 12, cle=5, replica_id=2, replica_epoch=7)
    if registration.broker_epoch > 7:
        assert data.error_code == Errors.NOT_LEADER_OR_FOLLOWER  # stale broker epoch: no state update
        assert 2 not in p.replicas or p.replicas[2].log_end_offset == -1
    assert p.isr_change_in_flight is eligible


def test_unknown_fetch_broker_epoch_is_eligible():
    p = leader(isr=(1,), hw=12, brokers={2: BrokerRegistration(2, broker_epoch=7)})
    fetch(p, 12, cle=5, replica_id=2, replica_epoch=-1)
    assert p.isr_change_in_flight


def test_pre_kip_320_isr_expansion_skips_fencing_checks():
    brokers = {2: BrokerRegistration(2, broker_epoch=7, fenced=True)}
    p = leader(isr=(1,), hw=12, brokers=brokers, protocol="pre-kip-320")
    fetch(p, 12, replica_id=2, replica_epoch=3)
    assert p.isr_change_in_flight


def test_controller_refusal_reverts_to_committed_isr():
    p = leader(isr=(1,), hw=12)
    fetch(p, 12, cle=5, replica_id=2)
    assert p.maximal_isr == (1, 2)
    p.poll_isr_change(0)
    assert not p.on_alter_partition_response(AlterPartitionResponse(TP.topic, 0, Errors.INELIGIBLE_REPLICA), 0)
    assert p.isr == (1,) and p.maximal_isr == (1,)


@pytest.mark.parametrize("error", [Errors.FENCED_LEADER_EPOCH, Errors.INVALID_UPDATE_VERSION, Errors.UNKNOWN_TOPIC_OR_PARTITION])
def test_alter_partition_error_that_may_follow_an_applied_change_keeps_the_maximal_isr(error):
    """Kafka's handleAlterPartitionError: the controller may have applied the change before the answer
    was lost, so the leader keeps bounding its HW by the maximal ISR and stops resending."""
    p = leader(isr=(1,), hw=12)
    fetch(p, 12, cle=5, replica_id=2)
    request = p.poll_isr_change(0)
    assert request is not None
    assert not p.on_alter_partition_response(AlterPartitionResponse(TP.topic, 0, error), 0)
    assert p.isr == (1,) and p.maximal_isr == (1, 2) and p.isr_change_in_flight
    assert p.poll_isr_change(10 * p.alter_partition_retry_ms) is None


def test_unanswered_alter_partition_is_resent():
    p = leader(isr=(1,), hw=12)
    fetch(p, 12, cle=5, replica_id=2)
    first = p.poll_isr_change(0)
    assert first is not None and p.poll_isr_change(100) is None
    assert p.poll_isr_change(p.alter_partition_retry_ms) == first


def test_isr_shrinks_after_lag_time():
    p = leader(isr=(1, 2, 3), hw=12)
    fetch(p, 12, cle=5, replica_id=2, now_ms=29_000)
    assert p.poll_isr_change(29_000) is None
    request = p.poll_isr_change(30_001)
    assert request is not None and request.new_isr == (1, 2)
    assert p.maximal_isr == (1, 2, 3)  # a pending shrink does not count until committed


def test_make_leader_same_epoch_keeps_epoch_start_offset():
    p = leader(isr=(1,), hw=12)
    p.log.append_as_leader(recs(3), 5)
    assert not p.make_leader(state(1, 5, isr=(1, 2)), 0)
    assert p.leader_epoch_start_offset == 12 and p.isr == (1, 2)
    assert p.make_leader(state(1, 6, isr=(1,)), 0)
    assert p.leader_epoch_start_offset == 15
    assert p.log.leader_epoch_cache.entries()[-1] == (6, 15)
    assert not p.make_leader(state(1, 4), 0)  # stale


# --- (c) OffsetsForLeaderEpoch ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "requested, answer",
    [(5, (5, 12)), (2, (2, 10)), (3, (2, 10)), (0, (0, 4)), (6, (-1, -1)), (-1, (-1, -1))],
)
def test_offsets_for_leader_epoch_answers(requested, answer):
    p = leader()
    r = p.last_offset_for_leader_epoch(OffsetForLeaderPartition(TP.topic, 0, requested, 5))
    assert r.error_code == Errors.NONE and (r.leader_epoch, r.end_offset) == answer


def test_offsets_for_leader_epoch_below_the_oldest_echoes_the_request():
    p = leader(batches=((2, 4), (5, 2)))
    r = p.last_offset_for_leader_epoch(OffsetForLeaderPartition(TP.topic, 0, 1, -1))
    assert (r.leader_epoch, r.end_offset) == (1, 0)


@pytest.mark.parametrize("cle, code", [(-1, Errors.NONE), (4, Errors.FENCED_LEADER_EPOCH), (6, Errors.UNKNOWN_LEADER_EPOCH)])
def test_offsets_for_leader_epoch_fencing(cle, code):
    r = leader().last_offset_for_leader_epoch(OffsetForLeaderPartition(TP.topic, 0, 2, cle))
    assert r.error_code == code
    if code != Errors.NONE:
        assert (r.leader_epoch, r.end_offset) == (-1, -1)


def test_offsets_for_leader_epoch_needs_leadership():
    follower = Partition(TP, 2, PartitionLog(TP))
    follower.make_follower(state(1, 5))
    for cle in (-1, 5):
        r = follower.last_offset_for_leader_epoch(OffsetForLeaderPartition(TP.topic, 0, 2, cle))
        assert r.error_code == Errors.NOT_LEADER_OR_FOLLOWER


# --- (g) ListOffsets / KIP-207 -----------------------------------------------------------------------
def lagging_leader(protocol="kip-320"):
    """Took over at epoch 6 with LEO 12 while its HW was 8: lagging until the HW reaches 12."""
    p = leader(isr=(1, 2), protocol=protocol)
    p.log.update_high_watermark(8)
    p.make_leader(state(1, 6, isr=(1, 2)), 0)
    assert p.leader_epoch_start_offset == 12 and p.log.high_watermark == 8
    return p


def list_offsets(p, ts, *, replica_id=-1, version=9, cle=-1):
    return p.fetch_offset_for_timestamp(ListOffsetsPartition(TP.topic, 0, ts, cle), replica_id=replica_id, version=version)


def test_latest_while_lagging():
    p = lagging_leader()
    assert list_offsets(p, LATEST_TIMESTAMP).error_code == Errors.OFFSET_NOT_AVAILABLE
    assert list_offsets(p, LATEST_TIMESTAMP, version=4).error_code == Errors.LEADER_NOT_AVAILABLE
    replica = list_offsets(p, LATEST_TIMESTAMP, replica_id=2)
    assert (replica.error_code, replica.offset, replica.leader_epoch) == (Errors.NONE, 12, 6)  # replicas never lag
    debug = list_offsets(p, LATEST_TIMESTAMP, replica_id=-2)
    assert (debug.error_code, debug.offset) == (Errors.NONE, 12)


def test_latest_once_caught_up():
    p = lagging_leader()
    fetch(p, 12, cle=6, replica_id=2)
    assert p.log.high_watermark == 12
    r = list_offsets(p, LATEST_TIMESTAMP)
    assert (r.error_code, r.offset, r.timestamp, r.leader_epoch) == (Errors.NONE, 12, -1, 6)


def test_earliest_never_lags_and_reports_oldest_epoch():
    p = lagging_leader()
    r = list_offsets(p, EARLIEST_TIMESTAMP)
    assert (r.error_code, r.offset, r.leader_epoch) == (Errors.NONE, 0, 0)


def test_earliest_epoch_absent_when_oldest_entry_starts_after_log_start():
    log = PartitionLog(TP)
    log.append_as_leader(recs(2), 3)
    log.leader_epoch_cache.clear()
    log.leader_epoch_cache.assign(3, 1)
    p = Partition(TP, 1, log)
    p.make_leader(state(1, 3, isr=(1,)), 0)
    assert list_offsets(p, EARLIEST_TIMESTAMP).leader_epoch == -1


def test_timestamp_below_hw_is_returned_even_while_lagging():
    p = lagging_leader()
    r = list_offsets(p, 1150)  # epoch-2 records have timestamp 1200, offsets 4..9
    assert (r.error_code, r.offset, r.timestamp, r.leader_epoch) == (Errors.NONE, 4, 1200, 2)


def test_timestamp_match_at_or_above_hw():
    p = lagging_leader()
    assert list_offsets(p, 1450).error_code == Errors.OFFSET_NOT_AVAILABLE  # match at offset 10 >= HW 8
    assert list_offsets(p, 99_999).error_code == Errors.OFFSET_NOT_AVAILABLE  # no match
    assert list_offsets(p, MAX_TIMESTAMP).error_code == Errors.OFFSET_NOT_AVAILABLE
    calm = leader(isr=(1, 2))
    fetch(calm, 12, cle=5, replica_id=2)  # HW 12 = epoch start: not lagging
    calm.append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=5000)  # 12-13, above the HW
    assert calm.log.high_watermark == 12
    for ts in (4000, 99_999):
        r = calm.fetch_offset_for_timestamp(ListOffsetsPartition(TP.topic, 0, ts))
        assert (r.error_code, r.offset, r.timestamp) == (Errors.NONE, -1, -1)


def test_pre_kip_320_never_answers_offset_not_available():
    p = lagging_leader(protocol="pre-kip-320")
    r = list_offsets(p, LATEST_TIMESTAMP)
    assert (r.error_code, r.offset) == (Errors.NONE, 8)  # the dipped HW, the KIP-207 problem


def test_list_offsets_fencing_and_leadership():
    p = leader()
    assert list_offsets(p, LATEST_TIMESTAMP, cle=4).error_code == Errors.FENCED_LEADER_EPOCH
    assert list_offsets(p, LATEST_TIMESTAMP, cle=6).error_code == Errors.UNKNOWN_LEADER_EPOCH
    follower = Partition(TP, 2, PartitionLog(TP))
    follower.make_follower(state(1, 5))
    assert list_offsets(follower, LATEST_TIMESTAMP).error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert list_offsets(follower, LATEST_TIMESTAMP, replica_id=-2).error_code == Errors.NONE


# --- ReplicaManager: hosting errors, produce --------------------------------------------------------
def test_hosting_errors():
    rm = ReplicaManager(1)
    req = FetchRequest((FetchPartition("t", 0, 0),))
    assert rm.handle(9, req, 0).partitions[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    rm.apply_partition_state(state(2, 1, replicas=(2, 3)), 0)  # topic known, not hosted here
    assert rm.handle(9, req, 0).partitions[0].error_code == Errors.NOT_LEADER_OR_FOLLOWER
    rm.apply_partition_state(state(1, 2, isr=(1,), replicas=(1, 2)), 0)
    assert rm.handle(9, req, 0).partitions[0].error_code == Errors.NONE
    rm.set_log_dir_offline()
    assert rm.handle(9, req, 0).partitions[0].error_code == Errors.KAFKA_STORAGE_ERROR
    oe = rm.handle(9, OffsetsForLeaderEpochRequest((OffsetForLeaderPartition("t", 0, 1),)), 0)
    assert oe.partitions[0].error_code == Errors.KAFKA_STORAGE_ERROR
    lo = rm.handle(9, ListOffsetsRequest((ListOffsetsPartition("t", 0, -1),)), 0)
    assert lo.partitions[0].error_code == Errors.KAFKA_STORAGE_ERROR


def test_produce_acks_all_waits_for_the_isr():
    rm = ReplicaManager(1, min_insync_replicas=2)
    rm.apply_partition_state(state(1, 3, isr=(1, 2), replicas=(1, 2)), 0)
    produce = ProduceRequest((ProducePartition("t", 0, tuple(recs(3))),), acks=-1, timeout_ms=1000)
    assert rm.handle(7, produce, 0) is None  # waits for replica 2
    assert rm.poll_responses(10) == []
    rm.handle(2, FetchRequest((FetchPartition("t", 0, 3, 3),), replica_id=2), 20)
    [(node, request, response)] = rm.poll_responses(20)
    assert node == 7 and request is produce
    r = response.partitions[0]
    assert (r.error_code, r.base_offset) == (Errors.NONE, 0)
    assert next(iter(iter_batches(rm.partitions[TP].log.read(0)))).partition_leader_epoch == 3


def test_acks_all_completion_counts_the_maximal_isr():
    """Kafka's `checkEnoughReplicasReachOffset` compares min.insync.replicas with the maximal ISR: a
    write that reached the HW while replica 2's re-join is pending succeeded. Answering
    NOT_ENOUGH_REPLICAS_AFTER_APPEND would make the producer write it a second time."""
    rm = ReplicaManager(1, min_insync_replicas=3)
    rm.apply_partition_state(state(1, 3, isr=(1, 2, 3), replicas=(1, 2, 3)), 0)
    produce = ProduceRequest((ProducePartition("t", 0, tuple(recs(3))),), acks=-1, timeout_ms=1000)
    assert rm.handle(7, produce, 0) is None
    rm.apply_partition_state(state(1, 3, isr=(1, 3), replicas=(1, 2, 3), partition_epoch=1), 5)  # 2 dropped out
    rm.handle(2, FetchRequest((FetchPartition("t", 0, 3, 3),), replica_id=2), 10)  # caught up: re-join pending
    p = rm.partitions[TP]
    assert p.isr == (1, 3) and p.maximal_isr == (1, 2, 3) and p.log.high_watermark == 0
    assert rm.poll_responses(10) == []
    rm.handle(3, FetchRequest((FetchPartition("t", 0, 3, 3),), replica_id=3), 20)  # HW reaches the write
    [(_, _, response)] = rm.poll_responses(20)
    assert response.partitions[0].error_code == Errors.NONE


def test_produce_errors():
    rm = ReplicaManager(1, min_insync_replicas=2)
    rm.apply_partition_state(state(1, 3, isr=(1,), replicas=(1, 2)), 0)
    req = ProduceRequest((ProducePartition("t", 0, tuple(recs(1))),), acks=-1, timeout_ms=100)
    assert rm.handle(7, req, 0).partitions[0].error_code == Errors.NOT_ENOUGH_REPLICAS
    acks1 = ProduceRequest((ProducePartition("t", 0, tuple(recs(1))),), acks=1)
    assert rm.handle(7, acks1, 0).partitions[0].error_code == Errors.NONE
    rm.apply_partition_state(state(1, 4, isr=(1, 2), replicas=(1, 2)), 0)
    assert rm.handle(7, req, 0) is None
    [(_, _, timed_out)] = rm.poll_responses(100)
    assert timed_out.partitions[0].error_code == Errors.REQUEST_TIMED_OUT
    rm.apply_partition_state(state(2, 5, isr=(2,), replicas=(1, 2)), 0)
    assert rm.handle(7, acks1, 0).partitions[0].error_code == Errors.NOT_LEADER_OR_FOLLOWER


def test_leadership_lost_fails_pending_produce():
    rm = ReplicaManager(1)
    rm.apply_partition_state(state(1, 3, isr=(1, 2), replicas=(1, 2)), 0)
    assert rm.handle(7, ProduceRequest((ProducePartition("t", 0, tuple(recs(1))),)), 0) is None
    rm.apply_partition_state(state(2, 4, isr=(2,), replicas=(1, 2)), 5)
    [(_, _, response)] = rm.poll_responses(5)
    assert response.partitions[0].error_code == Errors.NOT_LEADER_OR_FOLLOWER


def test_empty_produce_appends_nothing():
    rm = ReplicaManager(1)
    rm.apply_partition_state(state(1, 3, isr=(1,), replicas=(1,)), 0)
    r = rm.handle(7, ProduceRequest((ProducePartition("t", 0, ()),), acks=1), 0).partitions[0]
    assert (r.error_code, r.base_offset) == (Errors.NONE, -1)
    assert rm.partitions[TP].log.log_end_offset == 0


def test_broker_epoch_reaches_partitions_and_fetches():
    rm = ReplicaManager(2)
    rm.apply_partition_state(state(1, 3, isr=(1, 2), replicas=(1, 2)), 0)
    rm.broker_epoch = 17
    assert rm.partitions[TP].broker_epoch == 17
    [(_, fetch)] = rm.poll_requests(0)
    assert fetch.replica_epoch == 17 and fetch.replica_id == 2


def test_timing_settings_reach_fetcher_and_partitions():
    rm = ReplicaManager(1, fetch_backoff_ms=20, request_timeout_ms=300, alter_partition_retry_ms=50)
    rm.apply_partition_state(state(1, 1, isr=(1,), replicas=(1, 2)), 0)
    assert (rm.fetcher.fetch_backoff_ms, rm.fetcher.request_timeout_ms) == (20, 300)
    assert rm.partitions[TP].alter_partition_retry_ms == 50

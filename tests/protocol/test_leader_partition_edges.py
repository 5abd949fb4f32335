"""Partition (Kafka's `kafka.cluster.Partition`) edges pinned through its public methods: becoming
follower (stale and same-epoch states, broker id 0), the follower state the leader keeps, ISR
eligibility by broker epoch, the AlterPartition round trip, acks=all after a shrink, and the exact
ListOffsets answers."""

from __future__ import annotations

from protocol_support import TP, recs, state

from epochguard import Partition, PartitionLog, iter_batches
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    AlterPartitionResponse,
    BrokerRegistration,
    FetchPartition,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
)
from epochguard.types import EARLIEST_TIMESTAMP, MAX_TIMESTAMP

LAG_MAX = 10_000


def leader(epoch: int = 3, isr=(1, 2), replicas=(1, 2), **kw) -> Partition:
    p = Partition(TP, 1, PartitionLog(TP), replica_lag_time_max_ms=LAG_MAX, **kw)
    p.make_leader(state(1, epoch, isr=isr, replicas=replicas), 0)
    return p


def fetch_from(p: Partition, replica: int, offset: int, now_ms: int, *, replica_epoch: int = -1, log_start: int = 0):
    return p.fetch(FetchPartition(TP.topic, TP.partition, offset, p.leader_epoch, log_start_offset=log_start),
                   replica_id=replica, replica_epoch=replica_epoch, now_ms=now_ms)


# --- becoming follower ------------------------------------------------------------------------------
def test_make_follower_ignores_a_stale_state_and_applies_a_same_epoch_one():
    p = Partition(TP, 2, PartitionLog(TP))
    assert p.make_follower(state(1, 5, isr=(1, 2))) is True
    assert p.make_follower(state(3, 4, isr=(3,), replicas=(2, 3))) is False  # an older epoch: ignored
    assert (p.leader_id, p.leader_epoch, p.isr) == (1, 5, (1, 2))
    assert p.make_follower(state(1, 5, isr=(1, 2, 3), partition_epoch=1)) is False  # same leader and epoch
    assert p.isr == (1, 2, 3) and p.partition_epoch == 1  # ...but the ISR change is applied


def test_broker_zero_is_a_leader():
    p = Partition(TP, 2, PartitionLog(TP))
    p.make_follower(state(0, 1, isr=(0, 2), replicas=(0, 2)))
    assert p.leader_id == 0
    p.make_follower(state(-1, 2, isr=(2,), replicas=(0, 2)))
    assert p.leader_id is None


# --- the leader's view of its followers --------------------------------------------------------------
def test_a_replica_added_at_the_same_epoch_gets_its_state_on_its_first_fetch():
    p = leader(replicas=(1, 2))
    p.make_leader(state(1, 3, isr=(1, 2), replicas=(1, 2, 3)), 0)  # reassignment: 3 joins, same epoch
    p.append_records_to_leader(recs(4), acks=1, min_insync_replicas=1, now_ms=0)
    assert fetch_from(p, 3, 2, 1_000, log_start=1).error_code == Errors.NONE
    r = p.replicas[3]
    assert (r.broker_id, r.log_end_offset, r.log_start_offset, r.last_fetch_leader_log_end_offset) == (3, 2, 1, 4)


def test_a_follower_never_heard_of_is_not_in_sync():
    p = leader()
    assert p.is_follower_in_sync(9) is False


def test_isr_eligibility_follows_the_registered_broker_epoch():
    registrations = {2: BrokerRegistration(2, broker_epoch=4)}
    p = leader(isr=(1,), replicas=(1, 2), brokers=registrations)
    p.replicas.clear()
    assert p.is_replica_isr_eligible(2)  # not fetched yet: nothing to hold against it
    assert fetch_from(p, 2, 0, 100, replica_epoch=4).error_code == Errors.NONE
    assert p.is_replica_isr_eligible(2)
    registrations[2] = BrokerRegistration(2, broker_epoch=5)  # re-registered since that fetch
    assert not p.is_replica_isr_eligible(2)
    fetch_from(p, 2, 0, 200, replica_epoch=5)
    assert p.is_replica_isr_eligible(2)


def test_broker_epoch_zero_is_a_real_epoch_and_can_be_stale():
    p = leader(brokers={2: BrokerRegistration(2, broker_epoch=5)})
    assert fetch_from(p, 2, 0, 0, replica_epoch=0).error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert fetch_from(p, 2, 0, 0, replica_epoch=-1).error_code == Errors.NONE  # -1: unknown, not checked


def test_no_expansion_is_proposed_while_another_isr_change_is_pending():
    p = leader(isr=(1, 2), replicas=(1, 2, 3))
    shrink = p.poll_isr_change(LAG_MAX + 1)  # 2 never fetched: dropped
    assert shrink is not None and shrink.new_isr == (1,)
    fetch_from(p, 3, 0, LAG_MAX + 2)  # 3 is in sync now, but the shrink is unanswered
    assert p.maybe_expand_isr(3, LAG_MAX + 2) is None


def test_a_follower_at_the_leaders_end_stays_in_the_isr_however_long_ago_it_caught_up():
    """`Replica.isCaughtUp`: logEndOffset == leaderEndOffset, or caught up within the lag time."""
    p = leader()
    p.append_records_to_leader(recs(3), acks=1, min_insync_replicas=1, now_ms=0)
    fetch_from(p, 2, 3, 100)
    assert p.poll_isr_change(100 + 5 * LAG_MAX) is None


def test_an_unanswered_alter_partition_is_resent_only_after_the_retry_interval():
    p = leader(alter_partition_retry_ms=5_000)
    sent = p.poll_isr_change(100_000)
    assert sent is not None
    assert p.poll_isr_change(101_000) is None
    assert p.poll_isr_change(105_000) is sent


def test_alter_partition_answers_that_change_nothing():
    p = leader()
    ok = AlterPartitionResponse(TP.topic, 0, Errors.NONE, 1, 3, (1,), 1)
    assert p.on_alter_partition_response(ok, 0) is False  # nothing pending
    request = p.poll_isr_change(LAG_MAX + 1)
    stale = AlterPartitionResponse(TP.topic, 0, Errors.NONE, 1, 2, (1,), 5)  # an older leader epoch
    assert p.on_alter_partition_response(stale, 0) is False and p.isr == (1, 2)
    request = p.poll_isr_change(LAG_MAX + 2)  # proposed afresh
    assert request is not None
    same_epoch = AlterPartitionResponse(TP.topic, 0, Errors.NONE, 1, 3, (1,), p.partition_epoch)
    assert p.on_alter_partition_response(same_epoch, 0) is True and p.isr == (1,)


def test_acks_all_fails_after_the_append_when_the_isr_shrank_below_min_insync():
    p = leader()
    code, info = p.append_records_to_leader(recs(2), acks=-1, min_insync_replicas=2, now_ms=0)
    assert code == Errors.NONE and p.check_enough_replicas_reach_offset(info.last_offset + 1, 2) is None
    shrink = p.poll_isr_change(LAG_MAX + 1)
    p.on_alter_partition_response(AlterPartitionResponse(TP.topic, 0, Errors.NONE, 1, 3, shrink.new_isr, 1), LAG_MAX + 1)
    assert p.log.high_watermark == 2  # the leader alone: the HW reaches the end
    assert p.check_enough_replicas_reach_offset(2, 2) == Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert p.check_enough_replicas_reach_offset(2, 1) == Errors.NONE


# --- produce and marker defaults ------------------------------------------------------------------------
def test_appends_are_not_transactional_and_markers_have_timestamp_zero_unless_told():
    p = leader(isr=(1,), replicas=(1,))
    p.append_records_to_leader(recs(1), acks=1, min_insync_replicas=1, now_ms=0, producer_id=4, producer_epoch=0)
    p.write_txn_marker(4, 0, commit=True, coordinator_epoch=0)
    plain, marker = iter_batches(p.log.read(0))
    assert not plain.is_transactional
    assert marker.is_control and marker.max_timestamp == 0


# --- ListOffsets answers ---------------------------------------------------------------------------------
def list_offsets(p: Partition, timestamp: int, **kw) -> ListOffsetsPartitionResponse:
    return p.fetch_offset_for_timestamp(ListOffsetsPartition(TP.topic, TP.partition, timestamp), **kw)


def test_list_offsets_answers_in_full():
    p = leader(epoch=2, isr=(1,), replicas=(1,))
    p.append_records_to_leader([(None, b"a", (), 1_000), (None, b"b", (), 5_000), (None, b"c", (), 3_000)], acks=1,
                               min_insync_replicas=1, now_ms=0)
    assert list_offsets(p, EARLIEST_TIMESTAMP) == ListOffsetsPartitionResponse(TP.topic, 0, Errors.NONE, -1, 0, 2)
    assert list_offsets(p, MAX_TIMESTAMP) == ListOffsetsPartitionResponse(TP.topic, 0, Errors.NONE, 5_000, 1, 2)
    assert list_offsets(p, 9_000) == ListOffsetsPartitionResponse(TP.topic, 0, Errors.NONE)  # nothing that late
    follower = Partition(TP, 2, PartitionLog(TP))
    follower.make_follower(state(1, 2))
    assert list_offsets(follower, 0) == ListOffsetsPartitionResponse(TP.topic, 0, Errors.NOT_LEADER_OR_FOLLOWER)


def test_no_offset_at_or_after_a_timestamp_is_answered_for_the_partition_asked():
    tp = TP._replace(partition=3)
    p = Partition(tp, 1, PartitionLog(tp))
    p.make_leader(state(1, 2, isr=(1,), replicas=(1,), tp=tp), 0)
    p.append_records_to_leader([(None, b"a", (), 1_000)], acks=1, min_insync_replicas=1, now_ms=0)
    answer = p.fetch_offset_for_timestamp(ListOffsetsPartition(tp.topic, 3, 9_000))
    assert answer == ListOffsetsPartitionResponse(tp.topic, 3, Errors.NONE, -1, -1, -1)

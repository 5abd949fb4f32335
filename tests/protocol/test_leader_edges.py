"""Leader-side behaviours pinned through the public API (each fails on a plausible wrong line):
epoch 0 is a real epoch, ISR lag accounting, StopReplica, and the leader hint of a leaderless partition."""

from __future__ import annotations

import pytest
from protocol_support import CONTROLLER, TP, recs, state

from epochguard import Partition, ReplicaManager
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    EpochEndOffset,
    FetchPartition,
    FetchRequest,
    LeaderIdAndEpoch,
    ListOffsetsPartition,
    ListOffsetsRequest,
    OffsetForLeaderPartition,
    OffsetsForLeaderEpochRequest,
    ProducePartition,
    ProduceRequest,
)
from epochguard.types import LATEST_TIMESTAMP

LAG_MAX = 30_000


def leading(epoch: int = 5, isr=(1, 2), replicas=(1, 2, 3), records: int = 10) -> ReplicaManager:
    rm = ReplicaManager(1, controller_id=CONTROLLER, replica_lag_time_max_ms=LAG_MAX)
    rm.apply_partition_state(state(1, epoch, isr=isr, replicas=replicas), 0)
    if records:
        rm.partitions[TP].append_records_to_leader(recs(records), acks=1, min_insync_replicas=1, now_ms=0)
    return rm


# --- epoch 0 is a real epoch: only -1 means "absent" ------------------------------------------------
@pytest.mark.parametrize("replica_id", [-1, 2])
def test_fetch_with_current_leader_epoch_zero_is_fenced_by_a_later_leader(replica_id):
    rm = leading(epoch=5)
    [data] = rm.handle(replica_id, FetchRequest((FetchPartition(TP.topic, TP.partition, 0, 0),), replica_id=replica_id), 0).partitions
    assert data.error_code == Errors.FENCED_LEADER_EPOCH
    [data] = rm.handle(replica_id, FetchRequest((FetchPartition(TP.topic, TP.partition, 0, -1),), replica_id=replica_id), 0).partitions
    assert data.error_code == Errors.NONE


def test_epoch_zero_is_fenced_in_offsets_for_leader_epoch_and_list_offsets():
    rm = leading(epoch=5)
    [answer] = rm.handle(-1, OffsetsForLeaderEpochRequest((OffsetForLeaderPartition(TP.topic, TP.partition, 0, 0),)), 0).partitions
    assert answer.error_code == Errors.FENCED_LEADER_EPOCH
    [answer] = rm.handle(-1, ListOffsetsRequest((ListOffsetsPartition(TP.topic, TP.partition, LATEST_TIMESTAMP, 0),)), 0).partitions
    assert answer.error_code == Errors.FENCED_LEADER_EPOCH


def test_a_leader_at_epoch_zero_serves_current_leader_epoch_zero():
    rm = leading(epoch=0)
    [data] = rm.handle(-1, FetchRequest((FetchPartition(TP.topic, TP.partition, 0, 0),)), 0).partitions
    assert data.error_code == Errors.NONE


# --- ISR lag accounting (Kafka's Replica.updateFetchStateOrThrow) ----------------------------------
def follower_fetch(p: Partition, offset: int, now_ms: int) -> None:
    data = p.fetch(FetchPartition(TP.topic, TP.partition, offset, 5, log_start_offset=0), replica_id=2, now_ms=now_ms)
    assert data.error_code == Errors.NONE


def test_a_follower_that_reached_the_previous_leader_end_is_caught_up_as_of_that_fetch():
    rm = leading(epoch=5, isr=(1, 2))
    p = rm.partitions[TP]  # LEO 10
    follower_fetch(p, 4, 20_000)  # behind: the leader's end was 10 at this fetch
    p.append_records_to_leader(recs(5), acks=1, min_insync_replicas=1, now_ms=30_000)  # LEO 15
    follower_fetch(p, 10, 40_000)  # reached the end as of its previous fetch (at 20 000), not as of now
    assert p.poll_isr_change(50_000) is None  # caught up at 20 000: 30 000 ms of lag allowed
    shrink = p.poll_isr_change(50_001)
    assert shrink is not None and shrink.new_isr == (1,)


def test_a_follower_at_the_leader_end_is_caught_up_now():
    rm = leading(epoch=5, isr=(1, 2))
    p = rm.partitions[TP]
    follower_fetch(p, 10, 40_000)
    p.append_records_to_leader(recs(5), acks=1, min_insync_replicas=1, now_ms=50_000)  # no longer at the end
    assert p.poll_isr_change(70_000) is None
    assert p.poll_isr_change(70_001) is not None


def test_a_follower_still_behind_the_previous_leader_end_is_not_caught_up():
    rm = leading(epoch=5, isr=(1, 2))
    p = rm.partitions[TP]
    follower_fetch(p, 4, 20_000)
    p.append_records_to_leader(recs(5), acks=1, min_insync_replicas=1, now_ms=30_000)
    follower_fetch(p, 9, 40_000)  # one short of the end it was shown last time
    shrink = p.poll_isr_change(LAG_MAX + 1)  # still caught up only as of becoming leader (time 0)
    assert shrink is not None and shrink.new_isr == (1,)


# --- StopReplica ----------------------------------------------------------------------------------
def test_stop_replica_stops_the_follower_fetching():
    rm = ReplicaManager(2, controller_id=CONTROLLER)
    rm.apply_partition_state(state(1, 3), 0)
    [(leader, request)] = rm.poll_requests(0)
    assert leader == 1 and isinstance(request, FetchRequest) and request.partitions[0].tp == TP
    rm.on_request_failed(1, request, 0)
    rm.stop_replica(TP)
    assert rm.poll_requests(10_000) == []
    assert TP not in rm.partitions


def test_leaving_the_assignment_stops_the_follower_fetching():
    rm = ReplicaManager(2, controller_id=CONTROLLER)
    rm.apply_partition_state(state(1, 3), 0)
    rm.apply_partition_state(state(1, 4, isr=(1, 3), replicas=(1, 3)), 0)  # reassigned away from 2
    assert rm.poll_requests(10_000) == []
    [data] = rm.handle(-1, FetchRequest((FetchPartition(TP.topic, TP.partition, 0, 4),)), 0).partitions
    assert data.error_code == Errors.NOT_LEADER_OR_FOLLOWER  # a known topic it no longer hosts


# --- the leader hint of a retriable error ---------------------------------------------------------
def test_a_leaderless_partition_hints_no_leader():
    rm = ReplicaManager(2, controller_id=CONTROLLER)
    rm.apply_partition_state(state(-1, 3, isr=(2,)), 0)  # no leader yet
    [data] = rm.handle(3, FetchRequest((FetchPartition(TP.topic, TP.partition, 0, 3),), replica_id=3), 0).partitions
    assert data.error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert data.current_leader == LeaderIdAndEpoch(-1, -1)
    [produced] = rm.handle(7, ProduceRequest((ProducePartition(TP.topic, TP.partition, tuple(recs(1))),), acks=1), 0).partitions
    assert produced.error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert produced.current_leader == LeaderIdAndEpoch(-1, -1)


def test_a_follower_hints_its_leader_and_epoch():
    rm = ReplicaManager(2, controller_id=CONTROLLER)
    rm.apply_partition_state(state(1, 3), 0)
    [data] = rm.handle(3, FetchRequest((FetchPartition(TP.topic, TP.partition, 0, 3),), replica_id=3), 0).partitions
    assert (data.error_code, data.current_leader) == (Errors.NOT_LEADER_OR_FOLLOWER, LeaderIdAndEpoch(1, 3))
    [produced] = rm.handle(7, ProduceRequest((ProducePartition(TP.topic, TP.partition, tuple(recs(1))),), acks=1), 0).partitions
    assert produced.current_leader == LeaderIdAndEpoch(1, 3)


def test_a_non_retriable_error_carries_no_hint():
    rm = leading(epoch=5)
    [data] = rm.handle(-1, FetchRequest((FetchPartition(TP.topic, TP.partition, 99, 5),)), 0).partitions
    assert data.error_code == Errors.OFFSET_OUT_OF_RANGE
    assert data.current_leader == LeaderIdAndEpoch(-1, -1)


# --- the broker's face: repr, restart, checkpoints ----------------------------------------------------
def test_partition_repr_names_its_role():
    p = leading(epoch=5, isr=(1, 2)).partitions[TP]
    assert repr(p).startswith("Partition(t-0 on 1, leader, epoch=5, isr=(1, 2), PartitionLog(")
    rm = ReplicaManager(2, controller_id=CONTROLLER)
    rm.apply_partition_state(state(1, 3), 0)
    assert repr(rm.partitions[TP]).startswith("Partition(t-0 on 2, follower of 1, epoch=3,")


def test_recover_writes_through_to_the_same_log_dir_with_the_given_settings(tmp_path):
    rm = ReplicaManager(1, controller_id=CONTROLLER, log_dir=tmp_path)
    rm.apply_partition_state(state(1, 2, isr=(1,), replicas=(1,)), 0)
    rm.partitions[TP].append_records_to_leader(recs(3), acks=1, min_insync_replicas=1, now_ms=0)
    rm.checkpoint()
    again = ReplicaManager.recover(tmp_path, controller_id=CONTROLLER, min_insync_replicas=2)
    assert (again.broker_id, again.log_dir, again.min_insync_replicas) == (1, tmp_path, 2)
    again.apply_partition_state(state(1, 3, isr=(1,), replicas=(1,)), 0)
    log = again.partitions[TP].log
    assert (log.log_end_offset, log.high_watermark) == (3, 3)
    log.append_as_leader(recs(2), 3)  # written through to the directory...
    again.checkpoint()
    third = ReplicaManager.recover(tmp_path)  # ...so a second restart sees it
    third.apply_partition_state(state(1, 4, isr=(1,), replicas=(1,)), 0)
    assert third.partitions[TP].log.log_end_offset == 5
    assert third.partitions[TP].log.leader_epoch_cache.entries()[:2] == [(2, 0), (3, 3)]


def test_checkpoint_writes_the_root_checkpoints_and_is_a_no_op_in_memory(tmp_path):
    rm = ReplicaManager(1, controller_id=CONTROLLER, log_dir=tmp_path)
    rm.apply_partition_state(state(1, 2, isr=(1,), replicas=(1,)), 0)
    rm.partitions[TP].append_records_to_leader(recs(3), acks=1, min_insync_replicas=1, now_ms=0)
    rm.checkpoint()
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n1\nt 0 3\n"
    leading().checkpoint()  # no log dir: nothing to write, no error


def test_offsets_for_leader_epoch_hosting_errors_name_their_partition():
    rm = ReplicaManager(1)
    rm.apply_partition_state(state(1, 2, isr=(1,), replicas=(1,)), 0)
    request = OffsetsForLeaderEpochRequest((OffsetForLeaderPartition(TP.topic, 3, 1), OffsetForLeaderPartition("other", 5, 1)))
    assert rm.handle(9, request, 0).partitions == (
        EpochEndOffset(TP.topic, 3, Errors.NOT_LEADER_OR_FOLLOWER, -1, -1),
        EpochEndOffset("other", 5, Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    )

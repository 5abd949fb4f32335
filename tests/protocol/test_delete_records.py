"""DeleteRecords on the leader (KIP-107; Kafka's `Partition.deleteRecordsOnLeader` and
`UnifiedLog.maybeIncrementLogStartOffset`): the log start moves up to an offset or, for -1, to the high
watermark, never past it; only the leader takes it; the followers follow from the leader's fetch
answers; a consumer below the new log start is answered OFFSET_OUT_OF_RANGE, and the epoch cache keeps
answering OffsetsForLeaderEpoch for the epochs that are left."""

from __future__ import annotations

from protocol_support import TP, Network, brokers, recs, state

from epochguard.broker.partition import DELETE_TO_HIGH_WATERMARK
from epochguard.errors import Errors
from epochguard.protocol.messages import FetchPartition, FetchRequest, OffsetForLeaderPartition


def replicated(n: int, epoch: int = 3):
    bs = brokers(2)
    for b in bs.values():
        b.apply_partition_state(state(1, epoch, isr=(1, 2), replicas=(1, 2)), 0)
    bs[1].partitions[TP].append_records_to_leader(recs(n), acks=1, min_insync_replicas=1, now_ms=0)
    Network(bs).pump()
    return bs


def test_minus_one_deletes_up_to_the_high_watermark_and_the_follower_follows():
    bs = replicated(6)
    leader = bs[1].partitions[TP]
    leader.append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0)  # not replicated yet
    assert (leader.log.high_watermark, leader.log.log_end_offset) == (6, 8)
    assert leader.delete_records_on_leader(DELETE_TO_HIGH_WATERMARK) == (Errors.NONE, 6)
    assert leader.log.log_start_offset == 6
    Network(bs).pump()
    assert bs[2].partitions[TP].log.log_start_offset == 6


def test_an_offset_inside_the_log_moves_the_start_there():
    leader = replicated(6)[1].partitions[TP]
    assert leader.delete_records_on_leader(4) == (Errors.NONE, 4)
    assert leader.delete_records_on_leader(2) == (Errors.NONE, 4)  # never moves back


def test_past_the_high_watermark_or_negative_is_out_of_range_and_changes_nothing():
    leader = replicated(6)[1].partitions[TP]
    assert leader.delete_records_on_leader(7)[0] == Errors.OFFSET_OUT_OF_RANGE
    assert leader.delete_records_on_leader(-2)[0] == Errors.OFFSET_OUT_OF_RANGE
    assert leader.log.log_start_offset == 0


def test_only_the_leader_deletes():
    follower = replicated(6)[2].partitions[TP]
    assert follower.delete_records_on_leader(DELETE_TO_HIGH_WATERMARK)[0] == Errors.NOT_LEADER_OR_FOLLOWER
    assert follower.log.log_start_offset == 0


def test_a_consumer_below_the_new_start_is_out_of_range_and_validation_still_answers():
    bs = replicated(6, epoch=3)
    leader = bs[1].partitions[TP]
    leader.delete_records_on_leader(DELETE_TO_HIGH_WATERMARK)
    [p] = bs[1].handle(-1, FetchRequest((FetchPartition(TP.topic, TP.partition, 4, 3),)), 0).partitions
    assert p.error_code == Errors.OFFSET_OUT_OF_RANGE
    assert (p.high_watermark, p.log_start_offset) == (-1, -1)  # ReplicaManager's UnknownOffset with an error
    # Epoch 3 still holds the log start: its end is the log end, at or above any position below it.
    answer = leader.last_offset_for_leader_epoch(OffsetForLeaderPartition(TP.topic, TP.partition, 3, 3))
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (Errors.NONE, 3, 6)

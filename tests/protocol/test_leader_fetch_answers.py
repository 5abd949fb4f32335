"""What a leader's `Partition.fetch` answers (Kafka's `Partition.fetchRecords` and
`ReplicaManager.readFromLog`), pinned through the public method: errors name the partition asked, and
broker 0 is a follower like any other (a replica id >= 0, `FetchRequest.isValidBrokerId`)."""

from __future__ import annotations

import pytest
from protocol_support import recs, state

from epochguard import Partition, PartitionLog
from epochguard.errors import Errors
from epochguard.protocol.messages import DivergingEpoch, FetchPartition, FetchPartitionData, LeaderIdAndEpoch
from epochguard.types import TopicPartition

TP3 = TopicPartition("orders", 3)


def leader_of(tp: TopicPartition, *, isr=(1, 2), replicas=(1, 2), epoch: int = 5) -> Partition:
    p = Partition(tp, 1, PartitionLog(tp))
    p.make_leader(state(1, epoch, isr=isr, replicas=replicas, tp=tp), 0)
    return p


@pytest.mark.parametrize(
    ("current_epoch", "replica_id", "error"),
    [(4, -1, Errors.FENCED_LEADER_EPOCH), (6, -1, Errors.UNKNOWN_LEADER_EPOCH), (5, 9, Errors.UNKNOWN_LEADER_EPOCH)],
)
def test_an_error_answer_names_the_partition_asked(current_epoch, replica_id, error):
    p = leader_of(TP3)
    answer = p.fetch(FetchPartition(TP3.topic, 3, 0, current_epoch), replica_id=replica_id)
    assert (answer.topic, answer.partition_index, answer.error_code) == ("orders", 3, error)
    assert answer.records == b""


def test_a_retriable_error_answer_carries_the_leader_hint():
    p = leader_of(TP3)
    answer = p.fetch(FetchPartition(TP3.topic, 3, 0, 6))
    assert answer.current_leader == LeaderIdAndEpoch(1, 5)


def test_broker_zero_fetches_as_a_follower():
    """Replica 0 reads up to the log end (not the HW), and its fetches move its follower state and,
    as an ISR member, the HW."""
    p = leader_of(TP3, isr=(0, 1), replicas=(0, 1))
    p.append_records_to_leader(recs(3), acks=1, min_insync_replicas=1, now_ms=0)
    assert p.log.high_watermark == 0  # replica 0 has not fetched yet
    assert p.fetch(FetchPartition(TP3.topic, 3, 0, 5)).records == b""  # a consumer reads below the HW
    follower = p.fetch(FetchPartition(TP3.topic, 3, 0, 5), replica_id=0, now_ms=10)
    assert follower.error_code == Errors.NONE and follower.records != b""
    p.fetch(FetchPartition(TP3.topic, 3, 3, 5), replica_id=0, now_ms=20)
    assert (p.replicas[0].log_end_offset, p.log.high_watermark) == (3, 3)


def test_broker_zero_outside_the_assignment_is_refused_as_a_follower():
    p = leader_of(TP3, isr=(1, 2), replicas=(1, 2))
    answer = p.fetch(FetchPartition(TP3.topic, 3, 0, 5), replica_id=0)
    assert answer.error_code == Errors.UNKNOWN_LEADER_EPOCH  # a follower the leader does not know


def follower_fetch(p: Partition, offset: int, last_fetched_epoch: int):
    return p.fetch(FetchPartition(p.tp.topic, p.tp.partition, offset, p.leader_epoch, last_fetched_epoch),
                   replica_id=2, now_ms=10)


def test_a_diverging_epoch_answer_in_full():
    """No records, the partition asked, and the leader's HW, LSO and log start with the diverging epoch
    (`FetchResponseData.PartitionData` as `Partition.fetchRecords` fills it when the epochs diverge)."""
    p = leader_of(TP3, isr=(1,), replicas=(1, 2), epoch=2)
    p.append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0)
    p.make_leader(state(1, 5, isr=(1,), replicas=(1, 2), tp=TP3), 0)
    p.append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0)
    assert p.log.increment_log_start_offset(1)
    answer = follower_fetch(p, 3, 2)  # epoch 2 ended at 2 here
    assert answer == FetchPartitionData("orders", 3, Errors.NONE, high_watermark=4, last_stable_offset=4,
                                        log_start_offset=1, diverging_epoch=DivergingEpoch(2, 2))


def test_a_follower_fetch_exactly_at_the_log_start_is_in_range():
    """`fetchOffset < logStartOffset` is out of range; at the log start (moved by DeleteRecords) a follower
    with a matching last fetched epoch gets records."""
    p = leader_of(TP3, isr=(1,), replicas=(1, 2))
    p.append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0)
    p.append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0)
    assert p.log.increment_log_start_offset(2)
    answer = follower_fetch(p, 2, 5)
    assert answer.error_code == Errors.NONE and answer.diverging_epoch is None and answer.records != b""
    assert follower_fetch(p, 1, 5).error_code == Errors.OFFSET_OUT_OF_RANGE


def test_a_records_answer_in_full():
    """The partition asked, the leader's HW, LSO and log start (the follower adopts the latter), and the
    records from the fetch offset; no aborted-transaction list outside read_committed."""
    p = leader_of(TP3, isr=(1,), replicas=(1, 2))
    p.append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0)
    p.append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0)
    assert p.log.increment_log_start_offset(1)
    answer = follower_fetch(p, 2, 5)
    assert answer == FetchPartitionData("orders", 3, Errors.NONE, high_watermark=4, last_stable_offset=4,
                                        log_start_offset=1, records=p.log.read(2))


@pytest.mark.parametrize(("current_epoch", "error"), [(0, Errors.UNKNOWN_LEADER_EPOCH), (-1, Errors.NOT_LEADER_OR_FOLLOWER)])
def test_a_replica_outside_the_assignment_at_epoch_zero_is_told_the_epoch_is_unknown(current_epoch, error):
    """Epoch 0 is a real epoch: an unknown follower that names it may just be ahead of this leader's
    assignment (UNKNOWN_LEADER_EPOCH, retriable); one that names none is not a follower here."""
    p = leader_of(TP3, epoch=0)
    answer = p.fetch(FetchPartition(TP3.topic, 3, 0, current_epoch), replica_id=9)
    assert answer.error_code == error

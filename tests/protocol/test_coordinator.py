"""Committed offsets keep their leader epoch from OffsetCommit v6 / OffsetFetch v5 on."""

from epochguard.broker.group.coordinator import GroupCoordinator
from epochguard.errors import Errors
from epochguard.protocol.messages import OffsetCommitPartition, OffsetCommitRequest, OffsetFetchRequest
from epochguard.types import TopicPartition

TP = TopicPartition("t", 0)


def test_commit_and_fetch_with_epoch():
    gc = GroupCoordinator()
    r = gc.handle(0, OffsetCommitRequest("g", (OffsetCommitPartition("t", 0, 42, 7, "meta"),)), 0)
    assert r.partitions[0].error_code == Errors.NONE
    [p] = gc.handle(0, OffsetFetchRequest("g", (TP, TopicPartition("t", 1))), 0).partitions[:1]
    assert (p.committed_offset, p.committed_leader_epoch, p.metadata) == (42, 7, "meta")
    missing = gc.fetch(OffsetFetchRequest("g", (TopicPartition("t", 1),))).partitions[0]
    assert (missing.committed_offset, missing.committed_leader_epoch) == (-1, -1)
    assert gc.fetch(OffsetFetchRequest("other")).partitions == ()


def test_old_versions_carry_no_epoch():
    gc = GroupCoordinator()
    gc.commit(OffsetCommitRequest("g", (OffsetCommitPartition("t", 0, 5, 3),), version=5))
    assert gc.fetch(OffsetFetchRequest("g")).partitions[0].committed_leader_epoch == -1
    gc.commit(OffsetCommitRequest("g", (OffsetCommitPartition("t", 0, 6, 3),)))
    assert gc.fetch(OffsetFetchRequest("g", version=4)).partitions[0].committed_leader_epoch == -1
    assert gc.fetch(OffsetFetchRequest("g")).partitions[0].committed_leader_epoch == 3


def test_negative_offset_rejected():
    gc = GroupCoordinator()
    r = gc.commit(OffsetCommitRequest("g", (OffsetCommitPartition("t", 0, -1),)))
    assert r.partitions[0].error_code == Errors.OFFSET_OUT_OF_RANGE


def test_an_offset_fetch_answer_names_its_group():
    """OffsetFetch v8+ answers per group (KIP-709): Kafka's Java consumer looks its own group up by id in the
    answer and throws `IllegalArgumentException: Group g not found in the response` when it is not there."""
    gc = GroupCoordinator()
    gc.commit(OffsetCommitRequest("g", (OffsetCommitPartition("t", 0, 5, 3),)))
    assert gc.fetch(OffsetFetchRequest("g", version=8)).group_id == "g"
    assert gc.fetch(OffsetFetchRequest("other", version=8)).group_id == "other"

"""GroupCoordinator behaviours pinned: offset 0 is a real commit, and which versions carry the
committed leader epoch (OffsetCommit v6+, OffsetFetch v5+)."""

from __future__ import annotations

import pytest

from epochguard.broker.group.coordinator import GroupCoordinator
from epochguard.errors import Errors
from epochguard.protocol.messages import FetchRequest, OffsetCommitPartition, OffsetCommitRequest, OffsetFetchRequest
from epochguard.types import TopicPartition

TP = TopicPartition("t", 0)


def test_committing_offset_zero():
    gc = GroupCoordinator()
    [answer] = gc.commit(OffsetCommitRequest("g", (OffsetCommitPartition("t", 0, 0, 2, "start"),))).partitions
    assert answer.error_code == Errors.NONE
    [p] = gc.fetch(OffsetFetchRequest("g", (TP,))).partitions
    assert (p.committed_offset, p.committed_leader_epoch, p.metadata) == (0, 2, "start")


@pytest.mark.parametrize("version, stored", [(5, -1), (6, 4), (9, 4)])
def test_offset_commit_carries_the_leader_epoch_from_v6(version, stored):
    gc = GroupCoordinator()
    gc.commit(OffsetCommitRequest("g", (OffsetCommitPartition("t", 0, 10, 4),), version=version))
    [p] = gc.fetch(OffsetFetchRequest("g", (TP,))).partitions
    assert (p.committed_offset, p.committed_leader_epoch) == (10, stored)


@pytest.mark.parametrize("version, returned", [(4, -1), (5, 4), (8, 4)])
def test_offset_fetch_returns_the_leader_epoch_from_v5(version, returned):
    gc = GroupCoordinator()
    gc.commit(OffsetCommitRequest("g", (OffsetCommitPartition("t", 0, 10, 4),)))
    response = gc.fetch(OffsetFetchRequest("g", (TP,), version=version))
    assert response.version == version
    [p] = response.partitions
    assert (p.committed_offset, p.committed_leader_epoch) == (10, returned)


def test_a_refused_commit_names_its_partition_and_does_not_stop_the_others():
    gc = GroupCoordinator()
    request = OffsetCommitRequest("g", (OffsetCommitPartition("t", 3, -5), OffsetCommitPartition("t", 4, 8)))
    refused, accepted = gc.commit(request).partitions
    assert (refused.topic, refused.partition_index, refused.error_code) == ("t", 3, Errors.OFFSET_OUT_OF_RANGE)
    assert (accepted.topic, accepted.partition_index, accepted.error_code) == ("t", 4, Errors.NONE)
    [p] = gc.fetch(OffsetFetchRequest("g")).partitions
    assert (p.partition_index, p.committed_offset) == (4, 8)


def test_a_partition_with_nothing_committed_does_not_stop_the_others():
    gc = GroupCoordinator()
    gc.commit(OffsetCommitRequest("g", (OffsetCommitPartition("t", 1, 9),)))
    missing, found = gc.fetch(OffsetFetchRequest("g", (TP, TopicPartition("t", 1)))).partitions
    assert (missing.partition_index, missing.committed_offset) == (0, -1)
    assert (found.partition_index, found.committed_offset) == (1, 9)


def test_a_request_it_does_not_serve_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match=r"^a group coordinator does not answer FetchRequest$"):
        GroupCoordinator().handle(0, FetchRequest(()), 0)

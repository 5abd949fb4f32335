"""GroupCoordinator behaviours pinned: offset 0 is a real commit, and which versions carry the
committed leader epoch (OffsetCommit v6+, OffsetFetch v5+)."""

from __future__ import annotations

import pytest

from epochguard.coordinator import GroupCoordinator
from epochguard.errors import Errors
from epochguard.messages import OffsetCommitPartition, OffsetCommitRequest, OffsetFetchRequest
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

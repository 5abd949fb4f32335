"""What the group coordinator answers for a whole commit it refuses (Kafka's `GroupMetadataManager`
answering every partition of a refused OffsetCommit with the group error), and the member id it makes up
for a client that sent no client id."""

from __future__ import annotations

from epochguard.broker.group.coordinator import GroupCoordinator
from epochguard.errors import Errors
from epochguard.protocol.messages import JoinGroupProtocol, JoinGroupRequest, OffsetCommitPartition, OffsetCommitRequest


def test_a_refused_commit_answers_every_partition_by_name_with_the_group_error():
    co = GroupCoordinator()
    parts = (OffsetCommitPartition("t", 0, 5), OffsetCommitPartition("t", 3, 7), OffsetCommitPartition("u", 1, 9))
    answer = co.handle(0, OffsetCommitRequest("g", parts, generation_id_or_member_epoch=2, member_id="m"), 0)
    assert [(p.topic, p.partition_index, p.error_code) for p in answer.partitions] == [
        ("t", 0, Errors.ILLEGAL_GENERATION), ("t", 3, Errors.ILLEGAL_GENERATION), ("u", 1, Errors.ILLEGAL_GENERATION)
    ]
    assert co.offsets == {}


def test_a_member_id_without_a_client_id_is_made_from_member():
    co = GroupCoordinator()
    first = JoinGroupRequest("g", 10_000, protocols=(JoinGroupProtocol("range"),), rebalance_timeout_ms=30_000)
    answer = co.handle(0, first, 0)
    assert (answer.error_code, answer.member_id) == (Errors.MEMBER_ID_REQUIRED, "member-1")

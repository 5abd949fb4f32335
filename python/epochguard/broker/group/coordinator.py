"""Committed offsets of consumer groups, sans-IO: OffsetCommit and OffsetFetch answered from memory.

Mirrors the offset-storage part of Kafka's `GroupCoordinator` / `GroupMetadataManager` (the
`__consumer_offsets` topic without its log): a commit stores offset, metadata and committed leader epoch
per group and partition, and OffsetFetch returns them (-1/-1 where nothing is committed). Membership of
the classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) is `epochguard.broker.group.classic_group`;
a commit into a group with members must come from a member of its current generation, as in Kafka; a
simple commit (generation -1, no member id) into an empty group is always taken. A negative offset,
which `OffsetAndMetadata` cannot hold, is refused with OFFSET_OUT_OF_RANGE.

TxnOffsetCommit stages offsets per producer (`pendingTransactionalOffsetCommits` of Kafka's
`GroupMetadata`), checked as `doTxnCommitOffsets` does (a member id the group does not know, or a
generation that is not the group's, is refused); `complete_txn` applies them when the transaction's
COMMIT marker is written and drops them on ABORT (`handleTxnCompletion`).
"""

from __future__ import annotations

from typing import Any

from epochguard.broker.group.classic_group import ClassicGroups
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchPartitionResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Request,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnPartitionResult,
)
from epochguard.types import NO_EPOCH, OffsetAndMetadata, TopicPartition, epoch_or_sentinel

__all__ = ["GroupCoordinator"]

_COMMITTED_EPOCH_FETCH_VERSION = 5
_COMMITTED_EPOCH_COMMIT_VERSION = 6


_MEMBERSHIP = (JoinGroupRequest, SyncGroupRequest, HeartbeatRequest, LeaveGroupRequest)


class GroupCoordinator:
    """Offsets and classic-group membership. A JoinGroup or SyncGroup may be answered later: `handle`
    then returns None and the answer comes through `groups.on_delayed_response`; `poll` runs timers."""

    def __init__(self, initial_rebalance_delay_ms: int = 0) -> None:
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self.groups = ClassicGroups(initial_rebalance_delay_ms)
        # (group, producer id) -> offsets committed inside that producer's open transaction
        self.pending_txn_offsets: dict[tuple[str, int], dict[TopicPartition, OffsetAndMetadata]] = {}

    def handle(self, node_id: int, request: Request, now_ms: int, client_id: str = "") -> Any:
        if isinstance(request, OffsetCommitRequest):
            return self.commit(request)
        if isinstance(request, OffsetFetchRequest):
            return self.fetch(request)
        if isinstance(request, TxnOffsetCommitRequest):
            return self.txn_commit(request)
        if isinstance(request, _MEMBERSHIP):
            return self.groups.handle(request, now_ms, client_id)
        raise TypeError(f"a group coordinator does not answer {type(request).__name__}")

    def poll(self, now_ms: int) -> None:
        self.groups.poll(now_ms)

    def commit(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        refused = self.groups.commit_error(request.group_id, request.generation_id_or_member_epoch, request.member_id)
        if refused != Errors.NONE:
            return OffsetCommitResponse(tuple(
                OffsetCommitPartitionResponse(p.topic, p.partition_index, refused) for p in request.partitions
            ))
        group = self.offsets.setdefault(request.group_id, {})
        out = []
        for p in request.partitions:
            if p.committed_offset < 0:
                out.append(OffsetCommitPartitionResponse(p.topic, p.partition_index, Errors.OFFSET_OUT_OF_RANGE))
                continue
            epoch = p.committed_leader_epoch if request.version >= _COMMITTED_EPOCH_COMMIT_VERSION else NO_EPOCH
            group[p.tp] = OffsetAndMetadata(p.committed_offset, p.committed_metadata, epoch)
            out.append(OffsetCommitPartitionResponse(p.topic, p.partition_index))
        return OffsetCommitResponse(tuple(out))

    def txn_commit(self, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
        """Offsets staged until the producer's transaction ends (`complete_txn`)."""
        group = self.groups.groups.get(request.group_id)
        refused = Errors.NONE
        if group is not None and request.member_id and request.member_id not in group.members:
            refused = Errors.UNKNOWN_MEMBER_ID
        elif group is not None and request.generation_id >= 0 and request.generation_id != group.generation_id:
            refused = Errors.ILLEGAL_GENERATION
        pending = self.pending_txn_offsets.setdefault((request.group_id, request.producer_id), {})
        out = []
        for p in request.partitions:
            error = refused
            if error == Errors.NONE and p.committed_offset < 0:
                error = Errors.OFFSET_OUT_OF_RANGE
            if error == Errors.NONE:
                epoch = p.committed_leader_epoch if request.version >= 2 else NO_EPOCH  # v2: committed epoch
                pending[p.tp] = OffsetAndMetadata(p.committed_offset, p.committed_metadata, epoch)
            out.append(TxnPartitionResult(p.topic, p.partition_index, error))
        return TxnOffsetCommitResponse(tuple(out))

    def complete_txn(self, producer_id: int, group_ids: frozenset[str], committed: bool) -> None:
        """The transaction's marker is written: its staged offsets become the groups' (COMMIT) or go."""
        for group_id in group_ids:
            pending = self.pending_txn_offsets.pop((group_id, producer_id), {})
            if committed:
                self.offsets.setdefault(group_id, {}).update(pending)

    def fetch(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        group = self.offsets.get(request.group_id, {})
        wanted = sorted(group) if request.partitions is None else request.partitions
        out = []
        for tp in wanted:
            committed = group.get(tp)
            if committed is None:
                out.append(OffsetFetchPartitionResponse(tp.topic, tp.partition))
                continue
            with_epoch = request.version >= _COMMITTED_EPOCH_FETCH_VERSION
            epoch = epoch_or_sentinel(committed.leader_epoch) if with_epoch else NO_EPOCH
            out.append(
                OffsetFetchPartitionResponse(tp.topic, tp.partition, committed.offset, epoch, committed.metadata)
            )
        # v8+ answers per group (KIP-709): a client finds its own by id (Java: "Group g not found in the response")
        return OffsetFetchResponse(tuple(out), version=request.version, group_id=request.group_id)

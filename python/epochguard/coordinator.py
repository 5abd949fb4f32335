"""Committed offsets of consumer groups, sans-IO: OffsetCommit and OffsetFetch answered from memory.

Mirrors the offset-storage part of Kafka's `GroupCoordinator` / `GroupMetadataManager` (the
`__consumer_offsets` topic without its log): a commit stores offset, metadata and committed leader epoch
per group and partition, and OffsetFetch returns them (-1/-1 where nothing is committed). Group
membership and generations are out of scope: every commit is accepted (except a negative offset, which
`OffsetAndMetadata` cannot hold: refused with OFFSET_OUT_OF_RANGE).
"""

from __future__ import annotations

from epochguard.errors import Errors
from epochguard.messages import (
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchPartitionResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Request,
)
from epochguard.types import NO_EPOCH, OffsetAndMetadata, TopicPartition, epoch_or_sentinel

__all__ = ["GroupCoordinator"]

_COMMITTED_EPOCH_FETCH_VERSION = 5
_COMMITTED_EPOCH_COMMIT_VERSION = 6


class GroupCoordinator:
    def __init__(self) -> None:
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}

    def handle(self, node_id: int, request: Request, now_ms: int) -> OffsetCommitResponse | OffsetFetchResponse:
        if isinstance(request, OffsetCommitRequest):
            return self.commit(request)
        if isinstance(request, OffsetFetchRequest):
            return self.fetch(request)
        raise TypeError(f"a group coordinator does not answer {type(request).__name__}")

    def commit(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
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

    def fetch(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        group = self.offsets.get(request.group_id, {})
        wanted = sorted(group) if request.partitions is None else request.partitions
        out = []
        for tp in wanted:
            committed = group.get(tp)
            if committed is None:
                out.append(OffsetFetchPartitionResponse(tp.topic, tp.partition))
                continue
            epoch = epoch_or_sentinel(committed.leader_epoch) if request.version >= _COMMITTED_EPOCH_FETCH_VERSION else NO_EPOCH
            out.append(OffsetFetchPartitionResponse(tp.topic, tp.partition, committed.offset, epoch, committed.metadata))
        return OffsetFetchResponse(tuple(out), version=request.version)

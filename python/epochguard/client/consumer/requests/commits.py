"""Committed offsets: OffsetFetch for partitions without a position, OffsetCommit for the
application's commits (the offset part of Kafka's `CommitRequestManager` / `ConsumerCoordinator`).

A committed offset carries its leader epoch (OffsetFetch v5+): the position is set unvalidated with
it, after bumping the last-seen epoch (so metadata older than the commit is not trusted), and is
validated before fetching. Without a group or without a committed offset, the reset policy decides.
A failed commit is queued again. A member of a group commits with its generation and member id
(`generation`, from the group membership), a simple consumer with -1 and none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from epochguard.client.consumer.requests.base import (
    ClientRequest,
    ClientResponse,
    ConsumerContext,
    RequestManager,
)
from epochguard.client.consumer.subscription import FetchState
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from epochguard.types import (
    NO_EPOCH,
    FetchPosition,
    OffsetAndMetadata,
    ResetReason,
    TopicPartition,
    epoch_or_none,
    epoch_or_sentinel,
)

__all__ = ["CommitManager"]


def _committed(p: OffsetCommitPartition) -> OffsetAndMetadata:
    """The offset a commit request carries, as the application handed it in."""
    return OffsetAndMetadata(p.committed_offset, p.committed_metadata, p.committed_leader_epoch)


class CommitManager(RequestManager[tuple[TopicPartition, ...]]):
    def __init__(
        self,
        ctx: ConsumerContext,
        group_id: str | None,
        coordinator_id: int | None,
        reset_or_raise: Callable[[TopicPartition, ResetReason, int], None],
        generation: Callable[[], tuple[int, str]] = lambda: (-1, ""),
    ) -> None:
        super().__init__(ctx)
        self.group_id = group_id
        self._generation = generation  # (generation id, member id) of a group member's commits
        self.coordinator_id = coordinator_id
        self._reset_or_raise = reset_or_raise
        self._pending: list[dict[TopicPartition, OffsetAndMetadata]] = []

    @property
    def has_group(self) -> bool:
        return self.group_id is not None and self.coordinator_id is not None

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        if offsets:
            self._pending.append(dict(offsets))

    def _fetching(self) -> set[TopicPartition]:
        return {tp for tps in self._sent_contexts() for tp in tps}

    def _waiting(self, now_ms: int | None) -> list[TopicPartition]:
        fetching = self._fetching()
        return [
            tp for tp, s in self.ctx.subscriptions.items()
            if s.state == FetchState.INITIALIZING
            and tp not in fetching
            and (now_ms is None or now_ms >= s.next_retry_ms)
        ]

    def poll(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        waiting = self._waiting(now_ms)
        group, coordinator = self.group_id, self.coordinator_id
        if group is None or coordinator is None:
            # No committed offsets to read; nothing is ever pending either (`Consumer.commit` refuses).
            for tp in waiting:
                self._reset_or_raise(tp, "no_position", now_ms)
            return []
        out: list[tuple[int, ClientRequest]] = []
        if waiting:
            request = OffsetFetchRequest(group, tuple(sorted(waiting)))
            out.append(self._send(coordinator, request, now_ms, tuple(waiting)))
        for offsets in self._pending:
            parts = tuple(
                OffsetCommitPartition(
                    tp.topic, tp.partition, om.offset,
                    epoch_or_sentinel(om.leader_epoch) if self.ctx.kip320 else NO_EPOCH,
                    om.metadata,
                )
                for tp, om in sorted(offsets.items())
            )
            generation, member_id = self._generation()
            out.append(self._send(coordinator, OffsetCommitRequest(group, parts, generation, member_id), now_ms, ()))
        self._pending = []
        return out

    def due_ms(self) -> int | None:
        times = [self.ctx.subscriptions.state(tp).next_retry_ms for tp in self._waiting(None)]
        if self._pending:  # only ever queued with a group (`Consumer.commit` refuses without one)
            times.append(0)
        return min(times, default=None)

    def failed(self, node_id: int, request: ClientRequest, context: tuple[TopicPartition, ...], now_ms: int) -> None:
        if isinstance(request, OffsetCommitRequest):
            self._pending.append({p.tp: _committed(p) for p in request.partitions})
            return
        self.ctx.subscriptions.request_failed(context, self.ctx.backoff(now_ms))
        self.ctx.metadata.request_update()

    def handle(
        self,
        node_id: int,
        request: ClientRequest,
        context: tuple[TopicPartition, ...],
        response: ClientResponse,
        now_ms: int,
    ) -> None:
        if isinstance(response, OffsetFetchResponse):
            self._on_committed(response, now_ms)
        elif isinstance(response, OffsetCommitResponse) and isinstance(request, OffsetCommitRequest):
            sent = {p.tp: p for p in request.partitions}
            for answer in response.partitions:
                p = sent.get(answer.tp)
                if p is not None and answer.error_code == Errors.NONE:
                    self.ctx.committed[answer.tp] = _committed(p)

    def _on_committed(self, response: OffsetFetchResponse, now_ms: int) -> None:
        for answer in response.partitions:
            tp = answer.tp
            s = self.ctx.subscriptions.get(tp)
            if s is None or s.state != FetchState.INITIALIZING:
                continue
            if answer.error_code != Errors.NONE:
                s.next_retry_ms = self.ctx.backoff(now_ms)
                continue
            if answer.committed_offset < 0:
                self._reset_or_raise(tp, "no_position", now_ms)
                continue
            epoch = epoch_or_none(answer.committed_leader_epoch) if response.version >= 5 and self.ctx.kip320 else None
            self.ctx.committed[tp] = OffsetAndMetadata(answer.committed_offset, answer.metadata, epoch)
            if epoch is not None:
                self.ctx.metadata.update_last_seen_epoch_if_newer(tp, epoch)  # bump first, then read the leader
            s.seek_unvalidated(FetchPosition(answer.committed_offset, epoch, self.ctx.metadata.current_leader(tp)))
            s.restart_history(self.ctx.track_consumed_epochs)

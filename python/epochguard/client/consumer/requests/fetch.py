"""Fetch requests and their answers (Kafka's `FetchRequestManager` / `AbstractFetch` and the error
handling of `FetchCollector.handleInitializeErrors`).

One fetch per node at a time, for fetchable partitions with nothing buffered, sent to the preferred
read replica (KIP-392) or the leader, with the position's leader epoch (`CurrentLeaderEpoch`, KIP-320;
none pre-KIP-320). Answers for a position that moved meanwhile are dropped.

Beyond Kafka, `prefetch` (the context's; 0, Kafka's rule, by default; the network client's 1, as
librdkafka keeps fetching into its queue): a partition with up to that many completed fetches buffered,
each continuing the last, is fetched on from the end of the last, so the next answer travels while the
application has not yet taken the buffered one. Memory stays bounded: at most prefetch + 1 answers of
`max_partition_fetch_bytes` a partition. The buffered fetches are handed out in order, each only if
it continues the position the one before left (a seek, reset or leader change drops the whole chain,
as it drops one fetch). An error answer to a fetch ahead of the buffer is dropped after the back-off:
the partition is fetched again from its own position once the buffer is taken, and errors are handled
there. A partition's `fetch_until` (beyond Kafka, set by a reader of a planned range) stops its fetches,
prefetches included, at that offset. FENCED_LEADER_EPOCH,
NOT_LEADER_OR_FOLLOWER and the like refresh metadata (or follow the KIP-951 leader hint);
UNKNOWN_LEADER_EPOCH just retries; OFFSET_OUT_OF_RANGE from a read replica sends the consumer back to
the leader, from the leader it resets by policy or, under policy none, is buffered for `poll()` to raise.

Beyond Kafka's consumer, under the context's `send_last_fetched_epoch` (a follower's rule, KIP-595's
truncate-on-fetch, for a leader with Fetch v12+): each partition carries its position's offset epoch as
LastFetchedEpoch, and a DivergingEpoch answer goes to validation as if it were the OffsetsForLeaderEpoch
answer for that epoch (Kafka's `ReplicaFetcherThread` truncates on it the same way).
"""

from __future__ import annotations

from collections.abc import Callable

from epochguard.client.consumer.fetch_collector import CompletedFetch
from epochguard.client.consumer.requests.base import (
    REFRESH_METADATA,
    ClientRequest,
    ClientResponse,
    ConsumerContext,
    RequestManager,
)
from epochguard.client.consumer.subscription import FetchState, PartitionState
from epochguard.errors import CorruptRecordError, Errors, TopicAuthorizationFailedError
from epochguard.protocol.api_versions import ApiKey
from epochguard.protocol.messages import (
    FETCH_VERSION,
    FetchPartition,
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
)
from epochguard.types import NO_EPOCH, FetchPosition, TopicPartition, epoch_or_sentinel

__all__ = ["FetchManager"]

_Positions = dict[TopicPartition, FetchPosition]
# The first Fetch version with LastFetchedEpoch and DivergingEpoch (KIP-595).
LAST_FETCHED_EPOCH_VERSION = 12


def fetches_last_epoch(ctx: ConsumerContext, node: int) -> bool:
    """Whether Fetches to `node` carry LastFetchedEpoch: asked for, and the node's Fetch is v12+."""
    if not ctx.send_last_fetched_epoch:
        return False
    versions = ctx.api_versions.get(node)
    r = None if versions is None else versions.version_range(ApiKey.FETCH)
    return r is not None and min(r.max_version, FETCH_VERSION) >= LAST_FETCHED_EPOCH_VERSION


class FetchManager(RequestManager[_Positions]):
    def __init__(self, ctx: ConsumerContext, on_leader_hint: Callable[[TopicPartition], object],
                 on_diverging: Callable[[TopicPartition, FetchPosition, int, int, int], object] | None = None) -> None:
        super().__init__(ctx)
        self._on_leader_hint = on_leader_hint  # re-point the position after a KIP-951 leader hint
        # (tp, position fetched, diverging epoch, its end offset, now_ms): validate on a DivergingEpoch
        self._on_diverging = on_diverging

    def _due(self, now_ms: int | None) -> dict[int, list[tuple[TopicPartition, FetchPosition]]]:
        busy = {sent.node_id for sent in self._in_flight.values()}
        buffered = self.ctx.collector.buffered_ends()
        groups: dict[int, list[tuple[TopicPartition, FetchPosition]]] = {}
        for tp, s in self.ctx.subscriptions.items():
            if not s.is_fetchable or s.position is None:
                continue
            position = s.position
            if tp in buffered:
                count, end = buffered[tp]
                if end is None or count > self.ctx.prefetch:
                    continue
                position = end  # ahead of the buffer (prefetch)
            if s.fetch_until is not None and position.offset >= s.fetch_until:
                continue  # the reader's range ends here
            if now_ms is not None and now_ms < s.next_retry_ms:
                continue
            node = s.preferred_read_replica
            if node is None:
                node = s.position.current_leader.leader
            if node is None:
                self.ctx.metadata.request_update()
                continue
            if node not in busy:  # one fetch per node at a time
                groups.setdefault(node, []).append((tp, position))
        return groups

    def poll(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        out = []
        for node, entries in sorted(self._due(now_ms).items()):
            last = fetches_last_epoch(self.ctx, node)
            parts = tuple(
                FetchPartition(
                    tp.topic, tp.partition, pos.offset,
                    epoch_or_sentinel(pos.current_leader.epoch) if self.ctx.kip320 else NO_EPOCH,
                    last_fetched_epoch=epoch_or_sentinel(pos.offset_epoch) if last else NO_EPOCH,
                    partition_max_bytes=self.ctx.max_partition_fetch_bytes,
                )
                for tp, pos in entries
            )
            request = FetchRequest(parts, isolation_level=self.ctx.isolation_level,
                                   max_wait_ms=self.ctx.fetch_max_wait_ms, min_bytes=self.ctx.fetch_min_bytes,
                                   max_bytes=self.ctx.fetch_max_bytes, rack_id=self.ctx.client_rack)
            out.append(self._send(node, request, now_ms, dict(entries)))
        return out

    def due_ms(self) -> int | None:
        times = [
            self.ctx.subscriptions.state(tp).next_retry_ms
            for entries in self._due(None).values()
            for tp, _ in entries
        ]
        return min(times, default=None)

    def failed(self, node_id: int, request: ClientRequest, context: _Positions, now_ms: int) -> None:
        self.ctx.subscriptions.request_failed(context, self.ctx.backoff(now_ms))
        self.ctx.metadata.request_update()

    def handle(
        self, node_id: int, request: ClientRequest, context: _Positions, response: ClientResponse, now_ms: int
    ) -> None:
        if not isinstance(response, FetchResponse):
            return
        for data in response.partitions:
            fetched = context.get(data.tp)  # the position each partition was fetched from (the request's offset)
            if fetched is not None:
                self._on_partition(data.tp, fetched, data, now_ms)

    def _on_partition(self, tp: TopicPartition, fetched: FetchPosition, data: FetchPartitionData, now_ms: int) -> None:
        s = self.ctx.subscriptions.get(tp)
        if s is None or s.position is None or s.state != FetchState.FETCHING:
            return  # stale: unassigned, or the position is being reset or validated
        if s.position != fetched:
            _, end = self.ctx.collector.buffered_ends().get(tp, (0, None))
            if end != fetched:
                return  # stale: the position moved while the fetch was in flight
            # A fetch ahead of the buffer (prefetch), still continuing it.
            if data.error_code == Errors.NONE and data.diverging_epoch is None:
                self._on_records(s, tp, fetched, data, now_ms, ahead=True)
            else:
                s.next_retry_ms = self.ctx.backoff(now_ms)  # handled once fetched from the position itself
            return
        code = data.error_code
        if code == Errors.NONE and data.diverging_epoch is not None and self._on_diverging is not None:
            div = data.diverging_epoch  # the leader's answer for our LastFetchedEpoch: validate with it
            self._on_diverging(tp, fetched, div.epoch, div.end_offset, now_ms)
        elif code == Errors.NONE:
            self._on_records(s, tp, fetched, data, now_ms)
        elif code == Errors.OFFSET_OUT_OF_RANGE:
            self._on_out_of_range(s, tp)
        elif code == Errors.TOPIC_AUTHORIZATION_FAILED:
            self.ctx.errors.append(TopicAuthorizationFailedError(f"not authorized to read {tp.topic}"))
        else:
            if code in REFRESH_METADATA:
                self._on_stale_leader(s, tp, data)
            s.next_retry_ms = self.ctx.backoff(now_ms)  # UNKNOWN_LEADER_EPOCH and the rest: plain retry

    def _on_records(self, s: PartitionState, tp: TopicPartition, fetched: FetchPosition, data: FetchPartitionData,
                    now_ms: int, ahead: bool = False) -> None:
        """A successful answer: buffer its records for `poll()`, or step over a run without any. `ahead`:
        fetched from the end of the buffered fetches, not from the position."""
        assert s.position is not None  # checked by _on_partition
        if data.high_watermark >= 0:
            s.highwater = data.high_watermark
        if data.preferred_read_replica >= 0:
            s.preferred_read_replica = data.preferred_read_replica
        try:
            completed = CompletedFetch.decode(
                tp, fetched, data.records, self.ctx.isolation_level, data.aborted_transactions
            )
        except CorruptRecordError as e:
            if ahead:  # raised when fetched again from the position, in order
                s.next_retry_ms = self.ctx.backoff(now_ms)
                return
            self.ctx.errors.append(e)  # raised by poll(), as Kafka's consumer does
            s.next_retry_ms = self.ctx.backoff(now_ms)
            return
        if ahead:
            if completed.has_records or completed.next_offset != fetched.offset:
                self.ctx.collector.add(completed)  # handed out after the buffered ones, in order
        elif completed.has_records:
            self.ctx.collector.add(completed)  # handed out (and the position moved) by poll()
        elif completed.next_offset != s.position.offset:
            # Only control batches or records below the fetch offset: nothing to hand out, move on.
            s.position = FetchPosition(completed.next_offset, completed.last_epoch, s.position.current_leader)
            s.record_consumed(completed.epochs)

    def _on_out_of_range(self, s: PartitionState, tp: TopicPartition) -> None:
        """OFFSET_OUT_OF_RANGE: back to the leader if a read replica said it, else reset by policy."""
        assert s.position is not None  # the position fetched from, checked by _on_partition
        if s.preferred_read_replica is not None:
            # Fetched from the read replica (the only target while one is set), which is behind: go back
            # to the leader (Kafka's `clearPreferredReadReplica`).
            s.preferred_read_replica = None
        elif s.reset_policy == "none":
            self.ctx.collector.add_out_of_range(tp, s.position.offset)
        else:
            s.request_reset(s.reset_policy, "out_of_range")

    def _on_stale_leader(self, s: PartitionState, tp: TopicPartition, data: FetchPartitionData) -> None:
        """FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER and the like: follow the KIP-951 hint or refresh."""
        s.preferred_read_replica = None
        hint = data.current_leader
        if self.ctx.metadata.update_partition_leadership(tp, hint.leader_id, hint.leader_epoch):
            self._on_leader_hint(tp)
        else:
            self.ctx.metadata.request_update()

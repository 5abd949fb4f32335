"""What every request manager of the consumer shares: the context they work on, and in-flight tracking.

Kafka's consumer has one `RequestManager` per concern (`OffsetsRequestManager`, `FetchRequestManager`,
`CommitRequestManager`, ...), each polled with the time and each owning its unsent and in-flight
requests. Here too: a manager's `poll(now_ms)` returns `[(node_id, request)]`, the answers come back
to the manager that sent the request, and `next_deadline_ms()` says when it next has something to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from epochguard.client.consumer.fetch_collector import FetchCollector
from epochguard.client.consumer.subscription import SubscriptionState
from epochguard.client.metadata import ClientMetadata
from epochguard.errors import EpochGuardError, Errors
from epochguard.protocol.api_versions import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    NodeApiVersions,
)
from epochguard.protocol.messages import Request, Response
from epochguard.types import (
    EpochProtocol,
    IsolationLevel,
    OffsetAndMetadata,
    OffsetResetEvent,
    TopicPartition,
    TruncationEvent,
)

__all__ = ["REFRESH_METADATA", "ClientRequest", "ClientResponse", "ConsumerContext", "RequestManager", "leaders_of"]

ClientRequest = Request | ApiVersionsRequest
ClientResponse = Response | ApiVersionsResponse

# Errors after which the partition's metadata is stale: refresh it (Kafka's InvalidMetadataException).
REFRESH_METADATA = frozenset({
    Errors.NOT_LEADER_OR_FOLLOWER,
    Errors.REPLICA_NOT_AVAILABLE,
    Errors.KAFKA_STORAGE_ERROR,
    Errors.FENCED_LEADER_EPOCH,
    Errors.OFFSET_NOT_AVAILABLE,
    Errors.UNKNOWN_TOPIC_OR_PARTITION,
    Errors.LEADER_NOT_AVAILABLE,
})


@dataclass(slots=True)
class ConsumerContext:
    """The state the managers share: configuration, partitions, metadata, broker versions, the fetch
    buffer, and what the application reads (errors to raise, events, committed offsets)."""

    protocol: EpochProtocol
    isolation_level: IsolationLevel
    retry_backoff_ms: int
    request_timeout_ms: int
    track_consumed_epochs: bool
    subscriptions: SubscriptionState
    metadata: ClientMetadata
    collector: FetchCollector
    api_versions: dict[int, NodeApiVersions] = field(default_factory=dict)
    errors: list[EpochGuardError] = field(default_factory=list)  # raised by poll(), oldest first
    truncations: list[TruncationEvent] = field(default_factory=list)
    resets: list[OffsetResetEvent] = field(default_factory=list)
    committed: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    # Fetch sizing and long-poll (`fetch.max.wait.ms` etc.); the defaults are the simulator's (no wait).
    fetch_max_wait_ms: int = 0
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 50 << 20
    max_partition_fetch_bytes: int = 1 << 20
    # Completed fetches a partition may have buffered and still be fetched on from their end (0: Kafka's
    # rule, nothing buffered; see FetchManager).
    prefetch: int = 0
    # Beyond Kafka's consumer (whose Fetch carries no LastFetchedEpoch), as a follower does (KIP-595's
    # truncate-on-fetch): each Fetch v12+ carries the position's offset epoch, so the leader answers a
    # divergence itself (DivergingEpoch) and a position with an epoch needs no OffsetsForLeaderEpoch.
    send_last_fetched_epoch: bool = False
    client_rack: str = ""  # client.rack: Fetch's rack_id (KIP-392)

    @property
    def kip320(self) -> bool:
        return self.protocol == "kip-320"

    def backoff(self, now_ms: int) -> int:
        return now_ms + self.retry_backoff_ms


T = TypeVar("T")


@dataclass(slots=True)
class _Sent(Generic[T]):
    node_id: int
    request: ClientRequest
    sent_ms: int
    context: T


class RequestManager(Generic[T]):
    """One concern's requests. Subclasses implement `poll`, `handle`, `failed` and `due_ms`; `T` is
    what a subclass remembers about each request it sent."""

    def __init__(self, ctx: ConsumerContext) -> None:
        self.ctx = ctx
        self._in_flight: dict[int, _Sent[T]] = {}  # id(request) -> what was sent

    # --- driven by the consumer -----------------------------------------------------------------
    def poll(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        raise NotImplementedError

    def owns(self, request: ClientRequest) -> bool:
        return id(request) in self._in_flight

    def on_response(self, node_id: int, request: ClientRequest, response: ClientResponse, now_ms: int) -> None:
        sent = self._in_flight.pop(id(request), None)
        if sent is not None:
            self.handle(sent.node_id, sent.request, sent.context, response, now_ms)

    def on_failure(self, request: ClientRequest, now_ms: int, error: EpochGuardError | None = None) -> None:
        """No answer (`error`: why, if the driver knows; a retriable failure is retried whatever it was)."""
        sent = self._in_flight.pop(id(request), None)
        if sent is not None:
            self.failed(sent.node_id, sent.request, sent.context, now_ms)

    def expired(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        """In-flight requests older than the request timeout (the consumer fails them)."""
        timeout = self.ctx.request_timeout_ms
        return [(sent.node_id, sent.request) for sent in self._in_flight.values() if now_ms - sent.sent_ms >= timeout]

    def next_deadline_ms(self) -> int | None:
        """The earliest time this manager will send something or time a request out; None = only an
        answer or an application call can give it work."""
        times = [sent.sent_ms + self.ctx.request_timeout_ms for sent in self._in_flight.values()]
        due = self.due_ms()
        if due is not None:
            times.append(due)
        return min(times, default=None)

    # --- for subclasses -------------------------------------------------------------------------
    def handle(self, node_id: int, request: ClientRequest, context: T, response: ClientResponse, now_ms: int) -> None:
        raise NotImplementedError

    def failed(self, node_id: int, request: ClientRequest, context: T, now_ms: int) -> None:
        raise NotImplementedError

    def due_ms(self) -> int | None:
        """When `poll` next has something to send (<= now: at once)."""
        raise NotImplementedError

    def _send(self, node_id: int, request: ClientRequest, now_ms: int, context: T) -> tuple[int, ClientRequest]:
        self._in_flight[id(request)] = _Sent(node_id, request, now_ms, context)
        return node_id, request

    def _sent_contexts(self) -> list[T]:
        return [sent.context for sent in self._in_flight.values()]


def leaders_of(ctx: ConsumerContext, partitions: list[TopicPartition]) -> dict[int, list[TopicPartition]]:
    """Group partitions by their current leader; a partition without one asks for metadata."""
    groups: dict[int, list[TopicPartition]] = {}
    for tp in partitions:
        leader = ctx.metadata.current_leader(tp).leader
        if leader is None:
            ctx.metadata.request_update()
            continue
        groups.setdefault(leader, []).append(tp)
    return groups


"""A consumer's fetch positions and the requests that move them, sans-IO.

Split where Kafka's consumer splits (SPEC (e) is the reference):
- `subscription`: per-partition fetch state (`SubscriptionState`: INITIALIZING / FETCHING /
  AWAIT_RESET / AWAIT_VALIDATION, `FetchPosition`, `maybeValidatePositionForCurrentLeader`);
- `validator`: the pure position validator (`maybeCompleteValidation`: an epoch end offset in,
  resume / rewind / reset / truncation out);
- `fetch_collector`: `CompletedFetch` (records and their epochs) and `FetchCollector` (what `poll()`
  hands out);
- `requests`: one manager per concern, each owning its in-flight requests and handlers: ApiVersions,
  metadata, commits (OffsetFetch, OffsetCommit), ListOffsets (resets, `offsets_for_times`),
  validation (OffsetsForLeaderEpoch, KIP-320) and fetch;
- this module: `Consumer`, the application API that polls the managers.

Driving it: `assign`, `seek`, `commit`, `offsets_for_times`, `beginning_offsets`, `end_offsets` are
application calls;
`poll_requests(now_ms)` returns `[(node_id, request)]` to send, `on_response(node_id, request, response,
now_ms)` / `on_request_failed(...)` take the outcome, `next_deadline_ms()` says when to call
`poll_requests` again if nothing arrives, and `poll(now_ms)` returns the buffered `ConsumerRecords`
(raising `LogTruncationError`, `OffsetOutOfRangeError`, `NoOffsetForPartitionError` when one is
pending). Truncations are also reported as data in `truncations`, resets in `resets`.

Ways out of every state (DESIGN.md section 4): a validation is re-sent as soon as the position changes
(a second leader change does not wait for the first request), in-flight requests expire after
`request_timeout_ms`, a partition without a leader keeps asking for metadata (one without an epoch
waits for the periodic `metadata_max_age_ms` refresh, as in Kafka), and a lower epoch is accepted when
the topic id changes (ClientMetadata).

Broker API versions (Kafka's `ApiVersions`): the consumer asks ApiVersions of every broker the
metadata lists, validates positions only against brokers whose OffsetForLeaderEpoch reaches v3 (an
older leader just becomes the fetch target, as `updatePositionLeaderNoValidation`), and sends no
validation to a broker before its answer. Deliberate difference: Kafka handshakes on each new
connection and holds every request until then; here there are no connections, so the handshake is
eager and only validation (the one request whose use depends on the version) waits for it.

`protocol="pre-kip-320"`: positions are never validated (a leader change just re-points them), fetches
carry no epoch, and the only reset trigger is OFFSET_OUT_OF_RANGE.

`track_consumed_epochs=True` goes beyond Kafka (off by default, where behaviour is SPEC (e) exactly): the
consumer keeps a `LeaderEpochCache` of the epochs it handed out and locates a divergence with the core's
`truncation_offset`, as a follower does, instead of trusting the leader's end offset alone. After an
unclean election this finds the first diverged offset where Kafka's rule reports a later one or none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from epochguard.client.consumer.fetch_collector import CompletedFetch, FetchCollector
from epochguard.client.consumer.requests import (
    ApiVersionsManager,
    ClientRequest,
    ClientResponse,
    CommitManager,
    ConsumerContext,
    FetchManager,
    MetadataManager,
    OffsetsForTimesLookup,
    OffsetsManager,
    RequestManager,
    ValidationManager,
)
from epochguard.client.consumer.subscription import (
    FetchState,
    PartitionState,
    SubscriptionState,
)
from epochguard.client.metadata import ClientMetadata
from epochguard.errors import EpochGuardError
from epochguard.protocol.api_versions import NodeApiVersions
from epochguard.types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ConsumerRecords,
    EpochProtocol,
    FetchPosition,
    IsolationLevel,
    LeaderAndEpoch,
    OffsetAndMetadata,
    ResetPolicy,
    TopicPartition,
)

__all__ = ["CompletedFetch", "Consumer", "FetchState", "OffsetsForTimesLookup", "PartitionState"]


class Consumer:
    """One consumer with manually assigned partitions (see module docstring).

    `bootstrap`: nodes to ask for metadata before any is known. `group_id`/`coordinator_id`: where
    committed offsets live (without them positions come from the reset policy). `reset_policy`:
    `auto.offset.reset`, per partition overridable in `assign`. `api_versions`: brokers' versions
    already known (a driver that did the handshake itself). `fetch_*`/`max_partition_fetch_bytes`: the
    Fetch request's long-poll and sizes (Kafka's settings of those names; the default 0 ms wait suits a
    stepped simulation, a network client passes Kafka's 500). `group_generation`: the (generation id,
    member id) a group member's commits carry (its membership's, `ConsumerCoordinator.generation_and_member`).
    `prefetch`: completed fetches a partition may have buffered and still be fetched on from their end
    (beyond Kafka, whose rule is 0, the default; see `requests.fetch`). `send_last_fetched_epoch`: Fetch
    v12+ carries each position's offset epoch (LastFetchedEpoch) and a DivergingEpoch answer validates the
    position, as a follower's fetch does (beyond Kafka's consumer, which sends none). Times are milliseconds of the
    caller's clock (`now_ms` arguments); nothing here reads a clock. `client_rack`: Java's `client.rack`, sent in
    every Fetch (v11+, KIP-392) so a leader with a rack-aware replica selector may name a follower to read from.
    """

    def __init__(
        self,
        *,
        bootstrap: Iterable[int] = (0,),
        group_id: str | None = None,
        coordinator_id: int | None = None,
        reset_policy: ResetPolicy = "latest",
        protocol: EpochProtocol = "kip-320",
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        retry_backoff_ms: int = 100,
        request_timeout_ms: int = 30_000,
        metadata: ClientMetadata | None = None,
        track_consumed_epochs: bool = False,
        api_versions: Mapping[int, NodeApiVersions] | None = None,
        fetch_max_wait_ms: int = 0,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 50 << 20,
        max_partition_fetch_bytes: int = 1 << 20,
        group_generation: Callable[[], tuple[int, str]] | None = None,
        prefetch: int = 0,
        send_last_fetched_epoch: bool = False,
        client_rack: str = "",
    ) -> None:
        if reset_policy not in ("earliest", "latest", "none"):
            raise ValueError(f"invalid reset policy {reset_policy!r}")
        self.protocol: EpochProtocol = protocol
        # Beyond Kafka (off by default): remember the epochs of what was consumed, so validation finds
        # the exact first diverged offset with the core's `truncation_offset`, as followers do.
        self.track_consumed_epochs = track_consumed_epochs and protocol == "kip-320"
        self.metadata = metadata or ClientMetadata(protocol=protocol, topics=(), refresh_backoff_ms=retry_backoff_ms)
        self.bootstrap = tuple(bootstrap)
        self._subscriptions = SubscriptionState(reset_policy, protocol)
        self._ctx = ConsumerContext(
            protocol=protocol,
            isolation_level=isolation_level,
            retry_backoff_ms=retry_backoff_ms,
            request_timeout_ms=request_timeout_ms,
            track_consumed_epochs=self.track_consumed_epochs,
            subscriptions=self._subscriptions,
            metadata=self.metadata,
            collector=FetchCollector(self._subscriptions),
            api_versions=dict(api_versions or {}),
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_min_bytes=fetch_min_bytes,
            fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            prefetch=prefetch,
            client_rack=client_rack,
            send_last_fetched_epoch=send_last_fetched_epoch and protocol == "kip-320",
        )
        self.committed = self._ctx.committed
        self.truncations = self._ctx.truncations
        self.resets = self._ctx.resets
        self._api_versions = ApiVersionsManager(self._ctx)
        self._metadata = MetadataManager(self._ctx, self.bootstrap)
        self._offsets = OffsetsManager(self._ctx)
        self._commits = CommitManager(self._ctx, group_id, coordinator_id, self._offsets.reset_or_raise,
                                      group_generation or (lambda: (-1, "")))
        self._validation = ValidationManager(self._ctx)
        self._fetch = FetchManager(self._ctx, self._validation.maybe_validate, self._validation.complete_diverging)
        # The order requests go out in one round.
        self._managers: tuple[RequestManager, ...] = (
            self._api_versions, self._metadata, self._commits, self._offsets, self._validation, self._fetch,
        )

    # --- application API ----------------------------------------------------------------------
    @property
    def assignment(self) -> dict[TopicPartition, PartitionState]:
        """The assigned partitions and their states (read-only use; change them with the verbs below)."""
        return self._subscriptions.assignment

    def assign(self, partitions: Iterable[TopicPartition], reset_policy: ResetPolicy | None = None) -> None:
        """Add partitions to the assignment (INITIALIZING: committed offset or reset policy decides)."""
        self._subscriptions.assign(partitions, reset_policy)
        if self.metadata.topics is not None:
            self.metadata.add_topics(tp.topic for tp in self._subscriptions)

    def unassign(self, partitions: Iterable[TopicPartition]) -> None:
        self._subscriptions.unassign(partitions)

    def paused(self) -> set[TopicPartition]:
        """The assigned partitions paused by `pause` (kafka-python's `paused()`, Java's `paused()`)."""
        return {tp for tp, s in self._subscriptions.items() if s.paused}

    def highwater(self, tp: TopicPartition) -> int | None:
        """The high watermark of the last fetch answered for `tp` (None before one); `tp` must be assigned."""
        return self._subscriptions.state(tp).highwater

    def pause(self, tp: TopicPartition) -> None:
        self._subscriptions.state(tp).paused = True

    def resume(self, tp: TopicPartition) -> None:
        self._subscriptions.state(tp).paused = False

    def fetch_until(self, tp: TopicPartition, offset: int | None) -> None:
        """Beyond Kafka: fetch `tp` only from positions below `offset` (None: no limit), prefetches
        included; a seek keeps the limit, unassigning drops it."""
        self._subscriptions.state(tp).fetch_until = offset

    def seek(self, tp: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        """`seek(tp, offset)`: no epoch, no validation. `seek(tp, OffsetAndMetadata)`: with its epoch,
        validated against the leader before fetching (the current leader is read before the epoch bump)."""
        state = self._subscriptions.state(tp)
        current = self.metadata.current_leader(tp)
        if isinstance(offset, OffsetAndMetadata) and self.protocol == "kip-320":
            if offset.leader_epoch is not None:
                self.metadata.update_last_seen_epoch_if_newer(tp, offset.leader_epoch)
            state.seek_unvalidated(FetchPosition(offset.offset, offset.leader_epoch, current))
        else:
            value = offset.offset if isinstance(offset, OffsetAndMetadata) else offset
            if value < 0:
                raise ValueError(f"seek offset must not be negative: {value}")
            state.seek_validated(FetchPosition(value, None, current))
        self._new_position(tp, state)

    def seek_position(self, tp: TopicPartition, position: FetchPosition, *, validate: bool = True) -> None:
        """Set the position exactly, leader and leader epoch included (Kafka's `seekUnvalidated` /
        `seekValidated`). With `validate` it awaits validation when it has an offset epoch and a
        leader epoch; without, it is fetched from as is."""
        if position.offset < 0:
            raise ValueError(f"seek offset must not be negative: {position.offset}")
        state = self._subscriptions.state(tp)
        if validate and self.protocol == "kip-320":
            state.seek_unvalidated(position)
        else:
            state.seek_validated(position)
        self._new_position(tp, state)

    def validate_position(self, tp: TopicPartition, leader: LeaderAndEpoch | None = None) -> bool:
        """After a leader change: re-point the position at `leader` (default: the current leader in the
        metadata) and validate it there (`maybeValidatePositionForCurrentLeader`). True if it now
        awaits validation."""
        self._subscriptions.state(tp)
        if leader is None:
            return self._validation.maybe_validate(tp)
        versions = None if leader.leader is None else self._ctx.api_versions.get(leader.leader)
        return self._subscriptions.maybe_validate_position_for_current_leader(tp, leader, versions)

    def _new_position(self, tp: TopicPartition, state: PartitionState) -> None:
        state.restart_history(self.track_consumed_epochs)
        self._ctx.collector.drop(tp)

    def seek_to_beginning(self, tp: TopicPartition) -> None:
        self._subscriptions.state(tp).request_reset("earliest", "no_position")
        self._ctx.collector.drop(tp)

    def seek_to_end(self, tp: TopicPartition) -> None:
        self._subscriptions.state(tp).request_reset("latest", "no_position")
        self._ctx.collector.drop(tp)

    def position(self, tp: TopicPartition) -> FetchPosition | None:
        return self._subscriptions.state(tp).position

    def state_of(self, tp: TopicPartition) -> FetchState:
        return self._subscriptions.state(tp).state

    def awaiting_validation(self, tp: TopicPartition) -> bool:
        """Whether the position waits for an OffsetsForLeaderEpoch answer before fetching."""
        return self.state_of(tp) == FetchState.AWAIT_VALIDATION

    def awaiting_reset(self, tp: TopicPartition) -> bool:
        """Whether the partition waits for a ListOffsets reset (its position is gone)."""
        return self.state_of(tp) == FetchState.AWAIT_RESET

    def node_api_versions(self, node_id: int) -> NodeApiVersions | None:
        """What broker `node_id` answered to ApiVersions, or None while unknown."""
        return self._ctx.api_versions.get(node_id)

    def update_api_versions(self, node_id: int, versions: NodeApiVersions) -> None:
        """Record a broker's versions learned elsewhere (a driver that did the handshake itself)."""
        self._ctx.api_versions[node_id] = versions

    def forget_api_versions(self, node_id: int) -> None:
        """Forget a broker's versions (Kafka does on disconnect); they are asked again before validating."""
        self._api_versions.forget(node_id)

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None) -> None:
        """Queue an OffsetCommit (sent by the next `poll_requests`); default: every valid position, with its epoch."""
        if not self._commits.has_group:
            raise ValueError("commit needs a group_id and a coordinator_id")
        self._commits.commit(self.consumed_offsets() if offsets is None else offsets)

    def consumed_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """What `commit()` commits by default: every valid position, with its epoch."""
        return {
            tp: OffsetAndMetadata(s.position.offset, leader_epoch=s.position.offset_epoch)
            for tp, s in self._subscriptions.items()
            if s.state == FetchState.FETCHING and s.position is not None
        }

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int], now_ms: int,
                          timeout_ms: int | None = None) -> OffsetsForTimesLookup:
        """Start a lookup: per partition the first offset with timestamp >= the target, with its leader
        epoch (None where no such record). Answered by later `poll_requests`/`on_response` rounds; it fails
        with `RequestTimedOutError` after `timeout_ms` (default `request_timeout_ms`)."""
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"invalid negative timestamp {ts} for {tp}")
        return self._lookup(dict(timestamps), now_ms, timeout_ms)

    def beginning_offsets(self, partitions: Iterable[TopicPartition], now_ms: int,
                          timeout_ms: int | None = None) -> OffsetsForTimesLookup:
        """Start a lookup of each partition's log start offset (ListOffsets EARLIEST): `lookup.offsets`."""
        return self._lookup(dict.fromkeys(partitions, EARLIEST_TIMESTAMP), now_ms, timeout_ms)

    def end_offsets(self, partitions: Iterable[TopicPartition], now_ms: int,
                    timeout_ms: int | None = None) -> OffsetsForTimesLookup:
        """Start a lookup of each partition's end (ListOffsets LATEST: the high watermark, the last stable
        offset under read_committed): `lookup.offsets`."""
        return self._lookup(dict.fromkeys(partitions, LATEST_TIMESTAMP), now_ms, timeout_ms)

    def _lookup(self, timestamps: dict[TopicPartition, int], now_ms: int, timeout_ms: int | None,
                ) -> OffsetsForTimesLookup:
        self.metadata.add_topics(tp.topic for tp in timestamps)
        return self._offsets.start_lookup(timestamps, now_ms, timeout_ms)

    def poll(self, now_ms: int = 0) -> ConsumerRecords:
        """Drain buffered records (advancing positions), or raise the oldest pending error. An
        out-of-range answer under policy "none" is raised by every poll that has no records to return,
        until the position moves (Kafka keeps the failed fetch at the head of its buffer)."""
        self.raise_pending()
        return self._ctx.collector.collect()

    def poll_fetches(self, now_ms: int = 0) -> list[CompletedFetch]:
        """`poll()` without decoding the records: the completed fetches handed out (positions advanced),
        for a caller that decodes them itself (`CompletedFetch.arrow()`)."""
        self.raise_pending()
        return self._ctx.collector.collect_fetches()

    def raise_pending(self) -> None:
        """Raise the oldest error pending for the application, if any (what `poll()` raises first)."""
        if self._ctx.errors:
            raise self._ctx.errors.pop(0)

    # --- the driver's side --------------------------------------------------------------------
    def poll_requests(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        """Everything to send now, from each request manager in turn (positions are re-pointed at the
        current leaders, if the metadata changed meanwhile, just before the validations are chosen)."""
        for manager in self._managers:
            for node_id, request in manager.expired(now_ms):
                self.on_request_failed(node_id, request, now_ms)
        out: list[tuple[int, ClientRequest]] = []
        for manager in self._managers:
            if manager is self._validation:
                self._validation.validate_positions_on_metadata_change()
            out.extend(manager.poll(now_ms))
        return out

    def next_deadline_ms(self) -> int | None:
        """When `poll_requests` next has something to send or time out, if no answer or application
        call comes first (a time at or before now: call it now). None: nothing is scheduled."""
        self._validation.validate_positions_on_metadata_change()
        return min((t for m in self._managers if (t := m.next_deadline_ms()) is not None), default=None)

    def on_response(self, node_id: int, request: ClientRequest, response: ClientResponse, now_ms: int) -> None:
        """An answer to a request from `poll_requests` (expired or foreign requests are ignored)."""
        for manager in self._managers:
            if manager.owns(request):
                manager.on_response(node_id, request, response, now_ms)
                break
        self._validation.validate_positions_on_metadata_change()

    def on_request_failed(self, node_id: int, request: ClientRequest, now_ms: int,
                          error: EpochGuardError | None = None) -> None:
        """No answer (disconnect, timeout; `error`: why, if known): the manager retries after backoff (a
        lookup no ListOffsets version can carry fails instead); the broker's versions are asked again, as
        after a new connection."""
        for manager in self._managers:
            if manager.owns(request):
                self._api_versions.forget(node_id)
                manager.on_failure(request, now_ms, error)
                return

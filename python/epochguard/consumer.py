"""A consumer's fetch positions and the requests that move them, sans-IO.

Mirrors Kafka's consumer internals: `SubscriptionState` (fetch states INITIALIZING / FETCHING /
AWAIT_RESET / AWAIT_VALIDATION, `FetchPosition`, `maybeValidatePositionForCurrentLeader`,
`maybeCompleteValidation`), `OffsetFetcher` / `OffsetFetcherUtils` (position validation with
OffsetsForLeaderEpoch, resets and `offsetsForTimes` with ListOffsets), `AbstractFetch` / `FetchCollector` /
`CompletedFetch` (fetch requests, errors, records and their epochs), the offset part of
`ConsumerCoordinator` (OffsetFetch, OffsetCommit) and `LogTruncationException`. SPEC (e) is the reference.

Driving it: `assign`, `seek`, `commit`, `offsets_for_times` are application calls;
`poll_requests(now_ms)` returns `[(node_id, request)]` to send, `on_response(node_id, request, response,
now_ms)` / `on_request_failed(...)` take the outcome, and `poll(now_ms)` returns the buffered
`ConsumerRecords` (raising `LogTruncationError`, `OffsetOutOfRangeError`, `NoOffsetForPartitionError`
when one is pending). Truncations are also reported as data in `truncations`, resets in `resets`.

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

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from epochguard._core import LeaderEpochCache, iter_batches, truncation_offset
from epochguard.api_versions import (
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    NodeApiVersions,
    has_usable_offset_for_leader_epoch_version,
)
from epochguard.errors import (
    CorruptRecordError,
    EpochGuardError,
    Errors,
    LogTruncationError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
)
from epochguard.messages import (
    FetchPartition,
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OFFSET_FOR_LEADER_EPOCH_VERSION,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderPartition,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    Request,
    Response,
)
from epochguard.metadata import ClientMetadata
from epochguard.types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    NO_EPOCH,
    NO_OFFSET,
    ConsumerRecord,
    ConsumerRecords,
    FetchPosition,
    IsolationLevel,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    OffsetResetEvent,
    EpochProtocol,
    ResetPolicy,
    ResetReason,
    TopicPartition,
    TruncationEvent,
    TruncationResolution,
    epoch_or_none,
    epoch_or_sentinel,
)

ClientRequest = Request | ApiVersionsRequest
ClientResponse = Response | ApiVersionsResponse

__all__ = ["FetchState", "PartitionState", "OffsetsForTimesLookup", "Consumer"]


class FetchState(enum.Enum):
    INITIALIZING = "initializing"
    FETCHING = "fetching"
    AWAIT_RESET = "await_reset"
    AWAIT_VALIDATION = "await_validation"

    @property
    def has_position(self) -> bool:
        return self in (FetchState.FETCHING, FetchState.AWAIT_VALIDATION)


_ALLOWED = {
    FetchState.INITIALIZING: {FetchState.FETCHING, FetchState.AWAIT_RESET, FetchState.AWAIT_VALIDATION},
    FetchState.FETCHING: {FetchState.FETCHING, FetchState.AWAIT_RESET, FetchState.AWAIT_VALIDATION},
    FetchState.AWAIT_RESET: {FetchState.FETCHING, FetchState.AWAIT_RESET},
    FetchState.AWAIT_VALIDATION: {FetchState.FETCHING, FetchState.AWAIT_RESET, FetchState.AWAIT_VALIDATION},
}

# Errors after which the partition's metadata is stale: refresh it (Kafka's InvalidMetadataException).
_REFRESH_METADATA = {
    Errors.NOT_LEADER_OR_FOLLOWER,
    Errors.REPLICA_NOT_AVAILABLE,
    Errors.KAFKA_STORAGE_ERROR,
    Errors.FENCED_LEADER_EPOCH,
    Errors.OFFSET_NOT_AVAILABLE,
    Errors.UNKNOWN_TOPIC_OR_PARTITION,
    Errors.LEADER_NOT_AVAILABLE,
}


@dataclass(slots=True)
class PartitionState:
    """One assigned partition (`SubscriptionState.TopicPartitionState`) plus what is in flight for it."""

    reset_policy: ResetPolicy
    state: FetchState = FetchState.INITIALIZING
    position: FetchPosition | None = None
    reset_strategy: ResetPolicy | None = None  # the strategy of a pending reset
    reset_reason: ResetReason = "no_position"
    reset_from: int | None = None
    next_retry_ms: int = 0
    paused: bool = False
    preferred_read_replica: int | None = None
    validation_sent_for: FetchPosition | None = None  # position of the in-flight OffsetsForLeaderEpoch
    reset_in_flight: bool = False
    fetch_in_flight: bool = False
    committed_in_flight: bool = False
    reported_truncation: tuple[FetchPosition, int | None, int | None] | None = None
    consumed: LeaderEpochCache | None = None  # epochs of the records handed out (track_consumed_epochs)

    def transition(self, new: FetchState, position: FetchPosition | None = None) -> bool:
        """Kafka's `transitionState`: a disallowed transition is silently ignored."""
        if new not in _ALLOWED[self.state]:
            return False
        self.state = new
        self.position = position if new.has_position else None
        if new != FetchState.AWAIT_RESET:
            self.reset_strategy = None
        self.next_retry_ms = 0
        return True

    def seek_validated(self, position: FetchPosition) -> None:
        self.transition(FetchState.FETCHING, position)

    def validate_position(self, position: FetchPosition) -> None:
        """AWAIT_VALIDATION when the position has an offset epoch and a leader epoch, else FETCHING."""
        if position.offset_epoch is not None and position.current_leader.epoch is not None:
            self.transition(FetchState.AWAIT_VALIDATION, position)
        else:
            self.transition(FetchState.FETCHING, position)

    def seek_unvalidated(self, position: FetchPosition) -> None:
        self.seek_validated(position)
        self.validate_position(position)

    def request_reset(self, strategy: ResetPolicy, reason: ResetReason) -> None:
        from_offset = self.position.offset if self.position is not None else None
        if self.transition(FetchState.AWAIT_RESET):
            self.reset_strategy = strategy
            self.reset_reason = reason
            self.reset_from = from_offset

    @property
    def is_fetchable(self) -> bool:
        return self.state == FetchState.FETCHING and not self.paused


@dataclass
class OffsetsForTimesLookup:
    """A pending `offsets_for_times`: `done` once every partition is answered (or `deadline_ms` passed)."""

    timestamps: dict[TopicPartition, int]
    deadline_ms: int
    result: dict[TopicPartition, OffsetAndTimestamp | None] = field(default_factory=dict)
    error: EpochGuardError | None = None
    _in_flight: set[TopicPartition] = field(default_factory=set)
    _retry_ms: dict[TopicPartition, int] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.error is not None or len(self.result) == len(self.timestamps)


@dataclass(slots=True)
class _CompletedFetch:
    tp: TopicPartition
    position: FetchPosition  # the position the fetch was sent for (offset and leader)
    records: list[ConsumerRecord]
    next_offset: int
    last_epoch: int | None
    epochs: list[tuple[int, int]]  # (epoch, first offset read) per batch read


@dataclass(slots=True)
class _InFlight:
    node_id: int
    sent_ms: int
    tps: tuple[TopicPartition, ...]
    positions: dict[TopicPartition, FetchPosition] = field(default_factory=dict)
    resets: dict[TopicPartition, ResetPolicy] = field(default_factory=dict)
    lookup: OffsetsForTimesLookup | None = None
    request: ClientRequest | None = None


class Consumer:
    """One consumer with manually assigned partitions (see module docstring).

    `bootstrap`: nodes to ask for metadata before any is known. `group_id`/`coordinator_id`: where
    committed offsets live (without them positions come from the reset policy). `reset_policy`:
    `auto.offset.reset`, per partition overridable in `assign`. Times are milliseconds of the caller's
    clock (`now_ms` arguments); nothing here reads a clock.
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
    ) -> None:
        if reset_policy not in ("earliest", "latest", "none"):
            raise ValueError(f"invalid reset policy {reset_policy!r}")
        self.protocol: EpochProtocol = protocol
        self.group_id = group_id
        self.coordinator_id = coordinator_id
        self.reset_policy: ResetPolicy = reset_policy
        self.isolation_level = isolation_level
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        # Beyond Kafka (off by default): remember the epochs of what was consumed, so validation finds
        # the exact first diverged offset with the core's `truncation_offset`, as followers do.
        self.track_consumed_epochs = track_consumed_epochs and protocol == "kip-320"
        self.metadata = metadata or ClientMetadata(protocol=protocol, topics=(), refresh_backoff_ms=retry_backoff_ms)
        self.bootstrap = tuple(bootstrap)
        self.assignment: dict[TopicPartition, PartitionState] = {}
        self.committed: dict[TopicPartition, OffsetAndMetadata] = {}
        self.truncations: list[TruncationEvent] = []
        self.resets: list[OffsetResetEvent] = []
        self._pending_errors: list[EpochGuardError] = []
        self._truncation_batch: dict[TopicPartition, tuple[int, OffsetAndMetadata | None]] = {}
        self._completed: list[_CompletedFetch] = []
        self._in_flight: dict[int, _InFlight] = {}  # id(request) -> _InFlight
        self._fetch_nodes: set[int] = set()
        self._metadata_in_flight = False
        self._next_metadata_node = 0
        self._pending_commits: list[dict[TopicPartition, OffsetAndMetadata]] = []
        self._lookups: list[OffsetsForTimesLookup] = []
        # Out-of-range fetch answers under policy "none": raised by every poll() until the position moves.
        self._out_of_range: dict[TopicPartition, int] = {}
        self._metadata_update_version = -1  # the first pass re-points every position (Kafka starts at -1)
        # Each broker's ApiVersions answer (Kafka's `ApiVersions`): asked of every broker the metadata
        # lists; validation waits for the leader's and is skipped below OffsetForLeaderEpoch v3.
        self._api_versions: dict[int, NodeApiVersions] = dict(api_versions or {})
        self._api_versions_asked: dict[int, int] = {}  # node -> ApiVersions request version in flight
        self._api_versions_retry: dict[int, tuple[int, int]] = {}  # node -> (not before ms, version)

    # --- application API ----------------------------------------------------------------------
    def assign(self, partitions: Iterable[TopicPartition], reset_policy: ResetPolicy | None = None) -> None:
        """Add partitions to the assignment (INITIALIZING: committed offset or reset policy decides)."""
        for tp in partitions:
            if tp not in self.assignment:
                self.assignment[tp] = PartitionState(reset_policy or self.reset_policy)
        if self.metadata.topics is not None:
            self.metadata.add_topics(tp.topic for tp in self.assignment)

    def unassign(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.assignment.pop(tp, None)
        self._completed = [c for c in self._completed if c.tp in self.assignment]

    def pause(self, tp: TopicPartition) -> None:
        self._state(tp).paused = True

    def resume(self, tp: TopicPartition) -> None:
        self._state(tp).paused = False

    def seek(self, tp: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        """`seek(tp, offset)`: no epoch, no validation. `seek(tp, OffsetAndMetadata)`: with its epoch,
        validated against the leader before fetching (the current leader is read before the epoch bump)."""
        state = self._state(tp)
        current = self.metadata.current_leader(tp)
        if isinstance(offset, OffsetAndMetadata) and self.protocol == "kip-320":
            position = FetchPosition(offset.offset, offset.leader_epoch, current)
            if offset.leader_epoch is not None:
                self.metadata.update_last_seen_epoch_if_newer(tp, offset.leader_epoch)
            state.seek_unvalidated(position)
        else:
            value = offset.offset if isinstance(offset, OffsetAndMetadata) else offset
            if value < 0:
                raise ValueError(f"seek offset must not be negative: {value}")
            state.seek_validated(FetchPosition(value, None, current))
        self._restart_history(state)
        self._drop_buffered(tp)

    def seek_to_beginning(self, tp: TopicPartition) -> None:
        self._state(tp).request_reset("earliest", "no_position")
        self._drop_buffered(tp)

    def seek_to_end(self, tp: TopicPartition) -> None:
        self._state(tp).request_reset("latest", "no_position")
        self._drop_buffered(tp)

    def position(self, tp: TopicPartition) -> FetchPosition | None:
        return self._state(tp).position

    def node_api_versions(self, node_id: int) -> NodeApiVersions | None:
        """What broker `node_id` answered to ApiVersions, or None while unknown."""
        return self._api_versions.get(node_id)

    def update_api_versions(self, node_id: int, versions: NodeApiVersions) -> None:
        """Record a broker's versions learned elsewhere (a driver that did the handshake itself)."""
        self._api_versions[node_id] = versions

    def forget_api_versions(self, node_id: int) -> None:
        """Forget a broker's versions (Kafka does on disconnect); they are asked again before validating."""
        self._api_versions.pop(node_id, None)

    def awaiting_validation(self, tp: TopicPartition) -> bool:
        """Whether the position waits for an OffsetsForLeaderEpoch answer before fetching."""
        return self._state(tp).state == FetchState.AWAIT_VALIDATION

    def awaiting_reset(self, tp: TopicPartition) -> bool:
        """Whether the partition waits for a ListOffsets reset (its position is gone)."""
        return self._state(tp).state == FetchState.AWAIT_RESET

    def state_of(self, tp: TopicPartition) -> FetchState:
        return self._state(tp).state

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None) -> None:
        """Queue an OffsetCommit (sent by the next `poll_requests`); default: every valid position, with its epoch."""
        if self.group_id is None or self.coordinator_id is None:
            raise ValueError("commit needs a group_id and a coordinator_id")
        if offsets is None:
            offsets = {
                tp: OffsetAndMetadata(s.position.offset, "", s.position.offset_epoch)
                for tp, s in self.assignment.items()
                if s.state == FetchState.FETCHING and s.position is not None
            }
        if offsets:
            self._pending_commits.append(dict(offsets))

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int], now_ms: int) -> OffsetsForTimesLookup:
        """Start a lookup: per partition the first offset with timestamp >= the target, with its leader
        epoch (None where no such record). Answered by later `poll_requests`/`on_response` rounds."""
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"invalid negative timestamp {ts} for {tp}")
        lookup = OffsetsForTimesLookup(dict(timestamps), now_ms + self.request_timeout_ms)
        self.metadata.add_topics(tp.topic for tp in timestamps)
        self._lookups.append(lookup)
        return lookup

    def poll(self, now_ms: int = 0) -> ConsumerRecords:
        """Drain buffered records (advancing positions), or raise the oldest pending error. An
        out-of-range answer under policy "none" is raised by every poll that has no records to return,
        until the position moves (Kafka keeps the failed fetch at the head of its buffer)."""
        if self._pending_errors:
            raise self._pending_errors.pop(0)
        out_of_range = self._live_out_of_range()
        records: dict[TopicPartition, list[ConsumerRecord]] = {}
        next_offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for completed in self._completed:
            state = self.assignment.get(completed.tp)
            # Only hand out what still continues the current position: same offset and same leader. Data
            # read from a superseded leader may lie past where the new one diverges (validation only
            # checked the position), so it is dropped and fetched again from the current leader.
            if state is None or not state.is_fetchable or state.position != completed.position:
                continue
            state.position = FetchPosition(completed.next_offset, completed.last_epoch, state.position.current_leader)
            self._record_consumed(state, completed)
            if completed.records:
                records.setdefault(completed.tp, []).extend(completed.records)
            next_offsets[completed.tp] = OffsetAndMetadata(completed.next_offset, "", completed.last_epoch)
        self._completed = []
        if not records and out_of_range:
            raise OffsetOutOfRangeError(
                f"fetch positions out of range: {', '.join(f'{tp} at {o}' for tp, o in sorted(out_of_range.items()))}",
                out_of_range,
            )
        return ConsumerRecords(records, {tp: next_offsets[tp] for tp in records})

    def _live_out_of_range(self) -> dict[TopicPartition, int]:
        """The out-of-range answers that still apply: same offset, still fetching; the rest are dropped."""
        for tp, offset in list(self._out_of_range.items()):
            s = self.assignment.get(tp)
            if s is None or s.state != FetchState.FETCHING or s.position is None or s.position.offset != offset:
                del self._out_of_range[tp]
        return dict(self._out_of_range)

    # --- requests out -------------------------------------------------------------------------
    def poll_requests(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        """Everything to send now: metadata refresh, committed-offset fetch, commits, resets,
        validations, offsets-for-times lookups and fetches."""
        self._expire(now_ms)
        out: list[tuple[int, ClientRequest]] = []
        if not self._metadata_in_flight and self.metadata.should_update(now_ms):
            node = self._metadata_node()
            if node is not None:
                request = self.metadata.build_request(now_ms)
                self._metadata_in_flight = True
                out.append((node, self._track(request, _InFlight(node, now_ms, ()))))
        out.extend(self._committed_offset_requests(now_ms))
        out.extend(self._commit_requests(now_ms))
        out.extend(self._reset_requests(now_ms))
        self._validate_positions_on_metadata_change()
        out.extend(self._validation_requests(now_ms))
        out.extend(self._lookup_requests(now_ms))
        out.extend(self._fetch_requests(now_ms))
        return self._api_versions_requests(now_ms) + out

    def _api_versions_requests(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        """ApiVersions to every broker the metadata lists and every leader a validation waits on."""
        if self.protocol == "pre-kip-320":
            return []  # nothing it sends depends on the broker's versions
        nodes = set(self.metadata.brokers)
        for s in self.assignment.values():
            if s.state == FetchState.AWAIT_VALIDATION and s.position is not None and s.position.current_leader.leader is not None:
                nodes.add(s.position.current_leader.leader)
        out: list[tuple[int, ClientRequest]] = []
        for node in sorted(nodes):
            if node in self._api_versions or node in self._api_versions_asked:
                continue
            not_before, version = self._api_versions_retry.get(node, (0, ApiVersionsRequest().version))
            if now_ms < not_before:
                continue
            request = ApiVersionsRequest(version=version)
            self._api_versions_asked[node] = version
            out.append((node, self._track(request, _InFlight(node, now_ms, ()))))
        return out

    def _on_api_versions(self, node_id: int, response: ApiVersionsResponse, now_ms: int) -> None:
        if response.error_code == Errors.NONE:
            self._api_versions[node_id] = response.node_api_versions
            self._api_versions_retry.pop(node_id, None)
            return
        own = response.node_api_versions.version_range(ApiKey.API_VERSIONS)
        if response.error_code == Errors.UNSUPPORTED_VERSION and own is not None:
            # Kafka's client retries at the newest version the broker listed, at once.
            self._api_versions_retry[node_id] = (now_ms, min(own.max_version, ApiVersionsRequest().version))
        else:
            self._api_versions_retry[node_id] = (now_ms + self.retry_backoff_ms, ApiVersionsRequest().version)

    def _track(self, request: ClientRequest, flight: _InFlight) -> ClientRequest:
        flight.request = request
        self._in_flight[id(request)] = flight
        return request

    def _metadata_node(self) -> int | None:
        nodes = sorted(self.metadata.brokers) or list(self.bootstrap)
        if not nodes:
            return None
        node = nodes[self._next_metadata_node % len(nodes)]
        self._next_metadata_node += 1  # rotate, so one dead node cannot starve refreshes
        return node

    def _committed_offset_requests(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        waiting = [
            tp
            for tp, s in self.assignment.items()
            if s.state == FetchState.INITIALIZING and not s.committed_in_flight and now_ms >= s.next_retry_ms
        ]
        if not waiting:
            return []
        if self.group_id is None or self.coordinator_id is None:
            for tp in waiting:
                self._reset_or_raise(tp, "no_position", now_ms)
            return []
        for tp in waiting:
            self.assignment[tp].committed_in_flight = True
        request = OffsetFetchRequest(self.group_id, tuple(sorted(waiting)))
        return [(self.coordinator_id, self._track(request, _InFlight(self.coordinator_id, now_ms, tuple(waiting))))]

    def _commit_requests(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        if not self._pending_commits or self.group_id is None or self.coordinator_id is None:
            return []
        out: list[tuple[int, ClientRequest]] = []
        for offsets in self._pending_commits:
            request = OffsetCommitRequest(
                self.group_id,
                tuple(
                    OffsetCommitPartition(
                        tp.topic,
                        tp.partition,
                        om.offset,
                        epoch_or_sentinel(om.leader_epoch) if self.protocol == "kip-320" else NO_EPOCH,
                        om.metadata,
                    )
                    for tp, om in sorted(offsets.items())
                ),
            )
            out.append((self.coordinator_id, self._track(request, _InFlight(self.coordinator_id, now_ms, tuple(offsets)))))
        self._pending_commits = []
        return out

    def _by_leader(self, tps: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
        groups: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            leader = self.metadata.current_leader(tp).leader
            if leader is None:
                self.metadata.request_update()
                continue
            groups.setdefault(leader, []).append(tp)
        return groups

    def _reset_requests(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        due = [
            tp
            for tp, s in self.assignment.items()
            if s.state == FetchState.AWAIT_RESET and not s.reset_in_flight and now_ms >= s.next_retry_ms
        ]
        out: list[tuple[int, ClientRequest]] = []
        for node, tps in sorted(self._by_leader(due).items()):
            parts = []
            resets: dict[TopicPartition, ResetPolicy] = {}
            for tp in tps:
                s = self.assignment[tp]
                strategy = s.reset_strategy or s.reset_policy
                resets[tp] = strategy
                s.reset_in_flight = True
                ts = EARLIEST_TIMESTAMP if strategy == "earliest" else LATEST_TIMESTAMP
                parts.append(ListOffsetsPartition(tp.topic, tp.partition, ts, self._current_leader_epoch(tp)))
            request = ListOffsetsRequest(tuple(parts), isolation_level=self.isolation_level)
            out.append((node, self._track(request, _InFlight(node, now_ms, tuple(tps), resets=resets))))
        return out

    def _current_leader_epoch(self, tp: TopicPartition) -> int:
        if self.protocol == "pre-kip-320":
            return NO_EPOCH
        return epoch_or_sentinel(self.metadata.current_leader(tp).epoch)

    def _validation_requests(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        if self.protocol == "pre-kip-320":
            return []
        groups: dict[int, list[tuple[TopicPartition, FetchPosition]]] = {}
        for tp, s in self.assignment.items():
            if s.state != FetchState.AWAIT_VALIDATION or s.position is None or now_ms < s.next_retry_ms:
                continue
            if s.validation_sent_for == s.position:
                continue  # already asked for exactly this position
            leader = s.position.current_leader.leader
            if leader is None:
                self.metadata.request_update()  # e.g. waiting for metadata to reach a committed epoch
                continue
            versions = self._api_versions.get(leader)
            if versions is None:
                continue  # wait for the broker's ApiVersions answer (asked in this same round)
            if not has_usable_offset_for_leader_epoch_version(versions):
                s.transition(FetchState.FETCHING, s.position)  # `completeValidation`: it cannot validate
                continue
            groups.setdefault(leader, []).append((tp, s.position))
        out: list[tuple[int, ClientRequest]] = []
        for node, entries in sorted(groups.items()):
            parts = []
            for tp, pos in entries:
                self.assignment[tp].validation_sent_for = pos
                parts.append(
                    OffsetForLeaderPartition(
                        tp.topic, tp.partition, epoch_or_sentinel(pos.offset_epoch), epoch_or_sentinel(pos.current_leader.epoch)
                    )
                )
            version = self._api_versions[node].latest_usable_version(
                ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, OFFSET_FOR_LEADER_EPOCH_VERSION
            )
            request = OffsetsForLeaderEpochRequest(tuple(parts), version=version)
            flight = _InFlight(node, now_ms, tuple(tp for tp, _ in entries), positions=dict(entries))
            out.append((node, self._track(request, flight)))
        return out

    def _lookup_requests(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        out: list[tuple[int, ClientRequest]] = []
        for lookup in self._lookups:
            if lookup.done:
                continue
            due = [
                tp
                for tp in lookup.timestamps
                if tp not in lookup.result and tp not in lookup._in_flight and now_ms >= lookup._retry_ms.get(tp, 0)
            ]
            for node, tps in sorted(self._by_leader(due).items()):
                parts = tuple(
                    ListOffsetsPartition(tp.topic, tp.partition, lookup.timestamps[tp], self._current_leader_epoch(tp))
                    for tp in tps
                )
                lookup._in_flight.update(tps)
                request = ListOffsetsRequest(parts, isolation_level=self.isolation_level)
                out.append((node, self._track(request, _InFlight(node, now_ms, tuple(tps), lookup=lookup))))
        return out

    def _fetch_requests(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        buffered = {c.tp for c in self._completed} | set(self._live_out_of_range())
        groups: dict[int, list[FetchPartition]] = {}
        positions: dict[int, dict[TopicPartition, FetchPosition]] = {}
        for tp, s in self.assignment.items():
            if not s.is_fetchable or s.position is None or s.fetch_in_flight or tp in buffered or now_ms < s.next_retry_ms:
                continue
            node = s.preferred_read_replica if s.preferred_read_replica is not None else s.position.current_leader.leader
            if node is None:
                self.metadata.request_update()
                continue
            if node in self._fetch_nodes:
                continue  # one fetch per node at a time
            epoch = NO_EPOCH if self.protocol == "pre-kip-320" else epoch_or_sentinel(s.position.current_leader.epoch)
            groups.setdefault(node, []).append(FetchPartition(tp.topic, tp.partition, s.position.offset, epoch))
            positions.setdefault(node, {})[tp] = s.position
        out: list[tuple[int, ClientRequest]] = []
        for node, parts in sorted(groups.items()):
            for p in parts:
                self.assignment[p.tp].fetch_in_flight = True
            self._fetch_nodes.add(node)
            request = FetchRequest(tuple(parts), isolation_level=self.isolation_level)
            flight = _InFlight(node, now_ms, tuple(p.tp for p in parts), positions=positions[node])
            out.append((node, self._track(request, flight)))
        return out

    # --- responses in -------------------------------------------------------------------------
    def on_response(self, node_id: int, request: ClientRequest, response: ClientResponse, now_ms: int) -> None:
        flight = self._in_flight.pop(id(request), None)
        if flight is None:
            return  # expired or not ours
        self._clear_in_flight(request, flight)
        if isinstance(response, ApiVersionsResponse):
            self._on_api_versions(node_id, response, now_ms)
        elif isinstance(response, MetadataResponse):
            self._on_metadata(response, now_ms)
        elif isinstance(response, FetchResponse) and isinstance(request, FetchRequest):
            self._on_fetch(flight, request, response, now_ms)
        elif isinstance(response, OffsetsForLeaderEpochResponse):
            self._on_validation(flight, response, now_ms)
        elif isinstance(response, ListOffsetsResponse):
            if flight.lookup is not None:
                self._on_lookup(flight.lookup, response, now_ms)
            else:
                self._on_reset(flight, response, now_ms)
        elif isinstance(response, OffsetFetchResponse):
            self._on_committed(response, now_ms)
        elif isinstance(response, OffsetCommitResponse) and isinstance(request, OffsetCommitRequest):
            self._on_commit(request, response)

    def on_request_failed(self, node_id: int, request: ClientRequest, now_ms: int) -> None:
        """No answer (disconnect, timeout): retry after backoff, and refresh metadata."""
        flight = self._in_flight.pop(id(request), None)
        if flight is None:
            return
        self._clear_in_flight(request, flight)
        self._api_versions.pop(node_id, None)  # a lost connection: its versions are asked again
        if isinstance(request, ApiVersionsRequest):
            self._api_versions_retry[node_id] = (now_ms + self.retry_backoff_ms, request.version)
            return
        if isinstance(request, MetadataRequest):
            self.metadata.failed_update(now_ms)
            return
        if isinstance(request, OffsetCommitRequest):
            self._pending_commits.append(
                {p.tp: OffsetAndMetadata(p.committed_offset, p.committed_metadata, p.committed_leader_epoch) for p in request.partitions}
            )
            return
        for tp in flight.tps:
            s = self.assignment.get(tp)
            if s is not None:
                s.next_retry_ms = now_ms + self.retry_backoff_ms
            if flight.lookup is not None:
                flight.lookup._retry_ms[tp] = now_ms + self.retry_backoff_ms
        self.metadata.request_update()

    def _expire(self, now_ms: int) -> None:
        for flight in list(self._in_flight.values()):
            if now_ms - flight.sent_ms >= self.request_timeout_ms and flight.request is not None:
                self.on_request_failed(flight.node_id, flight.request, now_ms)
        for lookup in self._lookups:
            if not lookup.done and now_ms >= lookup.deadline_ms:
                lookup.error = RequestTimedOutError("offsets_for_times timed out")
        self._lookups = [lookup for lookup in self._lookups if not lookup.done]

    def _clear_in_flight(self, request: ClientRequest, flight: _InFlight) -> None:
        if isinstance(request, ApiVersionsRequest):
            self._api_versions_asked.pop(flight.node_id, None)
        elif isinstance(request, MetadataRequest):
            self._metadata_in_flight = False
        elif isinstance(request, FetchRequest):
            self._fetch_nodes.discard(flight.node_id)
            for tp in flight.tps:
                s = self.assignment.get(tp)
                if s is not None:
                    s.fetch_in_flight = False
        elif isinstance(request, OffsetsForLeaderEpochRequest):
            for tp, pos in flight.positions.items():
                s = self.assignment.get(tp)
                if s is not None and s.validation_sent_for == pos:
                    s.validation_sent_for = None
        elif isinstance(request, ListOffsetsRequest):
            for tp in flight.tps:
                if flight.lookup is not None:
                    flight.lookup._in_flight.discard(tp)
                else:
                    s = self.assignment.get(tp)
                    if s is not None:
                        s.reset_in_flight = False
        elif isinstance(request, OffsetFetchRequest):
            for tp in flight.tps:
                s = self.assignment.get(tp)
                if s is not None:
                    s.committed_in_flight = False

    # metadata -----------------------------------------------------------------------------------
    def _on_metadata(self, response: MetadataResponse, now_ms: int) -> None:
        self.metadata.update(response, now_ms)
        self._validate_positions_on_metadata_change()

    def _validate_positions_on_metadata_change(self) -> None:
        """`validatePositionsOnMetadataChange`: on every metadata version not seen yet (including the
        first call, whoever updated the cache), re-point each position at the current leader."""
        if self._metadata_update_version == self.metadata.updates:
            return
        self._metadata_update_version = self.metadata.updates
        for tp in self.assignment:
            self._maybe_validate_position(tp)

    def _maybe_validate_position(self, tp: TopicPartition) -> bool:
        """`maybeValidatePositionForCurrentLeader`: re-point the position at the current leader; a new
        leader means validation (KIP-320) or just a new fetch target (pre-KIP-320)."""
        s = self.assignment.get(tp)
        if s is None:
            return False
        current = self.metadata.current_leader(tp)
        if self.protocol == "pre-kip-320":
            if current.leader is not None and s.position is not None and s.position.current_leader != current:
                s.seek_validated(FetchPosition(s.position.offset, s.position.offset_epoch, current))
                s.preferred_read_replica = None
            return False
        versions = None if current.leader is None else self._api_versions.get(current.leader)
        if versions is not None and not has_usable_offset_for_leader_epoch_version(versions):
            # `updatePositionLeaderNoValidation`: a pre-v3 broker cannot validate; fetch from it as is.
            if s.position is not None:
                s.seek_validated(FetchPosition(s.position.offset, s.position.offset_epoch, current))
                s.preferred_read_replica = None
            return False
        if s.state == FetchState.AWAIT_RESET or current.leader is None:
            return False
        if s.position is not None and s.position.current_leader != current:
            s.validate_position(FetchPosition(s.position.offset, s.position.offset_epoch, current))
            s.preferred_read_replica = None
        return s.state == FetchState.AWAIT_VALIDATION

    # fetch --------------------------------------------------------------------------------------
    def _on_fetch(self, flight: _InFlight, request: FetchRequest, response: FetchResponse, now_ms: int) -> None:
        sent = {p.tp: p for p in request.partitions}
        for data in response.partitions:
            if data.tp in sent and data.tp in self.assignment:
                self._on_fetch_partition(flight, sent[data.tp], data, now_ms)

    def _on_fetch_partition(self, flight: _InFlight, sent: FetchPartition, data: FetchPartitionData, now_ms: int) -> None:
        tp = sent.tp
        s = self.assignment[tp]
        fetched_position = flight.positions.get(tp)
        if s.position is None or s.position != fetched_position or s.state != FetchState.FETCHING:
            return  # stale: the position moved while the fetch was in flight
        code = data.error_code
        if code == Errors.NONE:
            if data.preferred_read_replica >= 0:
                s.preferred_read_replica = data.preferred_read_replica
            try:
                completed = self._decode(tp, s.position, data.records)
            except CorruptRecordError as e:
                self._pending_errors.append(e)  # raised by poll(), as Kafka's consumer does
                s.next_retry_ms = now_ms + self.retry_backoff_ms
                return
            if completed.records:
                self._completed.append(completed)  # handed out (and the position moved) by poll()
            elif completed.next_offset != sent.fetch_offset:
                # Only control batches or records below the fetch offset: nothing to hand out, move on.
                s.position = FetchPosition(completed.next_offset, completed.last_epoch, s.position.current_leader)
                self._record_consumed(s, completed)
            return
        from_replica = s.preferred_read_replica is not None and flight.node_id == s.preferred_read_replica
        if code == Errors.OFFSET_OUT_OF_RANGE:
            if from_replica:
                s.preferred_read_replica = None  # the read replica is behind: go back to the leader
            elif s.reset_policy == "none":
                self._out_of_range[tp] = sent.fetch_offset
            else:
                s.request_reset(s.reset_policy, "out_of_range")
            return
        if code == Errors.TOPIC_AUTHORIZATION_FAILED:
            self._pending_errors.append(TopicAuthorizationFailedError(f"not authorized to read {tp.topic}"))
            return
        if code in _REFRESH_METADATA:
            s.preferred_read_replica = None
            hint = data.current_leader
            if self.metadata.update_partition_leadership(tp, hint.leader_id, hint.leader_epoch):
                self._maybe_validate_position(tp)
            else:
                self.metadata.request_update()
        s.next_retry_ms = now_ms + self.retry_backoff_ms  # UNKNOWN_LEADER_EPOCH and the rest: plain retry

    def _decode(self, tp: TopicPartition, position: FetchPosition, raw: bytes) -> _CompletedFetch:
        """Records at or after the fetch offset, each with its batch's leader epoch; the position after
        the last batch read (control batches advance it too)."""
        records: list[ConsumerRecord] = []
        epochs: list[tuple[int, int]] = []
        next_offset = position.offset
        last_epoch = position.offset_epoch
        for batch in iter_batches(raw, allow_partial_tail=True):
            if batch.last_offset < next_offset:
                continue
            epoch = epoch_or_none(batch.partition_leader_epoch)
            if not batch.is_control:
                for r in batch.records():
                    if r.offset >= next_offset:
                        records.append(
                            ConsumerRecord(
                                tp.topic,
                                tp.partition,
                                r.offset,
                                r.timestamp,
                                batch.timestamp_type,
                                r.key,
                                r.value,
                                tuple(r.headers),
                                epoch,
                            )
                        )
            if epoch is not None:
                epochs.append((epoch, max(batch.base_offset, next_offset)))
            next_offset = batch.next_offset
            last_epoch = epoch
        return _CompletedFetch(tp, position, records, next_offset, last_epoch, epochs)

    def _drop_buffered(self, tp: TopicPartition) -> None:
        self._completed = [c for c in self._completed if c.tp != tp]
        self._out_of_range.pop(tp, None)

    # validation ---------------------------------------------------------------------------------
    def _on_validation(self, flight: _InFlight, response: OffsetsForLeaderEpochResponse, now_ms: int) -> None:
        self._truncation_batch = {}
        for answer in response.partitions:
            request_position = flight.positions.get(answer.tp)
            s = self.assignment.get(answer.tp)
            if request_position is None or s is None:
                continue
            if answer.error_code != Errors.NONE:
                if answer.error_code == Errors.TOPIC_AUTHORIZATION_FAILED:
                    self._pending_errors.append(TopicAuthorizationFailedError(f"not authorized to describe {answer.tp.topic}"))
                elif answer.error_code != Errors.UNKNOWN_LEADER_EPOCH:
                    self.metadata.request_update()
                s.next_retry_ms = now_ms + self.retry_backoff_ms
                continue
            self._complete_validation(answer.tp, s, request_position, answer.leader_epoch, answer.end_offset, now_ms)
        if self._truncation_batch:
            self._pending_errors.append(
                LogTruncationError(
                    offset_out_of_range_partitions={tp: off for tp, (off, _) in self._truncation_batch.items()},
                    divergent_offsets={tp: div for tp, (_, div) in self._truncation_batch.items() if div is not None},
                )
            )
            self._truncation_batch = {}

    def _complete_validation(
        self, tp: TopicPartition, s: PartitionState, request_position: FetchPosition, epoch: int, end_offset: int, now_ms: int
    ) -> None:
        """`maybeCompleteValidation` (SPEC (e)): accept, rewind precisely, reset, or report truncation."""
        if s.state != FetchState.AWAIT_VALIDATION or s.position != request_position:
            return  # stale: the position moved since the request
        position = s.position
        if s.consumed is not None and end_offset != NO_OFFSET and epoch != NO_EPOCH:
            self._complete_validation_with_history(tp, s, s.consumed, position, epoch, end_offset, now_ms)
            return
        if end_offset == NO_OFFSET or epoch == NO_EPOCH:
            if s.reset_policy != "none":
                self._report_truncation(tp, s, position, None, None, "reset", now_ms)
                s.request_reset(s.reset_policy, "truncation")
            else:
                self._report_truncation(tp, s, position, None, None, "raised", now_ms)
                self._truncation_batch[tp] = (position.offset, None)
                s.next_retry_ms = now_ms + self.retry_backoff_ms
        elif end_offset < position.offset:
            if s.reset_policy != "none":
                self._report_truncation(tp, s, position, end_offset, epoch, "rewound", now_ms)
                s.seek_validated(FetchPosition(end_offset, epoch, position.current_leader))
            else:
                self._report_truncation(tp, s, position, end_offset, epoch, "raised", now_ms)
                self._truncation_batch[tp] = (position.offset, OffsetAndMetadata(end_offset, "", epoch))
                s.next_retry_ms = now_ms + self.retry_backoff_ms
        else:
            s.transition(FetchState.FETCHING, position)

    def _complete_validation_with_history(
        self,
        tp: TopicPartition,
        s: PartitionState,
        consumed: LeaderEpochCache,
        position: FetchPosition,
        epoch: int,
        end_offset: int,
        now_ms: int,
    ) -> None:
        """Like `_complete_validation`, but the divergence point is the core's `truncation_offset` over
        the consumed epochs (the follower's rule), not the leader's end offset alone: it also catches
        records consumed in an epoch the new leader holds under another epoch. Not final (our history
        has epochs the leader lacks): rewind there and validate again."""
        answer = truncation_offset(consumed, position.offset, epoch, end_offset)
        if answer is None or answer[0] >= position.offset:
            s.transition(FetchState.FETCHING, position)
            return
        divergent, final = answer
        history = consumed.copy()
        history.truncate_from_end(divergent)
        common = history.latest_epoch if history.latest_epoch is not None else epoch
        if s.reset_policy == "none":
            self._report_truncation(tp, s, position, divergent, common, "raised", now_ms)
            self._truncation_batch[tp] = (position.offset, OffsetAndMetadata(divergent, "", common))
            s.next_retry_ms = now_ms + self.retry_backoff_ms
            return
        self._report_truncation(tp, s, position, divergent, common, "rewound", now_ms)
        rewound = FetchPosition(divergent, common, position.current_leader)
        if final:
            s.seek_validated(rewound)
        else:
            s.seek_unvalidated(rewound)
        s.consumed = history

    def _record_consumed(self, s: PartitionState, completed: _CompletedFetch) -> None:
        if s.consumed is not None:
            for epoch, offset in completed.epochs:
                s.consumed.assign(epoch, offset)

    def _restart_history(self, s: PartitionState) -> None:
        """A position set by seek, reset or commit: the only history known is the epoch before it."""
        if not self.track_consumed_epochs:
            return
        s.consumed = LeaderEpochCache()
        if s.position is not None and s.position.offset_epoch is not None:
            s.consumed.assign(s.position.offset_epoch, s.position.offset)

    def _report_truncation(
        self,
        tp: TopicPartition,
        s: PartitionState,
        position: FetchPosition,
        divergent_offset: int | None,
        divergent_epoch: int | None,
        resolution: TruncationResolution,
        now_ms: int,
    ) -> None:
        key = (position, divergent_offset, divergent_epoch)
        if s.reported_truncation == key:
            return  # the same truncation seen again (policy none retries): report it once
        s.reported_truncation = key
        affected = None if divergent_offset is None else position.offset - divergent_offset
        self.truncations.append(
            TruncationEvent(tp, position, divergent_offset, divergent_epoch, affected, resolution, now_ms)
        )

    # resets and lookups -------------------------------------------------------------------------
    def _reset_or_raise(self, tp: TopicPartition, reason: ResetReason, now_ms: int) -> None:
        s = self.assignment[tp]
        if s.reset_policy == "none":
            if s.state == FetchState.INITIALIZING:
                self._pending_errors.append(NoOffsetForPartitionError({tp}))
                s.next_retry_ms = now_ms + self.request_timeout_ms  # raise again later, not in a loop
            return
        s.request_reset(s.reset_policy, reason)

    def _on_reset(self, flight: _InFlight, response: ListOffsetsResponse, now_ms: int) -> None:
        for answer in response.partitions:
            strategy = flight.resets.get(answer.tp)
            s = self.assignment.get(answer.tp)
            if strategy is None or s is None:
                continue
            if answer.error_code != Errors.NONE or answer.offset < 0:
                # An error, or NONE without an offset (UNKNOWN_OFFSET, no position): retry the reset.
                if answer.error_code in _REFRESH_METADATA:
                    self.metadata.request_update()
                s.next_retry_ms = now_ms + self.retry_backoff_ms
                continue
            self._reset_position(answer, s, strategy, now_ms)

    def _reset_position(self, answer: ListOffsetsPartitionResponse, s: PartitionState, strategy: ResetPolicy, now_ms: int) -> None:
        tp = answer.tp
        position = FetchPosition(answer.offset, None, self.metadata.current_leader(tp))
        if answer.leader_epoch >= 0:
            self.metadata.update_last_seen_epoch_if_newer(tp, answer.leader_epoch)
        if s.state != FetchState.AWAIT_RESET or s.reset_strategy != strategy:
            return  # a seek or another reset happened meanwhile
        reason, from_offset = s.reset_reason, s.reset_from
        s.seek_unvalidated(position)
        self._restart_history(s)
        self.resets.append(
            OffsetResetEvent(tp, strategy, reason, from_offset, answer.offset, epoch_or_none(answer.leader_epoch), now_ms)
        )

    def _on_lookup(self, lookup: OffsetsForTimesLookup, response: ListOffsetsResponse, now_ms: int) -> None:
        for answer in response.partitions:
            tp = answer.tp
            if tp not in lookup.timestamps:
                continue
            if answer.error_code != Errors.NONE:
                if answer.error_code in _REFRESH_METADATA:
                    self.metadata.request_update()
                lookup._retry_ms[tp] = now_ms + self.retry_backoff_ms
                continue
            if answer.offset < 0:
                lookup.result[tp] = None
            else:
                lookup.result[tp] = OffsetAndTimestamp(answer.offset, answer.timestamp, answer.leader_epoch)
                if answer.leader_epoch >= 0:
                    self.metadata.update_last_seen_epoch_if_newer(tp, answer.leader_epoch)

    # committed offsets ---------------------------------------------------------------------------
    def _on_committed(self, response: OffsetFetchResponse, now_ms: int) -> None:
        for answer in response.partitions:
            tp = answer.tp
            s = self.assignment.get(tp)
            if s is None or s.state != FetchState.INITIALIZING:
                continue
            if answer.error_code != Errors.NONE:
                s.next_retry_ms = now_ms + self.retry_backoff_ms
                continue
            if answer.committed_offset < 0:
                self._reset_or_raise(tp, "no_position", now_ms)
                continue
            epoch = epoch_or_none(answer.committed_leader_epoch) if response.version >= 5 else None
            if self.protocol == "pre-kip-320":
                epoch = None
            self.committed[tp] = OffsetAndMetadata(answer.committed_offset, answer.metadata, epoch)
            if epoch is not None:
                self.metadata.update_last_seen_epoch_if_newer(tp, epoch)  # bump first, then read the leader
            s.seek_unvalidated(FetchPosition(answer.committed_offset, epoch, self.metadata.current_leader(tp)))
            self._restart_history(s)

    def _on_commit(self, request: OffsetCommitRequest, response: OffsetCommitResponse) -> None:
        sent = {p.tp: p for p in request.partitions}
        for answer in response.partitions:
            p = sent.get(answer.tp)
            if p is not None and answer.error_code == Errors.NONE:
                self.committed[answer.tp] = OffsetAndMetadata(p.committed_offset, p.committed_metadata, p.committed_leader_epoch)

    def _state(self, tp: TopicPartition) -> PartitionState:
        state = self.assignment.get(tp)
        if state is None:
            raise ValueError(f"{tp} is not assigned")
        return state

"""The follower side of replication on one broker, sans-IO: truncate to the leader, then fetch.

Mirrors Kafka's `kafka.server.AbstractFetcherThread` / `ReplicaFetcherThread` (partition fetch states
Truncating / Fetching, `truncateToEpochEndOffsets`, `truncateOnFetchResponse`, `handleOutOfRangeError`,
`onPartitionFenced`) and `ReplicaManager.initialFetchOffset`. The truncation point always comes from the
Rust core's `truncation_offset` (SPEC (d)); this module only moves state and bytes.

What the leader can answer comes from `leader_api_versions(leader_id)` (the broker's ApiVersions
table): no OffsetForLeaderEpoch -> truncate to the high watermark (`isOffsetForLeaderEpochSupported`),
Fetch below v12 -> no truncation on fetch. Deliberate difference: Kafka decides both from the
inter-broker protocol version, one setting for the cluster; here per leader, from its own table, as
there is no IBP model.

`protocol="pre-kip-320"` is the pre-KIP-101 follower: on becoming follower it truncates to its high
watermark and fetches by offset only (no epochs in its requests, no OffsetsForLeaderEpoch).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from epochguard._core import truncation_offset
from epochguard.errors import CorruptRecordError, Errors
from epochguard.protocol.api_versions import ApiKey, NodeApiVersions
from epochguard.protocol.messages import (
    EpochEndOffset,
    FetchPartition,
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderPartition,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    Request,
    Response,
)
from epochguard.storage.log import AppendInfo, PartitionLog, UnexpectedAppendOffsetError
from epochguard.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, NO_EPOCH, EpochProtocol, TopicPartition

if TYPE_CHECKING:
    from epochguard.broker.partition import Partition

__all__ = ["FetchState", "PartitionFetchState", "TruncationRecord", "ReplicaFetcher"]


class FetchState(enum.Enum):
    TRUNCATING = "truncating"  # waiting for an OffsetsForLeaderEpoch answer
    FETCHING = "fetching"
    OUT_OF_RANGE = "out_of_range"  # asking the leader for its log end (then start) offset
    PARKED = "parked"  # fenced by the leader with our epoch unchanged: wait for new leadership


@dataclass(slots=True)
class PartitionFetchState:
    partition: Partition
    leader_id: int
    current_leader_epoch: int
    fetch_offset: int
    state: FetchState
    initial_fetch_offset: int  # the HW when we became follower: the fallback truncation point
    last_fetched_epoch: int | None = None
    delay_until_ms: int = 0
    in_flight: bool = False
    leader_end_offset: int | None = None  # OUT_OF_RANGE: the leader's LEO once known
    truncate_on_fetch: bool = True  # this leader answers Fetch v12+ (LastFetchedEpoch, DivergingEpoch)


@dataclass(frozen=True, slots=True)
class TruncationRecord:
    """A follower truncation, for observers (the simulator's invariants, logs)."""

    partition: TopicPartition
    leader_epoch: int
    from_offset: int
    to_offset: int
    reason: str  # "offsets_for_leader_epoch" | "diverging_epoch" | "high_watermark" | "out_of_range"
    at_ms: int


@dataclass(slots=True)
class _InFlight:
    request: Request  # held so that its id(), the key, is not reused while it is in flight
    sent_ms: int
    states: tuple[PartitionFetchState, ...] = field(default_factory=tuple)


class ReplicaFetcher:
    """Fetches, for every follower partition of one broker, from its leader (see module docstring)."""

    def __init__(
        self,
        broker_id: int,
        broker_epoch: Callable[[], int] = lambda: -1,
        *,
        protocol: EpochProtocol = "kip-320",
        truncate_on_fetch: bool = True,
        fetch_backoff_ms: int = 1_000,
        request_timeout_ms: int = 30_000,
        fetch_max_bytes: int = 1 << 20,
        leader_api_versions: Callable[[int], NodeApiVersions | None] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self._broker_epoch = broker_epoch  # read at each fetch: the broker re-registers under a new epoch
        # What each leader serves (Kafka decides by inter-broker protocol version); None = unknown,
        # taken as a current broker.
        self.leader_api_versions = leader_api_versions or (lambda _leader: None)
        self.protocol: EpochProtocol = protocol
        self.truncate_on_fetch = truncate_on_fetch  # IBP >= 2.7: truncate from Fetch's DivergingEpoch
        self.fetch_backoff_ms = fetch_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.states: dict[TopicPartition, PartitionFetchState] = {}
        self.truncations: list[TruncationRecord] = []
        self.failed: dict[TopicPartition, str] = {}  # partitions parked after an impossible append
        self._in_flight: dict[int, _InFlight] = {}  # id(request) -> what was sent

    # --- partitions in and out ----------------------------------------------------------------
    def add_partition(self, partition: Partition, now_ms: int) -> None:
        """Start following `partition.leader_id` at `partition.leader_epoch` (`makeFollower` + initial fetch offset)."""
        log = partition.log
        if partition.leader_id is None:
            self.states.pop(partition.tp, None)  # leaderless: nothing to fetch from until the next change
            return
        self.failed.pop(partition.tp, None)
        hw = log.high_watermark
        latest = log.latest_epoch
        versions = self.leader_api_versions(partition.leader_id)
        epochs_supported = versions is None or versions.version_range(ApiKey.OFFSET_FOR_LEADER_EPOCH) is not None
        fetch_range = None if versions is None else versions.version_range(ApiKey.FETCH)
        fetch_v12 = fetch_range is not None and fetch_range.max_version >= 12
        truncate_on_fetch = self.truncate_on_fetch and (versions is None or fetch_v12)
        state = PartitionFetchState(
            partition=partition,
            leader_id=partition.leader_id,
            current_leader_epoch=partition.leader_epoch,
            fetch_offset=hw,
            state=FetchState.FETCHING,
            initial_fetch_offset=hw,
            truncate_on_fetch=truncate_on_fetch,
        )
        if self.protocol == "pre-kip-320":
            self._truncate(state, hw, "high_watermark", now_ms)
        elif latest is not None and truncate_on_fetch:
            state.fetch_offset = log.log_end_offset
            state.last_fetched_epoch = latest
        elif latest is not None and epochs_supported:
            state.state = FetchState.TRUNCATING
        else:
            self._truncate(state, hw, "high_watermark", now_ms)
        self.states[partition.tp] = state

    def remove_partition(self, tp: TopicPartition) -> None:
        self.states.pop(tp, None)

    # --- requests out -------------------------------------------------------------------------
    def poll_requests(self, now_ms: int) -> list[tuple[int, Request]]:
        """Requests to send now, at most one per (leader, kind) at a time; expired ones are retried."""
        for key, flight in list(self._in_flight.items()):
            if now_ms - flight.sent_ms >= self.request_timeout_ms:
                del self._in_flight[key]
                self._release(flight)
        by_leader: dict[int, dict[FetchState, list[PartitionFetchState]]] = {}
        for s in self.states.values():
            if s.in_flight or s.state == FetchState.PARKED or now_ms < s.delay_until_ms:
                continue
            by_leader.setdefault(s.leader_id, {}).setdefault(s.state, []).append(s)
        out: list[tuple[int, Request]] = []
        for leader, groups in sorted(by_leader.items()):
            truncating = groups.get(FetchState.TRUNCATING)
            if truncating:
                request = self._offsets_for_leader_epoch_request(truncating)
                out.append((leader, self._track(request, truncating, now_ms)))
            fetching = groups.get(FetchState.FETCHING)
            if fetching:
                out.append((leader, self._track(self._fetch_request(fetching), fetching, now_ms)))
            for s in groups.get(FetchState.OUT_OF_RANGE, []):
                out.append((leader, self._track(self._list_offsets_request(s), [s], now_ms)))
        return out

    def fetch_at_once(self, tp: TopicPartition, leader_id: int, leader_epoch: int, now_ms: int) -> FetchRequest | None:
        """A fetch of `tp` alone from `leader_id` in `leader_epoch`, besides the regular one that may be in
        flight: what a follower's fetch parked in the leader's purgatory becomes when an append completes
        it (`DelayedFetch`), for a caller that delivers it at once (`epochguard.sim.Cluster.replicate_at_once`).
        None unless `tp` is fetching from that leader in that epoch and not backing off. Its answer goes to
        `on_fetch_at_once`; the regular fetch's answer, for an older offset by then, is ignored as stale."""
        s = self.states.get(tp)
        if (s is None or s.state != FetchState.FETCHING or s.leader_id != leader_id
                or s.current_leader_epoch != leader_epoch or now_ms < s.delay_until_ms):
            return None
        return self._fetch_request([s])

    def on_fetch_at_once(self, node_id: int, request: FetchRequest, response: FetchResponse, now_ms: int) -> None:
        """The answer to `fetch_at_once`: appended as any fetch answer (same checks, same truncation)."""
        sent = {p.tp: p for p in request.partitions}
        for data in response.partitions:
            if data.tp in sent:
                self._on_fetch_data(node_id, sent[data.tp], data, now_ms)

    def _track(self, request: Request, states: list[PartitionFetchState], now_ms: int) -> Request:
        for s in states:
            s.in_flight = True
        self._in_flight[id(request)] = _InFlight(request, now_ms, tuple(states))
        return request

    def _fetch_request(self, states: list[PartitionFetchState]) -> FetchRequest:
        kip320 = self.protocol == "kip-320"
        return FetchRequest(
            partitions=tuple(
                FetchPartition(
                    s.partition.tp.topic,
                    s.partition.tp.partition,
                    fetch_offset=s.fetch_offset,
                    current_leader_epoch=s.current_leader_epoch if kip320 else NO_EPOCH,
                    last_fetched_epoch=(
                        s.last_fetched_epoch
                        if kip320 and s.truncate_on_fetch and s.last_fetched_epoch is not None
                        else NO_EPOCH
                    ),
                    log_start_offset=s.partition.log.log_start_offset,
                    partition_max_bytes=self.fetch_max_bytes,
                )
                for s in states
            ),
            replica_id=self.broker_id,
            replica_epoch=self._broker_epoch(),
        )

    def _offsets_for_leader_epoch_request(self, states: list[PartitionFetchState]) -> OffsetsForLeaderEpochRequest:
        return OffsetsForLeaderEpochRequest(
            partitions=tuple(
                OffsetForLeaderPartition(
                    s.partition.tp.topic,
                    s.partition.tp.partition,
                    leader_epoch=s.partition.log.latest_epoch if s.partition.log.latest_epoch is not None else NO_EPOCH,
                    current_leader_epoch=s.current_leader_epoch,
                )
                for s in states
            ),
            replica_id=self.broker_id,
        )

    def _list_offsets_request(self, s: PartitionFetchState) -> ListOffsetsRequest:
        target = LATEST_TIMESTAMP if s.leader_end_offset is None else EARLIEST_TIMESTAMP
        epoch = s.current_leader_epoch if self.protocol == "kip-320" else NO_EPOCH
        tp = s.partition.tp
        partition = ListOffsetsPartition(tp.topic, tp.partition, target, epoch)
        return ListOffsetsRequest((partition,), replica_id=self.broker_id)

    # --- responses in -------------------------------------------------------------------------
    def on_response(self, node_id: int, request: Request, response: Response, now_ms: int) -> None:
        flight = self._in_flight.pop(id(request), None)
        if flight is None:
            return  # timed out and already retried, or not ours
        self._release(flight)
        if isinstance(response, FetchResponse) and isinstance(request, FetchRequest):
            sent = {p.tp: p for p in request.partitions}
            for data in response.partitions:
                if data.tp in sent:
                    self._on_fetch_data(node_id, sent[data.tp], data, now_ms)
        elif isinstance(response, OffsetsForLeaderEpochResponse) and isinstance(request, OffsetsForLeaderEpochRequest):
            sent_epochs = {p.tp: p.current_leader_epoch for p in request.partitions}
            for answer in response.partitions:
                if answer.tp in sent_epochs:
                    self._on_epoch_end_offset(node_id, answer, sent_epochs[answer.tp], now_ms)
        elif isinstance(response, ListOffsetsResponse) and isinstance(request, ListOffsetsRequest):
            for offset in response.partitions:
                self._on_leader_offset(node_id, offset, request.partitions[0], now_ms)

    def on_request_failed(self, node_id: int, request: Request, now_ms: int) -> None:
        flight = self._in_flight.pop(id(request), None)
        if flight is not None:
            self._release(flight, backoff_from_ms=now_ms)

    def _release(self, flight: _InFlight, backoff_from_ms: int | None = None) -> None:
        """The partitions of a request are free to send again: at once, or (after a failure) once the
        fetch back-off from `backoff_from_ms` has passed."""
        for s in flight.states:
            s.in_flight = False
            if backoff_from_ms is not None:
                s.delay_until_ms = backoff_from_ms + self.fetch_backoff_ms

    def _current(self, node_id: int, tp: TopicPartition, sent_epoch: int) -> PartitionFetchState | None:
        """The partition's state if the answer is for its current leadership (else stale: ignore)."""
        s = self.states.get(tp)
        if s is None or s.leader_id != node_id:
            return None
        if self.protocol == "kip-320" and sent_epoch >= 0 and sent_epoch != s.current_leader_epoch:
            return None
        return s

    def _on_error(self, s: PartitionFetchState, code: Errors, now_ms: int) -> None:
        if code == Errors.FENCED_LEADER_EPOCH:
            s.state = FetchState.PARKED  # the leader has moved on: wait for our own leadership update
        else:  # UNKNOWN_LEADER_EPOCH (leader not there yet), NOT_LEADER_OR_FOLLOWER, storage errors...
            s.delay_until_ms = now_ms + self.fetch_backoff_ms

    def _on_fetch_data(self, node_id: int, sent: FetchPartition, data: FetchPartitionData, now_ms: int) -> None:
        s = self._current(node_id, sent.tp, sent.current_leader_epoch)
        if s is None or s.state != FetchState.FETCHING or s.fetch_offset != sent.fetch_offset:
            return
        if data.error_code == Errors.OFFSET_OUT_OF_RANGE:
            s.state, s.leader_end_offset = FetchState.OUT_OF_RANGE, None
            return
        if data.error_code != Errors.NONE:
            self._on_error(s, data.error_code, now_ms)
            return
        log = s.partition.log
        if self.protocol == "kip-320" and data.diverging_epoch is not None and data.diverging_epoch.epoch >= 0:
            diverging = data.diverging_epoch
            self._truncate_to_leader(s, diverging.epoch, diverging.end_offset, "diverging_epoch", now_ms)
            return
        if data.records:
            try:
                info = self._append(log, data.records)
            except CorruptRecordError:
                s.delay_until_ms = now_ms + self.fetch_backoff_ms  # a bad response: fetch again later
                return
            except UnexpectedAppendOffsetError as e:
                # The leader's batch starts below our end: the logs diverged in a way offsets cannot
                # repair. Kafka marks the partition failed until the next leadership change.
                s.state = FetchState.PARKED
                self.failed[s.partition.tp] = str(e)
                return
            if info is not None:
                s.fetch_offset = info.last_offset + 1
                s.last_fetched_epoch = log.latest_epoch
        log.update_high_watermark(data.high_watermark)
        log.increment_log_start_offset(data.log_start_offset)  # only ever moves it up

    @staticmethod
    def _append(log: PartitionLog, records: bytes) -> AppendInfo | None:
        """Append as follower. An empty log whose start lies inside the leader's first batch (a log
        start moved by DeleteRecords) restarts at that batch's base offset, as Kafka's
        `Partition.appendRecordsToFollowerOrFutureReplica` does; any other offset clash is raised."""
        try:
            return log.append_as_follower(records)
        except UnexpectedAppendOffsetError as e:
            leo = log.log_end_offset
            if leo != log.log_start_offset or not e.first_offset < leo <= e.last_offset:
                raise
            log.truncate_fully_and_start_at(e.first_offset)
            return log.append_as_follower(records)

    def _on_epoch_end_offset(self, node_id: int, answer: EpochEndOffset, sent_epoch: int, now_ms: int) -> None:
        s = self._current(node_id, answer.tp, sent_epoch)
        if s is None or s.state != FetchState.TRUNCATING:
            return
        if answer.error_code != Errors.NONE:
            self._on_error(s, answer.error_code, now_ms)
            return
        self._truncate_to_leader(s, answer.leader_epoch, answer.end_offset, "offsets_for_leader_epoch", now_ms)

    def _truncate_to_leader(
        self, s: PartitionFetchState, epoch: int, end_offset: int, reason: str, now_ms: int
    ) -> None:
        """SPEC (d): the core picks the offset; not final -> ask again with the new latest epoch."""
        log = s.partition.log
        answer = truncation_offset(log.leader_epoch_cache, log.log_end_offset, epoch, end_offset)
        target, final = (s.initial_fetch_offset, True) if answer is None else answer
        self._truncate(s, target, reason, now_ms)
        s.state = FetchState.FETCHING if final or s.truncate_on_fetch else FetchState.TRUNCATING

    def _truncate(self, s: PartitionFetchState, offset: int, reason: str, now_ms: int) -> None:
        log = s.partition.log
        before = log.log_end_offset
        log.truncate_to(offset)
        if log.log_end_offset != before:
            self.truncations.append(
                TruncationRecord(s.partition.tp, s.current_leader_epoch, before, log.log_end_offset, reason, now_ms)
            )
        s.fetch_offset = log.log_end_offset
        s.last_fetched_epoch = log.latest_epoch

    def _on_leader_offset(
        self, node_id: int, answer: ListOffsetsPartitionResponse, sent: ListOffsetsPartition, now_ms: int
    ) -> None:
        """Out of range: leader LEO below ours -> truncate to it; else fetch from max(leader start, LEO),
        restarting the log when the leader's start is beyond our end (`fetchOffsetAndTruncate`)."""
        s = self._current(node_id, answer.tp, sent.current_leader_epoch)
        if s is None or s.state != FetchState.OUT_OF_RANGE:
            return
        if answer.error_code != Errors.NONE:
            self._on_error(s, answer.error_code, now_ms)
            return
        log = s.partition.log
        if s.leader_end_offset is None:
            s.leader_end_offset = answer.offset
            if answer.offset < log.log_end_offset:
                self._truncate(s, answer.offset, "out_of_range", now_ms)
                s.state = FetchState.FETCHING
            return  # else ask for the leader's log start offset next
        leader_start = answer.offset
        if leader_start > log.log_end_offset:
            before = log.log_end_offset
            log.truncate_fully_and_start_at(leader_start)
            self.truncations.append(
                TruncationRecord(s.partition.tp, s.current_leader_epoch, before, leader_start, "out_of_range", now_ms)
            )
        s.fetch_offset = max(leader_start, log.log_end_offset)
        s.last_fetched_epoch = log.latest_epoch
        s.state = FetchState.FETCHING

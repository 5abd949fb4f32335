"""ListOffsets: position resets and `offsets_for_times` lookups (Kafka's `OffsetsRequestManager` /
`OffsetFetcher.resetPositionsIfNeeded` and `offsetsForTimes`, KIP-207 on the broker side).

A reset asks the partition's leader for EARLIEST or LATEST (the LSO under read_committed) and applies
the answer only if the partition still awaits that same reset; the position it sets has no offset
epoch (nothing to validate), and the answer's epoch bumps the last-seen epoch only where one is known
(`testListOffsetNoUpdateMissingEpoch`: an unknown epoch asks for no metadata). Lookups answer per
partition the first offset at or after a timestamp, with its leader epoch, or None; the same lookup
with EARLIEST or LATEST is `beginningOffsets` / `endOffsets` (Java's `OffsetFetcher.beginningOrEndOffset`:
the log start offset, and the high watermark or, under read_committed, the last stable offset).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from epochguard.client.consumer.requests.base import (
    REFRESH_METADATA,
    ClientRequest,
    ClientResponse,
    ConsumerContext,
    RequestManager,
    leaders_of,
)
from epochguard.client.consumer.subscription import FetchState
from epochguard.errors import (
    EpochGuardError,
    Errors,
    NoOffsetForPartitionError,
    RequestTimedOutError,
    UnsupportedVersionError,
)
from epochguard.protocol.messages import (
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from epochguard.types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    NO_EPOCH,
    NO_OFFSET,
    FetchPosition,
    OffsetAndTimestamp,
    OffsetResetEvent,
    ResetPolicy,
    ResetReason,
    TopicPartition,
    epoch_or_none,
    epoch_or_sentinel,
)

__all__ = ["OffsetsForTimesLookup", "OffsetsManager"]


@dataclass
class OffsetsForTimesLookup:
    """A pending `offsets_for_times` (or, with the EARLIEST / LATEST targets, `beginning_offsets` /
    `end_offsets`): `done` once every partition is answered (or `deadline_ms` passed).

    `offsets`: every answered partition's offset (-1: the broker found none); `result`: for the timestamp
    targets, the `OffsetAndTimestamp` with its leader epoch, or None.
    """

    timestamps: dict[TopicPartition, int]
    deadline_ms: int
    result: dict[TopicPartition, OffsetAndTimestamp | None] = field(default_factory=dict)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    error: EpochGuardError | None = None
    _in_flight: set[TopicPartition] = field(default_factory=set)
    _retry_ms: dict[TopicPartition, int] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.error is not None or len(self.offsets) == len(self.timestamps)

    def _due(self, now_ms: int | None) -> list[TopicPartition]:
        return [
            tp for tp in self.timestamps
            if tp not in self.offsets and tp not in self._in_flight
            and (now_ms is None or now_ms >= self._retry_ms.get(tp, 0))
        ]


@dataclass(slots=True)
class _Resets:
    strategies: dict[TopicPartition, ResetPolicy]


@dataclass(slots=True)
class _Lookup:
    lookup: OffsetsForTimesLookup
    partitions: tuple[TopicPartition, ...]


class OffsetsManager(RequestManager[_Resets | _Lookup]):
    def __init__(self, ctx: ConsumerContext) -> None:
        super().__init__(ctx)
        self.lookups: list[OffsetsForTimesLookup] = []

    def start_lookup(self, timestamps: dict[TopicPartition, int], now_ms: int,
                     timeout_ms: int | None = None) -> OffsetsForTimesLookup:
        timeout = self.ctx.request_timeout_ms if timeout_ms is None else timeout_ms
        lookup = OffsetsForTimesLookup(timestamps, now_ms + timeout)
        self.lookups.append(lookup)
        return lookup

    def reset_or_raise(self, tp: TopicPartition, reason: ResetReason, now_ms: int) -> None:
        """No position: reset by the partition's policy, or raise `NoOffsetForPartitionError` (none)."""
        s = self.ctx.subscriptions.state(tp)
        if s.reset_policy == "none":
            if s.state == FetchState.INITIALIZING:
                self.ctx.errors.append(NoOffsetForPartitionError({tp}))
                s.next_retry_ms = now_ms + self.ctx.request_timeout_ms  # raise again later, not in a loop
            return
        s.request_reset(s.reset_policy, reason)

    def _leader_epoch(self, tp: TopicPartition) -> int:
        return epoch_or_sentinel(self.ctx.metadata.current_leader(tp).epoch) if self.ctx.kip320 else NO_EPOCH

    def _resetting(self) -> set[TopicPartition]:
        return {tp for c in self._sent_contexts() if isinstance(c, _Resets) for tp in c.strategies}

    # --- requests ---------------------------------------------------------------------------------
    def poll(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        self._expire_lookups(now_ms)
        resetting = self._resetting()
        due = [tp for tp in self.ctx.subscriptions.in_state(FetchState.AWAIT_RESET, now_ms) if tp not in resetting]
        out = []
        for node, tps in sorted(leaders_of(self.ctx, due).items()):
            strategies = {}
            for tp in tps:
                s = self.ctx.subscriptions.state(tp)
                strategies[tp] = s.reset_strategy or s.reset_policy
            parts = tuple(
                ListOffsetsPartition(
                    tp.topic, tp.partition,
                    EARLIEST_TIMESTAMP if strategies[tp] == "earliest" else LATEST_TIMESTAMP,
                    self._leader_epoch(tp),
                )
                for tp in tps
            )
            request = ListOffsetsRequest(parts, isolation_level=self.ctx.isolation_level)
            out.append(self._send(node, request, now_ms, _Resets(strategies)))
        for lookup in self.lookups:
            for node, tps in sorted(leaders_of(self.ctx, lookup._due(now_ms)).items()):
                parts = tuple(
                    ListOffsetsPartition(tp.topic, tp.partition, lookup.timestamps[tp], self._leader_epoch(tp))
                    for tp in tps
                )
                lookup._in_flight.update(tps)
                request = ListOffsetsRequest(parts, isolation_level=self.ctx.isolation_level)
                out.append(self._send(node, request, now_ms, _Lookup(lookup, tuple(tps))))
        return out

    def _expire_lookups(self, now_ms: int) -> None:
        for lookup in self.lookups:
            if not lookup.done and now_ms >= lookup.deadline_ms:
                lookup.error = RequestTimedOutError("offsets_for_times timed out")
        self.lookups = [lookup for lookup in self.lookups if not lookup.done]

    def due_ms(self) -> int | None:
        resetting = self._resetting()
        times = [
            s.next_retry_ms for tp, s in self.ctx.subscriptions.items()
            if s.state == FetchState.AWAIT_RESET and tp not in resetting
        ]
        for lookup in self.lookups:
            times.append(lookup.deadline_ms)
            times.extend(lookup._retry_ms.get(tp, 0) for tp in lookup._due(None))
        return min(times, default=None)

    # --- answers ----------------------------------------------------------------------------------
    def on_failure(self, request: ClientRequest, now_ms: int, error: EpochGuardError | None = None) -> None:
        """A lookup's request that can never be sent (no ListOffsets version both sides serve: Kafka's
        `UnsupportedVersionException`) fails the lookup; any other failure is retried after the back-off."""
        sent = self._in_flight.get(id(request))
        if sent is not None and isinstance(sent.context, _Lookup) and isinstance(error, UnsupportedVersionError):
            del self._in_flight[id(request)]
            sent.context.lookup._in_flight.difference_update(sent.context.partitions)
            sent.context.lookup.error = error
            return
        super().on_failure(request, now_ms, error)

    def failed(self, node_id: int, request: ClientRequest, context: _Resets | _Lookup, now_ms: int) -> None:
        retry = self.ctx.backoff(now_ms)
        if isinstance(context, _Lookup):
            context.lookup._in_flight.difference_update(context.partitions)
            context.lookup._retry_ms.update(dict.fromkeys(context.partitions, retry))
        else:
            self.ctx.subscriptions.request_failed(context.strategies, retry)
        self.ctx.metadata.request_update()

    def handle(
        self, node_id: int, request: ClientRequest, context: _Resets | _Lookup, response: ClientResponse, now_ms: int
    ) -> None:
        if isinstance(context, _Lookup):
            context.lookup._in_flight.difference_update(context.partitions)
        if not isinstance(response, ListOffsetsResponse):
            return
        for answer in response.partitions:
            if isinstance(context, _Lookup):
                self._on_lookup(context.lookup, answer, now_ms)
            else:
                self._on_reset(context, answer, now_ms)

    def _on_reset(self, context: _Resets, answer: ListOffsetsPartitionResponse, now_ms: int) -> None:
        strategy = context.strategies.get(answer.tp)
        s = self.ctx.subscriptions.get(answer.tp)
        if strategy is None or s is None:
            return
        if answer.error_code != Errors.NONE or answer.offset < 0:
            # An error, or NONE without an offset (UNKNOWN_OFFSET, no position): retry the reset.
            if answer.error_code in REFRESH_METADATA:
                self.ctx.metadata.request_update()
            s.next_retry_ms = self.ctx.backoff(now_ms)
            return
        tp, epoch = answer.tp, epoch_or_none(answer.leader_epoch)
        position = FetchPosition(answer.offset, None, self.ctx.metadata.current_leader(tp))
        if epoch is not None:
            self.ctx.metadata.update_last_seen_epoch_if_newer(tp, epoch)
        if s.state != FetchState.AWAIT_RESET or s.reset_strategy != strategy:
            return  # a seek or another reset happened meanwhile
        reason, from_offset = s.reset_reason, s.reset_from
        s.seek_unvalidated(position)
        s.restart_history(self.ctx.track_consumed_epochs)
        self.ctx.resets.append(
            OffsetResetEvent(tp, strategy, reason, from_offset, answer.offset, epoch, now_ms)
        )

    def _on_lookup(self, lookup: OffsetsForTimesLookup, answer: ListOffsetsPartitionResponse, now_ms: int) -> None:
        tp = answer.tp
        if tp not in lookup.timestamps:
            return
        if answer.error_code != Errors.NONE:
            if answer.error_code in REFRESH_METADATA:
                self.ctx.metadata.request_update()
            lookup._retry_ms[tp] = self.ctx.backoff(now_ms)
            return
        lookup.offsets[tp] = answer.offset if answer.offset >= 0 else NO_OFFSET
        if lookup.timestamps[tp] < 0:
            return  # EARLIEST / LATEST: an offset (answered with timestamp -1), no OffsetAndTimestamp
        if answer.offset < 0 or answer.timestamp < 0:
            lookup.result[tp] = None  # no record at or after the timestamp (a timestamp-less answer: none known)
            return
        found = lookup.result[tp] = OffsetAndTimestamp(answer.offset, answer.timestamp, answer.leader_epoch)
        if found.leader_epoch is not None:
            self.ctx.metadata.update_last_seen_epoch_if_newer(tp, found.leader_epoch)

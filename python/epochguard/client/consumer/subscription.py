"""Per-partition fetch state of one consumer, mirroring Kafka's `SubscriptionState`.

Fetch states INITIALIZING / FETCHING / AWAIT_RESET / AWAIT_VALIDATION with Kafka's transition table
(a disallowed transition is silently ignored), `FetchPosition`s, `maybeValidatePositionForCurrentLeader`
(including the API-version rule of `updatePositionLeaderNoValidation`) and the backoff between retries
(`requestFailed` / `nextRetryTimeMs`). What is in flight for a partition is not here: each request
manager (`epochguard.client.consumer.requests`) keeps its own.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from epochguard._core import LeaderEpochCache
from epochguard.protocol.api_versions import (
    NodeApiVersions,
    has_usable_offset_for_leader_epoch_version,
)
from epochguard.types import (
    EpochProtocol,
    FetchPosition,
    LeaderAndEpoch,
    ResetPolicy,
    ResetReason,
    TopicPartition,
)

__all__ = ["FetchState", "PartitionState", "SubscriptionState"]


class FetchState(enum.Enum):
    INITIALIZING = "initializing"
    FETCHING = "fetching"
    AWAIT_RESET = "await_reset"
    AWAIT_VALIDATION = "await_validation"


_ALLOWED = {
    FetchState.INITIALIZING: {FetchState.FETCHING, FetchState.AWAIT_RESET, FetchState.AWAIT_VALIDATION},
    FetchState.FETCHING: {FetchState.FETCHING, FetchState.AWAIT_RESET, FetchState.AWAIT_VALIDATION},
    FetchState.AWAIT_RESET: {FetchState.FETCHING, FetchState.AWAIT_RESET},
    FetchState.AWAIT_VALIDATION: {FetchState.FETCHING, FetchState.AWAIT_RESET, FetchState.AWAIT_VALIDATION},
}


@dataclass(slots=True)
class PartitionState:
    """One assigned partition (`SubscriptionState.TopicPartitionState`)."""

    reset_policy: ResetPolicy
    state: FetchState = FetchState.INITIALIZING
    position: FetchPosition | None = None
    reset_strategy: ResetPolicy | None = None  # the strategy of a pending reset
    reset_reason: ResetReason = "no_position"
    reset_from: int | None = None
    next_retry_ms: int = 0
    paused: bool = False
    preferred_read_replica: int | None = None
    reported_truncation: tuple[FetchPosition, int | None, int | None] | None = None
    consumed: LeaderEpochCache | None = None  # epochs of the records handed out (track_consumed_epochs)
    # Beyond Kafka: no fetch from this offset on (a reader of a planned range: nothing past its end is
    # asked for, and no fetch waits fetch_max_wait_ms at the broker for records nobody will read).
    fetch_until: int | None = None
    # The high watermark of the last fetch answered for this partition (Java's `TopicPartitionState.highWatermark`,
    # kafka-python's `highwater`): None before one.
    highwater: int | None = None

    def transition(self, new: FetchState, position: FetchPosition | None = None) -> None:
        """Kafka's `transitionState`: a disallowed transition is silently ignored. `position`: the new
        one of FETCHING and AWAIT_VALIDATION (AWAIT_RESET has none)."""
        if new not in _ALLOWED[self.state]:
            return
        self.state = new
        self.position = position
        self.reset_strategy = None  # `request_reset` sets the strategy of the reset it asks for
        self.next_retry_ms = 0

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
        self.transition(FetchState.AWAIT_RESET)  # allowed from every state
        self.reset_strategy = strategy
        self.reset_reason = reason
        self.reset_from = from_offset

    @property
    def is_fetchable(self) -> bool:
        return self.state == FetchState.FETCHING and not self.paused

    # beyond Kafka (track_consumed_epochs) --------------------------------------------------------
    def restart_history(self, track: bool) -> None:
        """A position set by seek, reset or commit: nothing consumed below it is known. (The position's
        own epoch would start at the position, covering no consumed offset: the divergence search and a
        rewound history, cut below the position, come out the same without it.)"""
        if track:
            self.consumed = LeaderEpochCache()

    def record_consumed(self, epochs: Iterable[tuple[int, int]]) -> None:
        """(epoch, first offset) of each batch handed out."""
        if self.consumed is not None:
            for epoch, offset in epochs:
                self.consumed.assign(epoch, offset)


class SubscriptionState:
    """The assigned partitions and their states (Kafka's `SubscriptionState`, manual assignment)."""

    def __init__(self, default_reset_policy: ResetPolicy, protocol: EpochProtocol) -> None:
        self.default_reset_policy: ResetPolicy = default_reset_policy
        self.protocol: EpochProtocol = protocol
        self.assignment: dict[TopicPartition, PartitionState] = {}

    def assign(self, partitions: Iterable[TopicPartition], reset_policy: ResetPolicy | None = None) -> None:
        for tp in partitions:
            if tp not in self.assignment:
                self.assignment[tp] = PartitionState(reset_policy or self.default_reset_policy)

    def unassign(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.assignment.pop(tp, None)

    def get(self, tp: TopicPartition) -> PartitionState | None:
        return self.assignment.get(tp)

    def state(self, tp: TopicPartition) -> PartitionState:
        s = self.assignment.get(tp)
        if s is None:
            raise ValueError(f"{tp} is not assigned")
        return s

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(self.assignment)

    def items(self) -> Iterable[tuple[TopicPartition, PartitionState]]:
        return self.assignment.items()

    def in_state(self, state: FetchState, now_ms: int) -> list[TopicPartition]:
        """Partitions in `state` whose retry backoff is over (`partitionsNeedingReset/Validation`)."""
        return [tp for tp, s in self.assignment.items() if s.state == state and now_ms >= s.next_retry_ms]

    def request_failed(self, partitions: Iterable[TopicPartition], next_retry_ms: int) -> None:
        for tp in partitions:
            s = self.assignment.get(tp)
            if s is not None:
                s.next_retry_ms = next_retry_ms

    def maybe_validate_position_for_current_leader(
        self, tp: TopicPartition, current: LeaderAndEpoch, leader_versions: NodeApiVersions | None
    ) -> bool:
        """`maybeValidatePositionForCurrentLeader`: re-point the position at the current leader; a new
        leader means validation (KIP-320), a new fetch target only (pre-KIP-320, or a leader whose
        OffsetForLeaderEpoch is older than v3). True if the partition now awaits validation."""
        s = self.assignment.get(tp)
        if s is None:
            return False
        if self.protocol == "pre-kip-320" or (
            leader_versions is not None and not has_usable_offset_for_leader_epoch_version(leader_versions)
        ):
            # `updatePositionLeaderNoValidation`
            if current.leader is not None and s.position is not None and s.position.current_leader != current:
                s.seek_validated(FetchPosition(s.position.offset, s.position.offset_epoch, current))
                s.preferred_read_replica = None
            return False
        if s.state == FetchState.AWAIT_RESET or current.leader is None:
            return False
        if s.position is not None and s.position.current_leader != current:
            s.validate_position(FetchPosition(s.position.offset, s.position.offset_epoch, current))
            s.preferred_read_replica = None
        return s.state == FetchState.AWAIT_VALIDATION

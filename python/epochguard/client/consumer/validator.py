"""The consumer's position validator, pure: an OffsetsForLeaderEpoch answer in, what to do out.

Mirrors the decision in Kafka's `SubscriptionState.maybeCompleteValidation` (SPEC (e)): the leader's
end offset for the position's epoch either confirms the position (`Resume`), lies below it (a
truncation: `Rewind` precisely under a reset policy, `Truncated` to raise under policy none), or is
undefined (`Reset` by policy, or `Truncated` with no known divergence point). No state is touched here;
`requests.validation` applies the outcome.

Beyond Kafka, with the consumer's own epoch history (`track_consumed_epochs`): the divergence point
comes from the core's `truncation_offset` over the epochs consumed, the follower's rule, which also
finds records consumed in an epoch the new leader holds under another epoch. Such a rewind may not be
final (our history has epochs the leader lacks) and is then validated again.
"""

from __future__ import annotations

from dataclasses import dataclass

from epochguard._core import LeaderEpochCache, truncation_offset
from epochguard.types import (
    NO_EPOCH,
    NO_OFFSET,
    FetchPosition,
    OffsetAndMetadata,
    ResetPolicy,
)

__all__ = ["Outcome", "Reset", "Resume", "Rewind", "Truncated", "validate_position"]


@dataclass(frozen=True, slots=True)
class Resume:
    """The leader has everything up to the position: fetch on from it."""


@dataclass(frozen=True, slots=True)
class Rewind:
    """The log diverges below the position: move to `position` (the divergence point), no policy reset."""

    position: FetchPosition
    final: bool = True  # False: validate the rewound position again
    history: LeaderEpochCache | None = None  # the consumed epochs below the new position


@dataclass(frozen=True, slots=True)
class Reset:
    """The leader cannot place the position (undefined answer): reset by the policy."""


@dataclass(frozen=True, slots=True)
class Truncated:
    """Policy none: report a truncation (`LogTruncationException`); `divergent` None = not known."""

    divergent: OffsetAndMetadata | None


Outcome = Resume | Rewind | Reset | Truncated


def validate_position(
    position: FetchPosition,
    reset_policy: ResetPolicy,
    leader_epoch: int,
    end_offset: int,
    consumed: LeaderEpochCache | None = None,
) -> Outcome:
    """The outcome of validating `position` against the leader's answer (`leader_epoch`, `end_offset`;
    -1 = undefined). `consumed`: the epochs of the records handed out, when tracked."""
    undefined = end_offset == NO_OFFSET or leader_epoch == NO_EPOCH
    if consumed is not None and not undefined:
        return _with_history(position, reset_policy, leader_epoch, end_offset, consumed)
    if undefined:
        return Truncated(None) if reset_policy == "none" else Reset()
    if end_offset < position.offset:
        if reset_policy == "none":
            return Truncated(OffsetAndMetadata(end_offset, leader_epoch=leader_epoch))
        return Rewind(FetchPosition(end_offset, leader_epoch, position.current_leader))
    return Resume()  # a different epoch alone is not a truncation


def _with_history(
    position: FetchPosition, reset_policy: ResetPolicy, leader_epoch: int, end_offset: int, consumed: LeaderEpochCache
) -> Outcome:
    answer = truncation_offset(consumed, position.offset, leader_epoch, end_offset)
    if answer is None or answer[0] >= position.offset:
        return Resume()
    divergent, final = answer
    history = consumed.copy()
    history.truncate_from_end(divergent)
    common = history.latest_epoch if history.latest_epoch is not None else leader_epoch
    if reset_policy == "none":
        return Truncated(OffsetAndMetadata(divergent, leader_epoch=common))
    return Rewind(FetchPosition(divergent, common, position.current_leader), final, history)

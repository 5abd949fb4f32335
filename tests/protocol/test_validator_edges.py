"""The consumer's position validation as a pure function (`epochguard.client.consumer.validator`), with the
consumed-epoch history (`track_consumed_epochs`): where it rewinds, with which epoch, and whether the
rewound position must be validated again."""

from __future__ import annotations

import pytest

from epochguard import LeaderEpochCache
from epochguard.client.consumer.validator import Resume, Rewind, Truncated, validate_position
from epochguard.types import FetchPosition, LeaderAndEpoch, OffsetAndMetadata

LEADER = LeaderAndEpoch(2, 6)


def test_a_shared_epoch_that_ends_early_rewinds_there_for_good():
    consumed = LeaderEpochCache([(0, 0), (1, 5)])
    outcome = validate_position(FetchPosition(10, 1, LEADER), "earliest", 0, 4, consumed)
    assert outcome == Rewind(FetchPosition(4, 0, LEADER), True, LeaderEpochCache([(0, 0)]))
    assert consumed.entries() == [(0, 0), (1, 5)]  # the caller's history is not touched


def test_an_epoch_the_leader_never_had_rewinds_and_validates_again():
    consumed = LeaderEpochCache([(0, 0), (2, 5)])
    outcome = validate_position(FetchPosition(10, 2, LEADER), "latest", 1, 7, consumed)
    assert outcome == Rewind(FetchPosition(5, 0, LEADER), False, LeaderEpochCache([(0, 0)]))


def test_a_rewind_below_every_consumed_epoch_takes_the_leaders_epoch():
    consumed = LeaderEpochCache([(3, 4)])
    outcome = validate_position(FetchPosition(10, 3, LEADER), "earliest", 2, 2, consumed)
    assert outcome == Rewind(FetchPosition(2, 2, LEADER), True, LeaderEpochCache())


@pytest.mark.parametrize(
    "consumed, leader_epoch, end_offset, divergent",
    [([(0, 0), (1, 5)], 0, 4, OffsetAndMetadata(4, "", 0)), ([(3, 4)], 2, 2, OffsetAndMetadata(2, "", 2))],
)
def test_policy_none_reports_the_divergence_with_the_common_epoch(consumed, leader_epoch, end_offset, divergent):
    outcome = validate_position(FetchPosition(10, 1, LEADER), "none", leader_epoch, end_offset, LeaderEpochCache(consumed))
    assert outcome == Truncated(divergent)


def test_an_answer_at_or_past_the_position_resumes():
    consumed = LeaderEpochCache([(0, 0), (1, 5)])
    assert validate_position(FetchPosition(10, 1, LEADER), "earliest", 1, 12, consumed) == Resume()
    assert validate_position(FetchPosition(10, 1, LEADER), "earliest", 1, 10, consumed) == Resume()

"""Divergence search bindings: SPEC (b)5 and (d) cases, brute force and batched vs scalar."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochguard._core import (
    LeaderEpochCache,
    divergence_point,
    divergence_points,
    find_diverging_epoch,
    truncation_offset,
)

LEADER = LeaderEpochCache([(0, 0), (2, 10), (4, 20)])


@pytest.mark.parametrize(
    ("last_fetched_epoch", "fetch_offset", "expected"),
    [
        (-1, 50, None),  # no LastFetchedEpoch: no check
        (4, 25, None),  # consistent, read
        (4, 35, (4, 30)),  # ahead of the leader's LEO in the same epoch
        (1, 8, (0, 10)),  # uncached epoch: the leader's floor epoch and its end
        (2, 20, None),
        (2, 21, (2, 20)),
        (5, 21, (-1, -1)),  # above the leader's newest: caller answers OFFSET_OUT_OF_RANGE
    ],
)
def test_find_diverging_epoch(last_fetched_epoch: int, fetch_offset: int, expected: tuple[int, int] | None) -> None:
    assert find_diverging_epoch(LEADER, 30, last_fetched_epoch, fetch_offset) == expected


LOCAL = LeaderEpochCache([(0, 0), (2, 10), (3, 15)])


@pytest.mark.parametrize(
    ("leader_epoch", "leader_end", "expected"),
    [
        (3, -1, None),  # undefined offset: caller truncates to its initial fetch offset
        (-1, 12, (12, True)),
        (-1, 25, (18, True)),
        (2, 12, (12, True)),  # local has the epoch: min of both ends and LEO, final
        (2, 17, (15, True)),
        (3, 30, (18, True)),
        (1, 12, (10, False)),  # local lacks epoch 1: its floor epoch's end, ask again
        (7, 12, (12, True)),  # local has no answer for the leader's epoch
    ],
)
def test_truncation_offset(leader_epoch: int, leader_end: int, expected: tuple[int, bool] | None) -> None:
    assert truncation_offset(LOCAL, 18, leader_epoch, leader_end) == expected


def test_divergence_point_examples() -> None:
    a, b = LeaderEpochCache([(0, 0)]), LeaderEpochCache([(0, 0), (2, 10)])
    assert divergence_point(a, 15, b, 10) == 10
    assert divergence_point(b, 10, a, 15) == 10
    assert divergence_point(a, 10, b, 10) is None  # the split is at both log ends: nothing differs yet
    assert divergence_point(b, 20, b.copy(), 12) is None
    assert divergence_point(LeaderEpochCache(), 5, a, 5) is None


def _epoch_at(entries: list[tuple[int, int]], offset: int) -> int | None:
    found = [e for e, s in entries if s <= offset]
    return found[-1] if found else None


def _brute_force(a: LeaderEpochCache, leo_a: int, b: LeaderEpochCache, leo_b: int) -> int | None:
    if not len(a) or not len(b):
        return None
    lo = max(a.earliest_entry[1], b.earliest_entry[1])
    ea, eb = a.entries(), b.entries()
    return next((o for o in range(lo, max(leo_a, leo_b)) if _epoch_at(ea, o) != _epoch_at(eb, o)), None)


histories = st.lists(st.tuples(st.integers(0, 8), st.integers(0, 30)), max_size=6).map(LeaderEpochCache)


def _leo(cache: LeaderEpochCache, extra: int) -> int:
    return (cache.entries()[-1][1] if len(cache) else 0) + extra


@settings(max_examples=200, deadline=None)
@given(a=histories, b=histories, extra_a=st.integers(0, 5), extra_b=st.integers(0, 5))
def test_divergence_point_matches_brute_force(
    a: LeaderEpochCache, b: LeaderEpochCache, extra_a: int, extra_b: int
) -> None:
    leo_a, leo_b = _leo(a, extra_a), _leo(b, extra_b)
    assert divergence_point(a, leo_a, b, leo_b) == _brute_force(a, leo_a, b, leo_b)


def _csr(caches: list[LeaderEpochCache]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    entries = [entry for cache in caches for entry in cache.entries()]
    bounds = np.cumsum([0] + [len(c) for c in caches], dtype=np.int64)
    epochs = np.array([e for e, _ in entries], dtype=np.int32)
    starts = np.array([s for _, s in entries], dtype=np.int64)
    return bounds, epochs, starts


@settings(max_examples=50, deadline=None)
@given(pairs=st.lists(st.tuples(histories, histories, st.integers(0, 5), st.integers(0, 5)), max_size=20))
def test_divergence_points_equals_scalar(pairs: list[tuple[LeaderEpochCache, LeaderEpochCache, int, int]]) -> None:
    a = [p[0] for p in pairs]
    b = [p[1] for p in pairs]
    leo_a = np.array([_leo(c, p[2]) for c, p in zip(a, pairs, strict=True)], dtype=np.int64)
    leo_b = np.array([_leo(c, p[3]) for c, p in zip(b, pairs, strict=True)], dtype=np.int64)
    out = divergence_points(*_csr(a), leo_a, *_csr(b), leo_b)
    assert out.dtype == np.int64
    expected = [divergence_point(x, int(la), y, int(lb)) for x, la, y, lb in zip(a, leo_a, b, leo_b, strict=True)]
    assert out.tolist() == [-1 if d is None else d for d in expected]


def test_divergence_points_rejects_bad_layout() -> None:
    bounds, epochs, starts = _csr([LeaderEpochCache([(0, 0), (2, 10)])])
    leo = np.array([12], dtype=np.int64)
    ok = (bounds, epochs, starts, leo)
    with pytest.raises(ValueError, match="rows"):
        divergence_points(*ok, *_csr([LeaderEpochCache()] * 2), np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="strictly increasing"):
        divergence_points(*ok, bounds, epochs[::-1].copy(), starts, leo)
    with pytest.raises(ValueError, match="non-decreasing"):
        divergence_points(*ok, np.array([0, 5], dtype=np.int64), epochs, starts, leo)
    with pytest.raises(ValueError, match="log_ends"):
        divergence_points(*ok, bounds, epochs, starts, np.zeros(3, dtype=np.int64))
    with pytest.raises(TypeError, match="int32"):
        divergence_points(*ok, bounds, starts, starts, leo)

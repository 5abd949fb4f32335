"""LeaderEpochCache bindings: SPEC.md (a) cases, a hypothesis model test, batched vs scalar lookups."""

from __future__ import annotations

import array
import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochguard._core import LeaderEpochCache


def test_construct_replays_assign_and_reprs() -> None:
    cache = LeaderEpochCache([(0, 0), (3, 10), (2, 12)])  # (2, 12) wipes the newer epoch 3
    assert cache.entries() == [(0, 0), (2, 12)]
    assert repr(cache) == "LeaderEpochCache([(0, 0), (2, 12)])"
    assert len(cache) == 2
    assert repr(LeaderEpochCache()) == "LeaderEpochCache([])"
    assert LeaderEpochCache(iter([(1, 5)])).entries() == [(1, 5)]


def test_assign_rules() -> None:
    cache = LeaderEpochCache([(2, 6)])
    cache.assign(2, 9)  # same epoch, later offset: no-op
    assert cache.entries() == [(2, 6)]
    cache.assign(3, 8)
    cache.assign(4, 8)  # newer epoch at an equal offset replaces the old one
    assert cache.entries() == [(2, 6), (4, 8)]
    cache.assign(1, 20)  # an older epoch wipes every newer one
    assert cache.entries() == [(1, 20)]


@pytest.mark.parametrize(("epoch", "offset"), [(-1, 0), (0, -1), (-5, -5)])
def test_assign_rejects_negatives(epoch: int, offset: int) -> None:
    cache = LeaderEpochCache([(0, 0)])
    with pytest.raises(ValueError, match="non-negative"):
        cache.assign(epoch, offset)
    with pytest.raises(ValueError):
        LeaderEpochCache([(epoch, offset)])
    assert cache.entries() == [(0, 0)]


def test_assign_rejects_out_of_range_and_malformed_entries() -> None:
    with pytest.raises(OverflowError):
        LeaderEpochCache().assign(2**31, 0)
    with pytest.raises(ValueError, match="length 2"):
        LeaderEpochCache([(1, 2, 3)])
    with pytest.raises(TypeError):
        LeaderEpochCache([5])


@pytest.mark.parametrize(
    ("entries", "requested", "expected"),
    [
        ([], 0, (-1, -1)),  # empty cache
        ([(2, 6)], -1, (-1, -1)),  # undefined epoch requested
        ([(2, 6), (3, 10)], 3, (3, 40)),  # latest epoch: the caller's LEO
        ([(5, 11), (7, 20)], 4, (4, 11)),  # below the earliest: echo requested, oldest start
        ([(1, 0), (3, 5), (6, 9)], 2, (1, 5)),  # between entries
        ([(1, 0), (3, 5), (6, 9)], 3, (3, 9)),
        ([(1, 0), (3, 5)], 4, (-1, -1)),  # above the newest
    ],
)
def test_end_offset_for(entries: list[tuple[int, int]], requested: int, expected: tuple[int, int]) -> None:
    assert LeaderEpochCache(entries).end_offset_for(requested, 40) == expected


def test_queries() -> None:
    cache = LeaderEpochCache([(1, 0), (3, 5), (6, 9)])
    assert (cache.latest_epoch, cache.previous_epoch, cache.earliest_entry) == (6, 3, (1, 0))
    assert [cache.epoch_for_offset(o) for o in (-1, 0, 4, 5, 9, 100)] == [None, 1, 1, 3, 6, 6]
    assert [cache.previous_epoch_of(e) for e in (1, 3, 4, 7)] == [None, 1, 3, 6]
    assert [cache.next_epoch(e) for e in (0, 1, 4, 6)] == [1, 3, 6, None]
    empty = LeaderEpochCache()
    assert (empty.latest_epoch, empty.previous_epoch, empty.earliest_entry) == (None, None, None)


def test_truncation() -> None:
    cache = LeaderEpochCache([(2, 6), (3, 8), (4, 11)])
    cache.truncate_from_start(9)  # epoch 3 still owns offset 9
    assert cache.entries() == [(3, 9), (4, 11)]
    cache.truncate_from_start(-1)
    assert cache.entries() == [(3, 9), (4, 11)]
    cache.truncate_from_end(11)
    assert cache.entries() == [(3, 9)]
    cache.truncate_from_end(-1)
    assert cache.entries() == [(3, 9)]
    cache.truncate_from_end(0)
    assert len(cache) == 0


def test_copy_clear_and_equality() -> None:
    cache = LeaderEpochCache([(0, 0), (2, 15)])
    clones = [cache.copy(), copy.copy(cache), copy.deepcopy(cache)]
    cache.clear()
    assert cache == LeaderEpochCache() and len(cache) == 0
    for clone in clones:
        assert clone == LeaderEpochCache([(0, 0), (2, 15)]) and clone != cache
    assert cache != [(0, 0)]
    with pytest.raises(TypeError):
        hash(cache)  # mutable


# ---- hypothesis model test -----------------------------------------------------------------------


class Model:
    """The SPEC (a) rules written as naively as possible."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    def assign(self, epoch: int, start: int) -> None:
        if self.entries and self.entries[-1][0] == epoch and start >= self.entries[-1][1]:
            return
        while self.entries and (self.entries[-1][0] >= epoch or self.entries[-1][1] >= start):
            self.entries.pop()
        self.entries.append((epoch, start))

    def end_offset_for(self, requested: int, leo: int) -> tuple[int, int]:
        if requested == -1:
            return (-1, -1)
        if self.entries and self.entries[-1][0] == requested:
            return (requested, leo)
        higher = [s for e, s in self.entries if e > requested]
        if not higher:
            return (-1, -1)
        floor = [e for e, _ in self.entries if e <= requested]
        return (floor[-1] if floor else requested, higher[0])

    def epoch_for_offset(self, offset: int) -> int | None:
        found = [e for e, s in self.entries if s <= offset]
        return found[-1] if found else None

    def truncate_from_end(self, x: int) -> None:
        if x >= 0:
            self.entries = [(e, s) for e, s in self.entries if s < x]

    def truncate_from_start(self, x: int) -> None:
        dropped = [(e, s) for e, s in self.entries if s <= x]
        self.entries = [(e, s) for e, s in self.entries if s > x]
        if dropped:
            self.entries.insert(0, (dropped[-1][0], x))


ops = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 9), st.integers(0, 50)),
        st.tuples(st.just("truncate_from_end"), st.integers(-2, 55)),
        st.tuples(st.just("truncate_from_start"), st.integers(-2, 55)),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(ops=ops, leo_extra=st.integers(0, 5))
def test_cache_matches_model(ops: list[tuple], leo_extra: int) -> None:
    cache, model = LeaderEpochCache(), Model()
    for name, *args in ops:
        getattr(cache, name)(*args)
        getattr(model, name)(*args)
        assert cache.entries() == model.entries
        leo = (model.entries[-1][1] if model.entries else 0) + leo_extra
        for requested in range(-1, 11):
            assert cache.end_offset_for(requested, leo) == model.end_offset_for(requested, leo)
        for offset in range(-1, 56, 3):
            assert cache.epoch_for_offset(offset) == model.epoch_for_offset(offset)


# ---- batched lookups -----------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    entries=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 100)), max_size=10),
    epochs=st.lists(st.integers(-1, 22), max_size=50),
    offsets=st.lists(st.integers(-5, 120), max_size=50),
    sort=st.booleans(),
)
def test_batched_equals_scalar(
    entries: list[tuple[int, int]], epochs: list[int], offsets: list[int], sort: bool
) -> None:
    cache = LeaderEpochCache(entries)
    if sort:  # sorted offsets take the merge walk, unsorted the binary search
        offsets.sort()
    out_epochs, out_offsets = cache.end_offsets_for(np.array(epochs, dtype=np.int32), 150)
    assert out_epochs.dtype == np.int32 and out_offsets.dtype == np.int64
    assert list(zip(out_epochs.tolist(), out_offsets.tolist(), strict=True)) == [cache.end_offset_for(e, 150) for e in epochs]
    found = cache.epochs_for_offsets(np.array(offsets, dtype=np.int64))
    assert found.dtype == np.int32
    expected = [cache.epoch_for_offset(o) for o in offsets]
    assert found.tolist() == [-1 if e is None else e for e in expected]


def test_batched_inputs_accept_any_buffer() -> None:
    cache = LeaderEpochCache([(0, 0), (2, 15)])
    expected = [0, 0, 2]
    assert cache.epochs_for_offsets(array.array("q", [0, 14, 15])).tolist() == expected
    assert cache.epochs_for_offsets(memoryview(array.array("q", [0, 14, 15]))).tolist() == expected
    # Non-contiguous views are copied, not rejected.
    assert cache.epochs_for_offsets(np.array([0, 99, 14, 99, 15], dtype=np.int64)[::2]).tolist() == expected
    epochs, _ = cache.end_offsets_for(array.array("i", [0, 2]), 30)
    assert epochs.tolist() == [0, 2]


def test_batched_inputs_accept_arrow_arrays() -> None:
    pa = pytest.importorskip("pyarrow")
    cache = LeaderEpochCache([(0, 0), (2, 15)])
    assert cache.epochs_for_offsets(pa.array([3, 20], type=pa.int64())).tolist() == [0, 2]
    # A slice carries an offset into the shared buffer.
    assert cache.epochs_for_offsets(pa.array([99, 3, 20, 99], type=pa.int64()).slice(1, 2)).tolist() == [0, 2]
    epochs, offsets = cache.end_offsets_for(pa.array([0, 2], type=pa.int32()), 30)
    assert (epochs.tolist(), offsets.tolist()) == ([0, 2], [15, 30])


def test_batched_rejects_bad_arrow_arrays() -> None:
    pa = pytest.importorskip("pyarrow")
    cache = LeaderEpochCache([(0, 0)])
    with pytest.raises(ValueError, match="nulls"):
        cache.epochs_for_offsets(pa.array([1, None], type=pa.int64()))
    with pytest.raises(TypeError, match="Arrow int64 array, got Int32"):
        cache.epochs_for_offsets(pa.array([1], type=pa.int32()))


def test_batched_output_is_a_readonly_view_of_rust_memory() -> None:
    cache = LeaderEpochCache([(0, 0)])
    out = cache.epochs_for_offsets(np.arange(1000, dtype=np.int64))
    assert not out.flags.writeable and not out.flags.owndata
    assert type(out.base).__name__ == "ColumnBuffer"
    with pytest.raises(ValueError):
        out[0] = 5
    assert cache.epochs_for_offsets(np.array([], dtype=np.int64)).tolist() == []


@pytest.mark.parametrize(
    "bad",
    [np.arange(3, dtype=np.int32), np.arange(3, dtype=np.float64), [1.0, 2.0], b"12345678"],
)
def test_batched_rejects_wrong_item_type(bad: object) -> None:
    with pytest.raises(TypeError, match="int64"):
        LeaderEpochCache().epochs_for_offsets(bad)


def test_batched_rejects_multidimensional_input() -> None:
    with pytest.raises(ValueError, match="one-dimensional"):
        LeaderEpochCache().epochs_for_offsets(np.zeros((2, 2), dtype=np.int64))

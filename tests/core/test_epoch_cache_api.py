"""`LeaderEpochCache` as a Python value: built from any pairs, pickled (Spark broadcasts it), iterated,
and queried in batches with plain sequences as well as zero-copy buffers."""

from __future__ import annotations

import array
import copy
import json
import pickle

import numpy as np
import pytest

from epochguard import LeaderEpochCache, divergence_points

ENTRIES = [(0, 0), (2, 15), (5, 40)]


@pytest.mark.parametrize(
    "entries",
    [
        ENTRIES,
        json.loads(json.dumps(ENTRIES)),  # [[0, 0], [2, 15], [5, 40]]
        np.array(ENTRIES, dtype=np.int64),  # N x 2
        np.array(ENTRIES, dtype=np.int32),
        iter([[0, 0], (2, 15), np.array([5, 40])]),  # any iterable of mixed pairs
        ([e, o] for e, o in ENTRIES),
    ],
)
def test_built_from_any_iterable_of_pairs(entries: object) -> None:
    cache = LeaderEpochCache(entries)  # type: ignore[arg-type]
    assert cache.entries() == ENTRIES
    assert cache.end_offset_for(3, 60) == (2, 40)


@pytest.mark.parametrize(
    ("entries", "error", "match"),
    [
        ([[1, 2, 3]], ValueError, "length 2"),
        ([np.array([1, 2, 3])], ValueError, "length 2"),
        ([5], TypeError, "pairs"),
        (["ab"], TypeError, "pairs"),
        ([[0.5, 1]], TypeError, None),
        ([[2**31, 0]], OverflowError, None),
        (np.array([[0, -1]]), ValueError, "non-negative"),
    ],
)
def test_malformed_pairs_are_clear_errors(entries: object, error: type[Exception], match: str | None) -> None:
    with pytest.raises(error, match=match):
        LeaderEpochCache(entries)  # type: ignore[arg-type]


def test_pickles_and_copies_as_its_entries() -> None:
    cache = LeaderEpochCache(ENTRIES)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        clone = pickle.loads(pickle.dumps(cache, protocol=protocol))
        assert clone == cache and clone is not cache and clone.entries() == ENTRIES
    assert pickle.loads(pickle.dumps(LeaderEpochCache())) == LeaderEpochCache()
    deep = copy.deepcopy({"t-0": cache})["t-0"]
    deep.assign(7, 50)
    assert cache.entries() == ENTRIES  # independent


def test_iterates_over_entries_with_len_and_eq() -> None:
    cache = LeaderEpochCache(ENTRIES)
    assert list(cache) == ENTRIES and dict(cache) == {0: 0, 2: 15, 5: 40}
    assert len(cache) == 3 and LeaderEpochCache(list(cache)) == cache
    it = iter(cache)
    cache.assign(6, 45)  # iteration is over a snapshot
    assert list(it) == ENTRIES and len(cache) == 4
    assert cache != LeaderEpochCache(ENTRIES) and LeaderEpochCache() != ENTRIES


@pytest.mark.parametrize("offsets", [[0, 16, 45], (0, 16, 45), range(0, 46, 15)])
def test_batched_lookups_take_plain_sequences(offsets: object) -> None:
    cache = LeaderEpochCache(ENTRIES)
    expected = [cache.epoch_for_offset(o) for o in offsets]  # type: ignore[attr-defined]
    got = cache.epochs_for_offsets(offsets)  # type: ignore[arg-type]
    assert got.dtype == np.int32 and got.tolist() == expected
    epochs, ends = cache.end_offsets_for([0, 2, 3], 60)
    assert (epochs.tolist(), ends.tolist()) == ([0, 2, 2], [15, 40, 40])
    assert cache.epochs_for_offsets([]).tolist() == []


def test_plain_sequences_reach_divergence_points() -> None:
    # one partition per side: a = [(0, 0), (1, 10)] log end 20, b = [(0, 0), (2, 12)] log end 20
    out = divergence_points([0, 2], [0, 1], [0, 10], [20], [0, 2], [0, 2], [0, 12], [20])
    assert out.tolist() == [10]


def test_sequences_of_non_ints_or_out_of_range_are_refused() -> None:
    cache = LeaderEpochCache(ENTRIES)
    with pytest.raises(TypeError, match="offsets must be a sequence of ints"):
        cache.epochs_for_offsets([1.5, 2])
    with pytest.raises(TypeError, match="offsets must be"):
        cache.epochs_for_offsets("123")
    with pytest.raises(OverflowError):
        cache.end_offsets_for([2**31], 0)
    with pytest.raises(TypeError, match="epochs must be"):
        cache.end_offsets_for({1: 2}, 0)  # a mapping is not a sequence


def test_buffers_stay_zero_copy_and_typed() -> None:
    """A buffer of the right width is read in place; a buffer of another width is an error, not a
    silent converting copy (that would hide a copy the caller meant to avoid)."""
    cache = LeaderEpochCache(ENTRIES)
    assert cache.epochs_for_offsets(array.array("q", [0, 16])).tolist() == [0, 2]
    with pytest.raises(TypeError, match="int64"):
        cache.epochs_for_offsets(np.array([0, 16], dtype=np.int32))
    with pytest.raises(TypeError, match="int64"):
        cache.epochs_for_offsets(b"\0" * 16)

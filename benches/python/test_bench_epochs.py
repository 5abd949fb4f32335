"""Epoch lookups from Python: batched `epochs_for_offsets` against numpy.searchsorted on the same
data (1e6 offsets, 1000 entries), and the cost of one scalar `end_offset_for` call.

Run: pytest benches/python --benchmark-only --benchmark-group-by=group
"""

from __future__ import annotations

import numpy as np
import pytest

from epochguard._core import LeaderEpochCache

ENTRIES = 1000
LOOKUPS = 1_000_000
STRIDE = 1000  # offsets per epoch

EPOCHS = np.arange(ENTRIES, dtype=np.int32) * 2
STARTS = np.arange(ENTRIES, dtype=np.int64) * STRIDE
CACHE = LeaderEpochCache(zip(EPOCHS.tolist(), STARTS.tolist(), strict=True))
RANDOM = np.random.default_rng(7).integers(0, ENTRIES * STRIDE, LOOKUPS, dtype=np.int64)
SORTED = np.sort(RANDOM)


def numpy_epochs_for_offsets(offsets: np.ndarray) -> np.ndarray:
    """The numpy baseline: index of the largest start <= offset, -1 before the first."""
    idx = np.searchsorted(STARTS, offsets, side="right") - 1
    return np.where(idx >= 0, EPOCHS[np.maximum(idx, 0)], -1).astype(np.int32)


@pytest.mark.parametrize("order", ["random", "sorted"])
@pytest.mark.benchmark(group="epochs_for_offsets 1e6")
def test_epochguard_epochs_for_offsets(benchmark, order: str) -> None:
    offsets = RANDOM if order == "random" else SORTED
    out = benchmark(CACHE.epochs_for_offsets, offsets)
    np.testing.assert_array_equal(out, numpy_epochs_for_offsets(offsets))


@pytest.mark.parametrize("order", ["random", "sorted"])
@pytest.mark.benchmark(group="epochs_for_offsets 1e6")
def test_numpy_searchsorted(benchmark, order: str) -> None:
    offsets = RANDOM if order == "random" else SORTED
    benchmark(numpy_epochs_for_offsets, offsets)


@pytest.mark.benchmark(group="end_offset_for single call")
def test_end_offset_for_single_call(benchmark) -> None:
    leo = ENTRIES * STRIDE
    assert benchmark(CACHE.end_offset_for, 1001, leo) == (1000, 501 * STRIDE)


@pytest.mark.benchmark(group="end_offset_for single call")
def test_epoch_for_offset_single_call(benchmark) -> None:
    assert benchmark(CACHE.epoch_for_offset, 123_456) == 246

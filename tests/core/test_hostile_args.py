"""Hostile arguments at the FFI boundary: every one gets a clear ValueError / OverflowError /
TypeError / OSError / CorruptRecordError (never a PanicException, a hang or a silent wrong answer)."""

from __future__ import annotations

import array
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from epochguard._core import (
    CorruptRecordError,
    LeaderEpochCache,
    batch_index,
    decode_arrow,
    divergence_point,
    divergence_points,
    encode_batch,
    find_diverging_epoch,
    iter_batches,
    truncation_offset,
)

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
PLAIN = encode_batch([(b"k", b"v"), (None, b"w")], base_offset=5, partition_leader_epoch=3)
GZIP = encode_batch([(b"k", b"v" * 100)], base_offset=7, compression="gzip")
LOG = PLAIN + GZIP

DECODERS = {
    "iter_batches": lambda src, **kw: list(iter_batches(src, **kw)),
    "decode_arrow": lambda src, **kw: decode_arrow(src, **kw).num_rows,
    "batch_index": lambda src, **kw: batch_index(src, **kw),
}


def _kwargs(name: str, **kw: object) -> dict[str, object]:
    # batch_index takes no decompression options.
    return {k: v for k, v in kw.items() if name != "batch_index" or k != "max_decompressed_size"}


# --- byte ranges ------------------------------------------------------------------------------


@pytest.mark.parametrize("decode", DECODERS)
@pytest.mark.parametrize("offset", [-1, I64_MIN, 2**64, 2**100])
def test_offset_not_a_u64_is_overflow_error(decode: str, offset: int) -> None:
    with pytest.raises(OverflowError):
        DECODERS[decode](LOG, offset=offset)


@pytest.mark.parametrize("decode", DECODERS)
@pytest.mark.parametrize("offset", [len(LOG) + 1, I64_MAX, 2**64 - 1])
def test_offset_past_the_end_is_value_error(decode: str, offset: int) -> None:
    with pytest.raises(ValueError, match="past the end"):
        DECODERS[decode](LOG, offset=offset)


@pytest.mark.parametrize("decode", DECODERS)
def test_length_negative_is_overflow_error(decode: str) -> None:
    with pytest.raises(OverflowError):
        DECODERS[decode](LOG, length=-1)


@pytest.mark.parametrize("decode", DECODERS)
@pytest.mark.parametrize("length", [len(LOG) + 1, I64_MAX, 2**64 - 1])
def test_length_past_the_end_is_value_error_even_when_offset_plus_length_overflows(decode: str, length: int) -> None:
    with pytest.raises(ValueError, match="past the end"):
        DECODERS[decode](LOG, offset=len(PLAIN), length=length)


@pytest.mark.parametrize("decode", DECODERS)
def test_empty_range_at_the_end_decodes_nothing(decode: str) -> None:
    assert DECODERS[decode](LOG, offset=len(LOG)) in ([], 0)
    assert DECODERS[decode](LOG, offset=3, length=0) in ([], 0)


@pytest.mark.parametrize("decode", DECODERS)
def test_range_not_on_a_batch_boundary_is_corrupt_inside_the_range(decode: str) -> None:
    with pytest.raises(CorruptRecordError) as err:
        DECODERS[decode](LOG, offset=3, length=len(PLAIN))
    assert 3 <= err.value.position <= 3 + len(PLAIN)  # type: ignore[attr-defined]


# --- max_decompressed_size ---------------------------------------------------------------------


@pytest.mark.parametrize("decode", ["iter_batches", "decode_arrow"])
def test_max_decompressed_size_zero_rejects_compressed_payloads_only(decode: str) -> None:
    # An uncompressed batch is not decompressed, so the cap does not apply to it.
    assert len(list(iter_batches(PLAIN, max_decompressed_size=0))) == 1
    assert decode_arrow(PLAIN, max_decompressed_size=0).num_rows == 2
    with pytest.raises(CorruptRecordError, match="max_decompressed_size") as err:
        DECODERS[decode](LOG, max_decompressed_size=0)
    assert err.value.position == len(PLAIN) + 61  # type: ignore[attr-defined]  # the gzip payload


@pytest.mark.parametrize("decode", ["iter_batches", "decode_arrow"])
def test_max_decompressed_size_huge_is_only_a_cap_not_an_allocation(decode: str) -> None:
    # A 16 EiB cap must not be reserved up front.
    out = DECODERS[decode](LOG, max_decompressed_size=2**64 - 1)
    assert (len(out) if isinstance(out, list) else out) == (2 if decode == "iter_batches" else 3)


@pytest.mark.parametrize("decode", ["iter_batches", "decode_arrow"])
@pytest.mark.parametrize("cap", [-1, 2**64])
def test_max_decompressed_size_out_of_range_is_overflow_error(decode: str, cap: int) -> None:
    with pytest.raises(OverflowError):
        DECODERS[decode](LOG, max_decompressed_size=cap)


# --- buffers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("decode", DECODERS)
def test_wide_item_buffers_are_buffer_errors(decode: str) -> None:
    with pytest.raises(BufferError):
        DECODERS[decode](array.array("q", [1, 2, 3]))
    with pytest.raises(BufferError):
        DECODERS[decode](np.zeros(8, dtype=np.int32))


@pytest.mark.parametrize("decode", DECODERS)
def test_non_contiguous_buffer_is_buffer_error(decode: str) -> None:
    with pytest.raises(BufferError, match="C-contiguous"):
        DECODERS[decode](memoryview(LOG + LOG)[::2])
    with pytest.raises(BufferError, match="C-contiguous"):
        DECODERS[decode](np.frombuffer(LOG + LOG, dtype=np.uint8)[::2])


@pytest.mark.parametrize("decode", DECODERS)
@pytest.mark.parametrize("source", [None, 5, 1.5, [1, 2], object()])
def test_non_buffer_source_is_type_error(decode: str, source: object) -> None:
    with pytest.raises(TypeError):
        DECODERS[decode](source)


def test_signed_and_multidimensional_byte_buffers_are_read_as_bytes() -> None:
    expected = batch_index(LOG)
    assert len(expected) == 2
    assert batch_index(np.frombuffer(LOG, dtype=np.int8)) == expected
    assert batch_index(pa.py_buffer(LOG)) == expected
    assert decode_arrow(np.frombuffer(LOG, dtype=np.int8)).num_rows == 3
    two_d = np.frombuffer(PLAIN + PLAIN, dtype=np.uint8).reshape(2, len(PLAIN))
    assert len(batch_index(two_d)) == 2


# --- file sources ------------------------------------------------------------------------------


@pytest.mark.parametrize("decode", DECODERS)
def test_missing_file_is_file_not_found(decode: str, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        DECODERS[decode](tmp_path / "missing.log")


@pytest.mark.parametrize("decode", DECODERS)
def test_directory_is_is_a_directory_error(decode: str, tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError, match="is a directory"):
        DECODERS[decode](tmp_path)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        DECODERS[decode](str(tmp_path))


def test_checkpoint_directory_is_is_a_directory_error(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError):
        LeaderEpochCache.read_checkpoint(tmp_path)
    with pytest.raises(IsADirectoryError):
        LeaderEpochCache([(0, 0)]).write_checkpoint(tmp_path)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_device_is_value_error_not_an_empty_or_endless_read(device: str) -> None:
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    for decode in DECODERS.values():
        with pytest.raises(ValueError, match="not a regular file"):
            decode(device)
    with pytest.raises(ValueError, match="not a regular file"):
        LeaderEpochCache.read_checkpoint(device)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_without_writer_is_value_error_not_a_hang(tmp_path: Path) -> None:
    # open() on a FIFO with no writer blocks forever: run in a child so a regression fails, not hangs.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = textwrap.dedent(
        f"""
        from epochguard._core import LeaderEpochCache, batch_index, decode_arrow, iter_batches
        calls = [batch_index, decode_arrow, iter_batches, LeaderEpochCache.read_checkpoint]
        for call in calls:
            try:
                call({str(fifo)!r})
            except ValueError as e:
                assert "not a regular file" in str(e), e
            else:
                raise SystemExit(f"{{call}} accepted a FIFO")
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_file_truncated_while_iterated_is_a_typed_error_not_a_signal(tmp_path: Path) -> None:
    """Files are read with positioned reads, never mapped: a segment truncated by another process
    while it is being read (retention, a live broker) ends the input where the file now ends, a
    `CorruptRecordError` (or a partial tail when tolerated), where a mapping died of SIGBUS."""
    seg = tmp_path / "seg.log"
    seg.write_bytes(PLAIN * 2000)  # several pages
    code = textwrap.dedent(
        f"""
        import os
        from epochguard._core import CorruptRecordError, iter_batches
        it = iter_batches({str(seg)!r})
        next(it)
        os.truncate({str(seg)!r}, 0)
        try:
            for _ in it:
                pass
        except CorruptRecordError as e:
            print("error at", e.position, e.reason)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True, text=True)
    assert result.returncode == 0, result
    assert result.stdout.startswith(f"error at {len(PLAIN)} ") and "truncated" in result.stdout, result.stdout
    tolerated = iter_batches(str(seg), allow_partial_tail=True)
    assert list(tolerated) == [] and tolerated.partial_tail is None  # now empty: nothing is missing


def test_shrunk_file_is_a_partial_tail_when_tolerated(tmp_path: Path) -> None:
    seg = tmp_path / "seg.log"
    seg.write_bytes(PLAIN * 3)
    it = iter_batches(str(seg), allow_partial_tail=True)
    next(it)
    os.truncate(seg, len(PLAIN) + 20)  # the second batch is now cut
    assert list(it) == [] and it.partial_tail == len(PLAIN)


LIVE_READER = """
import collections, os, sys
from epochguard.errors import CorruptRecordError
from epochguard.records import batch_index, decode_to_arrow, iter_batches
path, rounds = sys.argv[1], int(sys.argv[2])
seen = collections.Counter()
for i in range(rounds):
    try:
        if i % 3 == 0:
            seen["rows" if decode_to_arrow(path).num_rows else "empty"] += 1
        elif i % 3 == 1:
            t = decode_to_arrow(path, columns=["offset", "record_digest"], allow_partial_tail=True)
            seen["partial" if t.schema.metadata else "rows"] += 1
        else:
            seen["batches" if sum(len(b) for b in iter_batches(path)) + len(batch_index(path)) else "empty"] += 1
    except CorruptRecordError:
        seen["corrupt"] += 1
    except FileNotFoundError:
        seen["missing"] += 1
print(dict(seen))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="exercises Linux truncate/unlink semantics under a reader")
def test_decoding_while_another_process_truncates_and_deletes_the_file(tmp_path: Path) -> None:
    """A child decodes one file over and over while this process truncates it to random lengths,
    deletes it and writes it again. Every read ends in records, a typed error or a partial tail;
    the child never dies of a signal."""
    import random

    seg = tmp_path / "00000000000000000000.log"
    data = b"".join(
        encode_batch([(b"k", bytes(2000))] * 50, base_offset=i * 50, compression="none") for i in range(100)
    )  # ~10 MB: a read takes long enough to be cut under it
    seg.write_bytes(data)
    child = subprocess.Popen(
        [sys.executable, "-c", LIVE_READER, str(seg), "300"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    rng = random.Random(7)
    cuts = 0
    while child.poll() is None:
        with open(seg, "r+b") if seg.exists() else open(seg, "wb") as f:
            f.truncate(rng.randrange(0, len(data)))
        cuts += 1
        if rng.random() < 0.3:
            seg.unlink()
        if rng.random() < 0.5:
            seg.write_bytes(data)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, (child.returncode, err)
    outcomes = eval(out)
    assert sum(outcomes.values()) == 300 and cuts > 10, (outcomes, cuts)
    assert set(outcomes) <= {"rows", "empty", "partial", "batches", "corrupt", "missing"}


# --- the epoch cache at the integer extremes --------------------------------------------------

EXTREME_EPOCHS = [I32_MIN, -2, -1, 0, 1, I32_MAX - 1, I32_MAX]
EXTREME_OFFSETS = [I64_MIN, -2, -1, 0, 1, I64_MAX - 1, I64_MAX]


def _extreme_cache() -> LeaderEpochCache:
    return LeaderEpochCache([(0, 0), (5, 10), (I32_MAX - 1, I64_MAX - 1), (I32_MAX, I64_MAX)])


@pytest.mark.parametrize("epoch", [I32_MIN - 1, I32_MAX + 1, 2**100])
def test_epoch_outside_int32_is_overflow_error(epoch: int) -> None:
    cache = _extreme_cache()
    for call in (
        lambda: cache.assign(epoch, 0),
        lambda: cache.end_offset_for(epoch, 0),
        lambda: cache.previous_epoch_of(epoch),
        lambda: cache.next_epoch(epoch),
        lambda: LeaderEpochCache([(epoch, 0)]),
        lambda: find_diverging_epoch(cache, 0, epoch, 0),
        lambda: truncation_offset(cache, 0, epoch, 0),
    ):
        with pytest.raises(OverflowError):
            call()


@pytest.mark.parametrize("offset", [I64_MIN - 1, I64_MAX + 1])
def test_offset_outside_int64_is_overflow_error(offset: int) -> None:
    cache = _extreme_cache()
    for call in (
        lambda: cache.assign(0, offset),
        lambda: cache.end_offset_for(0, offset),
        lambda: cache.epoch_for_offset(offset),
        lambda: cache.truncate_from_end(offset),
        lambda: cache.truncate_from_start(offset),
        lambda: divergence_point(cache, offset, cache, 0),
    ):
        with pytest.raises(OverflowError):
            call()


@pytest.mark.parametrize(("epoch", "offset"), [(-1, 0), (0, -1), (I32_MIN, I64_MIN), (I32_MIN, 0), (0, I64_MIN)])
def test_negative_assign_is_value_error_and_leaves_the_cache(epoch: int, offset: int) -> None:
    cache = _extreme_cache()
    with pytest.raises(ValueError, match="non-negative"):
        cache.assign(epoch, offset)
    assert cache == _extreme_cache()


def test_extreme_entries_answer_without_wrapping() -> None:
    cache = _extreme_cache()
    assert len(cache) == 4 and cache.latest_epoch == I32_MAX and cache.previous_epoch == I32_MAX - 1
    assert cache.end_offset_for(I32_MAX, I64_MAX) == (I32_MAX, I64_MAX)
    assert cache.end_offset_for(I32_MAX - 1, 0) == (I32_MAX - 1, I64_MAX)
    assert cache.end_offset_for(I32_MIN, 0) == (I32_MIN, 0)  # below the oldest: echoed (Kafka)
    assert cache.end_offset_for(-1, 0) == (-1, -1)
    assert cache.epoch_for_offset(I64_MIN) is None
    assert cache.epoch_for_offset(I64_MAX) == I32_MAX
    assert cache.epoch_for_offset(I64_MAX - 1) == I32_MAX - 1
    assert cache.previous_epoch_of(I32_MIN) is None and cache.previous_epoch_of(I32_MAX) == I32_MAX - 1
    assert cache.next_epoch(I32_MAX) is None and cache.next_epoch(I32_MIN) == 0
    for offset in EXTREME_OFFSETS:
        assert find_diverging_epoch(cache, offset, I32_MAX, offset) in (None, (I32_MAX, offset))
    assert truncation_offset(cache, I64_MAX, I32_MAX, I64_MIN) == (I64_MIN, True)
    assert truncation_offset(cache, I64_MIN, I32_MAX - 1, I64_MAX) == (I64_MIN, True)


def test_truncations_at_the_extremes() -> None:
    for offset in (I64_MIN, -1):
        cache = _extreme_cache()
        cache.truncate_from_end(offset)  # negative: no-op
        cache.truncate_from_start(offset)  # before every entry: no-op
        assert cache == _extreme_cache()
    cache = _extreme_cache()
    cache.truncate_from_end(I64_MAX)
    assert cache.entries() == [(0, 0), (5, 10), (I32_MAX - 1, I64_MAX - 1)]
    cache = _extreme_cache()
    cache.truncate_from_start(I64_MAX)
    assert cache.entries() == [(I32_MAX, I64_MAX)]
    cache = _extreme_cache()
    cache.truncate_from_start(I64_MAX - 1)
    assert cache.entries() == [(I32_MAX - 1, I64_MAX - 1), (I32_MAX, I64_MAX)]


def test_batched_lookups_at_the_extremes_match_the_scalar_ones() -> None:
    cache = _extreme_cache()
    epochs = np.array(EXTREME_EPOCHS, dtype=np.int32)
    for leo in (I64_MIN, 0, I64_MAX):
        out_epochs, out_offsets = cache.end_offsets_for(epochs, leo)
        assert list(zip(out_epochs.tolist(), out_offsets.tolist(), strict=True)) == [
            cache.end_offset_for(e, leo) for e in EXTREME_EPOCHS
        ]
    for offsets in (EXTREME_OFFSETS, EXTREME_OFFSETS[::-1]):  # the sorted walk and the search path
        got = cache.epochs_for_offsets(np.array(offsets, dtype=np.int64)).tolist()
        assert got == [-1 if (e := cache.epoch_for_offset(o)) is None else e for o in offsets]


@pytest.mark.parametrize(
    "bad",
    [
        np.array([1, 2], dtype=np.int64),  # wrong width for epochs
        np.array([1.0, 2.0]),
        [1.0, 2.0],  # a sequence, but not of ints
        np.int32(3),  # 0-d
        pa.chunked_array([[1, 2]], type=pa.int32()),  # a stream, not an array
        None,
    ],
)
def test_batched_epochs_of_the_wrong_type_are_type_errors(bad: object) -> None:
    with pytest.raises(TypeError, match="epochs must be"):
        _extreme_cache().end_offsets_for(bad, 0)


def test_batched_shape_and_null_problems_are_value_errors() -> None:
    cache = _extreme_cache()
    with pytest.raises(ValueError, match="one-dimensional"):
        cache.epochs_for_offsets(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="nulls"):
        cache.epochs_for_offsets(pa.array([1, None], type=pa.int64()))
    with pytest.raises(TypeError, match="int64"):
        cache.epochs_for_offsets(pa.array([1, 2], type=pa.int32()))
    # Non-contiguous and sliced inputs are read correctly, not rejected.
    strided = np.arange(0, 40, dtype=np.int64)[::7]
    assert cache.epochs_for_offsets(strided).tolist() == [0, 0, 5, 5, 5, 5]
    sliced = pa.array([I64_MIN, 3, 12, I64_MAX], type=pa.int64()).slice(1, 2)
    assert cache.epochs_for_offsets(sliced).tolist() == [0, 5]


# --- divergence_points: CSR bounds that lie ---------------------------------------------------


def _i64(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


def _i32(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int32)


B_SIDE = (_i64(0, 1), _i32(1), _i64(0), _i64(5))


@pytest.mark.parametrize(
    "bounds",
    [
        _i64(-1, 1),  # negative
        _i64(0, 2),  # past the end of the values
        _i64(1, 0),  # decreasing
        _i64(0, I64_MAX),
        _i64(I64_MIN, 1),
        _i64(I64_MAX, I64_MAX),
    ],
)
def test_lying_bounds_are_value_errors(bounds: np.ndarray) -> None:
    with pytest.raises(ValueError, match="a_bounds must be non-decreasing"):
        divergence_points(bounds, _i32(0), _i64(0), _i64(5), *B_SIDE)


def test_csr_shape_mismatches_are_value_errors() -> None:
    with pytest.raises(ValueError, match="n \\+ 1 entries"):
        divergence_points(_i64(), _i32(), _i64(), _i64(), _i64(), _i32(), _i64(), _i64())
    with pytest.raises(ValueError, match="rows"):
        divergence_points(_i64(0, 1, 1), _i32(0), _i64(0), _i64(5, 5), *B_SIDE)
    with pytest.raises(ValueError, match="a_starts"):
        divergence_points(_i64(0, 1), _i32(0), _i64(0, 1), _i64(5), *B_SIDE)
    with pytest.raises(ValueError, match="a_log_ends"):
        divergence_points(_i64(0, 1), _i32(0), _i64(0), _i64(5, 5), *B_SIDE)


@pytest.mark.parametrize(
    ("epochs", "starts"),
    [((3, 1), (0, 4)), ((1, 3), (4, 0)), ((1, 1), (0, 4)), ((-1, 3), (0, 4)), ((1, 3), (-5, 4))],
)
def test_rows_that_are_not_valid_caches_are_value_errors(epochs: tuple[int, int], starts: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        divergence_points(_i64(0, 2), _i32(*epochs), _i64(*starts), _i64(5), *B_SIDE)


def test_divergence_at_the_extremes() -> None:
    a = LeaderEpochCache([(0, 0), (I32_MAX, I64_MAX - 1)])
    b = LeaderEpochCache([(0, 0), (1, I64_MAX - 1)])
    for leo_a, leo_b, expected in [
        (I64_MAX, I64_MAX, I64_MAX - 1),
        (I64_MIN, I64_MIN, None),
        (I64_MIN, I64_MAX, I64_MAX - 1),
        (I64_MAX - 1, 0, None),
    ]:
        assert divergence_point(a, leo_a, b, leo_b) == expected
        batched = divergence_points(
            _i64(0, 2), _i32(0, I32_MAX), _i64(0, I64_MAX - 1), _i64(leo_a),
            _i64(0, 2), _i32(0, 1), _i64(0, I64_MAX - 1), _i64(leo_b),
        )  # fmt: skip
        assert batched.tolist() == [-1 if expected is None else expected]


# --- offsets near i64::MAX in record batches ----------------------------------------------------


def test_encode_batch_refuses_offsets_that_overflow() -> None:
    two = [(b"a", b"1"), (b"b", b"2")]
    batch = next(iter_batches(encode_batch(two, base_offset=I64_MAX - 2)))
    assert (batch.last_offset, batch.next_offset) == (I64_MAX - 1, I64_MAX)
    for base in (I64_MAX - 1, I64_MAX):
        with pytest.raises(ValueError, match="overflows the offset range"):
            encode_batch(two, base_offset=base)
    with pytest.raises(OverflowError):
        encode_batch(two, base_offset=2**63)


@pytest.mark.parametrize("decode", DECODERS)
def test_batch_whose_offsets_overflow_is_corrupt_not_wrapped(decode: str) -> None:
    # Base offset I64_MAX with two records: last_offset would wrap to I64_MIN. The base offset is
    # outside the v2 CRC, so only the offset check can catch it.
    batch = bytearray(encode_batch([(b"a", b"1"), (b"b", b"2")]))
    batch[:8] = I64_MAX.to_bytes(8, "big")
    with pytest.raises(CorruptRecordError, match="overflow") as err:
        DECODERS[decode](bytes(PLAIN + batch))
    assert err.value.position == len(PLAIN)  # type: ignore[attr-defined]

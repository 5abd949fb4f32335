"""Projected decodes (`decode_to_arrow(columns=...)`) against the full decode of the same bytes.

The input mixes what a segment can hold: v2 batches (uncompressed and compressed, with headers,
null and empty keys and values, a transactional batch) and legacy magic 0/1 message sets, built by
kafka-python's record builders. Computed columns are checked against values derived independently
from the full decode (pyarrow compute; the `xxhash` package for the digest).
"""

from __future__ import annotations

import itertools
import struct

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochguard.errors import CorruptRecordError
from epochguard.records import COMPUTED_COLUMNS, RECORD_COLUMNS, decode_to_arrow, encode_batch, iter_batches
from tests.core.kafka_batches import Rec, kafka_python_legacy, kafka_python_v2

xxhash = pytest.importorskip("xxhash", reason="the independent XXH3 check needs the xxhash package (dev extra)")

ALL_COLUMNS = RECORD_COLUMNS + COMPUTED_COLUMNS


def _segment() -> bytes:
    plain = [
        Rec(b"k0", b"v0", [("h", b"1"), ("h", None)], 1_000),
        Rec(None, b"", [], 1_001),
        Rec(b"", None, [("", b"")], 1_002),
        Rec(b"k3", b"x" * 300, [], 1_003),
    ]
    parts = [
        kafka_python_v2(plain, base_offset=0, partition_leader_epoch=3),
        kafka_python_v2(plain[:2], compression="zstd", base_offset=4, partition_leader_epoch=3),
        kafka_python_v2(
            plain[2:], compression="gzip", base_offset=6, partition_leader_epoch=5, producer_id=9,
            producer_epoch=1, base_sequence=40, is_transactional=True,
        ),
        encode_batch([(b"k", b"v", [("trace", b"t")])], base_offset=8, partition_leader_epoch=6, compression="lz4"),
    ]
    legacy = [Rec(b"a", b"b", [], 2_000), Rec(None, b"c", [], 2_001)]
    return (
        kafka_python_legacy(0, legacy, first_offset=100)
        + kafka_python_legacy(1, legacy, compression="gzip", first_offset=102)
        + b"".join(parts)
    )


SEGMENT = _segment()
FULL = decode_to_arrow(SEGMENT)


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _bytes(b: bytes | None) -> bytes:
    return _varint(-1) if b is None else _varint(len(b)) + b


def _digest(key: bytes | None, value: bytes | None, headers: list[dict]) -> int:
    encoded = _bytes(key) + _bytes(value) + _varint(len(headers))
    encoded += b"".join(_bytes(h["key"].encode()) + _bytes(h["value"]) for h in headers)
    return struct.unpack("<q", struct.pack("<Q", xxhash.xxh3_64_intdigest(encoded)))[0]


def _batch_ranges() -> list[tuple[int, int]]:
    ranges = []
    for batch in iter_batches(SEGMENT):
        ranges += [(batch.file_position, batch.size_in_bytes)] * len(batch)
    return ranges


def expected(name: str) -> pa.Array:
    """Column `name` derived from the full decode, not from the projected decoder."""
    if name in RECORD_COLUMNS:
        return FULL.column(name).combine_chunks()
    if name == "key_length":
        return pc.binary_length(FULL.column("key")).combine_chunks()
    if name == "value_length":
        return pc.binary_length(FULL.column("value")).combine_chunks()
    if name == "headers_count":
        return pc.list_value_length(FULL.column("headers")).cast(pa.int32()).combine_chunks()
    if name == "record_digest":
        rows = FULL.select(["key", "value", "headers"]).to_pylist()
        return pa.array([_digest(r["key"], r["value"], r["headers"]) for r in rows], pa.int64())
    if name == "batch_position":
        return pa.array([p for p, _ in _batch_ranges()], pa.int64())
    if name == "batch_size":
        return pa.array([s for _, s in _batch_ranges()], pa.int32())
    raise AssertionError(name)


EXPECTED = {name: expected(name) for name in ALL_COLUMNS}


def check(columns: list[str]) -> None:
    table = decode_to_arrow(SEGMENT, columns=columns)
    assert table.column_names == columns
    assert table.num_rows == FULL.num_rows
    for name in columns:
        got = table.column(name).combine_chunks()
        assert got.type == EXPECTED[name].type, name
        assert got.equals(EXPECTED[name]), name


def test_the_input_covers_nulls_empties_headers_and_every_magic() -> None:
    assert set(FULL.column("magic").to_pylist()) == {0, 1, 2}
    assert None in FULL.column("key").to_pylist() and b"" in FULL.column("key").to_pylist()
    assert None in FULL.column("value").to_pylist() and b"" in FULL.column("value").to_pylist()
    assert max(EXPECTED["headers_count"].to_pylist()) == 2
    assert FULL.num_rows == 4 + 2 + 2 + 1 + 2 + 2


def test_default_is_the_full_decode_and_all_columns_in_order() -> None:
    assert decode_to_arrow(SEGMENT, columns=list(RECORD_COLUMNS)).equals(FULL)
    check(list(ALL_COLUMNS))
    check(list(reversed(ALL_COLUMNS)))


@pytest.mark.parametrize("columns", [[a] for a in ALL_COLUMNS] + [list(p) for p in itertools.permutations(ALL_COLUMNS, 2)])
def test_every_single_column_and_ordered_pair(columns: list[str]) -> None:
    check(columns)


@settings(max_examples=200, deadline=None)
@given(st.permutations(ALL_COLUMNS), st.integers(0, len(ALL_COLUMNS)))
def test_any_subset_in_any_order(order: list[str], n: int) -> None:
    check(order[:n])


def test_no_columns_still_counts_records() -> None:
    table = decode_to_arrow(SEGMENT, columns=[])
    assert table.num_columns == 0 and table.num_rows == FULL.num_rows


def test_null_and_empty_have_different_digests() -> None:
    data = encode_batch([(None, b"v"), (b"", b"v"), (b"k", None), (b"k", b""), (b"k", b"v", [("h", None)]),
                         (b"k", b"v", [("h", b"")])])
    digests = decode_to_arrow(data, columns=["record_digest"]).column(0).to_pylist()
    assert len(set(digests)) == 6


def test_digest_is_the_same_whatever_the_codec() -> None:
    records = [(b"k", b"v" * 100, [("h", b"x")]), (None, b"w", [])]
    digests = {
        codec: decode_to_arrow(encode_batch(records, compression=codec), columns=["record_digest"]).column(0)
        for codec in ("none", "gzip", "snappy", "lz4", "zstd")
    }
    assert len({tuple(d.to_pylist()) for d in digests.values()}) == 1


@pytest.mark.parametrize("bad", [["nope"], ["offset", "offset"]])
def test_unknown_or_repeated_column_is_a_value_error(bad: list[str]) -> None:
    with pytest.raises(ValueError, match=r"nope|twice"):
        decode_to_arrow(SEGMENT, columns=bad)


@pytest.mark.parametrize("columns", [["offset"], ["record_digest"], []])
def test_a_projection_rejects_what_the_full_decode_rejects(columns: list[str]) -> None:
    corrupt = bytearray(SEGMENT)
    corrupt[-5] ^= 0xFF  # inside the last batch's records: its CRC no longer matches
    with pytest.raises(CorruptRecordError) as full:
        decode_to_arrow(bytes(corrupt))
    with pytest.raises(CorruptRecordError) as projected:
        decode_to_arrow(bytes(corrupt), columns=columns)
    assert projected.value.position == full.value.position

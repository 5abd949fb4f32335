"""Every class of malformed input raises CorruptRecordError with a sensible position; nothing
panics, hangs or allocates what a corrupt header claims."""

from __future__ import annotations

import gzip
import struct

import lz4.frame
import pytest
import snappy
import zstandard
from kafka_batches import Rec, kafka_python_legacy, set_v2_field, v2_with_payload

from epochguard.errors import CorruptRecordError
from epochguard.records import batch_index, decode_to_arrow, encode_batch, iter_batches

GOOD = encode_batch([(b"k", b"v" * 50, [("h", b"1")]), (None, b"w" * 50)], base_offset=10, partition_leader_epoch=2)
PREFIX = encode_batch([(b"a", b"b")], base_offset=0)  # a valid batch first: positions must be absolute


def corrupt(data: bytes, **kwargs) -> CorruptRecordError:
    """Decode through both entry points; both must raise the same error."""
    with pytest.raises(CorruptRecordError) as via_iter:
        list(iter_batches(data, **kwargs))
    with pytest.raises(CorruptRecordError) as via_arrow:
        decode_to_arrow(data, **kwargs)
    assert (via_iter.value.position, via_iter.value.reason) == (via_arrow.value.position, via_arrow.value.reason)
    return via_iter.value


def test_bad_crc_raises_and_can_be_skipped() -> None:
    bad = bytearray(GOOD)
    bad[-2] ^= 0xFF  # last byte of the last value (the very last byte is its header count)
    err = corrupt(PREFIX + bytes(bad))
    assert err.position == len(PREFIX) and "CRC" in err.reason
    (batch,) = list(iter_batches(bytes(bad), verify_crc=False))
    assert batch.records()[1].value == b"w" * 49 + bytes([ord("w") ^ 0xFF])


def test_truncated_batch_is_partial_tail_or_error() -> None:
    for cut in (1, 11, 12, 30, len(GOOD) - 1):
        data = PREFIX + GOOD[:cut]
        err = corrupt(data)
        assert err.position == len(PREFIX) and "partial" in err.reason
        it = iter_batches(data, allow_partial_tail=True)
        assert len(list(it)) == 1 and it.partial_tail == len(PREFIX)
        assert decode_to_arrow(data, allow_partial_tail=True).num_rows == 1
        assert len(batch_index(data, allow_partial_tail=True)) == 1


@pytest.mark.parametrize("length", [-1, -(2**31), 0, 13])
def test_negative_or_tiny_batch_length(length: int) -> None:
    data = PREFIX + set_v2_field(GOOD, ">i", 8, length, fix_crc=False)
    err = corrupt(data, allow_partial_tail=True)  # not mistaken for a partial tail
    assert err.position == len(PREFIX) and "length" in err.reason


def test_v2_length_below_header_size() -> None:
    data = set_v2_field(GOOD, ">i", 8, 40, fix_crc=False) + bytes(100)
    assert "v2 header" in corrupt(data).reason


def test_length_past_the_end_is_partial() -> None:
    data = set_v2_field(GOOD, ">i", 8, 2**31 - 1, fix_crc=False)
    assert "partial" in corrupt(data).reason
    it = iter_batches(data, allow_partial_tail=True)
    assert list(it) == [] and it.partial_tail == 0


@pytest.mark.parametrize("count", [-1, -(2**31)])
def test_negative_record_count(count: int) -> None:
    err = corrupt(PREFIX + set_v2_field(GOOD, ">i", 57, count))
    assert err.position == len(PREFIX) + 57 and "negative record count" in err.reason


@pytest.mark.parametrize(("fmt", "at", "value", "field_error"), [
    (">i", 57, -1, "negative record count"),
    (">h", 21, 7, "unknown compression codec id 7"),
])
def test_crc_is_checked_before_the_header_fields_it_covers(fmt: str, at: int, value: int, field_error: str,
                                                          tmp_path) -> None:
    """A batch corrupted in a field its CRC covers, CRC left stale: with verify_crc the CRC mismatch
    (Kafka's `ensureValid` checks the CRC first), without it the field; from a file alike."""
    data = PREFIX + set_v2_field(GOOD, fmt, at, value, fix_crc=False)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    for source in (data, str(path)):
        with pytest.raises(CorruptRecordError) as arrow:
            decode_to_arrow(source)
        with pytest.raises(CorruptRecordError) as batches:
            list(iter_batches(source))
        for err in (arrow.value, batches.value):
            assert err.position == len(PREFIX) and "CRC mismatch" in err.reason, err.reason
        with pytest.raises(CorruptRecordError) as unverified:
            decode_to_arrow(source, verify_crc=False)
        assert field_error in unverified.value.reason and unverified.value.position == len(PREFIX) + at
    with pytest.raises(CorruptRecordError) as threaded:
        decode_to_arrow(data * 2, threads=2)
    assert "CRC mismatch" in threaded.value.reason


def test_absurd_record_count_fails_before_allocating() -> None:
    err = corrupt(set_v2_field(GOOD, ">i", 57, 2**31 - 1))
    assert "cannot fit" in err.reason and err.position == 61


def test_record_count_mismatch() -> None:
    err = corrupt(set_v2_field(GOOD, ">i", 57, 3))  # a third record that is not there
    assert "record 2: length: input ends inside a varint" in err.reason and err.position == len(GOOD)
    err = corrupt(set_v2_field(GOOD, ">i", 57, 1))  # a second record not counted
    assert "bytes left after the last of 1 records" in err.reason and 61 < err.position < len(GOOD)


def test_record_count_mismatch_compressed() -> None:
    packed = encode_batch([(b"k", b"v" * 50)] * 5, compression="zstd")
    err = corrupt(set_v2_field(packed, ">i", 57, 4))
    assert "bytes left after the last of 4 records" in err.reason and err.position == 0
    err = corrupt(set_v2_field(packed, ">i", 57, 6))
    assert "decompressed" in err.reason


def test_overlong_varints() -> None:
    # Record length as a 6-byte varint.
    err = corrupt(v2_with_payload(b"\xff\xff\xff\xff\xff\x01" + bytes(10), count=1))
    assert "varint" in err.reason and err.position == 61
    # Timestamp delta as an 11-byte varlong inside a well-framed record.
    body = b"\x00" + b"\xff" * 10 + b"\x01" + b"\x00\x01\x01\x00"
    err = corrupt(v2_with_payload(bytes([len(body) * 2]) + body, count=1))
    assert "timestamp delta" in err.reason and "varint" in err.reason


def test_record_body_length_mismatch_and_bad_headers() -> None:
    good_record = b"\x00\x00\x00\x01\x01\x00"  # attributes, ts delta, offset delta, null key, null value, 0 headers
    assert len(list(iter_batches(v2_with_payload(bytes([len(good_record) * 2]) + good_record, count=1)))) == 1
    longer = good_record + b"\x00"
    err = corrupt(v2_with_payload(bytes([len(longer) * 2]) + longer, count=1))
    assert "left in the record" in err.reason
    negative_headers = good_record[:-1] + b"\x01"  # header count -1
    err = corrupt(v2_with_payload(bytes([len(negative_headers) * 2]) + negative_headers, count=1))
    assert "negative header count" in err.reason
    null_key = good_record[:-1] + b"\x02\x01\x01"  # one header, key length -1
    err = corrupt(v2_with_payload(bytes([len(null_key) * 2]) + null_key, count=1))
    assert "null header key" in err.reason
    bad_utf8 = good_record[:-1] + b"\x02\x02\xff\x01"
    err = corrupt(v2_with_payload(bytes([len(bad_utf8) * 2]) + bad_utf8, count=1))
    assert "UTF-8" in err.reason
    huge_headers = good_record[:-1] + b"\xfe\xff\xff\xff\x0f"
    err = corrupt(v2_with_payload(bytes([len(huge_headers) * 2]) + huge_headers, count=1))
    assert "headers cannot fit" in err.reason
    key_past_end = b"\x00\x00\x00\x7e"  # key length 63 in a 4-byte body
    err = corrupt(v2_with_payload(bytes([len(key_past_end) * 2]) + key_past_end + bytes(3), count=1))
    assert "key length" in err.reason


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_codec(codec_id: int) -> None:
    err = corrupt(PREFIX + set_v2_field(GOOD, ">h", 21, codec_id))
    assert err.position == len(PREFIX) + 21 and f"codec id {codec_id}" in err.reason


@pytest.mark.parametrize("magic", [3, 127, -1])
def test_unknown_magic(magic: int) -> None:
    err = corrupt(PREFIX + set_v2_field(GOOD, ">b", 16, magic, fix_crc=False))
    assert err.position == len(PREFIX) + 16 and "magic" in err.reason


@pytest.mark.parametrize("codec_id, name", [(1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd")])
@pytest.mark.parametrize("garbage", [b"", b"\x00" * 40, bytes(range(256)), b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x7f\xff\xff\xff"])
def test_codec_garbage(codec_id: int, name: str, garbage: bytes) -> None:
    data = v2_with_payload(garbage, count=1, attributes=codec_id)
    err = corrupt(data)
    assert err.position in (0, 61)
    assert name in err.reason or "record count" in err.reason


@pytest.mark.parametrize(
    "compress, codec_id",
    [
        (lambda b: zstandard.ZstdCompressor().compress(b), 4),
        (lambda b: gzip.compress(b, compresslevel=1), 1),
        (lambda b: snappy.compress(b), 2),
        (lambda b: lz4.frame.compress(b, block_linked=False), 3),
    ],
    ids=["zstd", "gzip", "snappy", "lz4"],
)
def test_decompression_bomb_is_capped(compress, codec_id: int) -> None:
    bomb = compress(bytes(100 * 1024 * 1024))  # 100 MiB of zeros in a few KiB
    assert len(bomb) < 5_000_000
    err = corrupt(v2_with_payload(bomb, count=1, attributes=codec_id))
    assert "max_decompressed_size" in err.reason and err.position == 61


def test_snappy_length_claim_is_not_trusted() -> None:
    lie = bytes([0x80, 0x80, 0x80, 0x1E]) + b"\x00" * 8  # varint preamble: 60 MiB, from 12 bytes
    err = corrupt(v2_with_payload(lie, count=1, attributes=2))
    assert "claims" in err.reason and "snappy" in err.reason


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_cap_applies_to_legitimate_data(codec: str) -> None:
    data = encode_batch([(None, b"x" * 10_000)] * 10, compression=codec)
    assert decode_to_arrow(data, max_decompressed_size=200_000).num_rows == 10
    err = corrupt(data, max_decompressed_size=50_000)
    assert "max_decompressed_size" in err.reason


def test_legacy_inner_crc_and_structure() -> None:
    data = bytearray(kafka_python_legacy(1, [Rec(b"k", b"value" * 30, [], 1)] * 3, compression="none"))
    data[-1] ^= 1
    err = corrupt(bytes(data))
    assert "CRC" in err.reason and err.position == 2 * (len(data) // 3)
    # A gzip wrapper whose inner message set is empty / truncated / has a bad inner CRC.
    for inner, what in [
        (b"", "no inner messages"),
        (struct.pack(">qi", 0, 100) + bytes(20), "runs past the end"),
    ]:
        wrapper = legacy_wrapper(gzip.compress(inner))
        assert what in corrupt(wrapper).reason
    inner = bytearray(kafka_python_legacy(1, [Rec(None, b"v", [], 5)], compression="none"))
    inner[-1] ^= 1
    err = corrupt(legacy_wrapper(gzip.compress(bytes(inner))))
    assert "inner message" in err.reason and "CRC" in err.reason
    assert len(list(iter_batches(legacy_wrapper(gzip.compress(bytes(inner))), verify_crc=False))) == 1


def legacy_wrapper(value: bytes, magic: int = 1, codec: int = 1) -> bytes:
    """A legacy compressed wrapper message around `value`, with a valid CRC-32."""
    import zlib

    body = struct.pack(">bb", magic, codec) + (struct.pack(">q", 0) if magic == 1 else b"")
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(msg)) + msg


def test_random_mutations_never_escape_as_other_errors() -> None:
    import random

    rng = random.Random(1234)
    seeds = [GOOD, encode_batch([(b"k", b"v" * 300)] * 4, compression="lz4"), kafka_python_legacy(0, [Rec(b"k", b"v" * 200)] * 5, compression="gzip")]
    for _ in range(3000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.3:
            del data[rng.randrange(len(data)) :]
        for verify in (True, False):
            try:
                decode_to_arrow(bytes(data), verify_crc=verify)
            except CorruptRecordError as e:
                assert 0 <= e.position <= len(data)

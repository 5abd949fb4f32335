"""Codec framings other writers produce (independent compressors from Python packages): LZ4 with
block/content checksums, content size and linked blocks; raw and xerial snappy; multi-frame zstd
without content size (as zstd-jni streams it); multi-member gzip; magic-1 log-append time."""

from __future__ import annotations

import gzip
import struct
import zlib

import lz4.frame
import pytest
import snappy
import zstandard
from kafka_batches import Rec, fix_v2_crc, kafka_python_legacy

from epochguard.errors import CorruptRecordError
from epochguard.records import decode_to_arrow, encode_batch, iter_batches

RECORDS = [(b"k%d" % i, b"some value text %d " % i * 30, [("h", b"v")], 1_700_000_000_000 + i) for i in range(200)]
PLAIN = encode_batch(RECORDS, base_offset=0)
PAYLOAD = PLAIN[61:]  # the uncompressed records section


def with_codec(codec_id: int, compressed: bytes) -> bytes:
    """PLAIN's header (timestamps, count) around another compressor's output."""
    batch = bytearray(PLAIN[:61]) + compressed
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">h", batch, 21, codec_id)
    return fix_v2_crc(batch)


def assert_same_records(data: bytes) -> None:
    (batch,) = list(iter_batches(data))
    assert [(r.key, r.value, r.headers, r.timestamp) for r in batch.records()] == [
        (k, v, list(h), ts) for k, v, h, ts in RECORDS
    ]
    assert decode_to_arrow(data).column("value").to_pylist() == [r[1] for r in RECORDS]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"block_checksum": True, "content_checksum": True, "store_size": True},
        {"block_size": lz4.frame.BLOCKSIZE_MAX4MB, "store_size": False},
        {"block_linked": True},  # linked blocks: the streaming fallback
        {"block_linked": True, "content_checksum": True},
        {"compression_level": 12},
    ],
    ids=["default", "checksums+size", "4MB-blocks", "linked", "linked+checksum", "hc"],
)
def test_lz4_frame_variants(options: dict) -> None:
    options = {"block_linked": False, **options}
    assert_same_records(with_codec(3, lz4.frame.compress(PAYLOAD, **options)))


def test_lz4_bad_checksums_are_corrupt() -> None:
    frame = bytearray(lz4.frame.compress(PAYLOAD, block_linked=False, content_checksum=True, block_checksum=True))
    for at, what in [(6, "header checksum"), (len(frame) - 1, "content checksum"), (len(frame) - 12, "block checksum"), (len(frame) - 20, "LZ4")]:
        bad = bytearray(frame)
        bad[at] ^= 0xFF
        with pytest.raises(CorruptRecordError, match="lz4") as info:
            list(iter_batches(with_codec(3, bytes(bad))))
        assert what in info.value.reason and info.value.position == 61


def test_lz4_multiple_frames() -> None:
    half = len(PAYLOAD) // 2
    two = lz4.frame.compress(PAYLOAD[:half], block_linked=False) + lz4.frame.compress(PAYLOAD[half:], block_linked=False)
    assert_same_records(with_codec(3, two))


def test_snappy_raw_and_xerial() -> None:
    assert_same_records(with_codec(2, snappy.compress(PAYLOAD)))  # raw block (librdkafka style)
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for start in range(0, len(PAYLOAD), 1000):  # odd block size: framing, not sizes, matters
        block = snappy.compress(PAYLOAD[start : start + 1000])
        xerial += struct.pack(">i", len(block)) + block
    assert_same_records(with_codec(2, xerial))
    with pytest.raises(CorruptRecordError, match="xerial"):
        list(iter_batches(with_codec(2, xerial[:-5])))


def test_zstd_streamed_multi_frame_without_content_size() -> None:
    cctx = zstandard.ZstdCompressor(write_content_size=False)
    half = len(PAYLOAD) // 3
    frames = cctx.compress(PAYLOAD[:half]) + cctx.compress(PAYLOAD[half:])
    assert zstandard.frame_content_size(frames) == -1
    assert_same_records(with_codec(4, frames))
    with pytest.raises(CorruptRecordError, match="zstd"):
        list(iter_batches(with_codec(4, frames[:-3])))


def test_gzip_multi_member() -> None:
    half = len(PAYLOAD) // 2
    assert_same_records(with_codec(1, gzip.compress(PAYLOAD[:half]) + gzip.compress(PAYLOAD[half:])))


def test_magic1_log_append_time_wrapper() -> None:
    """A broker with LogAppendTime rewrites the wrapper's timestamp; inner records take it."""
    data = bytearray(kafka_python_legacy(1, [Rec(b"k", b"v" * 100, [], 1000 + i) for i in range(5)], compression="gzip"))
    struct.pack_into(">b", data, 17, data[17] | 0x08)
    struct.pack_into(">q", data, 18, 99_999)
    struct.pack_into(">I", data, 12, zlib.crc32(data[16:]))
    (batch,) = list(iter_batches(bytes(data)))
    assert batch.timestamp_type == 1 and batch.max_timestamp == 99_999
    assert [r.timestamp for r in batch.records()] == [99_999] * 5
    assert decode_to_arrow(bytes(data)).column("timestamp").to_pylist() == [99_999] * 5

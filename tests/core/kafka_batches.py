"""Helpers for record-batch tests: batches built by kafka-python's own record builders (an
independent encoder), and byte surgery for corrupt-input tests."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import kafka.codec
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.util import calc_crc32c

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32, only for kafka-python's Kafka 0.8 LZ4 header (it wants the `xxhash` package)."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    n, i = len(data), 0
    if n >= 16:
        v = [(seed + p1 + p2) & mask, (seed + p2) & mask, seed & mask, (seed - p1) & mask]
        while i + 16 <= n:
            for j in range(4):
                lane = int.from_bytes(data[i + 4 * j : i + 4 * j + 4], "little")
                v[j] = (rotl((v[j] + lane * p2) & mask, 13) * p1) & mask
            i += 16
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & mask
    else:
        h = (seed + p5) & mask
    h = (h + n) & mask
    while i + 4 <= n:
        h = (rotl((h + int.from_bytes(data[i : i + 4], "little") * p3) & mask, 17) * p4) & mask
        i += 4
    while i < n:
        h = (rotl((h + data[i] * p5) & mask, 11) * p1) & mask
        i += 1
    h ^= h >> 15
    h = (h * p2) & mask
    h ^= h >> 13
    h = (h * p3) & mask
    return h ^ (h >> 16)


class _XXHashShim:
    class _Digest:
        def __init__(self, data: bytes) -> None:
            self._value = xxh32(bytes(data))

        def digest(self) -> bytes:
            return self._value.to_bytes(4, "big")

    xxh32 = _Digest


if kafka.codec.xxhash is None:
    kafka.codec.xxhash = _XXHashShim  # lets LegacyRecordBatchBuilder write magic-0 LZ4


@dataclass
class Rec:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int | None = None


def kafka_python_v2(
    records: Sequence[Rec],
    *,
    compression: str = "none",
    base_offset: int = 0,
    partition_leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
) -> bytes:
    """A v2 batch from kafka-python's `DefaultRecordBatchBuilder`. Base offset and leader epoch are
    written by the broker (outside the CRC), so they are patched in afterwards, as a broker does."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODEC_IDS[compression],
        is_transactional=is_transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 30,
    )
    for i, r in enumerate(records):
        assert builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=r.headers) is not None
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 12, partition_leader_epoch)
    return bytes(buf)


def kafka_python_legacy(
    magic: int, records: Sequence[Rec], *, compression: str = "none", first_offset: int = 0
) -> bytes:
    """A magic 0/1 message set from kafka-python's `LegacyRecordBatchBuilder`. Compressed: one
    wrapper whose offset is patched to the absolute offset of its last inner message, as a broker
    writes it (inner offsets are absolute for magic 0, relative 0..n-1 for magic 1)."""
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=CODEC_IDS[compression], batch_size=1 << 30)
    for i, r in enumerate(records):
        inner_offset = first_offset + i if (magic == 0 or compression == "none") else i
        assert builder.append(inner_offset, timestamp=r.timestamp, key=r.key, value=r.value) is not None
    buf = bytearray(builder.build())
    if compression != "none":
        struct.pack_into(">q", buf, 0, first_offset + len(records) - 1)
    return bytes(buf)


def fix_v2_crc(batch: bytes | bytearray) -> bytes:
    """Recompute a v2 batch's CRC-32C after editing it (to reach checks past the CRC)."""
    buf = bytearray(batch)
    struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def set_v2_field(batch: bytes, fmt: str, at: int, value: int, *, fix_crc: bool = True) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(fmt, buf, at, value)
    return fix_v2_crc(buf) if fix_crc else bytes(buf)


def v2_with_payload(records_payload: bytes, *, count: int, attributes: int = 0) -> bytes:
    """A v2 batch around a hand-written records payload (for malformed-record tests)."""
    header = struct.pack(
        ">qiibIhiqqqhii", 0, 49 + len(records_payload), 0, 2, 0, attributes, max(count - 1, 0), 0, 0, -1, -1, -1, count
    )
    return fix_v2_crc(header + records_payload)

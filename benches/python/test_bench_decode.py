"""Decode throughput on the same bytes: epochguard (`decode_to_arrow`, single thread) vs
kafka-python's reader, and compressed decode vs raw lz4/zstd decompression of the same payloads.

Run: `pytest benches/python --benchmark-only --benchmark-group-by=group`. Goals: >= 8x kafka-python
MB/s on 1 KiB values, >= 50x its records/s on 100-byte values, compressed decode >= 0.7x the speed
of raw decompression alone.
"""

from __future__ import annotations

import random
import struct

import lz4.frame
import pytest
import zstandard
from kafka.record.memory_records import MemoryRecords

from epochguard.records import decode_to_arrow, encode_batch

WORDS = [b"alpha", b"beta", b"gamma", b"delta", b"epsilon", b"kafka", b"epoch", b"leader", b"offset", b"record"]


def make_value(rng: random.Random, size: int) -> bytes:
    """Text-like bytes (compressible about 3-4x, like JSON payloads)."""
    out = bytearray()
    while len(out) < size:
        out += rng.choice(WORDS) + b" " + str(rng.randrange(10**6)).encode() + b","
    return bytes(out[:size])


def make_log(records: int, value_size: int, per_batch: int, compression: str = "none") -> bytes:
    rng = random.Random(value_size)
    parts, offset = [], 0
    while offset < records:
        n = min(per_batch, records - offset)
        recs = [
            (b"key-%d" % (offset + i), make_value(rng, value_size), [], 1_700_000_000_000 + offset + i)
            for i in range(n)
        ]
        parts.append(encode_batch(recs, base_offset=offset, partition_leader_epoch=5, compression=compression))
        offset += n
    return b"".join(parts)


def batch_payloads(log: bytes) -> list[bytes]:
    """The compressed records section of each v2 batch."""
    out, pos = [], 0
    while pos < len(log):
        (length,) = struct.unpack_from(">i", log, pos + 8)
        out.append(log[pos + 61 : pos + 12 + length])
        pos += 12 + length
    return out


def kafka_python_decode(log: bytes) -> int:
    touched = 0
    records = MemoryRecords(log)
    while (batch := records.next_batch()) is not None:
        for r in batch:
            touched += len(r.value) + (len(r.key) if r.key is not None else 0)
    return touched


LOG_1K = make_log(20_000, 1024, 100)  # ~21 MB
LOG_100B = make_log(100_000, 100, 500)  # ~12 MB
LOGS_COMPRESSED = {codec: make_log(40_000, 1024, 100, codec) for codec in ("lz4", "zstd")}


def _throughput(benchmark, nbytes: int, nrecords: int) -> None:
    seconds = benchmark.stats.stats.median
    benchmark.extra_info["MB/s"] = round(nbytes / seconds / 1e6, 1)
    benchmark.extra_info["records/s"] = round(nrecords / seconds)


@pytest.mark.benchmark(group="decode 1 KiB values (MB/s)")
def test_epochguard_1k(benchmark) -> None:
    table = benchmark(decode_to_arrow, LOG_1K)
    assert table.num_rows == 20_000
    _throughput(benchmark, len(LOG_1K), 20_000)


@pytest.mark.benchmark(group="decode 1 KiB values (MB/s)")
def test_kafka_python_1k(benchmark) -> None:
    benchmark.pedantic(kafka_python_decode, args=(LOG_1K,), rounds=3, iterations=1)
    _throughput(benchmark, len(LOG_1K), 20_000)


@pytest.mark.benchmark(group="decode 100-byte values (records/s)")
def test_epochguard_100b(benchmark) -> None:
    table = benchmark(decode_to_arrow, LOG_100B)
    assert table.num_rows == 100_000
    _throughput(benchmark, len(LOG_100B), 100_000)


@pytest.mark.benchmark(group="decode 100-byte values (records/s)")
def test_kafka_python_100b(benchmark) -> None:
    benchmark.pedantic(kafka_python_decode, args=(LOG_100B,), rounds=3, iterations=1)
    _throughput(benchmark, len(LOG_100B), 100_000)


RAW = {
    "lz4": lz4.frame.decompress,
    "zstd": zstandard.ZstdDecompressor().decompress,
}


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_compressed_decode(benchmark, codec: str) -> None:
    benchmark.group = f"compressed {codec}: decode vs raw decompression"
    log = LOGS_COMPRESSED[codec]
    table = benchmark(decode_to_arrow, log)
    assert table.num_rows == 40_000
    _throughput(benchmark, len(log), 40_000)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_raw_decompression(benchmark, codec: str) -> None:
    benchmark.group = f"compressed {codec}: decode vs raw decompression"
    payloads = batch_payloads(LOGS_COMPRESSED[codec])
    decompress = RAW[codec]

    def run() -> int:
        return sum(len(decompress(p)) for p in payloads)

    assert benchmark(run) > 40_000 * 1024
    _throughput(benchmark, len(LOGS_COMPRESSED[codec]), 40_000)

"""Decode throughput on the same bytes, single thread, every figure against a baseline of the same run:

- uncompressed `decode_to_arrow`, 1 KiB and 100-byte values, vs kafka-python's decoder (`MemoryRecords`,
  whose v2 batches are its `DefaultRecordBatch`) and vs this machine's memory bandwidth: a numpy copy of
  the same bytes into a buffer allocated once (`memcpy`). Goals (issue 36): >= 25x kafka-python on 1 KiB
  values, >= 80x on 100-byte ones; the memcpy fraction is reported;
- compressed `decode_to_arrow` (lz4, zstd, snappy, gzip) vs the bare decompression of the same batches'
  payloads by the Python bindings of the codecs' own libraries (`lz4.frame`, `zstandard`, cramjam's raw
  snappy over the xerial blocks, `zlib`): goals lz4 >= 0.9x, zstd >= 1.0x; snappy and gzip reported;
- each of those again with `binary_view=True` (keys and values as views into the input or the
  decompression buffer instead of copies), beside the same baselines.

The memcpy and bare-decompression baselines take turns with the decode round by round (turns.py: on a
shared 2-core machine a burst of load then falls on both); their round times are in the JSON's
`extra_info["baseline_seconds"]`, which benches/ratios.py divides by. kafka-python is 10-100x slower, so
it runs as its own benchmark.

Run: `pytest benches/python/test_bench_decode.py --benchmark-only --benchmark-group-by=group`, then
`python benches/ratios.py` over its JSON (`make bench` does both).
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable
from typing import Any

import cramjam
import lz4.frame
import numpy as np
import pytest
import zstandard
from kafka.record.memory_records import MemoryRecords
from turns import take_turns

from epochguard.records import decode_to_arrow, encode_batch

WORDS = [b"alpha", b"beta", b"gamma", b"delta", b"epsilon", b"kafka", b"epoch", b"leader", b"offset", b"record"]
ROUNDS = 30


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


def xerial_blocks(payload: bytes) -> list[bytes]:
    """The raw snappy blocks of a xerial-framed payload (16-byte header, then length + block)."""
    out, pos = [], 16
    while pos < len(payload):
        (length,) = struct.unpack_from(">i", payload, pos)
        out.append(payload[pos + 4 : pos + 4 + length])
        pos += 4 + length
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
CODECS = ("lz4", "zstd", "snappy", "gzip")
LOGS_COMPRESSED = {codec: make_log(40_000, 1024, 100, codec) for codec in CODECS}


def _throughput(benchmark: Any, nbytes: int, nrecords: int) -> None:
    seconds = benchmark.stats.stats.min
    benchmark.extra_info["MB/s"] = round(nbytes / seconds / 1e6, 1)
    benchmark.extra_info["records/s"] = round(nrecords / seconds)


def _memcpy_of(log: bytes) -> Callable[[], None]:
    """A copy of `log`'s bytes into a destination allocated (and faulted in) once: memory bandwidth."""
    src = np.frombuffer(log, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    return lambda: np.copyto(dst, src)


def _turns(benchmark: Any, ours: Callable[[], Any], theirs: Callable[[], Any], baseline: str, nbytes: int,
           nrecords: int) -> None:
    times = take_turns(benchmark, ours, theirs, rounds=ROUNDS, baseline=baseline)
    _throughput(benchmark, nbytes, nrecords)
    benchmark.extra_info["baseline MB/s"] = round(nbytes / min(times) / 1e6, 1)


def _against_memcpy(benchmark: Any, log: bytes, records: int, binary_view: bool) -> None:
    """`decode_to_arrow(log)` taking turns with a memcpy of the same bytes."""
    assert decode_to_arrow(log, binary_view=binary_view).num_rows == records
    _turns(benchmark, lambda: decode_to_arrow(log, binary_view=binary_view), _memcpy_of(log), "numpy memcpy",
           len(log), records)


@pytest.mark.benchmark(group="decode 1 KiB values (MB/s)")
def test_epochguard_1k(benchmark: Any) -> None:
    _against_memcpy(benchmark, LOG_1K, 20_000, binary_view=False)


@pytest.mark.benchmark(group="decode 1 KiB values (MB/s)")
def test_epochguard_1k_views(benchmark: Any) -> None:
    """`binary_view=True`: values pointed at in the input, not copied."""
    _against_memcpy(benchmark, LOG_1K, 20_000, binary_view=True)


@pytest.mark.benchmark(group="decode 1 KiB values (MB/s)")
def test_kafka_python_1k(benchmark: Any) -> None:
    benchmark.pedantic(kafka_python_decode, args=(LOG_1K,), rounds=3, iterations=1)
    _throughput(benchmark, len(LOG_1K), 20_000)


@pytest.mark.benchmark(group="decode 100-byte values (records/s)")
def test_epochguard_100b(benchmark: Any) -> None:
    _against_memcpy(benchmark, LOG_100B, 100_000, binary_view=False)


@pytest.mark.benchmark(group="decode 100-byte values (records/s)")
def test_epochguard_100b_views(benchmark: Any) -> None:
    _against_memcpy(benchmark, LOG_100B, 100_000, binary_view=True)


@pytest.mark.benchmark(group="decode 100-byte values (records/s)")
def test_kafka_python_100b(benchmark: Any) -> None:
    benchmark.pedantic(kafka_python_decode, args=(LOG_100B,), rounds=3, iterations=1)
    _throughput(benchmark, len(LOG_100B), 100_000)


def _bare_decompression(codec: str) -> tuple[str, Callable[[], int]]:
    """The codec library's own decompression of every batch payload of LOGS_COMPRESSED[codec]."""
    payloads = batch_payloads(LOGS_COMPRESSED[codec])
    if codec == "lz4":
        return "lz4.frame.decompress", lambda: sum(len(lz4.frame.decompress(p)) for p in payloads)
    if codec == "zstd":
        dctx = zstandard.ZstdDecompressor()
        return "zstandard", lambda: sum(len(dctx.decompress(p)) for p in payloads)
    if codec == "snappy":
        blocks = [b for p in payloads for b in xerial_blocks(p)]
        return "cramjam.snappy.decompress_raw", lambda: sum(len(cramjam.snappy.decompress_raw(b)) for b in blocks)
    assert codec == "gzip"
    return "zlib.decompress", lambda: sum(len(zlib.decompress(p, wbits=31)) for p in payloads)


def _kept(codec: str) -> tuple[str, Callable[[], int]]:
    """The bare decompression with every output kept until the round ends, as a decode keeps its
    output: each frame written into fresh memory rather than the cache-hot block the previous one freed."""
    payloads = batch_payloads(LOGS_COMPRESSED[codec])
    if codec == "lz4":
        return "lz4.frame.decompress, outputs kept", lambda: sum(map(len, [lz4.frame.decompress(p) for p in payloads]))
    assert codec == "zstd"
    dctx = zstandard.ZstdDecompressor()
    return "zstandard, outputs kept", lambda: sum(map(len, [dctx.decompress(p) for p in payloads]))


def _against_bare(benchmark: Any, codec: str, binary_view: bool, keep: bool = False) -> None:
    """`decode_to_arrow` of LOGS_COMPRESSED[codec] taking turns with the bare decompression of its payloads."""
    benchmark.group = f"compressed {codec}: decode vs bare decompression"
    log = LOGS_COMPRESSED[codec]
    name, bare = _kept(codec) if keep else _bare_decompression(codec)
    assert bare() > 40_000 * 1024
    assert decode_to_arrow(log, binary_view=binary_view).num_rows == 40_000
    _turns(benchmark, lambda: decode_to_arrow(log, binary_view=binary_view), bare, name, len(log), 40_000)


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_decode(benchmark: Any, codec: str) -> None:
    _against_bare(benchmark, codec, binary_view=False)


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_decode_views(benchmark: Any, codec: str) -> None:
    """`binary_view=True`: values pointed at in the decompression buffer."""
    _against_bare(benchmark, codec, binary_view=True)


@pytest.mark.parametrize("codec", ("lz4", "zstd"))
def test_compressed_decode_views_vs_kept(benchmark: Any, codec: str) -> None:
    """`binary_view=True` against a bare loop that keeps every output (fresh memory per frame, as the
    decode's own output): what the ratio is against the codec when both write new memory."""
    _against_bare(benchmark, codec, binary_view=True, keep=True)

"""`send_arrow`: the rows of a pyarrow Table encoded into produce batches in Rust
(`_core.encode_arrow_batches`, each batch by the crate's one `encode_batch`), partitioned as `send`
partitions (an explicit partition, else Java's murmur2 of the key, else the sticky partition), checked
here against kafka-python's partitioner; every wrong column type a typed `ArrowSchemaError`; and round
trips through `epochguard serve` with every codec, headers, null keys, explicit timestamps and the
idempotent producer's sequences, read back by the consumer."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest

from epochguard import _core
from epochguard._core import iter_batches
from epochguard.client.producer import partition_for_key
from epochguard.errors import ArrowSchemaError
from epochguard.types import TopicPartition
from tests.wire.serving import Served

pa = pytest.importorskip("pyarrow")

INPUT_0 = TopicPartition("input", 0)
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def table(n: int, seed: int = 1, *, null_keys: bool = True, partitions: int | None = None) -> Any:
    rng = random.Random(seed)
    keys = [None if null_keys and rng.random() < 0.3 else rng.randbytes(rng.randrange(0, 12)) for _ in range(n)]
    values = [rng.randbytes(100) if rng.random() < 0.95 else None for _ in range(n)]
    values = [v if (v is not None or k is not None) else b"" for k, v in zip(keys, values, strict=True)]
    headers = [[{"key": f"h{j}", "value": None if j == 2 else rng.randbytes(3)} for j in range(rng.randrange(0, 4))]
               for _ in range(n)]
    columns: dict[str, Any] = {"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
                               "headers": pa.array(headers, HEADERS)}
    if partitions is not None:
        columns["partition"] = pa.array([rng.randrange(partitions) if rng.random() < 0.2 else None
                                         for _ in range(n)], pa.int32())
    return pa.table(columns)


def encode(data: Any, *, partitions: int = 7, sticky: int = 3, batch_size: int = 4096,
           compression: str = "none") -> list[tuple[int, bytes, bytes]]:
    return _core.encode_arrow_batches(data, partitions=partitions, sticky_partition=sticky,
                                      default_timestamp=1_700_000_000_000, batch_size=batch_size,
                                      compression=compression)


def decoded(encoded: list[tuple[int, bytes, bytes]]) -> dict[int, tuple[int, Any]]:
    """input row -> (partition, record)"""
    out = {}
    for partition, raw, rows in encoded:
        (batch,) = list(iter_batches(raw))  # one batch, CRC checked
        indices = [int.from_bytes(rows[i:i + 4], "little") for i in range(0, len(rows), 4)]
        assert len(indices) == batch.records_count
        for index, record in zip(indices, batch.records(), strict=True):
            assert index not in out
            out[index] = (partition, record)
    return out


def test_rows_are_partitioned_as_send_and_encoded_in_order_within_the_batch_size() -> None:
    default = pytest.importorskip("kafka.partitioner.default", reason="kafka-python (dev extra) is the reference")
    data = table(3000, partitions=7)
    encoded = encode(data)
    rows = decoded(encoded)
    assert sorted(rows) == list(range(data.num_rows))  # every row once
    source = data.to_pylist()
    for index, (partition, record) in rows.items():
        row = source[index]
        if row["partition"] is not None:
            assert partition == row["partition"]
        elif row["key"] is not None:
            assert partition == partition_for_key(row["key"], 7) == (default.murmur2(row["key"]) & 0x7FFFFFFF) % 7
        else:
            assert partition == 3  # the sticky partition
        assert (record.key, record.value, record.timestamp) == (row["key"], row["value"], 1_700_000_000_000)
        assert record.headers == [(h["key"], h["value"]) for h in row["headers"]]
    for partition in range(7):  # within a partition, input order = offset order
        indices = [i for i, (p, _) in sorted(rows.items()) if p == partition]
        in_batches = [int.from_bytes(rows_[i:i + 4], "little") for p, _, rows_ in encoded if p == partition
                      for i in range(0, len(rows_), 4)]
        assert in_batches == indices
    for _, raw, _ in encoded:  # cut before a record would pass batch_size (16 bytes a record + payload)
        (batch,) = list(iter_batches(raw))
        payload = sum(len(r.key or b"") + len(r.value or b"") + 16 + sum(len(k) + len(v or b"") for k, v in r.headers)
                      for r in batch.records())
        assert payload <= 4096 or batch.records_count == 1


def test_codecs_timestamps_string_columns_maps_and_record_batches() -> None:
    data = table(500, null_keys=False)
    plain = decoded(encode(data))
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        encoded = encode(data, compression=codec)
        assert {next(iter(iter_batches(raw))).compression for _, raw, _ in encoded} == {codec}
        assert {i: (p, r.key, r.value, r.headers) for i, (p, r) in decoded(encoded).items()} == {
            i: (p, r.key, r.value, r.headers) for i, (p, r) in plain.items()}
    batch = pa.record_batch({
        "key": pa.array(["a", None, "c"], pa.large_string()),
        "value": pa.array([b"1", b"2", None], pa.large_binary()),
        "headers": pa.array([[("x", b"y")], None, []], pa.map_(pa.string(), pa.binary())),
        "timestamp": pa.array([5_000, None, 7_000_000], pa.timestamp("us")),
        "offset": pa.array([9, 9, 9], pa.int64()),  # another column: ignored (poll_arrow's output goes as is)
    })
    rows = decoded(encode(batch, partitions=1, sticky=0))
    assert [(r.key, r.value, r.headers, r.timestamp) for _, (_, r) in sorted(rows.items())] == [
        (b"a", b"1", [("x", b"y")], 5), (None, b"2", [], 1_700_000_000_000), (b"c", None, [], 7_000)]


@pytest.mark.parametrize(("columns", "column"), [
    ({"key": pa.array([1, 2], pa.int64())}, "key"),
    ({"value": pa.array([1.5, 2.5])}, "value"),
    ({"value": pa.array([b"v", b"w"]), "partition": pa.array([0.0, 1.0])}, "partition"),
    ({"value": pa.array([b"v", b"w"]), "timestamp": pa.array(["now", "later"])}, "timestamp"),
    ({"value": pa.array([b"v", b"w"]), "headers": pa.array([b"h", b"i"])}, "headers"),
    ({"value": pa.array([b"v", b"w"]), "headers": pa.array([[b"h"], []], pa.list_(pa.binary()))}, "headers"),
    ({"value": pa.array([b"v", b"w"]), "headers": pa.array([[("k", b"v")], []],
                                                           pa.list_(pa.struct([("key", pa.binary()),
                                                                               ("value", pa.binary())])))},
     "headers.key"),
    ({"values": pa.array([b"v", b"w"])}, "key"),  # neither a key nor a value column
])
def test_a_column_of_the_wrong_type_is_an_arrow_schema_error(columns: dict[str, Any], column: str) -> None:
    with pytest.raises(ArrowSchemaError) as raised:
        encode(pa.table(columns))
    assert isinstance(raised.value, TypeError) and raised.value.column == column and raised.value.reason


@pytest.mark.parametrize(("columns", "match"), [
    ({"value": pa.array([b"v", b"w"]), "partition": pa.array([0, 7], pa.int32())}, "row 1: partition 7 outside"),
    ({"value": pa.array([b"v", b"w"]), "partition": pa.array([-1, 0], pa.int64())}, "row 0: partition -1"),
    ({"key": pa.array([b"k", None]), "value": pa.array([b"v", None])}, "row 1: a record needs a key or a value"),
    ({"value": pa.array([b"v"]), "headers": pa.array([[(None, b"x")]], HEADERS)}, "null key"),
])
def test_a_bad_value_is_a_value_error_and_nothing_is_encoded(columns: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        encode(pa.table(columns))


def test_not_a_table_and_bad_arguments() -> None:
    with pytest.raises(TypeError, match="__arrow_c_stream__"):
        encode([b"v"])
    with pytest.raises(ValueError, match="unknown compression"):
        encode(table(3), compression="brotli")
    with pytest.raises(ValueError, match="sticky partition"):
        encode(table(3), partitions=2, sticky=2)
    assert encode(table(0)) == []


# --- against serve --------------------------------------------------------------------------------
def read_back(bootstrap: str, start: int, count: int) -> list[dict[str, Any]]:
    from epochguard.client import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    consumer.assign([INPUT_0])
    consumer.seek(INPUT_0, start)
    rows: list[dict[str, Any]] = []
    end = time.monotonic() + 30
    while len(rows) < count and time.monotonic() < end:
        for batch in consumer.poll_arrow(timeout_ms=200).values():
            rows += batch.to_pylist()
    consumer.close()
    return rows[:count]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_through_serve(served: Served, codec: str) -> None:
    from epochguard.client import KafkaProducer

    data = table(2000, seed=len(codec))
    data = data.append_column("timestamp", pa.array(range(1_000, 1_000 + data.num_rows), pa.int64()))
    producer = KafkaProducer(bootstrap_servers=served.bootstrap, acks="all", compression_type=codec,
                             batch_size=32_768)
    try:
        future = producer.send_arrow("input", data)
        batches = future.get(timeout=30)
        offsets = future.offsets()
    finally:
        producer.close()
    assert len(batches) > 1 and all(b.leader_epoch is not None for b in batches)
    assert sum(b.record_count for b in batches) == data.num_rows
    assert offsets.column("partition").to_pylist() == [0] * data.num_rows
    first = min(b.base_offset for b in batches)
    assert sorted(offsets.column("offset").to_pylist()) == list(range(first, first + data.num_rows))
    got = read_back(served.bootstrap, first, data.num_rows)
    by_offset = {r["offset"]: r for r in got}
    for source, offset in zip(data.to_pylist(), offsets.column("offset").to_pylist(), strict=True):
        row = by_offset[offset]
        assert (row["key"], row["value"], row["timestamp"]) == (source["key"], source["value"], source["timestamp"])
        assert row["headers"] == source["headers"]


def test_idempotent_asyncio_send_arrow_keeps_order_with_send(served: Served) -> None:
    from epochguard.client import AsyncProducer

    async def body() -> tuple[int, list[int], list[Any]]:
        async with AsyncProducer(bootstrap_servers=served.bootstrap, acks="all", enable_idempotence=True,
                                 batch_size=8_192, linger_ms=50) as producer:
            before = await producer.send("input", value=b"before")
            sent = await producer.send_arrow("input", pa.table({"value": [b"row-%d" % i for i in range(500)]}))
            after = await producer.send("input", value=b"after")
            await producer.flush(30)
            assert before.metadata is not None and after.metadata is not None and sent.error is None
            offsets = sent.offsets().column("offset").to_pylist()
            return before.metadata.offset, offsets, [after.metadata.offset]

    before, offsets, (after,) = asyncio.run(body())
    assert offsets == list(range(before + 1, before + 501)) and after == before + 501
    rows = read_back(served.bootstrap, before, 502)
    assert [r["value"] for r in rows] == [b"before", *[b"row-%d" % i for i in range(500)], b"after"]


def test_bad_input_through_the_producer_raises_before_anything_is_queued(served: Served) -> None:
    from epochguard.client import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=served.bootstrap, acks="all")
    try:
        with pytest.raises(ArrowSchemaError, match="column key"):
            producer.send_arrow("input", pa.table({"key": [1, 2], "value": [b"a", b"b"]}))
        with pytest.raises(TypeError, match="pyarrow Table"):
            producer.send_arrow("input", [(b"k", b"v")])
        with pytest.raises(ValueError, match="partition 5 outside"):
            producer.send_arrow("input", pa.table({"value": [b"a"], "partition": pa.array([5], pa.int32())}))
        assert producer._async._machine.pending() == 0
    finally:
        producer.close()


def test_blocking_send_queues_from_the_callers_thread_and_keeps_order_with_send_arrow(served: Served) -> None:
    from epochguard.client import KafkaProducer
    from epochguard.errors import ClientClosedError

    producer = KafkaProducer(bootstrap_servers=served.bootstrap, acks="all", linger_ms=20)
    try:
        with pytest.raises(TypeError, match="value must be bytes"):
            producer.send("input", value="not bytes")
        with pytest.raises(ValueError, match="key or a value"):
            producer.send("input")
        before = [producer.send("input", value=b"b%d" % i) for i in range(300)]
        arrow = producer.send_arrow("input", pa.table({"value": [b"a%d" % i for i in range(300)]}))
        after = producer.send("input", value=b"after")
        offsets = [f.get(30).offset for f in before]
        arrow_offsets = arrow.offsets(30).column("offset").to_pylist()
        assert offsets == list(range(offsets[0], offsets[0] + 300))
        assert arrow_offsets == list(range(offsets[-1] + 1, offsets[-1] + 301))
        assert after.get(30).offset == arrow_offsets[-1] + 1
    finally:
        producer.close()
    with pytest.raises(ClientClosedError):
        producer.send("input", value=b"late")

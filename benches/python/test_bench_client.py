"""epochguard's client against the Python clients, reading the same records from `epochguard serve clean`.

One serve run; 100-byte records produced once (untimed) to partition 0 of `input` by confluent-kafka
with acks=all; then each round reads the same RECORDS from the same offset, timed until the last one is
in hand, with a consumer warmed up on the same endpoint (connections, metadata, ApiVersions):

- `poll_arrow` (records as one pyarrow.RecordBatch per partition, decoded in Rust) vs confluent-kafka's
  `consume(num_messages=10000)` (goal: >= 3x records/s);
- the per-record iterator of `KafkaConsumer` vs kafka-python's (goal: >= 2x).

Both clients run with their fetch sizes at the defaults but `max_partition_fetch_bytes` 16 MiB (the
partition's whole round fits a few fetches for every client alike).

Run: `pytest benches/python/test_bench_client.py --benchmark-only --benchmark-group-by=group`.
"""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (pip install confluent-kafka)")
kafka = pytest.importorskip("kafka", reason="kafka-python is not installed (pip install kafka-python)")
pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed")

RECORDS = 40_000
VALUE = bytes(range(100))
TOPIC = "input"
PARTITION_BYTES = 16 << 20
RATES: dict[str, float] = {}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[tuple[str, int]]:
    if importlib.util.find_spec("epochguard.wire.cli") is None:
        pytest.skip("`epochguard serve` is not in this build")
    proc = subprocess.Popen([sys.executable, "-m", "epochguard", "serve", "clean"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("bootstrap "), f"serve printed {line!r}"
    bootstrap = line.split(" ", 1)[1].strip()
    try:
        producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000, "log_level": 3})
        for _ in range(RECORDS):
            try:
                producer.produce(TOPIC, VALUE, partition=0)
            except BufferError:
                producer.poll(0.001)
                producer.produce(TOPIC, VALUE, partition=0)
        assert producer.flush(60) == 0
        _low, high = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "w"}).get_watermark_offsets(
            ck.TopicPartition(TOPIC, 0), timeout=10)
        yield bootstrap, int(high) - RECORDS
        _report()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def _rate(benchmark: Any, name: str) -> None:
    RATES[name] = RECORDS / benchmark.stats.stats.median
    benchmark.extra_info["records_per_second"] = round(RATES[name])


def _report() -> None:
    pairs = (("epochguard poll_arrow", "confluent-kafka consume", 3.0), ("epochguard iterator", "kafka-python iterator", 2.0))
    for ours, theirs, goal in pairs:
        a, b = RATES.get(ours), RATES.get(theirs)
        if a and b:
            print(f"\n{ours} {a:,.0f} records/s vs {theirs} {b:,.0f} records/s: {a / b:.2f}x (goal >= {goal}x)")


def _deadline() -> float:
    return time.monotonic() + 60


@pytest.mark.benchmark(group="client-consume-batch")
def test_client_poll_arrow(benchmark: Any, endpoint: tuple[str, int]) -> None:
    from epochguard.client.kafka_consumer import KafkaConsumer
    from epochguard.types import TopicPartition

    bootstrap, start = endpoint
    tp = TopicPartition(TOPIC, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             max_partition_fetch_bytes=PARTITION_BYTES)
    consumer.assign([tp])

    def read() -> None:
        consumer.seek(tp, start)
        got, end = 0, _deadline()
        while got < RECORDS and time.monotonic() < end:
            for batch in consumer.poll_arrow(timeout_ms=500).values():
                got += batch.num_rows
        assert got >= RECORDS

    benchmark.pedantic(read, rounds=5, warmup_rounds=1, iterations=1)
    consumer.close()
    _rate(benchmark, "epochguard poll_arrow")


@pytest.mark.benchmark(group="client-consume-batch")
def test_confluent_consume(benchmark: Any, endpoint: tuple[str, int]) -> None:
    bootstrap, start = endpoint
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                            "max.partition.fetch.bytes": PARTITION_BYTES, "log_level": 3})

    def read() -> None:
        consumer.assign([ck.TopicPartition(TOPIC, 0, start)])
        got, end = 0, _deadline()
        while got < RECORDS and time.monotonic() < end:
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                if msg.error() is None:
                    got += 1
        assert got >= RECORDS

    benchmark.pedantic(read, rounds=5, warmup_rounds=1, iterations=1)
    consumer.close()
    _rate(benchmark, "confluent-kafka consume")


@pytest.mark.benchmark(group="client-consume-records")
def test_client_iterator(benchmark: Any, endpoint: tuple[str, int]) -> None:
    from epochguard.client.kafka_consumer import KafkaConsumer
    from epochguard.types import TopicPartition

    bootstrap, start = endpoint
    tp = TopicPartition(TOPIC, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             max_partition_fetch_bytes=PARTITION_BYTES, consumer_timeout_ms=5_000)
    consumer.assign([tp])

    def read() -> None:
        consumer.seek(tp, start)
        got = 0
        for record in consumer:
            got += len(record.value)
            if record.offset >= start + RECORDS - 1:
                break
        assert got >= RECORDS * len(VALUE)

    benchmark.pedantic(read, rounds=5, warmup_rounds=1, iterations=1)
    consumer.close()
    _rate(benchmark, "epochguard iterator")


@pytest.mark.benchmark(group="client-consume-records")
def test_kafka_python_iterator(benchmark: Any, endpoint: tuple[str, int]) -> None:
    bootstrap, start = endpoint
    tp = kafka.TopicPartition(TOPIC, 0)
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                   max_partition_fetch_bytes=PARTITION_BYTES, consumer_timeout_ms=5_000)
    consumer.assign([tp])

    def read() -> None:
        consumer.seek(tp, start)
        got = 0
        for record in consumer:
            got += len(record.value)
            if record.offset >= start + RECORDS - 1:
                break
        assert got >= RECORDS * len(VALUE)

    benchmark.pedantic(read, rounds=5, warmup_rounds=1, iterations=1)
    consumer.close()
    _rate(benchmark, "kafka-python iterator")

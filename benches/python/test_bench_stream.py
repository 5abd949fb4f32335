"""epochguard-kafka against Spark's own Kafka source, reading the same topic in the same Spark session.

Throughput: a topic of 8 partitions x RECORDS_PER_PARTITION records with 1 KiB values on a one-broker
Apache Kafka 4.4 (epochguard.kafka; `make kafka`), produced once (untimed). Each round is a new streaming
query (its own checkpoint) that reads the whole topic from `earliest` in one `Trigger.AvailableNow` batch
into Spark's `noop` sink (every row is produced and dropped), timed from `start()` to the end of
`awaitTermination()`; both sources run in one local[2] session with Spark's Kafka source's jars
(`make spark-kafka`), each warmed up first (JVM JIT, Python workers, connections), then rounds
alternate between them. The figure is rows/s of the best round (goal: epochguard-kafka >= 1x Spark's
source). The same again in 8 micro-batches (maxOffsetsPerTrigger), also as rows/s of the batches after
the first (the steady state: a running query's micro-batches without the query's start, which for a
Python data source includes starting a Python process for its planner).

Cost: in steady state (the leader epoch does not move) a trigger of epochguard-kafka asks no more of the
cluster than Spark's source: counted at `epochguard serve`'s wire (its cluster in-process,
`tests.spark.guard_cluster`), by request kind, for each source's driver and executors, over 8 batches of
one new record each (200 ms triggers; the empty triggers in between plan too).

Run: `pytest benches/python/test_bench_stream.py --benchmark-only --benchmark-group-by=group -s`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'epochguard[spark]')")
ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

PARTITIONS = 8
RECORDS_PER_PARTITION = 12_500  # 100,000 records, 100 MiB of values
VALUE = bytes(range(256)) * 4
TOPIC = "stream-bench"
RATES: dict[str, float] = {}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from epochguard.spark import local_session
    from epochguard.spark.stream import register
    from tests.conftest import spark_home_without_zips
    from tests.spark.stream_matrix import spark_kafka_jars

    jars = spark_kafka_jars()
    if not jars:
        pytest.skip("Spark's Kafka source is not fetched: run `make spark-kafka`")
    os.environ.setdefault("SPARK_HOME", spark_home_without_zips())
    session = local_session("local[2]", app_name="stream-bench", shuffle_partitions=2,
                            conf={"spark.jars": ",".join(jars)})
    assert register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def kafka() -> Iterator[str]:
    from epochguard.kafka import KafkaCluster, KafkaNotProvisioned, find_java, kafka_jars

    try:
        kafka_jars()
        find_java()
    except KafkaNotProvisioned as e:
        pytest.skip(f"Apache Kafka: {e}")
    base = Path(__file__).parents[2] / "target" / "bench-stream-kafka"
    shutil.rmtree(base, ignore_errors=True)
    with KafkaCluster(base, brokers=1, broker_overrides={"log.segment.bytes": str(1 << 30)}) as cluster:
        cluster.create_topic(TOPIC, {p: [1] for p in range(PARTITIONS)})
        producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                                "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000, "log_level": 3})
        for i in range(PARTITIONS * RECORDS_PER_PARTITION):
            while True:
                try:
                    producer.produce(TOPIC, VALUE, partition=i % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.01)
        assert producer.flush(120) == 0
        del producer  # closed before the broker stops (librdkafka would log refused connections)
        yield cluster.bootstrap
    for source, rate in sorted(RATES.items()):
        print(f"\n{source}: {rate:,.0f} rows/s")
    for suffix in ("", " micro-batches", " micro-batches, steady"):
        if f"epochguard-kafka{suffix}" in RATES and f"kafka{suffix}" in RATES:
            print(f"epochguard-kafka / Spark's Kafka source{suffix}: "
                  f"{RATES[f'epochguard-kafka{suffix}'] / RATES[f'kafka{suffix}']:.2f}x")


def _read_all(spark: Any, fmt: str, bootstrap: str) -> float:
    """One query reading the whole topic in one AvailableNow batch into the noop sink: seconds."""
    checkpoint = tempfile.mkdtemp(prefix="stream-bench-")
    try:
        began = time.perf_counter()
        query = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", TOPIC).option("startingOffsets", "earliest").load()
                 .writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        took = time.perf_counter() - began
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        assert rows == PARTITIONS * RECORDS_PER_PARTITION, rows
        return took
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


FORMATS = ("epochguard-kafka", "kafka")


def test_stream_read(benchmark: Any, spark: Any, kafka: str) -> None:
    """Both sources warmed up, then 3 rounds, each reading with one source then the other (a load that
    changes during the run falls on both); the figure of each is its best round."""
    benchmark.group = "streaming source: 100,000 records of 1 KiB, 8 partitions, Kafka 4.4, one batch"
    for fmt in FORMATS:
        _read_all(spark, fmt, kafka)  # warm-up: JIT, Python workers, connections
    took: dict[str, list[float]] = {fmt: [] for fmt in FORMATS}

    def rounds() -> None:
        for fmt in FORMATS:
            took[fmt].append(_read_all(spark, fmt, kafka))

    benchmark.pedantic(rounds, rounds=3, iterations=1)
    for fmt in FORMATS:
        RATES[fmt] = PARTITIONS * RECORDS_PER_PARTITION / min(took[fmt])
        benchmark.extra_info[f"{fmt} rows_per_s"] = RATES[fmt]
        benchmark.extra_info[f"{fmt} seconds"] = took[fmt]


def _micro_batches(spark: Any, fmt: str, bootstrap: str) -> tuple[float, float]:
    """One query reading the whole topic in 8 micro-batches of about 12,500 records (maxOffsetsPerTrigger
    12,504: 1,563 a partition, under AvailableNow) into noop: (seconds from start() to the end, rows/s of
    the triggers after the first: the steady state, without the query's start)."""
    checkpoint = tempfile.mkdtemp(prefix="stream-bench-")
    try:
        began = time.perf_counter()
        query = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", TOPIC).option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", str(PARTITIONS * 1_563)).load()
                 .writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        took = time.perf_counter() - began
        batches = [p for p in query.recentProgress if p["numInputRows"]]
        assert sum(p["numInputRows"] for p in batches) == PARTITIONS * RECORDS_PER_PARTITION
        assert len(batches) == PARTITIONS, [p["numInputRows"] for p in batches]
        steady = batches[1:]
        return took, sum(p["numInputRows"] for p in steady) / sum(p["durationMs"]["triggerExecution"] / 1000
                                                                  for p in steady)
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def test_stream_micro_batches(benchmark: Any, spark: Any, kafka: str) -> None:
    """The same 100,000 records in 8 micro-batches (Spark's source: 64 tasks; epochguard-kafka: 24, see its
    minOffsetsPerTask), rounds alternating as above: rows/s of the whole query, and of the batches after
    the first (`steady`: no query start)."""
    benchmark.group = "streaming source: 8 micro-batches of 12,504 records of 1 KiB, 8 partitions, Kafka 4.4"
    for fmt in FORMATS:
        _micro_batches(spark, fmt, kafka)  # warm-up
    runs: dict[str, list[tuple[float, float]]] = {fmt: [] for fmt in FORMATS}

    def rounds() -> None:
        for fmt in FORMATS:
            runs[fmt].append(_micro_batches(spark, fmt, kafka))

    benchmark.pedantic(rounds, rounds=3, iterations=1)
    for fmt in FORMATS:
        RATES[f"{fmt} micro-batches"] = PARTITIONS * RECORDS_PER_PARTITION / min(t for t, _ in runs[fmt])
        RATES[f"{fmt} micro-batches, steady"] = max(r for _, r in runs[fmt])
        benchmark.extra_info[f"{fmt} micro-batches rows_per_s"] = RATES[f"{fmt} micro-batches"]
        benchmark.extra_info[f"{fmt} steady rows_per_s"] = RATES[f"{fmt} micro-batches, steady"]
        benchmark.extra_info[f"{fmt} runs"] = runs[fmt]


# --- requests per trigger in steady state, counted at serve's wire ------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_steady_state_requests_per_trigger(benchmark: Any, spark: Any, fmt: str) -> None:
    """Timed: 8 batches of one new record each (200 ms trigger interval, so empty triggers in between);
    the figures are the requests of the driver (per trigger) and of the executors (per batch), by kind
    (`tests.spark.stream_matrix.steady_state_requests`, which tests/spark/test_stream_matrix.py asserts)."""
    from tests.spark.stream_matrix import steady_state_requests

    benchmark.group = "streaming source: 8 steady-state batches on serve (requests per trigger)"
    got = benchmark.pedantic(steady_state_requests, args=(spark, fmt, 8), rounds=1, iterations=1)
    benchmark.extra_info.update(batches=got.batches, triggers=got.triggers, driver=got.driver,
                                executors=got.executors, per_trigger=got.per_trigger(), per_batch=got.per_batch())
    print(f"\n{fmt}: {got.triggers} triggers, {got.batches} batches; driver {got.driver} "
          f"({got.per_trigger():.2f} a trigger), executors {got.executors} ({got.per_batch():.2f} a batch)")
    assert "OffsetsForLeaderEpoch" not in got.driver  # no epoch moved: no validation request

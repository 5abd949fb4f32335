"""epochguard-kafka against Spark's own Kafka source, reading the same topic in the same Spark session.

Throughput: a topic of 8 partitions x RECORDS_PER_PARTITION records with 1 KiB values on a one-broker
Apache Kafka 4.4 (epochguard.kafka; `make kafka`), produced once (untimed). Each round is a new streaming
query (its own checkpoint) that reads the whole topic from `earliest` in one `Trigger.AvailableNow` batch
into Spark's `noop` sink (every row is produced and dropped), timed from `start()` to the end of
`awaitTermination()`; both sources run in one local[2] session with Spark's Kafka source's jars
(`make spark-kafka`), each warmed up first (JVM JIT, Python workers, connections), then rounds
alternate between them. The figure is rows/s (goal: epochguard-kafka >= 1x Spark's source).

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
from collections import Counter
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
    if len(RATES) == 2:
        print(f"epochguard-kafka / Spark's Kafka source: {RATES['epochguard-kafka'] / RATES['kafka']:.2f}x")


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


@pytest.mark.parametrize("fmt", ["epochguard-kafka", "kafka"])
def test_stream_read(benchmark: Any, spark: Any, kafka: str, fmt: str) -> None:
    benchmark.group = "streaming source: 100,000 records of 1 KiB, 8 partitions, Kafka 4.4"
    _read_all(spark, fmt, kafka)  # warm-up: JIT, Python workers, connections
    benchmark.pedantic(_read_all, args=(spark, fmt, kafka), rounds=3, iterations=1)
    RATES[fmt] = PARTITIONS * RECORDS_PER_PARTITION / benchmark.stats.stats.min
    benchmark.extra_info["rows_per_s"] = RATES[fmt]


# --- requests per trigger in steady state, counted at serve's wire ------------------------------------
def _count_driver_requests(cluster: Any) -> Counter[tuple[str, str]]:
    """From now on, count (client id, request kind) of every request the cluster receives."""
    from epochguard.protocol.api_versions import ApiKey
    from epochguard.wire import codec

    endpoint = cluster.server.endpoint
    receive = type(endpoint).receive
    counts: Counter[tuple[str, str]] = Counter()

    def counting(conn: Any, frame: bytes) -> None:
        try:
            header, _ = codec.decode_request(frame)
            counts[(header.client_id or "", ApiKey(header.api_key).name)] += 1
        except Exception:  # a frame serve itself refuses is counted by nobody
            pass
        receive(endpoint, conn, frame)

    cluster.call(lambda: setattr(endpoint, "receive", counting))
    return counts


@pytest.mark.parametrize("fmt", ["epochguard-kafka", "kafka"])
def test_steady_state_requests_per_trigger(benchmark: Any, spark: Any, fmt: str) -> None:
    """Timed: 8 batches of one new record each (200 ms trigger interval, so empty triggers in between);
    the figures are the requests of the driver and of the executors, by kind, and the number of triggers
    and batches, in `extra_info` and printed."""
    from tests.spark.guard_cluster import GuardCluster

    benchmark.group = "streaming source: 8 steady-state triggers on serve (driver requests per batch)"
    cluster = GuardCluster()
    checkpoint = tempfile.mkdtemp(prefix="stream-bench-")
    try:
        cluster.produce(5)
        query = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", cluster.bootstrap)
                 .option("subscribe", cluster.topic).option("startingOffsets", "earliest").load()
                 .writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(processingTime="200 milliseconds").start())
        try:
            query.processAllAvailable()  # connections made, metadata known
            cluster.produce(1)
            query.processAllAvailable()
            counts = _count_driver_requests(cluster)
            first = query.lastProgress["batchId"]

            def triggers() -> None:
                for _ in range(8):  # one record, and the trigger that plans it
                    cluster.produce(1)
                    query.processAllAvailable()

            benchmark.pedantic(triggers, rounds=1, iterations=1)
            batches = query.lastProgress["batchId"] - first
            snapshot = Counter(counts)
        finally:
            query.stop()
        by_role: dict[str, Counter[str]] = {"driver": Counter(), "executors": Counter()}
        for (client, kind), n in snapshot.items():
            if "producer" not in client:  # the test's own producer
                by_role["executors" if "executor" in client else "driver"][kind] += n
        # Each trigger's planning asks ListOffsets once (both sources), with or without new records.
        triggers = by_role["driver"]["LIST_OFFSETS"]
        benchmark.extra_info.update(batches=batches, triggers=triggers,
                                    driver={k: n for k, n in sorted(by_role["driver"].items())},
                                    executors={k: n for k, n in sorted(by_role["executors"].items())})
        print(f"\n{fmt}: {triggers} triggers, {batches} batches; driver {dict(by_role['driver'])}, "
              f"executors {dict(by_role['executors'])}")
        assert by_role["driver"]["OFFSET_FOR_LEADER_EPOCH"] == 0  # no epoch moved: no validation request
    finally:
        cluster.close()
        shutil.rmtree(checkpoint, ignore_errors=True)

"""read_kafka_logs on local Spark vs a pandas UDF decoding the same segments with kafka-python, and
the bare Rust decode of the same files, in one run (records/s; goals: >= 20x kafka-python, within 3x
of bare Rust).

    .venv/bin/python -m pytest benches/python/test_bench_spark.py --benchmark-only -s
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "spark"))
from kafka_logs import Replica, write_log_dir

from epochguard.records import decode_to_arrow
from epochguard.spark import local_session, read_kafka_logs

# 2M records of ~100 bytes (about 200 MB of segments): enough that Spark's fixed cost per job and
# per task (tens of ms each) does not hide the decoding. EG_BENCH_BATCHES scales it.
PARTITIONS, BATCHES, PER_BATCH = 4, int(os.environ.get("EG_BENCH_BATCHES", 2000)), 250
RATES: dict[str, float] = {}
pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("bench")
    value = b"v" * 90
    replicas = [
        Replica(
            "bench",
            p,
            [(b // 100, [(f"k{b}-{i}".encode(), value) for i in range(PER_BATCH)]) for b in range(BATCHES)],
            segment_records=100_000,
        )
        for p in range(PARTITIONS)
    ]
    yield write_log_dir(root, 1, replicas)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def spark():
    session = local_session("local[2]", app_name="epochguard-bench", shuffle_partitions=2)
    yield session
    if RATES:
        spark_rate, kp, rust = RATES.get("spark"), RATES.get("kafka-python"), RATES.get("rust")
        print("\nrecords/s: " + ", ".join(f"{k} {v:,.0f}" for k, v in RATES.items()))
        if spark_rate and kp:
            print(f"read_kafka_logs vs kafka-python pandas UDF: {spark_rate / kp:.1f}x (goal >= 20x)")
        if spark_rate and rust:
            print(f"bare Rust decode vs read_kafka_logs: {rust / spark_rate:.2f}x slower in Spark (goal <= 3x)")
    session.stop()


TOTAL = PARTITIONS * BATCHES * PER_BATCH


def _rate(benchmark, name: str) -> None:
    RATES[name] = TOTAL / benchmark.stats.stats.mean
    benchmark.extra_info["records_per_second"] = round(RATES[name])


@pytest.mark.benchmark(group="spark-decode")
def test_read_kafka_logs(benchmark, spark, log_dir) -> None:
    def run() -> None:
        read_kafka_logs(spark, [str(log_dir)], chunk_bytes=4 << 20).write.format("noop").mode("overwrite").save()

    benchmark.pedantic(run, rounds=3, warmup_rounds=1, iterations=1)
    assert read_kafka_logs(spark, [str(log_dir)]).count() == TOTAL
    _rate(benchmark, "spark")


@pytest.mark.benchmark(group="spark-decode")
def test_kafka_python_pandas_udf(benchmark, spark, log_dir) -> None:
    # The same record columns as read_kafka_logs produces, so both pay the same to hand rows to Spark.
    schema = (
        "offset long, timestamp long, timestamp_type byte, key binary, value binary, "
        "headers array<struct<key string, value binary>>, leader_epoch int, batch_offset long, producer_id long, "
        "producer_epoch short, sequence int, is_transactional boolean, is_control boolean, magic byte"
    )
    files = [str(p) for p in sorted(log_dir.glob("*/*.log"))]

    def decode(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:  # pickled by value: a closure
        from kafka.record import MemoryRecords

        names = ["offset", "timestamp", "timestamp_type", "key", "value", "headers", "leader_epoch", "batch_offset"]
        names += ["producer_id", "producer_epoch", "sequence", "is_transactional", "is_control", "magic"]
        for frame in frames:
            for content in frame["content"]:
                rows = []
                batches = MemoryRecords(bytes(content))
                while (b := batches.next_batch()) is not None:
                    fields = (b.leader_epoch, b.base_offset, b.producer_id, b.producer_epoch, b.base_sequence)
                    flags = (b.is_transactional, b.is_control_batch, b.magic)
                    for r in b:
                        headers = [{"key": k, "value": v} for k, v in r.headers]
                        rows.append((r.offset, r.timestamp, r.timestamp_type, r.key, r.value, headers, *fields, *flags))
                yield pd.DataFrame(rows, columns=names)

    def run() -> None:
        df = spark.read.format("binaryFile").load(files).select("content").repartition(len(files))
        df.mapInPandas(decode, schema).write.format("noop").mode("overwrite").save()

    benchmark.pedantic(run, rounds=1, warmup_rounds=0, iterations=1)
    _rate(benchmark, "kafka-python")


@pytest.mark.benchmark(group="spark-decode")
def test_bare_rust_decode(benchmark, log_dir) -> None:
    files = sorted(log_dir.glob("*/*.log"))

    def run() -> int:
        return sum(decode_to_arrow(os.fspath(f)).num_rows for f in files)

    assert benchmark.pedantic(run, rounds=5, warmup_rounds=1, iterations=1) == TOTAL
    _rate(benchmark, "rust")

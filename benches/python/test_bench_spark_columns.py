"""Spark over 1 KiB records, one run, ratios against the named baselines (issue 10):

(a) full ``read_kafka_logs`` then ``count, sum(length(value))`` against Spark's own Parquet reader over
    the same rows (goal <= 1.0x: reading segments as fast as Spark reads Parquet);
(b) ``columns=["offset", "leader_epoch", "value_length"]`` then ``count, sum(value_length)`` against a
    kafka-python ``mapInPandas`` UDF emitting (offset, value length) (goal >= 20x) and against bare
    single-threaded Rust ``decode_to_arrow`` with the same columns (goal within 1.5x);
(c) the Python ``kafka-log`` data source (``kafka-log-python``) with the same narrow schema;
(d) the JVM ``kafka-log`` reader (issue 37; its jar on the session, `make setup` builds it): the full read
    against Spark's Parquet (goal <= 1.0x), the narrow read against bare Rust (goal <= 1.1x) and the
    kafka-python UDF (goal >= 30x), ``COUNT(*)`` and a filter on an offset range holding 1% of the records
    against its own full read (goal <= 0.1x); the Python source's same queries beside each.

(e) the full read on two data sets, each against Spark's Parquet of the same rows written by Spark in
    the same run, the readers taking turns (ABAB, medians, the load beside): ``repeated`` (the data of
    (a)-(d): one 1 KiB value repeated, which Parquet's dictionary stores once: kind to Parquet) and
    ``distinct`` (random 1 KiB values, distinct keys: what a topic holds; Parquet stores each value).

The issue asks for 4 partitions x 240,000 records (about 1 GB); EG_BENCH_RECORDS sets the records per
partition (default 240,000). Both data sets are written once into ``target/bench-data/`` (by their
parameters; EG_BENCH_DATA moves it) and reused by later runs. The JVM and the Python workers are warmed
by a full untimed pass first.

    nice .venv/bin/python -m pytest benches/python/test_bench_spark_columns.py --benchmark-only -s
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "spark"))
from kafka_logs import Replica, write_log_dir

from epochguard.records import decode_to_arrow
from epochguard.spark import local_session, read_kafka_logs, reader_of
from epochguard.spark.datasource import PYTHON_NAME

PARTITIONS, PER_PARTITION, PER_BATCH = 4, int(os.environ.get("EG_BENCH_RECORDS", 240_000)), 200
TOTAL = PARTITIONS * PER_PARTITION
NARROW = ["offset", "leader_epoch", "value_length"]
NARROW_SCHEMA = "offset long, leader_epoch int, value_length int"
# 1% of the records: the same 1% offset range of every partition
RANGE = (PER_PARTITION // 2, PER_PARTITION // 2 + PER_PARTITION // 100)
TIMES: dict[str, float] = {}
pytestmark = pytest.mark.spark


DATA = Path(os.environ.get("EG_BENCH_DATA", Path(__file__).resolve().parents[2] / "target" / "bench-data"))
DATA_SETS = ["repeated", "distinct"]


def _replica(kind: str, partition: int) -> Replica:
    batches = PER_PARTITION // PER_BATCH
    if kind == "repeated":
        value = b"v" * 1024
        values = [[value] * PER_BATCH for _ in range(batches)]
    else:  # random bytes: no two values alike, nothing for a dictionary or a codec to fold
        blob = random.Random(partition).randbytes(PER_PARTITION * 1024)
        values = [
            [blob[(b * PER_BATCH + i) * 1024 : (b * PER_BATCH + i + 1) * 1024] for i in range(PER_BATCH)]
            for b in range(batches)
        ]
    return Replica(
        "bench",
        partition,
        [(b // 100, [(f"k{b}-{i}".encode(), values[b][i]) for i in range(PER_BATCH)]) for b in range(batches)],
        segment_records=20_000,  # ~21 MB segments: the binaryFile baseline holds whole files in JVM rows
    )


def cached_log_dir(kind: str) -> Path:
    """The log dir of data set `kind`, written once (into a temporary directory, then renamed)."""
    dest = DATA / f"spark-1k-{kind}-{PARTITIONS}x{PER_PARTITION}"
    if not (dest / "complete").exists():
        DATA.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=DATA, prefix=".writing-"))
        for p in range(PARTITIONS):  # one partition at a time: a quarter of the values in memory
            write_log_dir(tmp, 1, [_replica(kind, p)], writer="core")
        (tmp / "complete").write_text("")
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    return dest / "broker-1"


@pytest.fixture(scope="module")
def log_dir() -> Path:
    return cached_log_dir("repeated")


@pytest.fixture(scope="module")
def spark(log_dir: Path):
    session = local_session(
        "local[2]", app_name="epochguard-bench", shuffle_partitions=2, conf={"spark.driver.memory": "3g"}
    )
    # Warm the JVM and the Python workers: the first queries of a session run 1.5-2x slower.
    for _ in range(2):
        read_kafka_logs(session, [str(log_dir)]).selectExpr("count(*)", "sum(length(value))").collect()
        if _has_jvm_reader(session):
            session.read.format("kafka-log").load(str(log_dir)).selectExpr("count(*)", "sum(length(value))").collect()
    yield session
    _report()
    session.stop()


def _report() -> None:
    if not TIMES:
        return
    print("\nseconds (mean): " + ", ".join(f"{k} {v:.3f}" for k, v in TIMES.items()))
    pairs = [
        ("(a) full read / Spark Parquet", "full", "parquet", "goal <= 1.0x"),
        ("(b) kafka-python UDF / columns read", "kafka-python", "columns", "goal >= 20x"),
        ("(b) columns read / bare Rust", "columns", "rust", "goal <= 1.5x"),
        ("(c) kafka-log data source / bare Rust", "datasource", "rust", ""),
        ("full read / columns read", "full", "columns", ""),
        ("(d) JVM full read / Spark Parquet", "jvm-full", "parquet", "goal <= 1.0x"),
        ("(d) Python source full read / Spark Parquet", "datasource-full", "parquet", ""),
        ("(d) kafka-python UDF / JVM columns read", "kafka-python", "jvm-columns", "goal >= 30x"),
        ("(d) kafka-python UDF / Python source columns read", "kafka-python", "datasource", ""),
        ("(d) JVM columns read / bare Rust", "jvm-columns", "rust", "goal <= 1.1x"),
        ("(d) JVM COUNT(*) / JVM full read", "jvm-count", "jvm-full", "goal <= 0.1x"),
        ("(d) Spark Parquet count() / its full read", "parquet-count", "parquet", "Spark's floor"),
        ("(d) JVM COUNT(*) / Spark Parquet count()", "jvm-count", "parquet-count", ""),
        ("(d) Python source COUNT(*) / its full read", "datasource-count", "datasource-full", ""),
        ("(d) JVM 1% offset range / JVM full read", "jvm-range", "jvm-full", "goal <= 0.1x"),
        ("(d) Python source 1% offset range / its full read", "datasource-range", "datasource-full", ""),
    ]
    for label, a, b, goal in pairs:
        if a in TIMES and b in TIMES:
            print(f"{label}: {TIMES[a] / TIMES[b]:.2f}x {goal}")


def _time(benchmark, name: str, run, rounds: int = 3) -> None:
    result = benchmark.pedantic(run, rounds=rounds, warmup_rounds=1 if rounds > 1 else 0, iterations=1)
    TIMES[name] = benchmark.stats.stats.mean
    benchmark.extra_info["records_per_second"] = round(TOTAL / TIMES[name])
    return result


@pytest.mark.benchmark(group="spark-1k")
def test_a_full_read(benchmark, spark, log_dir) -> None:
    def run() -> tuple:
        return tuple(read_kafka_logs(spark, [str(log_dir)]).selectExpr("count(*)", "sum(length(value))").first())

    assert _time(benchmark, "full", run) == (TOTAL, TOTAL * 1024)


@pytest.fixture(scope="module")
def parquet(spark, log_dir, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("parquet") / "same-rows.parquet")
    read_kafka_logs(spark, [str(log_dir)]).write.mode("overwrite").parquet(path)
    return path


@pytest.mark.benchmark(group="spark-1k")
def test_a_spark_parquet_same_rows(benchmark, spark, parquet) -> None:
    def run() -> tuple:
        return tuple(spark.read.parquet(parquet).selectExpr("count(*)", "sum(length(value))").first())

    assert _time(benchmark, "parquet", run) == (TOTAL, TOTAL * 1024)


@pytest.mark.benchmark(group="spark-1k")
def test_a_spark_parquet_count(benchmark, spark, parquet) -> None:
    """Spark's own floor for a query answered from metadata: Parquet's count() reads footers alone."""
    assert _time(benchmark, "parquet-count", spark.read.parquet(parquet).count) == TOTAL


@pytest.mark.benchmark(group="spark-1k")
def test_b_columns_read(benchmark, spark, log_dir) -> None:
    def run() -> tuple:
        df = read_kafka_logs(spark, [str(log_dir)], columns=NARROW)
        return tuple(df.selectExpr("count(*)", "sum(value_length)").first())

    assert _time(benchmark, "columns", run) == (TOTAL, TOTAL * 1024)


@pytest.mark.benchmark(group="spark-1k")
def test_c_datasource_columns(benchmark, spark, log_dir) -> None:
    def run() -> tuple:
        df = spark.read.format(PYTHON_NAME).schema(NARROW_SCHEMA).load(str(log_dir))
        return tuple(df.selectExpr("count(*)", "sum(value_length)").first())

    assert _time(benchmark, "datasource", run) == (TOTAL, TOTAL * 1024)


def _has_jvm_reader(spark) -> bool:
    return "kafka-log-reader" in spark.sparkContext.getConf().get("spark.jars", "")


# (d): the JVM reader and the Python source on the same queries.
READERS = [pytest.param("kafka-log", id="jvm"), pytest.param(PYTHON_NAME, id="python")]


def _source(spark, name: str):
    if name == "kafka-log" and not _has_jvm_reader(spark):
        pytest.skip("the JVM kafka-log reader's jar is not built (make setup)")
    return spark.read.format(name)


def _key(name: str, what: str) -> str:
    return f"jvm-{what}" if name == "kafka-log" else f"datasource-{what}"


@pytest.mark.benchmark(group="spark-1k")
@pytest.mark.parametrize("name", READERS)
def test_d_full_read(benchmark, spark, log_dir, name) -> None:
    df = _source(spark, name).load(str(log_dir)).selectExpr("count(*)", "sum(length(value))")
    assert reader_of(df) == ("jvm" if name == "kafka-log" else "python")
    assert _time(benchmark, _key(name, "full"), lambda: tuple(df.first())) == (TOTAL, TOTAL * 1024)


@pytest.mark.benchmark(group="spark-1k")
def test_d_jvm_columns(benchmark, spark, log_dir) -> None:
    df = _source(spark, "kafka-log").schema(NARROW_SCHEMA).load(str(log_dir)).selectExpr("count(*)", "sum(value_length)")
    assert _time(benchmark, "jvm-columns", lambda: tuple(df.first())) == (TOTAL, TOTAL * 1024)


@pytest.mark.benchmark(group="spark-1k")
@pytest.mark.parametrize("name", READERS)
def test_d_count(benchmark, spark, log_dir, name) -> None:
    df = _source(spark, name).load(str(log_dir))
    assert _time(benchmark, _key(name, "count"), df.count) == TOTAL


@pytest.mark.benchmark(group="spark-1k")
@pytest.mark.parametrize("name", READERS)
def test_d_offset_range(benchmark, spark, log_dir, name) -> None:
    lo, hi = RANGE
    df = _source(spark, name).load(str(log_dir)).where(f"offset >= {lo} AND offset < {hi}")
    df = df.selectExpr("count(*)", "sum(length(value))")
    rows = PARTITIONS * (hi - lo)
    assert _time(benchmark, _key(name, "range"), lambda: tuple(df.first())) == (rows, rows * 1024)


@pytest.mark.benchmark(group="spark-1k")
def test_b_kafka_python_udf(benchmark, spark, log_dir) -> None:
    files = [str(p) for p in sorted(log_dir.glob("*/*.log"))]

    def lengths(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:  # pickled by value: a closure
        from kafka.record import MemoryRecords

        for frame in frames:
            for content in frame["content"]:
                rows = []
                batches = MemoryRecords(bytes(content))
                while (b := batches.next_batch()) is not None:
                    rows.extend((r.offset, len(r.value)) for r in b)
                yield pd.DataFrame(rows, columns=["offset", "value_length"])

    def run() -> tuple:
        df = spark.read.format("binaryFile").load(files).select("content")
        out = df.mapInPandas(lengths, "offset long, value_length int")
        return tuple(out.selectExpr("count(*)", "sum(value_length)").first())

    assert _time(benchmark, "kafka-python", run, rounds=1) == (TOTAL, TOTAL * 1024)


@pytest.mark.benchmark(group="spark-1k")
def test_b_bare_rust(benchmark, log_dir) -> None:
    files = [os.fspath(f) for f in sorted(log_dir.glob("*/*.log"))]

    def run() -> int:
        return sum(decode_to_arrow(f, columns=NARROW).num_rows for f in files)

    assert _time(benchmark, "rust", run, rounds=5) == TOTAL


ROUNDS = int(os.environ.get("EG_BENCH_ROUNDS", 7))


@pytest.mark.benchmark(group="spark-1k-abab")
@pytest.mark.parametrize("kind", DATA_SETS)
def test_e_full_read_abab(benchmark, spark, kind, tmp_path_factory: pytest.TempPathFactory) -> None:
    """(e): the full read of each reader and of Spark's Parquet of the same rows, taking turns."""
    data = str(cached_log_dir(kind))
    parquet = str(tmp_path_factory.mktemp(f"parquet-{kind}") / "same-rows.parquet")
    read_kafka_logs(spark, [data]).write.mode("overwrite").parquet(parquet)
    full = ("count(*)", "sum(length(value))")
    queries = {"parquet": lambda: spark.read.parquet(parquet).selectExpr(*full).first()}
    if _has_jvm_reader(spark):
        queries["jvm"] = lambda: spark.read.format("kafka-log").load(data).selectExpr(*full).first()
    queries["python"] = lambda: spark.read.format(PYTHON_NAME).load(data).selectExpr(*full).first()
    for run in queries.values():  # warm: this data's first queries compile and page in
        for _ in range(2):
            assert tuple(run()) == (TOTAL, TOTAL * 1024)
    times: dict[str, list[float]] = {name: [] for name in queries}

    def abab() -> None:
        for _ in range(ROUNDS):
            for name, run in queries.items():
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)

    benchmark.pedantic(abab, rounds=1, iterations=1)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    medians = {name: statistics.median(t) for name, t in times.items()}
    benchmark.extra_info.update({f"{name}_median_s": round(m, 4) for name, m in medians.items()})
    benchmark.extra_info["uptime"] = load
    print(f"\n(e) {kind}, {ROUNDS} rounds taking turns, medians; {load}")
    for name, m in medians.items():
        print(f"(e) {kind} {name} full read: {m:.3f} s, {m / medians['parquet']:.2f}x Spark Parquet"
              + (" (goal <= 1.0x)" if name == "jvm" else ""))

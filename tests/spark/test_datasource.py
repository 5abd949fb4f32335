"""``spark.read.format("kafka-log")``: on both readers (the JVM one, tools/kafka-log-reader, where its
jar is on the session; the Python data source, ``kafka-log-python``, over the same listing and decode
path as read_kafka_logs), with projections and filter pushdown; and the Spark Connect path."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from epochguard.spark import read_kafka_logs
from epochguard.spark.datasource import PYTHON_NAME, DataSource
from epochguard.spark.jvm import reader_of

from .kafka_logs import Replica, records, write_log_dir

pytestmark = pytest.mark.skipif(DataSource is None, reason="Python data sources need pyspark >= 4")
KEYS = ["broker", "topic", "partition", "offset"]


@pytest.fixture(params=["jvm", "python"])
def reader(request: pytest.FixtureRequest, spark) -> str:
    """The format name that reaches each reader: `kafka-log` is the JVM one wherever its jar is on the
    session (`make setup` builds it), `kafka-log-python` the Python source everywhere."""
    if request.param == "python":
        return PYTHON_NAME
    jars = spark.sparkContext.getConf().get("spark.jars", "")
    if "kafka-log-reader" not in jars:
        from epochguard.spark import jvm

        why = f"the JVM kafka-log reader is not on the session ({jvm.missing() or 'built after the session started'})"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(why)
        pytest.skip(why)
    return "kafka-log"


@pytest.fixture(scope="module")
def log_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("ds")
    one = write_log_dir(
        root,
        1,
        [
            Replica("good", 0, [(0, records("a", 0, 5)), (1, records("b", 5, 5)), (2, records("c", 10, 5))], segment_records=5),
            Replica("bad", 0, [(0, records("x", 0, 3))]),
        ],
    )
    two = write_log_dir(root, 2, [Replica("good", 0, [(0, records("a", 0, 5))])])
    bad = one / "bad-0" / f"{0:020d}.log"
    bad.write_bytes(b"\x00" * 40)  # unreadable: any query that reads it fails
    # the first segment of good-0 on broker 1 is corrupt too: only offset filters can skip it
    first = one / "good-0" / f"{0:020d}.log"
    data = bytearray(first.read_bytes())
    data[70] ^= 0xFF
    first.write_bytes(bytes(data))
    return [str(one), str(two)]


def test_format_reads_what_read_kafka_logs_reads(spark, log_dirs, reader) -> None:
    good = log_dirs[1:]  # broker 2 alone is readable whole
    via_source = spark.read.format(reader).load(good[0])
    assert reader_of(via_source) == ("python" if reader == PYTHON_NAME else "jvm")
    assert via_source.columns == read_kafka_logs(spark, good).columns
    assert via_source.orderBy(*KEYS).collect() == read_kafka_logs(spark, good).orderBy(*KEYS).collect()
    assert via_source.count() == 5


def test_narrow_schema_and_columns_option_are_projections(spark, log_dirs, reader) -> None:
    good = log_dirs[1]
    narrow = spark.read.format(reader).schema("topic string, offset long, value_length int").load(good)
    assert narrow.columns == ["topic", "offset", "value_length"]
    want = read_kafka_logs(spark, [good], columns=["topic", "offset", "value_length"]).orderBy("offset").collect()
    assert narrow.orderBy("offset").collect() == want
    by_option = spark.read.format(reader).option("columns", "offset,record_digest").load(good)
    assert by_option.columns == ["offset", "record_digest"] and by_option.count() == 5
    with pytest.raises(Exception, match="unknown"):
        spark.read.format(reader).schema("offset long, nope int").load(good).collect()


def test_filters_prune_replicas_and_segments_before_reading(spark, log_dirs, reader) -> None:
    from epochguard.spark import register

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")  # local_session's default
    register(spark)
    try:
        df = spark.read.format(reader).load(log_dirs)
        with pytest.raises(Exception, match=r"(?i)corrupt|crc"):
            df.count()  # the unreadable segments are read without filters
        rows = df.where("topic = 'good' AND broker = 1 AND offset >= 7").select("offset", "leader_epoch").collect()
        assert sorted((r.offset, r.leader_epoch) for r in rows) == [(o, 1 if o < 10 else 2) for o in range(7, 15)]
        assert df.where("topic IN ('good') AND partition = 0 AND broker > 1").count() == 5
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
        register(spark)
    # without pushdown the same query reads every segment, so it meets the unreadable ones (the JVM
    # reader always prunes: Spark's conf switches only Python sources' pushdown)
    if reader == PYTHON_NAME:
        with pytest.raises(Exception, match=r"(?i)corrupt|crc"):
            spark.read.format(reader).load(log_dirs).where("topic = 'good' AND offset >= 7").count()
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    register(spark)


CONNECT = """
import json, os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable  # the server's Python workers must import epochguard too
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# pyspark's own parallel-test switch (SPARK-42272): the local Connect server binds an ephemeral port
# and the client asks the JVM for it, so two runs on one machine do not fight over 15002.
os.environ["SPARK_TESTING"] = "1"
from pyspark.sql import SparkSession
from epochguard.spark.jvm import jar
builder = SparkSession.builder.remote("local[2]")
if jar() is not None:  # the local server starts with the JVM reader on its classpath
    builder = builder.config("spark.jars", str(jar()))
spark = builder.getOrCreate()
import epochguard.spark as es
from epochguard.spark import read_kafka_logs
es.register(spark)
path = sys.argv[1]
out = {"session": type(spark).__module__, "jar": jar() is not None}
df = spark.read.format("kafka-log").option("columns", "offset").load(path)
out["reader"] = es.reader_of(df)
out["source"] = sorted(r.offset for r in df.collect())
out["mapInArrow"] = sorted(r.offset for r in read_kafka_logs(spark, [path], columns=["offset"]).collect())
print("RESULT " + json.dumps(out))
spark.stop()
"""


def test_spark_connect_reads_both_fronts(log_dirs, tmp_path) -> None:
    pytest.importorskip("grpc", reason="Spark Connect needs pyspark's connect extra (grpcio)")
    result = subprocess.run(
        [sys.executable, "-c", CONNECT, log_dirs[1]], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-3000:]
    out = json.loads(lines[0][len("RESULT "):])
    assert "connect" in out["session"]
    assert out["reader"] == ("jvm" if out["jar"] else "python")  # the server's classpath decides
    assert out["source"] == out["mapInArrow"] == list(range(5))

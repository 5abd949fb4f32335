"""``epochguard-kafka`` over Spark Connect: a streaming query whose Python source runs on the server.

Under Spark Connect the client only describes the query: ``spark.dataSource.register`` pickles the
source class to the server (pyspark's ``connect/datasource.py``), and the server's Python workers run
its driver-side methods and its reads, so epochguard must be importable there. The client is a
separate process (a Connect session and a classic one cannot share a Python process's `getOrCreate`)
with a local Connect server (``remote("local[2]")``, as test_datasource.py's Connect test), reading
`epochguard serve`'s cluster that this test drives: the query reads records only the isolated leader
has, an unclean election and a refill follow, and the restarted query must fail over Connect with the
source's `[EPOCHGUARD_LOG_TRUNCATION]` message naming the divergence, then rewind and hold the final
log once plus the named phantoms (the judge of test_stream_guard.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import spark_home_without_zips
from tests.spark.guard_cluster import TOPIC, GuardCluster
from tests.spark.test_stream_guard import TP, judge

CLIENT = r"""
import json, os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable  # the server's Python workers must import epochguard too
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["SPARK_TESTING"] = "1"  # an ephemeral Connect port (SPARK-42272), as test_datasource.py
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote("local[2]").getOrCreate()
import epochguard.spark.stream as stream
assert stream.register(spark)
bootstrap, tmp = sys.argv[1], sys.argv[2]

import time
began = time.monotonic()
def say(what, value):
    print(what + " " + json.dumps(value), flush=True)
    print(f"{what} at {time.monotonic() - began:.1f} s", file=sys.stderr, flush=True)

def run(mode):
    query = (spark.readStream.format("epochguard-kafka")
             .option("kafka.bootstrap.servers", bootstrap).option("subscribe", sys.argv[3])
             .option("startingOffsets", "earliest").option("onTruncation", mode)
             .option("truncationLog", tmp + "/truncations.jsonl").option("kafka.request.timeout.ms", "2000")
             .load().writeStream.format("parquet").option("checkpointLocation", tmp + "/checkpoint")
             .trigger(availableNow=True).start(tmp + "/out"))
    try:
        query.awaitTermination(300)
        return None
    except Exception as exc:
        return type(exc).__name__ + ": " + str(exc)

say("SESSION", type(spark).__module__)
say("FIRST", run("fail"))
sys.stdin.readline()  # the test elects uncleanly and refills
say("FAIL", run("fail"))
say("REWIND", run("rewind"))
spark.stop()
"""


def sink(out: Path) -> list[tuple[int, int, int, bytes]]:
    """The rows of the file sink's committed files (those its `_spark_metadata` log lists), read here with
    pyarrow: a Spark read through Connect would cost two more jobs."""
    import pyarrow.parquet as pq

    files = []
    for log in sorted((out / "_spark_metadata").glob("[0-9]*")):
        files += [json.loads(line)["path"] for line in log.read_text().splitlines()[1:] if line.strip()]
    rows = []
    for f in files:
        table = pq.read_table(f.removeprefix("file://"), columns=["partition", "offset", "leaderEpoch", "value"])
        rows += [(r["partition"], r["offset"], r["leaderEpoch"], r["value"]) for r in table.to_pylist()]
    return sorted(rows)


def _expect(proc: subprocess.Popen[str], what: str, seen: list[str], stderr: Path) -> object:
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(what + " "):
            return json.loads(line[len(what) + 1:])
    proc.wait(60)
    raise AssertionError(f"the Connect client ended before {what} (rc {proc.returncode}):\n"
                         f"{''.join(seen)[-2000:]}\n{stderr.read_text()[-4000:]}")


def test_spark_connect_query_fails_then_rewinds(tmp_path: Path) -> None:
    if os.environ.get("CI", "").lower() in ("true", "1"):
        import grpc  # noqa: F401  (CI never skips: the dev extra installs pyspark[connect])
    pytest.importorskip("grpc", reason="Spark Connect needs pyspark's connect extra (grpcio)")
    cluster = GuardCluster()
    env = {**os.environ, "SPARK_HOME": spark_home_without_zips()}
    stderr = tmp_path / "client.stderr"  # a file: Spark's log would fill a pipe nobody reads
    try:
        cluster.produce(10)
        old = cluster.isolate_leader(TP, 5)
        with stderr.open("w") as err, subprocess.Popen(
                [sys.executable, "-c", CLIENT, cluster.bootstrap, str(tmp_path), TOPIC], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=err, text=True, cwd=tmp_path, env=env) as proc:
            try:
                _drive(proc, cluster, old, tmp_path, stderr)
            finally:
                if proc.poll() is None:
                    proc.kill()
    finally:
        cluster.close()


def _drive(proc: subprocess.Popen[str], cluster: GuardCluster, old: int, tmp_path: Path, stderr: Path) -> None:
    seen: list[str] = []
    assert "connect" in str(_expect(proc, "SESSION", seen, stderr))
    assert _expect(proc, "FIRST", seen, stderr) is None
    assert [r[1] for r in sink(tmp_path / "out")] == list(range(15))  # the 5 acks=1 records included
    cluster.unclean_election(TP, old)
    cluster.produce(12)
    truth = cluster.truth(TP)
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    failed = _expect(proc, "FAIL", seen, stderr)
    assert isinstance(failed, str) and "StreamingQueryException" in failed, failed
    assert "[EPOCHGUARD_LOG_TRUNCATION]" in failed and "diverges at offset 10 (epoch 0)" in failed, failed
    assert _expect(proc, "REWIND", seen, stderr) is None
    output = sink(tmp_path / "out")
    entries = [json.loads(line) for line in (tmp_path / "truncations.jsonl").read_text().splitlines()]
    assert judge(output, entries, truth) == (27, 5)
    assert proc.wait(120) == 0

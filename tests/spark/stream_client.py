"""A Spark client in its own process running ``epochguard-kafka`` across an unclean election of serve's
cluster, which the test drives: shared by the Spark Connect test and the oldest-pyspark test.

The client reads records only the isolated leader has (the checkpoint at 15), then waits on stdin while
the test elects a lagging replica uncleanly and refills the log past the checkpoint; the restarted query
must fail with the source's `[EPOCHGUARD_LOG_TRUNCATION]` message naming the divergence at offset 10,
and a rewind run must leave the final log once plus the 5 phantoms the truncation log names (the judge
of test_stream_guard.py, on the sink's committed files read here with pyarrow).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.spark.guard_cluster import TOPIC, GuardCluster
from tests.spark.test_stream_guard import TP, judge

# argv: bootstrap, tmp dir, topic, "connect" (a local Spark Connect server, Trigger.AvailableNow) or "classic"
# (a local session, 200 ms triggers and processAllAvailable: pyspark < 4.2 has no AvailableNow for Python
# sources).
CLIENT = r"""
import json, os, sys, time
os.environ["PYSPARK_PYTHON"] = sys.executable  # the Python workers must import epochguard too
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["SPARK_TESTING"] = "1"  # an ephemeral Connect port (SPARK-42272), as test_datasource.py
bootstrap, tmp, topic, how = sys.argv[1:5]
import pyspark
from pyspark.sql import SparkSession
if how == "connect":
    spark = SparkSession.builder.remote("local[2]").getOrCreate()
else:
    spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false").getOrCreate())
import epochguard.spark.stream as stream
assert stream.register(spark)
began = time.monotonic()

def say(what, value):
    print(what + " " + json.dumps(value), flush=True)
    print(f"{what} at {time.monotonic() - began:.1f} s", file=sys.stderr, flush=True)

def run(mode):
    writer = (spark.readStream.format("epochguard-kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("onTruncation", mode)
              .option("truncationLog", tmp + "/truncations.jsonl").option("kafka.request.timeout.ms", "2000")
              .load().writeStream.format("parquet").option("checkpointLocation", tmp + "/checkpoint"))
    if how == "connect":
        query = writer.trigger(availableNow=True).start(tmp + "/out")
    else:
        query = writer.trigger(processingTime="200 milliseconds").start(tmp + "/out")
    try:
        if how == "connect":
            query.awaitTermination(300)
        else:
            query.processAllAvailable()
        return None
    except Exception as exc:
        return type(exc).__name__ + ": " + str(exc)
    finally:
        query.stop()

say("SESSION", [type(spark).__module__, pyspark.__version__])
say("FIRST", run("fail"))
sys.stdin.readline()  # the test elects uncleanly and refills
say("FAIL", run("fail"))
say("REWIND", run("rewind"))
spark.stop()
"""


def sink(out: Path) -> list[tuple[int, int, int, bytes]]:
    """The rows of the file sink's committed files (those its `_spark_metadata` log lists)."""
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
    raise AssertionError(f"the Spark client ended before {what} (rc {proc.returncode}):\n"
                         f"{''.join(seen)[-2000:]}\n{stderr.read_text()[-4000:]}")


def run_client(python: str, how: str, env: dict[str, str], tmp_path: Path) -> list[str]:
    """Run the client with `python` against a fresh serve cluster; assert every step; return what its
    SESSION line said: [the session class's module, pyspark's version]."""
    cluster = GuardCluster()
    stderr = tmp_path / "client.stderr"  # a file: Spark's log would fill a pipe nobody reads
    try:
        cluster.produce(10)
        old = cluster.isolate_leader(TP, 5)
        with stderr.open("w") as err, subprocess.Popen(
                [python, "-c", CLIENT, cluster.bootstrap, str(tmp_path), TOPIC, how], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=err, text=True, cwd=tmp_path, env=env) as proc:
            try:
                return _drive(proc, cluster, old, tmp_path, stderr)
            finally:
                if proc.poll() is None:
                    proc.kill()
    finally:
        cluster.close()


def _drive(proc: subprocess.Popen[str], cluster: GuardCluster, old: int, tmp_path: Path,
           stderr: Path) -> list[str]:
    seen: list[str] = []
    session = _expect(proc, "SESSION", seen, stderr)
    assert isinstance(session, list)
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
    return [str(s) for s in session]

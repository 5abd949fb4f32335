"""The audit at scale, header comparison against the record-level audit in the same run (issue 22).

Layout: 3 brokers x 4 partitions, 100-byte values, batches of 16 KiB to 1 MiB (log-uniform, as
producers' batch.size and linger make them); on every partition broker 1 led epoch 0 and wrote a
tail (``--tail`` records) that brokers 2 and 3 never replicated: they hold other records there in
epoch 1 (an unclean election). The common prefix is one encoding written to the three replicas, as
followers copy their leader's batches byte for byte. Data are written once per size with the
project's own writers (the core's batch encoder, `epochguard.storage.logdir`'s root files, the epoch cache's
checkpoint) and cached under ``--data``.

Each audit runs in a fresh process, as `epochguard audit` does: ``end_to_end`` is from the process
start (before pyspark is imported) to the audit's return (results written), Spark's start included
when a session is made; ``imports`` is Python's imports; ``spark_start`` is how long `local_session`
took (0 when no session was made: as in `epochguard audit`, the session is a `LazySession`, made
only if a step runs in Spark; ``batches:eager`` makes it first, as the CLI did before);
``audit`` is the audit's own work, after the imports and after the session is up when one is made
(no warm-up job: a Spark job the audit runs pays for its own first-job costs, as it does for a
user); ``batches:verify`` checks every batch's CRC (`verify_crc`); ``batches:spark`` forces the Spark
path (``local_bytes=0``: what a loss larger than the driver's old 64 MiB budget took before issue 36); ``stages`` is the time of each step; ``driver_peak_mib`` is the Python driver's VmHWM; ``driver_cpu`` its CPU seconds (all its threads, not the JVM's:
what the driver's path costs whatever the load);
``load`` the 1-minute load average when the audit ended (the machine may be shared: quote ratios of
the same run). Spark's bare start (``SparkSession.builder.getOrCreate()`` and a first
``spark.range(1).collect()``, nothing of epochguard) is measured in the same run, as the floor.
With ``--tail-fraction`` the tail is that share of each partition (1/6: 2 M of 12 M records lost, the
large loss of issue 36); lost_records.parquet is then checked to be exactly broker 1's tails (``exact``).
Not a test: run it by hand and quote it (``make bench-audit``).

    nice .venv/bin/python benches/audit_scale.py --records 3000000,12000000 [--methods batches,records,...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path

BROKERS, PARTITIONS, VALUE_BYTES = (1, 2, 3), 4, 100
RECORD_BYTES = 107  # a v2 record of a null key and a 100-byte value, no headers, small deltas
SEGMENT_BYTES = 1 << 30

AUDIT = """
import time
began = time.perf_counter()
import json, os, sys
from epochguard.spark import audit, local_session
from epochguard.spark.cli import needs_spark
from epochguard.spark.session import LazySession
imported = time.perf_counter()
method, _, how = sys.argv[1].partition(":")
conf = json.loads(os.environ.get("AUDIT_SCALE_SPARK_CONF", "{}"))  # --spark-conf
if how == "eager":  # the session made before the audit starts, as `epochguard audit` did before
    spark = local_session("local[2]", app_name="epochguard-audit-scale", shuffle_partitions=4, conf=conf)
else:  # as `epochguard audit` does: made only if a step runs in Spark, in the background if surely
    spark = LazySession("local[2]", app_name="epochguard-audit-scale", shuffle_partitions=4, conf=conf)
    if needs_spark(sys.argv[3:], None, method):
        spark.start()
up = time.perf_counter()
stages = {}
from contextlib import contextmanager
@contextmanager
def step(name):
    start = time.perf_counter()
    try:
        yield
    finally:
        stages[name] = round(time.perf_counter() - start, 3)
options = {"local_bytes": 0} if how == "spark" else {}  # "spark": the Spark path forced (the baseline)
result = audit(spark, sys.argv[3:], out=sys.argv[2], method=method, step=step, verify_crc=how == "verify",
               **options)
done = time.perf_counter()
if isinstance(spark, LazySession):  # the session's start, when one was made (0: never)
    spark_start, ready = spark.took or 0.0, imported + (spark.took or 0.0)
else:
    spark_start, ready = up - imported, up
peak = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
import resource
usage = resource.getrusage(resource.RUSAGE_SELF)  # the Python driver's CPU, every thread (not the JVM's)
print("RESULT " + json.dumps({
    "end_to_end": done - began, "imports": imported - began, "spark_start": spark_start,
    "audit": done - max(ready, up), "stages": stages,
    "lost": result.lost_count, "records": sum(r.record_count for r in result.replicas),
    "kinds": sorted(r.kind for r in result.replicas), "driver_peak_mib": peak / 1024,
    "driver_cpu": usage.ru_utime + usage.ru_stime,
    "load": os.getloadavg()[0],
}))
"""


BARE = """
import time
began = time.perf_counter()
import json, os
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
up = time.perf_counter()
spark.range(1).collect()
done = time.perf_counter()
print("RESULT " + json.dumps({"session": up - began, "first_job": done - up, "total": done - began,
                              "load": os.getloadavg()[0]}))
spark.stop()
"""


def bare_start() -> dict:
    """Spark's own start, nothing of epochguard: the floor of any audit's end-to-end time."""
    proc = subprocess.run([sys.executable, "-c", BARE], capture_output=True, text=True)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"bare Spark start failed:\n{proc.stderr[-4000:]}")
    return json.loads(line[len("RESULT ") :])


def batch_sizes(n: int, seed: int) -> list[int]:
    """Record counts of batches of 16 KiB to 1 MiB (log-uniform), adding up to `n`."""
    rng, sizes, left = random.Random(seed), [], n
    while left > 0:
        size = math.exp(rng.uniform(math.log(16 << 10), math.log(1 << 20)))
        count = min(left, max(1, int(size // RECORD_BYTES)))
        sizes.append(count)
        left -= count
    return sizes


class Segments:
    """One replica's segment files, rolled at SEGMENT_BYTES as a broker rolls them."""

    def __init__(self, part: Path) -> None:
        self.part, self.file, self.size = part, None, 0

    def write(self, base_offset: int, data: bytes) -> None:
        from epochguard.storage.log import segment_file_name

        if self.file is None or self.size + len(data) > SEGMENT_BYTES:
            self.close()
            self.file, self.size = open(self.part / segment_file_name(base_offset), "wb"), 0
        self.file.write(data)
        self.size += len(data)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def write_partition(dirs: list[Path], p: int, common: int, tail: int) -> None:
    """Partition `p` on every broker: the common prefix (one encoding, written to all three, as
    followers copy their leader's batches), then each broker's tail, and its epoch checkpoint."""
    from epochguard import _core

    parts = {b: d / f"audit-{p}" for d, b in zip(dirs, BROKERS, strict=True)}
    files = {}
    for b, part in parts.items():
        part.mkdir(exist_ok=True)
        files[b] = Segments(part)
    offset = 0
    for count in batch_sizes(common, seed=p):
        data = _core.encode_batch([(None, b"v" * VALUE_BYTES)] * count, base_offset=offset, partition_leader_epoch=0)
        for b in BROKERS:
            files[b].write(offset, data)
        offset += count
    for broker, epoch, value in ((1, 0, b"o"), (2, 1, b"n"), (3, 1, b"n")):
        at = offset
        for count in batch_sizes(tail, seed=100 + p + epoch):
            records = [(None, value * VALUE_BYTES)] * count
            files[broker].write(at, _core.encode_batch(records, base_offset=at, partition_leader_epoch=epoch))
            at += count
    for b, part in parts.items():
        files[b].close()
        epochs = [(0, 0)] if b == 1 else [(0, 0), (1, common)]
        _core.LeaderEpochCache(epochs).write_checkpoint(str(part / "leader-epoch-checkpoint"))


def recovery_points(dirs: list[Path], common: int) -> None:
    """Every replica's recovery point (``recovery-point-offset-checkpoint``: what it has flushed) at the
    end of the common prefix: the tails are recent writes not flushed yet, as after a leader's crash."""
    from epochguard.storage.logdir import RECOVERY_POINT_OFFSET_CHECKPOINT, write_offset_checkpoint
    from epochguard.types import TopicPartition

    for d in dirs:
        if not (d / RECOVERY_POINT_OFFSET_CHECKPOINT).exists():
            points = {TopicPartition("audit", p): common for p in range(PARTITIONS)}
            write_offset_checkpoint(d / RECOVERY_POINT_OFFSET_CHECKPOINT, points)


def generate(root: Path, n: int, tail: int) -> list[str]:
    """The cluster of `n` records in all (n / 4 per partition, each on three replicas); its log dirs."""
    from epochguard.storage.logdir import write_meta_properties, write_offset_checkpoint
    from epochguard.types import TopicPartition

    dirs = [root / f"broker-{b}" for b in BROKERS]
    common = n // PARTITIONS - tail
    if (root / "complete").exists():
        recovery_points(dirs, common)  # data cached before the checkpoint was written
        return [str(d) for d in dirs]
    for d, b in zip(dirs, BROKERS, strict=True):
        d.mkdir(parents=True, exist_ok=True)
        write_meta_properties(d, b)
    for p in range(PARTITIONS):
        write_partition(dirs, p, common, tail)
    for d in dirs:  # every replica's high watermark: the end of the common prefix
        write_offset_checkpoint(d / "replication-offset-checkpoint", {TopicPartition("audit", p): common for p in range(PARTITIONS)})
    recovery_points(dirs, common)
    (root / "complete").write_text(json.dumps({"records": n, "tail": tail}))
    return [str(d) for d in dirs]


def evict(dirs: list[str]) -> None:
    """Drop the data's pages from the page cache (``posix_fadvise(DONTNEED)`` on each file: only
    these files, not the machine's whole cache), so the next audit reads them from the disk."""
    for d in dirs:
        for f in Path(d).rglob("*"):
            if f.is_file():
                fd = os.open(f, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


def run(method: str, dirs: list[str], out: Path, conf: dict[str, str], timeout: float | None) -> dict:
    """One audit in a fresh process; a failure or a timeout is a row that says so (the run goes on)."""
    env = {**os.environ, "AUDIT_SCALE_SPARK_CONF": json.dumps(conf)}
    began = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", AUDIT, method.replace(":cold", ""), str(out), *dirs],
                              capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"failed": f"stopped unfinished after {time.perf_counter() - began:.0f} s (--timeout)",
                "load": os.getloadavg()[0]}
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        causes = [x.strip() for x in proc.stderr.splitlines() if "Error" in x or "Exception" in x]
        return {"failed": f"exit {proc.returncode} after {time.perf_counter() - began:.0f} s: "
                          + " | ".join(dict.fromkeys(causes[:3])), "stderr_tail": proc.stderr[-4000:],
                "load": os.getloadavg()[0]}
    return json.loads(line[len("RESULT ") :])


def exact(out: Path, n: int, tail: int) -> bool:
    """Whether lost_records.parquet holds exactly broker 1's tails: per partition the offsets
    [common, common + tail) once each, in order, epoch 0, the tail's value (read a row group at a time)."""
    import pyarrow.parquet as pq

    common = n // PARTITIONS - tail
    at: dict[int, int] = {}
    for f in sorted((out / "lost_records.parquet").glob("*.parquet")):  # Spark's part files in its order
        for batch in pq.ParquetFile(f).iter_batches(columns=["partition", "broker", "offset", "leader_epoch", "value"]):
            rows = batch.to_pydict()
            for p, b, o, e, v in zip(*rows.values(), strict=True):
                if b != 1 or e != 0 or v != b"o" * VALUE_BYTES or o != at.get(p, common):
                    return False
                at[p] = o + 1
    return all(at.get(p) == common + tail for p in range(PARTITIONS))


def tail_of(n: int, args: argparse.Namespace) -> int:
    """Records of each partition's divergent tail: `--tail`, or `--tail-fraction` of the partition."""
    return args.tail if args.tail_fraction is None else round(n // PARTITIONS * args.tail_fraction)


def summarize(rows: list[dict]) -> None:
    """The same-run ratios: records / batches, the Spark path forced / the driver's windows, and the
    driver's peak RSS from the smallest to the largest size."""
    by = {(r["records"], r["method"]): r for r in rows if "records" in r and "failed" not in r}
    for n in sorted({r["records"] for r in rows if "records" in r}):
        if (n, "batches") in by and (n, "records") in by:
            a, b = by[(n, "records")], by[(n, "batches")]
            print(f"{n:,}: records / batches audit time x{a['audit'] / b['audit']:.1f}, "
                  f"end to end x{a['end_to_end'] / b['end_to_end']:.1f}")
        if (n, "batches") in by and (n, "batches:spark") in by:
            a, b = by[(n, "batches:spark")], by[(n, "batches")]
            print(f"{n:,}: Spark path forced / driver windows: end to end x{a['end_to_end'] / b['end_to_end']:.1f}, "
                  f"audit x{a['audit'] / b['audit']:.1f}")
    sizes = sorted(n for n, m in by if m == "batches")
    if len(sizes) > 1:
        low, high = by[(sizes[0], "batches")], by[(sizes[-1], "batches")]
        print(f"driver peak RSS, batches: {low['driver_peak_mib']:.0f} MiB at {sizes[0]:,}, "
              f"{high['driver_peak_mib']:.0f} MiB at {sizes[-1]:,} (x{high['driver_peak_mib'] / low['driver_peak_mib']:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", default="3000000,12000000", help="total records per cluster, comma-separated")
    parser.add_argument("--tail", type=int, default=10_000, help="records of the divergent tail per partition")
    parser.add_argument("--tail-fraction", type=float, default=None,
                        help="the divergent tail as this fraction of each partition's records instead of --tail "
                        "(1/6 of 12 M: 2 M lost, issue 36's large loss)")
    parser.add_argument(
        "--methods",
        default="batches,batches:verify,batches:eager,records",
        help="audit methods, run in this order (each over every size); ':verify' checks every batch's CRC "
        "(verify_crc), ':spark' forces the Spark path (local_bytes=0), ':eager' makes the session before the audit (as epochguard audit did before it made it "
        "only when needed), ':cold' drops the data's pages from the page cache first",
    )
    parser.add_argument("--baseline-up-to", type=int, default=None,
                        help="run the record-level audit ('records') only up to this many records")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="Spark settings of the audits' sessions, e.g. spark.driver.memory=4g (the "
                        "executor's heap in local mode)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds before an audit is stopped")
    parser.add_argument("--data", default="target/audit-scale", help="where the generated log dirs are cached")
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument("--generate-only", action="store_true", help="write (or find) the data and stop")
    args = parser.parse_args()
    rows: list[dict] = []
    if not args.generate_only:
        floor = bare_start()
        rows.append({"method": "spark-bare-start", **floor})
        print(f"Spark's bare start: session {floor['session']:.1f} s, first job {floor['first_job']:.1f} s, "
              f"total {floor['total']:.1f} s (load {floor['load']:.1f})", flush=True)
    conf = dict(kv.split("=", 1) for kv in args.spark_conf)
    data: dict[int, tuple[list[str], int]] = {}
    for n in (int(x) for x in args.records.split(",")):
        tail = tail_of(n, args)
        root = Path(args.data) / f"n{n}-t{tail}"
        began = time.perf_counter()
        dirs = generate(root, n, tail)
        size = sum(f.stat().st_size for d in dirs for f in Path(d).rglob("*.log"))
        batches = sum(len(batch_sizes(n // PARTITIONS - tail, seed=p)) for p in range(PARTITIONS)) * 3
        data[n] = (dirs, size)
        print(f"{n:,} records ({size / 2**30:.2f} GiB on disk, {batches:,} batches of the common prefix): "
              f"data ready in {time.perf_counter() - began:.0f} s", flush=True)
    for method in [] if args.generate_only else args.methods.split(","):
        for n, (dirs, size) in data.items():
            if method == "records" and args.baseline_up_to is not None and n > args.baseline_up_to:
                continue
            if method.endswith(":cold"):
                evict(dirs)
            tail = tail_of(n, args)
            root = Path(args.data) / f"n{n}-t{tail}"
            got = run(method, dirs, root / f"out-{method.replace(':', '-')}", conf, args.timeout)
            # "records": the cluster's size; the audit's own count (three replicas) is "replica_records".
            row = {k: v for k, v in got.items() if k != "records"} | {"replica_records": got.get("records")}
            rows.append({"records": n, "bytes": size, "method": method, "spark_conf": conf, **row})
            if "failed" in got:
                print(f"  {n:,} {method:14s} FAILED (load {got['load']:.1f}): {got['failed']}", flush=True)
                continue
            assert got["lost"] == PARTITIONS * tail, got
            got["exact"] = exact(root / f"out-{method.replace(':', '-')}", n, tail)
            rows[-1]["exact"] = got["exact"]
            assert got["exact"], "lost_records.parquet is not exactly broker 1's tails"
            assert got["records"] == 3 * n, got
            print(
                f"  {n:,} {method:14s} end to end {got['end_to_end']:6.1f} s (imports {got['imports']:.1f} s, "
                f"Spark start {got['spark_start']:.1f} s), "
                f"audit {got['audit']:6.1f} s, driver peak {got['driver_peak_mib']:.0f} MiB, driver CPU "
                f"{got.get('driver_cpu', 0):.1f} s, load {got['load']:.1f}; "
                f"stages {json.dumps(got['stages'])}",
                flush=True,
            )
            if args.json:  # as the run goes: a long run stopped midway keeps what it measured
                Path(args.json).write_text(json.dumps(rows, indent=1))
    summarize(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    main()

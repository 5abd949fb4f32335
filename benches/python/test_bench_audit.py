"""The audit at scale: 3 brokers x 4 partitions with an unclean-election divergence on every
partition (broker 1 holds the last 10% of each log in epoch 0, brokers 2 and 3 hold other records
there in epoch 1). For each size: wall time, records/s and peak RSS of the Python driver (Linux VmHWM),
each audit in a fresh process so the peak is its own (the JVM's heap is fixed by its settings). The driver's peak must
not grow with the record count: it holds per-replica summaries and samples, never records.

The issue asks for 2,000,000 records of 100 B per partition; EG_AUDIT_RECORDS lists the sizes per
partition (default "250000,1000000", as this machine is shared; say so when quoting).

    nice .venv/bin/python -m pytest benches/python/test_bench_audit.py -s
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "spark"))
from kafka_logs import Replica, write_log_dir

SIZES = [int(n) for n in os.environ.get("EG_AUDIT_RECORDS", "250000,1000000").split(",")]
PARTITIONS, PER_BATCH, VALUE = 4, 500, b"v" * 100
pytestmark = [pytest.mark.spark, pytest.mark.skipif(not Path('/proc/self/status').exists(), reason='reads VmHWM (Linux)')]

AUDIT = """
import json, sys, time
from epochguard.spark import audit, local_session
spark = local_session("local[2]", app_name="epochguard-audit-bench", shuffle_partitions=4)
spark.range(1).collect()  # the JVM is up before the clock starts
start = time.perf_counter()
result = audit(spark, sys.argv[2:], out=sys.argv[1], html=True)
wall = time.perf_counter() - start
spark.stop()
# VmHWM: this process's own peak (ru_maxrss would carry over the parent's peak across fork+exec).
peak = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
print("RESULT " + json.dumps({
    "wall": wall,
    "lost": result.lost_count,
    "records": sum(r.record_count for r in result.replicas),
    "driver_peak_mib": peak / 1024,
}))
"""


def _batches(prefix: str, epoch: int, first: int, count: int) -> list:
    return [
        (epoch, [(f"{prefix}{o}".encode(), VALUE) for o in range(b, min(b + PER_BATCH, first + count))])
        for b in range(first, first + count, PER_BATCH)
    ]


def _cluster(root: Path, n: int) -> list[str]:
    common, tail = n - n // 10, n // 10
    dirs = []
    for broker in (1, 2, 3):
        epoch, prefix = (0, "old") if broker == 1 else (1, "new")
        replicas = [
            Replica("audit", p, [*_batches("k", 0, 0, common), *_batches(prefix, epoch, common, tail)], segment_records=n)
            for p in range(PARTITIONS)
        ]
        dirs.append(str(write_log_dir(root, broker, replicas, writer="core")))
    return dirs


def test_audit_at_scale(tmp_path: Path) -> None:
    rows = []
    for n in SIZES:
        dirs = _cluster(tmp_path / f"n{n}", n)
        began = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", AUDIT, str(tmp_path / f"out{n}"), *dirs], capture_output=True, text=True
        )
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        assert proc.returncode == 0 and line, proc.stderr[-3000:]
        got = json.loads(line[len("RESULT ") :])
        assert got["lost"] == PARTITIONS * (n // 10) and got["records"] == 3 * PARTITIONS * n
        got["process"] = time.perf_counter() - began
        rows.append((n, got))
    print()
    for n, got in rows:
        print(
            f"{PARTITIONS} partitions x 3 brokers x {n:,} records: audit {got['wall']:.1f} s "
            f"({got['records'] / got['wall'] / 1e6:.2f} M records/s), Python driver peak RSS "
            f"{got['driver_peak_mib']:.0f} MiB, {got['lost']:,} lost"
        )
    if len(rows) > 1:
        (small, a), (large, b) = rows[0], rows[-1]
        growth = b["driver_peak_mib"] / a["driver_peak_mib"]
        print(f"records x{large / small:.0f}: driver peak RSS x{growth:.2f}")
        assert growth < 1.5, "the driver's memory grows with the record count"

"""`epochguard watch` against a real cluster of 1,000 partitions polled every second: its CPU as a fraction of
one core (issue 34: under 10%), against a named baseline of the same run.

A Kafka 4.4 cluster (`epochguard.kafka.KafkaCluster`: 1 controller + 3 brokers on 127.0.0.1, under
``--base``) with one topic of ``--partitions`` partitions spread over the three brokers, a few records in
each. Then, one after the other, each for ``--seconds``, as a child process of its own:

- ``watch``: the command, `epochguard watch -b ... --interval 1 --state ... --events ...` (the daemon, not
  --once): every second Metadata, then one ListOffsets per broker for every partition, the state file
  rewritten atomically after each round;
- ``kafka-python end_offsets`` (the baseline): kafka-python's `KafkaConsumer.end_offsets` of the same
  partitions every second, what a lag checker written with the most common Python client pays for the same
  ListOffsets, and nothing else (no state file, no validation).

CPU is the child's user + system time (`/proc/<pid>/stat`) over the measured window, which starts after a
warm-up of ``--warmup`` seconds (imports, connections, the first rounds); the rounds each made in the window
are counted (the watcher's from its own Prometheus metrics, `--metrics-port`: the count of
`epochguard_poll_duration_seconds`; the baseline's from a file it rewrites), and CPU per round is given too:
a process that cannot keep up makes fewer rounds. ``load`` is the 1-minute
load average at the end (the machine may be shared: quote the ratio of the same run). Not a test: run it by
hand and quote it.

    nice .venv/bin/python benches/watch_scale.py [--partitions 1000] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BASELINE = """
import os, sys, time
from kafka import KafkaConsumer, TopicPartition
bootstrap, topic, n, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
tps = [TopicPartition(topic, p) for p in range(n)]
rounds = 0
next_at = time.monotonic()
while True:
    ends = consumer.end_offsets(tps)
    assert len(ends) == n
    rounds += 1
    with open(count + ".tmp", "w") as f:
        f.write(str(rounds))
    os.replace(count + ".tmp", count)
    next_at += 1.0
    time.sleep(max(0.0, next_at - time.monotonic()))
"""


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process (fields 14 and 15 of /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(cmd: list[str], warmup_s: float, seconds: float, rounds_of: Callable[[object], int]) -> dict[str, float]:
    """Starts `cmd`, waits `warmup_s`, then measures its CPU over `seconds`; `rounds_of(proc)` counts rounds."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(warmup_s)
        assert proc.poll() is None, f"{cmd[:4]} exited: {proc.returncode}"
        r0, c0, t0 = rounds_of(proc), cpu_seconds(proc.pid), time.monotonic()
        time.sleep(seconds)
        r1, c1, t1 = rounds_of(proc), cpu_seconds(proc.pid), time.monotonic()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    wall = t1 - t0
    return {"cpu_s": c1 - c0, "wall_s": wall, "core_fraction": (c1 - c0) / wall, "rounds": r1 - r0,
            "cpu_ms_per_round": 1000 * (c1 - c0) / max(1, r1 - r0)}


def count_file(path: Path) -> Callable[[object], int]:
    """Rounds the baseline made so far: the number in the file it rewrites after each."""
    def rounds(_proc: object) -> int:
        try:
            return int(path.read_text() or 0)
        except FileNotFoundError:
            return 0
    return rounds


def metrics_rounds(port: int) -> Callable[[object], int]:
    """Rounds the watcher finished so far: its `epochguard_poll_duration_seconds_count`."""
    from urllib.request import urlopen

    def rounds(_proc: object) -> int:
        text = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        (line,) = [x for x in text.splitlines() if x.startswith("epochguard_poll_duration_seconds_count")]
        return int(float(line.split()[-1]))
    return rounds


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--base", type=Path, default=Path("target/bench-watch-scale"))
    args = parser.parse_args()

    from epochguard.kafka import KafkaCluster

    shutil.rmtree(args.base, ignore_errors=True)
    out: dict[str, Any] = {"partitions": args.partitions, "interval_s": 1.0, "seconds": args.seconds}
    with KafkaCluster(args.base / "cluster", brokers=3) as cluster:
        topic = "scale"
        cluster.create_topic(topic, {p: [1 + (p + i) % 3 for i in range(3)] for p in range(args.partitions)},
                             {"min.insync.replicas": "1"})
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks=1, linger_ms=20)
        for p in range(args.partitions):
            for i in range(3):
                producer.send(topic, f"r-{p}-{i}".encode(), partition=p)
        producer.flush(60)
        producer.close()

        state, port = args.base / "watch-state.json", free_port()
        watch_cmd = [sys.executable, "-m", "epochguard", "watch", "-b", cluster.bootstrap, "--topic", topic,
                     "--interval", "1", "--state", str(state), "--events", str(args.base / "events.jsonl"),
                     "--metrics-port", str(port)]
        out["watch"] = measure(watch_cmd, args.warmup, args.seconds, metrics_rounds(port))
        rows = json.loads(state.read_text())["partitions"]
        assert len(rows) == args.partitions and all(r[2] == 3 for r in rows), "the watcher did not read them all"
        count = args.base / "baseline-rounds"
        base_cmd = [sys.executable, "-c", BASELINE, cluster.bootstrap, topic, str(args.partitions), str(count)]
        out["kafka-python end_offsets"] = measure(base_cmd, args.warmup, args.seconds, count_file(count))
    base, watched = out["kafka-python end_offsets"], out["watch"]
    out["ratio_core"] = base["core_fraction"] / watched["core_fraction"]
    out["ratio_per_round"] = base["cpu_ms_per_round"] / watched["cpu_ms_per_round"]
    out["load"] = os.getloadavg()[0]
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Log dirs a real Kafka broker wrote, for the audit: copies before and after the old leader truncates,
a real consumer's reads (confluent-kafka), and the ground truth the test computes on its own.

The truth is not the audit's: acked records come from the producer's acks (base offset + index),
the final log from the leader's partition dir after the run (decoded with `PartitionLog.open`), and
the divergence point from the old leader's copy before it truncated.
"""

from __future__ import annotations

import csv
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

from epochguard.kafka import KafkaCluster
from epochguard.storage.log import PartitionLog

from .differential import Backend, Observer


class AuditWatch(Observer):
    """An `Observer` of a Kafka script run: a consumer reading the partition from the start, and
    copies of the three brokers' log dirs (only the script's topic and the root files)."""

    def __init__(self, cluster: KafkaCluster, topic: str, out: Path) -> None:
        import confluent_kafka as ck

        self.cluster, self.topic, self.out = cluster, topic, Path(out)
        self.consumed: list[tuple[int, int | None, str]] = []  # (offset, leader epoch, key)
        self.events: list[str] = []
        self._stop = threading.Event()
        self._consumer = ck.Consumer({
            "bootstrap.servers": cluster.bootstrap, "group.id": f"audit-{topic}", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 500,
            "client.id": "epochguard-audit-consumer", "logger": logging.getLogger("epochguard.audit-consumer")})
        self._consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        self._thread = threading.Thread(target=self._run, name="audit-consumer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(0.05)
            if msg is None:
                continue
            if msg.error() is not None:
                self.events.append(f"{msg.error().name()}: {msg.error().str()}")
                continue
            epoch = msg.leader_epoch()
            key = msg.key() or b""
            self.consumed.append((msg.offset(), epoch if epoch is not None and epoch >= 0 else None, key.decode()))

    def _await_read(self, log_end: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(o == log_end - 1 for o, _, _ in self.consumed):
                return True
            time.sleep(0.05)
        return False

    def _copy(self, name: str) -> None:
        for b in self.cluster.broker_ids:
            self.cluster.copy_data_dir(b, self.out / name / f"broker-{b}", topics=[self.topic])

    # --- Observer ---
    def lost_records_written(self, b: Backend, log_end: int) -> None:
        assert self._await_read(log_end, 30), f"the consumer did not read up to {log_end - 1}: {self.consumed}"

    def elected(self, b: Backend) -> None:
        self._copy("before")

    def close(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(10)
            self._consumer.close()

    def settled(self, b: Backend, log_end: int) -> None:
        self._await_read(log_end, 15)  # whatever it read by then is what it read
        self.close()
        self._copy("after")
        with open(self.out / "consumed.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["topic", "partition", "offset", "leader_epoch", "key"])
            for offset, epoch, key in self.consumed:
                w.writerow([self.topic, 0, offset, "" if epoch is None else epoch, key])


def records_of(partition_dir: Path) -> dict[int, tuple[int, str]]:
    """offset -> (leader epoch, key) of every record in a partition dir."""
    log = PartitionLog.open(partition_dir, write_through=False)
    return {r.offset: (b.partition_leader_epoch, (r.key or b"").decode()) for b in log.batches() for r in b.records()}


def ground_truth(out: Path, topic: str, run: dict[str, Any], old_leader: int = 1, new_leader: int = 2) -> dict[str, Any]:
    """From the acks, the copies and the consumer's reads: the divergence point, the lost records
    (acked and not in the final log) and the phantom reads (read, not in the final log), by offset."""
    final = records_of(out / "after" / f"broker-{new_leader}" / f"{topic}-0")
    old = records_of(out / "before" / f"broker-{old_leader}" / f"{topic}-0")
    acked: list[tuple[int, str]] = []  # (offset, key): offsets repeat across the election
    for name, tag in (("produce_a", "a"), ("produce_b", "b"), ("produce_c", "c"), ("produce_d", "d")):
        if name in run:
            error, base = run[name]
            assert error == 0, (name, run[name])
            n = {"a": 5, "b": 3, "c": 2, "d": 1}[tag]
            acked.extend((base + i, f"{tag}-{i}") for i in range(n))
    lost = sorted(o for o, key in acked if final.get(o, (None, None))[1] != key)
    divergence = min((o for o in old if final.get(o) != old[o]), default=None)
    consumed = []
    with open(out / "consumed.csv") as f:
        for row in csv.DictReader(f):
            consumed.append((int(row["offset"]), int(row["leader_epoch"]) if row["leader_epoch"] else None, row["key"]))
    phantoms = sorted({o for o, epoch, key in consumed
                       if o not in final or final[o][1] != key or (epoch is not None and final[o][0] != epoch)})
    truth = {"topic": topic, "old_leader": old_leader, "new_leader": new_leader, "divergence_offset": divergence,
             "lost_offsets": lost, "phantom_offsets": phantoms, "old_leader_log_end": max(old, default=-1) + 1,
             "final_log_end": max(final, default=-1) + 1}
    (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return truth


def check_audit(out: Path, truth: dict[str, Any], phase: str) -> list[str]:
    """What the audit wrote to `out` (its Parquet tables) against the truth; a list of differences."""
    import pyarrow.parquet as pq

    topic, old_leader = truth["topic"], truth["old_leader"]
    rows = [r for r in pq.read_table(out / "partitions.parquet").to_pylist() if r["topic"] == topic]
    lost = sorted(r["offset"] for r in pq.read_table(out / "lost_records.parquet").to_pylist() if r["topic"] == topic)
    # Before the truncation, what the consumer read after the copy (the new leader's later records) is
    # past the copied reference's end: `beyond_log_end`, not a phantom of the final logs.
    phantoms = sorted({r["offset"] for r in pq.read_table(out / "phantom_reads.parquet").to_pylist()
                       if r["topic"] == topic and not (phase == "before" and r["kind"] == "beyond_log_end")})
    problems = []
    diverged = [r for r in rows if r["kind"] == "diverged"]
    if phase == "before":
        want = {"broker": old_leader, "divergence_offset": truth["divergence_offset"],
                "lost_count": len(truth["lost_offsets"]), "lost_first_offset": truth["lost_offsets"][0],
                "lost_last_offset": truth["lost_offsets"][-1], "reference_broker": truth["new_leader"]}
        got = [{k: r[k] for k in want} for r in diverged]
        if got != [want]:
            problems.append(f"diverged replicas {got} != [{want}]")
        if lost != truth["lost_offsets"]:
            problems.append(f"lost offsets {lost} != {truth['lost_offsets']}")
    else:  # the old leader truncated: nothing is lost on disk any more, the reads still are
        if diverged or lost:
            problems.append(f"after truncation: diverged {diverged}, lost {lost}")
    if phantoms != truth["phantom_offsets"]:
        problems.append(f"phantom reads {phantoms} != {truth['phantom_offsets']}")
    return problems

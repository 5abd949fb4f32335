"""The same unclean-election cells for Spark's own Kafka source and for ``epochguard-kafka``, in a live query.

A cell: a running query (file sink, 200 ms triggers, `processAllAvailable`) reads 10 committed records and
5 more that only the isolated leader has; the leader dies, a lagging replica is elected uncleanly and the
log is refilled, either below the checkpoint (3 records: the log ends at 13 < 15) or past it (12: it ends
at 22), before the next trigger, or while the query is stopped (then restarted on its checkpoint); or the
election falls inside the next planned batch [15, 20) (5 more records only the isolated leader has): its
task's Fetch is held at the wire (serve's `GuardCluster.hold_fetches`; on real Kafka the wire proxy in
front of the brokers, tests/real_kafka/wire_proxy.py) before the task reads anything (plan-then-read),
after it read record 15 (during-task), or while the query is stopped mid-task and the batch waits for its
replay (replay); the log is refilled to 22 and the Fetch released. What
the query did is judged by the cluster's final log, by (offset, value): `exact` (the final log once,
phantoms only where a truncation log names them), `fails` (with what the message names), or `SILENT`
(records of the final log never emitted, phantoms nobody named, duplicates).

`run_cell` is shared by `test_stream_matrix.py` (a few cells in `make test`) and
`tools/stream_matrix.py`, which runs every cell and writes the table in docs/streaming.md.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from tests.spark.guard_cluster import GuardCluster

REPO = Path(__file__).resolve().parents[2]
POM = REPO / "tools" / "spark-kafka" / "pom.xml"
RESULTS = REPO / "docs" / "stream-matrix.json"
DOC = REPO / "docs" / "streaming.md"
START, END = "<!-- stream-matrix:start -->", "<!-- stream-matrix:end -->"

CELLS = {
    "refill-below": "election before a trigger, log refilled below the checkpoint (ends at 13 < 15)",
    "refill-above": "election before a trigger, log refilled past the checkpoint (ends at 22 > 15)",
    "while-stopped": "election while the query is stopped, log refilled past the checkpoint, restart",
    "plan-then-read": "election between planning [15, 20) and reading it (the task's Fetch held at the wire), "
                      "log refilled to 22",
    "during-task": "election during a task (record 15 read, its next Fetch held), log refilled to 22",
    "replay": "election while a planned batch [15, 20) awaits its replay (query stopped mid-task), log refilled "
              "to 22, restart",
}
# The cells where the election falls inside a planned batch: the task's Fetch at or past this offset is held
# at the wire (`hold_fetches`: serve's, or the wire proxy's on Kafka) until the new leader has been elected
# and refilled.
HELD_FROM = {"plan-then-read": 15, "during-task": 16, "replay": 15}
SOURCES = {
    "kafka": "Spark's Kafka source (failOnDataLoss=true)",
    "epochguard-kafka/fail": "epochguard-kafka, onTruncation=fail",
    "epochguard-kafka/rewind": "epochguard-kafka, onTruncation=rewind",
}


def spark_kafka_jars() -> list[str]:
    """The jars `make spark-kafka` cached for tools/spark-kafka/pom.xml, or [] when not fetched."""
    root = Path(os.environ.get("EPOCHGUARD_CACHE") or Path.home() / ".cache" / "epochguard")
    cache = root / f"spark-kafka-{hashlib.sha256(POM.read_bytes()).hexdigest()[:12]}"
    return sorted(glob.glob(str(cache / "*.jar"))) if (cache / ".complete").exists() else []


@dataclass
class CellResult:
    source: str
    cell: str
    verdict: str  # exact | fails | SILENT
    detail: str
    emitted: int
    lost: int  # records of the final log never emitted
    phantoms: int  # emitted records not in the final log
    named: int  # of those, named by the truncation log
    duplicates: int
    cluster: str = "serve"  # serve | kafka (a real Apache Kafka cluster: guard_kafka.KafkaGuardCluster)


def _start(spark: Any, source: str, cluster: Any, tmp: Path, **options: str) -> Any:
    fmt, _, mode = source.partition("/")
    reader = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", cluster.bootstrap)
              .option("subscribe", cluster.topic).option("startingOffsets", "earliest")
              .option("kafka.request.timeout.ms", "5000").options(**options))
    columns = ["partition", "offset", "value"]
    if mode:
        reader = reader.option("onTruncation", mode).option("truncationLog", str(tmp / "truncations.jsonl"))
        columns.append("leaderEpoch")
    return (reader.load().select(*columns).writeStream.format("parquet")
            .option("checkpointLocation", str(tmp / "checkpoint")).trigger(processingTime="200 milliseconds")
            .start(str(tmp / "out")))


def run_cell(spark: Any, source: str, cell: str, make_cluster: Callable[[], Any] = GuardCluster,
             cluster_name: str = "serve") -> CellResult:
    """One (source, cell) on a fresh cluster from `make_cluster` (serve's in-process cluster by default;
    `guard_kafka.KafkaGuardCluster` on a real Kafka cluster, one topic per cell)."""
    from pyspark.errors import StreamingQueryException

    if source.startswith("epochguard"):
        from epochguard.spark.stream import register

        register(spark)
    tmp = Path(tempfile.mkdtemp(prefix="stream-matrix-"))
    cluster = make_cluster()
    tp = cluster.tp
    # during-task: one record batch per Fetch answer, so a task reads [15, 20) in five Fetches
    options = {"kafka.max.partition.fetch.bytes": "1"} if cell == "during-task" else {}
    try:
        cluster.produce(10)
        query = _start(spark, source, cluster, tmp, **options)
        query.processAllAvailable()
        old = cluster.isolate_leader(tp, 5)
        query.processAllAvailable()
        if cell in HELD_FROM:
            cluster.hold_fetches(HELD_FROM[cell])
            time.sleep(1.5)  # a Fetch the last task's consumer pipelined at 15 is answered (empty) meanwhile
            for _ in range(5):  # 15..19, one batch each, only on the isolated leader: the next batch plans them
                cluster.produce(1, acks=1)
            wait_until(lambda: bool(cluster.held_at), "a task's Fetch to be held", 120)
        if cell in ("while-stopped", "replay"):
            query.stop()
        cluster.unclean_election(tp, old)
        cluster.produce(3 if cell == "refill-below" else 12)
        truth = {o: v for o, (_, v) in cluster.truth(tp).items()}
        if cell in HELD_FROM:
            cluster.release_fetches()
        error = None
        try:
            if cell in ("while-stopped", "replay"):
                query = _start(spark, source, cluster, tmp, **options)
            query.processAllAvailable()
        except StreamingQueryException as exc:
            error = str(exc)
        finally:
            query.stop()
        rows = spark.read.parquet(str(tmp / "out")).collect() if (tmp / "out").exists() else []
        log = tmp / "truncations.jsonl"
        entries = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return replace(judge(source, cell, rows, entries, truth, error), cluster=cluster_name)
    finally:
        cluster.close()
        shutil.rmtree(tmp, ignore_errors=True)


def wait_until(predicate: Callable[[], bool], what: str, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"waited {timeout} s for {what}")
        time.sleep(0.05)


def judge(source: str, cell: str, rows: list[Any], entries: list[dict[str, Any]], truth: dict[int, bytes | None],
          error: str | None) -> CellResult:
    emitted = [(r["offset"], bytes(r["value"])) for r in rows]
    epochs = [r["leaderEpoch"] if "leaderEpoch" in r else None for r in rows]
    named = sum(1 for (o, v), e in zip(emitted, epochs, strict=True) if truth.get(o) != v and e is not None and any(
        x["phantoms"]["from"] <= o < x["phantoms"]["until"] and e <= x["phantoms"]["max_epoch"] for x in entries))
    phantoms = sum(1 for o, v in emitted if truth.get(o) != v)
    seen = set(emitted)
    lost = sum(1 for o, v in truth.items() if (o, v) not in seen)
    duplicates = len(emitted) - len(seen)
    if error is not None:
        named_divergence = re.search(r"diverges at offset (\d+) \(epoch (-?\d+)\)", error)
        spark_change = re.search(r"offset was changed from (\d+) to (\d+)", error)
        if named_divergence:
            detail = f"fails naming the divergence at offset {named_divergence.group(1)}"
        elif spark_change:
            detail = (f"fails: offset changed from {spark_change.group(1)} to {spark_change.group(2)} "
                      "(no divergence point; the phantoms stay unnamed)")
        else:
            detail = "fails: " + error.splitlines()[0][:160]
        return CellResult(source, cell, "fails", detail, len(emitted), lost, phantoms, named, duplicates)
    if phantoms == named and lost == 0 and duplicates == 0:
        detail = f"the final log exactly once, {named} phantoms named in the truncation log" if named else \
            "the final log exactly once"
        return CellResult(source, cell, "exact", detail, len(emitted), lost, phantoms, named, duplicates)
    parts = [f"{lost} records of the final log never read"] if lost else []
    if phantoms - named:
        parts.append(f"{phantoms - named} phantoms in the output, unnamed")
    if duplicates:
        parts.append(f"{duplicates} duplicates")
    return CellResult(source, cell, "SILENT", ", ".join(parts), len(emitted), lost, phantoms, named, duplicates)


# --- the table in the docs ----------------------------------------------------------------------
CLUSTERS = {"serve": "`epochguard serve`", "kafka": "Kafka 4.4 (3 brokers)"}


def render(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    by = {(r.get("cluster", "serve"), r["source"], r["cell"]): r for r in results}
    head = "| cell | cluster | " + " | ".join(SOURCES.values()) + " |"
    lines = [START, f"Generated by `python tools/stream_matrix.py` ({meta.get('versions', '')}); "
             "do not edit by hand.", "", head, "|---" * (len(SOURCES) + 2) + "|"]
    for cell, what in CELLS.items():
        for cluster, name in CLUSTERS.items():
            if not any(k[0] == cluster and k[2] == cell for k in by):
                continue
            cells = []
            for source in SOURCES:
                r = by.get((cluster, source, cell))
                cells.append("not run" if r is None else f"**{r['verdict']}**: {r['detail']}")
            lines.append(f"| {what} | {name} | " + " | ".join(cells) + " |")
    spark = [r for r in results if r["source"] == "kafka"]
    silent = sorted({f"{r['cell']} ({r.get('cluster', 'serve')})" for r in spark if r["verdict"] == "SILENT"})
    lines += ["", f"Silent cells of Spark's source: {len(silent)} of {len(spark)}"
              f" ({', '.join(silent) or 'none'}); of epochguard-kafka: "
              f"{sum(1 for r in results if r['verdict'] == 'SILENT' and r['source'] != 'kafka')}"
              f" of {len(results) - len(spark)}.", END]
    return "\n".join(lines)


def write_docs(results: list[CellResult], meta: dict[str, Any]) -> None:
    data: dict[str, Any] = {"meta": meta, "results": [asdict(r) for r in results]}
    RESULTS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    text = DOC.read_text()
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    DOC.write_text(before + render(data["results"], meta) + after)


def previous_results() -> list[CellResult]:
    if not RESULTS.exists():
        return []
    return [CellResult(**r) for r in json.loads(RESULTS.read_text())["results"]]


def table_in_docs() -> tuple[str, str]:
    """(the table in docs/streaming.md, the table rendered from docs/stream-matrix.json)."""
    text = DOC.read_text()
    table = START + text.split(START, 1)[1].split(END, 1)[0] + END
    data = json.loads(RESULTS.read_text())
    return table, render(data["results"], data["meta"])


@dataclass
class SteadyRequests:
    """What a source asked of serve over `batches` micro-batches of one record a partition each (200 ms
    triggers, the empty triggers in between planning too), by role and request kind."""

    source: str
    batches: int
    triggers: int  # the driver's ListOffsets over the leaders: one a leader and trigger for both sources
    leaders: int  # the brokers leading the topic's partitions
    driver: dict[str, int]
    executors: dict[str, int]

    def per_trigger(self) -> float:
        return sum(self.driver.values()) / self.triggers

    def per_batch(self) -> float:
        return sum(self.executors.values()) / self.batches


def steady_state_requests(spark: Any, source: str, batches: int = 4, partitions: int = 1) -> SteadyRequests:
    """Count at serve's wire, after two warm-up batches (connections made, metadata known, both local[2]
    Python workers used), the requests of `source`'s driver and executors (Spark's: client ids with
    "executor"; epochguard-kafka's: "epochguard-spark-executor") over `batches` batches of one record a
    partition (serve's 3 brokers lead the partitions in turn)."""
    from collections import Counter

    cluster = GuardCluster(partitions=partitions)
    tmp = Path(tempfile.mkdtemp(prefix="steady-"))

    def produce(n: int) -> None:
        cluster.produce(n, partition=range(partitions))

    try:
        leaders = len({cluster.leader(tp)[0] for tp in cluster.partitions})
        produce(5)
        query = (spark.readStream.format(source).option("kafka.bootstrap.servers", cluster.bootstrap)
                 .option("subscribe", cluster.topic).option("startingOffsets", "earliest").load()
                 .writeStream.format("noop").option("checkpointLocation", str(tmp / "checkpoint"))
                 .trigger(processingTime="200 milliseconds").start())
        try:
            query.processAllAvailable()
            for _ in range(2):
                produce(1)
                query.processAllAvailable()
            seen = cluster.record_requests()
            first = query.lastProgress["batchId"]
            for _ in range(batches):
                produce(1)
                query.processAllAvailable()
            snapshot = list(seen)
            done = query.lastProgress["batchId"] - first
        finally:
            query.stop()
    finally:
        cluster.close()
        shutil.rmtree(tmp, ignore_errors=True)
    roles: dict[str, Counter[str]] = {"driver": Counter(), "executors": Counter()}
    for client, request in snapshot:
        if "producer" not in client:  # the cluster's own producer
            kind = type(request).__name__.removesuffix("Request")
            roles["executors" if "executor" in client else "driver"][kind] += 1
    return SteadyRequests(source, done, roles["driver"]["ListOffsets"] // leaders, leaders, dict(roles["driver"]),
                          dict(roles["executors"]))

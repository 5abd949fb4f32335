"""The truncation audit: which records did an unclean leader election lose, and who read them.

For each partition the *reference* replica is the one whose epoch history reaches the highest
leader epoch (ties: the longest log, then the lowest broker id): the log every other replica
truncates to when it rejoins. For each other replica the divergence point comes from the two epoch
histories (the core's batched `divergence_points`) and is confirmed against the records: a record
is *lost* when the replica holds it at or past the divergence point and the reference does not hold
the same (offset, leader epoch). Records are compared by (offset, epoch) because an epoch has one
leader, so two replicas holding the same offset in the same epoch hold the same record.

What is not an election loss is named, not counted (DESIGN.md 4.4):

``kind`` of a replica (partitions.parquet)
    ``reference``; ``in_sync`` (same records); ``behind`` (a prefix of the reference: a lagging
    follower; had it been elected the high watermark would have dipped, KIP-207, but nothing is
    lost); ``retention`` (holds records below the reference's log start offset: deleted by
    retention, not by the election); ``recreated`` (another topic id: the topic was deleted and
    created again, so offsets are not comparable); ``diverged`` (holds lost records).
``kind`` of a phantom read (phantom_reads.parquet)
    ``truncated`` (the reference never reached that offset in the read's epoch) and ``rewritten``
    (the reference holds that offset from a later epoch: the offset now names another record) are
    losses; ``retention`` (below the reference's log start), ``beyond_log_end`` (the read's epoch is
    the reference's epoch at that offset, past its end: the logs were copied before the read, or a
    KIP-207 dip, not a loss), ``compacted`` (inside the log, the epoch matches, the offset was
    cleaned away), ``recreated`` (an epoch the reference never had: a re-created topic) and
    ``unknown_partition`` (no replica of it was given) explain the rest; ``aborted`` (a record of a
    transaction its replica aborted) is not a loss either: a read_committed consumer never returns it.
``kind`` of a lost record (lost_records.parquet)
    ``lost``, or ``aborted``: a record of a transaction that replica's own log aborted (or its ABORT
    marker). It disappears with the election but was never data; it is listed, not counted.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from epochguard import _core
from epochguard.spark.listing import Listing, PartitionReplica, is_local, list_log_dirs
from epochguard.spark.logs import DEFAULT_CHUNK_BYTES, decode_listing

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

LOSS_KINDS = ("truncated", "rewritten")
REPLICA_KINDS = ("reference", "in_sync", "behind", "retention", "recreated", "diverged")
PHANTOM_KINDS = (
    "truncated", "rewritten", "retention", "beyond_log_end", "compacted", "recreated", "aborted", "unknown_partition"
)

Step = Callable[[str], Any]  # progress reporter: step("decoding segments") -> context manager


@dataclass
class ReplicaSummary:
    """One row of partitions.parquet."""

    topic: str
    partition: int
    reference_broker: int
    reference_latest_epoch: int | None
    reference_log_end_offset: int
    broker: int
    latest_epoch: int | None
    log_end_offset: int
    divergence_offset: int | None
    lost_count: int
    lost_first_offset: int | None
    lost_last_offset: int | None
    kind: str
    reason: str
    log_start_offset: int
    reference_log_start_offset: int
    record_count: int
    retained_count: int  # records below the reference's log start (retention, not loss)
    error_count: int  # unreadable ranges in this replica's segments (rows of errors.parquet)
    epochs_confirmed: bool  # the epoch histories' divergence point agrees with the records
    epoch_source: str  # "checkpoint" or "records" (no usable leader-epoch-checkpoint)
    high_watermark: int | None  # from the log dir's replication-offset-checkpoint
    lost_visible_count: int | None  # lost records below the replica's high watermark: consumers could read them
    epochs: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class AuditResult:
    out: str
    replicas: list[ReplicaSummary]
    error_count: int
    phantom_counts: dict[str, int] | None  # by kind; None without a consumed table
    lost_records: list[dict[str, Any]]  # a sample for the report (all of them are in Parquet)
    phantom_reads: list[dict[str, Any]]  # likewise

    @property
    def diverged(self) -> list[ReplicaSummary]:
        return [r for r in self.replicas if r.kind == "diverged"]

    @property
    def lost_count(self) -> int:
        return sum(r.lost_count for r in self.replicas)

    @property
    def phantom_loss_count(self) -> int:
        return sum(n for kind, n in (self.phantom_counts or {}).items() if kind in LOSS_KINDS)

    @property
    def exit_code(self) -> int:
        """0: clean; 1: a divergence, a phantom read of a lost record, or an unreadable input."""
        return 1 if self.diverged or self.phantom_loss_count or self.error_count else 0

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary (what ``--json`` prints)."""
        return {
            "out": self.out,
            "exit_code": self.exit_code,
            "partitions": len({(r.topic, r.partition) for r in self.replicas}),
            "diverged_replicas": len(self.diverged),
            "lost_records": self.lost_count,
            "errors": self.error_count,
            "phantom_reads": self.phantom_counts,
            "replicas": [
                {k: v for k, v in vars(r).items() if k != "epochs"} | {"epochs": r.epochs} for r in self.replicas
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.summary(), indent=2, default=str)


def audit(
    spark: SparkSession,
    log_dirs: Sequence[str],
    consumed: str | DataFrame | None = None,
    out: str = "audit-out",
    *,
    step: Step | None = None,
    verify_crc: bool = True,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    sample: int = 50,
    html: bool = True,
) -> AuditResult:
    """Audit broker log dirs (one per broker) and write the results as Parquet under `out`.

    `consumed` is what a consumer read: a Parquet or CSV path, or a DataFrame, with ``topic``,
    ``partition``, ``offset`` and ``leader_epoch`` columns (others are kept). Writes
    ``partitions.parquet``, ``lost_records.parquet``, ``errors.parquet``, ``phantom_reads.parquet``
    (with `consumed`) and ``report.html``. `step(name)` is entered around each stage, for progress
    (`report.AuditProgress`).
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    step = step or (lambda _name: nullcontext())
    with step("listing log directories"):
        listing = list_log_dirs(list(log_dirs), spark)
    with step("decoding segments"):
        frame = decode_listing(spark, listing, with_errors=True, verify_crc=verify_crc, chunk_bytes=chunk_bytes)
        frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
        records = frame.where(F.col("error_reason").isNull()).drop("path", "error_position", "error_reason")
        # Error rows have no epoch and no offset: they form their own group per replica.
        stats = (
            frame.groupBy("topic", "partition", "broker", "leader_epoch")
            .agg(
                F.count("offset").alias("n"),
                F.min("offset").alias("lo"),
                F.max("offset").alias("hi"),
                F.count("error_reason").alias("errors"),
            )
            .collect()
        )
    with step("comparing epoch histories"):
        replicas = _summarize(listing, stats)
    with step("finding lost records"):
        pairs = spark.createDataFrame(
            [
                (r.topic, r.partition, r.broker, r.reference_broker, r.reference_log_start_offset, r.high_watermark)
                for r in replicas
                if r.kind not in ("reference", "recreated")
            ],
            "topic string, partition int, broker int, reference_broker int, reference_log_start_offset long, "
            "high_watermark long",
        )
        references = spark.createDataFrame(
            [(r.topic, r.partition, r.broker) for r in replicas if r.kind == "reference"],
            "topic string, partition int, broker int",
        )
        reference_keys = records.join(F.broadcast(references), ["topic", "partition", "broker"]).select(
            "topic", "partition", "offset", "leader_epoch"
        )
        held = records.join(F.broadcast(pairs), ["topic", "partition", "broker"])
        retained = {
            (row.topic, row.partition, row.broker): row.n
            for row in held.where(F.col("offset") < F.col("reference_log_start_offset"))
            .groupBy("topic", "partition", "broker")
            .agg(F.count("*").alias("n"))
            .collect()
        }
        lost = _with_transaction_kind(
            records,
            held.where(F.col("offset") >= F.col("reference_log_start_offset")).join(
                reference_keys, ["topic", "partition", "offset", "leader_epoch"], "left_anti"
            ),
        ).persist(StorageLevel.MEMORY_AND_DISK)
        mismatches = {
            (row.topic, row.partition, row.broker): row
            for row in lost.where(F.col("kind") == "lost")
            .groupBy("topic", "partition", "broker")
            .agg(
                F.count("*").alias("n"),
                F.min("offset").alias("lo"),
                F.max("offset").alias("hi"),
                F.sum((F.col("offset") < F.col("high_watermark")).cast("long")).alias("visible"),
            )
            .collect()
        }
        for r in replicas:
            _confirm(
                r, mismatches.get((r.topic, r.partition, r.broker)), retained.get((r.topic, r.partition, r.broker), 0)
            )
            if r.error_count:
                r.reason += f"; {r.error_count} unreadable byte ranges (see errors.parquet)"
    phantom_counts = None
    phantoms = None
    if consumed is not None:
        with step("checking consumed records"):
            phantoms = _phantom_reads(spark, consumed, replicas, records, reference_keys, lost).persist()
            phantom_counts = {
                row.kind: row.n for row in phantoms.groupBy("kind").agg(F.count("*").alias("n")).collect()
            }
    with step("writing results"):
        _prepare(out)
        partitions = spark.createDataFrame([_row(r) for r in replicas], PARTITIONS_SCHEMA)
        partitions.coalesce(1).write.mode("overwrite").parquet(_join(out, "partitions.parquet"))
        lost_out = lost.select(*LOST_COLUMNS).orderBy("topic", "partition", "broker", "offset")
        lost_out.write.mode("overwrite").parquet(_join(out, "lost_records.parquet"))
        errors = _errors(spark, listing, frame)
        errors.coalesce(1).write.mode("overwrite").parquet(_join(out, "errors.parquet"))
        error_count = errors.count()
        lost_sample = [row.asDict() for row in lost_out.limit(sample).collect()]
        phantom_sample: list[dict[str, Any]] = []
        if phantoms is not None:
            ordered = phantoms.orderBy("topic", "partition", "offset")
            ordered.write.mode("overwrite").parquet(_join(out, "phantom_reads.parquet"))
            phantom_sample = [row.asDict() for row in ordered.limit(sample).collect()]
            phantoms.unpersist()
    lost.unpersist()
    frame.unpersist()
    result = AuditResult(out, replicas, error_count, phantom_counts, lost_sample, phantom_sample)
    if html and is_local(out):
        from epochguard.spark.report import write_html

        write_html(result, os.path.join(out, "report.html"))
    return result


def _with_transaction_kind(records: DataFrame, lost: DataFrame) -> DataFrame:
    """`lost` with `kind`: "aborted" for a record whose transaction ends in an ABORT marker in the same
    replica's log (and for that marker), else "lost" (an open transaction's records included)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = ["topic", "partition", "broker", "offset"]
    # A control record's key is (version int16, type int16): type 0 = ABORT, 1 = COMMIT.
    marker_type = F.when(F.col("is_control"), F.conv(F.hex(F.substring("key", 3, 2)), 16, 10).cast("int"))
    following = Window.partitionBy("topic", "partition", "broker", "producer_id").orderBy("offset").rowsBetween(
        Window.currentRow, Window.unboundedFollowing
    )
    status = (
        records.where(F.col("is_transactional") & (F.col("producer_id") >= 0))
        .select(*keys, "producer_id", marker_type.alias("marker"))
        .withColumn("ends_with", F.first("marker", ignorenulls=True).over(following))
        .select(*keys, (F.col("ends_with") == 0).alias("aborted"))
    )
    kind = F.when(F.coalesce(F.col("aborted"), F.lit(False)), "aborted").otherwise("lost")
    return lost.join(status, keys, "left").withColumn("kind", kind).drop("aborted")


# --- per replica, on the driver (epoch histories and counts are small) ---------------------------


def _summarize(listing: Listing, stats: list) -> list[ReplicaSummary]:
    by_replica: dict[tuple[str, int, int], list] = {}
    for row in stats:
        by_replica.setdefault((row.topic, row.partition, row.broker), []).append(row)
    partitions: dict[tuple[str, int], list[tuple[PartitionReplica, dict]]] = {}
    for replica in listing.replicas:
        rows = by_replica.get((replica.topic, replica.partition, replica.broker), [])
        partitions.setdefault((replica.topic, replica.partition), []).append((replica, _facts(replica, rows)))
    summaries: list[ReplicaSummary] = []
    comparisons: list[tuple[ReplicaSummary, dict, dict]] = []
    for (topic, partition), members in sorted(partitions.items()):
        # Highest epoch, then longest log; then the one read without errors and holding the most
        # records (a copy with an unreadable batch must not make the others' records look lost).
        ref_replica, ref = max(
            members,
            key=lambda m: (_latest(m[1]["epochs"]), m[1]["log_end"], -m[1]["errors"], m[1]["count"], -m[0].broker),
        )
        for replica, facts in sorted(members, key=lambda m: m[0].broker):
            summary = ReplicaSummary(
                topic=topic,
                partition=partition,
                reference_broker=ref_replica.broker,
                reference_latest_epoch=_latest(ref["epochs"]) if ref["epochs"] else None,
                reference_log_end_offset=ref["log_end"],
                broker=replica.broker,
                latest_epoch=_latest(facts["epochs"]) if facts["epochs"] else None,
                log_end_offset=facts["log_end"],
                divergence_offset=None,
                lost_count=0,
                lost_first_offset=None,
                lost_last_offset=None,
                kind="reference",
                reason="the log the other replicas truncate to",
                log_start_offset=facts["log_start"],
                reference_log_start_offset=ref["log_start"],
                record_count=facts["count"],
                retained_count=0,
                error_count=facts["errors"],
                epochs_confirmed=True,
                epoch_source=facts["epoch_source"],
                high_watermark=replica.high_watermark,
                lost_visible_count=None,
                epochs=facts["epochs"],
            )
            summaries.append(summary)
            if replica is ref_replica:
                continue
            if replica.topic_id and ref_replica.topic_id and replica.topic_id != ref_replica.topic_id:
                summary.kind = "recreated"
                summary.reason = f"topic id {replica.topic_id} differs from the reference's {ref_replica.topic_id}"
                continue
            summary.kind = "in_sync"
            comparisons.append((summary, ref, facts))
    _epoch_divergence(comparisons)
    return summaries


def _facts(replica: PartitionReplica, groups: list) -> dict:
    errors = sum(r.errors for r in groups)
    rows = [r for r in groups if r.n]
    count = sum(r.n for r in rows)
    if rows:
        log_end = max(r.hi for r in rows) + 1
        first = min(r.lo for r in rows)
    else:  # no records: an empty active segment's base offset is the log end
        log_end = replica.segments[-1].base_offset if replica.segments else 0
        first = log_end
    log_start = replica.log_start_offset if replica.log_start_offset is not None else first
    if replica.epochs:
        epochs, source = replica.epochs, "checkpoint"
    else:
        # Kafka's recovery rule: replay each epoch's first offset through assign().
        cache = _core.LeaderEpochCache()
        for r in sorted((r for r in rows if r.leader_epoch is not None and r.leader_epoch >= 0), key=lambda r: r.lo):
            cache.assign(r.leader_epoch, r.lo)
        epochs, source = cache.entries(), "records"
    return {
        "count": count,
        "errors": errors,
        "log_end": log_end,
        "log_start": log_start,
        "epochs": epochs,
        "epoch_source": source,
    }


def _latest(epochs: list[tuple[int, int]]) -> int:
    return epochs[-1][0] if epochs else -1


def _epoch_divergence(comparisons: list[tuple[ReplicaSummary, dict, dict]]) -> None:
    """One batched core call for every (reference, replica) pair."""
    if not comparisons:
        return
    a = _csr([ref["epochs"] for _, ref, _ in comparisons], [ref["log_end"] for _, ref, _ in comparisons])
    b = _csr([f["epochs"] for _, _, f in comparisons], [f["log_end"] for _, _, f in comparisons])
    points = _core.divergence_points(*a, *b)
    for (summary, _, facts), point in zip(comparisons, np.asarray(points).tolist(), strict=True):
        # A point at or past the replica's log end concerns offsets it never held: nothing to lose.
        summary.divergence_offset = point if 0 <= point < facts["log_end"] else None


def _csr(histories: list[list[tuple[int, int]]], log_ends: list[int]) -> tuple[np.ndarray, ...]:
    bounds = np.zeros(len(histories) + 1, dtype=np.int64)
    bounds[1:] = np.cumsum([len(h) for h in histories])
    flat = [entry for h in histories for entry in h]
    epochs = np.array([e for e, _ in flat], dtype=np.int32)
    starts = np.array([s for _, s in flat], dtype=np.int64)
    return bounds, epochs, starts, np.array(log_ends, dtype=np.int64)


def _confirm(summary: ReplicaSummary, mismatch: Any, retained: int) -> None:
    """Set the replica's lost range and kind from the record comparison."""
    if summary.kind in ("reference", "recreated"):
        return
    summary.retained_count = retained
    from_epochs = summary.divergence_offset
    from_records = mismatch.lo if mismatch is not None else None
    summary.epochs_confirmed = from_epochs == from_records or (
        from_epochs is not None and from_records is not None and from_records >= from_epochs
    )
    if from_records is not None:
        # Every mismatch is at or past the divergence point: below it the records agree by definition
        # of the record-level point, and the epoch-level one can only be earlier.
        summary.divergence_offset = from_records if from_epochs is None else min(from_epochs, from_records)
        summary.lost_count, summary.lost_first_offset, summary.lost_last_offset = mismatch.n, mismatch.lo, mismatch.hi
        summary.lost_visible_count = mismatch.visible
        summary.kind = "diverged"
        summary.reason = (
            f"{mismatch.n} records from offset {summary.divergence_offset} are not in broker "
            f"{summary.reference_broker}'s log (unclean election: truncated when it rejoins)"
        )
        if mismatch.visible:
            summary.reason += f"; {mismatch.visible} of them were below its high watermark (readable by consumers)"
        if not summary.epochs_confirmed:
            summary.reason += "; the epoch histories do not show this divergence (stale or missing checkpoint)"
    elif retained:
        summary.kind = "retention"
        summary.reason = (
            f"{retained} records below the reference's log start offset {summary.reference_log_start_offset} "
            "were deleted by retention, not lost"
        )
    elif summary.log_end_offset < summary.reference_log_end_offset:
        summary.kind = "behind"
        summary.reason = (
            f"a prefix of the reference, {summary.reference_log_end_offset - summary.log_end_offset} offsets behind "
            "(a lagging follower; electing it would dip the high watermark, KIP-207): nothing lost"
        )
        summary.divergence_offset = None
    else:
        summary.reason = "holds the same records as the reference"
        if not summary.epochs_confirmed:
            summary.reason += "; its epoch history disagrees (stale checkpoint), the records agree"
        summary.divergence_offset = None


# --- consumed records ----------------------------------------------------------------------------


def _phantom_reads(
    spark: SparkSession,
    consumed: str | DataFrame,
    replicas: list[ReplicaSummary],
    records: DataFrame,
    reference_keys: DataFrame,
    lost: DataFrame,
) -> DataFrame:
    from pyspark.sql import functions as F

    from epochguard.spark.udfs import EpochHistories

    table = read_consumed(spark, consumed) if isinstance(consumed, str) else consumed
    if dict(table.dtypes).get("leader_epoch") in ("float", "double"):  # pandas writes NaN for a missing epoch
        table = table.withColumn("leader_epoch", F.when(~F.isnan("leader_epoch"), F.col("leader_epoch")))
    table = (
        table.withColumn("topic", F.col("topic").cast("string"))
        .withColumn("partition", F.col("partition").cast("int"))
        .withColumn("offset", F.col("offset").cast("long"))
        .withColumn("leader_epoch", F.col("leader_epoch").cast("int"))
    )
    refs = [r for r in replicas if r.kind == "reference"]
    info = spark.createDataFrame(
        [(r.topic, r.partition, r.reference_log_start_offset, r.log_end_offset, r.latest_epoch) for r in refs],
        "topic string, partition int, ref_log_start long, ref_log_end long, ref_latest_epoch int",
    )
    histories = EpochHistories({(r.topic, r.partition): (r.epochs, r.log_end_offset) for r in refs}).broadcast(spark)
    at_offset = reference_keys.select(
        "topic", "partition", "offset", F.col("leader_epoch").alias("reference_epoch_at_offset")
    )
    lost_on = lost.groupBy("topic", "partition", "offset", "leader_epoch").agg(
        F.min("broker").alias("lost_on_broker"), F.min(F.col("kind") == "aborted").alias("aborted")
    )
    # A read without an epoch (an old client, a legacy batch) can only be matched by its offset.
    t, ref = table.alias("t"), reference_keys.alias("ref")
    held = (
        (F.col("t.topic") == F.col("ref.topic"))
        & (F.col("t.partition") == F.col("ref.partition"))
        & (F.col("t.offset") == F.col("ref.offset"))
        & (F.col("t.leader_epoch").isNull() | (F.col("t.leader_epoch") == F.col("ref.leader_epoch")))
    )
    missing = (
        t.join(ref, held, "left_anti")
        .join(F.broadcast(info), ["topic", "partition"], "left")
        .join(at_offset, ["topic", "partition", "offset"], "left")
        .join(lost_on, ["topic", "partition", "offset", "leader_epoch"], "left")
        .withColumn("reference_epoch", histories.epoch_for_offset("topic", "partition", "offset"))
    )
    c, epoch = F.col, F.col("leader_epoch")
    kind = (
        F.when(c("ref_log_end").isNull(), "unknown_partition")
        .when(c("offset") < c("ref_log_start"), "retention")
        .when(epoch > c("ref_latest_epoch"), "recreated")
        .when(c("aborted"), "aborted")
        .when(c("reference_epoch_at_offset").isNotNull(), "rewritten")
        .when((c("offset") >= c("ref_log_end")) & (epoch.isNull() | (epoch == c("reference_epoch"))), "beyond_log_end")
        .when(epoch.isNull() | (epoch == c("reference_epoch")), "compacted")
        .otherwise("truncated")
    )
    reason = (
        F.when(c("kind") == "unknown_partition", F.lit("no replica of this partition was audited"))
        .when(
            c("kind") == "retention", F.format_string("below the reference's log start offset %d", c("ref_log_start"))
        )
        .when(c("kind") == "recreated", F.format_string("epoch above the reference's latest %d", c("ref_latest_epoch")))
        .when(c("kind") == "aborted", F.lit("a record of an aborted transaction: read_committed never returns it"))
        .when(
            c("kind") == "rewritten",
            F.format_string(
                "the reference holds offset %d from epoch %d: another record",
                c("offset"),
                c("reference_epoch_at_offset"),
            ),
        )
        .when(
            c("kind") == "beyond_log_end",
            F.format_string("past the reference's log end %d in the same epoch", c("ref_log_end")),
        )
        .when(c("kind") == "compacted", F.lit("inside the reference's log and epoch: removed by compaction"))
        .otherwise(F.format_string("the reference left epoch %d before this offset: lost", epoch))
    )
    extra = [n for n in table.columns if n not in ("topic", "partition", "offset", "leader_epoch")]
    return (
        missing.withColumn("kind", kind)
        .withColumn("reason", reason)
        .select(
            "topic",
            "partition",
            "offset",
            "leader_epoch",
            "kind",
            "reason",
            "reference_epoch_at_offset",
            "lost_on_broker",
            *extra,
        )
    )


def read_consumed(spark: SparkSession, path: str) -> DataFrame:
    """A consumed-records table: Parquet (file or folder), or CSV with a header row."""
    if path.lower().endswith(".csv"):
        return spark.read.option("header", True).option("inferSchema", True).csv(path)
    return spark.read.parquet(path)


# --- outputs -------------------------------------------------------------------------------------

LOST_COLUMNS = [
    "topic",
    "partition",
    "broker",
    "offset",
    "leader_epoch",
    "timestamp",
    "timestamp_type",
    "key",
    "value",
    "headers",
    "is_control",  # a lost transaction marker is reported too, but is not for re-publishing
    "kind",  # "lost", or "aborted" (a record of an aborted transaction: listed, not counted)
]
PARTITIONS_SCHEMA = (
    "topic string, partition int, reference_broker int, reference_latest_epoch int, reference_log_end_offset long, "
    "broker int, latest_epoch int, log_end_offset long, divergence_offset long, lost_count long, "
    "lost_first_offset long, lost_last_offset long, kind string, reason string, log_start_offset long, "
    "reference_log_start_offset long, record_count long, retained_count long, error_count long, "
    "epochs_confirmed boolean, "
    "epoch_source string, high_watermark long, lost_visible_count long"
)


def _row(r: ReplicaSummary) -> tuple:
    return tuple(getattr(r, name.split()[0]) for name in PARTITIONS_SCHEMA.split(", "))


def _errors(spark: SparkSession, listing: Listing, frame: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    decoded = frame.where(F.col("error_reason").isNotNull()).select(
        "broker",
        "topic",
        "partition",
        "path",
        F.col("error_position").alias("byte_position"),
        F.col("error_reason").alias("reason"),
    )
    listed = spark.createDataFrame(
        [(e.broker, e.topic, e.partition, e.path, None, e.reason) for e in listing.errors],
        "broker int, topic string, partition int, path string, byte_position long, reason string",
    )
    return decoded.unionByName(listed)


def _prepare(out: str) -> None:
    if is_local(out):
        os.makedirs(out, exist_ok=True)
        stale = os.path.join(out, "phantom_reads.parquet")
        if os.path.isdir(stale):  # from an earlier run with --consumed: it would no longer match
            shutil.rmtree(stale)


def _join(out: str, name: str) -> str:
    return os.path.join(out, name) if is_local(out) else out.rstrip("/") + "/" + name

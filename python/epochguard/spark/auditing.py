"""The truncation audit: which records did an unclean leader election lose, and who read them.

For each partition the *reference* replica is the one whose epoch history reaches the highest
leader epoch (ties: the longest log, then the lowest broker id): the log every other replica
truncates to when it rejoins. For each other replica the divergence point comes from the two epoch
histories (the core's batched `divergence_points`) and is confirmed against the records: a record
is *lost* when the replica holds it at or past the divergence point and the reference does not hold
the same (offset, leader epoch). Records are compared by (offset, epoch) because an epoch has one
leader, so two replicas holding the same offset in the same epoch hold the same record; their
content digests and lengths (`decode_to_arrow`'s ``record_digest``) check that they do. The
comparison never moves a key or value: those are decoded again only for the lost records, from the
byte ranges of the batches holding them.

What is not an election loss is named, not counted (DESIGN.md 4.4):

``kind`` of a replica (partitions.parquet)
    ``reference``; ``in_sync`` (same records); ``behind`` (a prefix of the reference: a lagging
    follower; had it been elected the high watermark would have dipped, KIP-207, but nothing is
    lost); ``retention`` (holds records below the reference's log start offset: deleted by
    retention, not by the election); ``recreated`` (another topic id: the topic was deleted and
    created again, so offsets are not comparable); ``diverged`` (holds lost records); ``mismatched``
    (holds a record at an (offset, epoch) the reference holds, with another digest or other lengths:
    a corrupt or forged copy, listed in mismatched_records.parquet).
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
    ``lost``, or ``aborted``: a record of a transaction the replica's own log aborted (or its ABORT
    marker). It disappears with the election but was never data; it is listed, not counted. Its
    ``uncommitted`` is true for a record of a transaction no marker ends in the replica's log: its
    outcome is not on this disk (the coordinator may have committed it, the COMMIT marker reaching only
    the new leader, or aborted it); no read_committed consumer read it here. It is counted as lost.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BooleanType, StructField, StructType

from epochguard import _core
from epochguard.client.metadata import name_matcher
from epochguard.spark.batches import Divergence, Stat, divergence, plan, verify_ranges
from epochguard.spark.headers import scan_listing
from epochguard.spark.listing import KRAFT_METADATA_TOPIC, Listing, PartitionReplica, is_local, list_log_dirs
from epochguard.spark.local import (
    COMPARED_COLUMNS,
    CONTENT_COLUMNS,
    CONTENT_SCHEMA,
    LOST_COLUMNS,
    MISMATCHED_COLUMNS,
    RECORD_COLUMNS,
    TAIL_SCHEMA,
    WINDOW_BYTES,
    Compared,
    Loss,
    LostRecords,
    Sources,
    Window,
    compare_window,
    content_of,
    decode_byte_ranges,
    decode_segments,
    merge_losses,
    replica_tables,
    segment_sources,
    sort,
    windows,
)
from epochguard.spark.local import rows as sample_rows
from epochguard.spark.logs import (
    DEFAULT_CHUNK_BYTES,
    LOCATION,
    decode_listing,
    decode_ranges,
    output_schema,
    plan_chunks,
    projection_schema,
)
from epochguard.spark.report import save
from epochguard.spark.result import (
    LOSS_KINDS,
    PARTITIONS_SCHEMA,
    PHANTOM_KINDS,
    REPLICA_KINDS,
    AuditResult,
    ReplicaSummary,
    arrow_frame,
    partition_row,
    partitions_arrow_schema,
)
from epochguard.spark.session import LazySession, resolve

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["LOSS_KINDS", "PHANTOM_KINDS", "REPLICA_KINDS", "AuditResult", "ReplicaSummary", "audit", "read_consumed"]

Step = Callable[[str], Any]  # progress reporter: step("decoding segments") -> context manager
Runs = dict[tuple[str, int], tuple[np.ndarray, np.ndarray, np.ndarray]]  # reference batches: base, last, epoch

LENGTHS = ("key_length", "value_length", "headers_count")
PARTITIONS_ARROW = partitions_arrow_schema()


def default_local_bytes() -> int:
    """The driver's budget for what it decodes at once: 1/16 of the machine's memory, 64 MiB to
    1 GiB (about 1 KiB of Arrow per 1 KiB of 100-byte records, a few times that while joined)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 1 << 30
    return max(64 << 20, min(1 << 30, memory // 16))


LOCAL_BYTES = default_local_bytes()


def audit(
    spark: SparkSession | LazySession,
    log_dirs: Sequence[str],
    consumed: str | DataFrame | None = None,
    out: str | None = "audit-out",
    *,
    step: Step | None = None,
    verify_crc: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    sample: int = 50,
    html: bool = True,
    method: str = "batches",
    local_bytes: int = LOCAL_BYTES,
    topics: Iterable[str] | None = None,
) -> AuditResult:
    """Audit broker log dirs (one per broker); returns an `AuditResult` and, unless `out` is None,
    saves it there (`report.save`: Parquet tables and report.html).

    `consumed` is what a consumer read: a Parquet or CSV path, or a DataFrame, with ``topic``,
    ``partition``, ``offset`` and ``leader_epoch`` columns (others are kept). `step(name)` is entered
    around each stage, for progress (`report.AuditProgress`; a `step` with a ``scanned(batches,
    bytes)`` method is told what the header pass has read).

    `method` ``"batches"`` (the default) compares the replicas' batch headers and decodes only the
    batches that do not line up (`epochguard.spark.batches`); ``"records"`` decodes and compares
    every record of every replica. Both find the same results. With ``"batches"``, when every
    segment is a local file, the driver decodes and compares what is left to decode without a Spark
    job (`epochguard.spark.local`): the partitions compared on records whole, the divergent batches
    a window of offsets at a time (about 16 MiB of batches), the lost records streamed to
    lost_records.parquet as each window finds them, so its memory does not grow with the loss.
    `local_bytes` is what it may hold at once (default `default_local_bytes()`: 1/16 of the machine's
    memory, 64 MiB to 1 GiB): when the partitions compared on records and one window exceed it (a
    replica whose divergent batches include a transaction is one window), Spark's jobs do the rest;
    0 always uses Spark's jobs. `spark` may be a `LazySession` (as `epochguard audit` passes): it is
    made only if a step runs in Spark.

    Every batch that is decoded has its CRC-32C checked against its bytes (a mismatch is a row of
    errors.parquet). With ``"batches"``, of the batches that line up the header pass reads (and
    checks) those Kafka's own recovery would check when the broker restarts: the batches past the
    replica's recovery point (``recovery-point-offset-checkpoint``: not flushed yet, so possibly torn
    by a crash), and every batch of a replica without a recovery point. Below it, what the broker
    flushed is trusted, as Kafka trusts it (its follower checked each batch's CRC when appending
    it). `verify_crc` reads every byte to check every CRC (the one cost that grows with the bytes:
    docs/performance.md), so a batch corrupted on disk later, where the replicas agree, is an error
    row too. ``"records"`` decodes, so checks, everything.

    `topics`: names or shell patterns of the topics to audit (as `epochguard watch --topic`); None: every
    topic but KRaft's metadata log (`__cluster_metadata`, replicated by Raft, KIP-595: a majority commits
    and only a replica holding every committed entry can be elected, so no unclean election loses from it;
    name it to audit it anyway). What was left out is in the provenance (`not_audited`).
    """
    if method not in ("batches", "records"):
        raise ValueError(f"method must be 'batches' or 'records', got {method!r}")
    scanned = getattr(step, "scanned", None)
    step = step or (lambda _name: nullcontext())
    provenance = {
        "log_dirs": [str(d) for d in log_dirs],
        "epochguard_version": _core.__version__,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "spark_master": spark.master if isinstance(spark, LazySession) else spark.conf.get("spark.master", None),
        "spark_version": spark.version,
    }
    # Hadoop's file systems (a path with a scheme) need the session; local files are the core's.
    hadoop = None if all(is_local(str(d)) for d in log_dirs) else resolve(spark)
    with step("listing log directories"):
        listing = list_log_dirs(list(log_dirs), hadoop)
        keep = name_matcher(topics) if topics is not None else (lambda t: t != KRAFT_METADATA_TOPIC)
        left_out = sorted({f"{r.topic}-{r.partition}" for r in listing.replicas if not keep(r.topic)})
        skipped = frozenset(r.topic for r in listing.replicas if not keep(r.topic))
        listing = listing.only(keep)
        if left_out:
            provenance["not_audited"] = left_out
    scan = None
    if method == "batches":
        with step("scanning batch headers"):
            scan = scan_listing(hadoop, listing, verify_crc=verify_crc, progress=scanned)
    # The driver decodes and compares when what is left to decode is small and local (`local.py`).
    on_driver = method == "batches" and local_bytes > 0 and all(is_local(s.path) for _, s in listing.segments)
    while True:
        batch_plan = None if scan is None else plan(scan)
        decoded = listing if batch_plan is None else batch_plan.records_listing(listing)
        budget = (local_bytes if on_driver else -1) - sum(s.size for _, s in decoded.segments)
        with step("decoding segments"):
            frame, stats = _decode_compared(spark, decoded, budget >= 0, chunk_bytes)
            if batch_plan is not None:
                stats += batch_plan.stats()
        with step("comparing epoch histories"):
            replicas = _summarize(listing, stats)
        runs: Divergence | None = None
        if batch_plan is None or scan is None:
            break
        with step("comparing batches"):
            runs = divergence(batch_plan, replicas)
            # Without `verify_crc` the scan read no CRC below the recovery points: check those of the batches
            # to decode now, and send a partition with a bad one to the records, as that scan would have.
            troubles = [] if verify_crc else verify_ranges(runs.ranges)
        if not troubles:
            break
        scan.troubles.extend(troubles)
        if not isinstance(frame, pa.Table):
            frame.unpersist()
    run = _Run(spark, listing, consumed, out, step, sample, html, provenance, skipped)
    if isinstance(frame, pa.Table) and runs is not None:
        # The divergent batches are compared a window at a time: they stay on the driver unless one
        # window cannot be cut small enough (a replica's transactional tail is one window).
        cut = windows(runs, replicas, min(budget, WINDOW_BYTES))
        if all(w.size <= budget for w in cut):
            return _audit_local(run, replicas, frame, runs, cut)
    if isinstance(frame, pa.Table):
        # What is left is too large for the driver: the records decoded so far go to Spark.
        frame = arrow_frame(resolve(spark), frame)
    return _audit_distributed(run, replicas, frame, decoded, runs)


@dataclass
class _Run:
    """What the last stages of one audit need, on either path."""

    spark: SparkSession | LazySession  # made only by what runs in Spark
    listing: Listing
    consumed: str | DataFrame | None
    out: str | None
    step: Step
    sample: int
    html: bool
    provenance: dict[str, Any]
    skipped: frozenset[str] = frozenset()  # topics in the log dirs left out: their consumed records too


def _decode_compared(
    spark: SparkSession | LazySession, decoded: Listing, on_driver: bool, chunk_bytes: int
) -> tuple[DataFrame | pa.Table, list]:
    """The records of `decoded` with the compared columns (and error rows), and their `_stats`. Every
    batch decoded, here and in the later steps, has its CRC checked first (`verify_crc=True` of the
    decoders): `audit`'s `verify_crc` only says which batches the header pass reads."""
    from pyspark import StorageLevel

    if on_driver:
        table = decode_segments(
            plan_chunks(list(decoded.segments), chunk_bytes),
            to_arrow_schema(projection_schema(COMPARED_COLUMNS, True)),
            RECORD_COLUMNS,
            True,
        )
        return table, _local_stats(table)
    frame = decode_listing(
        resolve(spark),
        decoded,
        columns=COMPARED_COLUMNS,
        with_errors=True,
        verify_crc=True,
        chunk_bytes=chunk_bytes,
    )
    frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
    return frame, _stats(frame, decoded)


def _audit_distributed(
    run: _Run, replicas: list[ReplicaSummary], frame: DataFrame, decoded: Listing, runs: Divergence | None
) -> AuditResult:
    """The rest of `audit` in Spark's jobs: the driver's own record-level comparison
    (`local.compare_window`), run in a task per unit of work (`_units`): each partition compared on
    records (its segments decoded again in the task) and each window of divergent batches, cut as the
    driver cuts them (`local.windows`), so a task holds one window, not the loss. A task reads its
    segments' bytes itself, or from Spark's binaryFile source where they are not local files."""
    spark, listing, consumed, step, sample = resolve(run.spark), run.listing, run.consumed, run.step, run.sample
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    records = frame.where(F.col("error_reason").isNull()).drop("path", "error_position", "error_reason")
    units = _units(decoded, replicas, runs)
    name = "finding lost records"
    if runs is not None and runs.ranges:
        name = f"decoding {runs.decoded_batches:,} batches that do not line up and finding lost records"

    def compare_unit(table: pa.Table) -> pa.Table:  # annotated: how Spark tells the Arrow-table form
        return _compare_unit(table, replicas=replicas)

    with step(name):
        found = (
            _units_frame(spark, units)
            .groupBy("unit")
            .applyInArrow(compare_unit, FOUND_SCHEMA)
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        retained = dict(runs.retained) if runs is not None else {}
        losses: dict[tuple[str, int, int], Loss] = {}
        mismatch_counts: dict[tuple[str, int, int], int] = {}
        for row in found.where(F.col("row") == "count").select(*REPLICA_COLUMNS, *COUNT_COLUMNS).collect():
            key = (row.topic, row.partition, row.broker)
            if row.lost_count:
                losses[key] = merge_losses(
                    losses.get(key), Loss(row.lost_count, row.lost_first, row.lost_last, row.lost_visible)
                )
            mismatch_counts[key] = mismatch_counts.get(key, 0) + row.mismatch_count
            retained[key] = retained.get(key, 0) + row.retained_count
        for r in replicas:
            key = (r.topic, r.partition, r.broker)
            _confirm(r, losses.get(key), retained.get(key, 0), mismatch_counts.get(key, 0))
            if r.error_count:
                r.reason += f"; {r.error_count} unreadable byte ranges (see errors.parquet)"
        lost = found.where(F.col("row") == "lost")
        lost_records = lost.select(*LOST_COLUMNS).orderBy("topic", "partition", "broker", "offset")
        lost_sample = [row.asDict() for row in lost_records.limit(sample).collect()]
        mismatched = found.where(F.col("row") == "mismatched").select(*MISMATCHED_COLUMNS)
    phantom_counts = None
    phantoms = None
    phantom_sample: list[dict[str, Any]] = []
    if consumed is not None:
        with step("checking consumed records"):
            references = spark.createDataFrame(
                [(r.topic, r.partition, r.broker) for r in replicas if r.kind == "reference"],
                "topic string, partition int, broker int",
            )
            reference_keys = records.join(F.broadcast(references), ["topic", "partition", "broker"]).select(
                "topic", "partition", "offset", "leader_epoch"
            )
            lost_keys = lost.select("topic", "partition", "offset", "leader_epoch", "broker", "kind")
            phantoms = _phantom_reads(
                spark, consumed, replicas, reference_keys, lost_keys, runs.runs if runs is not None else None,
                run.skipped,
            )
            phantoms = phantoms.orderBy("topic", "partition", "offset").persist()
            phantom_counts = {
                row.kind: row.n for row in phantoms.groupBy("kind").agg(F.count("*").alias("n")).collect()
            }
            phantom_sample = [row.asDict() for row in phantoms.limit(sample).collect()]
    errors = _errors(spark, listing, frame, found.where(F.col("row") == "error")).persist()
    result = AuditResult(
        replicas=replicas,
        frames={
            "partitions": spark.createDataFrame([partition_row(r) for r in replicas], PARTITIONS_SCHEMA),
            "lost_records": lost_records,
            "mismatched_records": mismatched.orderBy("topic", "partition", "broker", "offset"),
            "errors": errors,
            "phantom_reads": phantoms,
        },
        error_count=errors.count(),
        phantom_counts=phantom_counts,
        lost_sample=lost_sample,
        phantom_sample=phantom_sample,
        provenance=run.provenance,
    )
    if run.out is not None:
        with step("writing results"):
            save(result, run.out, html=run.html)
    return result


# --- the comparison in Spark's tasks -------------------------------------------------------------

REPLICA_COLUMNS = ["topic", "partition", "broker"]
COUNT_COLUMNS = ["lost_count", "lost_first", "lost_last", "lost_visible", "mismatch_count", "retained_count"]
Unit = tuple[int | None, int | None, list[dict]]  # records at offsets [lo, hi) of these byte ranges


def _found_schema() -> StructType:
    """What a task of `_audit_distributed` returns: rows tagged by ``row`` ("lost", "mismatched",
    "error", or "count": a replica's `Compared` counts in this unit), each with its own columns."""
    from pyspark.sql.types import IntegerType, LongType, StringType

    known = {
        f.name: f.dataType
        for f in output_schema(LOCATION, True, [*RECORD_COLUMNS, "key", "value", "headers"]).fields
    }
    known |= {"kind": StringType(), "uncommitted": BooleanType(), "reference_broker": IntegerType()}
    known |= {c: LongType() for c in COUNT_COLUMNS}
    known["reference_digest"] = known["record_digest"]
    names = dict.fromkeys(
        [*LOST_COLUMNS, *MISMATCHED_COLUMNS, "path", "error_position", "error_reason", *COUNT_COLUMNS]
    )
    fields = [StructField("row", StringType())]
    for n in names:
        fields.append(StructField(n, known.get(n) or known[n.removeprefix("reference_")]))
    return StructType(fields)


FOUND_SCHEMA = _found_schema()
FOUND_ARROW = to_arrow_schema(FOUND_SCHEMA)


def _units(decoded: Listing, replicas: Sequence[ReplicaSummary], runs: Divergence | None) -> list[Unit]:
    """The tasks' work: every partition of `decoded` (compared on records: all its replicas' segments
    whole; their error rows are `decoded`'s already, not ``owned``), then the windows of `runs`."""
    partitions: dict[tuple[str, int], list[dict]] = {}
    for r, s in decoded.segments:
        partitions.setdefault((r.topic, r.partition), []).append(
            {"broker": r.broker, "topic": r.topic, "partition": r.partition, "segment": s.base_offset,
             "txn_only": False, "path": s.path, "batch_position": 0, "batch_size": s.size, "owned": False}
        )
    units: list[Unit] = [(None, None, rows) for _, rows in sorted(partitions.items())]
    if runs is not None:
        units += [(w.lo, w.hi, w.rows) for w in windows(runs, replicas, WINDOW_BYTES)]
    return units


def _units_frame(spark: SparkSession, units: list[Unit]) -> DataFrame:
    """`units` as one row per byte range, with its file's ``content`` where it is not a local file
    (Spark's binaryFile source, only the files named)."""
    from pyspark.sql import functions as F

    rows = [
        (i, lo, hi, r["broker"], r["topic"], r["partition"], r["segment"], r["txn_only"], r["owned"], r["path"],
         r["batch_position"], r["batch_size"])
        for i, (lo, hi, ranges) in enumerate(units)
        for r in ranges
    ]
    frame = spark.createDataFrame(
        rows,
        "unit int, lo long, hi long, broker int, topic string, partition int, segment long, txn_only boolean, "
        "owned boolean, path string, batch_position long, batch_size long",
    )
    remote = sorted({row[9] for row in rows if not is_local(row[9])})
    if remote:
        files = spark.read.format("binaryFile").load(remote).select("path", "content")
        return frame.join(files, "path", "left")
    return frame.withColumn("content", F.lit(None).cast("binary"))


def _compare_unit(table: pa.Table, *, replicas: Sequence[ReplicaSummary]) -> pa.Table:
    """The ``applyInArrow`` body: one unit's byte ranges decoded (one thread: Spark runs a task per
    core) and compared by `local.compare_window`; its lost records, mismatches, error rows and counts."""
    if table.num_rows == 0:
        return FOUND_ARROW.empty_table()
    lo, hi = table["lo"][0].as_py(), table["hi"][0].as_py()
    ranges = table.drop_columns(["unit", "lo", "hi"]).combine_chunks()
    contents = ranges["content"].chunk(0) if ranges["content"].num_chunks else pa.array([], pa.binary())
    sources: Sources = {}
    for i, r in enumerate(ranges.drop_columns(["content"]).to_pylist()):  # a remote file's bytes, not copied
        data = contents[i].as_buffer() if contents[i].is_valid else None
        sources.setdefault((r["broker"], r["topic"], r["partition"], r["segment"]), (r["path"], data))

    def content(found: pa.Table) -> pa.Table:
        return content_of(found, sources, CONTENT_SCHEMA, CONTENT_COLUMNS, True, threads=1)

    # `logs.decode_ranges` (as `decode_byte_ranges`, on this one thread) reads the ranges' bytes in place.
    decoded = decode_ranges(
        iter(ranges.to_batches()), schema=TAIL_SCHEMA, columns=RECORD_COLUMNS, verify_crc=True, with_errors=True
    )
    tails = pa.Table.from_batches(list(decoded), schema=TAIL_SCHEMA)
    held = pa.schema([TAIL_SCHEMA.field(c) for c in COMPARED_COLUMNS]).empty_table()
    found = compare_window(held, tails, lo, hi, replicas, content)
    compared = found.compared
    keys = sorted({*compared.losses, *compared.mismatch_counts, *compared.retained})
    counts = pa.Table.from_pylist(
        [
            {"topic": t, "partition": p, "broker": b, "lost_count": loss.n if loss else 0,
             "lost_first": loss.lo if loss else None, "lost_last": loss.hi if loss else None,
             "lost_visible": loss.visible if loss else None,
             "mismatch_count": compared.mismatch_counts.get((t, p, b), 0),
             "retained_count": compared.retained.get((t, p, b), 0)}
            for t, p, b in keys
            for loss in [compared.losses.get((t, p, b))]
        ],
        schema=pa.schema([FOUND_ARROW.field(c) for c in (*REPLICA_COLUMNS, *COUNT_COLUMNS)]),
    )
    parts = [("lost", found.lost), ("mismatched", compared.mismatched), ("count", counts)]
    if found.errors is not None:
        parts.append(("error", found.errors))
    return pa.concat_tables([_tagged(tag, t) for tag, t in parts])


def _tagged(tag: str, table: pa.Table) -> pa.Table:
    """`table`'s rows as FOUND_ARROW rows tagged `tag` (the columns it lacks null)."""
    n = table.num_rows
    columns = [pa.chunked_array([pa.array([tag] * n, pa.string())])]
    for f in list(FOUND_ARROW)[1:]:
        have = f.name in table.column_names
        columns.append(table[f.name].cast(f.type) if have else pa.chunked_array([pa.nulls(n, f.type)]))
    return pa.Table.from_arrays(columns, schema=FOUND_ARROW)


def _audit_local(
    run: _Run, replicas: list[ReplicaSummary], frame: pa.Table, runs: Divergence, cut: list[Window]
) -> AuditResult:
    """The rest of `audit` on the driver: the same rules as the distributed path above, on Arrow
    (`local.compare`), a window at a time: the partitions compared on records (`frame`, decoded
    whole), then each compared replica's divergent batches in windows of offsets (`local.windows`).
    Each window's lost records, with their keys, values and headers, are appended to
    lost_records.parquet as they are found, so the driver holds one window, not the loss."""
    listing, consumed, step, sample = run.listing, run.consumed, run.step, run.sample
    from pyspark.sql import functions as F

    sources = segment_sources(listing)

    def content(rows: pa.Table) -> pa.Table:
        return content_of(rows, sources, CONTENT_SCHEMA, CONTENT_COLUMNS, True)

    records = frame.filter(pc.is_null(frame["error_reason"])).select(COMPARED_COLUMNS)
    totals = _Totals(retained=dict(runs.retained), errors=[frame])
    lost_out = LostRecords(run.out)
    with step(f"decoding {runs.decoded_batches:,} batches that do not line up and writing the lost records"):
        for held, window in _work(records, cut):
            tails, lo, hi = None, None, None
            if window is not None:
                tails = decode_byte_ranges(window.rows, TAIL_SCHEMA, RECORD_COLUMNS, True, with_errors=True)
                lo, hi = window.lo, window.hi
            found = compare_window(held, tails, lo, hi, replicas, content)
            if found.errors is not None:
                totals.errors.append(found.errors)
            totals.add(found.compared)
            lost_out.write(found.lost)
            if len(totals.sample) < sample:
                totals.sample += sample_rows(found.lost, sample - len(totals.sample))
    losses, mismatch_counts, retained = totals.losses, totals.mismatch_counts, totals.retained
    lost_path = lost_out.close()
    with step("finding lost records"):
        for r in replicas:
            key = (r.topic, r.partition, r.broker)
            _confirm(r, losses.get(key), retained.get(key, 0), mismatch_counts.get(key, 0))
            if r.error_count:
                r.reason += f"; {r.error_count} unreadable byte ranges (see errors.parquet)"
    error_table = _local_errors(listing, totals.errors)
    phantom_counts = None
    phantoms = None
    phantom_sample: list[dict[str, Any]] = []
    if consumed is not None:
        with step("checking consumed records"):
            _, references = replica_tables(replicas)
            reference_keys = records.join(references, ["topic", "partition", "broker"], join_type="inner").select(
                ["topic", "partition", "offset", "leader_epoch"]
            )
            spark = resolve(run.spark)
            lost_keys = spark.read.parquet(lost_path).select(
                "topic", "partition", "offset", "leader_epoch", "broker", "kind"
            )
            phantoms = _phantom_reads(
                spark, consumed, replicas, arrow_frame(spark, reference_keys), lost_keys, runs.runs, run.skipped
            )
            phantoms = phantoms.orderBy("topic", "partition", "offset").persist()
            phantom_counts = {
                row.kind: row.n for row in phantoms.groupBy("kind").agg(F.count("*").alias("n")).collect()
            }
            phantom_sample = [row.asDict() for row in phantoms.limit(sample).collect()]
    tables = {
        "partitions": pa.Table.from_pylist(
            [dict(zip(PARTITIONS_ARROW.names, partition_row(r), strict=True)) for r in replicas],
            schema=PARTITIONS_ARROW,
        ),
        "mismatched_records": sort(pa.concat_tables(totals.mismatched), ["topic", "partition", "broker", "offset"]),
        "errors": error_table,
    }
    result = AuditResult(
        replicas=replicas,
        frames={"phantom_reads": phantoms},  # the others are made from `tables` and `files` when asked for
        error_count=error_table.num_rows,
        phantom_counts=phantom_counts,
        lost_sample=totals.sample,
        phantom_sample=phantom_sample,
        provenance=run.provenance,
        tables=tables,
        files={"lost_records": lost_path},
        spark=run.spark,
    )
    lost_out.own(result)
    if run.out is not None:
        with step("writing results"):
            save(result, run.out, html=run.html)
    return result


@dataclass
class _Totals:
    """What the windows of `_audit_local` found, added up."""

    retained: dict[tuple[str, int, int], int]
    errors: list[pa.Table]  # error rows (and `frame`, whose error rows `_local_errors` picks)
    losses: dict[tuple[str, int, int], Loss] = field(default_factory=dict)
    mismatch_counts: dict[tuple[str, int, int], int] = field(default_factory=dict)
    mismatched: list[pa.Table] = field(default_factory=list)
    sample: list[dict[str, Any]] = field(default_factory=list)

    def add(self, found: Compared) -> None:
        for key, loss in found.losses.items():
            self.losses[key] = merge_losses(self.losses.get(key), loss)
        for key, n in found.mismatch_counts.items():
            self.mismatch_counts[key] = self.mismatch_counts.get(key, 0) + n
        for key, n in found.retained.items():
            self.retained[key] = self.retained.get(key, 0) + n
        self.mismatched.append(found.mismatched)


def _work(records: pa.Table, cut: list[Window]) -> list[tuple[pa.Table, Window | None]]:
    """The partitions compared on records (their decoded records, one partition at a time) and the
    windows (records to decode), in (topic, partition, broker, offset) order: lost_records' order."""
    work: list[tuple[tuple[str, int, int, int], pa.Table, Window | None]] = []
    if records.num_rows:
        for key in records.select(["topic", "partition"]).group_by(["topic", "partition"]).aggregate([]).to_pylist():
            mask = pc.and_(pc.equal(records["topic"], key["topic"]), pc.equal(records["partition"], key["partition"]))
            work.append(((key["topic"], key["partition"], -1, 0), records.filter(mask), None))
    empty = records.schema.empty_table()
    work += [((w.topic, w.partition, w.broker, i), empty, w) for i, w in enumerate(cut)]
    work.sort(key=lambda item: item[0])
    return [(held, window) for _, held, window in work] or [(empty, None)]


def _local_errors(listing: Listing, frames: list[pa.Table]) -> pa.Table:
    """`_errors` of records decoded on the driver."""
    schema = pa.schema(
        [("broker", pa.int32()), ("topic", pa.string()), ("partition", pa.int32()), ("path", pa.string()),
         ("byte_position", pa.int64()), ("reason", pa.string())]
    )
    parts = []
    for frame in frames:
        bad = frame.filter(pc.is_valid(frame["error_reason"]))
        columns = ["broker", "topic", "partition", "path", "error_position", "error_reason"]
        parts.append(pa.table([bad[c] for c in columns], schema=schema))
    listed = [
        {"broker": e.broker, "topic": e.topic, "partition": e.partition, "path": e.path, "byte_position": None,
         "reason": e.reason}
        for e in listing.errors
    ]
    parts.append(pa.Table.from_pylist(listed, schema=schema))
    return pa.concat_tables(parts)


def _stats(frame: DataFrame, decoded: Listing) -> list:
    """Per (replica, epoch): records, first and last offset, errors, from the decoded records (the
    partitions compared on headers add their batches' `BatchPlan.stats`)."""
    from pyspark.sql import functions as F

    stats: list = []
    if any(True for _ in decoded.segments):
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
    return stats


def _local_stats(frame: pa.Table) -> list[Stat]:
    """`_stats` of records decoded on the driver."""
    if frame.num_rows == 0:
        return []
    grouped = frame.group_by(["topic", "partition", "broker", "leader_epoch"]).aggregate(
        [("offset", "count"), ("offset", "min"), ("offset", "max"), ("error_reason", "count")]
    )
    return [
        Stat(r["topic"], r["partition"], r["broker"], r["leader_epoch"], r["offset_count"], r["offset_min"],
             r["offset_max"], r["error_reason_count"])
        for r in grouped.to_pylist()
    ]


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


def _confirm(summary: ReplicaSummary, mismatch: Any, retained: int, mismatched: int = 0) -> None:
    """Set the replica's lost range and kind from the record comparison."""
    if summary.kind in ("reference", "recreated"):
        return
    summary.retained_count = retained
    summary.mismatch_count = mismatched
    _classify(summary, mismatch, retained)
    if mismatched:
        note = (
            f"{mismatched} records at offsets and epochs the reference holds differ from its copy "
            "(digest or lengths): a corrupt or forged replica (see mismatched_records.parquet)"
        )
        if summary.kind in ("in_sync", "behind"):
            summary.kind, summary.reason = "mismatched", note
        else:
            summary.reason += "; " + note


def _classify(summary: ReplicaSummary, mismatch: Any, retained: int) -> None:
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
    reference_keys: DataFrame,
    lost: DataFrame,
    runs: Runs | None = None,
    skipped: frozenset[str] = frozenset(),
) -> DataFrame:
    """`reference_keys`: the (offset, epoch) of every reference record of the partitions compared on
    records; `runs`: the reference's batches (base, last, epoch) of those compared on headers, where
    each batch holds one record per offset of its span. Consumed records of the `skipped` topics (in the
    log dirs, not audited) are left out, not called phantoms of an unknown partition."""
    from pyspark.sql import functions as F

    from epochguard.spark.udfs import EpochHistories, batch_epochs

    table = read_consumed(spark, consumed) if isinstance(consumed, str) else consumed
    if dict(table.dtypes).get("leader_epoch") in ("float", "double"):  # pandas writes NaN for a missing epoch
        table = table.withColumn("leader_epoch", F.when(~F.isnan("leader_epoch"), F.col("leader_epoch")))
    table = (
        table.withColumn("topic", F.col("topic").cast("string"))
        .withColumn("partition", F.col("partition").cast("int"))
        .withColumn("offset", F.col("offset").cast("long"))
        .withColumn("leader_epoch", F.col("leader_epoch").cast("int"))
    )
    if skipped:
        table = table.filter(~F.col("topic").isin(sorted(skipped)))
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
    reads = table
    if runs:
        # Held by a reference batch: its epoch at the read's offset (null outside every batch).
        reads = reads.withColumn("run_epoch", batch_epochs(spark, runs)("topic", "partition", "offset"))
        reads = reads.where(
            F.col("run_epoch").isNull()
            | (F.col("leader_epoch").isNotNull() & (F.col("leader_epoch") != F.col("run_epoch")))
        )
    else:
        reads = reads.withColumn("run_epoch", F.lit(None).cast("int"))
    # A read without an epoch (an old client, a legacy batch) can only be matched by its offset.
    t, ref = reads.alias("t"), reference_keys.alias("ref")
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
        .withColumn("reference_epoch_at_offset", F.coalesce("reference_epoch_at_offset", "run_epoch"))
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



def _errors(spark: SparkSession, listing: Listing, frame: DataFrame, found: DataFrame) -> DataFrame:
    """The error rows of the records decoded (`frame`), of the windows' batches (`found`'s) and of
    the listing."""
    from pyspark.sql import functions as F

    columns: list[Any] = [
        "broker",
        "topic",
        "partition",
        "path",
        F.col("error_position").alias("byte_position"),
        F.col("error_reason").alias("reason"),
    ]
    decoded = frame.where(F.col("error_reason").isNotNull()).select(*columns).unionByName(found.select(*columns))
    listed = spark.createDataFrame(
        [(e.broker, e.topic, e.partition, e.path, None, e.reason) for e in listing.errors],
        "broker int, topic string, partition int, path string, byte_position long, reason string",
    )
    return decoded.unionByName(listed)

"""The audit's record-level rules, on Arrow tables: the one implementation both drivers run (issues 22, 36).

Once the header comparison (`epochguard.spark.batches`) has settled every batch that lines up, what
is left to decode is the divergent tails: a few batches per partition, compared a window of offsets
at a time (`windows`). `compare_window` decides which records of a window are lost, aborted,
uncommitted, mismatched or retention: the core decodes the byte ranges (`logs.decode_ranges` and
`logs.decode_chunks`, GIL released) and pyarrow's hash joins line each replica's records up with its
reference's. The driver runs it a window after another and writes the lost records as Parquet with
pyarrow, in the layout Spark writes (a directory with one part file and ``_SUCCESS``: `LostRecords`);
`audit(local_bytes=...)` bounds what the driver decodes at once. Above that, or for remote storage,
`epochguard.spark.auditing`'s distributed path runs the same function in a Spark task per window
(``applyInArrow``), so no rule is written twice.
"""

from __future__ import annotations

import bisect
import itertools
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BooleanType, StructField, StructType

from epochguard.spark.batches import Batch, Divergence, Range
from epochguard.spark.listing import Listing
from epochguard.spark.logs import (
    DEFAULT_MAX_DECOMPRESSED,
    LOCATION,
    Chunk,
    decode_chunks,
    decode_ranges,
    output_schema,
)
from epochguard.spark.result import SPOOL_PREFIX, TEMP_PREFIX, ReplicaSummary, remove_stale

REPLICA = ["topic", "partition", "broker"]
RECORD_KEYS = ["broker", "topic", "partition", "offset"]
LENGTHS = ("key_length", "value_length", "headers_count")
# What the comparison reads of every record: positions, epochs, lengths and the content digest. Keys,
# values and headers are decoded again, from just their batches' bytes, for the lost records alone.
COMPARED_COLUMNS = [
    "broker",
    "topic",
    "partition",
    "segment",
    "offset",
    "leader_epoch",
    "timestamp",
    "timestamp_type",
    "is_control",
    "is_transactional",
    "producer_id",
    "key_length",
    "value_length",
    "headers_count",
    "record_digest",
    "batch_position",
    "batch_size",
]
CONTENT_COLUMNS = ["offset", "key", "value", "headers"]
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
    "uncommitted",  # of a transaction no marker ends in the replica's log (`epochguard recover` leaves it)
]
MISMATCHED_COLUMNS = [
    "topic", "partition", "broker", "offset", "leader_epoch", "reference_broker", "record_digest",
    "reference_digest", *(x for c in LENGTHS for x in (c, f"reference_{c}")),
]
RECORD_COLUMNS = [c for c in COMPARED_COLUMNS if c not in LOCATION.fieldNames()]
# A window's decoded batches: the location, ``txn_only`` (decoded for a transaction's status alone, not
# compared), ``owned`` (this window reports the batch's error row), the compared columns, error columns.
TAIL_SCHEMA = to_arrow_schema(
    output_schema(
        StructType([*LOCATION.fields, StructField("txn_only", BooleanType()), StructField("owned", BooleanType())]),
        True,
        RECORD_COLUMNS,
    )
)
# `content_of`'s output: the replica, the offset and the record's key, value and headers.
CONTENT_SCHEMA = to_arrow_schema(
    output_schema(StructType([LOCATION[c] for c in ("broker", "topic", "partition")]), False, CONTENT_COLUMNS)
)
THREADS = max(1, min(4, os.cpu_count() or 1))
# The divergent batches are compared a window of offsets at a time, each about this many bytes of
# batches (of the replica and of its reference), so the driver's memory does not grow with the loss.
WINDOW_BYTES = 16 << 20
Replica = tuple[str, int, int]


class Loss(NamedTuple):
    """A replica's lost records, as the distributed path's aggregate row names them."""

    n: int
    lo: int
    hi: int
    visible: int | None


def decode_segments(chunks: Sequence[Chunk], schema: pa.Schema, columns: Sequence[str], verify_crc: bool) -> pa.Table:
    """Whole segments (cut into `chunks`) decoded by the core, one thread per core; corrupt batches
    become error rows, as in the distributed path."""
    options = {
        "schema": schema,
        "columns": list(columns),
        "with_errors": True,
        "verify_crc": verify_crc,
        "max_decompressed_size": DEFAULT_MAX_DECOMPRESSED,
    }
    return _threaded(schema, [[c] for c in chunks], lambda group: list(decode_chunks(group, **options)))


def decode_byte_ranges(
    rows: Sequence[dict],
    schema: pa.Schema,
    columns: Sequence[str],
    verify_crc: bool,
    with_errors: bool,
    threads: int = THREADS,
) -> pa.Table:
    """Byte ranges (dicts with ``path, batch_position, batch_size``, the columns to carry and, for a
    file not readable here, its ``content``) decoded by the core: `logs.decode_ranges`, the body of
    Spark's ``mapInArrow`` too, on `threads` threads (1 in a Spark task: Spark runs a task per core)."""
    if not rows:
        return schema.empty_table()
    names = [n for n in rows[0] if n != "content"]
    ranges_schema = pa.schema([*(_range_field(n, schema) for n in names), pa.field("content", pa.binary())])

    def decode(group: list[dict]) -> list[pa.RecordBatch]:
        batch = pa.RecordBatch.from_pylist([dict(r, content=r.get("content")) for r in group], schema=ranges_schema)
        return list(
            decode_ranges(iter([batch]), schema=schema, columns=columns, verify_crc=verify_crc, with_errors=with_errors)
        )

    threads = max(1, threads)
    groups = [list(rows[i :: threads]) for i in range(min(threads, len(rows)))]
    return _threaded(schema, groups, decode)


def _range_field(name: str, schema: pa.Schema) -> pa.Field:
    if name in ("path", "topic"):
        return pa.field(name, pa.string())
    if name in ("batch_position", "batch_size", "segment"):
        return pa.field(name, pa.int64())
    return schema.field(name)


def _threaded(schema: pa.Schema, groups: list, work) -> pa.Table:
    if not groups:
        return schema.empty_table()
    with ThreadPoolExecutor(min(THREADS, len(groups))) as pool:
        batches = [b for done in pool.map(work, groups) for b in done]
    return pa.Table.from_batches(batches, schema=schema)


def divergent_ranges(ranges: Iterable[Range]) -> list[dict]:
    """The header comparison's ranges as `decode_byte_ranges` rows (carrying ``txn_only``)."""
    return [
        {"broker": r.broker, "topic": r.topic, "partition": r.partition, "segment": r.segment, "txn_only": r.txn_only,
         "path": r.path, "batch_position": r.batch_position, "batch_size": r.batch_size}
        for r in ranges
    ]


class Window(NamedTuple):
    """Records of one compared replica at offsets [lo, hi) (None: unbounded), compared against its
    reference's: the batches of both that hold them, as `decode_byte_ranges` rows. A batch across a
    bound is decoded in both windows and its records kept in the one their offsets fall in; its error
    row is ``owned`` by the first window that decodes it."""

    topic: str
    partition: int
    broker: int
    lo: int | None
    hi: int | None
    rows: list[dict]
    size: int  # bytes of batches decoded


def windows(found: Divergence, replicas: Sequence[ReplicaSummary], window_bytes: int) -> list[Window]:
    """The divergent batches of `found` cut into windows of at most `window_bytes` of batches (the
    compared replica's and its reference's over the same offsets; one batch of the replica and
    those are the least a window holds), in (topic, partition, broker, offset) order: the order of
    lost_records. A replica with a transactional batch among them is one window (whether a lost
    record was aborted is decided by a marker anywhere after it in its log)."""
    reference = {(r.topic, r.partition): r.broker for r in replicas if r.kind == "reference"}
    by_replica: dict[Replica, list[Batch]] = {}
    for b in found.batches:
        by_replica.setdefault((b.range.topic, b.range.partition, b.range.broker), []).append(b)
    for batches in by_replica.values():
        batches.sort(key=lambda b: (b.base_offset, b.range.batch_position))
    owned: set[tuple[str, int]] = set()
    out: list[Window] = []
    for topic, partition, broker in sorted(by_replica, key=lambda k: (k[0], k[1], k[2])):
        ref = reference.get((topic, partition))
        if ref is None or ref == broker:
            continue
        mine, theirs = by_replica[(topic, partition, broker)], by_replica.get((topic, partition, ref), [])
        cuts = [0]
        if not any(b.transactional for b in mine):
            # The reference's batches do not overlap: sorted by base offset, their last offsets are too.
            bases = [b.base_offset for b in theirs]
            lasts = [b.last_offset for b in theirs]
            sizes = np.cumsum([0, *(b.range.batch_size for b in theirs)])
            size, seen = 0, 0  # bytes of this window; the reference's batches counted up to `seen`
            for i, b in enumerate(mine):
                first = max(bisect.bisect_left(lasts, b.base_offset), seen)
                end = max(bisect.bisect_right(bases, b.last_offset), first)
                cost = b.range.batch_size + int(sizes[end] - sizes[first])
                if size and size + cost > window_bytes:
                    cuts.append(i)
                    first = bisect.bisect_left(lasts, b.base_offset)  # a batch across the cut counts again
                    size, cost = 0, b.range.batch_size + int(sizes[end] - sizes[first])
                size, seen = size + cost, end
        bounds = [None, *(mine[i].base_offset for i in cuts[1:]), None]
        for lo, hi in itertools.pairwise(bounds):
            chosen = [
                b
                for b in (*mine, *theirs)
                if (lo is None or b.last_offset >= lo) and (hi is None or b.base_offset < hi)
            ]
            rows = []
            for b in chosen:
                where = (b.range.path, b.range.batch_position)
                rows.append((b.range, where not in owned))
                owned.add(where)
            out.append(
                Window(topic, partition, broker, lo, hi, _ranges(rows), sum(b.range.batch_size for b in chosen))
            )
    return out


def _ranges(batches: list[tuple[Range, bool]]) -> list[dict]:
    """Batches as `decode_byte_ranges` rows, adjacent ones of a segment (same role) merged."""
    out: list[dict] = []
    for r, owned in sorted(batches, key=lambda x: (x[0].path, x[0].batch_position)):
        prev = out[-1] if out else None
        if (
            prev is not None
            and prev["path"] == r.path
            and prev["txn_only"] == r.txn_only
            and prev["owned"] == owned
            and prev["batch_position"] + prev["batch_size"] == r.batch_position
        ):
            prev["batch_size"] += r.batch_size
        else:
            row = divergent_ranges([r])[0]
            row["owned"] = owned
            out.append(row)
    return out


def in_window(table: pa.Table, lo: int | None, hi: int | None) -> pa.Table:
    """The records of `table` at offsets [lo, hi), and the error rows ``owned`` by this window."""
    keep = pc.is_valid(table["offset"])
    if lo is not None:
        keep = pc.and_(keep, pc.greater_equal(table["offset"], lo))
    if hi is not None:
        keep = pc.and_(keep, pc.less(table["offset"], hi))
    errors = pc.and_(pc.is_valid(table["error_reason"]), table["owned"])
    return table.filter(pc.or_(pc.fill_null(keep, False), errors)).drop_columns(["owned"])


def merge_losses(a: Loss | None, b: Loss) -> Loss:
    """One replica's `Loss` over two windows."""
    if a is None:
        return b
    visible = None if a.visible is None and b.visible is None else (a.visible or 0) + (b.visible or 0)
    return Loss(a.n + b.n, min(a.lo, b.lo), max(a.hi, b.hi), visible)


Sources = dict[tuple[int, str, int, int], tuple[str, pa.Buffer | None]]  # segment -> (path, its bytes if remote)


def segment_sources(listing: Listing) -> Sources:
    """Every listed segment by (broker, topic, partition, base offset), read from its path."""
    return {(r.broker, r.topic, r.partition, s.base_offset): (s.path, None) for r, s in listing.segments}


def content_of(records: pa.Table, sources: Sources, schema: pa.Schema, columns: Sequence[str],
               verify_crc: bool, threads: int = THREADS) -> pa.Table:
    """Keys, values and headers of `records`: each batch holding one decoded again from its byte
    range alone, in its segment's `sources` entry (a path, or the file's bytes)."""
    if records.num_rows == 0:
        return schema.empty_table()
    where = ["broker", "topic", "partition", "segment", "batch_position", "batch_size"]
    batches = records.select(where).group_by(where, use_threads=False).aggregate([])  # one row per batch
    seen = sorted(
        (tuple(row[c] for c in where) for row in batches.to_pylist()), key=lambda k: (k[1], k[2], k[0], *k[3:])
    )
    rows = []
    for b, t, p, s, pos, size in seen:
        if (b, t, p, s) not in sources:
            continue
        path, content = sources[(b, t, p, s)]
        row = {"broker": b, "topic": t, "partition": p, "path": path, "batch_position": pos, "batch_size": size}
        if content is not None:  # a remote file's bytes: only the batch's are copied
            row |= {"batch_position": 0, "content": content.slice(pos, size).to_pybytes()}
        rows.append(row)
    return decode_byte_ranges(rows, schema, columns, verify_crc, with_errors=False, threads=threads)


# --- the comparison ------------------------------------------------------------------------------


@dataclass
class Compared:
    """What `compare` found: the rows and per-replica counts the distributed path collects."""

    lost: pa.Table  # held records the reference lacks, with ``kind``
    mismatched: pa.Table
    losses: dict[Replica, Loss]
    mismatch_counts: dict[Replica, int]
    retained: dict[Replica, int]


def replica_tables(replicas: Sequence[ReplicaSummary]) -> tuple[pa.Table, pa.Table]:
    """The compared replicas with their reference (``pairs``), and the references."""
    held = [r for r in replicas if r.kind not in ("reference", "recreated")]
    pairs = pa.table(
        {
            "topic": pa.array([r.topic for r in held], pa.string()),
            "partition": pa.array([r.partition for r in held], pa.int32()),
            "broker": pa.array([r.broker for r in held], pa.int32()),
            "reference_broker": pa.array([r.reference_broker for r in held], pa.int32()),
            "reference_log_start_offset": pa.array([r.reference_log_start_offset for r in held], pa.int64()),
            "high_watermark": pa.array([r.high_watermark for r in held], pa.int64()),
        }
    )
    refs = [r for r in replicas if r.kind == "reference"]
    references = pa.table(
        {
            "topic": pa.array([r.topic for r in refs], pa.string()),
            "partition": pa.array([r.partition for r in refs], pa.int32()),
            "broker": pa.array([r.broker for r in refs], pa.int32()),
        }
    )
    return pairs, references


def reference_records(records: pa.Table, references: pa.Table) -> pa.Table:
    """The references' records: (offset, epoch), digest and lengths, named ``reference_*``."""
    ref = records.join(references, REPLICA, join_type="inner")
    columns = {c: ref[c] for c in ("topic", "partition", "offset", "leader_epoch")}
    columns["reference_digest"] = ref["record_digest"]
    columns |= {f"reference_{c}": ref[c] for c in LENGTHS}
    return pa.table(columns)


def compare(
    records: pa.Table,
    txn_records: pa.Table,
    replicas: Sequence[ReplicaSummary],
    retained: dict[Replica, int],
    marker_types,
) -> Compared:
    """The record-level rules (`audit.audit`'s "finding lost records"): a held record at or past the
    reference's log start with no reference record at its (offset, epoch) is lost (or ``aborted``),
    one with another digest or other lengths is mismatched; one below the reference's log start is
    retention. `marker_types(markers)` gives the control records' (keys, ``marker``) type."""
    pairs, references = replica_tables(replicas)
    reference = reference_records(records, references)
    held = records.join(pairs, REPLICA, join_type="inner")
    retained = dict(retained)
    below = held.filter(pc.less(held["offset"], held["reference_log_start_offset"]))
    for row in below.group_by(REPLICA).aggregate([("offset", "count")]).to_pylist():
        key = (row["topic"], row["partition"], row["broker"])
        retained[key] = retained.get(key, 0) + row["offset_count"]
    compared = held.filter(pc.greater_equal(held["offset"], held["reference_log_start_offset"])).join(
        reference, ["topic", "partition", "offset", "leader_epoch"], join_type="left outer"
    )
    held_txn = held if txn_records is records else txn_records.join(pairs, REPLICA, join_type="inner")
    missing = compared.filter(pc.is_null(compared["reference_digest"]))
    lost = with_transaction_kind(held_txn, missing, marker_types)
    differs = pc.not_equal(compared["record_digest"], compared["reference_digest"])
    for c in LENGTHS:
        differs = pc.or_(differs, pc.invert(_equal_null_safe(compared[c], compared[f"reference_{c}"])))
    mismatched = compared.filter(pc.and_(pc.is_valid(compared["reference_digest"]), differs)).select(
        MISMATCHED_COLUMNS
    )
    lost_only = lost.filter(pc.equal(lost["kind"], "lost"))
    visible = pc.cast(pc.less(lost_only["offset"], lost_only["high_watermark"]), pa.int64())
    grouped = (
        lost_only.select([*REPLICA, "offset"])
        .append_column("visible", visible)
        .group_by(REPLICA)
        .aggregate([("offset", "count"), ("offset", "min"), ("offset", "max"), ("visible", "sum")])
    )
    losses = {
        (r["topic"], r["partition"], r["broker"]): Loss(r["offset_count"], r["offset_min"], r["offset_max"],
                                                        r["visible_sum"])
        for r in grouped.to_pylist()
    }
    counts = mismatched.group_by(REPLICA).aggregate([("offset", "count")]).to_pylist()
    mismatch_counts = {(r["topic"], r["partition"], r["broker"]): r["offset_count"] for r in counts}
    return Compared(lost, sort(mismatched, ["topic", "partition", "broker", "offset"]), losses, mismatch_counts,
                    retained)


def with_tails(held: pa.Table, tails: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The records to compare and those whose transactions are read: `held` and the decoded tails
    (those decoded for a transaction's status alone are not compared)."""
    if not tails.num_rows:
        return held, held
    compared = pa.concat_tables([held, tails.filter(pc.invert(tails["txn_only"])).select(COMPARED_COLUMNS)])
    if not pc.any(tails["txn_only"]).as_py():
        return compared, compared
    return compared, pa.concat_tables([held, tails.select(COMPARED_COLUMNS)])


class Found(NamedTuple):
    """What one unit of the comparison found (`compare_window`)."""

    compared: Compared
    lost: pa.Table  # LOST_COLUMNS, keys, values and headers decoded, in lost_records' order
    errors: pa.Table | None  # the error rows of the batches the window decoded and owns


def compare_window(
    held: pa.Table,
    tails: pa.Table | None,
    lo: int | None,
    hi: int | None,
    replicas: Sequence[ReplicaSummary],
    content: Callable[[pa.Table], pa.Table],
) -> Found:
    """One unit of the record-level comparison, the one implementation both drivers of the audit run:
    the driver on its own (`auditing._audit_local`, a window after another) and Spark's tasks
    (`auditing._audit_distributed`, a task per window). `held`: records decoded already (a partition
    compared on records, COMPARED_COLUMNS); `tails`: a window's decoded batches (TAIL_SCHEMA), of
    which the records at offsets [lo, hi) are compared; `content(rows)` decodes the keys, values and
    headers of `rows` (CONTENT_SCHEMA) from their batches' bytes."""
    errors = None
    records = txn_records = held
    if tails is not None:
        tails = in_window(tails, lo, hi)
        errors = tails.filter(pc.is_valid(tails["error_reason"]))
        records, txn_records = with_tails(held, tails.filter(pc.is_null(tails["error_reason"])))

    def marker_types(markers: pa.Table) -> pa.Table:
        found = content(markers)
        return found.select(RECORD_KEYS).append_column("marker", marker_type(found["key"]))

    found = compare(records, txn_records, replicas, {}, marker_types)
    lost = with_content(found.lost, content(found.lost), LOST_COLUMNS)
    return Found(found, sort(lost, ["topic", "partition", "broker", "offset"]), errors)


def _equal_null_safe(a: pa.ChunkedArray, b: pa.ChunkedArray) -> pa.ChunkedArray:
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    return pc.or_(both_null, pc.fill_null(pc.equal(a, b), False))


def with_transaction_kind(held: pa.Table, lost: pa.Table, marker_types) -> pa.Table:
    """`lost` with ``kind``: "aborted" for a record whose transaction ends in an ABORT marker later in
    the same replica's log (and that marker), else "lost"; and ``uncommitted``: a record of a transaction
    no marker ends in that log (`audit._with_transaction_kind`'s rule)."""
    transactional = held.filter(pc.and_(held["is_transactional"], pc.greater_equal(held["producer_id"], 0)))
    if not (transactional.num_rows and lost.num_rows):
        return lost.append_column("kind", pa.array(["lost"] * lost.num_rows, pa.string())).append_column(
            "uncommitted", pa.array([False] * lost.num_rows, pa.bool_()))
    markers = marker_types(transactional.filter(transactional["is_control"]))
    status = transactional.select([*RECORD_KEYS, "producer_id"]).join(markers, RECORD_KEYS, join_type="left outer")
    frame = status.to_pandas().sort_values(["broker", "topic", "partition", "producer_id", "offset"], kind="stable")
    # Each record's transaction ends at the first marker at or after it, of the same producer.
    ends_with = frame.groupby(["broker", "topic", "partition", "producer_id"])["marker"].bfill()
    status = pa.table(
        {
            "broker": pa.array(frame["broker"], pa.int32()),
            "topic": pa.array(frame["topic"], pa.string()),
            "partition": pa.array(frame["partition"], pa.int32()),
            "offset": pa.array(frame["offset"], pa.int64()),
            "aborted": pa.array((ends_with == 0).to_numpy(), pa.bool_()),
            "uncommitted": pa.array(ends_with.isna().to_numpy(), pa.bool_()),
        }
    )
    # A left join, as the distributed path's: a record listed twice in `status` (a repeated offset)
    # gets one row per match.
    indexed = lost.select(RECORD_KEYS).append_column("lost_row", pa.array(np.arange(lost.num_rows), pa.int64()))
    joined = indexed.join(status, RECORD_KEYS, join_type="left outer")
    aborted = pc.fill_null(joined["aborted"], False)
    kind = pc.if_else(aborted, "aborted", "lost")
    uncommitted = pc.fill_null(joined["uncommitted"], False)
    return lost.take(joined["lost_row"]).append_column("kind", kind.cast(pa.string())).append_column(
        "uncommitted", uncommitted)


def marker_type(keys: pa.ChunkedArray) -> pa.Array:
    """A control record's type from its key (version int16, type int16): 0 = ABORT, 1 = COMMIT."""
    out = []
    for key in keys.to_pylist():
        part = key[2:4] if key is not None else b""
        out.append(int.from_bytes(part, "big") if part else None)
    return pa.array(out, pa.int32())


def with_content(lost: pa.Table, content: pa.Table, columns: Sequence[str]) -> pa.Table:
    """`lost` left-joined with `content` on (broker, topic, partition, offset), `columns` kept
    (pyarrow's joins carry no nested column: headers are taken by row number)."""
    indexed_lost = lost.select(RECORD_KEYS).append_column("lost_row", pa.array(np.arange(lost.num_rows), pa.int64()))
    numbers = pa.array(np.arange(content.num_rows), pa.int64())
    indexed = content.select(RECORD_KEYS).append_column("content_row", numbers)
    joined = indexed_lost.join(indexed, RECORD_KEYS, join_type="left outer")
    rows = joined["lost_row"]
    take = joined["content_row"]
    out = {}
    for c in columns:
        out[c] = content[c].take(take) if c in content.column_names and c not in RECORD_KEYS else lost[c].take(rows)
    return pa.table(out)


def sort(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    return table.sort_by([(k, "ascending") for k in keys]) if table.num_rows else table


# --- outputs -------------------------------------------------------------------------------------

LOST_FILE = "part-00000-epochguard.snappy.parquet"


class LostRecords:
    """lost_records.parquet written as the windows find them: one row group per window, in Spark's
    layout (a directory with one part file and ``_SUCCESS``). It is written under `out` (a local
    path) beside where `AuditResult.save` renames it to, else in a temporary directory that lives as
    long as the result that reads it. Both are named by the process id: an audit killed before it
    finished leaves its spool behind, and the next audit there removes it (`result.remove_stale`)."""

    def __init__(self, out: str | None) -> None:
        from epochguard.spark.listing import is_local

        if out is not None and is_local(out):
            os.makedirs(out, exist_ok=True)
            remove_stale(out)  # the spool of an audit killed before it renamed its table into place
            self.spool = tempfile.mkdtemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}.", dir=out)
            self.temporary = False
        else:
            remove_stale(tempfile.gettempdir(), temp=True)
            self.spool = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}.")
            self.temporary = True
        self.path = os.path.join(self.spool, "lost_records.parquet")
        os.makedirs(self.path)
        self.writer: pq.ParquetWriter | None = None
        self.windows = 0
        self.halt_after = int(os.environ.get("EPOCHGUARD_AUDIT_HALT_AFTER") or 0)  # tests only

    def write(self, table: pa.Table) -> None:
        if self.writer is None:
            self.writer = pq.ParquetWriter(os.path.join(self.path, LOST_FILE), table.schema, compression="snappy")
        elif table.num_rows == 0:
            return
        self.writer.write_table(table.cast(self.writer.schema))
        self.windows += 1
        if self.windows == self.halt_after:
            _halt(self.windows)

    def close(self) -> str:
        """The finished table's directory."""
        if self.writer is not None:
            self.writer.close()
        open(os.path.join(self.path, "_SUCCESS"), "wb").close()
        return self.path

    def own(self, result: object) -> None:
        """Remove the spool when `result` is gone (a saved table has been renamed out of it)."""
        weakref.finalize(result, shutil.rmtree, self.spool, True)



def _halt(windows: int) -> None:
    """EPOCHGUARD_AUDIT_HALT_AFTER=N (tests only: tests/spark/test_audit_spool.py): after the N-th
    window's lost records are written, say so and stand still until killed, as an audit killed
    mid-write would be."""
    import sys
    import time

    print(f"halted by EPOCHGUARD_AUDIT_HALT_AFTER after {windows} windows", file=sys.stderr, flush=True)
    while True:
        time.sleep(60)


def rows(table: pa.Table, limit: int) -> list[dict]:
    """The first `limit` rows, as the report's samples."""
    return table.slice(0, limit).to_pylist()

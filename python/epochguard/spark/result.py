"""What an audit found, as data: the per-replica summaries, the result tables as Spark DataFrames,
the counts and where the inputs came from. `epochguard.spark.auditing` builds it; `save` writes the
tables as Parquet. The result knows no presentation: `epochguard.spark.report` renders it (terminal
summary, report.html) and `report.save` writes both the tables and the page."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from epochguard.spark.listing import is_local

log = logging.getLogger("epochguard.spark.result")

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from epochguard.spark.session import LazySession

LOSS_KINDS = ("truncated", "rewritten")
REPLICA_KINDS = ("reference", "in_sync", "behind", "retention", "recreated", "diverged", "mismatched")
PHANTOM_KINDS = (
    "truncated", "rewritten", "retention", "beyond_log_end", "compacted", "recreated", "aborted", "unknown_partition"
)


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
    # records at the reference's (offset, epoch) whose digest or lengths differ: a corrupt or forged copy
    mismatch_count: int = 0
    epochs: list[tuple[int, int]] = field(default_factory=list)


PARTITIONS_SCHEMA = (
    "topic string, partition int, reference_broker int, reference_latest_epoch int, reference_log_end_offset long, "
    "broker int, latest_epoch int, log_end_offset long, divergence_offset long, lost_count long, "
    "lost_first_offset long, lost_last_offset long, kind string, reason string, log_start_offset long, "
    "reference_log_start_offset long, record_count long, retained_count long, error_count long, "
    "epochs_confirmed boolean, "
    "epoch_source string, high_watermark long, lost_visible_count long, mismatch_count long"
)


def partition_row(r: ReplicaSummary) -> tuple:
    return tuple(getattr(r, name.split()[0]) for name in PARTITIONS_SCHEMA.split(", "))


@dataclass
class AuditResult:
    """The audit's findings. The DataFrames are lazy over cached data: ``partitions``,
    ``lost_records`` (with keys, values and headers, re-decoded from just the batches that hold
    them), ``mismatched_records``, ``errors`` and ``phantom_reads`` (None without a consumed table).
    When the driver holds a table (the audit's local path: `tables`), its DataFrame is made from it
    on first use only, and `save` writes it with pyarrow: an audit that is only saved runs no Spark
    job. Samples of the lost records and phantom reads are collected for the report; `provenance`
    names the inputs (log dirs, version, time, Spark master)."""

    replicas: list[ReplicaSummary]
    frames: dict[str, DataFrame | None]  # by table name; a name missing here is made from `tables`
    error_count: int
    phantom_counts: dict[str, int] | None  # by kind; None without a consumed table
    lost_sample: list[dict[str, Any]]  # the first lost records, for the report (all are in Parquet)
    phantom_sample: list[dict[str, Any]]  # likewise
    provenance: dict[str, Any]
    out: str | None = None  # where `save` last wrote
    # The same tables as Arrow when the driver holds them (the audit's local path), and the session
    # that makes their DataFrames.
    tables: dict[str, pa.Table] = field(default_factory=dict)
    spark: SparkSession | LazySession | None = None
    # Tables the driver has written as Parquet (Spark's layout: a directory) rather than held: a
    # large lost_records, streamed as found.
    files: dict[str, str] = field(default_factory=dict)

    def frame(self, name: str) -> DataFrame | None:
        """The table `name` as a DataFrame (made from the driver's Arrow table on first use; a
        `LazySession` is started then)."""
        if name not in self.frames:
            from epochguard.spark.session import resolve

            assert self.spark is not None, "a driver-held table needs the session to become a DataFrame"
            if name in self.files:
                self.frames[name] = resolve(self.spark).read.parquet(self.files[name])
            else:
                self.frames[name] = arrow_frame(resolve(self.spark), self.tables[name])
        return self.frames[name]

    def arrow(self, name: str) -> pa.Table | None:
        """The table `name` as Arrow when the driver holds or wrote it (the local path), read without
        Spark; None when only Spark has it (`frame` then)."""
        if name in self.tables:
            return self.tables[name]
        if name in self.files:
            import pyarrow.parquet as pq

            return pq.read_table(self.files[name])
        return None

    @property
    def partitions(self) -> DataFrame:
        return _present(self.frame("partitions"))

    @property
    def lost_records(self) -> DataFrame:
        return _present(self.frame("lost_records"))

    @property
    def mismatched_records(self) -> DataFrame:
        return _present(self.frame("mismatched_records"))

    @property
    def errors(self) -> DataFrame:
        return _present(self.frame("errors"))

    @property
    def phantom_reads(self) -> DataFrame | None:
        return self.frames.get("phantom_reads")

    @property
    def diverged(self) -> list[ReplicaSummary]:
        return [r for r in self.replicas if r.kind == "diverged"]

    @property
    def lost_count(self) -> int:
        return sum(r.lost_count for r in self.replicas)

    @property
    def mismatch_count(self) -> int:
        return sum(r.mismatch_count for r in self.replicas)

    @property
    def phantom_loss_count(self) -> int:
        return sum(n for kind, n in (self.phantom_counts or {}).items() if kind in LOSS_KINDS)

    @property
    def exit_code(self) -> int:
        """0: clean; 1: a divergence, a mismatched copy, a phantom read of a lost record, or an
        unreadable input."""
        found = self.diverged or self.mismatch_count or self.phantom_loss_count or self.error_count
        return 1 if found else 0

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary (what ``--json`` prints)."""
        return {
            "out": self.out,
            "exit_code": self.exit_code,
            "partitions": len({(r.topic, r.partition) for r in self.replicas}),
            "diverged_replicas": len(self.diverged),
            "lost_records": self.lost_count,
            "mismatched_records": self.mismatch_count,
            "errors": self.error_count,
            "phantom_reads": self.phantom_counts,
            "provenance": self.provenance,
            "replicas": [
                {k: v for k, v in vars(r).items() if k != "epochs"} | {"epochs": r.epochs} for r in self.replicas
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.summary(), indent=2, default=str)

    def save(self, out: str) -> AuditResult:
        """Write partitions, lost_records, mismatched_records, errors and (with a consumed table)
        phantom_reads as Parquet under `out` (a local path or a Hadoop URI). Returns self, with `out`
        set. `epochguard.spark.report.save` also writes report.html beside them."""
        local = is_local(out)
        if local:
            os.makedirs(out, exist_ok=True)
            remove_stale(out)
            stale = os.path.join(out, "phantom_reads.parquet")
            if os.path.isdir(stale):  # from an earlier run with a consumed table: it would no longer match
                shutil.rmtree(stale)
        names = ["partitions", "lost_records", "mismatched_records", "errors"]
        if self.phantom_reads is not None:
            names.append("phantom_reads")
        for name in names:
            path = _join(out, f"{name}.parquet")
            table = self.tables.get(name)
            if local and table is not None:  # held by the driver: no Spark job to write it
                write_parquet(table, path)
                continue
            if local and name in self.files:  # written by the driver already: renamed or copied into place
                spool = os.path.dirname(os.path.abspath(self.files[name]))
                self.files[name] = place_parquet(self.files[name], path)
                self.frames.pop(name, None)
                if os.path.basename(spool).startswith(SPOOL_PREFIX):  # renamed out of it: nothing left there
                    shutil.rmtree(spool, ignore_errors=True)
                continue
            frame = _present(self.frame(name))
            if name in ("partitions", "errors"):
                frame = frame.coalesce(1)
            frame.write.mode("overwrite").parquet(path)
        self.out = out
        return self


def _present(frame: DataFrame | None) -> DataFrame:
    assert frame is not None
    return frame


def arrow_frame(spark: SparkSession, table: pa.Table) -> DataFrame:
    """A DataFrame of a driver-held table (Spark refuses an Arrow table without a chunk)."""
    if table.num_rows == 0:
        from pyspark.sql.pandas.types import from_arrow_schema

        return spark.createDataFrame([], from_arrow_schema(table.schema))
    return spark.createDataFrame(table)


def partitions_arrow_schema() -> pa.Schema:
    """PARTITIONS_SCHEMA as Arrow, without a session."""
    import pyarrow as pa

    types = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "boolean": pa.bool_()}
    return pa.schema([(name, types[kind]) for name, kind in (f.split() for f in PARTITIONS_SCHEMA.split(", "))])


def write_parquet(table: pa.Table, path: str) -> None:
    """`table` as Spark lays out a DataFrame written as Parquet: a directory holding one part file and
    ``_SUCCESS``. An earlier one at `path` is replaced whole, as ``mode("overwrite")`` does, and the
    new one appears at once: written beside it, then renamed."""
    import pyarrow.parquet as pq

    tmp = f"{path}{TMP_MARK}{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    pq.write_table(table, os.path.join(tmp, "part-00000-epochguard.snappy.parquet"), compression="snappy")
    open(os.path.join(tmp, "_SUCCESS"), "wb").close()
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.replace(tmp, path)


def place_parquet(source: str, path: str) -> str:
    """A Parquet directory written by the driver at `path`, replacing an earlier one whole, as
    `write_parquet` does: renamed from a spool under the same output directory (`local.LostRecords`),
    else copied beside `path` first. Returns `path`."""
    source, path = os.path.abspath(source), os.path.abspath(path)
    if source == path:
        return path
    if os.path.dirname(os.path.dirname(source)) == os.path.dirname(path):
        tmp = source
    else:
        tmp = f"{path}{TMP_MARK}{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp)
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.replace(tmp, path)
    return path


# What an audit writes into its output directory before renaming it into place, named by its process
# id: a table being written (``lost_records.parquet.tmp-PID``) and the lost records' spool
# (``.lost_records.PID.XXXX``, `local.LostRecords`). An audit killed mid-write leaves them behind.
TMP_MARK = ".tmp-"
SPOOL_PREFIX = ".lost_records."
TEMP_PREFIX = "epochguard-audit-"  # the spool of an audit not saved to a local directory, in the temp dir
_OWNED = re.compile(rf"^(?:{re.escape(SPOOL_PREFIX)}(\d+)\..*|.*\.parquet{re.escape(TMP_MARK)}(\d+))$")
_TEMP = re.compile(rf"^{TEMP_PREFIX}(\d+)\..*$")  # in the temp dir, only the audits' own spools


def remove_stale(out: str, temp: bool = False) -> list[str]:
    """Remove what audits killed mid-write left in the directory `out` (their spools and half-written
    tables, `_OWNED`; with `temp`, `out` is the temp dir and only their spools there): those of a
    process no longer running (a live one may be another audit writing into the same directory). Each
    removal is logged; returns the paths removed."""
    removed: list[str] = []
    try:
        names = os.listdir(out)
    except OSError:
        return removed
    for name in sorted(names):
        found = (_TEMP if temp else _OWNED).match(name)
        if found is None:
            continue
        pid = int(next(g for g in found.groups() if g))
        if _running(pid):  # this process, or another audit writing here now
            continue
        path = os.path.join(out, name)
        shutil.rmtree(path, ignore_errors=True)
        log.warning("removed %s, left by an audit (process %d) that did not finish", path, pid)
        removed.append(path)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _join(out: str, name: str) -> str:
    return os.path.join(out, name) if is_local(out) else out.rstrip("/") + "/" + name

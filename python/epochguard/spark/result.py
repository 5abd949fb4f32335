"""What an audit found, as data: the per-replica summaries, the result tables as Spark DataFrames,
the counts and where the inputs came from. `epochguard.spark.audit` builds it; `save` writes the
tables as Parquet. The result knows no presentation: `epochguard.spark.report` renders it (terminal
summary, report.html) and `report.save` writes both the tables and the page."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from epochguard.spark.listing import is_local

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

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
    """The audit's findings. The DataFrames are lazy over cached data: ``lost_records`` (with keys,
    values and headers, re-decoded from just the batches that hold them), ``mismatched_records``,
    ``errors`` and ``phantom_reads`` (None without a consumed table). Samples of the first two are
    collected for the report; `provenance` names the inputs (log dirs, version, time, Spark master)."""

    replicas: list[ReplicaSummary]
    partitions: DataFrame
    lost_records: DataFrame
    mismatched_records: DataFrame
    errors: DataFrame
    phantom_reads: DataFrame | None
    error_count: int
    phantom_counts: dict[str, int] | None  # by kind; None without a consumed table
    lost_sample: list[dict[str, Any]]  # the first lost records, for the report (all are in Parquet)
    phantom_sample: list[dict[str, Any]]  # likewise
    provenance: dict[str, Any]
    out: str | None = None  # where `save` last wrote
    # The same tables as Arrow when the driver holds them (the audit's local path): saved by pyarrow.
    tables: dict[str, pa.Table] = field(default_factory=dict)

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
            stale = os.path.join(out, "phantom_reads.parquet")
            if os.path.isdir(stale):  # from an earlier run with a consumed table: it would no longer match
                shutil.rmtree(stale)
        frames = {
            "partitions": self.partitions.coalesce(1),
            "lost_records": self.lost_records,
            "mismatched_records": self.mismatched_records,
            "errors": self.errors.coalesce(1),
        }
        if self.phantom_reads is not None:
            frames["phantom_reads"] = self.phantom_reads
        for name, frame in frames.items():
            path = _join(out, f"{name}.parquet")
            table = self.tables.get(name)
            if local and table is not None:  # held by the driver: no Spark job to write it
                write_parquet(table, path)
            else:
                frame.write.mode("overwrite").parquet(path)
        self.out = out
        return self


def write_parquet(table: pa.Table, path: str) -> None:
    """`table` as Spark lays out a DataFrame written as Parquet: a directory holding one part file and
    ``_SUCCESS``. An earlier one at `path` is replaced whole, as ``mode("overwrite")`` does, and the
    new one appears at once: written beside it, then renamed."""
    import pyarrow.parquet as pq

    tmp = f"{path}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    pq.write_table(table, os.path.join(tmp, "part-00000-epochguard.snappy.parquet"), compression="snappy")
    open(os.path.join(tmp, "_SUCCESS"), "wb").close()
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.replace(tmp, path)


def _join(out: str, name: str) -> str:
    return os.path.join(out, name) if is_local(out) else out.rstrip("/") + "/" + name

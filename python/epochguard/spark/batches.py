"""The audit's comparison on batch headers: what the record-level comparison finds, at the cost of
reading headers and decoding only the batches that do not line up.

A follower copies its leader's batches byte for byte (Kafka's ``ReplicaFetcherThread`` appends the
fetched ``MemoryRecords`` unchanged; ``LogValidator`` runs on the leader only), so two replicas
holding the same (offset, leader epoch) hold the same batch: same base and last offset, same epoch,
same size and the same CRC-32C, which covers every record of the batch. Per partition the replicas'
batches are lined up by that key against the reference's: a batch found there holds records the
reference holds, with the same content, and is not decoded. The others (the divergent tail of a
replica, a forged or corrupt copy: equal offsets and epoch under another CRC) are decoded, with the
reference's batches over the same offsets, and go through the record-level rules unchanged.

A partition is compared on records, as before, when its headers cannot stand for its records: a
legacy magic 0/1 wrapper (its inner offsets and count are known only once decompressed), a batch
whose record count is not its offset span (compaction removed records: each replica's cleaner
rewrites its own batches), offsets that do not increase, or a segment the header pass could not
walk to its end (a corrupt batch, a CRC mismatch, an incomplete tail: the decoder names them in
errors.parquet as it always did). The header pass checks CRCs only with `verify_crc`; without it the
audit checks those of the batches it is about to decode (`verify_ranges`) and sends a
partition with a bad one here, so what is decoded is always checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from epochguard import _core
from epochguard.errors import EpochGuardError
from epochguard.spark.headers import HeaderScan, SegmentTrouble
from epochguard.spark.listing import Listing, is_local
from epochguard.spark.result import ReplicaSummary

# Two replicas' batches are the same batch when these agree (base offset and epoch lie outside the
# CRC, so they are compared too; the size pins the CRC to the same span of bytes).
KEY = ["base_offset", "last_offset", "partition_leader_epoch", "crc", "batch_size"]
REPLICA = ["topic", "partition", "broker"]
Partition = tuple[str, int]


class Stat(NamedTuple):
    """One (replica, epoch) group, with the fields the record-level pass aggregates."""

    topic: str
    partition: int
    broker: int
    leader_epoch: int | None
    n: int
    lo: int | None
    hi: int | None
    errors: int


class Range(NamedTuple):
    """Bytes of a segment to decode: whole batches, contiguous."""

    broker: int
    topic: str
    partition: int
    segment: int
    path: str
    batch_position: int
    batch_size: int
    txn_only: bool  # decoded only for the transaction status of a lost record, not compared


@dataclass
class BatchPlan:
    """Which partitions are compared on headers, and their batches."""

    table: pa.Table  # the batches of the partitions compared on headers
    on_records: dict[Partition, str] = field(default_factory=dict)  # partition -> why records are needed

    def records_listing(self, listing: Listing) -> Listing:
        """The part of `listing` to decode record by record (its errors stay with the full listing)."""
        return Listing(replicas=[r for r in listing.replicas if (r.topic, r.partition) in self.on_records])

    def stats(self) -> list[Stat]:
        """Per (replica, epoch): record count, first and last offset, as the record-level pass
        counts them (exact: every batch here holds one record per offset of its span)."""
        if self.table.num_rows == 0:
            return []
        grouped = self.table.group_by([*REPLICA, "partition_leader_epoch"]).aggregate(
            [("records_count", "sum"), ("base_offset", "min"), ("last_offset", "max")]
        )
        return [
            Stat(r["topic"], r["partition"], r["broker"], r["partition_leader_epoch"], r["records_count_sum"],
                 r["base_offset_min"], r["last_offset_max"], 0)
            for r in grouped.to_pylist()
        ]


def plan(scan: HeaderScan) -> BatchPlan:
    """Split the partitions of `scan` into those compared on headers and those on records."""
    table = scan.table
    on_records: dict[Partition, str] = {}
    for t in scan.troubles:
        on_records.setdefault((t.topic, t.partition), f"broker {t.broker}: {t.reason}")
    if table.num_rows:
        span = pc.add(pc.subtract(table["last_offset"], table["base_offset"]), 1)
        legacy = pc.less(table["magic"], 2)
        compacted = pc.not_equal(pc.cast(table["records_count"], pa.int64()), span)
        for why, mask in (("legacy magic 0/1 batches", legacy), ("compacted batches", compacted)):
            for row in table.filter(mask).select(REPLICA).to_pylist():
                on_records.setdefault((row["topic"], row["partition"]), why)
        table = table.sort_by([(c, "ascending") for c in (*REPLICA, "segment", "batch_position")])
        same = _same_replica_as_previous(table)
        base = table["base_offset"].to_numpy()
        last = table["last_offset"].to_numpy()
        backwards = np.flatnonzero(same & (base[1:] <= last[:-1])) + 1
        for row in table.take(pa.array(backwards, pa.int64())).select(REPLICA).to_pylist():
            on_records.setdefault((row["topic"], row["partition"]), "offsets that do not increase")
    if on_records:
        partitions = pa.array([p for _, p in on_records], pa.int32())
        keys = pa.table({"topic": pa.array([t for t, _ in on_records], pa.string()), "partition": partitions})
        table = table.join(keys, ["topic", "partition"], join_type="left anti")
    return BatchPlan(table, on_records)


def _same_replica_as_previous(table: pa.Table) -> np.ndarray:
    """For rows 1..n-1 of a table sorted by replica: whether the row is of the previous row's replica."""
    same = np.ones(max(0, table.num_rows - 1), dtype=bool)
    for c in REPLICA:
        values = table[c].to_numpy(zero_copy_only=False)
        same &= values[1:] == values[:-1]
    return same


class Batch(NamedTuple):
    """One batch to decode, with the offsets it spans (what the driver cuts into windows)."""

    range: Range  # the batch alone
    base_offset: int
    last_offset: int
    transactional: bool


@dataclass
class Divergence:
    """What the header comparison leaves to the records."""

    ranges: list[Range]
    retained: dict[tuple[str, int, int], int]  # records below the reference's log start, in batches it holds too
    # The reference's batches per partition compared on headers: sorted (base, last, epoch) arrays.
    runs: dict[Partition, tuple[np.ndarray, np.ndarray, np.ndarray]]
    decoded_batches: int = 0
    batches: list[Batch] = field(default_factory=list)  # `ranges` batch by batch, before `_merge`


def divergence(batch_plan: BatchPlan, replicas: Sequence[ReplicaSummary]) -> Divergence:
    """Line each compared replica's batches up with its reference's; the batches to decode are
    the replica's batches the reference does not hold, the reference's batches over the same
    offsets, and the replica's transactional batches from its first unmatched one on (a lost
    record's transaction ends in a marker after it)."""
    table = batch_plan.table
    on_headers = [r for r in replicas if (r.topic, r.partition) not in batch_plan.on_records]
    references = [r for r in on_headers if r.kind == "reference"]
    compared = [r for r in on_headers if r.kind not in ("reference", "recreated")]
    ref_table = table.join(_replica_table(references, False), REPLICA, join_type="inner")
    runs = _runs(ref_table)
    if not compared:
        return Divergence([], {}, runs)
    held = table.join(_replica_table(compared, True), REPLICA, join_type="inner")
    reference_keys = ref_table.select(["topic", "partition", *KEY])
    reference_keys = reference_keys.append_column("reference_broker", ref_table["broker"])
    keys = ["topic", "partition", "reference_broker", *KEY]
    matched = held.join(reference_keys, keys, join_type="left semi")
    unmatched = held.join(reference_keys, keys, join_type="left anti")
    retained = _retained(matched)
    chosen: dict[tuple[Any, ...], bool] = {}  # batch -> txn_only
    extent: dict[tuple[Any, ...], tuple[int, int, bool]] = {}  # batch -> base, last offset, transactional
    where = ["broker", "topic", "partition", "segment", "path", "batch_position", "batch_size"]
    offsets = ["base_offset", "last_offset", "is_transactional"]

    def batch_of(row: dict[str, Any]) -> tuple[Any, ...]:
        batch = tuple(row[c] for c in where)
        extent[batch] = (row["base_offset"], row["last_offset"], row["is_transactional"])
        return batch

    for row in unmatched.select([*where, *offsets]).to_pylist():
        chosen[batch_of(row)] = False
    # The reference's batches over the unmatched offsets of each partition.
    by_partition: dict[Partition, list[tuple[int, int]]] = {}
    firsts: dict[tuple[str, int, int], int] = {}
    for row in unmatched.select(["topic", "partition", "broker", "base_offset", "last_offset"]).to_pylist():
        by_partition.setdefault((row["topic"], row["partition"]), []).append((row["base_offset"], row["last_offset"]))
        key = (row["topic"], row["partition"], row["broker"])
        firsts[key] = min(firsts.get(key, row["base_offset"]), row["base_offset"])
    for (topic, partition), spans in by_partition.items():
        mask = pc.and_(pc.equal(ref_table["topic"], topic), pc.equal(ref_table["partition"], partition))
        ref = ref_table.filter(mask).sort_by("base_offset")
        base, last = ref["base_offset"].to_numpy(), ref["last_offset"].to_numpy()
        wanted = np.zeros(ref.num_rows, dtype=bool)
        for lo, hi in spans:  # batches do not overlap, so `last` is sorted too
            wanted[np.searchsorted(last, lo, "left") : np.searchsorted(base, hi, "right")] = True
        for row in ref.filter(pa.array(wanted)).select([*where, *offsets]).to_pylist():
            chosen[batch_of(row)] = False
    if firsts:
        txn = held.filter(held["is_transactional"])
        for row in txn.select([*where, *offsets]).to_pylist():
            first = firsts.get((row["topic"], row["partition"], row["broker"]))
            if first is not None and row["base_offset"] >= first:
                chosen.setdefault(batch_of(row), True)
    batches = [Batch(Range._make((*k, chosen[k])), *extent[k]) for k in chosen]
    return Divergence(_merge(chosen), retained, runs, len(chosen), batches)


def _replica_table(replicas: Iterable[ReplicaSummary], with_reference: bool) -> pa.Table:
    rows = list(replicas)
    columns: dict[str, pa.Array] = {
        "topic": pa.array([r.topic for r in rows], pa.string()),
        "partition": pa.array([r.partition for r in rows], pa.int32()),
        "broker": pa.array([r.broker for r in rows], pa.int32()),
    }
    if with_reference:
        columns["reference_broker"] = pa.array([r.reference_broker for r in rows], pa.int32())
        columns["reference_log_start_offset"] = pa.array([r.reference_log_start_offset for r in rows], pa.int64())
    return pa.table(columns)


def _retained(matched: pa.Table) -> dict[tuple[str, int, int], int]:
    """Records below the reference's log start offset in batches both hold (one per offset)."""
    if matched.num_rows == 0:
        return {}
    start = matched["reference_log_start_offset"].to_numpy(zero_copy_only=False)
    base, last = matched["base_offset"].to_numpy(), matched["last_offset"].to_numpy()
    below = np.clip(np.minimum(last, start - 1) - base + 1, 0, None)
    counts = matched.select(REPLICA).append_column("below", pa.array(below, pa.int64()))
    summed = counts.group_by(REPLICA).aggregate([("below", "sum")]).to_pylist()
    return {(r["topic"], r["partition"], r["broker"]): r["below_sum"] for r in summed if r["below_sum"]}


def _runs(ref_table: pa.Table) -> dict[Partition, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    runs: dict[Partition, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    if ref_table.num_rows == 0:
        return runs
    ordered = ref_table.sort_by([("topic", "ascending"), ("partition", "ascending"), ("base_offset", "ascending")])
    topic = ordered["topic"].to_numpy(zero_copy_only=False)
    partition = ordered["partition"].to_numpy()
    base, last = ordered["base_offset"].to_numpy(), ordered["last_offset"].to_numpy()
    epoch = ordered["partition_leader_epoch"].to_numpy()
    starts = np.flatnonzero(np.r_[True, (topic[1:] != topic[:-1]) | (partition[1:] != partition[:-1])])
    for i, j in zip(starts, [*starts[1:], len(topic)], strict=True):
        runs[(str(topic[i]), int(partition[i]))] = (base[i:j], last[i:j], epoch[i:j])
    return runs


def _merge(chosen: dict[tuple[Any, ...], bool]) -> list[Range]:
    """Adjacent batches of one segment (and one role) as one range: fewer reads, fewer decodes."""
    out: list[Range] = []
    for key in sorted(chosen, key=lambda k: (k[4], k[5])):
        broker, topic, partition, segment, path, position, size = key
        r = Range(broker, topic, partition, segment, path, position, size, chosen[key])
        prev = out[-1] if out else None
        if (
            prev is not None
            and prev.path == r.path
            and prev.txn_only == r.txn_only
            and prev.batch_position + prev.batch_size == r.batch_position
        ):
            out[-1] = prev._replace(batch_size=prev.batch_size + r.batch_size)
        else:
            out.append(r)
    return out


def verify_ranges(ranges: Iterable[Range]) -> list[SegmentTrouble]:
    """Check the CRC of every batch of `ranges` (local files: whole batches from a header scan
    without `verify_crc`), as that scan would have: one trouble per segment with a bad batch."""
    troubles: dict[str, SegmentTrouble] = {}
    for r in ranges:
        if r.path in troubles or not is_local(r.path):
            continue
        try:
            _core.scan_headers(r.path, verify_crc=True, offset=r.batch_position, length=r.batch_size)
        except (EpochGuardError, OSError) as exc:
            troubles[r.path] = SegmentTrouble(r.broker, r.topic, r.partition, r.path, str(exc))
    return list(troubles.values())

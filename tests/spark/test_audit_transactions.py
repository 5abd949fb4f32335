"""The audit tells records of aborted transactions apart from lost ones: an aborted record that an
unclean election removed is not data loss, and a read_committed consumer never read it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from epochguard.spark import audit
from epochguard.storage.log import PartitionLog
from epochguard.storage.logdir import write_log_dir
from epochguard.types import TopicPartition

TP = TopicPartition("payments", 0)


def _diverged(root: Path, tail: Callable[[PartitionLog], object], old_high_watermark: int) -> list[Path]:
    """Broker 1 led epoch 0 and wrote `tail` past what broker 2 replicated (offsets 0-3); broker 2 was
    elected uncleanly at offset 4 and wrote two records in epoch 1."""
    shared = [(None, f"v{i}".encode()) for i in range(4)]
    old = PartitionLog(TP)
    old.append_as_leader(shared, 0, timestamp_ms=1000)
    tail(old)
    old.update_high_watermark(old_high_watermark)
    new = PartitionLog(TP)
    new.append_as_leader(shared, 0, timestamp_ms=1000)
    new.append_as_leader([(None, b"n1"), (None, b"n2")], 1, timestamp_ms=2000)
    new.update_high_watermark(6)
    return [write_log_dir(root / f"broker-{b}", b, [log]) for b, log in ((1, old), (2, new))]


def replicas(root: Path) -> list[Path]:
    """Past the common prefix broker 1 wrote a transaction it then aborted (4-5, marker 6) and one plain
    record (7)."""
    def tail(old: PartitionLog) -> None:
        old.append_as_leader([(None, b"t1"), (None, b"t2")], 0, timestamp_ms=1001, producer_id=9, producer_epoch=0,
                             transactional=True)
        old.append_txn_marker(9, 0, commit=False, coordinator_epoch=0, leader_epoch=0, timestamp_ms=1002)
        old.append_as_leader([(None, b"plain")], 0, timestamp_ms=1003)
    return _diverged(root, tail, 8)


def test_records_of_aborted_transactions_are_not_counted_as_lost(spark, tmp_path) -> None:
    consumed = tmp_path / "consumed.parquet"
    pd.DataFrame([(TP.topic, 0, 4, 0), (TP.topic, 0, 7, 0)], columns=["topic", "partition", "offset", "leader_epoch"]).astype(
        {"leader_epoch": "Int32"}
    ).to_parquet(consumed)
    result = audit(spark, [str(d) for d in replicas(tmp_path)], consumed=str(consumed), out=str(tmp_path / "out"))
    lost = pd.read_parquet(Path(result.out) / "lost_records.parquet").sort_values("offset")
    assert list(zip(lost.offset, lost.kind, strict=True)) == [(4, "aborted"), (5, "aborted"), (6, "aborted"), (7, "lost")]
    [diverged] = result.diverged
    assert (diverged.broker, diverged.lost_count, diverged.lost_first_offset, diverged.lost_last_offset) == (1, 1, 7, 7)
    assert diverged.divergence_offset == 4
    phantoms = pd.read_parquet(Path(result.out) / "phantom_reads.parquet").set_index("offset")
    assert phantoms.loc[4, "kind"] == "aborted" and phantoms.loc[7, "kind"] == "truncated"
    assert result.phantom_loss_count == 1  # the aborted read is not a loss


def open_and_committed(root: Path) -> list[Path]:
    """Past the common prefix broker 1 wrote a committed transaction (4-5, COMMIT marker 6), a transaction
    it holds no marker of (7-8: open when the election came, its outcome not on this disk) and a plain
    record (9)."""
    def tail(old: PartitionLog) -> None:
        old.append_as_leader([(None, b"c1"), (None, b"c2")], 0, timestamp_ms=1001, producer_id=9, producer_epoch=0,
                             transactional=True)
        old.append_txn_marker(9, 0, commit=True, coordinator_epoch=0, leader_epoch=0, timestamp_ms=1002)
        old.append_as_leader([(None, b"o1"), (None, b"o2")], 0, timestamp_ms=1003, producer_id=11,
                             producer_epoch=0, transactional=True)
        old.append_as_leader([(None, b"plain")], 0, timestamp_ms=1004)
    return _diverged(root, tail, 4)


def test_records_of_a_transaction_no_marker_ends_are_marked_uncommitted(spark, tmp_path) -> None:
    """`uncommitted` (what `epochguard recover --include-uncommitted` is about): the open transaction's
    records, not the committed one's nor its marker nor a plain record; on the driver and in Spark's jobs."""
    dirs = [str(d) for d in open_and_committed(tmp_path)]
    for local_bytes in (64 << 20, 0):
        result = audit(spark, dirs, out=str(tmp_path / f"out-{local_bytes}"), html=False, local_bytes=local_bytes)
        lost = pd.read_parquet(Path(result.out) / "lost_records.parquet").sort_values("offset")
        assert list(zip(lost.offset, lost.kind, lost.uncommitted, strict=True)) == [
            (4, "lost", False), (5, "lost", False), (6, "lost", False), (7, "lost", True), (8, "lost", True),
            (9, "lost", False)], local_bytes

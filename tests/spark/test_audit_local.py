"""The audit with a large loss stays on the driver (issue 36): the divergent batches are compared a
window of offsets at a time and the lost records streamed to lost_records.parquet. The windows find
exactly what Spark's jobs find, record for record; a budget too small for one window hands the audit
to Spark; a batch that cannot be read in a window is an error row, once, and the audit goes on."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from epochguard.spark import audit
from epochguard.spark.batches import divergence, plan
from epochguard.spark.cli import _size
from epochguard.spark.headers import scan_listing
from epochguard.spark.listing import list_log_dirs
from epochguard.spark.local import windows

from .kafka_logs import Replica, records, write_log_dir
from .test_audit_batches import TABLES, _table

PREFIX = [(0, records("c", 10 * i, 10)) for i in range(3)]  # offsets 0..29 in epoch 0 everywhere


def _tail(prefix: str, epoch: int, first: int, count: int, size: int) -> list:
    return [(epoch, records(prefix, o, min(size, first + count - o))) for o in range(first, first + count, size)]


def _cluster(root: Path) -> list[str]:
    """Two partitions where broker 1 (epoch 0) wrote a tail of 5-record batches that brokers 2 and 3
    (epoch 1, elected uncleanly) replaced with 7-record batches: the windows' bounds fall inside the
    reference's batches. Broker 3 is behind broker 2 on partition 1; topic "same" lines up."""
    tails = {0: 60, 1: 45}
    replicas = {
        1: [Replica("big", p, [*PREFIX, *_tail("old", 0, 30, n, 5)]) for p, n in tails.items()],
        2: [Replica("big", p, [*PREFIX, *_tail("new", 1, 30, n + 3, 7)]) for p, n in tails.items()],
        3: [Replica("big", 0, [*PREFIX, *_tail("new", 1, 30, 63, 7)]), Replica("big", 1, [*PREFIX])],
    }
    for rs in replicas.values():
        rs.append(Replica("same", 0, [*PREFIX]))
    return [str(write_log_dir(root, b, rs, high_watermarks={("big", 0): 40})) for b, rs in replicas.items()]


def _in_spark(spark, group: str, run):
    """`run()` and the Spark jobs it ran."""
    spark.sparkContext.setJobGroup(group, group)
    try:
        found = run()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return found, spark.sparkContext.statusTracker().getJobIdsForGroup(group)


def _divergent(dirs: list[str], replicas):
    return divergence(plan(scan_listing(None, list_log_dirs(dirs), verify_crc=True)), replicas)


def test_windows_find_exactly_what_spark_jobs_find(spark, tmp_path) -> None:
    dirs = _cluster(tmp_path / "logs")
    out = tmp_path / "out"
    expected = audit(spark, dirs, out=str(out / "spark"), html=False, local_bytes=0)
    found = _divergent(dirs, expected.replicas)
    local_bytes = 4 * max(b.range.batch_size for b in found.batches)  # two or three of broker 1's batches
    cut = windows(found, expected.replicas, local_bytes)
    assert len(cut) >= 8 and all(w.size <= local_bytes for w in cut)
    assert any(w.lo is not None and w.lo % 7 != 30 % 7 for w in cut)  # a bound inside a reference batch
    driver, jobs = _in_spark(
        spark, "windows", lambda: audit(spark, dirs, out=str(out / "driver"), html=False, local_bytes=local_bytes)
    )
    assert jobs == []
    for name in TABLES:
        assert repr(_table(out / "driver", name)) == repr(_table(out / "spark", name)), name
    neutral = {"out": None, "provenance": None}
    assert driver.summary() | neutral == expected.summary() | neutral
    # Exactly broker 1's tails, each record once, with its value, in (topic, partition, broker, offset) order.
    lost = pq.read_table(out / "driver" / "lost_records.parquet").to_pandas()
    wanted = [("big", p, 1, o, 0, b"old-%d" % o) for p, n in ((0, 60), (1, 45)) for o in range(30, 30 + n)]
    got = lost[["topic", "partition", "broker", "offset", "leader_epoch", "value"]].itertuples(index=False)
    assert [tuple(r) for r in got] == wanted
    assert set(lost["kind"]) == {"lost"}
    big0 = next(r for r in driver.replicas if (r.topic, r.partition, r.broker) == ("big", 0, 1))
    assert (big0.lost_count, big0.lost_first_offset, big0.lost_last_offset, big0.lost_visible_count) == (60, 30, 89, 10)
    assert [r["offset"] for r in driver.lost_sample[:3]] == [30, 31, 32]


def test_spark_tasks_run_the_drivers_windows_on_remote_files(spark, tmp_path, monkeypatch) -> None:
    """The Spark path runs the driver's rule (`local.compare_window`) in a task per window, the windows
    cut as the driver cuts them; with file:// URIs (storage the driver does not read: Spark's
    binaryFile source hands each task the bytes) it finds what the driver finds, record for record."""
    from epochguard.spark import auditing

    dirs = _cluster(tmp_path / "logs")
    out = tmp_path / "out"
    first = audit(spark, dirs, out=str(out / "driver"), html=False)
    found = _divergent(dirs, first.replicas)
    window_bytes = 4 * max(b.range.batch_size for b in found.batches)
    assert len(windows(found, first.replicas, window_bytes)) >= 8
    monkeypatch.setattr(auditing, "WINDOW_BYTES", window_bytes)
    units = auditing._units(list_log_dirs([]), first.replicas, found)
    assert [(lo, hi) for lo, hi, _ in units] == [(w.lo, w.hi) for w in windows(found, first.replicas, window_bytes)]
    uris = [Path(d).as_uri() for d in dirs]
    remote, jobs = _in_spark(spark, "remote", lambda: audit(spark, uris, out=str(out / "spark"), html=False))
    assert jobs != []
    for name in TABLES:
        assert repr(_table(out / "spark", name)) == repr(_table(out / "driver", name)), name
    assert remote.lost_count == first.lost_count == 105
    assert [r["offset"] for r in remote.lost_sample[:3]] == [30, 31, 32]


def test_a_budget_below_one_window_hands_the_audit_to_spark(spark, tmp_path) -> None:
    dirs = _cluster(tmp_path / "logs")
    first = audit(spark, dirs, out=None)
    # The least a window holds: one of broker 1's batches and the reference's over its offsets.
    least = max(w.size for w in windows(_divergent(dirs, first.replicas), first.replicas, 1))
    found, jobs = _in_spark(spark, "fallback", lambda: audit(spark, dirs, out=None, local_bytes=least - 1))
    assert jobs != [] and found.lost_count == 105
    assert found.arrow("lost_records") is None  # only Spark holds it
    found, jobs = _in_spark(spark, "fits", lambda: audit(spark, dirs, out=None, local_bytes=least))
    assert jobs == [] and found.lost_count == 105
    # The driver streamed it to Parquet: read back without Spark, the records the count names.
    lost = found.arrow("lost_records")
    assert lost is not None and lost.num_rows == 105
    assert sorted(lost["offset"].to_pylist()) == sorted([*range(30, 90), *range(30, 75)])


def test_a_batch_unreadable_in_a_window_is_one_error_row(spark, tmp_path) -> None:
    """A tail segment cut short after the header pass (a live log dir copied as it changes): the
    batch cut is an error row of errors.parquet, named once though two windows read it; the records
    still there are compared and the audit finishes on the driver."""
    from contextlib import nullcontext

    dirs = _cluster(tmp_path / "logs")
    segment = Path(dirs[1]) / "big-0" / f"{0:020d}.log"
    size = segment.stat().st_size

    def step(name: str):
        if name.startswith("decoding") and "do not line up" in name:
            with open(segment, "r+b") as f:
                f.truncate(size - 40)  # into the reference's last batch (offsets 86..92)
        return nullcontext()

    out = tmp_path / "out"
    found, jobs = _in_spark(
        spark, "cut", lambda: audit(spark, dirs, out=str(out), html=False, step=step, local_bytes=2000)
    )
    assert jobs == []
    errors = pd.read_parquet(out / "errors.parquet")
    assert len(errors) == 1
    error = errors.iloc[0]
    assert (error.broker, error.topic, error.partition, error.path) == (2, "big", 0, str(segment))
    assert "incomplete" in error.reason
    assert found.error_count == 1 and found.exit_code == 1
    # Broker 1's records over the unreadable batch have nothing to match there: still lost.
    big0 = next(r for r in found.replicas if (r.topic, r.partition, r.broker) == ("big", 0, 1))
    assert big0.lost_count == 60


def test_the_cli_budget_reads_sizes() -> None:
    assert [_size(s) for s in ("0", "1024", "512m", "2G", "64k")] == [0, 1024, 512 << 20, 2 << 30, 64 << 10]
    for bad in ("x", "-1", "1.5g", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            _size(bad)


def test_topics_and_krafts_metadata_log_left_out_and_said(spark, tmp_path) -> None:
    """KRaft's metadata log (a partition dir in a combined or broker log dir) is left out by default, and
    said; `topics` takes names and patterns; consumed records of a topic left out are not phantoms of an
    unknown partition. Wrong rules: auditing __cluster_metadata as an ISR-replicated partition; a pattern
    taken as a name; the consumed records of a skipped topic reported."""
    dirs = _cluster(tmp_path / "logs")
    for d in dirs:  # the partition dir alone (the broker's checkpoints stay as they are)
        meta = write_log_dir(tmp_path / "meta", int(d.rsplit("-", 1)[1]), [Replica("__cluster_metadata", 0, PREFIX)])
        shutil.move(meta / "__cluster_metadata-0", d)
    default = audit(spark, dirs, out=None, html=False)
    assert {r.topic for r in default.replicas} == {"big", "same"}
    assert default.provenance["not_audited"] == ["__cluster_metadata-0"]
    assert default.lost_count == 105
    named = audit(spark, dirs, out=None, html=False, topics=["__cluster_metadata", "sa*"])
    assert {r.topic for r in named.replicas} == {"__cluster_metadata", "same"} and named.lost_count == 0
    assert named.provenance["not_audited"] == ["big-0", "big-1"]
    consumed = spark.createDataFrame([("same", 0, 3, 0), ("big", 0, 31, 0)], "topic string, partition int, "
                                     "offset long, leader_epoch int")
    only_big = audit(spark, dirs, out=None, html=False, topics=["big"], consumed=consumed)
    assert only_big.phantom_counts == {"rewritten": 1}  # "same" is in the dirs, left out: not unknown

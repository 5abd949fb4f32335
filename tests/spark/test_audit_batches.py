"""The audit on batch headers finds what the record-level audit finds, table for table, and decodes
only the batches that do not line up; partitions whose headers cannot stand for their records
(compacted, legacy, corrupt) fall back to records."""

from __future__ import annotations

import struct
from pathlib import Path

import pandas as pd
import pytest
from kafka.record.util import calc_crc32c

from epochguard.spark import audit
from epochguard.spark.batches import divergence, plan
from epochguard.spark.headers import scan_listing
from epochguard.spark.listing import list_log_dirs

from . import test_audit
from .kafka_logs import Replica, kafka_python_batch, records, write_log_dir

PREFIX = test_audit.PREFIX
scenario = test_audit.scenario  # the module-scoped fixture: the hand-built cluster of test_audit

TABLES = ["partitions", "lost_records", "mismatched_records", "errors", "phantom_reads"]


def _table(out: Path, name: str) -> list[dict]:
    path = out / f"{name}.parquet"
    if not path.exists():
        return []
    df = pd.read_parquet(path)
    df = df.sort_values([c for c in ("topic", "partition", "broker", "offset", "leader_epoch", "path") if c in df.columns])
    return [{k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in row.items()} for row in df.to_dict("records")]


def _same_results(spark, dirs: list[str], out: Path, consumed: str | None = None) -> dict:
    results = {}
    for method in ("records", "batches"):
        results[method] = audit(spark, dirs, consumed=consumed, out=str(out / method), method=method, html=False)
    for name in TABLES:
        a, b = _table(out / "records", name), _table(out / "batches", name)
        assert repr(a) == repr(b), name
    neutral = {"out": None, "provenance": None}
    assert results["records"].summary() | neutral == results["batches"].summary() | neutral
    return results


def test_every_table_is_the_record_level_audits(spark, scenario, tmp_path) -> None:
    results = _same_results(spark, [str(d) for d in scenario["dirs"].values()], tmp_path, str(scenario["consumed"]))
    assert results["batches"].lost_count == 13 and results["batches"].phantom_counts["truncated"] == 4


def test_only_the_batches_that_do_not_line_up_are_decoded(spark, scenario) -> None:
    dirs = [str(d) for d in scenario["dirs"].values()]
    listing = list_log_dirs(dirs)
    batch_plan = plan(scan_listing(None, listing, verify_crc=True))
    assert batch_plan.on_records == {}
    result = audit(spark, dirs, out=None, html=False)
    found = divergence(batch_plan, result.replicas)
    decoded = {(r.topic, r.broker, r.segment) for r in found.ranges}
    # orders: broker 1's tail (its second segment), broker 2's epoch 1 and 2 batches over the same
    # offsets, broker 3's epoch 1 batch (it ends before broker 2's); retained: broker 1's batch
    # below the reference's log start; nockpt: both tails. Never a batch of the common prefix.
    assert decoded == {
        ("orders", 1, 10), ("orders", 2, 0), ("orders", 3, 0), ("retained", 1, 0), ("nockpt", 1, 0), ("nockpt", 2, 0)
    }
    prefix_end = sum(len(kafka_python_batch(rs, o, 0)) for o, rs in ((0, PREFIX[0][1]), (4, PREFIX[1][1])))
    assert all(r.batch_position >= prefix_end for r in found.ranges if r.topic in ("orders", "nockpt") and r.segment == 0)
    assert not any(r.topic == "clean" for r in found.ranges)
    assert not any(r.txn_only for r in found.ranges)
    # broker 1's records below broker 2's log start (5) are all in a batch broker 2 lacks: decoded.
    assert found.retained == {}
    assert found.decoded_batches == 8


def _compacted(records_: list, base: int, epoch: int, keep: list[int]) -> bytes:
    """A batch as Kafka's cleaner leaves it: the original base and last offset, some records gone."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for delta in keep:
        key, value = records_[delta]
        builder.append(delta, timestamp=1_700_000_000_000 + base + delta, key=key, value=value,
                       headers=[("n", str(base + delta).encode())])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)
    struct.pack_into(">i", data, 12, epoch)
    struct.pack_into(">i", data, 23, len(records_) - 1)  # lastOffsetDelta kept across compaction
    struct.pack_into(">I", data, 17, calc_crc32c(bytes(data[21:])))
    return bytes(data)


def test_fallbacks_find_the_same_as_records(spark, tmp_path) -> None:
    """A corrupt batch, a legacy wrapper and an incomplete tail each send their partition to the
    record-level comparison; the results stay those of the record-level audit."""
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    replicas = {
        b: [
            Replica("corrupt", 0, [*PREFIX, (0, records("a", 10, 5))]),
            Replica("torn", 0, [*PREFIX, (b - 1, records("t", 10, 3 + b))]),
            Replica("plain", 0, [*PREFIX, (b - 1, records("p", 10, 2 * b))]),
        ]
        for b in (1, 2)
    }
    dirs = [write_log_dir(tmp_path, b, rs) for b, rs in replicas.items()]
    segment = dirs[0] / "corrupt-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    data[12 + int.from_bytes(data[8:12], "big") + 70] ^= 0xFF  # a record byte of the second batch
    segment.write_bytes(bytes(data))
    torn = dirs[1] / "torn-0" / f"{0:020d}.log"
    torn.write_bytes(torn.read_bytes()[:-9])
    legacy = LegacyRecordBatchBuilder(magic=1, compression_type=1, batch_size=1 << 20)
    for i in range(3):
        legacy.append(i, timestamp=1000 + i, key=None, value=b"old%d" % i)
    wrapper = bytearray(legacy.build())
    struct.pack_into(">q", wrapper, 0, 2)  # the wrapper carries its last inner offset
    (dirs[0] / "legacy-0").mkdir()
    (dirs[0] / "legacy-0" / f"{0:020d}.log").write_bytes(bytes(wrapper) + kafka_python_batch(records("n", 3, 2), 3, 0))
    (dirs[1] / "legacy-0").mkdir()
    (dirs[1] / "legacy-0" / f"{0:020d}.log").write_bytes(bytes(wrapper) + kafka_python_batch(records("n", 3, 4), 3, 1))
    listing = list_log_dirs([str(d) for d in dirs])
    on_records = plan(scan_listing(None, listing, verify_crc=True)).on_records
    assert set(on_records) == {("corrupt", 0), ("torn", 0), ("legacy", 0)}
    assert "CRC" in on_records[("corrupt", 0)] and "legacy" in on_records[("legacy", 0)]
    results = _same_results(spark, [str(d) for d in dirs], tmp_path / "out")
    lost = {(r.topic, r.broker): r.lost_count for r in results["batches"].replicas if r.lost_count}
    assert lost == {("torn", 1): 4, ("plain", 1): 2, ("legacy", 1): 2}


def _recovery_points(log_dir: Path, points: dict[tuple[str, int], int]) -> None:
    lines = ["0", str(len(points))] + [f"{t} {p} {o}" for (t, p), o in points.items()]
    (log_dir / "recovery-point-offset-checkpoint").write_text("\n".join(lines) + "\n")


def test_crc_is_checked_where_replicas_differ_and_everywhere_with_verify_crc(spark, tmp_path) -> None:
    """By default the batches that line up below the recovery point (flushed) are not read: a record
    byte flipped on one replica under an unchanged stored CRC is trusted (only `verify_crc` reads the
    bytes and reports it), while a batch whose stored CRC differs from the other replica's at the
    same offsets is decoded, its CRC checked, and its partition compared on records, with or without
    the option (as the record-level audit does: the bad batch's records are unreadable, not lost)."""
    replicas = {b: [Replica(t, 0, [*PREFIX, (0, records(t, 10, 5))]) for t in ("flip", "crc")] for b in (1, 2)}
    dirs = [write_log_dir(tmp_path, b, rs) for b, rs in replicas.items()]
    for d in dirs:  # both brokers flushed everything (a clean shutdown)
        _recovery_points(d, {("flip", 0): 15, ("crc", 0): 15})
    at = {}
    for topic, where in (("flip", 70), ("crc", 17)):  # a record byte; a byte of the stored CRC itself
        segment = dirs[0] / f"{topic}-0" / f"{0:020d}.log"
        data = bytearray(segment.read_bytes())
        at[topic] = 12 + int.from_bytes(data[8:12], "big")  # the second batch
        data[at[topic] + where] ^= 0xFF
        segment.write_bytes(bytes(data))
    found = {}
    for verify in (False, True):
        result = audit(spark, [str(d) for d in dirs], out=str(tmp_path / f"out-{verify}"), html=False,
                       verify_crc=verify)
        errors = pd.read_parquet(tmp_path / f"out-{verify}" / "errors.parquet")
        found[verify] = {(e.broker, e.topic, e.byte_position) for e in errors.itertuples() if "crc" in e.reason.lower()}
        assert len(errors) == len(found[verify]) and result.exit_code == 1
        parts = {(r.topic, r.broker): (r.kind, r.lost_count, r.record_count) for r in result.replicas}
        assert parts[("crc", 1)] == ("in_sync", 0, 15 - 6)  # what the bad batch held is unreadable, not lost
        # trusted by default: broker 1 holds as many records as broker 2 and is the reference (lower id)
        assert parts[("flip", 1)] == (("in_sync", 0, 15 - 6) if verify else ("reference", 0, 15))
    assert found[False] == {(1, "crc", at["crc"])}
    assert found[True] == {(1, "crc", at["crc"]), (1, "flip", at["flip"])}


@pytest.mark.parametrize(
    ("point", "checked"), [(None, True), (0, True), (4, True), (9, True), (10, False), (15, False), (99, False)]
)
def test_by_default_the_crcs_past_the_recovery_point_are_checked(tmp_path, point, checked) -> None:
    """As Kafka's `LogLoader` when a broker restarts: the batches holding offsets at or past the
    replica's recovery point were not flushed (a crash may have torn them) and have their CRC
    checked; below it, what lines up is trusted. A replica without a recovery point (no checkpoint
    file, or not listed in it) has every batch checked. The flipped byte is in the batch of offsets
    4-9, in the first of two segments (offsets 0-9, 10-14) or in the second (its batch 10-14)."""
    for segment in (0, 1):
        root = tmp_path / f"{point}-{segment}"
        replicas = {b: [Replica("t", 0, [*PREFIX, (0, records("t", 10, 5))], segment_records=10)] for b in (1, 2)}
        dirs = [write_log_dir(root, b, rs) for b, rs in replicas.items()]
        for d in dirs:
            _recovery_points(d, {} if point is None else {("t", 0): point})
        log = dirs[0] / "t-0" / f"{10 * segment:020d}.log"
        data = bytearray(log.read_bytes())
        at = 12 + int.from_bytes(data[8:12], "big") if segment == 0 else 0  # the batch 4-9, or 10-14
        data[at + 70] ^= 0xFF
        log.write_bytes(bytes(data))
        scan = scan_listing(None, list_log_dirs([str(d) for d in dirs]), verify_crc=False)
        found = {(t.broker, t.path) for t in scan.troubles}
        # The second segment's batch holds offsets 10-14: past every point here but 15 and 99.
        expected = checked if segment == 0 else point is None or point < 15
        assert found == ({(1, str(log))} if expected else set()), (point, segment)
        assert all("CRC" in t.reason for t in scan.troubles)
        everything = scan_listing(None, list_log_dirs([str(d) for d in dirs]), verify_crc=True)
        assert {(t.broker, t.path) for t in everything.troubles} == {(1, str(log))}
        unchecked = scan_listing(None, list_log_dirs([str(d) for d in dirs]), verify_crc=False,
                                 past_recovery_point=False)
        assert unchecked.troubles == []


def test_a_compacted_partition_is_compared_on_records(spark, tmp_path) -> None:
    """Each replica's cleaner rewrites its own batches: the same records under other CRCs (and a
    batch whose count is not its span). Records decide: nothing is lost that the other holds."""
    rs = records("c", 0, 6)
    z = kafka_python_batch(records("z", 6, 2), 6, 0)
    one = _compacted(rs, 0, 0, [0, 2, 5]) + z  # offset 2 survived only here
    two = _compacted(rs, 0, 0, [0, 3, 5]) + z + kafka_python_batch(records("y", 8, 1), 8, 0)
    dirs = []
    for b, data in ((1, one), (2, two)):
        d = write_log_dir(tmp_path, b, [])
        (d / "cc-0").mkdir()
        (d / "cc-0" / f"{0:020d}.log").write_bytes(data)
        dirs.append(str(d))
    assert plan(scan_listing(None, list_log_dirs(dirs), verify_crc=True)).on_records == {("cc", 0): "compacted batches"}
    results = _same_results(spark, dirs, tmp_path / "out")
    [one_row] = [r for r in results["batches"].replicas if r.broker == 1]
    assert (one_row.kind, one_row.lost_count, one_row.record_count) == ("diverged", 1, 5)


def test_the_driver_finds_what_spark_jobs_find_without_a_job(spark, scenario, tmp_path) -> None:
    """A small divergent part is decoded and compared on the driver (the default), in no Spark job;
    Spark's jobs (local_bytes=0) and the hand-over when the tails exceed the driver's budget
    (local_bytes=1: the driver decoded what it had, Spark the tails) find the same, table for table,
    aborted transactions included."""
    from . import test_audit_transactions

    cases = [
        ([str(d) for d in scenario["dirs"].values()], (0, 1)),
        ([str(d) for d in test_audit_transactions.replicas(tmp_path / "txn")], (0,)),
    ]
    tracker = spark.sparkContext.statusTracker()
    for i, (dirs, budgets) in enumerate(cases):
        out = tmp_path / f"case-{i}"
        spark.sparkContext.setJobGroup(f"driver-{i}", "the audit on the driver")
        try:
            driver = audit(spark, dirs, out=str(out / "driver"), html=False)
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        assert tracker.getJobIdsForGroup(f"driver-{i}") == []
        for local_bytes in budgets:
            audit(spark, dirs, out=str(out / f"spark-{local_bytes}"), html=False, local_bytes=local_bytes)
        for name in TABLES:
            expected = _table(out / "spark-0", name)
            for got in ("driver", *(f"spark-{b}" for b in budgets[1:])):
                assert repr(_table(out / got, name)) == repr(expected), (name, got)
        assert driver.lost_count == (13 if i == 0 else 1)
    lost = _table(tmp_path / "case-1" / "driver", "lost_records")
    assert [(r["offset"], r["kind"]) for r in lost] == [(4, "aborted"), (5, "aborted"), (6, "aborted"), (7, "lost")]


def test_an_audit_done_on_the_driver_never_makes_its_lazy_session(spark, scenario, tmp_path) -> None:
    """`epochguard audit` hands the audit a LazySession: without a consumed table the driver does
    everything and the session is never made, with the same tables, summary and report as with a
    session; a consumed table is read in Spark, so then it is made."""
    from epochguard.spark.session import LazySession

    dirs = [str(d) for d in scenario["dirs"].values()]
    lazy = LazySession(spark.conf.get("spark.master"))
    found = audit(lazy, dirs, out=str(tmp_path / "lazy"))
    assert not lazy.ready
    expected = audit(spark, dirs, out=str(tmp_path / "session"))
    for name in TABLES:
        assert repr(_table(tmp_path / "lazy", name)) == repr(_table(tmp_path / "session", name)), name
    neutral = {"out": None, "provenance": None}
    assert found.summary() | neutral == expected.summary() | neutral
    assert found.provenance | {"started_at": None} == expected.provenance | {"started_at": None}
    html = (tmp_path / "session" / "report.html").read_text()
    html = html.replace(expected.provenance["started_at"], found.provenance["started_at"])
    assert (tmp_path / "lazy" / "report.html").read_text() == html
    assert found.partitions.count() == len(found.replicas) and lazy.ready  # a DataFrame asked for: made now
    consuming = LazySession(spark.conf.get("spark.master"))
    read = audit(consuming, dirs, consumed=str(scenario["consumed"]), out=None)
    assert consuming.ready and read.phantom_counts["truncated"] == 4

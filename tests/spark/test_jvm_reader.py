"""The JVM `kafka-log` reader (tools/kafka-log-reader over rust/jni): it is what `format("kafka-log")`
runs where its jar is on the session, and what its pushdown skips it skips by the batch headers
(its counters say how many batches it decoded and skipped), with the rows of the Python source."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from epochguard.spark import jvm
from epochguard.spark.datasource import PYTHON_NAME

from .kafka_logs import BASE_TIMESTAMP, Batch, Replica, kafka_python_batch, records, write_log_dir

BATCHES, PER_BATCH = 20, 10  # one segment: epoch 1 for batches 0-9, epoch 3 for 10-19


@pytest.fixture(scope="module")
def on_jvm(spark) -> None:
    if "kafka-log-reader" not in spark.sparkContext.getConf().get("spark.jars", ""):
        why = f"the JVM kafka-log reader is not on the session ({jvm.missing() or 'built after the session started'})"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory, on_jvm) -> str:
    batches: list[Batch] = [(1 if b < 10 else 3, records("r", b * PER_BATCH, PER_BATCH)) for b in range(BATCHES)]
    return str(write_log_dir(tmp_path_factory.mktemp("jvm"), 1, [Replica("t", 0, batches)]))


def _delta(spark, run) -> tuple[Any, dict[str, int]]:
    before = jvm.metrics(spark)
    result = run()
    after = jvm.metrics(spark)
    return result, {k: after[k] - before[k] for k in after}


def test_kafka_log_is_the_jvm_reader_and_kafka_log_python_the_python_one(spark, log_dir) -> None:
    df = spark.read.format("kafka-log").load(log_dir)
    assert jvm.reader_of(df) == "jvm" and jvm.SCAN_MARKER in df._jdf.queryExecution().executedPlan().toString()
    assert jvm.reader_of(spark.read.format(PYTHON_NAME).load(log_dir)) == "python"
    rows, delta = _delta(spark, df.collect)  # no orderBy: a range partitioner samples the scan first
    assert sorted(rows) == sorted(spark.read.format(PYTHON_NAME).load(log_dir).collect())
    assert len(rows) == BATCHES * PER_BATCH
    assert delta["batches_decoded"] == BATCHES and delta["batches_skipped"] == 0


@pytest.mark.parametrize(("where", "decoded", "want"), [
    ("offset >= 42 AND offset < 47", 1, [(o, 1) for o in range(42, 47)]),
    ("offset IN (5, 195)", 20, [(5, 1), (195, 3)]),  # an IN is one range: [5, 195]
    ("leader_epoch = 3 AND offset <= 104", 1, [(o, 3) for o in range(100, 105)]),
    (f"timestamp >= {BASE_TIMESTAMP + 150}", 5, [(o, 3) for o in range(150, 200)]),
])
def test_filters_skip_batches_by_their_headers(spark, log_dir, where, decoded, want) -> None:
    df = spark.read.format("kafka-log").load(log_dir).where(where).select("offset", "leader_epoch")
    rows, delta = _delta(spark, df.collect)
    assert sorted((r.offset, r.leader_epoch) for r in rows) == want
    assert (delta["batches_decoded"], delta["batches_skipped"]) == (decoded, BATCHES - decoded)
    python = spark.read.format(PYTHON_NAME).load(log_dir).where(where).select("offset", "leader_epoch")
    assert sorted(rows) == sorted(python.collect())


def test_count_and_offset_bounds_come_from_the_headers(spark, log_dir) -> None:
    df = spark.read.format("kafka-log").load(log_dir).selectExpr("count(*) AS n", "min(offset) AS lo", "max(offset) AS hi")
    assert "pushedAggregates=[count, min, max]" in df._jdf.queryExecution().executedPlan().toString()
    row, delta = _delta(spark, df.collect)
    assert tuple(row[0]) == (200, 0, 199)
    assert delta["batches_decoded"] == 0 and delta["chunks_counted"] == 1
    topic = spark.read.format("kafka-log").load(log_dir).where("topic = 't' AND partition = 0")
    assert topic.count() == 200 and spark.read.format("kafka-log").load(log_dir).where("topic = 'u'").count() == 0


def _thinned_batch(base_offset: int, deltas: list[int]) -> bytes:
    """A v2 batch as the log cleaner leaves it: fewer records than its offset range (the gaps compacted)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for delta in deltas:
        builder.append(delta, timestamp=BASE_TIMESTAMP + delta, key=b"k%d" % delta, value=b"v", headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


def test_count_of_compacted_batches_decodes_what_the_header_cannot_tell(spark, tmp_path: Path) -> None:
    log = write_log_dir(tmp_path, 4, [Replica("c", 0, [(0, records("a", 0, 3))])])
    segment = log / "c-0" / f"{0:020d}.log"
    # offsets 0-2 whole, then a batch at base 3 holding 4, 5 and 9 only (last offset delta 6)
    segment.write_bytes(segment.read_bytes() + _thinned_batch(3, [1, 2, 6]))
    df = spark.read.format("kafka-log").load(str(log))
    counted = df.selectExpr("count(*)", "min(offset)", "max(offset)").collect()[0]
    assert tuple(counted) == (6, 0, 9)
    assert sorted(r.offset for r in df.select("offset").collect()) == [0, 1, 2, 4, 5, 9]
    only = df.where("offset >= 4").select("offset").collect()
    assert sorted(r.offset for r in only) == [4, 5, 9]


def test_a_corrupt_batch_fails_the_read_naming_where(spark, tmp_path: Path) -> None:
    log = write_log_dir(tmp_path, 5, [Replica("x", 0, [(0, records("a", 0, 3)), (0, records("b", 3, 3))])])
    segment = log / "x-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0x01  # the last header value byte of the second batch: only its CRC tells
    segment.write_bytes(bytes(data))
    with pytest.raises(Exception, match=r"KafkaLogException: corrupt record data at byte \d+: .*(?i:crc)"):
        spark.read.format("kafka-log").load(str(log)).collect()
    unchecked = spark.read.format("kafka-log").option("verifyCrc", "false").load(str(log)).select("offset")
    assert sorted(r.offset for r in unchecked.collect()) == list(range(6))


def test_every_column_matches_the_python_source(spark, log_dir) -> None:
    columns = "topic,broker,partition,segment,offset,timestamp,timestamp_type,key,value,headers,leader_epoch," \
              "batch_offset,producer_id,producer_epoch,sequence,is_transactional,is_control,magic,key_length," \
              "value_length,headers_count,record_digest,batch_position,batch_size"
    jvm_df = spark.read.format("kafka-log").option("columns", columns).load(log_dir)
    python_df = spark.read.format(PYTHON_NAME).option("columns", columns).load(log_dir)
    assert jvm_df.schema == python_df.schema
    assert jvm_df.orderBy("offset").collect() == python_df.orderBy("offset").collect()


def test_with_errors_reports_what_the_python_source_reports(spark, tmp_path: Path) -> None:
    """A batch whose CRC fails between good ones is skipped and named; an incomplete last batch is a
    row too; a segment whose first header is garbage is one row naming the bytes not decoded."""
    batches: list[Batch] = [(0, records("a", 0, 3)), (0, records("b", 3, 3)), (1, records("c", 6, 3))]
    log = write_log_dir(tmp_path, 6, [Replica("e", 0, batches), Replica("g", 0, [(0, records("z", 0, 2))])])
    segment = log / "e-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    second = struct.unpack_from(">i", data, 8)[0] + 12  # where the second batch starts
    data[second + 70] ^= 0x01  # inside its records
    segment.write_bytes(bytes(data) + bytes(data[:30]))  # and a cut batch at the end
    (log / "g-0" / f"{0:020d}.log").write_bytes(b"\xff" * 80)
    jvm_rows = spark.read.format("kafka-log").option("withErrors", "true").option("columns", "topic,offset").load(str(log))
    python_rows = spark.read.format(PYTHON_NAME).option("withErrors", "true").option("columns", "topic,offset")
    got = sorted(jvm_rows.collect(), key=str)
    assert got == sorted(python_rows.load(str(log)).collect(), key=str)
    problems = [(r.topic, r.error_position, r.error_reason) for r in got if r.error_reason]
    assert [(t, p) for t, p, _ in problems] == [("e", second), ("e", len(data)), ("g", 0)]
    assert problems[0][2].startswith("CRC mismatch") and problems[0][2].endswith(
        f"skipped the batch at {second} ({struct.unpack_from('>i', data, second + 8)[0] + 12} bytes)")
    assert problems[1][2] == "incomplete batch at the end: 30 bytes" and problems[2][2].endswith("bytes 0..80 not decoded")
    assert sorted(r.offset for r in got if r.topic == "e" and r.offset is not None) == [0, 1, 2, 6, 7, 8]


def test_hadoop_filesystem_paths_read_as_local_ones(spark, log_dir) -> None:
    """A path with a scheme is listed and read through Hadoop's FileSystem (here its local one,
    `file://`), the bytes handed to the decoder; the same rows, and the same batches skipped."""
    remote = spark.read.format("kafka-log").load("file://" + log_dir)
    assert sorted(remote.collect()) == sorted(spark.read.format("kafka-log").load(log_dir).collect())
    rows, delta = _delta(spark, remote.where("offset >= 42 AND offset < 47").select("offset").collect)
    assert sorted(r.offset for r in rows) == list(range(42, 47))
    assert (delta["batches_decoded"], delta["batches_skipped"]) == (1, BATCHES - 1)
    assert remote.count() == BATCHES * PER_BATCH  # not from headers for such paths yet: decoded


def test_a_scheme_configured_in_hadoop_reads_through_its_filesystem(spark, log_dir) -> None:
    """A scheme Hadoop is configured for, not only `file://`: a `viewfs://` mount table whose link
    points at the local log dir lists and reads through ViewFileSystem: the same rows, and the same
    batches skipped by their headers."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    key = "fs.viewfs.mounttable.egtest.link./logs"
    conf.set(key, "file://" + str(Path(log_dir).parent))
    try:
        mounted = f"viewfs://egtest/logs/{Path(log_dir).name}"
        df = spark.read.format("kafka-log").load(mounted)
        assert sorted(df.collect()) == sorted(spark.read.format("kafka-log").load(log_dir).collect())
        rows, delta = _delta(spark, df.where("offset >= 42 AND offset < 47").select("offset").collect)
        assert sorted(r.offset for r in rows) == list(range(42, 47))
        assert (delta["batches_decoded"], delta["batches_skipped"]) == (1, BATCHES - 1)
    finally:
        conf.unset(key)


def test_an_offset_range_reads_only_the_headers_the_offset_index_points_at(spark, log_dir, tmp_path: Path) -> None:
    """With Kafka's `.index` beside a segment (an entry per batch here: its last offset relative to the
    segment's base, its position; then the zeros of a preallocated index), a filter on an offset range
    reads the headers of the batches the index points at, not the segment's every header. An index
    that points where no batch starts is ignored: the same rows, from a scan of every header."""
    import shutil

    from epochguard import _core

    copy = tmp_path / "indexed"
    shutil.copytree(log_dir, copy)
    segment = copy / "t-0" / f"{0:020d}.log"
    positions = [p for p, *_ in _core.batch_index(str(segment))]
    entries = [(b * PER_BATCH + PER_BATCH - 1, p) for b, p in enumerate(positions)] + [(0, 0)] * 4
    index = segment.with_suffix(".index")
    index.write_bytes(b"".join(struct.pack(">ii", r, p) for r, p in entries))
    where = "offset >= 142 AND offset < 147"

    def run() -> list[int]:
        return sorted(r.offset for r in spark.read.format("kafka-log").load(str(copy)).where(where).select("offset").collect())

    rows, delta = _delta(spark, run)
    assert rows == list(range(142, 147))
    assert (delta["batches_decoded"], delta["batches_skipped"]) == (1, 1)  # batches 13 and 14 of 20
    index.write_bytes(b"".join(struct.pack(">ii", r, p + 5) for r, p in entries[:20]))  # mid-batch positions
    rows, delta = _delta(spark, run)
    assert rows == list(range(142, 147)) and (delta["batches_decoded"], delta["batches_skipped"]) == (1, 19)


def test_keys_and_values_are_read_in_place_across_windows(spark, tmp_path: Path, on_jvm) -> None:
    """Keys and values reach Spark as views into the 256 KiB window the decoder read (or into a
    compressed batch's decompressed records), read in place by the reader's column vector: every byte
    as written, over several windows (read buffers reused once released), a batch larger than a
    window, values inline in their view (at most 12 bytes), empty and null ones."""
    rng = random.Random(37)
    data, written, offset = bytearray(), {}, 0
    for b in range(60):
        recs = []
        for i in range(1000 if b == 17 else 30):  # batch 17: ~300 KB, more than a window
            n = offset + i
            key = None if n % 7 == 3 else f"k{n}".encode()
            value = None if n % 11 == 5 else rng.randbytes([0, 5, 12, 13, 1500][n % 5])
            recs.append((key, value))
            written[n] = (key, value)
        data += kafka_python_batch(recs, offset, 0, compression=3 if b % 4 == 1 else 0)  # some lz4
        offset += len(recs)
    log = write_log_dir(tmp_path, 1, [Replica("v", 0, [])])
    (log / "v-0" / f"{0:020d}.log").write_bytes(bytes(data))
    df = spark.read.format("kafka-log").option("columns", "offset,key,value").load(str(log))
    got = {r.offset: (r.key, r.value) for r in df.collect()}
    assert len(got) == len(written) and len(data) > 3 * 256 * 1024
    assert {n: tuple(None if b is None else bytes(b) for b in kv) for n, kv in got.items()} == written

"""Reading log directories against real broker-written segments and against log dirs written by an
independent encoder (kafka-python) and by the core's own: each read test runs on every front (`front`:
read_kafka_logs, the JVM ``kafka-log`` reader and the Python source ``kafka-log-python``, see fronts.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from epochguard import _core
from epochguard.spark import decode_batches, read_kafka_logs
from epochguard.spark.listing import list_log_dirs
from epochguard.spark.logs import pack_tasks, plan_chunks

from .fronts import FRONTS, JVM, read, require_jvm
from .kafka_logs import Batch, Replica, records, write_log_dir

SEGMENTS = Path("/work/shared/kafka-segments")
LDI = SEGMENTS / "ldi-poc"
EXPECTED = {
    "TestTopicPatient": "ldi-poc_TestTopicPatient-0_00000000000000000000.log.json",
    "__consumer_offsets": "ldi-poc___consumer_offsets-6_00000000000000000000.log.json",
    "__cluster_metadata": "ldi-poc___cluster_metadata-0_00000000000000000000.log.json",
}
KEYS = ["broker", "topic", "partition", "offset"]


@pytest.fixture(scope="module")
def ldi_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not LDI.is_dir():
        pytest.skip("real segments not available")
    root = tmp_path_factory.mktemp("ldi") / "broker-1"  # no meta.properties: the id is the folder's
    shutil.copytree(LDI, root)
    return root


@pytest.fixture(params=FRONTS)
def front(request: pytest.FixtureRequest) -> str:
    return request.param


def _digest(b64: str | None) -> str | None:
    return None if b64 is None else hashlib.sha256(base64.b64decode(b64)).hexdigest()


def _sha(value: bytes | None) -> str | None:
    return None if value is None else hashlib.sha256(value).hexdigest()


def test_real_segments_match_the_independent_decode(spark, ldi_dir, front) -> None:
    df = read(spark, front, [str(ldi_dir)])
    assert df.columns[:4] == ["broker", "topic", "partition", "segment"]
    rows = df.orderBy("topic", "offset").collect()
    for topic, name in EXPECTED.items():
        expected = json.loads((SEGMENTS / "expected" / name).read_text())
        want = []
        for batch in expected["batches"]:
            for r in batch["records"]:
                value = r.get("value_sha256") if r.get("value_omitted") else _digest(r["value"])
                want.append(
                    (
                        r["offset"],
                        batch["partition_leader_epoch"],
                        r["timestamp"],
                        _digest(r["key"]),
                        value,
                        batch["producer_id"],
                    )
                )
        got = [
            (r.offset, r.leader_epoch, r.timestamp, _sha(r.key), _sha(r.value), r.producer_id)
            for r in rows
            if r.topic == topic
        ]
        assert got == want, topic
        assert len(got) == expected["record_count"]
    assert {r.broker for r in rows} == {1}
    assert {(r.topic, r.partition) for r in rows} == {
        ("TestTopicPatient", 0),
        ("__consumer_offsets", 6),
        ("__cluster_metadata", 0),
    }


def test_large_segments_split_into_batch_aligned_chunks_decode_the_same(spark, ldi_dir, front) -> None:
    whole = read(spark, front, [str(ldi_dir)]).orderBy(*KEYS).collect()
    # __cluster_metadata's segment is ~360 KB: with 16 KB chunks it is cut at batch boundaries
    segment = ldi_dir / "__cluster_metadata-0" / f"{0:020d}.log"
    chunks = [c for c in plan_chunks(list(list_log_dirs([str(ldi_dir)]).segments), 16 << 10) if c.path == str(segment)]
    starts = {position for position, *_ in _core.batch_index(str(segment))}
    assert len(chunks) > 10 and all(c.position in starts for c in chunks)
    assert sorted((c.position, c.position + c.length) for c in chunks)[-1][1] == segment.stat().st_size
    assert sum(c.length for c in chunks) == segment.stat().st_size
    # ... and its chunks spread over every core's task
    groups = pack_tasks(chunks, 1 << 30, 2)
    assert len(groups) == 2 and all(groups)
    split = read(spark, front, [str(ldi_dir)], chunk_bytes=16 << 10)
    assert split.orderBy(*KEYS).collect() == whole


def test_hadoop_paths_read_through_binary_files(spark, ldi_dir) -> None:
    local = read_kafka_logs(spark, [str(ldi_dir)]).orderBy(*KEYS).collect()
    remote = read_kafka_logs(spark, [ldi_dir.as_uri()]).orderBy(*KEYS).collect()
    assert remote == local
    # the small files (checkpoints, topic ids) come through the Hadoop FileSystem too
    listed = {r.topic: (r.epochs, r.topic_id) for r in list_log_dirs([ldi_dir.as_uri()], spark).replicas}
    assert listed == {r.topic: (r.epochs, r.topic_id) for r in list_log_dirs([str(ldi_dir)]).replicas}
    assert listed["__cluster_metadata"][0] == [(1, 0)]
    assert listed["TestTopicPatient"][1] == "B3_HiNPgSQ6oxG9ZZ6ED5A"


def test_kafka_python_written_log_dirs_with_segments_and_compression(spark, tmp_path, front) -> None:
    replicas = [
        Replica(
            "plain",
            0,
            [(0, records("p", 0, 3)), (1, records("p", 3, 4)), (1, [(None, b"v"), (b"k", None)])],
            segment_records=3,
        ),
        Replica("plain", 1, [(5, records("q", 0, 50))], start_offset=1000),
    ]
    log_dir = write_log_dir(tmp_path, 7, replicas)
    rows = read(spark, front, [str(log_dir)]).orderBy("partition", "offset").collect()
    assert [(r.partition, r.offset, r.leader_epoch, r.key, r.value) for r in rows] == [
        (r.partition, o, e, k, v) for r in replicas for o, e, k, v in r.records
    ]
    assert {r.broker for r in rows} == {7}
    assert sorted({(r.partition, r.segment) for r in rows}) == [(0, 0), (0, 3), (0, 7), (1, 1000)]
    assert [(h.key, h.value) for h in rows[0].headers] == [("n", b"0")]


@pytest.mark.parametrize("compression", [1, 3, 4], ids=["gzip", "lz4", "zstd"])
def test_compressed_batches_from_kafka_python(spark, tmp_path, compression, front) -> None:
    from .kafka_logs import kafka_python_batch

    part = tmp_path / "broker-2" / "z-0"
    part.mkdir(parents=True)
    data = kafka_python_batch(records("z" * 20, 0, 40), 0, 3, compression) + kafka_python_batch(
        records("y" * 20, 40, 5), 40, 4, compression
    )
    (part / f"{0:020d}.log").write_bytes(data)
    rows = read(spark, front, [str(tmp_path / "broker-2")]).orderBy("offset").collect()
    assert [(r.offset, r.leader_epoch, r.value) for r in rows] == [
        (i, 3 if i < 40 else 4, f"{'z' * 20 if i < 40 else 'y' * 20}-{i}".encode()) for i in range(45)
    ]


def test_core_encoded_log_dirs_round_trip(spark, tmp_path, front) -> None:
    if not hasattr(_core, "encode_batch"):
        pytest.skip("core encoder not built")
    replicas = [Replica("enc", 0, [(0, records("e", 0, 10)), (2, records("e", 10, 5))], segment_records=10)]
    log_dir = write_log_dir(tmp_path, 4, replicas, writer="core")
    rows = read(spark, front, [str(log_dir)]).orderBy("offset").collect()
    assert [(r.offset, r.leader_epoch, r.key, r.value) for r in rows] == [
        (o, e, k, v) for o, e, k, v in replicas[0].records
    ]


def test_broker_id_sources(tmp_path) -> None:
    a = write_log_dir(tmp_path / "a", 11, [Replica("t", 0, [(0, records("x", 0, 1))])], meta="node.id")
    b = write_log_dir(tmp_path / "b", 12, [Replica("t", 0, [(0, records("x", 0, 1))])], meta="broker.id")
    c = write_log_dir(tmp_path / "c", 13, [Replica("t", 0, [(0, records("x", 0, 1))])], meta=None)
    renamed = tmp_path / "kafka-logs-99"
    shutil.copytree(b, renamed)  # meta.properties wins over the folder name
    listing = list_log_dirs([str(a), str(b), str(c)])
    assert [r.broker for r in listing.replicas] == [11, 12, 13]
    assert list_log_dirs([str(renamed)]).replicas[0].broker == 12
    with pytest.raises(ValueError, match="both belong to broker 12"):
        list_log_dirs([str(b), str(renamed)])
    plain = tmp_path / "logs"
    (plain / "t-0").mkdir(parents=True)
    with pytest.raises(ValueError, match="broker id"):
        list_log_dirs([str(plain)])


def test_listing_skips_folders_kafka_is_deleting(tmp_path) -> None:
    log_dir = write_log_dir(tmp_path, 1, [Replica("t", 0, [(0, records("x", 0, 1))])])
    (log_dir / "t-1.0123abcd-delete").mkdir()
    (log_dir / "t-2.0123abcd-future").mkdir()
    (log_dir / "t-0" / f"{5:020d}.log.deleted").write_bytes(b"junk")
    listing = list_log_dirs([str(log_dir)])
    assert [(r.topic, r.partition, [s.base_offset for s in r.segments]) for r in listing.replicas] == [("t", 0, [0])]


def test_corrupt_batch_is_reported_and_decoding_resumes_after_it(spark, tmp_path, front) -> None:
    replica = Replica("c", 0, [(0, records("a", 0, 3)), (0, records("a", 3, 3)), (0, records("a", 6, 3))])
    log_dir = write_log_dir(tmp_path, 1, [replica])
    segment = log_dir / "c-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    second = 12 + int.from_bytes(data[8:12], "big")
    data[second + 65] ^= 0x55  # a record byte of the second batch: its CRC fails
    segment.write_bytes(bytes(data) + data[:20])  # and a cut-off batch at the end
    df = read(spark, front, [str(log_dir)], with_errors=True)
    rows = df.orderBy("offset").collect()
    good = [r.offset for r in rows if r.error_reason is None]
    errors = sorted((r.path, r.error_position, r.error_reason) for r in rows if r.error_reason is not None)
    assert good == [0, 1, 2, 6, 7, 8]  # the third batch is still read
    assert [(p, pos) for p, pos, _ in errors] == [(str(segment), second), (str(segment), len(data))]
    assert "skipped the batch at" in errors[0][2] and "incomplete" in errors[1][2]
    with pytest.raises(Exception, match=r"(?i)crc|corrupt"):
        read(spark, front, [str(log_dir)]).collect()


def test_partial_tail_is_reported_not_dropped(spark, tmp_path, front) -> None:
    log_dir = write_log_dir(tmp_path, 1, [Replica("p", 0, [(0, records("a", 0, 2)), (0, records("a", 2, 2))])])
    segment = log_dir / "p-0" / f"{0:020d}.log"
    data = segment.read_bytes()
    segment.write_bytes(data[:-10])  # the last batch was cut mid-write
    rows = read(spark, front, [str(log_dir)], with_errors=True).collect()
    assert sorted(r.offset for r in rows if r.error_reason is None) == [0, 1]
    [error] = [r for r in rows if r.error_reason is not None]
    first_batch = 12 + int.from_bytes(data[8:12], "big")
    assert error.error_position == first_batch and "incomplete" in error.error_reason


def test_a_segment_that_shrinks_after_listing_is_reported(spark, tmp_path, front) -> None:
    """A live log dir changes under a read (the leader truncates, retention deletes): a segment found
    shorter when read than when listed is read as far as it goes, then an error row; a batch its new
    end cuts is the incomplete one; a segment gone is one row naming the bytes not decoded."""
    batches: list[Batch] = [(0, records("a", 0, 2)), (0, records("a", 2, 2)), (0, records("a", 4, 2))]
    log_dir = write_log_dir(tmp_path, 1, [Replica("s", 0, batches), Replica("g", 0, batches)])
    segment, gone = (log_dir / f"{t}-0" / f"{0:020d}.log" for t in "sg")
    data = segment.read_bytes()
    second = 12 + int.from_bytes(data[8:12], "big")
    third = second + 12 + int.from_bytes(data[second + 8 : second + 12], "big")
    for cut, want in [
        (third, (third, f"the file ends at byte {third}, shorter than when listed; bytes {third}..{len(data)} not decoded")),
        (second + 20, (second, "incomplete batch at the end: 20 bytes")),
    ]:
        segment.write_bytes(data)
        gone.write_bytes(data)
        df = read(spark, front, [str(log_dir)], with_errors=True).select("topic", "offset", "error_position", "error_reason")
        df._jdf.queryExecution().executedPlan().execute()  # listed and its RDD made, not yet read
        segment.write_bytes(data[:cut])
        gone.unlink()
        rows = df.collect()
        kept = sorted(r.offset for r in rows if r.topic == "s" and r.error_reason is None)
        assert kept == list(range(4 if cut == third else 2))
        assert [(r.error_position, r.error_reason) for r in rows if r.topic == "s" and r.error_reason] == [want]
        [missing] = [r for r in rows if r.topic == "g"]
        assert missing.error_position == 0 and missing.error_reason.endswith(f"; bytes 0..{len(data)} not decoded")


def test_decode_batches_on_a_binary_column(spark) -> None:
    from .kafka_logs import kafka_python_batch

    cells = [
        ("a", kafka_python_batch(records("x", 0, 2), 100, 3) + kafka_python_batch(records("x", 2, 1), 102, 4)),
        ("b", None),
    ]
    df = spark.createDataFrame(cells, "name string, bytes binary")
    rows = decode_batches(df, "bytes").orderBy("offset").collect()
    assert [(r.name, r.offset, r.leader_epoch, r.value) for r in rows] == [
        ("a", 100, 3, b"x-0"),
        ("a", 101, 3, b"x-1"),
        ("a", 102, 4, b"x-2"),
    ]
    assert decode_batches(df, "bytes").columns[0] == "name"


def test_projected_read_matches_the_full_read(spark, ldi_dir, tmp_path, front) -> None:
    """A projection (location, record and computed columns, in any order) holds the same values as
    the full read, on real segments and on a corrupt one read with errors."""
    from pyspark.sql import functions as F

    full = read(spark, front, [str(ldi_dir)]).select(
        "offset",
        "topic",
        F.length("value").alias("value_length"),
        F.length("key").alias("key_length"),
        F.size("headers").alias("headers_count"),
        "leader_epoch",
    )
    columns = ["offset", "topic", "value_length", "key_length", "headers_count", "leader_epoch"]
    projected = read(spark, front, [str(ldi_dir)], columns=columns)
    assert projected.columns == columns
    assert projected.orderBy("topic", "offset").collect() == full.orderBy("topic", "offset").collect()
    digests = read(spark, front, [str(ldi_dir)], columns=["record_digest"]).collect()
    assert len(digests) == full.count() and len({r.record_digest for r in digests}) > 1
    with pytest.raises(Exception, match="unknown"):
        read(spark, front, [str(ldi_dir)], columns=["offset", "nope"]).collect()


def test_projected_read_with_errors_keeps_the_error_columns(spark, tmp_path, front) -> None:
    replica = Replica("c", 0, [(0, records("a", 0, 3)), (0, records("a", 3, 3))])
    log_dir = write_log_dir(tmp_path, 1, [replica])
    segment = log_dir / "c-0" / f"{0:020d}.log"
    segment.write_bytes(segment.read_bytes()[:-4])  # the second batch is cut off
    rows = read(spark, front, [str(log_dir)], columns=["offset", "value_length"], with_errors=True).collect()
    assert rows[0].__fields__ == ["offset", "value_length", "path", "error_position", "error_reason"]
    assert sorted(r.offset for r in rows if r.error_reason is None) == [0, 1, 2]
    assert [r.path for r in rows if r.error_reason is not None] == [str(segment)]


def test_malformed_files_are_listing_errors_naming_file_and_line(tmp_path) -> None:
    log_dir = write_log_dir(tmp_path, 3, [Replica("t", 0, [(0, records("x", 0, 2))])])
    (log_dir / "t-0" / "foo.log").write_bytes(b"not a segment")
    (log_dir / "t-0" / "partition.metadata").write_text("version: 0\n")
    (log_dir / "replication-offset-checkpoint").write_text("0\n2\nt 0 1\n")
    (log_dir / "t-0" / "leader-epoch-checkpoint").write_text("0\n1\n0 zero\n")
    listing = list_log_dirs([str(log_dir)])
    (replica,) = listing.replicas
    assert [s.base_offset for s in replica.segments] == [0]
    assert (replica.topic_id, replica.high_watermark, replica.epochs) == (None, None, None)
    errors = {Path(e.path).name: e for e in listing.errors}
    assert set(errors) == {"foo.log", "partition.metadata", "replication-offset-checkpoint", "leader-epoch-checkpoint"}
    assert "line 2" in errors["partition.metadata"].reason and errors["partition.metadata"].topic == "t"
    assert "line 2" in errors["replication-offset-checkpoint"].reason  # the count line: 2 entries said, 1 held
    assert "line 3" in errors["leader-epoch-checkpoint"].reason
    assert "not a segment" in errors["foo.log"].reason and errors["foo.log"].broker == 3


def test_meta_properties_version_decides_the_broker_id(tmp_path) -> None:
    log_dir = write_log_dir(tmp_path, 5, [Replica("t", 0, [(0, records("x", 0, 1))])])
    (log_dir / "meta.properties").write_text("version=1\ncluster.id=c\nnode.id=8\nbroker.id=9\n")
    assert list_log_dirs([str(log_dir)]).replicas[0].broker == 8
    (log_dir / "meta.properties").write_text("version=0\nnode.id=8\nbroker.id=9\n")
    assert list_log_dirs([str(log_dir)]).replicas[0].broker == 9
    (log_dir / "meta.properties").write_text("version=1\nnode.id=eight\ncluster.id=c\n")
    listing = list_log_dirs([str(log_dir)])  # malformed: an error row, the id from the folder name
    assert listing.replicas[0].broker == 5 and "line 2" in listing.errors[0].reason


def test_the_jvm_reader_lists_log_dirs_as_the_python_listing(spark, tmp_path) -> None:
    """The JVM reader lists log dirs in Java (tools/kafka-log-reader Listing.java): the same broker ids
    as list_log_dirs (meta.properties by Kafka's version rules, else the folder name) and the same
    folders and files skipped."""
    require_jvm(spark)
    metas = {
        "v1": "version=1\ncluster.id=c\nnode.id=8\nbroker.id=9\n",  # node.id
        "v0": "version=0\nnode.id=8\nbroker.id=9\n",  # broker.id
        "bad": "version=1\nnode.id=eight\ncluster.id=c\n",  # malformed: the folder name's 5
        "v1-no-cluster": "version=1\nnode.id=8\n",  # malformed too: 6
    }
    dirs = []
    for (name, meta), folder_id in zip(metas.items(), (1, 2, 5, 6), strict=True):
        log_dir = write_log_dir(tmp_path / name, folder_id, [Replica("t", 0, [(0, records("x", 0, 1))])])
        (log_dir / "meta.properties").write_text(meta)
        dirs.append(str(log_dir))
    (Path(dirs[0]) / "t-1.0123abcd-delete").mkdir()
    (Path(dirs[0]) / "t-0" / f"{5:020d}.log.deleted").write_bytes(b"junk")
    (Path(dirs[0]) / "t-0" / "foo.log").write_bytes(b"not a segment")
    python = [(r.broker, r.topic, r.partition, [s.base_offset for s in r.segments]) for r in list_log_dirs(dirs).replicas]
    assert [b for b, *_ in python] == [8, 9, 5, 6]
    jvm = read(spark, JVM, dirs).select("broker", "topic", "partition", "segment").distinct().collect()
    assert sorted(tuple(r) for r in jvm) == sorted((b, t, p, s) for b, t, p, segments in python for s in segments)

"""PartitionLog behaviours pinned through the public API: `write_to` round trips, a partition directory
without segments, and the rename of an empty active segment when offsets jump."""

from __future__ import annotations

from protocol_support import TP, kafka_python_batch, recs

from epochguard import PartitionLog, iter_batches


def batches_of(log: PartitionLog) -> list[tuple[int, int, list[bytes]]]:
    return [(b.base_offset, b.partition_leader_epoch, [r.value for r in b.records()]) for b in log.batches()]


def test_write_to_writes_segments_that_read_back_equal(tmp_path):
    log = PartitionLog(TP, segment_bytes=200)  # in memory: write_to is the only way to disk
    for epoch in (0, 0, 2, 2, 2, 5):
        log.append_as_leader(recs(2, f"e{epoch}-"), epoch, timestamp_ms=1_000)
    assert len(log.segments) > 1
    target = tmp_path / "t-0"
    target.mkdir()
    (target / "00000000000000000099.log").write_bytes(b"stale")  # a previous write's leftover
    assert log.write_to(target) == target
    names = sorted(p.name for p in target.glob("*.log"))
    assert names == [f"{s.base_offset:020d}.log" for s in log.segments]
    back = PartitionLog.open(target, segment_bytes=200, write_through=False)
    assert batches_of(back) == batches_of(log)
    assert back.read(0) == log.read(0)
    assert back.leader_epoch_cache.entries() == log.leader_epoch_cache.entries() == [(0, 0), (2, 4), (5, 10)]
    assert (back.log_start_offset, back.log_end_offset) == (0, 12)
    assert [s.base_offset for s in back.segments] == [s.base_offset for s in log.segments]


def test_opening_a_partition_directory_without_a_log_file(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    log = PartitionLog.open(d)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark, log.latest_epoch) == (0, 0, 0, None)
    assert (d / "00000000000000000000.log").exists()
    log.append_as_leader(recs(2), 3)
    assert log.log_end_offset == 2 and log.leader_epoch_cache.entries() == [(3, 0)]
    assert [b.base_offset for b in iter_batches(d / "00000000000000000000.log")] == [0]


def test_opening_an_empty_partition_directory_at_a_known_log_start(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    log = PartitionLog.open(d, log_start_offset=7, high_watermark=9)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (7, 7, 7)
    assert sorted(p.name for p in d.glob("*.log")) == ["00000000000000000007.log"]


def test_an_empty_active_segment_takes_the_first_offset_written_when_offsets_jump(tmp_path):
    d = tmp_path / "t-0"
    log = PartitionLog(TP, directory=d)
    assert sorted(p.name for p in d.glob("*.log")) == ["00000000000000000000.log"]
    log.append_as_follower(kafka_python_batch(10, 2, [b"a", b"b"]))
    assert [s.base_offset for s in log.segments] == [10]
    assert sorted(p.name for p in d.glob("*.log")) == ["00000000000000000010.log"]  # the stale file is gone
    assert [b.base_offset for b in iter_batches(d / "00000000000000000010.log")] == [10]
    assert log.log_end_offset == 12


def test_a_segment_that_holds_batches_is_not_renamed(tmp_path):
    d = tmp_path / "t-0"
    log = PartitionLog(TP, directory=d)
    log.append_as_follower(kafka_python_batch(0, 1, [b"a"]))
    log.append_as_follower(kafka_python_batch(5, 1, [b"b"]))  # a gap (compaction), same segment
    assert [s.base_offset for s in log.segments] == [0]
    assert sorted(p.name for p in d.glob("*.log")) == ["00000000000000000000.log"]
    assert [b.base_offset for b in iter_batches(d / "00000000000000000000.log")] == [0, 5]

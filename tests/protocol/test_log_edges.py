"""PartitionLog behaviours pinned through the public API: `write_to` round trips, a partition directory
without segments, the rename of an empty active segment when offsets jump, timestamp lookups at their
edges, and log start offsets."""

from __future__ import annotations

import pytest
from protocol_support import TP, kafka_python_batch, kafka_python_legacy_batch, recs

from epochguard import CorruptRecordError, PartitionLog, iter_batches
from epochguard.errors import MalformedFileError
from epochguard.storage.log import UnexpectedAppendOffsetError


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


def test_opening_without_a_checkpoint_rebuilds_the_epochs_from_batches_that_carry_one(tmp_path):
    """A v2 batch with partition leader epoch -1 (written before KIP-101) and legacy message sets add
    no epoch entry: the cache is rebuilt from the batches that have one (`LeaderEpochFileCache` is
    only ever assigned epochs >= 0)."""
    d = tmp_path / "t-0"
    d.mkdir()
    data = kafka_python_legacy_batch(0, [b"old"]) + kafka_python_batch(1, -1, [b"a", b"b"]) + kafka_python_batch(3, 2, [b"c"])
    (d / "00000000000000000000.log").write_bytes(data)
    log = PartitionLog.open(d)
    assert log.log_end_offset == 4 and log.leader_epoch_cache.entries() == [(2, 3)]


def test_opening_a_partition_directory_with_a_stray_log_file_is_a_typed_error_and_changes_nothing(tmp_path):
    # Kafka's LogLoader parses every `*.log` name as a base offset and fails the log dir on one that
    # is not; epochguard says which file, before it touches any segment (no recovery truncation).
    d = tmp_path / "t-0"
    log = PartitionLog(TP, directory=d)
    log.append_as_leader(recs(3), 1)
    segment = d / "00000000000000000000.log"
    with segment.open("ab") as f:
        f.write(b"partial tail")  # open() would cut this off if it got that far
    before = segment.read_bytes()
    (d / "foo.log").write_bytes(b"")
    with pytest.raises(MalformedFileError) as info:
        PartitionLog.open(d)
    assert info.value.path == str(d / "foo.log")
    assert "base offset" in info.value.reason
    assert segment.read_bytes() == before


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


def timed_log() -> PartitionLog:
    """Batches [0-1] ts 100,300 (epoch 1), [2-3] ts 200,250 (epoch 2), [4-5] ts 500,400 (epoch 4)."""
    log = PartitionLog(TP)
    for epoch, stamps in ((1, (100, 300)), (2, (200, 250)), (4, (500, 400))):
        log.append_as_leader([(None, b"v%d" % ts, [], ts) for ts in stamps], epoch)
    return log


def test_offset_for_timestamp_finds_the_first_record_at_or_after_the_target():
    log = timed_log()
    assert log.offset_for_timestamp(300) == (1, 300, 1)  # the target is the batch's max timestamp
    assert log.offset_for_timestamp(301) == (4, 500, 4)
    assert log.offset_for_timestamp(0) == (0, 100, 1)
    assert log.offset_for_timestamp(501) is None


def test_offset_for_timestamp_stops_at_the_upper_bound():
    log = timed_log()
    assert log.offset_for_timestamp(301, upper_bound=4) is None  # the batch starting at the bound is out
    assert log.offset_for_timestamp(301, upper_bound=5) == (4, 500, 4)


def test_offset_for_timestamp_skips_records_below_the_log_start():
    log = timed_log()
    log.update_high_watermark(6)
    log.increment_log_start_offset(1)  # inside the first batch: record 0 (ts 100) is gone
    assert log.offset_for_timestamp(50) == (1, 300, 1)


def test_offset_of_max_timestamp_respects_the_log_start_and_the_upper_bound():
    log = timed_log()
    assert log.offset_of_max_timestamp() == (4, 500, 4)
    assert log.offset_of_max_timestamp(upper_bound=4) == (1, 300, 1)
    assert log.offset_of_max_timestamp(upper_bound=1) == (0, 100, 1)  # record 1 sits at the bound
    log.update_high_watermark(6)
    log.increment_log_start_offset(1)
    assert log.offset_of_max_timestamp(upper_bound=2) == (1, 300, 1)  # the record at the log start counts


def test_epoch_for_offset():
    log = timed_log()
    assert [log.epoch_for_offset(o) for o in (0, 1, 2, 3, 4, 5)] == [1, 1, 2, 2, 4, 4]


def test_truncate_fully_and_start_at_names_the_new_segment_after_its_offset(tmp_path):
    d = tmp_path / "t-0"
    log = PartitionLog(TP, directory=d)
    log.append_as_leader(recs(3), 0)
    log.truncate_fully_and_start_at(7)
    assert [s.base_offset for s in log.segments] == [7]
    assert sorted(p.name for p in d.glob("*.log")) == ["00000000000000000007.log"]
    assert log.append_as_leader(recs(1), 1).first_offset == 7


def test_write_to_creates_missing_parent_directories(tmp_path):
    log = timed_log()
    target = log.write_to(tmp_path / "backup" / "broker-1" / "t-0")
    assert PartitionLog.open(target, write_through=False).read(0) == log.read(0)


def test_increment_log_start_offset_to_the_current_start_changes_nothing():
    log = timed_log()
    log.update_high_watermark(6)
    assert log.increment_log_start_offset(0) is False
    assert log.increment_log_start_offset(2) is True and log.increment_log_start_offset(2) is False


def test_increment_log_start_offset_drops_every_segment_wholly_below_it(tmp_path):
    d = tmp_path / "t-0"
    log = PartitionLog(TP, directory=d, segment_bytes=100)  # one 2-record batch per segment
    for epoch in range(6):
        log.append_as_leader(recs(2), epoch)
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6, 8, 10]
    log.update_high_watermark(12)
    log.increment_log_start_offset(4)  # exactly a segment's base: the segments before it go
    assert [s.base_offset for s in log.segments] == [4, 6, 8, 10]
    log.increment_log_start_offset(12)
    assert [s.base_offset for s in log.segments] == [10]
    assert sorted(p.name for p in d.glob("*.log")) == ["00000000000000000010.log"]


def test_a_segment_file_removed_behind_the_logs_back_does_not_break_truncation(tmp_path):
    d = tmp_path / "t-0"
    log = PartitionLog(TP, directory=d)
    log.append_as_leader(recs(2), 0)
    (d / "00000000000000000000.log").unlink()
    log.truncate_fully_and_start_at(5)
    assert sorted(p.name for p in d.glob("*.log")) == ["00000000000000000005.log"]


def test_an_unexpected_append_offset_says_where():
    log = timed_log()
    with pytest.raises(UnexpectedAppendOffsetError, match=r"^t-0: first offset 1 is below the log end offset 6$") as raised:
        log.append_as_follower(kafka_python_batch(1, 5, [b"x"]))
    assert (raised.value.first_offset, raised.value.last_offset) == (1, 1)


def segmented(tmp_path, *, checkpoint: bool = True):
    """Three one-batch segments (epochs 0, 0, 2) written through to t-0/."""
    d = tmp_path / "t-0"
    log = PartitionLog(TP, directory=d, segment_bytes=100)
    for epoch in (0, 0, 2):
        log.append_as_leader(recs(2), epoch)
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    if not checkpoint:
        (d / "leader-epoch-checkpoint").unlink()
    return d, log


def test_open_without_write_through_leaves_the_directory_alone(tmp_path):
    d, _ = segmented(tmp_path)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    log = PartitionLog.open(d, segment_bytes=100, write_through=False)
    log.append_as_leader(recs(2), 3)
    log.truncate_to(2)
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before


def test_open_with_write_through_keeps_writing_to_the_directory(tmp_path):
    d, _ = segmented(tmp_path)
    log = PartitionLog.open(d, segment_bytes=1 << 20)
    log.append_as_leader(recs(2), 3)
    assert [b.base_offset for b in iter_batches(d / "00000000000000000004.log")] == [4, 6]
    assert (d / "leader-epoch-checkpoint").read_text().endswith("3 6\n")


def test_a_corrupt_tail_drops_every_later_segment(tmp_path):
    d, _ = segmented(tmp_path)
    first = d / "00000000000000000000.log"
    first.write_bytes(first.read_bytes()[:-3])  # the only batch of the first segment is torn
    log = PartitionLog.open(d, segment_bytes=100)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert sorted(p.name for p in d.glob("*.log")) == ["00000000000000000000.log"]
    assert first.read_bytes() == b""


def test_open_starts_the_log_at_its_first_segment(tmp_path):
    d, log = segmented(tmp_path)
    log.update_high_watermark(6)
    log.increment_log_start_offset(4)  # the segments below 4 are deleted
    reopened = PartitionLog.open(d, segment_bytes=100)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (4, 6)


def test_open_without_a_checkpoint_rebuilds_epochs_from_the_batches(tmp_path):
    d, _ = segmented(tmp_path, checkpoint=False)
    log = PartitionLog.open(d, segment_bytes=100)
    assert log.leader_epoch_cache.entries() == [(0, 0), (2, 4)]
    assert (d / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n2 4\n"


def test_open_without_a_checkpoint_ignores_legacy_batches(tmp_path):
    from protocol_support import kafka_python_legacy_batch

    d = tmp_path / "t-0"
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(kafka_python_legacy_batch(0, [b"a", b"b"]))
    log = PartitionLog.open(d)
    assert (log.log_end_offset, log.leader_epoch_cache.entries()) == (2, [])


def test_a_directory_name_that_is_not_topic_dash_partition_is_refused_by_name(tmp_path):
    from epochguard.storage.log import parse_partition_dir_name

    with pytest.raises(ValueError, match=r"^not a partition directory name: 'segments'$"):
        parse_partition_dir_name("segments")


# --- a producer's raw batches ------------------------------------------------------------------------
def test_append_raw_as_leader_stamps_offset_and_epoch_and_keeps_the_rest():
    """The wire path (`Partition.append_records_to_leader` with bytes): kafka-python's batch keeps its
    records and CRC; only the base offset (the log end) and the partition leader epoch are set."""
    log = PartitionLog(TP)
    log.append_as_leader(recs(2), 0)
    produced = kafka_python_batch(0, -1, [b"a", b"b", b"c"])  # as a producer sends it: offset 0, no epoch
    info = log.append_raw_as_leader(bytearray(produced), 3)
    assert (info.first_offset, info.last_offset, info.batches) == (2, 4, 1)
    assert batches_of(log)[-1] == (2, 3, [b"a", b"b", b"c"])
    assert log.leader_epoch_cache.entries() == [(0, 0), (3, 2)]
    assert log.log_end_offset == 5
    fresh = PartitionLog(TP)
    fresh.append_raw_as_leader(produced, 0)  # epoch 0 is a real epoch
    assert batches_of(fresh) == [(0, 0, [b"a", b"b", b"c"])]


def test_append_raw_as_leader_refuses_a_negative_epoch_and_data_without_a_batch():
    log = PartitionLog(TP)
    with pytest.raises(ValueError, match="invalid leader epoch -1"):
        log.append_raw_as_leader(kafka_python_batch(0, -1, [b"a"]), -1)
    with pytest.raises(CorruptRecordError, match="no record batch"):
        log.append_raw_as_leader(b"", 1)
    with pytest.raises(CorruptRecordError):
        log.append_raw_as_leader(kafka_python_batch(0, -1, [b"a"])[:-1], 1)  # one byte short
    assert log.log_end_offset == 0 and log.leader_epoch_cache.entries() == []

"""PartitionLog at its bounds (Kafka's `UnifiedLog.truncateTo`, `LogLoader`, `fetchOffsetByTimestamp`):
truncation at, below and before the log, the end bound of `batches` and of timestamp lookups, and a
segment file that is not named for its base offset."""

from __future__ import annotations

import pytest
from protocol_support import recs

from epochguard._core import iter_batches
from epochguard.errors import MalformedFileError
from epochguard.storage.log import PartitionLog
from epochguard.types import TopicPartition

TP = TopicPartition("t", 0)


def three_batches() -> PartitionLog:
    """Batches [0-1] epoch 1 (timestamps 100, 300), [2-3] epoch 2 (200, 250), [4-5] epoch 4 (500, 400)."""
    log = PartitionLog(TP)
    for epoch, stamps in ((1, (100, 300)), (2, (200, 250)), (4, (500, 400))):
        log.append_as_leader([(None, b"v%d" % ts, [], ts) for ts in stamps], epoch)
    return log


# --- truncation -----------------------------------------------------------------------------------------
def test_truncating_to_the_log_end_removes_no_data():
    log = three_batches()
    assert log.truncate_to(6) is False
    assert (log.log_end_offset, [b.base_offset for b in log.batches()]) == (6, [0, 2, 4])


def test_a_negative_truncation_offset_is_refused_with_the_offset_named():
    log = three_batches()
    with pytest.raises(ValueError, match=r"^cannot truncate to a negative offset -1$"):
        log.truncate_to(-1)
    assert log.log_end_offset == 6


def test_truncating_below_the_first_segment_restarts_the_log_empty_at_that_offset():
    """`truncateTo`: a target below the first segment's base is `truncateFullyAndStartAt(target)`."""
    log = PartitionLog(TP, log_start_offset=10)
    log.append_as_leader(recs(3), 2)
    assert log.truncate_to(4) is True
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark, len(log.leader_epoch_cache)) == (4, 4, 4, 0)
    assert log.append_as_leader(recs(1), 3).first_offset == 4


def test_truncating_to_the_first_segments_base_empties_the_log_there(tmp_path):
    d = tmp_path / "t-0"
    log = PartitionLog(TP, directory=d, log_start_offset=10, segment_bytes=100)
    for _ in range(3):
        log.append_as_leader(recs(2), 2)
    assert len(list(d.glob("*.log"))) > 1
    assert log.truncate_to(10) is True
    assert (log.log_start_offset, log.log_end_offset, len(log.leader_epoch_cache)) == (10, 10, 0)
    assert [p.name for p in d.glob("*.log")] == ["00000000000000000010.log"]
    assert (d / "00000000000000000010.log").read_bytes() == b""


def test_truncating_to_a_segments_base_keeps_that_segment_emptied_as_kafka_does(tmp_path):
    """`LocalLog.truncateTo` deletes the segments based above the target; the one based at it stays, empty,
    and takes the next append."""
    d = tmp_path / "t-0"
    log = PartitionLog(TP, directory=d, segment_bytes=100)
    for epoch in (1, 2, 3):
        log.append_as_leader(recs(2), epoch)
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    assert log.truncate_to(2) is True
    assert sorted(p.name for p in d.glob("*.log")) == ["00000000000000000000.log", "00000000000000000002.log"]
    assert (d / "00000000000000000002.log").read_bytes() == b""
    assert (log.log_end_offset, log.leader_epoch_cache.entries()) == (2, [(1, 0)])
    log.append_as_leader(recs(1), 4)
    assert [b.base_offset for b in iter_batches(d / "00000000000000000002.log")] == [2]


def test_the_leaders_high_watermark_only_rises_within_the_log_and_says_whether_it_moved():
    log = three_batches()
    assert log.maybe_increment_high_watermark(4) is True and log.high_watermark == 4
    assert log.maybe_increment_high_watermark(4) is False  # already there
    assert log.maybe_increment_high_watermark(3) is False and log.high_watermark == 4  # never down
    assert log.maybe_increment_high_watermark(7) is False and log.high_watermark == 4  # not past the LEO
    assert log.maybe_increment_high_watermark(6) is True and log.high_watermark == 6


# --- read bounds -------------------------------------------------------------------------------------------
def test_batches_end_before_the_batch_that_starts_at_the_end_bound():
    log = three_batches()
    assert [b.base_offset for b in log.batches(end=4)] == [0, 2]
    assert [b.base_offset for b in log.batches(end=5)] == [0, 2, 4]
    assert [b.base_offset for b in log.batches(start=3, end=6)] == [2, 4]


def test_batches_start_at_the_batch_holding_the_log_start_by_default():
    log = three_batches()
    log.update_high_watermark(6)
    log.increment_log_start_offset(3)
    assert [b.base_offset for b in log.batches()] == [2, 4]


def test_a_record_at_the_upper_bound_is_not_found_by_timestamp_even_inside_a_kept_batch():
    """The first record at or after timestamp 200 is offset 1 (ts 300), in batch [0-1]: with the bound at
    1 it is out, and so is everything after it."""
    log = three_batches()
    assert log.offset_for_timestamp(200) == (1, 300, 1)
    assert log.offset_for_timestamp(200, upper_bound=1) is None
    assert log.offset_for_timestamp(200, upper_bound=2) == (1, 300, 1)


def six_batches_in_three_segments() -> PartitionLog:
    """Batches of two records at 0, 2, ..., 10 (epochs 1-6), two per segment: segments at 0, 4 and 8."""
    log = PartitionLog(TP, segment_bytes=2 * 79)
    for epoch in range(1, 7):
        log.append_as_leader(recs(2), epoch)
    assert [s.base_offset for s in log.segments] == [0, 4, 8]
    return log


@pytest.mark.parametrize("start", range(12))
def test_batches_and_reads_start_at_the_batch_holding_any_offset_of_any_segment(start):
    log = six_batches_in_three_segments()
    expected = list(range(start - start % 2, 12, 2))
    assert [b.base_offset for b in log.batches(start=start)] == expected
    assert [b.base_offset for b in iter_batches(log.read(start))] == expected


@pytest.mark.parametrize(("max_bytes", "batches"), [(1, 1), (157, 1), (158, 2), (236, 2), (237, 3), (474, 6)])
def test_a_read_takes_whole_batches_while_they_fit_in_max_bytes_across_segments(max_bytes, batches):
    """At least one batch; then each next batch only if the total stays within max_bytes (79 bytes each)."""
    log = six_batches_in_three_segments()
    data = log.read(2, max_bytes=max_bytes)
    assert [b.base_offset for b in iter_batches(data)] == list(range(2, 12, 2))[:batches]
    assert len(data) == 79 * min(batches, 5)


def test_a_read_at_its_upper_bound_is_empty_even_when_the_bound_is_inside_a_batch():
    log = six_batches_in_three_segments()
    assert log.read(5, upper_bound=5) == b""
    assert [b.base_offset for b in iter_batches(log.read(4, upper_bound=5))] == [4]


# --- segment names -------------------------------------------------------------------------------------------
def test_a_segment_not_named_for_its_base_offset_fails_the_partition_as_a_whole(tmp_path):
    """`MalformedFileError`: line 0 is the file as a whole (a name, not a line of it)."""
    d = tmp_path / "t-0"
    PartitionLog(TP, directory=d).append_as_leader(recs(1), 0)
    bad = d / "0000000000000000000x.log"
    bad.write_bytes(b"")
    with pytest.raises(MalformedFileError) as info:
        PartitionLog.open(d)
    assert (info.value.path, info.value.line) == (str(bad), 0)
    assert str(info.value) == f"{bad}: a .log file whose name is not a 20-digit base offset"

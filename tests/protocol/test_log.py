"""PartitionLog: real v2 batches, epochs assigned per SPEC (a) Callers, truncateTo, segments on disk."""

from __future__ import annotations

import pytest
from protocol_support import TP, kafka_python_batch, kafka_python_legacy_batch, recs

from epochguard._core import LeaderEpochCache, iter_batches
from epochguard.storage.log import (
    PartitionLog,
    UnexpectedAppendOffsetError,
    parse_partition_dir_name,
    segment_file_name,
)


def test_append_as_leader_stamps_epoch_and_assigns_cache():
    log = PartitionLog(TP)
    a = log.append_as_leader(recs(3), 0, timestamp_ms=100)
    b = log.append_as_leader(recs(2), 0, timestamp_ms=200)
    c = log.append_as_leader(recs(4), 2, timestamp_ms=300)
    assert (a.first_offset, a.last_offset, b.first_offset, c.first_offset, c.last_offset) == (0, 2, 3, 5, 8)
    assert log.log_end_offset == 9 and log.log_start_offset == 0 and log.high_watermark == 0
    assert log.leader_epoch_cache.entries() == [(0, 0), (2, 5)]
    batches = list(iter_batches(log.read(0)))
    assert [(x.base_offset, x.partition_leader_epoch, x.records_count) for x in batches] == [(0, 0, 3), (3, 0, 2), (5, 2, 4)]
    assert [r.value for r in batches[2].records()] == [b"v0", b"v1", b"v2", b"v3"]
    assert batches[1].records()[0].timestamp == 200


def test_new_leader_assigns_epoch_at_leo_before_writing():
    log = PartitionLog(TP)
    log.append_as_leader(recs(2), 1)
    log.assign_epoch_start(3)
    assert log.leader_epoch_cache.entries() == [(1, 0), (3, 2)]
    log.truncate_to(log.log_end_offset)  # truncateTo(LEO) drops an epoch never written to (SPEC (a))
    assert log.leader_epoch_cache.entries() == [(1, 0)]


def test_read_bounds_and_batch_granularity():
    log = PartitionLog(TP)
    for _ in range(3):
        log.append_as_leader(recs(2), 0)
    assert [b.base_offset for b in iter_batches(log.read(3))] == [2, 4]  # from the batch holding offset 3
    assert [b.base_offset for b in iter_batches(log.read(0, upper_bound=4))] == [0, 2]
    assert log.read(6) == b"" and log.read(2, upper_bound=2) == b""
    one = log.read(0, max_bytes=1)  # at least one batch even when it is bigger than max_bytes
    assert [b.base_offset for b in iter_batches(one)] == [0]


def test_append_as_follower_takes_kafka_python_batches_verbatim():
    log = PartitionLog(TP)
    raw = kafka_python_batch(0, 4, [b"a", b"b"]) + kafka_python_batch(2, 5, [b"c"])
    info = log.append_as_follower(raw)
    assert (info.first_offset, info.last_offset, info.batches) == (0, 2, 2)
    assert log.read(0) == raw  # byte for byte
    assert log.leader_epoch_cache.entries() == [(4, 0), (5, 2)]
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(kafka_python_batch(1, 5, [b"x"]))


def test_append_as_follower_leaves_a_partial_tail_out():
    log = PartitionLog(TP)
    whole = kafka_python_batch(0, 1, [b"a"])
    nxt = kafka_python_batch(1, 1, [b"b"])
    log.append_as_follower(whole + nxt[:10])
    assert log.log_end_offset == 1 and log.read(0) == whole
    assert log.append_as_follower(nxt[:10]) is None


def test_legacy_batch_clears_the_epoch_cache():
    log = PartitionLog(TP)
    log.append_as_follower(kafka_python_batch(0, 3, [b"a"]))
    assert len(log.leader_epoch_cache) == 1
    log.append_as_follower(kafka_python_legacy_batch(1, [b"b", b"c"]))
    assert len(log.leader_epoch_cache) == 0 and log.log_end_offset == 3


def test_truncate_to_drops_batches_and_epochs():
    log = PartitionLog(TP)
    log.append_as_leader(recs(2), 0)  # 0-1
    log.append_as_leader(recs(2), 1)  # 2-3
    log.append_as_leader(recs(2), 2)  # 4-5
    log.update_high_watermark(6)
    assert log.truncate_to(4)
    assert log.log_end_offset == 4 and log.high_watermark == 4
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 2)]
    assert [b.base_offset for b in iter_batches(log.read(0))] == [0, 2]
    assert not log.truncate_to(10)  # beyond the LEO: nothing to drop
    log.truncate_to(0)
    assert log.log_end_offset == 0 and len(log.leader_epoch_cache) == 0
    log.append_as_leader(recs(1), 5)  # the log continues at the truncation point
    assert log.leader_epoch_cache.entries() == [(5, 0)]


def test_truncate_below_the_log_start_lowers_the_log_start():
    """Kafka's `truncateTo`: logStartOffset = min(target, logStartOffset). The log start (DeleteRecords)
    lies inside batch 4-7; truncating to 5 drops that batch, so the log start cannot stay at 6."""
    log = PartitionLog(TP)
    log.append_as_leader(recs(4), 1)  # 0-3
    log.append_as_leader(recs(4), 2)  # 4-7
    log.update_high_watermark(8)
    log.increment_log_start_offset(6)
    assert log.truncate_to(5)
    assert log.log_end_offset == 4 and log.log_start_offset <= 4 and log.high_watermark == log.log_start_offset
    log.append_as_follower(kafka_python_batch(4, 3, [b"x"]))  # the log continues at its end
    assert log.log_end_offset == 5 and log.read(log.log_start_offset) != b""


def test_truncate_at_leo_drops_an_epoch_never_written_to():
    log = PartitionLog(TP)
    log.append_as_leader(recs(2), 0)
    log.leader_epoch_cache.assign(4, 5)  # an entry beyond the LEO (e.g. a stale checkpoint)
    log.truncate_to(2)
    assert log.leader_epoch_cache.entries() == [(0, 0)]


def test_truncate_fully_and_start_at():
    log = PartitionLog(TP)
    log.append_as_leader(recs(3), 1)
    log.truncate_fully_and_start_at(10)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (10, 10, 10)
    assert len(log.leader_epoch_cache) == 0
    log.append_as_follower(kafka_python_batch(10, 2, [b"x"]))
    assert log.leader_epoch_cache.entries() == [(2, 10)]


def test_increment_log_start_offset_truncates_cache_from_start():
    log = PartitionLog(TP, segment_bytes=1)  # one batch per segment
    log.append_as_leader(recs(2), 0)  # 0-1
    log.append_as_leader(recs(2), 1)  # 2-3
    log.append_as_leader(recs(2), 1)  # 4-5
    log.update_high_watermark(6)
    assert log.increment_log_start_offset(3)
    assert log.log_start_offset == 3
    assert [s.base_offset for s in log.segments] == [2, 4]  # whole segments below the start are gone
    assert log.leader_epoch_cache.entries() == [(1, 3)]
    log.update_high_watermark(0)
    assert log.high_watermark == 3  # never below the log start
    assert not log.increment_log_start_offset(2)


def test_offset_for_timestamp_returns_batch_epoch():
    log = PartitionLog(TP)
    log.append_as_leader(recs(2), 0, timestamp_ms=100)
    log.append_as_leader(recs(2), 3, timestamp_ms=200)
    assert log.offset_for_timestamp(0) == (0, 100, 0)
    assert log.offset_for_timestamp(150) == (2, 200, 3)
    assert log.offset_for_timestamp(10_000) is None
    assert log.offset_for_timestamp(150, upper_bound=2) is None
    assert log.offset_of_max_timestamp() == (2, 200, 3)


def test_segments_roll_by_size_and_round_trip_through_a_directory(tmp_path):
    d = tmp_path / "t-0"
    log = PartitionLog(TP, directory=d, segment_bytes=200)
    for epoch in (0, 0, 1, 1, 1, 4):
        log.append_as_leader(recs(2, f"e{epoch}-"), epoch, timestamp_ms=1000)
    names = sorted(p.name for p in d.glob("*.log"))
    assert len(names) > 1
    assert names[0] == "00000000000000000000.log" and all(len(n) == 24 for n in names)
    # every segment decodes with iter_batches and they are exactly the log's batches, in order
    decoded = [b for n in names for b in iter_batches(d / n)]
    assert [(b.base_offset, b.partition_leader_epoch) for b in decoded] == [(0, 0), (2, 0), (4, 1), (6, 1), (8, 1), (10, 4)]
    assert [int(n[:20]) for n in names] == [s.base_offset for s in log.segments]
    assert (d / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n1 4\n4 10\n"
    assert LeaderEpochCache.read_checkpoint(d / "leader-epoch-checkpoint") == log.leader_epoch_cache

    log.truncate_to(6)  # truncation rewrites files and checkpoint
    assert sum(1 for n in d.glob("*.log") for _ in iter_batches(n)) == 3
    assert (d / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n1 4\n"

    reopened = PartitionLog.open(d, segment_bytes=200, high_watermark=5)
    assert reopened.log_end_offset == 6 and reopened.high_watermark == 5
    assert reopened.leader_epoch_cache == log.leader_epoch_cache
    assert reopened.read(0) == log.read(0)


def test_open_recovers_from_a_partial_tail_and_a_missing_checkpoint(tmp_path):
    d = tmp_path / "t-0"
    log = PartitionLog(TP, directory=d)
    log.append_as_leader(recs(2), 2)
    log.append_as_leader(recs(2), 3)
    good = log.read(0)
    with open(d / segment_file_name(0), "ab") as f:
        f.write(kafka_python_batch(4, 3, [b"torn"])[:30])  # a crash mid-write
    (d / "leader-epoch-checkpoint").unlink()
    reopened = PartitionLog.open(d)
    assert reopened.log_end_offset == 4
    assert (d / segment_file_name(0)).read_bytes() == good
    assert reopened.leader_epoch_cache.entries() == [(2, 0), (3, 2)]  # rebuilt from the batches


def test_open_reads_a_real_broker_partition_dir(tmp_path):
    import shutil

    src = "/work/shared/kafka-segments/ldi-poc/TestTopicPatient-0"
    d = tmp_path / "TestTopicPatient-0"
    shutil.copytree(src, d)
    log = PartitionLog.open(d, write_through=False)
    assert log.tp.topic == "TestTopicPatient"
    assert log.leader_epoch_cache.entries() == [(0, 0)]
    batches = list(log.batches())
    assert batches and all(b.partition_leader_epoch == 0 for b in batches)
    assert log.log_end_offset == batches[-1].next_offset


def test_partition_dir_names():
    assert parse_partition_dir_name("my-topic-12").partition == 12
    assert parse_partition_dir_name("my-topic-12").topic == "my-topic"
    for bad in ("topic", "topic-", "-1", "t-0.abc-delete"):
        with pytest.raises(ValueError):
            parse_partition_dir_name(bad)

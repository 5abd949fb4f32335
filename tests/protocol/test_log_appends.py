"""PartitionLog appends (Kafka's `UnifiedLog.appendAsLeader` / `appendAsFollower`, `LogSegment.append`,
`ProducerStateManager`): argument checks, what the leader's batch carries by default, the follower's
partial tails on disk, overlapping batches, segment rolls at exactly segment.bytes, and which batches
open a transaction."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from protocol_support import kafka_python_batch, recs
from test_log_control_batches import without_records

from epochguard._core import encode_batch, iter_batches
from epochguard.storage.log import PartitionLog, UnexpectedAppendOffsetError
from epochguard.types import TopicPartition

TP = TopicPartition("t", 0)


# --- argument checks ------------------------------------------------------------------------------------
@pytest.mark.parametrize("segment_bytes", [0, -1])
def test_segment_bytes_must_be_positive(segment_bytes):
    with pytest.raises(ValueError, match=r"^segment_bytes must be positive$"):
        PartitionLog(TP, segment_bytes=segment_bytes)


def test_an_append_as_leader_needs_records_and_a_leader_epoch():
    log = PartitionLog(TP)
    with pytest.raises(ValueError, match=r"^no records to append$"):
        log.append_as_leader([], 1)
    with pytest.raises(ValueError, match=r"^invalid leader epoch -1$"):
        log.append_as_leader(recs(1), -1)
    assert log.log_end_offset == 0


def test_a_new_log_may_live_in_a_directory_that_already_exists(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    log = PartitionLog(TP, directory=d)
    log.append_as_leader(recs(1), 0)
    assert sorted(p.name for p in d.iterdir()) == ["00000000000000000000.log", "leader-epoch-checkpoint"]


# --- the leader's batch ---------------------------------------------------------------------------------------
def test_a_leader_batch_is_plain_unless_told_and_keeps_its_compression():
    log = PartitionLog(TP)
    log.append_as_leader(recs(2), 1, producer_id=4, producer_epoch=0)  # an idempotent producer
    log.append_as_leader(recs(2), 1, compression="gzip")
    plain, gzipped = log.batches()
    assert (plain.producer_id, plain.is_transactional, plain.compression) == (4, False, "none")
    assert gzipped.compression == "gzip"
    assert log.first_unstable_offset is None  # no transaction opened


def test_an_append_reports_the_largest_timestamp_it_wrote():
    log = PartitionLog(TP)
    info = log.append_as_leader([(None, b"a", [], 500), (None, b"b", [], 900), (None, b"c", [], 700)], 1)
    assert (info.first_offset, info.last_offset, info.max_timestamp, info.batches) == (0, 2, 900, 1)


# --- the follower's batches --------------------------------------------------------------------------------
def test_a_partial_tail_never_reaches_the_segment_file(tmp_path):
    """The cut-off tail of a fetch answer is not written: the next batch follows the whole ones on disk,
    so a restart recovers both."""
    d = tmp_path / "t-0"
    log = PartitionLog(TP, directory=d)
    whole, nxt = kafka_python_batch(0, 1, [b"a"]), kafka_python_batch(1, 1, [b"b"])
    log.append_as_follower(whole + nxt[:10])
    assert (d / "00000000000000000000.log").read_bytes() == whole
    log.append_as_follower(nxt)
    reopened = PartitionLog.open(d)
    assert reopened.log_end_offset == 2
    assert [b.base_offset for b in reopened.batches()] == [0, 1]


def test_a_batch_starting_at_the_previous_batchs_last_offset_is_refused():
    log = PartitionLog(TP)
    first = encode_batch([(None, b"a"), (None, b"b")], base_offset=0, partition_leader_epoch=1)  # 0-1
    overlapping = encode_batch([(None, b"c"), (None, b"d")], base_offset=1, partition_leader_epoch=1)  # 1-2
    with pytest.raises(UnexpectedAppendOffsetError, match="not increasing at 1") as info:
        log.append_as_follower(first + overlapping)
    assert (info.value.first_offset, info.value.last_offset) == (1, 2)
    assert log.log_end_offset == 0


def test_a_segment_takes_batches_up_to_exactly_segment_bytes():
    size = len(encode_batch(recs(2), partition_leader_epoch=1))
    log = PartitionLog(TP, segment_bytes=2 * size)
    for _ in range(3):
        log.append_as_leader(recs(2), 1)
    assert [s.base_offset for s in log.segments] == [0, 4]
    assert [s.size for s in log.segments] == [2 * size, size]


# --- which batches open a transaction ----------------------------------------------------------------------
def append_data(log: PartitionLog, pid: int, *, transactional: bool) -> None:
    log.append_as_follower(encode_batch([(None, b"v")], base_offset=log.log_end_offset, partition_leader_epoch=1,
                                        producer_id=pid, producer_epoch=0, is_transactional=transactional))


def test_producer_id_zero_is_a_real_producer_and_opens_its_transaction():
    log = PartitionLog(TP)
    append_data(log, 0, transactional=True)
    assert log.first_unstable_offset == 0


def test_an_idempotent_batch_opens_no_transaction():
    log = PartitionLog(TP)
    append_data(log, 5, transactional=False)
    assert log.first_unstable_offset is None


def test_batches_after_an_empty_control_batch_in_the_same_append_are_still_tracked():
    marker = encode_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], base_offset=0, partition_leader_epoch=1,
                          producer_id=9, producer_epoch=0, is_transactional=True, is_control=True)
    data = encode_batch([(None, b"v")], base_offset=1, partition_leader_epoch=1, producer_id=3, producer_epoch=0,
                        is_transactional=True)
    log = PartitionLog(TP)
    log.append_as_follower(without_records(marker) + data)
    assert [b.base_offset for b in iter_batches(log.read(0))] == [0, 1]
    assert log.first_unstable_offset == 1  # producer 3's transaction is open


# --- the leader-epoch checkpoint ------------------------------------------------------------------------------
class CheckpointWatch:
    """Tells whether the checkpoint file was written since `reset`: each write is atomic (a new file
    renamed over the old one), so a hard link to the old file stops being the same file. (The link also
    keeps the old inode from being reused by a later write.)"""

    def __init__(self, directory: Path) -> None:
        self.checkpoint, self.link = directory / "leader-epoch-checkpoint", directory.parent / "watched-checkpoint"
        self.reset()

    def reset(self) -> None:
        self.link.unlink(missing_ok=True)
        os.link(self.checkpoint, self.link)

    def written(self) -> bool:
        return not os.path.samefile(self.checkpoint, self.link)


def test_the_checkpoint_is_rewritten_only_when_the_epochs_change(tmp_path):
    """Kafka's `LeaderEpochFileCache` flushes only when an assign or truncation changed the entries: an
    append in a known epoch does not rewrite (and fsync) the file."""
    d = tmp_path / "t-0"
    log = PartitionLog(TP, directory=d)
    log.assign_epoch_start(1)
    watch = CheckpointWatch(d)
    log.append_as_leader(recs(2), 1)  # 0-1, epoch 1 already starts at 0
    log.append_as_leader(recs(2), 1)  # 2-3
    log.assign_epoch_start(1)
    assert not watch.written()
    assert log.truncate_to(9) is False  # beyond the end: nothing to drop from the cache
    assert not watch.written()
    assert log.truncate_to(2) is True  # by batches, epoch 1 still starts at 0
    assert not watch.written()
    log.append_as_leader(recs(1), 2)  # a new epoch: written
    assert watch.written()
    assert (d / "leader-epoch-checkpoint").read_text().splitlines()[2:] == ["1 0", "2 2"]


def test_moving_the_log_start_of_a_log_without_epochs_leaves_the_checkpoint_alone(tmp_path):
    d = tmp_path / "t-0"
    log = PartitionLog(TP, directory=d)
    log.append_as_follower(kafka_python_batch(0, -1, [b"a", b"b"]) + kafka_python_batch(2, -1, [b"c"]))
    log.update_high_watermark(3)
    watch = CheckpointWatch(d)
    assert log.increment_log_start_offset(2) is True
    assert not watch.written()

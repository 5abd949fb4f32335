"""Idempotent producers on a partition replica (Kafka's `ProducerStateManager`, `ProducerAppendInfo`;
cases after `ProducerStateManagerTest` and `UnifiedLogTest`'s idempotence tests): sequences in order,
retries answered with their first offsets, out-of-order sequences and old epochs refused, a new epoch
from 0, an unknown producer from anywhere, and the state of a replica elected uncleanly: only as far
as its own log, so the producer's next sequence is out of order there."""

from __future__ import annotations

import pytest
from protocol_support import TP, recs, state

from epochguard._core import encode_batch
from epochguard.broker.partition import Partition
from epochguard.errors import Errors, InvalidProducerEpochError, OutOfOrderSequenceError
from epochguard.storage.log import PartitionLog
from epochguard.storage.producer_state import NUM_BATCHES_TO_RETAIN

PID = 42


def batch(seq: int, n: int = 2, *, epoch: int = 0, pid: int = PID) -> bytes:
    """A producer's batch as it comes off the wire (base offset 0, no leader epoch)."""
    return encode_batch(recs(n), producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_sequences_in_order_are_written_and_remembered() -> None:
    log = PartitionLog(TP)
    first = log.append_raw_as_leader(batch(0), 0)
    second = log.append_raw_as_leader(batch(2, 3), 0)
    assert (first.first_offset, second.first_offset, second.last_offset, log.log_end_offset) == (0, 2, 4, 5)
    entry = log.producer_state.entry(PID)
    assert entry is not None and (entry.epoch, entry.last_seq) == (0, 4)


def test_a_retry_of_a_written_batch_gets_its_offsets_and_is_not_written_again() -> None:
    log = PartitionLog(TP)
    log.append_raw_as_leader(batch(0), 0)
    log.append_raw_as_leader(batch(2), 0)
    log.append_raw_as_leader(batch(4), 0)
    again = log.append_raw_as_leader(batch(2), 0)
    assert (again.first_offset, again.last_offset, again.batches) == (2, 3, 0)
    assert log.log_end_offset == 6
    assert log.append_raw_as_leader(batch(6), 0).first_offset == 6  # the sequence goes on after the retry


def test_only_the_last_five_batches_are_recognised_as_retries() -> None:
    log = PartitionLog(TP)
    for i in range(NUM_BATCHES_TO_RETAIN + 1):
        log.append_raw_as_leader(batch(2 * i), 0)
    assert log.append_raw_as_leader(batch(2), 0).first_offset == 2  # the second batch: still retained
    with pytest.raises(OutOfOrderSequenceError):  # the first fell out of the window: a gap, not a retry
        log.append_raw_as_leader(batch(0), 0)


def test_a_retry_must_match_the_whole_sequence_range() -> None:
    log = PartitionLog(TP)
    log.append_raw_as_leader(batch(0, 3), 0)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_raw_as_leader(batch(0, 2), 0)


@pytest.mark.parametrize("seq, n", [(2, 1), (5, 1), (0, 2)])  # a gap, a wider gap, an overlap that is no retry
def test_a_sequence_that_does_not_follow_the_last_is_out_of_order(seq: int, n: int) -> None:
    log = PartitionLog(TP)
    log.append_raw_as_leader(batch(0, 1), 0)
    with pytest.raises(OutOfOrderSequenceError, match=rf"sequence {seq}, expected 1") as raised:
        log.append_raw_as_leader(batch(seq, n), 0)
    assert (raised.value.producer_id, raised.value.expected) == (PID, 1)
    assert log.log_end_offset == 1 and log.producer_state.entry(PID).last_seq == 0  # nothing changed


def test_an_older_producer_epoch_is_refused() -> None:
    log = PartitionLog(TP)
    log.append_raw_as_leader(batch(0, epoch=3), 0)
    with pytest.raises(InvalidProducerEpochError, match="older than its last epoch 3"):
        log.append_raw_as_leader(batch(2, epoch=2), 0)


def test_a_new_epoch_starts_at_sequence_zero() -> None:
    log = PartitionLog(TP)
    log.append_raw_as_leader(batch(0, epoch=0), 0)
    with pytest.raises(OutOfOrderSequenceError, match="new epoch 1 starts at sequence 2"):
        log.append_raw_as_leader(batch(2, epoch=1), 0)
    log.append_raw_as_leader(batch(0, epoch=1), 0)
    entry = log.producer_state.entry(PID)
    assert (entry.epoch, entry.last_seq, len(entry.batches)) == (1, 1, 1)  # the old epoch's batches forgotten


def test_a_producer_the_replica_does_not_know_may_start_at_any_sequence() -> None:
    log = PartitionLog(TP)
    assert log.append_raw_as_leader(batch(17, epoch=4), 0).first_offset == 0
    with pytest.raises(OutOfOrderSequenceError):
        log.append_raw_as_leader(batch(20, epoch=4), 0)  # known now


def test_sequences_wrap_after_int32_max() -> None:
    log = PartitionLog(TP)
    log.append_raw_as_leader(batch(2**31 - 2, 2), 0)  # 2147483646, 2147483647
    assert log.producer_state.entry(PID).last_seq == 2**31 - 1
    assert log.append_raw_as_leader(batch(0, 1), 0).first_offset == 2


def test_producers_are_independent_and_plain_batches_unchecked() -> None:
    log = PartitionLog(TP)
    log.append_raw_as_leader(batch(0, pid=1), 0)
    log.append_raw_as_leader(batch(0, pid=2), 0)
    log.append_raw_as_leader(encode_batch(recs(1)), 0)  # no producer id
    log.append_raw_as_leader(encode_batch(recs(1)), 0)
    assert log.append_raw_as_leader(batch(2, pid=1), 0).first_offset == 6


def test_a_follower_copies_the_state_unchecked_and_a_truncation_rebuilds_it() -> None:
    leader = PartitionLog(TP)
    for seq in (0, 2, 4):
        leader.append_raw_as_leader(batch(seq), 0)
    follower = PartitionLog(TP)
    follower.append_as_follower(leader.read(0))
    assert follower.producer_state.entry(PID).last_seq == 5
    follower.truncate_to(4)
    assert follower.producer_state.entry(PID).last_seq == 3
    follower.truncate_to(0)
    assert follower.producer_state.entry(PID) is None


def test_a_new_log_start_keeps_producers_and_a_full_truncation_forgets_them() -> None:
    """Kafka's `onLogStartOffsetIncremented` leaves producers alone (they expire by time); a follower
    that starts over empty (`truncateFullyAndStartAt`) knows none."""
    log = PartitionLog(TP)
    log.append_raw_as_leader(batch(0), 0)
    log.append_raw_as_leader(encode_batch(recs(2)), 0)
    log.update_high_watermark(4)
    log.increment_log_start_offset(2)
    assert log.producer_state.entry(PID).last_seq == 1
    with pytest.raises(OutOfOrderSequenceError):
        log.append_raw_as_leader(batch(9), 0)
    log.truncate_fully_and_start_at(4)
    assert log.producer_state.entry(PID) is None
    assert log.append_raw_as_leader(batch(9), 0).first_offset == 4  # unknown now: any sequence


def test_a_replica_elected_uncleanly_refuses_the_producers_next_sequence() -> None:
    """acks=all with min.insync.replicas=1 and the ISR shrunk to the leader: the leader acknowledged
    sequences 0-5, the follower had copied 0-1; elected uncleanly, it knows the producer up to 1, and
    the producer's next batch (6) is out of order (Kafka answers the same: KIP-360)."""
    old = Partition(TP, 1, PartitionLog(TP))
    old.make_leader(state(1, 0, isr=(1,), replicas=(1, 2)), 0)
    new_log = PartitionLog(TP)
    for seq in (0, 2, 4):
        code, _ = old.append_records_to_leader(batch(seq), acks=-1, min_insync_replicas=1, now_ms=0)
        assert code == Errors.NONE
        if seq == 0:
            new_log.append_as_follower(old.log.read(0))
    new = Partition(TP, 2, new_log)
    new.make_leader(state(2, 1, isr=(2,), replicas=(1, 2)), 0)
    code, info = new.append_records_to_leader(batch(6), acks=-1, min_insync_replicas=1, now_ms=0)
    assert (code, info) == (Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, None)
    assert new.log.log_end_offset == 2
    # The producer bumps its epoch (KIP-360) and starts again at 0: accepted.
    code, info = new.append_records_to_leader(batch(0, epoch=1), acks=-1, min_insync_replicas=1, now_ms=0)
    assert code == Errors.NONE and info is not None and info.first_offset == 2


def test_the_leader_answers_an_old_epoch_and_a_retry_on_the_wire_codes() -> None:
    p = Partition(TP, 1, PartitionLog(TP))
    p.make_leader(state(1, 0, isr=(1,), replicas=(1,)), 0)
    p.append_records_to_leader(batch(0, epoch=2), acks=1, min_insync_replicas=1, now_ms=0)
    code, _ = p.append_records_to_leader(batch(2, epoch=1), acks=1, min_insync_replicas=1, now_ms=0)
    assert code == Errors.INVALID_PRODUCER_EPOCH
    code, info = p.append_records_to_leader(batch(0, epoch=2), acks=1, min_insync_replicas=1, now_ms=0)
    assert code == Errors.NONE and info is not None and (info.first_offset, info.batches) == (0, 0)


def test_a_restarted_replica_recovers_the_producers_from_its_segments(tmp_path) -> None:
    log = PartitionLog(TP, directory=tmp_path / "t-0")
    log.append_raw_as_leader(batch(0), 0)
    log.append_raw_as_leader(batch(2), 0)
    reopened = PartitionLog.open(tmp_path / "t-0")
    assert reopened.append_raw_as_leader(batch(2), 0).first_offset == 2  # still recognised as a retry
    with pytest.raises(OutOfOrderSequenceError):
        reopened.append_raw_as_leader(batch(7), 0)

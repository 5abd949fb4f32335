"""Transaction markers in the log (Kafka's `EndTransactionMarker` and `ControlRecordType`, and
`ProducerAppendInfo.append` for control batches): the bytes `append_txn_marker` writes, how a control
batch's type is read, and control batches that hold no marker."""

from __future__ import annotations

import struct

import pytest
from kafka.record.util import calc_crc32c

from epochguard._core import encode_batch, iter_batches
from epochguard.storage.log import CONTROL_ABORT, CONTROL_COMMIT, PartitionLog
from epochguard.types import TopicPartition

TP = TopicPartition("t", 0)
PID = 7


def open_transaction(log: PartitionLog) -> None:
    log.append_as_follower(encode_batch([(b"k", b"v")], base_offset=log.log_end_offset, partition_leader_epoch=1,
                                        producer_id=PID, producer_epoch=2, is_transactional=True))


def control_batch(base: int, key: bytes | None, value: bytes | None = b"\x00\x00\x00\x00\x00\x00") -> bytes:
    return encode_batch([(key, value)], base_offset=base, partition_leader_epoch=1, producer_id=PID,
                        producer_epoch=2, is_transactional=True, is_control=True)


def without_records(batch: bytes) -> bytes:
    """The batch's 61-byte v2 header alone, records count 0 and CRC-32C recomputed: the empty control
    batch Kafka's log cleaner leaves when it has removed a marker."""
    header = bytearray(batch[:61])
    struct.pack_into(">i", header, 8, 61 - 12)  # batch length: what follows the length field
    struct.pack_into(">i", header, 57, 0)
    struct.pack_into(">I", header, 17, calc_crc32c(bytes(header[21:])))
    return bytes(header)


@pytest.mark.parametrize(("commit", "control"), [(True, CONTROL_COMMIT), (False, CONTROL_ABORT)])
@pytest.mark.parametrize("coordinator_epoch", [0, 9, 2**31 - 1, -1])
def test_a_marker_is_kafkas_end_transaction_marker(commit, control, coordinator_epoch):
    """One record: key = version int16 0, type int16; value = version int16 0, coordinator epoch int32
    (signed, as Kafka writes it); the batch carries the producer's id and epoch."""
    log = PartitionLog(TP)
    open_transaction(log)
    log.append_txn_marker(PID, 2, commit=commit, coordinator_epoch=coordinator_epoch, leader_epoch=1)
    [marker] = log.batches(start=1)
    assert (marker.is_control, marker.is_transactional, marker.producer_id, marker.producer_epoch) == (True, True, PID, 2)
    [record] = marker.records()
    assert record.key == struct.pack(">hh", 0, control)
    assert record.value == struct.pack(">hi", 0, coordinator_epoch)
    assert log.first_unstable_offset == 0  # ended, but unstable until the HW passes the marker
    log.update_high_watermark(2)
    assert log.first_unstable_offset is None


def test_an_unknown_control_type_is_read_signed_like_kafkas_control_record_type():
    """`ControlRecordType.parse` reads the type with getShort: 0xFFFF is UNKNOWN (-1), not 65535."""
    log = PartitionLog(TP)
    log.append_as_follower(control_batch(0, struct.pack(">hh", 0, -1)))
    [info] = log.batch_infos()
    assert info.control == -1


@pytest.mark.parametrize("key", [None, b"\x00\x00\x01"], ids=["no key", "3-byte key"])
def test_a_control_batch_without_a_valid_marker_key_is_not_a_marker(key):
    log = PartitionLog(TP)
    open_transaction(log)
    log.append_as_follower(control_batch(1, key))
    assert [info.control for info in log.batch_infos()] == [None, None]
    assert log.first_unstable_offset == 0  # the transaction is still open
    assert log.aborted_transactions == []


def test_an_empty_control_batch_neither_opens_nor_closes_a_transaction():
    """`ProducerAppendInfo.append`: "An empty control batch means the entire transaction has been cleaned
    from the log, so no need to append" -- the producer's state is left as it was."""
    empty = without_records(control_batch(0, struct.pack(">hh", 0, CONTROL_ABORT)))
    log = PartitionLog(TP)
    log.append_as_follower(empty)
    assert (log.log_end_offset, log.first_unstable_offset) == (1, None)
    [batch] = iter_batches(log.read(0))
    assert batch.is_control and batch.records() == []
    open_transaction(log)
    log.append_as_follower(without_records(control_batch(2, struct.pack(">hh", 0, CONTROL_COMMIT))))
    assert (log.log_end_offset, log.first_unstable_offset) == (3, 1)  # still open after the empty one


def test_a_data_batch_whose_key_looks_like_a_marker_key_is_no_marker():
    """Only a control batch (attribute bit 5) holds a marker; a producer's key that happens to read as
    version 0, type COMMIT means nothing."""
    log = PartitionLog(TP)
    log.append_as_follower(encode_batch([(struct.pack(">hh", 0, CONTROL_COMMIT), b"v")], base_offset=0,
                                        partition_leader_epoch=1, producer_id=PID, producer_epoch=2,
                                        is_transactional=True))
    [info] = log.batch_infos()
    assert (info.is_control, info.control) == (False, None)
    assert log.first_unstable_offset == 0

"""Transactions as far as the leader-epoch protocol meets them: transactional and control batches in
the log, the last stable offset, read_committed ListOffsets and Fetch (with aborted-transaction lists),
and a read_committed consumer that skips aborted records and control batches. Each test names the
Kafka test whose behaviour it takes."""

from __future__ import annotations

import struct

from protocol_support import TP, recs, state

from epochguard._core import encode_batch, iter_batches
from epochguard.broker.partition import Partition
from epochguard.broker.replica_manager import ReplicaManager
from epochguard.client.consumer import Consumer
from epochguard.client.consumer.fetch_collector import CompletedFetch
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    AbortedTransaction,
    FetchPartition,
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    ListOffsetsPartition,
    TxnMarker,
    WriteTxnMarkerResult,
    WriteTxnMarkersRequest,
)
from epochguard.storage.log import AbortedTxn, PartitionLog
from epochguard.types import (
    DEBUGGING_REPLICA_ID,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchPosition,
    IsolationLevel,
    LeaderAndEpoch,
)

RC, RU = IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED


def txn_batch(pid: int, base: int, *keys: str, epoch: int = 0) -> bytes:
    return encode_batch([(k.encode(), b"value") for k in keys], base_offset=base, partition_leader_epoch=epoch,
                        producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)


def marker(pid: int, base: int, commit: bool, epoch: int = 0) -> bytes:
    """A control batch as Kafka writes it: key (version 0, type 1 COMMIT / 0 ABORT), value (version 0,
    coordinator epoch)."""
    return encode_batch([(struct.pack(">hh", 0, 1 if commit else 0), struct.pack(">hi", 0, 0))], base_offset=base,
                        partition_leader_epoch=epoch, producer_id=pid, producer_epoch=0, is_transactional=True,
                        is_control=True)


def leader_partition(epoch: int = 5) -> Partition:
    p = Partition(TP, 1, PartitionLog(TP))
    p.make_leader(state(1, epoch, isr=(1, 2), replicas=(1, 2)), 0)
    return p


def latest(p: Partition, isolation: IsolationLevel | None) -> int:
    replica = DEBUGGING_REPLICA_ID if isolation is None else -1
    answer = p.fetch_offset_for_timestamp(ListOffsetsPartition(TP.topic, 0, LATEST_TIMESTAMP), replica_id=replica,
                                          isolation_level=isolation or RU)
    return answer.offset


# --- the log ----------------------------------------------------------------------------------------
def test_last_stable_offset_stops_at_the_first_open_transaction_and_truncation_reopens_it():
    """UnifiedLog's firstUnstableOffset / lastStableOffset; the aborted-transaction index
    (collectAbortedTransactions) and its rebuild on truncation."""
    log = PartitionLog(TP)
    log.append_as_follower(txn_batch(7, 0, "a", "b", "c"))  # 0-2, producer 7: open
    log.append_as_follower(encode_batch([(None, b"plain")], base_offset=3))  # 3, not transactional
    log.update_high_watermark(4)
    assert log.first_unstable_offset == 0 and log.last_stable_offset == 0
    log.append_as_follower(marker(7, 4, commit=True))
    log.append_as_follower(txn_batch(8, 5, "x", "y"))  # 5-6, producer 8
    log.append_as_follower(marker(8, 7, commit=False))
    # both ended, but the HW (4) has not passed their markers: still unstable (ProducerStateManager's
    # unreplicatedTxns until onHighWatermarkUpdated), the LSO stays at the first one's first offset
    assert log.first_unstable_offset == 0 and log.last_stable_offset == 0
    log.update_high_watermark(5)  # past producer 7's COMMIT (4), not producer 8's ABORT (7)
    assert log.first_unstable_offset == 5 and log.last_stable_offset == 5
    log.update_high_watermark(8)
    assert log.first_unstable_offset is None  # nothing open, every marker replicated: the HW
    assert log.last_stable_offset == 8
    assert log.aborted_transactions == [AbortedTxn(8, 5, 7)]
    assert log.collect_aborted_transactions(0, 8) == [AbortedTxn(8, 5, 7)]
    assert log.collect_aborted_transactions(8, 9) == []  # ended before the fetch
    log.truncate_to(7)  # the abort marker is gone: the transaction is open again
    assert log.aborted_transactions == [] and log.first_unstable_offset == 5 and log.last_stable_offset == 5


def test_transactional_append_as_leader_and_markers():
    p = leader_partition()
    p.append_records_to_leader(recs(3), acks=1, min_insync_replicas=1, now_ms=0, producer_id=2, producer_epoch=0,
                               transactional=True)
    batch = next(iter_batches(p.log.read(0)))
    assert batch.is_transactional and batch.producer_id == 2 and batch.partition_leader_epoch == 5
    assert p.log.first_unstable_offset == 0
    p.write_txn_marker(2, 0, commit=False, coordinator_epoch=0)
    control = next(iter_batches(p.log.read(3)))
    assert control.is_control and control.base_offset == 3 and control.partition_leader_epoch == 5
    assert p.log.aborted_transactions == [AbortedTxn(2, 0, 3)]
    assert p.log.first_unstable_offset == 0  # follower 2 has not fetched the marker: the HW is below it
    p.log.update_high_watermark(4)
    assert p.log.first_unstable_offset is None


# --- the leader ---------------------------------------------------------------------------------------
def test_list_offsets_latest_by_isolation_level():
    """PartitionTest.testListOffsetIsolationLevels: 3 open transactional records, HW 0 then 1."""
    p = leader_partition()
    p.append_records_to_leader(recs(3), acks=0, min_insync_replicas=1, now_ms=0, producer_id=2, producer_epoch=0,
                               transactional=True)
    assert (latest(p, None), latest(p, RU), latest(p, RC)) == (3, 0, 0)
    p.log.update_high_watermark(1)
    assert (latest(p, None), latest(p, RU), latest(p, RC)) == (3, 1, 0)
    for isolation in (RU, RC):
        earliest = p.fetch_offset_for_timestamp(ListOffsetsPartition(TP.topic, 0, EARLIEST_TIMESTAMP), isolation_level=isolation)
        assert earliest.offset == 0


def test_read_committed_fetch_stops_at_the_lso_and_lists_aborted_transactions():
    """Partition.fetchRecords / ReplicaManager.readFromLog: read_committed reads up to the LSO and gets
    the aborted transactions overlapping what it read; read_uncommitted gets none (null)."""
    p = leader_partition(epoch=0)
    for raw in (txn_batch(8, 0, "x"), marker(8, 1, commit=False), txn_batch(9, 2, "open")):
        p.log.append_as_follower(raw)
    p.log.update_high_watermark(3)
    committed = p.fetch(FetchPartition(TP.topic, 0, 0), isolation_level=RC)
    assert committed.last_stable_offset == 2 and committed.high_watermark == 3
    assert [b.base_offset for b in iter_batches(committed.records)] == [0, 1]
    assert committed.aborted_transactions == (AbortedTransaction(8, 0),)
    uncommitted = p.fetch(FetchPartition(TP.topic, 0, 0), isolation_level=RU)
    assert [b.base_offset for b in iter_batches(uncommitted.records)] == [0, 1, 2]
    assert uncommitted.aborted_transactions is None and uncommitted.last_stable_offset == 2


def test_write_txn_markers_through_the_replica_manager():
    rm = ReplicaManager(1)
    rm.apply_partition_state(state(1, 3, isr=(1,), replicas=(1,)), 0)
    rm.partitions[TP].append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0, producer_id=4,
                                               producer_epoch=1, transactional=True)
    response = rm.handle(-1, WriteTxnMarkersRequest((TxnMarker(4, 1, True, 0, TP.topic, 0),)), 0)
    assert [r.error_code for r in response.partitions] == [0]  # the ISR is the leader alone: acks=all at once
    assert rm.partitions[TP].log.first_unstable_offset is None


def test_write_txn_markers_wait_for_the_isr():
    """Markers are written with acks=all (KafkaApis.handleWriteTxnMarkersRequest): the answer waits
    until the follower has the marker."""
    from protocol_support import Network, brokers

    net = Network(brokers(2))
    for rm in net.brokers.values():
        rm.apply_partition_state(state(1, 1, isr=(1, 2), replicas=(1, 2)), 0)
    leader = net.brokers[1]
    leader.partitions[TP].append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0, producer_id=4,
                                                   producer_epoch=1, transactional=True)
    request = WriteTxnMarkersRequest((TxnMarker(4, 1, False, 0, TP.topic, 0),))
    assert leader.handle(-1, request, 0) is None  # waiting for broker 2
    assert leader.poll_responses(0) == []
    net.pump(0)
    [(_, sent, response)] = leader.poll_responses(0)
    assert sent is request and [r.error_code for r in response.partitions] == [0]
    follower_log = net.brokers[2].partitions[TP].log
    assert follower_log.aborted_transactions == [AbortedTxn(4, 0, 2)]  # the follower tracks it too


# --- the consumer ---------------------------------------------------------------------------------------
def kafka_transactions_log() -> tuple[bytes, tuple[AbortedTransaction, ...]]:
    """FetcherTest.testReadCommittedWithCommittedAndAbortedTransactions, offset by offset."""
    parts = [
        txn_batch(1, 0, "commit1-1", "commit1-2"),
        txn_batch(2, 2, "abort2-1"),
        marker(1, 3, commit=True),
        txn_batch(2, 4, "abort2-2"),
        marker(2, 5, commit=False),
        txn_batch(1, 6, "abort1-1"),
        txn_batch(2, 7, "commit2-1"),
        txn_batch(1, 8, "abort1-2"),
        marker(1, 9, commit=False),
        marker(2, 10, commit=True),
    ]
    return b"".join(parts), (AbortedTransaction(2, 2), AbortedTransaction(1, 6))


def test_read_committed_skips_aborted_records_and_control_batches():
    raw, aborted = kafka_transactions_log()
    position = FetchPosition(0, None, LeaderAndEpoch(1, 0))
    committed = CompletedFetch.decode(TP, position, raw, RC, aborted)
    assert [r.key for r in committed.records] == [b"commit1-1", b"commit1-2", b"commit2-1"]
    assert committed.next_offset == 11  # past the last marker
    uncommitted = CompletedFetch.decode(TP, position, raw, RU, None)
    assert [r.key.decode() for r in uncommitted.records] == [  # FetcherTest.testReturnAbortedTransactionsInUncommittedMode
        "commit1-1", "commit1-2", "abort2-1", "abort2-2", "abort1-1", "commit2-1", "abort1-2"]


def test_read_committed_consumer_end_to_end_and_position_past_aborted_data():
    """FetcherTest.testConsumerPositionUpdatedWhenSkippingAbortedTransactions: only aborted data and
    markers fetched: nothing is returned, the position still moves past them."""
    rm = ReplicaManager(1)
    rm.apply_partition_state(state(1, 0, isr=(1,), replicas=(1,)), 0)
    log = rm.partitions[TP].log
    log.append_as_follower(txn_batch(3, 0, "gone-1", "gone-2"))
    log.append_as_follower(marker(3, 2, commit=False))
    log.update_high_watermark(3)
    c = Consumer(bootstrap=(1,), reset_policy="earliest", isolation_level=RC)
    c.assign([TP])
    c.seek(TP, 0)
    c.update_api_versions(1, rm.api_versions)
    c.metadata.update(_metadata(), 0)
    for _ in range(3):
        for node, request in c.poll_requests(0):
            c.on_response(node, request, rm.handle(-1, request, 0), 0)
    assert c.poll().count() == 0
    assert c.position(TP).offset == 3


def _metadata():
    from epochguard.protocol.messages import (
        MetadataResponse,
        MetadataResponseBroker,
        MetadataResponsePartition,
        MetadataResponseTopic,
    )

    part = MetadataResponsePartition(0, 1, 0, (1,), (1,))
    return MetadataResponse((MetadataResponseTopic(TP.topic, (part,), "id"),), (MetadataResponseBroker(1),))


def test_fetch_response_carries_aborted_transactions_into_the_consumer():
    c = Consumer(bootstrap=(1,), reset_policy="earliest", isolation_level=RC)
    c.assign([TP])
    c.metadata.update(_metadata(), 0)
    c.seek(TP, 0)
    raw, aborted = kafka_transactions_log()
    [(node, fetch)] = [(n, r) for n, r in c.poll_requests(0) if isinstance(r, FetchRequest)]
    assert fetch.isolation_level == RC
    data = FetchPartitionData(TP.topic, 0, high_watermark=11, last_stable_offset=11, records=raw, aborted_transactions=aborted)
    c.on_response(node, fetch, FetchResponse((data,)), 0)
    assert [r.key for r in c.poll().records()] == [b"commit1-1", b"commit1-2", b"commit2-1"]
    assert c.position(TP).offset == 11


def test_collect_aborted_transactions_takes_what_overlaps_the_half_open_range():
    """`LogSegment.collectAbortedTxns`: a transaction whose ABORT marker is at `start` overlaps it; one
    that begins at `upper` does not."""
    log = PartitionLog(TP)
    for raw in (txn_batch(8, 0, "a", "b"), marker(8, 2, commit=False), txn_batch(9, 3, "c"), marker(9, 4, commit=False)):
        log.append_as_follower(raw)
    first, second = AbortedTxn(8, 0, 2), AbortedTxn(9, 3, 4)
    assert log.aborted_transactions == [first, second]
    assert log.collect_aborted_transactions(2, 3) == [first]  # its marker is at the start
    assert log.collect_aborted_transactions(3, 4) == [second]
    assert log.collect_aborted_transactions(0, 3) == [first]  # the second begins at the upper bound
    assert log.collect_aborted_transactions(5, 9) == []


def test_a_marker_written_by_the_leader_is_a_kafka_control_record():
    """`EndTransactionMarker`: key (version 0, type COMMIT 1 / ABORT 0), value (version 0, coordinator
    epoch), in a transactional control batch of the producer."""
    log = PartitionLog(TP)
    log.append_as_leader(recs(1), 3, producer_id=4, producer_epoch=2, transactional=True)
    log.append_txn_marker(4, 2, commit=False, coordinator_epoch=7, leader_epoch=3)
    log.append_txn_marker(4, 2, commit=True, coordinator_epoch=300, leader_epoch=3)
    _, abort, commit = iter_batches(log.read(0))
    for batch, kind, coordinator_epoch in ((abort, 0, 7), (commit, 1, 300)):
        assert batch.is_control and batch.is_transactional and batch.producer_id == 4
        [record] = batch.records()
        assert record.key == struct.pack(">hh", 0, kind)
        assert record.value == struct.pack(">hi", 0, coordinator_epoch)


def test_write_txn_markers_answers_each_marker_with_its_partition_and_error():
    """`KafkaApis.handleWriteTxnMarkersRequest`: one result per marker, with the hosting error of a
    partition this broker does not lead; the marker batch carries the time it was written."""
    rm = ReplicaManager(1)
    rm.apply_partition_state(state(1, 3, isr=(1,), replicas=(1,)), 0)
    rm.partitions[TP].append_records_to_leader(recs(1), acks=1, min_insync_replicas=1, now_ms=0, producer_id=4,
                                               producer_epoch=1, transactional=True)
    markers = (TxnMarker(4, 1, True, 0, TP.topic, 0), TxnMarker(4, 1, True, 0, TP.topic, 7), TxnMarker(4, 1, True, 0, "other", 0))
    response = rm.handle(-1, WriteTxnMarkersRequest(markers), 5_000)
    assert response.partitions == (
        WriteTxnMarkerResult(4, TP.topic, 0, Errors.NONE),
        WriteTxnMarkerResult(4, TP.topic, 7, Errors.NOT_LEADER_OR_FOLLOWER),  # a known topic, not hosted here
        WriteTxnMarkerResult(4, "other", 0, Errors.UNKNOWN_TOPIC_OR_PARTITION),
    )
    _, written = iter_batches(rm.partitions[TP].log.read(0))
    assert written.is_control and written.max_timestamp == 5_000
    rm.set_log_dir_offline()
    offline = rm.handle(-1, WriteTxnMarkersRequest(markers[:1]), 6_000)
    assert offline.partitions == (WriteTxnMarkerResult(4, TP.topic, 0, Errors.KAFKA_STORAGE_ERROR),)


def test_a_marker_waits_for_the_follower_to_fetch_past_it_and_is_answered_to_its_sender():
    """acks=all for the marker itself: a follower that has every record before the marker but not the
    marker keeps the answer waiting; the answer goes to the coordinator that sent the request."""
    from protocol_support import Network, brokers

    net = Network(brokers(2))
    for rm in net.brokers.values():
        rm.apply_partition_state(state(1, 1, isr=(1, 2), replicas=(1, 2)), 0)
    leader = net.brokers[1]
    leader.partitions[TP].append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0, producer_id=4,
                                                   producer_epoch=1, transactional=True)
    net.pump(0)
    assert leader.partitions[TP].log.high_watermark == 2  # the follower has both records
    request = WriteTxnMarkersRequest((TxnMarker(4, 1, False, 0, TP.topic, 0),))
    assert leader.handle(42, request, 0) is None  # the marker is at offset 2: waiting for the follower
    net.pump(0)
    [(node, sent, response)] = leader.poll_responses(0)
    assert node == 42 and sent is request
    assert response.partitions == (WriteTxnMarkerResult(4, TP.topic, 0, Errors.NONE),)

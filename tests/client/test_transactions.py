"""The transactional producer, sans-IO (`epochguard.client.transactions` driven by `client.producer`):
the coordinator found for the transactional id, InitProducerId with it, a partition added before its
first batch goes, EndTxn only once every batch is answered, an abort dropping what was not sent, a
coordinator move, fencing fatal, a failed batch making the transaction abortable. Scripted answers;
the same against a real Kafka is in tests/real_kafka/test_real_transactions.py."""

from __future__ import annotations

from typing import Any

import pytest

from epochguard._core import iter_batches
from epochguard.client.producer import Delivery, Producer, RecordMetadata
from epochguard.client.transactions import TransactionManager, TxnState
from epochguard.errors import (
    Errors,
    IllegalStateError,
    ProducerFencedError,
    TopicAuthorizationFailedError,
    TransactionAbortableError,
)
from epochguard.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    Coordinator,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnPartitionResult,
)
from epochguard.types import TopicPartition

T0 = TopicPartition("t", 0)


def metadata() -> MetadataResponse:
    return MetadataResponse(
        (MetadataResponseTopic("t", tuple(MetadataResponsePartition(p, 1, 4, (1, 2), (1, 2)) for p in range(2))),),
        brokers=(MetadataResponseBroker(1, "h", 1), MetadataResponseBroker(2, "h", 2)), version=12)


def only(producer: Producer, now: int, kind: type) -> tuple[int, Any]:
    """The one request of `kind` the producer sends now (a Metadata request beside it is answered)."""
    found: list[tuple[int, Any]] = []
    for _ in range(2):  # again once a Metadata answer placed the records
        sent = producer.poll_requests(now)
        for node, request in sent:
            if isinstance(request, MetadataRequest):
                producer.on_response(node, request, metadata(), now)
            else:
                found.append((node, request))
        if found or not sent:
            break
    assert [type(r) for _, r in found] == [kind], found
    return found[0]


def initialized(coordinator: int = 2) -> Producer:
    producer = Producer(bootstrap=[-1], linger_ms=0, idempotent=True, transactional_id="tx",
                        transaction_timeout_ms=30_000, retry_backoff_ms=10)
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        producer.send("t", b"early", partition=0)
    result = producer.transactions.init_transactions()  # type: ignore[union-attr]
    node, find = only(producer, 0, FindCoordinatorRequest)
    assert (find.key, find.key_type) == ("tx", 1)
    producer.on_response(node, find, FindCoordinatorResponse((Coordinator("tx", coordinator, "h", coordinator),)), 0)
    node, init = only(producer, 0, InitProducerIdRequest)
    assert node == coordinator and (init.transactional_id, init.transaction_timeout_ms) == ("tx", 30_000)
    producer.on_response(node, init, InitProducerIdResponse(producer_id=7, producer_epoch=3), 0)
    assert result.done and result.error is None
    return producer


def in_transaction(partition: int) -> tuple[Producer, TransactionManager, Delivery[RecordMetadata], Any]:
    """An initialized producer in a transaction with one record for `partition`: its AddPartitionsToTxn sent."""
    producer = initialized()
    txn = producer.transactions
    assert txn is not None
    txn.begin_transaction()
    d = producer.send("t", b"v", partition=partition, now_ms=1)
    _, add = only(producer, 1, AddPartitionsToTxnRequest)
    return producer, txn, d, add


def test_a_transaction_adds_its_partition_before_producing_and_commits_once_everything_is_answered() -> None:
    producer = initialized()
    txn = producer.transactions
    assert txn is not None
    txn.begin_transaction()
    d = producer.send("t", b"v", partition=0, now_ms=1)
    node, add = only(producer, 1, AddPartitionsToTxnRequest)  # no Produce before the partition is added
    assert node == 2 and (add.producer_id, add.producer_epoch, add.partitions) == (7, 3, (T0,))
    committed = txn.begin_commit()
    producer.on_response(2, add, AddPartitionsToTxnResponse((TxnPartitionResult("t", 0),)), 2)
    node, produce = only(producer, 2, ProduceRequest)
    assert node == 1 and produce.transactional_id == "tx"
    (batch,) = list(iter_batches(produce.partitions[0].records))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.is_transactional) == (7, 3, 0, True)
    assert producer.poll_requests(3) == []  # EndTxn waits for the Produce's answer
    producer.on_response(1, produce, ProduceResponse((ProducePartitionResponse("t", 0, base_offset=40),)), 4)
    node, end = only(producer, 4, EndTxnRequest)
    assert node == 2 and (end.committed, end.producer_epoch) == (True, 3) and not committed.done
    producer.on_response(2, end, EndTxnResponse(), 5)
    assert committed.done and committed.error is None and txn.state == TxnState.READY
    assert d.metadata is not None and d.metadata.offset == 40
    # the next transaction adds its partitions again; sequences go on
    txn.begin_transaction()
    producer.send("t", b"w", partition=0, now_ms=6)
    _, add = only(producer, 6, AddPartitionsToTxnRequest)
    assert add.partitions == (T0,)


def test_an_abort_drops_unsent_batches_and_ends_only_a_transaction_the_coordinator_knows() -> None:
    producer, txn, d, add = in_transaction(1)
    aborted = txn.begin_abort()
    producer.on_response(2, add, AddPartitionsToTxnResponse((TxnPartitionResult("t", 1),)), 2)
    _, end = only(producer, 2, EndTxnRequest)  # the partition was added: the coordinator must end it
    assert end.committed is False and isinstance(d.error, TransactionAbortableError)
    producer.on_response(2, end, EndTxnResponse(), 3)
    assert aborted.done and aborted.error is None and txn.state == TxnState.READY
    # a transaction that wrote nothing ends without asking the coordinator (Java's too)
    txn.begin_transaction()
    done = txn.begin_commit()
    assert producer.poll_requests(4) == [] and done.done and txn.state == TxnState.READY


def test_a_coordinator_move_is_followed_and_fencing_is_fatal() -> None:
    producer, txn, _, add = in_transaction(0)
    producer.on_response(2, add, AddPartitionsToTxnResponse((TxnPartitionResult("t", 0, Errors.NOT_COORDINATOR),)), 2)
    node, find = only(producer, 30, FindCoordinatorRequest)
    producer.on_response(node, find, FindCoordinatorResponse((Coordinator("tx", 1, "h", 1),)), 30)
    node, add = only(producer, 30, AddPartitionsToTxnRequest)
    assert node == 1  # the new coordinator
    producer.on_response(1, add, AddPartitionsToTxnResponse((TxnPartitionResult("t", 0, Errors.PRODUCER_FENCED),)), 31)
    assert txn.state == TxnState.FATAL_ERROR
    with pytest.raises(ProducerFencedError):
        txn.begin_commit()
    with pytest.raises(ProducerFencedError):
        producer.send("t", b"more", partition=0)


def test_a_fenced_init_and_a_fenced_end_raise_producer_fenced() -> None:
    producer = Producer(bootstrap=[-1], linger_ms=0, idempotent=True, transactional_id="tx")
    txn = producer.transactions
    assert txn is not None
    result = txn.init_transactions()
    node, find = only(producer, 0, FindCoordinatorRequest)
    producer.on_response(node, find, FindCoordinatorResponse((Coordinator("tx", 2, "h", 2),)), 0)
    _, init = only(producer, 0, InitProducerIdRequest)
    producer.on_response(2, init, InitProducerIdResponse(Errors.CONCURRENT_TRANSACTIONS), 0)
    assert not result.done  # retried after the back-off
    _, init = only(producer, 100, InitProducerIdRequest)
    producer.on_response(2, init, InitProducerIdResponse(Errors.PRODUCER_FENCED), 100)
    assert isinstance(result.error, ProducerFencedError)


def test_a_failed_batch_makes_the_transaction_abortable_and_offsets_go_through_the_group_coordinator() -> None:
    producer, txn, _, add = in_transaction(0)
    offsets = txn.send_offsets({TopicPartition("in", 0): 11}, "g", generation_id=5, member_id="m")
    assert producer.poll_requests(1) == []  # one coordinator request at a time
    producer.on_response(2, add, AddPartitionsToTxnResponse((TxnPartitionResult("t", 0),)), 1)
    sent = producer.poll_requests(1)
    produce = next(r for _, r in sent if isinstance(r, ProduceRequest))
    node, add_offsets = next((n, r) for n, r in sent if isinstance(r, AddOffsetsToTxnRequest))
    assert node == 2 and add_offsets.group_id == "g"
    producer.on_response(2, add_offsets, AddOffsetsToTxnResponse(), 2)
    node, find = only(producer, 2, FindCoordinatorRequest)
    assert (find.key, find.key_type) == ("g", 0)
    producer.on_response(node, find, FindCoordinatorResponse((Coordinator("g", 1, "h", 1),)), 2)
    node, commit = only(producer, 2, TxnOffsetCommitRequest)
    assert node == 1 and (commit.group_id, commit.generation_id, commit.member_id) == ("g", 5, "m")
    assert [(p.tp, p.committed_offset) for p in commit.partitions] == [(TopicPartition("in", 0), 11)]
    producer.on_response(1, commit, TxnOffsetCommitResponse((TxnPartitionResult("in", 0),)), 3)
    assert offsets.done and offsets.error is None
    producer.on_response(1, produce, ProduceResponse((ProducePartitionResponse(
        "t", 0, Errors.TOPIC_AUTHORIZATION_FAILED),)), 4)
    assert txn.state == TxnState.ABORTABLE_ERROR and isinstance(txn.last_error, TopicAuthorizationFailedError)
    with pytest.raises(TransactionAbortableError):
        txn.begin_commit()
    with pytest.raises(TransactionAbortableError):
        producer.send("t", b"more", partition=0)
    aborted = txn.begin_abort()
    _, end = only(producer, 5, EndTxnRequest)
    producer.on_response(2, end, EndTxnResponse(), 6)
    assert aborted.done and aborted.error is None and txn.state == TxnState.READY


def test_a_lost_sequence_in_a_transaction_is_not_retried_and_the_abort_bumps_the_epoch() -> None:
    producer, txn, d, add = in_transaction(0)
    producer.on_response(2, add, AddPartitionsToTxnResponse((TxnPartitionResult("t", 0),)), 1)
    _, produce = only(producer, 1, ProduceRequest)
    producer.on_response(1, produce, ProduceResponse((ProducePartitionResponse(
        "t", 0, Errors.OUT_OF_ORDER_SEQUENCE_NUMBER),)), 2)
    assert d.error is not None and txn.state == TxnState.ABORTABLE_ERROR
    aborted = txn.begin_abort()
    _, end = only(producer, 3, EndTxnRequest)
    producer.on_response(2, end, EndTxnResponse(), 3)
    assert not aborted.done  # KIP-360: a new epoch first
    _, init = only(producer, 3, InitProducerIdRequest)
    assert (init.transactional_id, init.producer_id, init.producer_epoch) == ("tx", 7, 3)
    producer.on_response(2, init, InitProducerIdResponse(producer_id=7, producer_epoch=4), 4)
    assert aborted.done and txn.state == TxnState.READY
    txn.begin_transaction()
    producer.send("t", b"w", partition=0, now_ms=5)
    _, add = only(producer, 5, AddPartitionsToTxnRequest)
    producer.on_response(2, add, AddPartitionsToTxnResponse((TxnPartitionResult("t", 0),)), 5)
    _, produce = only(producer, 5, ProduceRequest)
    (batch,) = list(iter_batches(produce.partitions[0].records))
    assert (batch.producer_epoch, batch.base_sequence) == (4, 0)  # the partition's sequences restart


# --- KIP-890 transaction version 2 ---------------------------------------------------------------------
def tv2(producer: Producer, level: int = 2, epoch: int = 5) -> TransactionManager:
    """The cluster's finalized `transaction.version`, as the driver hands it in from ApiVersions."""
    txn = producer.transactions
    assert txn is not None
    txn.update_finalized_features({"transaction.version": level, "metadata.version": 27}, epoch)
    return txn


def test_version_2_produces_at_once_with_produce_v12_and_adopts_the_epoch_end_txn_v5_bumped() -> None:
    producer = initialized()
    txn = tv2(producer)
    txn.begin_transaction()
    d = producer.send("t", b"v", partition=0, now_ms=1)
    node, produce = only(producer, 1, ProduceRequest)  # no AddPartitionsToTxn: the leader adds the partition
    assert node == 1 and produce.version == 12 and produce.transactional_id == "tx"
    (batch,) = list(iter_batches(produce.partitions[0].records))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.is_transactional) == (7, 3, 0, True)
    committed = txn.begin_commit()
    producer.on_response(1, produce, ProduceResponse((ProducePartitionResponse("t", 0, base_offset=40),)), 2)
    node, end = only(producer, 2, EndTxnRequest)
    assert node == 2 and end.version == 5 and (end.committed, end.producer_id, end.producer_epoch) == (True, 7, 3)
    producer.on_response(2, end, EndTxnResponse(producer_id=7, producer_epoch=4), 3)
    assert committed.done and committed.error is None and d.metadata is not None and d.metadata.offset == 40
    assert (txn.producer_id, txn.producer_epoch) == (7, 4)
    # the next transaction writes under the bumped epoch, its sequences from 0 again
    txn.begin_transaction()
    producer.send("t", b"w", partition=0, now_ms=4)
    _, produce = only(producer, 4, ProduceRequest)
    (batch,) = list(iter_batches(produce.partitions[0].records))
    assert (batch.producer_epoch, batch.base_sequence) == (4, 0)
    aborted = txn.begin_abort()
    producer.on_response(1, produce, ProduceResponse((ProducePartitionResponse("t", 0, base_offset=41),)), 5)
    _, end = only(producer, 5, EndTxnRequest)
    assert (end.committed, end.producer_epoch) == (False, 4)
    producer.on_response(2, end, EndTxnResponse(producer_id=9, producer_epoch=0), 6)  # epoch exhausted: new id
    assert aborted.done and (txn.producer_id, txn.producer_epoch) == (9, 0)


def test_version_1_where_the_cluster_does_not_finalize_version_2() -> None:
    for level in (0, 1):
        producer = initialized()
        txn = tv2(producer, level)
        txn.begin_transaction()
        producer.send("t", b"v", partition=0, now_ms=1)
        _, add = only(producer, 1, AddPartitionsToTxnRequest)
        producer.on_response(2, add, AddPartitionsToTxnResponse((TxnPartitionResult("t", 0),)), 2)
        _, produce = only(producer, 2, ProduceRequest)
        assert produce.version == 11  # v12 would ask a version 2 broker to add the partition itself
        committed = txn.begin_commit()
        producer.on_response(1, produce, ProduceResponse((ProducePartitionResponse("t", 0, base_offset=1),)), 3)
        _, end = only(producer, 3, EndTxnRequest)
        assert end.version == 4
        producer.on_response(2, end, EndTxnResponse(), 4)
        assert committed.done and (txn.producer_id, txn.producer_epoch) == (7, 3)  # no bump in version 1


def test_the_version_is_decided_when_a_transaction_begins_and_an_older_features_epoch_is_ignored() -> None:
    producer = initialized()
    txn = tv2(producer, 2, epoch=5)
    tv2(producer, 1, epoch=4)  # a broker that has not seen the upgrade yet
    assert txn.offered_transaction_version == 2
    txn.begin_transaction()
    tv2(producer, 1, epoch=6)  # a downgrade mid-transaction: this transaction stays version 2
    producer.send("t", b"v", partition=0, now_ms=1)
    _, produce = only(producer, 1, ProduceRequest)
    assert produce.version == 12
    committed = txn.begin_commit()
    producer.on_response(1, produce, ProduceResponse((ProducePartitionResponse("t", 0, base_offset=1),)), 2)
    _, end = only(producer, 2, EndTxnRequest)
    producer.on_response(2, end, EndTxnResponse(producer_id=7, producer_epoch=4), 3)
    assert committed.done
    txn.begin_transaction()  # the next one sees the downgrade
    producer.send("t", b"w", partition=0, now_ms=4)
    only(producer, 4, AddPartitionsToTxnRequest)


def test_version_2_offsets_go_straight_to_the_group_coordinator_with_txn_offset_commit_v5() -> None:
    producer = initialized()
    txn = tv2(producer)
    txn.begin_transaction()
    offsets = txn.send_offsets({TopicPartition("in", 0): 11}, "g")
    node, find = only(producer, 1, FindCoordinatorRequest)  # no AddOffsetsToTxn first
    assert (find.key, find.key_type) == ("g", 0)
    producer.on_response(node, find, FindCoordinatorResponse((Coordinator("g", 1, "h", 1),)), 1)
    node, commit = only(producer, 1, TxnOffsetCommitRequest)
    assert node == 1 and commit.version == 5 and (commit.producer_id, commit.producer_epoch) == (7, 3)
    producer.on_response(1, commit, TxnOffsetCommitResponse((TxnPartitionResult("in", 0),)), 2)
    assert offsets.done and offsets.error is None
    committed = txn.begin_commit()
    _, end = only(producer, 3, EndTxnRequest)  # the offsets started the transaction: it must be ended
    assert end.version == 5
    producer.on_response(2, end, EndTxnResponse(producer_id=7, producer_epoch=4), 4)
    assert committed.done and txn.producer_epoch == 4


def test_version_2_a_lost_sequence_aborts_without_a_client_bump_and_end_txn_abortable_is_abortable() -> None:
    producer = initialized()
    txn = tv2(producer)
    txn.begin_transaction()
    producer.send("t", b"v", partition=0, now_ms=1)
    _, produce = only(producer, 1, ProduceRequest)
    producer.on_response(1, produce, ProduceResponse((ProducePartitionResponse(
        "t", 0, Errors.OUT_OF_ORDER_SEQUENCE_NUMBER),)), 2)
    assert txn.state == TxnState.ABORTABLE_ERROR
    aborted = txn.begin_abort()
    _, end = only(producer, 3, EndTxnRequest)
    producer.on_response(2, end, EndTxnResponse(producer_id=7, producer_epoch=4), 3)
    # the coordinator bumped the epoch with the abort: no InitProducerId (version 1 sends one, KIP-360)
    assert aborted.done and txn.state == TxnState.READY and txn.producer_epoch == 4
    assert producer.poll_requests(4) == []
    # a commit the coordinator refuses as abortable (a partition the leader could not add): abort works
    txn.begin_transaction()
    producer.send("t", b"w", partition=0, now_ms=5)
    _, produce = only(producer, 5, ProduceRequest)
    committed = txn.begin_commit()
    producer.on_response(1, produce, ProduceResponse((ProducePartitionResponse("t", 0, base_offset=3),)), 6)
    _, end = only(producer, 6, EndTxnRequest)
    producer.on_response(2, end, EndTxnResponse(Errors.TRANSACTION_ABORTABLE), 7)
    assert isinstance(committed.error, TransactionAbortableError) and txn.state == TxnState.ABORTABLE_ERROR
    aborted = txn.begin_abort()
    _, end = only(producer, 8, EndTxnRequest)
    assert end.committed is False
    producer.on_response(2, end, EndTxnResponse(producer_id=7, producer_epoch=5), 9)
    assert aborted.done and aborted.error is None and txn.producer_epoch == 5

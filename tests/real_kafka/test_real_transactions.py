"""The transactional producer against Apache Kafka 4.4 (the session cluster): a committed transaction is
read by a read_committed consumer, an aborted one is not (a read_uncommitted one sees both), offsets sent
with a transaction are the group's once it commits, and a second producer with the same transactional id
fences the first (its commit raises ProducerFencedError). Kafka 4.4 formats a cluster with `transaction.version`
2 finalized (its default; the harness names no level), so the producer runs KIP-890's transaction version 2:
no AddPartitionsToTxn (the requests it sends are counted), and every EndTxn bumps the epoch, which it
adopts. The same against `serve` (transaction version 1): tests/wire/test_serve_transactions.py."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Iterator
from typing import Any

import pytest

from epochguard.client import AsyncProducer, KafkaConsumer, KafkaProducer
from epochguard.client.network import NetworkClient, api_key_of
from epochguard.client.transactions import TransactionManager
from epochguard.errors import ProducerFencedError
from epochguard.kafka import KafkaCluster
from epochguard.types import OffsetAndMetadata, TopicPartition

TOPIC = "txn-real"


def _read(cluster: KafkaCluster, isolation: str, want: int, timeout_s: float = 30.0) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, isolation_level=isolation,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(2)]
        consumer.assign(tps)
        got: list[bytes] = []
        end = time.monotonic() + timeout_s
        quiet = 0
        while time.monotonic() < end and (len(got) < want or quiet < 3):  # then a few empty polls: nothing more
            batch = consumer.poll(timeout_ms=200)
            records = [r.value for recs in batch.values() for r in recs]
            got += records
            quiet = quiet + 1 if not records and len(got) >= want else 0
        return got
    finally:
        consumer.close()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[collections.Counter[tuple[str, int]]]:
    """(request type, version) of every request the clients send, counted (the wire itself, unchanged)."""
    counts: collections.Counter[tuple[str, int]] = collections.Counter()
    send = NetworkClient.send

    async def counting(self: NetworkClient, node_id: int, request: Any, *args: Any, **kwargs: Any) -> Any:
        conn = await self.connection(node_id)
        counts[type(request).__name__, conn.version_for(api_key_of(request), request.version)] += 1
        return await send(self, node_id, request, *args, **kwargs)

    monkeypatch.setattr(NetworkClient, "send", counting)
    yield counts


def test_commit_is_read_committed_abort_is_not_and_a_second_producer_fences_the_first(
        kafka_cluster: KafkaCluster, sent: collections.Counter[tuple[str, int]]) -> None:
    kafka_cluster.create_topic(TOPIC, {0: [1, 2, 3], 1: [2, 3, 1]})
    producer = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap, transactional_id="eg-txn", linger_ms=5,
                             max_block_ms=20_000)  # a hang fails in 20 s
    try:
        producer.init_transactions()
        assert producer.partitions_for(TOPIC) == {0, 1}
        producer.begin_transaction()
        epoch = producer.metrics()["producer-metrics"]["producer-epoch"]
        committed = [producer.send(TOPIC, key=b"k%d" % i, value=b"committed-%d" % i) for i in range(20)]
        producer.send_offsets_to_transaction({TopicPartition(TOPIC, 0): 7}, "eg-txn-group")
        producer.commit_transaction()
        assert all(f.succeeded() for f in committed)
        # KIP-890 transaction version 2: Produce v12 added the partitions, TxnOffsetCommit v5 the offsets,
        # and EndTxn v5 bumped the epoch, which the producer adopted
        metrics = producer.metrics()["producer-metrics"]
        assert metrics["transaction-version"] == 2 and metrics["producer-epoch"] == epoch + 1
        kinds = {kind for kind, _ in sent}
        assert "AddPartitionsToTxnRequest" not in kinds and "AddOffsetsToTxnRequest" not in kinds, sent
        assert sent["EndTxnRequest", 5] == 1 and sent["TxnOffsetCommitRequest", 5] == 1, sent
        assert sent["ProduceRequest", 12] >= 1 and not any(k == "ProduceRequest" and v != 12 for k, v in sent), sent
        producer.begin_transaction()
        for i in range(10):
            producer.send(TOPIC, key=b"k%d" % i, value=b"aborted-%d" % i)
        producer.flush()  # written to the log, then aborted: the markers hide them
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(TOPIC, key=b"k", value=b"after-abort")
        producer.commit_transaction()
        assert producer.metrics()["producer-metrics"]["producer-epoch"] == epoch + 3  # one bump per EndTxn

        seen = _read(kafka_cluster, "read_committed", 21)
        assert sorted(seen) == sorted([b"committed-%d" % i for i in range(20)] + [b"after-abort"])
        everything = _read(kafka_cluster, "read_uncommitted", 31)
        assert len(everything) == 31 and sum(v.startswith(b"aborted-") for v in everything) == 10

        group = KafkaConsumer(bootstrap_servers=kafka_cluster.bootstrap, group_id="eg-txn-group",
                              enable_auto_commit=False)
        try:
            assert group.committed(TopicPartition(TOPIC, 0)) == OffsetAndMetadata(7, "", None)
        finally:
            group.close()

        producer.begin_transaction()
        producer.send(TOPIC, key=b"k", value=b"zombie")
        producer.flush()
        second = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap, transactional_id="eg-txn")
        try:
            second.init_transactions()  # bumps the epoch and aborts the first one's open transaction
            with pytest.raises(ProducerFencedError):
                producer.commit_transaction()
            with pytest.raises(ProducerFencedError):
                producer.begin_transaction()
            second.begin_transaction()
            second.send(TOPIC, key=b"k", value=b"second")
            second.commit_transaction()
        finally:
            second.close()
        seen = _read(kafka_cluster, "read_committed", 22)
        assert b"zombie" not in seen and b"second" in seen
    finally:
        producer.close()


def test_a_transaction_nothing_joined_ends_at_once(kafka_cluster: KafkaCluster) -> None:
    """A transaction no partition and no offsets joined ends with no EndTxn (Java's TransactionManager
    completes it in nextRequest): commit_transaction and abort_transaction return then. They used to wait
    out max_block_ms (60 s by default: `epochguard recover`'s re-run, with nothing to publish in its
    transaction, took a minute), since nothing woke them."""
    async def run() -> None:
        producer = AsyncProducer(bootstrap_servers=kafka_cluster.bootstrap, transactional_id="eg-txn-empty",
                                 max_block_ms=600_000)
        try:
            await asyncio.wait_for(producer.init_transactions(), 60)
            for end in (producer.commit_transaction, producer.abort_transaction, producer.commit_transaction):
                producer.begin_transaction()
                await asyncio.wait_for(end(), 20)  # far below max_block_ms: waiting it out fails here
        finally:
            await producer.close()

    asyncio.run(run())


def test_transaction_version_1_still_commits_and_aborts_on_kafka_4_4(
        kafka_cluster: KafkaCluster, sent: collections.Counter[tuple[str, int]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer that does not see `transaction.version` 2 (a broker without it, as `serve`) keeps to
    version 1, and Kafka 4.4 serves it: AddPartitionsToTxn v3, Produce v11, EndTxn v4, no epoch bump."""
    monkeypatch.setattr(TransactionManager, "update_finalized_features", lambda self, features, epoch: None)
    topic = "txn-real-v1"
    kafka_cluster.create_topic(topic, {0: [1, 2, 3]})
    producer = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap, transactional_id="eg-txn-v1", linger_ms=5,
                             max_block_ms=20_000)
    try:
        producer.init_transactions()
        epoch = producer.metrics()["producer-metrics"]["producer-epoch"]
        for outcome, n in (("committed", 5), ("aborted", 3), ("committed", 1)):
            producer.begin_transaction()
            for i in range(n):
                producer.send(topic, value=b"%s-%d" % (outcome.encode(), i), partition=0)
            producer.flush()
            (producer.commit_transaction if outcome == "committed" else producer.abort_transaction)()
        metrics = producer.metrics()["producer-metrics"]
        assert metrics["transaction-version"] == 1 and metrics["producer-epoch"] == epoch
        # AddPartitionsToTxn once a transaction, again while the last one's markers are written (CONCURRENT_TRANSACTIONS)
        assert sent["AddPartitionsToTxnRequest", 3] >= 3 and sent["EndTxnRequest", 4] == 3, sent
        assert sent["ProduceRequest", 11] >= 3 and not any(k == "ProduceRequest" and v != 11 for k, v in sent), sent
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka_cluster.bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        got: list[bytes] = []
        end = time.monotonic() + 30
        while time.monotonic() < end and len(got) < 6:
            got += [r.value for recs in consumer.poll(timeout_ms=200).values() for r in recs]
        assert sorted(got) == sorted([b"committed-%d" % i for i in range(5)] + [b"committed-0"])
    finally:
        consumer.close()

"""The transactional producer against Apache Kafka 4.4 (the session cluster): a committed transaction is
read by a read_committed consumer, an aborted one is not (a read_uncommitted one sees both), offsets sent
with a transaction are the group's once it commits, and a second producer with the same transactional id
fences the first (its commit raises ProducerFencedError). The same against `serve`: tests/wire/test_serve_transactions.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from epochguard.client import AsyncProducer, KafkaConsumer, KafkaProducer
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


def test_commit_is_read_committed_abort_is_not_and_a_second_producer_fences_the_first(
        kafka_cluster: KafkaCluster) -> None:
    kafka_cluster.create_topic(TOPIC, {0: [1, 2, 3], 1: [2, 3, 1]})
    producer = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap, transactional_id="eg-txn", linger_ms=5,
                             max_block_ms=20_000)  # a hang fails in 20 s
    try:
        producer.init_transactions()
        assert producer.partitions_for(TOPIC) == {0, 1}
        producer.begin_transaction()
        committed = [producer.send(TOPIC, key=b"k%d" % i, value=b"committed-%d" % i) for i in range(20)]
        producer.send_offsets_to_transaction({TopicPartition(TOPIC, 0): 7}, "eg-txn-group")
        producer.commit_transaction()
        assert all(f.succeeded() for f in committed)
        producer.begin_transaction()
        for i in range(10):
            producer.send(TOPIC, key=b"k%d" % i, value=b"aborted-%d" % i)
        producer.flush()  # written to the log, then aborted: the markers hide them
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(TOPIC, key=b"k", value=b"after-abort")
        producer.commit_transaction()

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

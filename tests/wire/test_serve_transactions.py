"""Transactional producers against `epochguard serve` (a subprocess, the real wire): epochguard's own
`KafkaProducer`, kafka-python's and confluent-kafka's. A committed transaction is read by a read_committed consumer, an
aborted one is not (a read_uncommitted one sees both), offsets sent with a transaction are the group's
once it commits, and a second producer with the same transactional id fences the first and aborts its
open transaction. The same checks as tests/real_kafka/test_real_transactions.py against Kafka 4.4."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from epochguard.client import KafkaConsumer, KafkaProducer
from epochguard.errors import ProducerFencedError
from epochguard.types import OffsetAndMetadata, TopicPartition
from tests.wire.serving import Served, read_values

TOPIC = "input"  # the clean scenario's topic for real clients (one partition, three replicas)
TP = TopicPartition(TOPIC, 0)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """Serve with a trace: afterwards the trace replays against a fresh cluster with byte-identical answers
    (the coordinator reads no clock but the cluster's steps) and is judged the same."""
    from epochguard.wire.replay import replay

    trace = tmp_path / "run.jsonl"
    s = Served("clean", trace=trace)
    try:
        yield s
    finally:
        result = s.stop()
    assert result["violations"] == []
    assert replay(trace).report() == result["clients"]


def _read(bootstrap: str, isolation: str, want: int) -> list[bytes]:
    return read_values(bootstrap, TP, isolation, want)


def test_epochguard_producer_commit_abort_offsets_and_fencing(served: Served) -> None:
    bootstrap = served.bootstrap
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="eg-txn", linger_ms=5, max_block_ms=20_000)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        committed = [producer.send(TOPIC, key=b"k", value=b"committed-%d" % i) for i in range(20)]
        producer.send_offsets_to_transaction({TP: 7}, "eg-txn-group")
        producer.commit_transaction()
        assert all(f.succeeded() for f in committed)
        producer.begin_transaction()
        for i in range(10):
            producer.send(TOPIC, key=b"k", value=b"aborted-%d" % i)
        producer.send_offsets_to_transaction({TP: 99}, "eg-txn-group")  # dropped with the abort
        producer.flush()  # written to the log, then aborted: the markers hide them
        producer.abort_transaction()

        assert sorted(_read(bootstrap, "read_committed", 20)) == sorted(b"committed-%d" % i for i in range(20))
        everything = _read(bootstrap, "read_uncommitted", 30)
        assert len(everything) == 30 and sum(v.startswith(b"aborted-") for v in everything) == 10
        group = KafkaConsumer(bootstrap_servers=bootstrap, group_id="eg-txn-group", enable_auto_commit=False)
        try:
            assert group.committed(TP) == OffsetAndMetadata(7, "", None)
        finally:
            group.close()

        producer.begin_transaction()
        producer.send(TOPIC, key=b"k", value=b"zombie")
        producer.flush()
        second = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="eg-txn", max_block_ms=20_000)
        try:
            second.init_transactions()  # bumps the epoch and aborts the first one's open transaction
            with pytest.raises(ProducerFencedError):
                producer.commit_transaction()
            second.begin_transaction()
            second.send(TOPIC, key=b"k", value=b"second")
            second.commit_transaction()
        finally:
            second.close()
        seen = _read(bootstrap, "read_committed", 21)
        assert b"zombie" not in seen and b"second" in seen and len(seen) == 21
    finally:
        producer.close()


def test_kafka_python_transactional_producer_commit_and_abort(served: Served) -> None:
    kafka = pytest.importorskip("kafka", reason="kafka-python (the dev extra) is missing")
    bootstrap = served.bootstrap
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-txn", client_id="kp-txn")
    try:
        producer.init_transactions()
        for end, tag in ((producer.commit_transaction, b"kp-committed"), (producer.abort_transaction, b"kp-aborted")):
            producer.begin_transaction()
            for i in range(5):
                producer.send(TOPIC, key=b"k", value=b"%s-%d" % (tag, i))
            producer.flush()
            end()
    finally:
        producer.close(timeout=10)
    seen = _read(bootstrap, "read_committed", 5)
    assert sorted(seen) == [b"kp-committed-%d" % i for i in range(5)]
    assert len(_read(bootstrap, "read_uncommitted", 10)) == 10



def test_confluent_kafka_transactional_producer_commit_and_abort(served: Served) -> None:
    """librdkafka's transaction manager (FindCoordinator key type 1, InitProducerId, AddPartitionsToTxn,
    EndTxn): its committed records are read by a read_committed consumer, its aborted ones are not."""
    ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka (the dev extra) is missing")
    producer = ck.Producer({"bootstrap.servers": served.bootstrap, "transactional.id": "ck-txn",
                            "client.id": "ck-txn", "log_level": 3})
    producer.init_transactions(20)
    for end, tag in ((producer.commit_transaction, b"ck-committed"), (producer.abort_transaction, b"ck-aborted")):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(TOPIC, key=b"k", value=b"%s-%d" % (tag, i))
        assert producer.flush(10) == 0
        end(20)
    seen = _read(served.bootstrap, "read_committed", 5)
    assert sorted(seen) == [b"ck-committed-%d" % i for i in range(5)]
    assert len(_read(served.bootstrap, "read_uncommitted", 10)) == 10

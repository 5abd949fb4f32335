"""`marker-truncated` on Apache Kafka itself (issue 20; KAFKA-20716): does an unclean election that loses an
ABORT marker let the producer's next transaction commit the aborted records, as `serve`'s scenario claims
(tests/wire/test_marker_truncated.py)?

A transactional producer (confluent-kafka) on a topic with replicas [1, 2] and min.insync.replicas=1:
transaction A committed; transaction B's records written (acks=all: both replicas have them); broker 2
stops (ISR [1]); B aborted: the coordinator's ABORT marker reaches broker 1 alone. Broker 1 stops, broker 2
starts and is elected by ElectLeaders UNCLEAN: it has B's records and no marker. Transaction C committed on
broker 2; broker 1 starts and truncates. Then a fresh read_committed consumer reads the partition.

It does, on Kafka 4.4.0 with transaction.version 2: the fresh read_committed consumer delivers B's five
aborted records between A's and C's, exactly as `serve` does.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from epochguard.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.no_mutants]

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka (the dev extra) is missing")
TOPIC = "marker-truncated"


def read(cluster: KafkaCluster, isolation: str, until: bytes, timeout_s: float = 60.0) -> list[bytes]:
    consumer = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"marker-truncated-{isolation}",
                            "enable.auto.commit": False, "isolation.level": isolation, "log_level": 3})
    values: list[bytes] = []
    try:
        consumer.assign([ck.TopicPartition(TOPIC, 0, ck.OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        while until not in values and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(bytes(msg.value()))
    finally:
        consumer.close()
    return values


def transaction(producer: Any, prefix: str) -> None:
    producer.begin_transaction()
    for i in range(5):
        producer.produce(TOPIC, f"{prefix}-{i}".encode(), partition=0)
    assert producer.flush(60) == 0


def test_an_unclean_election_that_loses_an_abort_marker(kafka_cluster: KafkaCluster) -> None:
    c = kafka_cluster
    c.create_topic(TOPIC, {0: [1, 2]}, {"min.insync.replicas": "1", "retention.ms": "-1"})
    producer = ck.Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "epochguard-marker-truncated",
                            "acks": "all", "linger.ms": 0, "log_level": 3})
    producer.init_transactions(60)
    transaction(producer, "a")
    producer.commit_transaction(60)
    transaction(producer, "b")  # acks=all with ISR [1, 2]: broker 2 has B's records
    try:
        c.stop_broker(2)
        c.wait_partition(TOPIC, 0, lambda s: s.isr == (1,), "ISR [1]")
        producer.abort_transaction(60)  # the ABORT marker: broker 1 alone
        c.stop_broker(1)
        c.wait_partition(TOPIC, 0, lambda s: s.leader == -1, "no leader")
        c.start_broker(2)
        c.elect_leaders(TOPIC, 0, unclean=True)
        c.wait_partition(TOPIC, 0, lambda s: s.leader == 2, "leader 2 (unclean)")
        transaction(producer, "c")
        producer.commit_transaction(60)
    finally:
        for b in (1, 2):
            if not c.running(b):
                c.start_broker(b)
    c.wait_partition(TOPIC, 0, lambda s: set(s.isr) == {1, 2}, "ISR [1, 2] again")
    everything = read(c, "read_uncommitted", b"c-4")
    committed = read(c, "read_committed", b"c-4")
    version = c.admin().describe_features().get("transaction.version", {}).get("finalized")
    a, b, cc = ([f"{p}-{i}".encode() for i in range(5)] for p in "abc")
    assert everything == a + b + cc  # B's records survived the election
    # serve's claim: C's COMMIT marker closes B's orphaned records too, so read_committed delivers them (seen
    # with transaction.version 2, the default of a 4.4 cluster: the epoch bump after B does not reset it)
    assert committed == a + b + cc, f"transaction.version {version}: read_committed delivered {committed}"

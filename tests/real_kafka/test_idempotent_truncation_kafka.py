"""`idempotent-truncation` on Apache Kafka itself (issue 20; librdkafka#4953): after an unclean election
loses an idempotent producer's acknowledged tail, does the new leader answer its next batch
OUT_OF_ORDER_SEQUENCE_NUMBER, and do the producers do what they did on `serve`
(tests/wire/test_idempotent_truncation.py): librdkafka stops with a fatal error, epochguard's producer
bumps its epoch and goes on?

Two idempotent producers (confluent-kafka with enable.idempotence=true, epochguard's KafkaProducer with
enable_idempotence) on a topic with replicas [1, 2] and min.insync.replicas=1: five records each while both
replicas are in sync (broker 2 copies them, and with them each producer's sequences 0-4); broker 2 stops
(ISR [1]); five more each, acknowledged by broker 1 alone (sequences 5-9); broker 1 stops, broker 2 starts
and is elected by ElectLeaders UNCLEAN. The next record of each producer has sequence 10 where broker 2
expects 5.
"""

from __future__ import annotations

import time

import pytest

from epochguard.client import KafkaProducer
from epochguard.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.no_mutants]

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka (the dev extra) is missing")
TOPIC = "idempotent-truncation"


def test_the_new_leader_refuses_the_next_sequence_and_each_producer_does_what_it_did_on_serve(
    kafka_cluster: KafkaCluster,
) -> None:
    c = kafka_cluster
    c.create_topic(TOPIC, {0: [1, 2]}, {"min.insync.replicas": "1", "retention.ms": "-1"})
    errors: list[ck.KafkaError] = []
    rdkafka = ck.Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True, "acks": "all",
                           "linger.ms": 0, "log_level": 3, "error_cb": errors.append})
    ours = KafkaProducer(bootstrap_servers=c.bootstrap, acks="all", enable_idempotence=True)

    def send(prefix: str) -> None:
        for i in range(5):
            rdkafka.produce(TOPIC, f"rd-{prefix}-{i}".encode(), partition=0)
            ours.send(TOPIC, f"eg-{prefix}-{i}".encode(), partition=0).get(60)
        assert rdkafka.flush(60) == 0

    try:
        send("a")  # acks=all with ISR [1, 2]: broker 2 knows both producers up to sequence 4
        c.stop_broker(2)
        c.wait_partition(TOPIC, 0, lambda s: s.isr == (1,), "ISR [1]")
        send("b")  # sequences 5-9, broker 1 alone
        c.stop_broker(1)
        c.wait_partition(TOPIC, 0, lambda s: s.leader == -1, "no leader")
        c.start_broker(2)
        c.elect_leaders(TOPIC, 0, unclean=True)
        c.wait_partition(TOPIC, 0, lambda s: s.leader == 2, "leader 2 (unclean)")

        after = ours.send(TOPIC, b"eg-c-0", partition=0).get(60)  # epoch bumped, sequence 0: written
        assert after.offset == 10  # right after the ten records broker 2 had: both producers' b's are gone

        rdkafka.produce(TOPIC, b"rd-c-0", partition=0)
        deadline = time.monotonic() + 60
        while not any(e.fatal() for e in errors) and time.monotonic() < deadline:
            try:
                rdkafka.poll(0.5)
            except ck.KafkaException as exc:
                errors.append(exc.args[0])
        fatal = [e for e in errors if e.fatal()]
        assert fatal, f"librdkafka raised no fatal error: {[e.str() for e in errors]}"
        assert "sequence desynchronization" in fatal[0].str(), fatal[0].str()
        assert fatal[0].code() == ck.KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER
    finally:
        ours.close(5)
        for b in (1, 2):
            if not c.running(b):
                c.start_broker(b)

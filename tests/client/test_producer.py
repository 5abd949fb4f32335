"""The sans-IO producer (`epochguard.client.producer`): Kafka's murmur2 partitioner bit for bit (Java's
`UtilsTest.testMurmur2` vectors, kafka-python's implementation on random keys), sticky keyless
partitioning, linger and batch size, one batch in flight per partition, retries on retriable errors and
failures on the others, acks=0; and `KafkaProducer` against `epochguard serve`: acks=all round trips read
back by the consumer, nothing acknowledged lost."""

from __future__ import annotations

import random
import time

import pytest

from epochguard._core import iter_batches
from epochguard.client.producer import Producer, murmur2, partition_for_key
from epochguard.errors import Errors, TopicAuthorizationFailedError
from epochguard.protocol.messages import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
)
from epochguard.types import TopicPartition

# Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_is_javas() -> None:
    for key, expected in JAVA_VECTORS.items():
        assert murmur2(key) == expected, key


def test_murmur2_and_the_key_partition_agree_with_kafka_python() -> None:
    default = pytest.importorskip("kafka.partitioner.default", reason="kafka-python (dev extra) is the reference")
    rng = random.Random(7)
    for _ in range(2000):
        key = rng.randbytes(rng.randrange(0, 40))
        assert murmur2(key) & 0xFFFFFFFF == default.murmur2(key)
        n = rng.randrange(1, 50)
        assert partition_for_key(key, n) == (default.murmur2(key) & 0x7FFFFFFF) % n  # DefaultPartitioner.partition


def metadata(partitions: int = 3, leader: int = 1, epoch: int = 4) -> MetadataResponse:
    return MetadataResponse(
        (MetadataResponseTopic("t", tuple(MetadataResponsePartition(p, leader, epoch, (1, 2), (1, 2))
                                          for p in range(partitions))),),
        brokers=(MetadataResponseBroker(1, "h", 1), MetadataResponseBroker(2, "h", 2)), version=12)


def ready(producer: Producer, now: int = 0, **kw: int) -> None:
    """Answer the first Metadata request."""
    ((node, request),) = producer.poll_requests(now)
    assert node == -1 and isinstance(request, MetadataRequest) and request.topics == ("t",)
    producer.on_response(node, request, metadata(**kw), now)


def records_of(request: ProduceRequest) -> dict[TopicPartition, list[tuple[bytes | None, bytes | None]]]:
    return {p.tp: [(r.key, r.value) for b in iter_batches(p.records) for r in b.records()] for p in request.partitions}


def test_linger_then_one_batch_per_partition_to_its_leader_and_offsets_from_the_base() -> None:
    producer = Producer(bootstrap=[-1], linger_ms=5, batch_size=10_000)
    deliveries = [producer.send("t", b"v%d" % i, b"k", now_ms=0) for i in range(3)]
    keyed = partition_for_key(b"k", 3)
    ready(producer)
    assert producer.poll_requests(4) == []  # lingering
    assert producer.next_deadline_ms() == 5
    ((node, request),) = producer.poll_requests(5)
    assert node == 1 and request.acks == -1
    assert records_of(request) == {TopicPartition("t", keyed): [(b"k", b"v0"), (b"k", b"v1"), (b"k", b"v2")]}
    assert not any(d.done for d in deliveries)
    producer.on_response(1, request, ProduceResponse((ProducePartitionResponse("t", keyed, base_offset=40),)), 6)
    assert [(d.metadata.offset, d.metadata.leader_epoch, d.metadata.partition) for d in deliveries] == [
        (40, 4, keyed), (41, 4, keyed), (42, 4, keyed)]
    assert producer.pending() == 0


def test_keyless_records_stick_to_one_partition_until_its_batch_is_sent() -> None:
    producer = Producer(bootstrap=[-1], linger_ms=0, rng=random.Random(3))
    assert producer.poll_requests(0) == []  # no topic yet: no metadata asked for
    first = [producer.send("t", b"a%d" % i, now_ms=0) for i in range(4)]
    ready(producer)
    ((_, request),) = producer.poll_requests(1)
    (tp,) = records_of(request)
    assert len(records_of(request)[tp]) == 4
    producer.on_response(1, request, ProduceResponse((ProducePartitionResponse("t", tp.partition, base_offset=0),)), 2)
    assert {d.metadata.partition for d in first} == {tp.partition}
    partitions_after = set()
    for i in range(30):  # each sent batch moves the sticky partition: all three get used
        d = producer.send("t", b"b%d" % i, now_ms=3)
        ((_, request),) = producer.poll_requests(3)
        (tp,) = records_of(request)
        partitions_after.add(tp.partition)
        producer.on_response(1, request, ProduceResponse((ProducePartitionResponse("t", tp.partition, base_offset=i),)), 3)
        assert d.metadata is not None and d.metadata.partition == tp.partition
    assert partitions_after == {0, 1, 2}


def test_batch_size_closes_a_batch_and_one_batch_per_partition_is_in_flight() -> None:
    producer = Producer(bootstrap=[-1], linger_ms=1_000, batch_size=100)
    for _ in range(6):
        producer.send("t", bytes(40), partition=0, now_ms=0)  # 56 bytes each (as the producer counts)
    ready(producer)
    ((_, first),) = producer.poll_requests(0)  # full batches go out before linger_ms
    assert len(records_of(first)[TopicPartition("t", 0)]) == 1  # 56 + 56 > 100: one record a batch
    assert producer.poll_requests(0) == []  # the partition's next batch waits for this one
    producer.on_response(1, first, ProduceResponse((ProducePartitionResponse("t", 0, base_offset=0),)), 1)
    ((_, second),) = producer.poll_requests(1)
    assert records_of(second)[TopicPartition("t", 0)]


def test_a_retriable_error_retries_after_the_backoff_and_asks_for_metadata() -> None:
    producer = Producer(bootstrap=[-1], linger_ms=0, retry_backoff_ms=100)
    d = producer.send("t", b"v", partition=2, now_ms=0)
    ready(producer)
    ((_, request),) = producer.poll_requests(0)
    producer.on_response(1, request, ProduceResponse((ProducePartitionResponse(
        "t", 2, Errors.NOT_LEADER_OR_FOLLOWER),)), 10)
    assert not d.done and producer.metadata.update_requested
    assert producer.poll_requests(50) == []  # metadata refreshes at most every retry_backoff_ms
    out = producer.poll_requests(100)
    assert [type(r) for _, r in out] == [MetadataRequest]  # the batch waits out its own back-off (110)
    producer.on_response(out[0][0], out[0][1], metadata(leader=2, epoch=5), 100)
    ((node, retried),) = producer.poll_requests(110)
    assert node == 2 and records_of(retried) == records_of(request)  # the same batch, to the new leader
    producer.on_response(2, retried, ProduceResponse((ProducePartitionResponse("t", 2, base_offset=7),)), 111)
    assert (d.metadata.offset, d.metadata.leader_epoch) == (7, 5)


def test_a_lost_connection_retries_and_a_fatal_error_fails_the_records() -> None:
    producer = Producer(bootstrap=[-1], linger_ms=0, retry_backoff_ms=10)
    d = producer.send("t", b"v", partition=1, now_ms=0)
    ready(producer)
    ((_, request),) = producer.poll_requests(0)
    producer.on_request_failed(1, request, 5)
    assert not d.done
    out = [r for _, r in producer.poll_requests(20) if isinstance(r, ProduceRequest)]
    producer.on_response(1, out[0], ProduceResponse((ProducePartitionResponse(
        "t", 1, Errors.TOPIC_AUTHORIZATION_FAILED),)), 21)
    assert isinstance(d.error, TopicAuthorizationFailedError)


def test_acks_zero_completes_on_send_and_delivery_timeout_expires_what_never_went() -> None:
    producer = Producer(bootstrap=[-1], linger_ms=0, acks=0, delivery_timeout_ms=1_000)
    d = producer.send("t", b"v", partition=0, now_ms=0)
    ready(producer)
    ((_, request),) = producer.poll_requests(0)
    assert request.acks == 0 and d.metadata is not None and d.metadata.offset == -1
    stuck = Producer(bootstrap=[-1], delivery_timeout_ms=1_000)
    e = stuck.send("t", b"v", now_ms=0)  # no metadata ever arrives
    stuck.poll_requests(0)
    stuck.poll_requests(1_000)
    assert e.error is not None and "no metadata" in str(e.error)


def test_round_trip_against_serve_acks_all() -> None:
    from epochguard.client.kafka_consumer import KafkaConsumer
    from epochguard.client.kafka_producer import KafkaProducer
    from tests.wire.serving import Served

    served = Served("clean")
    try:
        producer = KafkaProducer(bootstrap_servers=served.bootstrap, acks="all", client_id="eg-producer",
                                 compression_type="lz4")
        values = [b"value-%d" % i for i in range(300)]
        futures = [producer.send("input", value=v, key=b"k") for v in values]
        producer.flush(timeout=30)
        acked = [f.get(timeout=10) for f in futures]
        producer.close()
        tp = TopicPartition("input", acked[0].partition)
        consumer = KafkaConsumer(bootstrap_servers=served.bootstrap, client_id="eg-reader",
                                 auto_offset_reset="earliest", enable_auto_commit=False)
        consumer.assign([tp])
        got: list[bytes | None] = []
        end = time.monotonic() + 20
        while len(got) < len(values) and time.monotonic() < end:
            got += [r.value for r in consumer.poll(timeout_ms=200).get(tp, [])]
        consumer.close()
    finally:
        result = served.stop()
    assert {a.partition for a in acked} == {acked[0].partition}  # one key, one partition
    assert [a.offset for a in acked] == list(range(len(values)))  # acks=all, in order
    assert got == values
    (entry,) = [c for c in result["clients"] if c["client_id"] == "eg-producer"]
    assert entry["acks_lost"] == [] and result["violations"] == []

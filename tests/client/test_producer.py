"""The sans-IO producer (`epochguard.client.producer`): Kafka's murmur2 partitioner bit for bit (Java's
`UtilsTest.testMurmur2` vectors, kafka-python's implementation on random keys), sticky keyless
partitioning, linger and batch size, one batch in flight per partition, retries on retriable errors and
failures on the others, acks=0; and `KafkaProducer` against `epochguard serve`: acks=all round trips read
back by the consumer, nothing acknowledged lost."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from epochguard import _core
from epochguard._core import iter_batches
from epochguard.client.producer import Producer, murmur2, partition_for_key
from epochguard.errors import Errors, SaslAuthenticationError, TopicAuthorizationFailedError
from epochguard.protocol.messages import (
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


def test_max_in_flight_pipelines_a_partitions_batches_up_to_the_limit_per_broker() -> None:
    producer = Producer(bootstrap=[-1], linger_ms=0, batch_size=100, max_in_flight=2)
    for _ in range(3):  # three batches of one 100-byte record for partition 0, one for partition 1
        producer.send("t", bytes(100), partition=0, now_ms=0)
    producer.send("t", b"p1", partition=1, now_ms=0)
    ready(producer)
    ((node, first),) = producer.poll_requests(0)
    ((_, second),) = producer.poll_requests(0)  # partition 0's next batch while the first is unanswered
    assert node == 1 and sorted(records_of(first)) == [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert list(records_of(second)) == [TopicPartition("t", 0)]
    assert producer.poll_requests(0) == [] and producer.next_deadline_ms() == 30_000  # two in flight to broker 1
    producer.on_response(1, second, ProduceResponse((ProducePartitionResponse("t", 0, base_offset=1),)), 1)
    ((_, third),) = producer.poll_requests(1)
    assert list(records_of(third)) == [TopicPartition("t", 0)]
    # idempotence keeps one batch in flight per partition whatever the limit: sequences stay in order
    muted = idempotent(max_in_flight=5)
    for _ in range(3):
        muted.send("t", bytes(16_384), partition=0, now_ms=1)
    sent = produced(muted, 1)
    assert [list(records_of(r)) for _, r in sent] == [[TopicPartition("t", 0)]]
    assert produced(muted, 2) == []


def test_batches_of_one_partition_failing_together_are_retried_in_their_order() -> None:
    """Two pipelined batches of a partition lost with their connection (or both answered with a retriable
    error) go back in the order they were made: the second must not be put ahead of the first."""
    producer = Producer(bootstrap=[-1], linger_ms=0, batch_size=100, max_in_flight=2, retry_backoff_ms=10)
    for i in range(2):
        producer.send("t", b"%d" % i * 100, partition=0, now_ms=0)
    ready(producer)
    ((_, first),) = producer.poll_requests(0)
    ((_, second),) = producer.poll_requests(0)
    producer.on_request_failed(1, first, 1)  # answered in the order they were written
    producer.on_response(1, second, ProduceResponse((ProducePartitionResponse(
        "t", 0, Errors.NOT_LEADER_OR_FOLLOWER),)), 2)
    again = [r for _, r in producer.poll_requests(20) + producer.poll_requests(20) if isinstance(r, ProduceRequest)]
    assert [records_of(r)[TopicPartition("t", 0)][0][1][:1] for r in again] == [b"0", b"1"]


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


def test_metadata_goes_to_the_next_bootstrap_node_after_a_failure_and_waits_when_none_may_be_tried() -> None:
    producer = Producer(bootstrap=[-1, -2], linger_ms=0, retry_backoff_ms=100)
    producer.send("t", b"v", partition=0, now_ms=0)
    ((node, request),) = producer.poll_requests(0)
    assert node == -1
    producer.on_request_failed(node, request, 5)  # -1 refused the connection
    ((node, request),) = producer.poll_requests(105)
    assert node == -2 and isinstance(request, MetadataRequest)
    # With the network's chooser: a None (every node in its back-off) sends nothing until the back-off
    offered: list[list[int]] = []
    waiting = Producer(bootstrap=[-1, -2], linger_ms=0, retry_backoff_ms=100,
                       least_loaded=lambda nodes: offered.append(list(nodes)) and None)
    waiting.send("t", b"v", partition=0, now_ms=0)
    assert waiting.poll_requests(0) == [] and waiting.poll_requests(50) == []
    assert offered == [[-1, -2]] and waiting.next_deadline_ms() == 100


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


def test_abort_unsent_fails_what_waits_and_leaves_what_is_in_flight() -> None:
    """An authentication failure (the driver calls abort_unsent, as Java's Sender aborts undrained batches
    on a fatal error): records waiting for metadata and batches not sent fail with it; a batch in flight
    still gets its answer."""
    producer = Producer(bootstrap=[-1], linger_ms=0)
    in_flight = producer.send("t", b"a", partition=0, now_ms=0)
    ready(producer)
    ((_, request),) = producer.poll_requests(0)
    queued = producer.send("t", b"b", partition=0, now_ms=1)  # behind the busy partition
    waiting = producer.send("other", b"c", now_ms=1)  # no metadata for its topic yet
    err = SaslAuthenticationError("PLAIN authentication failed", "PLAIN")
    assert producer.abort_unsent(err) == 2
    assert queued.error is err and waiting.error is err and not in_flight.done
    assert producer.pending() == 1
    producer.on_response(1, request, ProduceResponse((ProducePartitionResponse("t", 0, base_offset=7),)), 2)
    assert in_flight.metadata is not None and in_flight.metadata.offset == 7
    assert producer.pending() == 0 and producer.abort_unsent(err) == 0


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


# --- idempotence (Java's TransactionManager for a producer without a transactional id) -------------------
def idempotent(pid: int = 1000, epoch: int = 0, **kw: int) -> Producer:
    """An idempotent producer with its metadata and its producer id."""
    producer = Producer(bootstrap=[-1], linger_ms=0, retry_backoff_ms=10, idempotent=True, **kw)
    producer.send("t", b"first", partition=0, now_ms=0)
    (meta_node, meta), (node, init) = producer.poll_requests(0)  # both to a bootstrap broker
    assert isinstance(meta, MetadataRequest) and meta_node == node == -1
    assert isinstance(init, InitProducerIdRequest) and init.transactional_id is None
    producer.on_response(meta_node, meta, metadata(), 0)
    assert producer.poll_requests(0) == []  # no Produce before the producer id
    assert producer.next_deadline_ms() == 30_000  # the InitProducerId's request timeout
    producer.on_response(node, init, InitProducerIdResponse(producer_id=pid, producer_epoch=epoch), 1)
    return producer


def produced(producer: Producer, now: int) -> list[tuple[int, ProduceRequest]]:
    """The Produce requests sent at `now`, a Metadata request asked meanwhile answered first."""
    out = producer.poll_requests(now)
    for node, request in out:
        if isinstance(request, MetadataRequest):
            producer.on_response(node, request, metadata(), now)
            out += producer.poll_requests(now)
    return [(n, r) for n, r in out if isinstance(r, ProduceRequest)]


def headers_of(request: ProduceRequest) -> dict[int, tuple[int, int, int, int]]:
    """partition -> (producer id, epoch, base sequence, record count) of its one batch."""
    out = {}
    for p in request.partitions:
        (batch,) = list(iter_batches(p.records))
        out[p.partition_index] = (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.records_count)
    return out


def answer(producer: Producer, request: ProduceRequest, now: int, **errors: Errors) -> None:
    """Answer every partition: NONE at offset 0, or `errors['p<n>']`."""
    producer.on_response(1, request, ProduceResponse(tuple(
        ProducePartitionResponse("t", p.partition_index, errors.get(f"p{p.partition_index}", Errors.NONE),
                                 base_offset=0, log_start_offset=0)
        for p in request.partitions)), now)


def test_idempotent_batches_carry_the_producer_id_epoch_and_sequences_kept_across_retries() -> None:
    producer = idempotent()
    ((_, first),) = producer.poll_requests(1)
    assert headers_of(first) == {0: (1000, 0, 0, 1)}
    for i in range(3):
        producer.send("t", b"v%d" % i, partition=0, now_ms=1)
    producer.send("t", b"other", partition=1, now_ms=1)
    answer(producer, first, 2)
    ((_, second),) = producer.poll_requests(2)
    assert headers_of(second) == {0: (1000, 0, 1, 3), 1: (1000, 0, 0, 1)}  # per partition, from 0
    answer(producer, second, 3, p0=Errors.NOT_LEADER_OR_FOLLOWER)
    ((_, retried),) = produced(producer, 20)
    assert headers_of(retried) == {0: (1000, 0, 1, 3)}  # the same sequence again
    producer.send("t", b"next", partition=0, now_ms=20)
    answer(producer, retried, 21)
    ((_, third),) = produced(producer, 21)
    assert headers_of(third) == {0: (1000, 0, 4, 1)}


def test_an_encoded_batch_takes_its_place_and_its_sequence_between_records() -> None:
    producer = idempotent()
    ((_, first),) = producer.poll_requests(1)
    assert headers_of(first) == {0: (1000, 0, 0, 1)}
    ((_, raw, rows),) = _core.encode_arrow_batches(
        _pa().table({"value": [b"a", b"b", b"c"]}), partitions=3, sticky_partition=0, default_timestamp=5,
        batch_size=16_384)
    producer.send("t", b"before", partition=0, now_ms=1)
    arrow = producer.send_encoded("t", 0, raw, rows, now_ms=1)
    producer.send("t", b"after", partition=0, now_ms=1)
    assert producer.pending() == 1 + 1 + 3 + 1
    answer(producer, first, 2)
    sent = []
    for now in (2, 3, 4):  # one batch in flight per partition: before, the encoded batch, after
        ((_, request),) = produced(producer, now)
        sent.append(headers_of(request)[0])
        answer(producer, request, now)
    assert sent == [(1000, 0, 1, 1), (1000, 0, 2, 3), (1000, 0, 5, 1)]  # CRC-checked by iter_batches
    assert arrow.metadata is not None and arrow.metadata.record_count == 3 and arrow.metadata.leader_epoch == 4
    assert arrow.metadata.row_indices().to_pylist() == [0, 1, 2] and producer.pending() == 0
    with pytest.raises(ValueError, match="no partition 3"):
        producer.send_encoded("t", 3, raw, rows, now_ms=5)


def _pa() -> Any:
    return pytest.importorskip("pyarrow")


@pytest.mark.parametrize("error", [Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, Errors.UNKNOWN_PRODUCER_ID])
def test_a_lost_sequence_bumps_the_epoch_and_restarts_the_partitions_sequences(error: Errors) -> None:
    producer = idempotent()
    producer.send("t", b"one", partition=1, now_ms=0)
    ((_, first),) = producer.poll_requests(1)
    assert headers_of(first) == {0: (1000, 0, 0, 1), 1: (1000, 0, 0, 1)}
    producer.send("t", b"two", partition=1, now_ms=1)
    producer.send("t", b"second", partition=0, now_ms=1)
    answer(producer, first, 2)
    ((_, second),) = producer.poll_requests(2)
    assert headers_of(second) == {0: (1000, 0, 1, 1), 1: (1000, 0, 1, 1)}
    answer(producer, second, 3, p0=error)  # partition 1 succeeds under epoch 0
    assert (producer.producer_id, producer.producer_epoch) == (1000, 1)
    producer.send("t", b"three", partition=1, now_ms=3)
    out = [r for _, r in produced(producer, 20)]
    # the failed batch again under epoch 1 from sequence 0; partition 1's next batch restarts at 0 too
    assert [headers_of(r) for r in out] == [{0: (1000, 1, 0, 1), 1: (1000, 1, 0, 1)}]


def test_unknown_producer_id_without_a_log_start_is_retried_as_is() -> None:
    producer = idempotent()
    ((_, first),) = producer.poll_requests(1)
    producer.on_response(1, first, ProduceResponse((ProducePartitionResponse(
        "t", 0, Errors.UNKNOWN_PRODUCER_ID, log_start_offset=-1),)), 2)
    assert producer.producer_epoch == 0  # canRetry: the leader could not say yet
    ((_, again),) = produced(producer, 20)
    assert headers_of(again) == {0: (1000, 0, 0, 1)}


def test_a_duplicate_completes_and_a_fenced_epoch_fails() -> None:
    producer = idempotent()
    ((_, first),) = producer.poll_requests(1)
    d = producer.send("t", b"x", partition=0, now_ms=1)
    answer(producer, first, 2, p0=Errors.DUPLICATE_SEQUENCE_NUMBER)
    ((_, second),) = producer.poll_requests(2)
    assert headers_of(second) == {0: (1000, 0, 1, 1)}  # the duplicate counted as written
    answer(producer, second, 3, p0=Errors.INVALID_PRODUCER_EPOCH)
    assert d.error is not None and "INVALID_PRODUCER_EPOCH" in str(d.error)


def test_past_the_last_epoch_a_new_producer_id_and_init_errors_are_retried() -> None:
    producer = idempotent(epoch=32767)
    ((_, first),) = producer.poll_requests(1)
    answer(producer, first, 2, p0=Errors.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert producer.producer_id == -1  # Short.MAX_VALUE reached: InitProducerId again
    ((node, init),) = producer.poll_requests(12)
    assert isinstance(init, InitProducerIdRequest)
    producer.on_response(node, init, InitProducerIdResponse(Errors.COORDINATOR_LOAD_IN_PROGRESS), 12)
    assert producer.poll_requests(13) == [] and producer.next_deadline_ms() == 22
    ((node, init),) = producer.poll_requests(22)
    producer.on_response(node, init, InitProducerIdResponse(producer_id=2000, producer_epoch=0), 23)
    ((_, again),) = producer.poll_requests(23)
    assert headers_of(again) == {0: (2000, 0, 0, 1)}


def test_idempotence_needs_acks_all() -> None:
    from epochguard.client.kafka_producer import producer_config

    with pytest.raises(ValueError, match="acks=all"):
        Producer(bootstrap=[-1], acks=1, idempotent=True)
    with pytest.raises(ValueError, match="acks='all'"):
        producer_config({"enable_idempotence": True, "acks": 1})


@pytest.mark.parametrize("idempotence", [False, True])
def test_round_trip_against_serve_acks_all(idempotence: bool) -> None:
    from epochguard.client import KafkaConsumer, KafkaProducer
    from tests.wire.serving import Served

    served = Served("clean")
    try:
        producer = KafkaProducer(bootstrap_servers=served.bootstrap, acks="all", client_id="eg-producer",
                                 compression_type="lz4", enable_idempotence=idempotence)
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

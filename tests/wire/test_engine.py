"""The wire engine at the message level (no sockets): long polls, acks=all, ordering, crashes, ApiVersions."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from epochguard.errors import Errors
from epochguard.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
)
from epochguard.records import encode_batch, iter_batches
from epochguard.sim.faults import Crash, Isolate, LinkDelay, StaleMetadata
from epochguard.sim.network import Envelope, broker_node
from epochguard.sim.scenarios import topic_id
from epochguard.storage.logdir import DEFAULT_CLUSTER_ID
from epochguard.wire import codec
from epochguard.wire.endpoint import Endpoint
from epochguard.wire.engine import WireCluster
from epochguard.wire.scenarios import build

ADDRESSES = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002), 3: ("127.0.0.1", 9003)}


def header(api_key: int, version: int, correlation_id: int = 1) -> codec.RequestHeader:
    return codec.RequestHeader(api_key, version, correlation_id, "test-client")


@pytest.fixture
def wire() -> WireCluster:
    w = WireCluster(build("clean"), 0, ADDRESSES)
    for _ in range(200):
        w.step()
        if w.ready():
            break
    assert w.ready()
    return w


def steps(w: WireCluster, n: int) -> list:
    out = []
    for _ in range(n):
        w.step()
        out += w.drain()
    return out


def produce(w: WireCluster, conn, values: list[bytes], acks: int, correlation_id: int = 7) -> bytes:
    raw = encode_batch([(b"k", v) for v in values], base_offset=0, partition_leader_epoch=-1)
    w.submit(conn, header(0, 9, correlation_id), ProduceRequest((ProducePartition("input", 0, raw),), acks=acks,
                                                                timeout_ms=5000, version=9))
    return raw


def test_acks_all_is_answered_once_the_isr_has_the_batch_stamped_in_place(wire: WireCluster) -> None:
    conn = wire.connect(1)
    step = wire.step_no
    raw = produce(wire, conn, [b"a", b"b", b"c"], acks=-1)
    # The append completes the followers' fetches (Kafka's purgatory): answered before any step.
    ((_, hdr, response),) = wire.drain()
    assert wire.step_no == step
    assert isinstance(response, ProduceResponse) and hdr.correlation_id == 7
    assert response.partitions[0].error_code == Errors.NONE and response.partitions[0].base_offset == 0
    for broker in (1, 2, 3):  # every ISR member holds the client's batch as it was sent, offsets and epoch set
        (batch,) = list(iter_batches(wire.cluster.log(broker, response.partitions[0].tp).read(0)))
        assert batch.base_offset == 0 and batch.partition_leader_epoch == 0
        assert batch.crc == next(iter(iter_batches(raw))).crc
        assert [r.value for r in batch.records()] == [b"a", b"b", b"c"]


@pytest.mark.parametrize("acks", [1, -1])
def test_a_fetch_at_the_log_end_long_polls_until_records_arrive(wire: WireCluster, acks: int) -> None:
    consumer, producer = wire.connect(1), wire.connect(1)
    fetch = FetchRequest((FetchPartition("input", 0, 0),), max_wait_ms=2000, min_bytes=1, version=12)
    wire.submit(consumer, header(1, 12, 3), fetch)
    assert steps(wire, 20) == []  # 200 ms of a 2 s wait: nothing yet
    produce(wire, producer, [b"x"], acks=acks)
    # The followers fetch it at once, the high watermark moves, the long poll completes: no step between.
    answers = wire.drain()
    assert [c for c, _, _ in answers] == [producer, consumer]
    fetched = answers[1][2]
    assert isinstance(fetched, FetchResponse) and fetched.partitions[0].high_watermark == 1
    assert [r.value for b in iter_batches(fetched.partitions[0].records) for r in b.records()] == [b"x"]


@pytest.mark.parametrize("fault", [Isolate(3), LinkDelay(broker_node(1), broker_node(3), delay_ms=30)],
                         ids=["isolated", "delayed-link"])
def test_a_follower_behind_a_fault_is_not_replicated_at_once(wire: WireCluster, fault: Any) -> None:
    """Only followers the regular path could reach now fetch at once: an acks=all produce waits for the
    one behind the fault (its next fetch over the delayed link, or its removal from the ISR)."""
    wire.fire(fault)
    tp = wire.all_partitions[-1]
    conn = wire.connect(1)
    produce(wire, conn, [b"a"], acks=-1)
    assert wire.drain() == []
    assert wire.cluster.log(2, tp).log_end_offset == 1 and wire.cluster.log(3, tp).log_end_offset == 0
    answers = steps(wire, 80)
    assert [r.partitions[0].error_code for _, _, r in answers] == [Errors.NONE]
    isolated = isinstance(fault, Isolate)
    assert wire.cluster.controller.state(tp).isr == ((1, 2) if isolated else (1, 2, 3))
    assert wire.cluster.log(3, tp).log_end_offset == (0 if isolated else 1)


def test_an_empty_long_poll_ends_at_max_wait_of_the_clusters_clock(wire: WireCluster) -> None:
    conn = wire.connect(1)
    start = wire.now_ms
    wire.submit(conn, header(1, 12), FetchRequest((FetchPartition("input", 0, 0),), max_wait_ms=300, version=12))
    answered_at = None
    for _ in range(60):
        wire.step()
        if wire.drain():
            answered_at = wire.now_ms
            break
    assert answered_at is not None and 300 <= answered_at - start <= 300 + wire.scenario.config.tick_ms


def test_requests_on_one_connection_are_answered_in_order(wire: WireCluster) -> None:
    conn = wire.connect(1)
    wire.submit(conn, header(1, 12, 1), FetchRequest((FetchPartition("input", 0, 0),), max_wait_ms=200, version=12))
    wire.submit(conn, header(3, 12, 2), MetadataRequest(version=12))
    assert wire.drain() == []  # the metadata request waits behind the long poll, as Kafka mutes the channel
    answers = steps(wire, 30)
    assert [h.correlation_id for _, h, _ in answers] == [1, 2]
    metadata = answers[1][2]
    assert isinstance(metadata, MetadataResponse)
    assert {(b.node_id, b.port) for b in metadata.brokers} == {(b, p) for b, (_, p) in ADDRESSES.items()}
    assert {t.name for t in metadata.topics} == {"events", "input"}


def test_a_crashed_broker_drops_its_connections_and_refuses_new_ones(wire: WireCluster) -> None:
    conn, other = wire.connect(1), wire.connect(2)
    wire.fire(Crash(1))
    assert conn.closed and not other.closed
    assert wire.connect(1) is None


def test_apiversions_at_an_unknown_version_is_answered_at_v0_with_unsupported_version(wire: WireCluster) -> None:
    endpoint = Endpoint(wire)
    conn = endpoint.connect(1)
    frame = struct.pack(">hhih", 18, 9, 42, 4) + b"test" + b"\x00" * 8
    endpoint.receive(conn, frame)
    ((_, out),) = endpoint.outgoing()
    size, correlation_id, error_code = struct.unpack_from(">iih", out)
    assert size == len(out) - 4 and correlation_id == 42 and error_code == Errors.UNSUPPORTED_VERSION
    # v0 body: error code, then the ApiVersions range alone (api key 18, versions 0..3)
    assert struct.unpack_from(">ihhh", out, 10) == (1, 18, 0, 3)


def test_a_frame_that_does_not_decode_closes_only_its_connection(wire: WireCluster) -> None:
    endpoint = Endpoint(wire)
    bad, good = endpoint.connect(1), endpoint.connect(1)
    endpoint.receive(bad, struct.pack(">hhih", 3, 12, 5, 2) + b"ab" + b"\xff" * 3)  # truncated Metadata body
    assert bad.closed and bad in endpoint.closed()
    endpoint.receive(good, struct.pack(">hhih", 18, 0, 6, 2) + b"ok")
    ((conn, out),) = endpoint.outgoing()
    assert conn is good and struct.unpack_from(">ih", out, 4) == (6, 0)


def test_produces_pipeline_behind_waiting_acks_but_answers_stay_in_order(wire: WireCluster) -> None:
    wire.fire(Isolate(3))  # the acks wait for broker 3 to leave the ISR
    conn = wire.connect(1)
    produce(wire, conn, [b"a"], acks=-1, correlation_id=1)
    produce(wire, conn, [b"b"], acks=-1, correlation_id=2)
    wire.submit(conn, header(3, 12, 3), MetadataRequest(version=12))
    leader_log = wire.cluster.log(1, wire.all_partitions[-1])
    assert leader_log.tp.topic == "input" and leader_log.log_end_offset == 2  # both appended at once
    assert wire.drain() == []  # neither is in the ISR yet; the metadata request waits behind them
    answers = steps(wire, 80)
    assert [h.correlation_id for _, h, _ in answers] == [1, 2, 3]
    assert [r.partitions[0].base_offset for _, _, r in answers[:2]] == [0, 1]


def _sim_metadata(wire: WireCluster, broker: int, request: MetadataRequest) -> MetadataResponse:
    """What `broker` answers a simulated client that asks over the simulated network."""
    wire.cluster.brokers[broker].receive(Envelope("probe", broker_node(broker), request, -1, wire.now_ms))
    wire.cluster.clock.advance(1000)  # past any network delay
    (answer,) = [e.payload for e in wire.cluster.network.due() if e.dst == "probe"]
    return answer


@pytest.mark.parametrize("topics", [("input", "absent", "events"), None])
def test_a_broker_tells_a_real_client_what_it_tells_a_simulated_one_but_for_the_listeners(
        wire: WireCluster, topics: tuple[str, ...] | None) -> None:
    wire.fire(StaleMetadata(2, lag_ms=10_000))  # broker 2's cache stops here: both answers must say the same
    wire.fire(Crash(3))
    steps(wire, 100)
    request = MetadataRequest(topics, version=12)
    conn = wire.connect(2)
    wire.submit(conn, header(3, 12), request)
    ((_, _, on_wire),) = wire.drain()
    assert isinstance(on_wire, MetadataResponse) and on_wire.version == 12
    names = [t.name for t in on_wire.topics]
    assert names == (["events", "input"] if topics is None else list(topics))
    by_name = {t.name: t for t in on_wire.topics}
    if topics is not None:
        assert by_name["absent"].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    events = by_name["events"]
    assert events.topic_id == topic_id("events") and events.error_code == Errors.NONE
    (p,) = events.partitions
    assert (p.leader_id, p.leader_epoch) == (1, 0)
    # broker 2 has not heard that broker 3 died: it still lists it, and nothing offline
    assert [b.node_id for b in on_wire.brokers] == [1, 2, 3] and p.offline_replicas == ()
    assert [(b.host, b.port) for b in on_wire.brokers] == [ADDRESSES[b] for b in (1, 2, 3)]
    assert on_wire.controller_id == 1
    assert on_wire.cluster_id == DEFAULT_CLUSTER_ID  # the cluster.id of the meta.properties the simulator writes

    on_sim = _sim_metadata(wire, 2, request)
    assert on_sim == MetadataResponse(on_wire.topics, tuple(MetadataResponseBroker(b.node_id) for b in on_wire.brokers),
                                      on_wire.cluster_id, on_wire.controller_id, version=12)
    assert _sim_metadata(wire, 1, request).brokers == (MetadataResponseBroker(1), MetadataResponseBroker(2))


def _metadata(w: WireCluster, conn, correlation_id: int) -> None:
    w.submit(conn, header(3, 12, correlation_id), MetadataRequest(topics=("events",), version=12))


def test_a_broker_answers_nothing_before_its_first_metadata_update() -> None:
    """Kafka's BrokerServer enables request processing only once the initial metadata is published: no
    broker ever answers a client with an empty broker list. librdkafka 2.16 takes such an answer for a
    cluster without brokers, decommissions every broker it knows (bootstrap ones included) and, after one
    re-bootstrap that meets the same answer, never connects again: a consumer that silently gets nothing."""
    w = WireCluster(build("transactions"), 0, ADDRESSES)
    conn = w.connect(1)
    assert conn is not None and w.cluster.brokers[1].metadata is None
    _metadata(w, conn, 1)
    assert w.drain() == []  # held, as by a broker whose request processing is not enabled yet
    answers = steps(w, 10)
    assert w.cluster.brokers[1].metadata is not None
    ((_, _, response),) = answers
    assert [b.node_id for b in response.brokers] == [1, 2, 3]
    assert [(t.name, t.error_code, [p.leader_id for p in t.partitions]) for t in response.topics] == [
        ("events", Errors.NONE, [1])]


def test_a_restarted_broker_answers_nothing_until_the_controller_updates_its_metadata(wire: WireCluster) -> None:
    from epochguard.sim.faults import Restart

    wire.fire(Crash(3))
    steps(wire, 5)
    wire.fire(Restart(3))
    assert wire.cluster.brokers[3].metadata is None
    conn = wire.connect(3)
    _metadata(wire, conn, 1)
    assert wire.drain() == []
    for _ in range(500):
        wire.step()
        if answers := wire.drain():
            break
    ((_, _, response),) = answers
    assert wire.cluster.brokers[3].metadata is not None
    assert [b.node_id for b in response.brokers] == [1, 2, 3]


def test_a_group_has_one_coordinator_whichever_broker_is_asked_until_it_dies(wire: WireCluster) -> None:
    """Kafka answers FindCoordinator with the leader of the group's __consumer_offsets partition, the same
    from every broker; it moves only when that broker goes."""
    from epochguard.protocol.messages import FindCoordinatorRequest

    def coordinator(broker: int, group: str) -> int:
        conn = wire.connect(broker)
        wire.submit(conn, header(10, 4), FindCoordinatorRequest("", 0, (group,), version=4))
        for _ in range(20):
            answers = [r for c, _, r in wire.drain() if c is conn]
            if answers:
                return answers[0].coordinators[0].node_id
            wire.step()
        raise AssertionError("no answer")

    groups = [f"g{i}" for i in range(6)]
    chosen = {g: {coordinator(b, g) for b in (1, 2, 3)} for g in groups}
    assert all(len(nodes) == 1 for nodes in chosen.values()), chosen
    assert len({n for nodes in chosen.values() for n in nodes}) > 1  # spread over the brokers
    g = groups[0]
    (node,) = chosen[g]
    wire.fire(Crash(node))
    other = next(b for b in (1, 2, 3) if b != node)
    moved = {coordinator(b, g) for b in (1, 2, 3) if b != node}
    assert moved == {coordinator(other, g)} and node not in moved

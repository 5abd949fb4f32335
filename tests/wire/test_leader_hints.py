"""What `KafkaApis` adds to Fetch and Produce answers on `serve`, at the message level (no sockets): topic ids
(Fetch v13+, KIP-516) and KIP-951's leader hints (Produce v10+, Fetch v16+), where Kafka gives them and
nowhere else (`KafkaApis.handleProduceRequest` / `handleFetchRequest`, `getCurrentLeader`)."""

from __future__ import annotations

import pytest

from epochguard.errors import Errors
from epochguard.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    LeaderIdAndEpoch,
    NodeEndpoint,
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
)
from epochguard.records import encode_batch
from epochguard.sim.controller import topic_id
from epochguard.sim.faults import Crash
from epochguard.types import TopicPartition
from epochguard.wire import codec
from epochguard.wire.engine import WireCluster
from epochguard.wire.scenarios import build

ADDRESSES = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002), 3: ("127.0.0.1", 9003)}
EVENTS = TopicPartition("events", 0)


def header(api_key: int, version: int) -> codec.RequestHeader:
    return codec.RequestHeader(api_key, version, 1, "hint-test")


def ready(wire: WireCluster) -> WireCluster:
    for _ in range(400):
        wire.step()
        if wire.ready():
            return wire
    raise AssertionError("the cluster never elected its leaders")


@pytest.fixture
def wire() -> WireCluster:
    return ready(WireCluster(build("clean"), 0, ADDRESSES))


@pytest.fixture
def moved() -> WireCluster:
    """Broker 1 (leader of every partition in epoch 0) crashed; another leads in epoch 1."""
    w = ready(WireCluster(build("clean"), 0, ADDRESSES))
    w.fire(Crash(1))
    for _ in range(400):
        w.step()
        if w.cluster.acting_leader(EVENTS) not in (None, 1):
            return w
    raise AssertionError("no new leader after broker 1 crashed")


def ask(w: WireCluster, broker: int, request: object, api_key: int) -> object:
    conn = w.connect(broker)
    assert conn is not None
    w.submit(conn, header(api_key, request.version), request)  # type: ignore[attr-defined]
    ((_, _, response),) = w.drain()
    return response


def fetch(w: WireCluster, broker: int, version: int, epoch: int, tid: str | None = None) -> FetchResponse:
    by_id = version >= 13
    part = FetchPartition("" if by_id else "events", 0, 0, current_leader_epoch=epoch,
                          topic_id=(tid or topic_id("events")) if by_id else None)
    response = ask(w, broker, FetchRequest((part,), max_wait_ms=0, version=version), 1)
    assert isinstance(response, FetchResponse)
    return response


def produce(w: WireCluster, broker: int, version: int) -> ProduceResponse:
    raw = encode_batch([(b"k", b"v")], base_offset=0, partition_leader_epoch=-1)
    request = ProduceRequest((ProducePartition("input", 0, raw),), acks=1, timeout_ms=5000, version=version)
    response = ask(w, broker, request, 0)
    assert isinstance(response, ProduceResponse)
    return response


@pytest.mark.parametrize("broker", [2, 3])
def test_a_fenced_fetch_v16_names_the_leader_and_where_it_listens(moved: WireCluster, broker: int) -> None:
    """FENCED_LEADER_EPOCH from the new leader or a follower (a v11+ consumer may read from either): the
    epoch and leader the broker knows, and the leader's listener among the NodeEndpoints."""
    leader = moved.cluster.acting_leader(EVENTS)
    epoch = moved.cluster.brokers[leader].leader_epoch(EVENTS)
    assert leader in (2, 3) and epoch is not None and epoch >= 1
    (data,) = (answer := fetch(moved, broker, 16, epoch=0)).partitions
    assert data.error_code == Errors.FENCED_LEADER_EPOCH
    assert data.current_leader == LeaderIdAndEpoch(leader, epoch)
    assert answer.node_endpoints == (NodeEndpoint(leader, *ADDRESSES[leader]),)


@pytest.mark.parametrize("version", [12, 13, 15])
def test_no_hint_below_fetch_v16(moved: WireCluster, version: int) -> None:
    """Kafka fills CurrentLeader only from v16 (the field exists from v12, always -1/-1 below)."""
    (data,) = (answer := fetch(moved, 2, version, epoch=0)).partitions
    assert data.error_code == Errors.FENCED_LEADER_EPOCH
    assert data.current_leader == LeaderIdAndEpoch() and answer.node_endpoints == ()


def test_only_the_two_leadership_errors_get_a_fetch_hint(moved: WireCluster) -> None:
    """UNKNOWN_LEADER_EPOCH (the client is ahead of the broker) is retriable too, but no hint."""
    (data,) = (answer := fetch(moved, 2, 16, epoch=9)).partitions
    assert data.error_code == Errors.UNKNOWN_LEADER_EPOCH
    assert data.current_leader == LeaderIdAndEpoch() and answer.node_endpoints == ()
    (ok,) = (fine := fetch(moved, moved.cluster.acting_leader(EVENTS), 16, epoch=-1)).partitions
    assert ok.error_code == Errors.NONE and ok.current_leader == LeaderIdAndEpoch() and fine.node_endpoints == ()


def test_a_produce_v10_to_a_follower_names_the_leader(wire: WireCluster) -> None:
    (p,) = (answer := produce(wire, 2, 10)).partitions
    assert p.error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert p.current_leader == LeaderIdAndEpoch(1, 0)
    assert answer.node_endpoints == (NodeEndpoint(1, *ADDRESSES[1]),)
    (old,) = (before := produce(wire, 2, 9)).partitions  # v9 has no such field: nothing
    assert old.error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert old.current_leader == LeaderIdAndEpoch() and before.node_endpoints == ()


def test_fetch_v13_names_topics_by_id_and_refuses_an_unknown_one(wire: WireCluster) -> None:
    """`FetchRequest.fetchData(topicNames)` resolves ids from the metadata cache: the answer names the topic
    by its id; an id nobody knows is UNKNOWN_TOPIC_ID (`KafkaApis.handleFetchRequest`'s erroneous)."""
    (data,) = fetch(wire, 1, 13, epoch=0).partitions
    assert (data.error_code, data.topic, data.topic_id) == (Errors.NONE, "events", topic_id("events"))
    unknown = "AAAAAAAAAAAAAAAAAAAAAA"  # the zero id
    (refused,) = fetch(wire, 1, 16, epoch=0, tid=unknown).partitions
    assert (refused.error_code, refused.topic_id) == (Errors.UNKNOWN_TOPIC_ID, unknown)
    assert refused.current_leader == LeaderIdAndEpoch()
    # both encode: the known topic by its id, the unknown one by the id asked
    for answer in (fetch(wire, 1, 13, epoch=0), fetch(wire, 1, 16, epoch=0, tid=unknown)):
        assert codec.encode_response(header(1, 16), answer)[:4]

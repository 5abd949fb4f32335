"""`stale-leader-hint` (issue 20; franz-go#1413, AutoMQ#3546) at the message level: the old leader's KIP-951
hints name the third broker with the client's own epoch, an older one, or the current epoch (a wrong node);
the judge's `hint-regress` check names a client that follows a hint no newer than what it knows to a broker
that does not lead, and says what every other client did (`metadata`, `elsewhere`, ...). Then one serve run
(`--trigger served`) with the Python-driven clients; `epochguard compat` runs every client under both triggers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from epochguard.errors import Errors
from epochguard.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    LeaderIdAndEpoch,
    MetadataRequest,
    NodeEndpoint,
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
)
from epochguard.records import encode_batch
from epochguard.sim.controller import topic_id
from epochguard.sim.faults import PreferredElection
from epochguard.types import TopicPartition
from epochguard.wire.drivers.session import RunResult
from epochguard.wire.engine import WireCluster
from epochguard.wire.judge import STUCK_AFTER_STEPS, Judge
from epochguard.wire.scenarios import StaleLeaderHint, build
from tests.wire.conftest import require_final_reader
from tests.wire.serving import NEEDS_SERVE, PY_CLIENTS, python_clients_run, undiverged
from tests.wire.test_judge import ask as ask_on
from tests.wire.test_judge import run_until

ADDRESSES = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002), 3: ("127.0.0.1", 9003)}
EVENTS, INPUT = TopicPartition("events", 0), TopicPartition("input", 0)


def ask(w: WireCluster, broker: int, api_key: int, request: Any, conns: dict[int, Any]) -> Any:
    """test_judge's `ask` on one connection per broker, kept across the test's requests."""
    conn = conns.get(broker) or conns.setdefault(broker, w.connect(broker))
    return ask_on(w, conn, api_key, request.version, request)


class Client:
    """A scripted client: one connection per broker, Fetch v16 by topic id, Produce v10."""

    def __init__(self, w: WireCluster) -> None:
        self.w, self.conns = w, {}

    def fetch(self, broker: int, epoch: int) -> Any:
        part = FetchPartition("", 0, 0, current_leader_epoch=epoch, topic_id=topic_id("events"))
        response = ask(self.w, broker, 1, FetchRequest((part,), max_wait_ms=0, version=16), self.conns)
        assert isinstance(response, FetchResponse)
        (data,) = response.partitions
        return data, response.node_endpoints

    def produce(self, broker: int) -> Any:
        raw = encode_batch([(b"k", b"v")], base_offset=0, partition_leader_epoch=-1)
        request = ProduceRequest((ProducePartition("input", 0, raw),), acks=1, timeout_ms=5000, version=10)
        response = ask(self.w, broker, 0, request, self.conns)
        assert isinstance(response, ProduceResponse)
        (data,) = response.partitions
        return data, response.node_endpoints

    def metadata(self, broker: int) -> None:
        ask(self.w, broker, 3, MetadataRequest(("events", "input"), version=12), self.conns)


def moved(variant: str) -> tuple[WireCluster, Judge, Client]:
    """Leadership of events-0 and input-0 moved 1 -> 2 (epoch 1), broker 1 armed with `variant` hints; the
    scripted client knows epoch 0 (a Metadata answer before the move)."""
    w = WireCluster(build("stale-leader-hint"), 0, ADDRESSES)
    judge = Judge()
    w.observers.append(judge)
    run_until(w, w.ready)
    client = Client(w)
    client.metadata(1)
    w.fire(StaleLeaderHint(1, (EVENTS, INPUT), variant, duration_ms=5000))
    for tp in (EVENTS, INPUT):
        w.fire(PreferredElection(tp, 2))
    run_until(w, lambda: all(w.cluster.brokers[1].manager.partitions[tp].leader_id == 2 for tp in (EVENTS, INPUT)))
    return w, judge, client


def hints(judge: Judge) -> list[dict[str, Any]]:
    (report,) = judge.report()
    return report["leader_hints"]


@pytest.mark.parametrize(("variant", "epoch"), [("own-epoch", 0), ("wrong-node", 1)])
def test_the_old_leader_names_the_third_broker(variant: str, epoch: int) -> None:
    """In place of (2, 1): broker 3, with the client's own epoch 0 or the current 1, and where 3 listens."""
    _, _, client = moved(variant)
    data, nodes = client.fetch(1, epoch=0)
    assert data.error_code == Errors.FENCED_LEADER_EPOCH
    assert data.current_leader == LeaderIdAndEpoch(3, epoch) and nodes == (NodeEndpoint(3, *ADDRESSES[3]),)
    produced, nodes = client.produce(1)
    assert produced.error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert produced.current_leader == LeaderIdAndEpoch(3, epoch) and nodes == (NodeEndpoint(3, *ADDRESSES[3]),)


def test_the_lie_ends_and_spares_other_brokers() -> None:
    w, _, client = moved("own-epoch")
    data, _ = client.fetch(3, epoch=0)  # broker 3 is no liar: the truth
    assert data.current_leader == LeaderIdAndEpoch(2, 1)
    for _ in range(501):  # past duration_ms
        w.step()
    data, nodes = client.fetch(1, epoch=0)
    assert data.current_leader == LeaderIdAndEpoch(2, 1) and nodes == (NodeEndpoint(2, *ADDRESSES[2]),)


def test_an_older_epoch_is_two_below_the_current() -> None:
    w = WireCluster(build("stale-leader-hint"), 0, ADDRESSES)
    run_until(w, w.ready)
    for broker in (2, 1):  # epoch 2, leader 1
        w.fire(PreferredElection(EVENTS, broker))
        run_until(w, lambda b=broker: w.cluster.brokers[3].manager.partitions[EVENTS].leader_id == b)
    w.fire(StaleLeaderHint(1, (EVENTS,), "older-epoch"))
    w.fire(PreferredElection(EVENTS, 2))
    run_until(w, lambda: w.cluster.brokers[1].manager.partitions[EVENTS].leader_epoch == 3)
    data, _ = Client(w).fetch(1, epoch=2)
    assert data.current_leader == LeaderIdAndEpoch(3, 1)


@pytest.mark.parametrize("api", ["fetch", "produce"])
def test_following_a_hint_of_its_own_epoch_is_hint_regress(api: str) -> None:
    _, judge, client = moved("own-epoch")
    getattr(client, api)(1, **({"epoch": 0} if api == "fetch" else {}))
    (entry,) = hints(judge)
    assert (entry["hint"], entry["known"], entry["regress"], entry["how"]) == ([3, 0], 0, True, "")
    getattr(client, api)(3, **({"epoch": 0} if api == "fetch" else {}))  # where the hint said, no metadata
    (report,) = judge.report()
    (entry,) = report["leader_hints"]
    assert entry["how"] == "followed" and entry["leader"] == [2, 1]
    assert report["hint_regress"] == [entry]


@pytest.mark.parametrize("api", ["fetch", "produce"])
def test_asking_for_metadata_first_is_right(api: str) -> None:
    _, judge, client = moved("own-epoch")
    getattr(client, api)(1, **({"epoch": 0} if api == "fetch" else {}))
    client.metadata(1)
    getattr(client, api)(2, **({"epoch": 1} if api == "fetch" else {}))
    (report,) = judge.report()
    (entry,) = report["leader_hints"]
    assert entry["how"] == "metadata" and report["hint_regress"] == []


def test_following_a_newer_hint_to_the_wrong_node_is_no_regress() -> None:
    """A hint with an epoch newer than the client knew is worth following, even to a wrong node (which then
    answers the truth): noted, not the hint-regress check."""
    _, judge, client = moved("wrong-node")
    client.fetch(1, epoch=0)
    data, _ = client.fetch(3, epoch=1)
    assert data.error_code == Errors.NONE  # broker 3 follows in epoch 1 and serves a v11+ consumer (KIP-392)
    (report,) = judge.report()
    (entry,) = report["leader_hints"]
    assert (entry["regress"], entry["how"]) == (False, "followed") and report["hint_regress"] == []


def test_retrying_the_same_broker_counts_and_opens_no_second_entry() -> None:
    _, judge, client = moved("own-epoch")
    for _ in range(3):
        client.produce(1)
    client.produce(2)
    (entry,) = hints(judge)
    assert (entry["retried"], entry["how"]) == (2, "elsewhere")


def test_a_true_hint_opens_nothing_and_a_silent_client_stops() -> None:
    w, judge, client = moved("own-epoch")
    client.fetch(3, epoch=0)  # the truth from broker 3
    assert hints(judge) == []
    client.fetch(1, epoch=0)
    for _ in range(STUCK_AFTER_STEPS + 1):
        w.step()
    (entry,) = hints(judge)
    assert entry["how"] == "stopped"


def test_the_fault_survives_a_trace() -> None:
    """A replay rebuilds the lie from the trace (its partitions as `TopicPartition`s, so `tp in fault.tps` holds)."""
    from epochguard.wire.replay import fault_from_json
    from epochguard.wire.trace import fault_to_json

    fault = StaleLeaderHint(1, (EVENTS, INPUT), "older-epoch", 700)
    again = fault_from_json(json.loads(json.dumps(fault_to_json(fault))))
    assert again == fault and EVENTS in again.tps
    with pytest.raises(ValueError, match="unknown hint variant"):
        StaleLeaderHint(1, (EVENTS,), "newer")


# --- real clients (one serve run) ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunResult]:
    require_final_reader()
    yield python_clients_run(tmp_path_factory, "stale-leader-hint", "served")


# Fetch v16 / Produce v10: librdkafka 2.16 (confluent-kafka) both, epochguard's producer Produce v10; the others
# speak older versions (kafka-python Fetch v12 / Produce v9, aiokafka and kcat v11 / v7) and meet no hint.
HINTED = {"confluent-kafka", "epochguard", "epochguard-asyncio"}


@NEEDS_SERVE
@pytest.mark.parametrize("name", [c.name for c in PY_CLIENTS])
def test_real_clients_and_stale_hints(run: RunResult, name: str) -> None:
    """Nothing is lost, skipped or re-read on either side; every stale hint met is decided. librdkafka may
    follow one naming its own epoch (`rd_kafka_toppar_leader_update` ignores only an older epoch), never an
    older one; epochguard's producer asks for metadata after every one (Java's not-newer rule)."""
    truth, server = undiverged(run, name)
    assert server["anomalies"] == [] and truth.anomalies == [], (server["anomalies"], truth.anomalies)
    hints = server["leader_hints"]
    assert all(h["how"] for h in hints), hints
    if name not in HINTED:
        assert hints == []
    elif name.startswith("epochguard"):
        assert hints and {h["how"] for h in hints} == {"metadata"}, hints
    else:
        assert all(h["hint"][1] == h["known"] for h in server["hint_regress"]), server["hint_regress"]

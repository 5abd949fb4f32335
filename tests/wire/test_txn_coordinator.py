"""`epochguard serve`'s transaction coordinator, sans-IO: requests into a `WireCluster`, answers and the
leader's log out. The markers are read back as control batches from the partition's log (record
classes of the Rust core), offsets through OffsetFetch; the fencing errors are Kafka's
(`TransactionCoordinator`, and KafkaApis' INVALID_PRODUCER_EPOCH for the versions before KIP-588)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest

from epochguard import _core
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    OffsetCommitPartition,
    OffsetFetchRequest,
    ProducePartition,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from epochguard.sim.faults import Crash, Heal, Isolate, Restart
from epochguard.sim.network import broker_node
from epochguard.types import TopicPartition
from epochguard.wire import codec
from epochguard.wire.engine import WireCluster, api_key_of
from epochguard.wire.scenarios import WireScenario, build

ADDRESSES = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002), 3: ("127.0.0.1", 9003)}
INPUT = TopicPartition("input", 0)
_correlation = itertools.count(1)


def ready(scenario: WireScenario) -> WireCluster:
    w = WireCluster(scenario, 0, ADDRESSES)
    for _ in range(500):
        w.step()
        if w.ready() and all(b.metadata is not None for b in w.cluster.brokers.values()):
            return w
    pytest.fail(f"{scenario.name} never elected every leader")


@pytest.fixture
def wire() -> WireCluster:
    return ready(build("clean"))


def call(w: WireCluster, request: Any, version: int | None = None, steps: int = 200, broker: int = 1) -> Any:
    """Send `request` on a fresh connection to `broker` and step until it is answered."""
    conn = w.connect(broker)
    assert conn is not None
    v = request.version if version is None else version
    w.submit(conn, codec.RequestHeader(api_key_of(request), v, next(_correlation), "txn-test"), request)
    for _ in range(steps):
        answers = [r for c, _, r in w.drain() if c is conn]
        if answers:
            w.close(conn)
            return answers[0]
        w.step()
    pytest.fail(f"{type(request).__name__} never answered")


def init(w: WireCluster, tid: str = "t1", version: int = 4) -> tuple[int, int]:
    for _ in range(20):
        r = call(w, InitProducerIdRequest(tid, 60_000, version=version))
        if r.error_code != Errors.CONCURRENT_TRANSACTIONS:  # the old transaction being aborted: retry
            assert r.error_code == Errors.NONE
            return r.producer_id, r.producer_epoch
    pytest.fail("InitProducerId kept answering CONCURRENT_TRANSACTIONS")


def produce(w: WireCluster, pid: int, epoch: int, seq: int, *values: bytes) -> Any:
    batch = _core.encode_batch([(b"k", v) for v in values], producer_id=pid, producer_epoch=epoch,
                               base_sequence=seq, is_transactional=True)
    r = call(w, ProduceRequest((ProducePartition("input", 0, batch),), acks=-1, timeout_ms=5000,
                               transactional_id="t1"), steps=400)
    (part,) = r.partitions
    return part.error_code


def leader_batches(w: WireCluster) -> list[Any]:
    log = w.leader_log(INPUT)
    assert log is not None
    return list(log.batches())


def markers(w: WireCluster) -> list[tuple[int, int, bool]]:
    """(producer id, producer epoch, commit) of each control batch in the leader's log, from the bytes."""
    out = []
    for b in leader_batches(w):
        if b.is_control:
            (record,) = b.records()
            assert record.key is not None
            out.append((b.producer_id, b.producer_epoch, record.key[2:4] == b"\x00\x01"))  # version, type
    return out


def test_commit_writes_a_commit_marker_after_the_records_and_abort_an_abort_marker(wire: WireCluster) -> None:
    pid, epoch = init(wire)
    assert epoch == 0
    assert call(wire, AddPartitionsToTxnRequest("t1", pid, epoch, (INPUT,))).partitions[0].error_code == Errors.NONE
    assert produce(wire, pid, epoch, 0, b"a", b"b") == Errors.NONE
    assert call(wire, EndTxnRequest("t1", pid, epoch, True)).error_code == Errors.NONE
    assert markers(wire) == [(pid, 0, True)]
    log = wire.leader_log(INPUT)
    assert log is not None and log.first_undecided_offset is None  # nothing open: the LSO is the HW
    # A retried EndTxn of a completed commit is answered NONE; an abort of it is out of order.
    assert call(wire, EndTxnRequest("t1", pid, epoch, True)).error_code == Errors.NONE
    assert call(wire, EndTxnRequest("t1", pid, epoch, False)).error_code == Errors.INVALID_TXN_STATE

    assert call(wire, AddPartitionsToTxnRequest("t1", pid, epoch, (INPUT,))).partitions[0].error_code == Errors.NONE
    assert produce(wire, pid, epoch, 2, b"c") == Errors.NONE
    assert call(wire, EndTxnRequest("t1", pid, epoch, False)).error_code == Errors.NONE
    assert markers(wire) == [(pid, 0, True), (pid, 0, False)]
    assert [a.producer_id for a in wire.leader_log(INPUT).aborted_transactions] == [pid]  # type: ignore[union-attr]
    # The followers have the markers too (WriteTxnMarkers is acks=all).
    for broker in wire.cluster.config.assignment()[INPUT]:
        assert sum(b.is_control for b in wire.cluster.log(broker, INPUT).batches()) == 2


def test_a_second_init_fences_the_first_producer_and_aborts_its_open_transaction(wire: WireCluster) -> None:
    pid, epoch = init(wire)
    call(wire, AddPartitionsToTxnRequest("t1", pid, epoch, (INPUT,)))
    assert produce(wire, pid, epoch, 0, b"zombie") == Errors.NONE
    # The open transaction is aborted with the bumped epoch; the caller retries and gets one more.
    assert call(wire, InitProducerIdRequest("t1", 60_000)).error_code == Errors.CONCURRENT_TRANSACTIONS
    pid2, epoch2 = init(wire)
    assert (pid2, epoch2) == (pid, 2)
    assert markers(wire) == [(pid, 1, False)]
    assert wire.leader_log(INPUT).first_undecided_offset is None  # type: ignore[union-attr]
    # The old producer: fenced at the coordinator (PRODUCER_FENCED; before KIP-588 INVALID_PRODUCER_EPOCH) ...
    assert call(wire, EndTxnRequest("t1", pid, 0, True)).error_code == Errors.PRODUCER_FENCED
    assert call(wire, EndTxnRequest("t1", pid, 0, True, version=1)).error_code == Errors.INVALID_PRODUCER_EPOCH
    add = call(wire, AddPartitionsToTxnRequest("t1", pid, 0, (INPUT,), version=1))
    assert add.partitions[0].error_code == Errors.INVALID_PRODUCER_EPOCH
    assert call(wire, AddOffsetsToTxnRequest("t1", pid, 0, "g")).error_code == Errors.PRODUCER_FENCED
    # ... and at the partition, whose producer state has the abort marker's epoch.
    assert produce(wire, pid, 0, 1, b"late") in (Errors.INVALID_PRODUCER_EPOCH, Errors.PRODUCER_FENCED)
    # An id the coordinator never gave: INVALID_PRODUCER_ID_MAPPING.
    assert call(wire, EndTxnRequest("t1", pid + 99, epoch2, True)).error_code == Errors.INVALID_PRODUCER_ID_MAPPING
    assert call(wire, EndTxnRequest("nobody", pid, epoch2, True)).error_code == Errors.INVALID_PRODUCER_ID_MAPPING
    # Ending a transaction never begun is out of order.
    assert call(wire, EndTxnRequest("t1", pid2, epoch2, True)).error_code == Errors.INVALID_TXN_STATE


@pytest.mark.parametrize("commit", [True, False])
def test_offsets_sent_with_a_transaction_are_the_groups_only_once_it_commits(wire: WireCluster, commit: bool) -> None:
    pid, epoch = init(wire)
    assert call(wire, AddOffsetsToTxnRequest("t1", pid, epoch, "g")).error_code == Errors.NONE
    staged = call(wire, TxnOffsetCommitRequest("t1", "g", pid, epoch, (OffsetCommitPartition("input", 0, 42),)))
    assert [p.error_code for p in staged.partitions] == [Errors.NONE]

    def committed() -> int:
        (p,) = call(wire, OffsetFetchRequest("g", (INPUT,))).partitions
        return p.committed_offset

    assert committed() == -1  # staged, not the group's yet
    assert call(wire, EndTxnRequest("t1", pid, epoch, commit)).error_code == Errors.NONE
    assert committed() == (42 if commit else -1)
    assert markers(wire) == []  # only the group joined: no partition gets a marker


def test_bad_init_requests(wire: WireCluster) -> None:
    assert call(wire, InitProducerIdRequest("", 60_000)).error_code == Errors.INVALID_REQUEST
    assert call(wire, InitProducerIdRequest("t1", 900_001)).error_code == Errors.INVALID_TRANSACTION_TIMEOUT
    assert call(wire, InitProducerIdRequest("t1", 60_000, 1001, -1)).error_code == Errors.INVALID_REQUEST
    # Idempotent producers still get a fresh id each, no coordinator state.
    a, b = call(wire, InitProducerIdRequest()), call(wire, InitProducerIdRequest())
    assert a.producer_id != b.producer_id and (a.producer_epoch, b.producer_epoch) == (0, 0)
    assert wire.transactions.transactions == {}


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(wire: WireCluster) -> None:
    r = call(wire, InitProducerIdRequest("t1", 1_000))
    pid, epoch = r.producer_id, r.producer_epoch
    call(wire, AddPartitionsToTxnRequest("t1", pid, epoch, (INPUT,)))
    assert produce(wire, pid, epoch, 0, b"slow") == Errors.NONE
    start = wire.now_ms
    while wire.now_ms - start < 1_500:
        wire.step()
    assert markers(wire) == [(pid, 1, False)]
    assert call(wire, EndTxnRequest("t1", pid, epoch, True)).error_code == Errors.PRODUCER_FENCED



def test_a_producer_bumping_its_own_epoch_kip_360(wire: WireCluster) -> None:
    """`prepareIncrementProducerEpoch` with an expected epoch: the current one is bumped, the previous one
    (a retry of a bump that succeeded) is answered unbumped, any other is fenced."""
    pid, _ = init(wire)
    r = call(wire, InitProducerIdRequest("t1", 60_000, pid, 0))
    assert (r.error_code, r.producer_id, r.producer_epoch) == (Errors.NONE, pid, 1)
    r = call(wire, InitProducerIdRequest("t1", 60_000, pid, 0))  # the retry
    assert (r.error_code, r.producer_epoch) == (Errors.NONE, 1)
    assert init(wire) == (pid, 2)  # a new producer: the old epochs may not retry any more
    assert call(wire, InitProducerIdRequest("t1", 60_000, pid, 1)).error_code == Errors.PRODUCER_FENCED
    assert call(wire, InitProducerIdRequest("t1", 60_000, pid, 1, version=3)).error_code == Errors.INVALID_PRODUCER_EPOCH
    assert call(wire, InitProducerIdRequest("t1", 60_000, pid + 7, 2)).error_code == Errors.PRODUCER_FENCED


def test_a_marker_for_a_partition_without_a_leader_waits_until_it_has_one() -> None:
    """Kafka's marker channel retries until the partition has a leader; EndTxn is answered only then."""
    w = ready(WireScenario("no-leader", replace(build("clean").config, min_insync_replicas=1), (), ""))
    pid, epoch = init(w)
    call(w, AddPartitionsToTxnRequest("t1", pid, epoch, (INPUT,)))
    w.fire(Isolate(1))  # broker 1 alone in the ISR once the record below lags on its followers
    assert produce(w, pid, epoch, 0, b"only-on-1") == Errors.NONE
    w.fire(Crash(1))  # no other replica is in sync, and unclean election is off: input-0 has no leader
    for _ in range(50):
        w.step()
    assert w.cluster.acting_leader(INPUT) is None
    conn = w.connect(2)
    assert conn is not None
    w.submit(conn, codec.RequestHeader(api_key_of(EndTxnRequest("t1", pid, epoch, True)), 4, 1, "t"),
             EndTxnRequest("t1", pid, epoch, True))
    for _ in range(300):  # 3 s of retries: no answer while the marker has nowhere to go
        w.step()
    assert [r for c, _, r in w.drain() if c is conn] == []
    w.fire(Heal(broker_node(1)))
    w.fire(Restart(1))
    for _ in range(500):
        w.step()
        answers = [r for c, _, r in w.drain() if c is conn]
        if answers:
            break
    assert [a.error_code for a in answers] == [Errors.NONE]
    assert markers(w) == [(pid, 0, True)]

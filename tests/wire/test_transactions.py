"""read_committed on the wire: `epochguard serve transactions`, whose simulated producer aborts every
third transaction, answers a read_committed Fetch with the aborted transactions in what it returns and
the last stable offset (Kafka's Fetch v4+), so real clients filter the aborted records out.

Ground truth is computed here, independently of the server: from the fetched bytes parsed by
kafka-python's record classes (control batches name the aborted transactions), and for the real
clients (confluent-kafka, kafka-python, aiokafka, kcat) from the producer's abort schedule and what a
read_uncommitted client of the same software delivers against a read_committed one.
"""

from __future__ import annotations

import re
import struct
import threading
import time
from collections.abc import Callable

import pytest

from epochguard.types import TopicPartition
from epochguard.wire.drivers.registry import client
from epochguard.wire.endpoint import Endpoint
from epochguard.wire.engine import WireCluster
from epochguard.wire.scenarios import build
from epochguard.wire.trace import replay
from tests.wire.conftest import require
from tests.wire.serving import Served

kp = pytest.importorskip("kafka", reason="kafka-python (the dev extra) is missing")
from kafka.protocol.consumer.fetch import FetchRequest as KFetchRequest  # noqa: E402
from kafka.protocol.consumer.fetch import FetchResponse as KFetchResponse  # noqa: E402
from kafka.record import MemoryRecords  # noqa: E402

ADDRESSES = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002), 3: ("127.0.0.1", 9003)}
EVENTS = TopicPartition("events", 0)
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


# --- the Fetch answer, bytes in and out ----------------------------------------------------------
@pytest.fixture(scope="module")
def wire() -> WireCluster:
    """The transactions scenario run until the leader holds two aborted transactions and an open one."""
    w = WireCluster(build("transactions"), 0, ADDRESSES)
    for _ in range(3000):
        w.step()
        log = w.leader_log(EVENTS)
        if (log is not None and len(log.aborted_transactions) >= 2 and log.first_unstable_offset is not None
                and log.first_unstable_offset < log.high_watermark):
            return w
    pytest.fail("the transactions scenario never aborted two transactions with one open above them")


def fetch(w: WireCluster, version: int, isolation: int, offset: int = 0) -> object:
    endpoint = Endpoint(w)
    leader = w.cluster.acting_leader(EVENTS)
    assert leader is not None
    conn = endpoint.connect(leader)
    R = KFetchRequest
    request = R(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=8 << 20, isolation_level=isolation, session_id=0,
                session_epoch=-1, topics=[R.FetchTopic(topic="events", partitions=[R.FetchTopic.FetchPartition(
                    partition=0, fetch_offset=offset, current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1,
                    partition_max_bytes=8 << 20)])], forgotten_topics_data=[], rack_id="")
    request.with_header(correlation_id=9, client_id="txn-test")
    endpoint.receive(conn, bytes(request.encode(version=version, header=True)))
    ((_, frame),) = endpoint.outgoing()
    (size,) = struct.unpack(">i", frame[:4])
    assert size == len(frame) - 4
    ((_, (partition,)),) = [(t.topic, t.partitions) for t in KFetchResponse.decode(
        frame, version=version, header=True, framed=True).responses]
    return partition


def batches(records: bytes) -> list:
    out, memory = [], MemoryRecords(records)
    while (batch := memory.next_batch()) is not None:
        out.append(batch)
    return out


def aborted_in(records: bytes) -> tuple[list[tuple[int, int]], int | None]:
    """(producer id, first offset) of each transaction an abort marker in `records` ends, and the first
    offset of the transaction still open at their end (None if none), from the batches alone."""
    open_at: dict[int, int] = {}
    aborted = []
    for batch in batches(records):
        if not batch.is_transactional:
            continue
        if not batch.is_control_batch:
            open_at.setdefault(batch.producer_id, batch.base_offset)
            continue
        (marker,) = list(batch)
        first = open_at.pop(batch.producer_id)
        if marker.abort:
            aborted.append((batch.producer_id, first))
    return aborted, min(open_at.values(), default=None)


@pytest.mark.parametrize("version", [4, 12])
def test_a_read_committed_fetch_gets_the_aborted_transactions_and_stops_at_the_last_stable_offset(
        wire: WireCluster, version: int) -> None:
    everything = fetch(wire, version, READ_UNCOMMITTED)
    committed = fetch(wire, version, READ_COMMITTED)
    aborted, open_from = aborted_in(bytes(everything.records))
    assert len(aborted) >= 2 and open_from is not None  # what the fixture waited for, seen in the bytes
    # Both answers carry the same HW and LSO: the first offset of the open transaction.
    for p in (everything, committed):
        assert p.error_code == 0 and p.last_stable_offset == open_from < p.high_watermark
    # read_uncommitted: null, and records up to the high watermark.
    assert everything.aborted_transactions is None
    assert batches(bytes(everything.records))[-1].next_offset == everything.high_watermark
    # read_committed: records up to the LSO, and every aborted transaction among them.
    assert batches(bytes(committed.records))[-1].next_offset == open_from
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == aborted


def test_a_read_committed_fetch_from_past_an_aborted_transaction_does_not_list_it(wire: WireCluster) -> None:
    everything = fetch(wire, 12, READ_UNCOMMITTED)
    aborted, _ = aborted_in(bytes(everything.records))
    first_abort_marker = next(b.base_offset for b in batches(bytes(everything.records))
                              if b.is_control_batch and next(iter(b)).abort)
    later = fetch(wire, 12, READ_COMMITTED, offset=first_abort_marker + 1)
    assert [(a.producer_id, a.first_offset) for a in later.aborted_transactions] == aborted[1:]


# --- real clients ----------------------------------------------------------------------------------
BATCHES_PER_TXN = 2  # the simulated producer's (`sim.producer.Producer`)
VALUE = re.compile(rb"producer-0-p0-(\d+)")
ENOUGH = 60  # consume until a record at least this far into the producer's sequence was delivered


def aborted(n: int) -> bool:
    """The scenario's producer writes its n-th record in transaction n // per_txn and aborts every
    abort_every-th transaction (the 3rd, 6th, ...)."""
    cfg = build("transactions").config
    return (n // (BATCHES_PER_TXN * cfg.producer_batch_size) + 1) % cfg.abort_every == 0


def _seq(value: bytes | None) -> int:
    match = VALUE.fullmatch(value or b"")
    assert match is not None, value
    return int(match.group(1))


def confluent_consume(bootstrap: str, isolation: str, done: Callable[[list[int]], bool], timeout_s: float) -> list[int]:
    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "client.id": f"ck-{isolation}", "group.id": f"ck-{isolation}",
                            "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([ck.TopicPartition("events", 0, ck.OFFSET_BEGINNING)])
    seen: list[int] = []
    deadline = time.monotonic() + timeout_s
    while not done(seen) and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            seen.append(_seq(msg.value()))
    consumer.close()
    return seen


def kafka_python_consume(bootstrap: str, isolation: str, done: Callable[[list[int]], bool],
                         timeout_s: float) -> list[int]:
    consumer = kp.KafkaConsumer(bootstrap_servers=bootstrap, client_id=f"kp-{isolation}", enable_auto_commit=False,
                                auto_offset_reset="earliest", isolation_level=isolation)
    tp = kp.TopicPartition("events", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    seen: list[int] = []
    deadline = time.monotonic() + timeout_s
    while not done(seen) and time.monotonic() < deadline:
        for record in consumer.poll(timeout_ms=200).get(tp, []):
            seen.append(_seq(record.value))
    consumer.close()
    return seen


def aiokafka_consume(bootstrap: str, isolation: str, done: Callable[[list[int]], bool], timeout_s: float) -> list[int]:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def consume() -> list[int]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id=f"aio-{isolation}", enable_auto_commit=False,
                                    auto_offset_reset="earliest", isolation_level=isolation)
        await consumer.start()
        tp = ATopicPartition("events", 0)
        seen: list[int] = []
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            deadline = time.monotonic() + timeout_s
            while not done(seen) and time.monotonic() < deadline:
                for record in (await consumer.getmany(timeout_ms=200)).get(tp, []):
                    seen.append(_seq(record.value))
        finally:
            await consumer.stop()
        return seen

    return asyncio.run(consume())


def kcat_consume(bootstrap: str, isolation: str, done: Callable[[list[int]], bool], timeout_s: float) -> list[int]:
    """kcat until `done`; a kcat that exits first (a fatal error) starts again as a fresh consumer."""
    import subprocess

    deadline = time.monotonic() + timeout_s
    seen: list[int] = []
    for _attempt in range(20):
        if done(seen) or time.monotonic() >= deadline:
            break
        # -E: without it kcat exits on the first non-fatal error (a leader not elected yet, a reset connection).
        proc = subprocess.Popen(["kcat", "-C", "-E", "-b", bootstrap, "-X", f"client.id=kcat-{isolation}", "-X",
                                 f"isolation.level={isolation}", "-t", "events", "-p", "0", "-o", "beginning", "-u",
                                 "-f", "%s\n"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        seen = []
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), proc.kill)  # ends a blocked read
        timer.start()
        try:
            for line in proc.stdout:
                seen.append(_seq(line.rstrip(b"\n")))
                if done(seen):
                    break
        finally:
            timer.cancel()
            proc.kill()
            proc.wait()
            proc.stdout.close()
    return seen


CONSUMERS = {"confluent-kafka": confluent_consume, "kafka-python": kafka_python_consume, "aiokafka": aiokafka_consume,
             "kcat": kcat_consume}


@pytest.fixture(scope="module")
def deliveries(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], list[int]]:
    """Every installed client, read_committed and read_uncommitted at once, against one serve run."""
    installed = [name for name in CONSUMERS if client(name).missing() is None]
    if not installed:
        return {}
    trace = tmp_path_factory.mktemp("txn") / "trace.jsonl"
    served = Served("transactions", trace=trace)
    out: dict[tuple[str, str], list[int]] = {}
    try:
        def run(name: str, isolation: str) -> None:
            out[name, isolation] = CONSUMERS[name](served.bootstrap, isolation, lambda s: bool(s) and max(s) >= ENOUGH,
                                                   90.0)

        threads = [threading.Thread(target=run, args=(name, isolation))
                   for name in installed for isolation in ("read_committed", "read_uncommitted")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        result = served.stop()
    assert result["violations"] == [] and result["faults"] == []
    # The read_committed answers replay byte-identical from the trace, and re-judge the same.
    assert replay(trace).report() == result["clients"]
    return out


@pytest.mark.parametrize("name", list(CONSUMERS))
def test_read_committed_real_clients_never_deliver_an_aborted_record(
        deliveries: dict[tuple[str, str], list[int]], name: str) -> None:
    require(client(name))
    committed, everything = deliveries[name, "read_committed"], deliveries[name, "read_uncommitted"]
    assert committed and max(committed) >= ENOUGH, f"{name} read_committed got too little: {committed}"
    assert everything and max(everything) >= ENOUGH, f"{name} read_uncommitted got too little: {everything}"
    # read_uncommitted: every record, aborted ones included, once each and in order
    assert everything == list(range(max(everything) + 1))
    assert any(aborted(n) for n in everything)
    # read_committed: exactly the committed ones, once each and in order
    assert [n for n in committed if aborted(n)] == []
    assert committed == [n for n in range(max(committed) + 1) if not aborted(n)]

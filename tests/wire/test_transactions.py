"""read_committed on the wire: `epochguard serve transactions`, whose simulated producer aborts every
third transaction, answers a read_committed Fetch with the aborted transactions in what it returns and
the last stable offset (Kafka's Fetch v4+), so real clients filter the aborted records out.

Ground truth is computed here, independently of the server: from the fetched bytes parsed by
kafka-python's record classes (control batches name the aborted transactions), and for the real
clients (confluent-kafka, kafka-python, aiokafka, kcat) from the producer's abort schedule and what a
read_uncommitted client of the same software delivers against a read_committed one.
"""

from __future__ import annotations

import collections
import logging
import re
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from epochguard.types import TopicPartition
from epochguard.wire.drivers.registry import client
from epochguard.wire.endpoint import Endpoint
from epochguard.wire.engine import WireCluster
from epochguard.wire.replay import replay
from epochguard.wire.scenarios import build
from tests.wire.conftest import require
from tests.wire.serving import Exchanges, Served, unanswered

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
        if (log is not None and len(log.aborted_transactions) >= 2 and log.first_undecided_offset is not None
                and log.first_undecided_offset < log.high_watermark):
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


def test_the_judges_view_of_the_leaders_log_tells_its_transactions(wire: WireCluster) -> None:
    """`judge.leader_view`, from the batch headers alone, against the transactions the fetched bytes show
    (kafka-python's record classes): each decided transaction is one producer's two batches up to its marker,
    aborted exactly where a marker says ABORT, and an aborted one's records are held but not read."""
    from epochguard.wire.judge import leader_view

    log = wire.leader_log(EVENTS)
    assert log is not None
    values, spans, txns = leader_view(log)
    everything = fetch(wire, 12, READ_UNCOMMITTED)
    aborted, open_from = aborted_in(bytes(everything.records))
    assert [t.first for t in txns if not t.committed] == [first for _pid, first in aborted]  # not all, not none
    assert all(len(t.spans) == BATCHES_PER_TXN and t.records == 10 for t in txns)  # a marker ends each
    assert open_from is not None and all(t.last < open_from for t in txns)  # the open one is no `Txn`
    held = {o for f, last in spans for o in range(f, last + 1)}
    for t in txns:
        records = {o for f, last in t.spans for o in range(f, last + 1)}
        assert records <= held if t.committed else not records & held  # the dense index a consumer reads
        assert t.first in values  # an aborted batch's value is still the log's: reading it is no phantom


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


CLIENT_ID_PREFIX = {"confluent-kafka": "ck", "kafka-python": "kp", "aiokafka": "aio", "kcat": "kcat"}


class Delivery:
    """What one real consumer delivered, and enough of its own account to explain a short delivery: its
    log (all of it written to `log_path` at the end, the tail in `why()`), its errors, and where it stood at
    the end (position, watermarks)."""

    def __init__(self, name: str, isolation: str, log_path: Path) -> None:
        self.name, self.isolation, self.log_path = name, isolation, log_path
        self.client_id = f"{CLIENT_ID_PREFIX[name]}-{isolation}"
        self.seen: list[int] = []
        self.log: list[str] = []
        self.errors: collections.deque[str] = collections.deque(maxlen=10)
        self.end = "(not reached)"
        self.server = "(serve's view not taken)"
        self.started = time.monotonic()
        self.ended: float | None = None  # seconds after `started`

    def note(self, line: str) -> None:
        self.log.append(f"{time.monotonic() - self.started:7.3f} {line}")

    def error(self, line: str) -> None:
        self.errors.append(f"{time.monotonic() - self.started:7.3f} {line}")
        self.note(f"ERROR {line}")

    def save(self) -> None:
        self.log_path.write_text("\n".join(self.log) + "\n", encoding="utf-8")

    def why(self, tail: int = 40) -> str:
        return (f"{self.name} {self.isolation} delivered {len(self.seen)} records {self.seen[:5]}...\n"
                f"  at the end ({'still running' if self.ended is None else f'after {self.ended:.1f} s'}): {self.end}\n"
                "  last errors:\n    " + "\n    ".join(self.errors or ["(none)"])
                + f"\n  last {min(tail, len(self.log))} of {len(self.log)} log lines (all in {self.log_path}):\n    "
                + "\n    ".join(self.log[-tail:] or ["(none)"])
                + f"\n  {self.server}\n  (serve's trace: {self.log_path.with_name('trace.jsonl')})")


class _KeepLog(logging.Handler):
    """A client library's log records from one thread (each consumer runs on its own) into its `Delivery`."""

    def __init__(self, delivery: Delivery, thread: int | None) -> None:
        super().__init__(logging.DEBUG)
        self.delivery, self.thread = delivery, thread

    def emit(self, record: logging.LogRecord) -> None:
        if self.thread is None or record.thread == self.thread:
            self.delivery.note(f"{record.levelname} {record.name}: {record.getMessage()}")


def confluent_consume(out: Delivery, bootstrap: str, isolation: str, done: Callable[[list[int]], bool],
                      timeout_s: float) -> None:
    import confluent_kafka as ck

    logger = logging.getLogger(f"tests.txn.ck-{isolation}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    handler = _KeepLog(out, None)
    logger.addHandler(handler)
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "client.id": out.client_id, "group.id": out.client_id,
                            "enable.auto.commit": False, "isolation.level": isolation, "logger": logger,
                            "debug": "consumer,fetch,protocol,metadata,topic,broker"})
    tp = ck.TopicPartition("events", 0, ck.OFFSET_BEGINNING)
    try:
        consumer.assign([tp])
        deadline = time.monotonic() + timeout_s
        while not done(out.seen) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is None:
                out.seen.append(_seq(msg.value()))
            else:
                out.error(f"{msg.error()}")
        (position,) = consumer.position([tp])
        low, high = consumer.get_watermark_offsets(tp, cached=True)
        out.end = f"position {position.offset}, cached watermarks low {low} high {high}"
    finally:
        consumer.close()
        logger.removeHandler(handler)


def kafka_python_consume(out: Delivery, bootstrap: str, isolation: str, done: Callable[[list[int]], bool],
                         timeout_s: float) -> None:
    handler = _KeepLog(out, threading.get_ident())
    logging.getLogger("kafka").addHandler(handler)
    consumer = kp.KafkaConsumer(bootstrap_servers=bootstrap, client_id=out.client_id, enable_auto_commit=False,
                                auto_offset_reset="earliest", isolation_level=isolation)
    tp = kp.TopicPartition("events", 0)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + timeout_s
        while not done(out.seen) and time.monotonic() < deadline:
            for record in consumer.poll(timeout_ms=200).get(tp, []):
                out.seen.append(_seq(record.value))
        out.end = f"position {consumer.position(tp)}, highwater {consumer.highwater(tp)}"
    finally:
        consumer.close()
        logging.getLogger("kafka").removeHandler(handler)


def aiokafka_consume(out: Delivery, bootstrap: str, isolation: str, done: Callable[[list[int]], bool],
                     timeout_s: float) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    handler = _KeepLog(out, threading.get_ident())

    async def consume() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id=out.client_id, enable_auto_commit=False,
                                    auto_offset_reset="earliest", isolation_level=isolation)
        await consumer.start()
        tp = ATopicPartition("events", 0)
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            deadline = time.monotonic() + timeout_s
            while not done(out.seen) and time.monotonic() < deadline:
                for record in (await consumer.getmany(timeout_ms=200)).get(tp, []):
                    out.seen.append(_seq(record.value))
            out.end = (f"position {await consumer.position(tp)}, highwater {consumer.highwater(tp)}, "
                       f"last stable offset {consumer.last_stable_offset(tp)}")
        finally:
            await consumer.stop()

    logging.getLogger("aiokafka").addHandler(handler)
    try:
        asyncio.run(consume())
    finally:
        logging.getLogger("aiokafka").removeHandler(handler)


def _note_lines(out: Delivery, stream: IO[bytes]) -> None:
    for line in stream:
        out.note(line.decode(errors="replace").rstrip())


def kcat_consume(out: Delivery, bootstrap: str, isolation: str, done: Callable[[list[int]], bool],
                 timeout_s: float) -> None:
    """kcat until `done`; a kcat that exits first (a fatal error) starts again as a fresh consumer."""
    import subprocess

    deadline = time.monotonic() + timeout_s
    for _attempt in range(20):
        if done(out.seen) or time.monotonic() >= deadline:
            break
        # -E: without it kcat exits on the first non-fatal error (a leader not elected yet, a reset connection).
        proc = subprocess.Popen(["kcat", "-C", "-E", "-b", bootstrap, "-X", f"client.id={out.client_id}", "-X",
                                 f"isolation.level={isolation}", "-t", "events", "-p", "0", "-o", "beginning", "-u",
                                 "-f", "%s\n"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        errors = threading.Thread(target=_note_lines, args=(out, proc.stderr), daemon=True)
        errors.start()
        out.seen = []
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), proc.kill)  # ends a blocked read
        timer.start()
        try:
            for line in proc.stdout:
                out.seen.append(_seq(line.rstrip(b"\n")))
                if done(out.seen):
                    break
        finally:
            timer.cancel()
            proc.kill()
            out.end = f"kcat exit status {proc.wait()}"
            errors.join(5)
            proc.stdout.close()
            proc.stderr.close()


CONSUMERS = {"confluent-kafka": confluent_consume, "kafka-python": kafka_python_consume, "aiokafka": aiokafka_consume,
             "kcat": kcat_consume}


@pytest.fixture(scope="module")
def deliveries(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Delivery]:
    """Every installed client, read_committed and read_uncommitted at once, against one serve run."""
    installed = [name for name in CONSUMERS if client(name).missing() is None]
    if not installed:
        return {}
    trace = tmp_path_factory.mktemp("txn") / "trace.jsonl"
    out = {(name, isolation): Delivery(name, isolation, trace.with_name(f"{name}-{isolation}.log")) for name in installed
           for isolation in ("read_committed", "read_uncommitted")}

    def run(d: Delivery) -> None:
        try:
            CONSUMERS[d.name](d, served.bootstrap, d.isolation, lambda s: bool(s) and max(s) >= ENOUGH, 90.0)
        except Exception as exc:  # said in the test's failure message, not lost on a thread
            d.error(f"the consumer raised {exc!r}")
        finally:
            d.ended = time.monotonic() - d.started
            d.save()

    # kafka-python's and aiokafka's INFO lines and up (connections, resets, errors) reach each Delivery.
    levels = {name: logging.getLogger(name).level for name in ("kafka", "aiokafka")}
    for name in levels:
        logging.getLogger(name).setLevel(logging.INFO)
    try:
        served = Served("transactions", trace=trace)
        try:
            threads = [threading.Thread(target=run, args=(d,)) for d in out.values()]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        finally:
            result = served.stop()
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    assert result["violations"] == [] and result["faults"] == []
    # The read_committed answers replay byte-identical from the trace, and re-judge the same.
    exchanges = Exchanges()
    assert replay(trace, observers=(exchanges,)).report() == result["clients"]
    waiting = unanswered(trace)
    for d in out.values():
        left = waiting.get(d.client_id, [])
        d.server = exchanges.view(d.client_id) + (f"\n  and never answered {len(left)}: " + "; ".join(left[-5:])
                                                  if left else "\n  and answered every request it got")
    return out


@pytest.mark.parametrize("name", list(CONSUMERS))
def test_read_committed_real_clients_never_deliver_an_aborted_record(
        deliveries: dict[tuple[str, str], Delivery], name: str) -> None:
    require(client(name))
    c, e = deliveries[name, "read_committed"], deliveries[name, "read_uncommitted"]
    committed, everything = c.seen, e.seen
    assert committed and max(committed) >= ENOUGH, f"{name} read_committed got too little:\n{c.why()}"
    assert everything and max(everything) >= ENOUGH, f"{name} read_uncommitted got too little:\n{e.why()}"
    # read_uncommitted: every record, aborted ones included, once each and in order
    assert everything == list(range(max(everything) + 1))
    assert any(aborted(n) for n in everything)
    # read_committed: exactly the committed ones, once each and in order
    assert [n for n in committed if aborted(n)] == []
    assert committed == [n for n in range(max(committed) + 1) if not aborted(n)]

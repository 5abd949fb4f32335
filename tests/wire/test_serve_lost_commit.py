"""Issue 35 on `epochguard serve`, the transactional case: an unclean election loses a transaction's
records together with the leader that held them, while its COMMIT marker goes to the new leader (the
producer's commit succeeds). The old leader's log dir holds the records and no marker: the audit lists
them lost and `uncommitted`; `recover` leaves them by default and, with `include_uncommitted=True`,
re-publishes exactly those, once (a second run publishes nothing).

Serve runs in this process (`WireServer` on its own event loop thread) so the test can fire the faults
between the producer's calls and copy the crashed broker's logs as an operator would (`write_log_dir`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from epochguard.client import KafkaProducer
from epochguard.sim.controller import topic_id
from epochguard.sim.faults import Crash, Heal, Isolate
from epochguard.sim.network import broker_node
from epochguard.storage.logdir import write_log_dir
from epochguard.types import TopicPartition
from epochguard.wire.scenarios import BASE, INPUT, WireScenario, isr_is
from epochguard.wire.server import WireServer
from tests.wire.serving import read_values

pytest.importorskip("pyarrow", reason="pyarrow (a dependency of the audit) is missing")

TP = TopicPartition(INPUT, 0)  # replicas (1, 2, 3), led by broker 1
T = TypeVar("T")


class InProcessServe:
    """A `WireServer` on a background event loop; `on_loop` runs a function on that loop (faults, reads)."""

    def __init__(self, scenario: WireScenario) -> None:
        self.server = WireServer(scenario, trigger="served", timeout_s=600)
        self.loop = asyncio.new_event_loop()
        self.bootstrap = self.loop.run_until_complete(self.server.start())
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self.server.run(),), daemon=True)
        self.thread.start()

    def on_loop(self, fn: Callable[[], T]) -> T:
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:  # handed to the test thread
                done.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return done.result(30)

    def wait_for(self, what: str, check: Callable[[Any], bool], timeout_s: float = 30) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.on_loop(lambda: check(self.wire.cluster)):
                return
            time.sleep(0.05)
        state = self.on_loop(lambda: {str(tp): (self.wire.cluster.acting_leader(tp), self.wire.cluster.controller.state(tp).isr)
                                      for tp in self.wire.cluster.config.assignment()})
        pytest.fail(f"serve never reached: {what} (leaders, ISRs: {state})")

    @property
    def wire(self) -> Any:
        assert self.server.endpoint is not None
        return self.server.endpoint.wire

    def fire(self, fault: Any) -> None:
        assert self.server.endpoint is not None
        endpoint = self.server.endpoint
        self.on_loop(lambda: endpoint.fire(fault))

    def close(self) -> dict[str, Any]:
        self.loop.call_soon_threadsafe(self.server.stop)
        self.thread.join(30)
        result = self.server.finish()
        self.loop.close()
        return result


@pytest.fixture
def serve() -> Iterator[InProcessServe]:
    config = replace(BASE, unclean_leader_election=True, min_insync_replicas=1, producers=())
    s = InProcessServe(WireScenario("lost-commit", config, (), "a transaction's leader lost to an unclean election"))
    try:
        s.wait_for("every partition led", lambda c: all(c.acting_leader(tp) is not None
                                                          for tp in c.config.assignment()))
        yield s
    finally:
        s.close()


def _values(bootstrap: str, want: int) -> list[bytes]:
    return read_values(bootstrap, TP, "read_committed", want)


def test_a_commit_marker_lost_with_its_leader_is_audited_uncommitted_and_recovered_only_when_asked(
        serve: InProcessServe, tmp_path: Path) -> None:
    from epochguard.ops.recover import recover
    from epochguard.spark.auditing import audit
    from epochguard.spark.session import LazySession

    producer = KafkaProducer(bootstrap_servers=serve.bootstrap, transactional_id="lost-commit", linger_ms=5,
                             max_block_ms=30_000)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(5):
            producer.send(INPUT, key=b"k", value=b"kept-%d" % i)
        producer.commit_transaction()  # replicated to all three: survives the election
        # Broker 1 cut off from its followers: the next transaction's records are acknowledged (acks=all)
        # once the followers, lagging, leave the ISR (min ISR 1), and only broker 1 has them.
        serve.fire(Isolate(1))
        producer.begin_transaction()
        lost = [producer.send(INPUT, key=b"k", value=b"lost-%d" % i) for i in range(10)]
        producer.flush()
        assert all(f.succeeded() for f in lost)
        serve.wait_for("broker 1 alone in the ISR", isr_is(TP, (1,)))
        # The leader dies before the COMMIT marker; broker 2 or 3 is elected uncleanly and gets it.
        serve.fire(Crash(1))
        serve.fire(Heal(broker_node(1)))
        serve.wait_for("an unclean leader", lambda c: c.acting_leader(TP) in (2, 3))
        producer.commit_transaction()  # the producer is told it committed
    finally:
        producer.close()
    assert _values(serve.bootstrap, 5) == [b"kept-%d" % i for i in range(5)]  # the lost ones are gone

    # The operator copies the old leader's log dir (broker 1 is down: as it was at the crash) and the others'.
    dirs = tmp_path / "dirs"

    def copy() -> list[str]:
        cluster = serve.wire.cluster
        ids = {t: topic_id(t) for t in {tp.topic for tp in cluster.config.assignment()}}
        return [str(write_log_dir(dirs / f"broker-{b}", b, cluster.logs_of(b), topic_ids=ids)) for b in (1, 2, 3)]

    copied = serve.on_loop(copy)
    out = tmp_path / "audit"
    audit(LazySession(), copied, out=str(out), html=False)
    import pyarrow.parquet as pq

    table = pq.read_table(out / "lost_records.parquet").to_pylist()
    listed = sorted({(r["offset"], r["value"], r["uncommitted"]) for r in r_of(table, INPUT) if r["kind"] == "lost"})
    assert [(v, u) for _, v, u in listed] == [(b"lost-%d" % i, True) for i in range(10)]

    plans = recover(str(out), serve.bootstrap, topics=[INPUT], timeout_s=60)
    assert plans[TP].count("uncommitted, left") == 10 and plans[TP].count("publish") == 0
    assert _values(serve.bootstrap, 5) == [b"kept-%d" % i for i in range(5)]

    plans = recover(str(out), serve.bootstrap, topics=[INPUT], include_uncommitted=True, timeout_s=60)
    assert plans[TP].count("publish") == 10
    after = _values(serve.bootstrap, 15)
    assert sorted(after) == sorted([b"kept-%d" % i for i in range(5)] + [b"lost-%d" % i for i in range(10)])

    again = recover(str(out), serve.bootstrap, topics=[INPUT], include_uncommitted=True, timeout_s=60)
    assert again[TP].count("publish") == 0 and again[TP].count("recovered before") == 10
    assert len(_values(serve.bootstrap, 15)) == 15


def r_of(rows: list[dict[str, Any]], topic: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["topic"] == topic and r["partition"] == 0]

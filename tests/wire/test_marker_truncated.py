"""`marker-truncated` (issue 20; KAFKA-20716, Jepsen's G1a aborted read): an unclean election keeps an
aborted transaction's records and loses its ABORT marker, which only the dead leader held. The new leader
holds the transaction open until the producer's next one, whose COMMIT marker closes the orphaned records
too (Kafka's `ProducerStateManager` keeps one ongoing transaction per producer, from its first offset): so
real read_committed clients deliver records the producer was told were aborted. The cluster's doing, which
no client can detect: every read_committed client must show it, the same records, and the server's judge
must name exactly what each was served.

Ground truth here is the producer's abort schedule (`test_transactions.aborted`: the scenario's producer
aborts every third transaction of ten records), against what each real client delivered; the server's
judge works from the exchanges and the simulated producer's acknowledged aborts.
"""

from __future__ import annotations

import threading
import time

import pytest

from epochguard.wire.drivers.registry import client
from tests.wire.conftest import require
from tests.wire.serving import Served
from tests.wire.test_transactions import CONSUMERS, Delivery, aborted

LATE_ENOUGH = 100  # the late readers consume until a record this far into the producer's sequence


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[tuple[str, str], Delivery], dict]:
    """read_uncommitted consumers from the start (the trigger waits for them), then, once the cluster
    settled, read_committed consumers reading the partition from its beginning: a new group member, a
    replay, a backfill. (A read_committed consumer that was already past the transaction never meets it:
    it skipped the records as aborted while the old leader held the marker, then validated its position
    on the new leader and went on from the divergence point, above them.)"""
    installed = [name for name in CONSUMERS if client(name).missing() is None]
    if not installed:
        return {}, {}
    trace = tmp_path_factory.mktemp("marker-truncated") / "trace.jsonl"
    out = {(name, isolation): Delivery(name, isolation, trace.with_name(f"{name}-{isolation}.log")) for name in installed
           for isolation in ("read_committed", "read_uncommitted")}
    served = Served("marker-truncated", "--trigger", "caught-up", "--consumers", str(len(installed)), trace=trace)

    def consume(d: Delivery) -> None:
        try:
            CONSUMERS[d.name](d, served.bootstrap, d.isolation, lambda s: bool(s) and max(s) >= LATE_ENOUGH, 150.0)
        except Exception as exc:  # said in the test's failure message, not lost on a thread
            d.error(f"the consumer raised {exc!r}")
        finally:
            d.ended = time.monotonic() - d.started
            d.save()

    threads = []
    try:
        for isolation in ("read_uncommitted", "read_committed"):
            for d in (d for (_, i), d in out.items() if i == isolation):
                d.started = time.monotonic()
                threads.append(threading.Thread(target=consume, args=(d,)))
                threads[-1].start()
            if isolation == "read_uncommitted":
                assert served.settled.wait(120), "serve never settled: " + "; ".join(served.lines[-5:])
        for t in threads:
            t.join(180)
    finally:
        result = served.stop()
    return out, {c["client_id"]: c for c in result["clients"]}


def orphaned(delivered: list[int]) -> list[int]:
    return sorted({n for n in delivered if aborted(n)})


@pytest.mark.parametrize("name", list(CONSUMERS))
def test_read_committed_clients_deliver_the_orphaned_aborted_records(run, name: str) -> None:
    require(client(name))
    deliveries, server = run
    committed, everything = deliveries[name, "read_committed"], deliveries[name, "read_uncommitted"]
    assert committed.seen and everything.seen, f"{name}:\n{committed.why()}\n{everything.why()}"
    read = orphaned(committed.seen)
    # One whole transaction of ten, the one whose marker the election lost; every other abort holds.
    assert len(read) == 10 and read == list(range(read[0], read[0] + 10)), f"{name}: {read}\n{committed.why()}"
    assert set(read) <= set(everything.seen)
    judged = server.get(committed.client_id, {}).get("aborted_reads", [])
    assert len(judged) == 10, f"{name}: the server judged {judged}"
    assert server.get(everything.client_id, {}).get("aborted_reads", []) == []  # read_uncommitted: none


def test_every_read_committed_client_read_the_same_orphaned_transaction(run) -> None:
    deliveries, _ = run
    reads = {name: tuple(orphaned(d.seen)) for (name, isolation), d in deliveries.items() if isolation == "read_committed"}
    assert reads and len(set(reads.values())) == 1, reads

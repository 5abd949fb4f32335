"""`consecutive-unclean` and the `undetectable` verdict (issue 20) at the message level.

Two unclean elections in a row: broker 2 (which lacks broker 3's last ~180 epoch-0 records) is elected in
epoch 1, a client reads its new records, and broker 3 is elected in epoch 2. Broker 3 never had epoch 1, so
OffsetsForLeaderEpoch(1) answers the end of its epoch 0, above the client's position: KIP-320 cannot see that
the epoch-1 records were replaced by broker 3's epoch-0 ones. The judge reports that divergence as
`undetectable` (never blamed) with what the client did, and still judges the first, detectable one as usual.
"""

from __future__ import annotations

import pytest

from epochguard.errors import Errors
from epochguard.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    OffsetForLeaderPartition,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
)
from epochguard.records import iter_batches
from epochguard.sim.faults import Crash, DeleteRecords, Fault, Isolate, PreferredElection, Restart
from epochguard.types import TopicPartition
from epochguard.wire import codec
from epochguard.wire.engine import Connection, WireCluster
from epochguard.wire.judge import STUCK_AFTER_STEPS, Judge
from epochguard.wire.scenarios import PauseProducers, ResumeProducers, build
from epochguard.wire.triggers import StageRunner
from tests.wire.test_judge import ADDRESSES, ask, diverged, fetch, judged, run_until  # noqa: F401 (a fixture)

TP = TopicPartition("events", 0)


class Validating:
    """A KIP-320 consumer of events-0 on whichever broker leads it: each fetch carries the leader epoch it
    knows; after a leader change it asks the new leader where the epoch of its last record ends and goes
    back there if that is below its position (Java's `SubscriptionState.maybeCompleteValidation`)."""

    def __init__(self, wire: WireCluster, name: str = "validating") -> None:
        self.wire, self.name = wire, name
        self.conn: Connection | None = None
        self.offset, self.last_epoch, self.leader_epoch = 0, -1, -1
        self.waiting = False
        self.validating = False
        self.served_by: list[tuple[int, int, int]] = []  # (broker, first offset, end) of each answer with records

    def tick(self) -> None:
        for conn, _, response in self.wire.drain():
            if conn is self.conn:
                self.waiting = False
                self._on(response)
        if self.conn is not None and self.conn.closed:
            self.conn, self.waiting = None, False
        state = self.wire.cluster.controller.state(TP)
        leader = self.wire.cluster.acting_leader(TP)
        if self.waiting or leader is None:
            return
        if self.conn is None or self.conn.broker_id != leader or state.leader_epoch != self.leader_epoch:
            self.conn = self.wire.connect(leader)
            if self.conn is None:
                return
            self.validating = self.leader_epoch >= 0 and self.last_epoch >= 0
            self.leader_epoch = state.leader_epoch
        self.waiting = True
        if self.validating:
            self.wire.submit(self.conn, codec.RequestHeader(23, 4, 1, self.name), OffsetsForLeaderEpochRequest(
                (OffsetForLeaderPartition(TP.topic, TP.partition, self.last_epoch, self.leader_epoch),)))
            return
        self.wire.submit(self.conn, codec.RequestHeader(1, 12, 1, self.name), FetchRequest(
            (FetchPartition(TP.topic, TP.partition, self.offset, self.leader_epoch),), max_wait_ms=500, version=12))

    def _on(self, response: object) -> None:
        if isinstance(response, OffsetsForLeaderEpochResponse):
            (p,) = response.partitions
            if p.error_code == Errors.NONE:
                self.validating = False
                self.offset = min(self.offset, p.end_offset) if p.end_offset >= 0 else self.offset
            return
        assert isinstance(response, FetchResponse)
        (p,) = response.partitions
        if p.error_code != Errors.NONE:
            self.conn = None
            return
        batches = [b for b in iter_batches(p.records) if b.last_offset >= self.offset]
        if batches:
            assert self.conn is not None
            self.served_by.append((self.conn.broker_id, self.offset, batches[-1].next_offset))
            self.offset, self.last_epoch = batches[-1].next_offset, batches[-1].partition_leader_epoch


def run_scenario(trigger: str = "served", steps: int = 4000) -> tuple[list[tuple[int, Fault]], Validating, Judge]:
    wire = WireCluster(build("consecutive-unclean"), 1, ADDRESSES)
    fired: list[tuple[int, Fault]] = []

    def fire(fault: Fault) -> None:
        fired.append((wire.step_no, fault))
        wire.fire(fault)

    runner = StageRunner(wire.scenario, trigger, fire, clock=lambda: 0.0)  # the wall clock never times out
    judge = Judge()
    wire.observers += [runner, judge]
    consumer = Validating(wire)
    for _ in range(steps):
        wire.step()
        consumer.tick()
        if runner.bound_passed:
            break
    assert runner.bound_passed, f"the scenario never settled: {fired}"
    return fired, consumer, judge


@pytest.fixture(scope="module")
def served() -> tuple[list[tuple[int, Fault]], Validating, Judge]:
    return run_scenario("served")


def test_the_second_trigger_waits_for_the_client_to_read_the_second_leaders_records(served) -> None:
    fired, consumer, _ = served
    crashes = [(step, f.broker) for step, f in fired if isinstance(f, Crash)]
    assert [b for _, b in crashes] == [1, 2], fired
    second = crashes[1][0]
    # Before broker 2 died the client had been served records by it, up to its log end at the time.
    from_2 = [(first, end) for broker, first, end in consumer.served_by if broker == 2]
    assert from_2, consumer.served_by
    assert any(s <= second for s, f in fired if isinstance(f, PauseProducers) and s > crashes[0][0])


def test_a_validating_client_meets_one_detected_and_one_undetectable_divergence(served) -> None:
    _, consumer, judge = served
    (report,) = judge.report()
    first, second = report["divergences"]
    # Broker 2's election: KIP-320 finds it, the client goes back to broker 2's end of epoch 0.
    assert (first["verdict"], first["how"], first["located"]) == ("detected", "rewound", None)
    # Broker 3's: the records broker 2 wrote in epoch 1 are gone, from broker 2's first epoch-1 offset on.
    epoch_1_start = first["offset"]
    assert (second["offset"], second["served_epoch"]) == (epoch_1_start, 1)
    # Broker 3 answers the end of its epoch 0 for epoch 1, above where the client was: it goes on.
    assert second["located"] >= second["served_end"] > second["offset"]
    assert (second["verdict"], second["how"]) == ("undetectable", "continued")
    assert second["skipped"] == second["served_end"] - second["offset"]
    # What it reads next from broker 3 at those offsets is broker 1's epoch-0 data, not what it read.
    assert any(b == 3 and first_offset == second["served_end"] for b, first_offset, _ in consumer.served_by)


def broker_2_leads_with_records_read() -> tuple[WireCluster, Judge, object, int]:
    """The scenario's faults by hand up to broker 2 leading in epoch 1 and a scripted client having validated
    there and read all of broker 2's log; returns the cluster, its judge, the connection and the client's end."""
    w, judge = judged("consecutive-unclean", 50)
    w.fire(Isolate(2))
    run_until(w, lambda: w.cluster.controller.state(TP).isr == (1, 3))
    for _ in range(200):
        w.step()
    w.fire(Isolate(3))
    run_until(w, lambda: w.cluster.controller.state(TP).isr == (1,))
    w.fire(PauseProducers())
    w.fire(Crash(1))
    w.fire(ResumeProducers())
    run_until(w, lambda: w.cluster.acting_leader(TP) == 2)
    return w, judge, w.connect(2), 0


def read_to_end(w: WireCluster, conn: object, offset: int, epoch: int) -> int:
    while True:
        p = fetch(w, conn, offset, epoch).partitions[0]
        batches = list(iter_batches(p.records))
        if not batches:
            return offset
        offset = batches[-1].next_offset


def elect_broker_3(w: WireCluster) -> None:
    w.fire(Crash(2))
    run_until(w, lambda: w.cluster.acting_leader(TP) == 3)


@pytest.fixture
def epoch_1_read() -> tuple[WireCluster, Judge, int]:
    """Broker 2 leads in epoch 1 and wrote ~20 records; the client read its whole log; broker 3 is elected."""
    w, judge, conn, _ = broker_2_leads_with_records_read()
    start = w.cluster.log(2, TP).leader_epoch_cache.entries()[-1][1]
    run_until(w, lambda: w.cluster.log(2, TP).high_watermark >= start + 20)
    w.fire(PauseProducers())
    end = read_to_end(w, conn, 0, 1)
    assert end < w.cluster.log(3, TP).log_end_offset  # broker 3's epoch 0 reaches past the client
    elect_broker_3(w)
    return w, judge, end


@pytest.mark.parametrize("back", [0, 3])
def test_a_client_going_back_to_the_first_replaced_record_rewound(epoch_1_read, back: int) -> None:
    """A client that reads the partition again from the first replaced record, or below (a restart from an
    old commit): `undetectable`, `rewound`, with the records below it served again."""
    w, judge, _ = epoch_1_read
    start = w.cluster.log(2, TP).leader_epoch_cache.entries()[-1][1]
    for _ in range(5):
        w.step()
    fetch(w, w.connect(3), start - back, 2)
    (event,) = judge.report()[0]["divergences"]
    assert (event["verdict"], event["how"], event["offset"], event["redelivered"]) == (
        "undetectable", "rewound", start, back)


def test_a_client_that_stops_fetching_stopped(epoch_1_read) -> None:
    w, judge, _ = epoch_1_read
    for _ in range(STUCK_AFTER_STEPS + 5):
        w.step()
        w.drain()
    (event,) = judge.report()[0]["divergences"]
    assert (event["verdict"], event["how"]) == ("undetectable", "stopped")


def test_replaced_past_where_kip_320_can_place_it(epoch_1_read) -> None:
    """Broker 2 wrote more in epoch 1 than broker 3 holds past broker 2's end of epoch 0: a validation of
    epoch 1 answers broker 3's end of epoch 0, below the position, and the client goes back there; the
    records between broker 2's epoch-1 start and that answer stay replaced where it read them. The event
    says where KIP-320 placed it (`located`) and where the replacement began (`offset`)."""
    w, judge, conn, _ = broker_2_leads_with_records_read()
    start = w.cluster.log(2, TP).leader_epoch_cache.entries()[-1][1]
    broker_3_end = w.cluster.log(3, TP).log_end_offset
    run_until(w, lambda: w.cluster.log(2, TP).high_watermark >= broker_3_end + 20, limit=5000)
    w.fire(PauseProducers())
    end = read_to_end(w, conn, 0, 1)
    elect_broker_3(w)
    for _ in range(5):
        w.step()
    c3 = w.connect(3)
    answer = ask(w, c3, 23, 4, OffsetsForLeaderEpochRequest((OffsetForLeaderPartition("events", 0, 1, 2),)))
    located = answer.partitions[0].end_offset
    assert start < located == broker_3_end < end
    fetch(w, c3, located, 2)
    events = judge.report()[0]["divergences"]
    assert [(e["offset"], e["located"], e["verdict"], e["how"], e["skipped"]) for e in events[-1:]] == [
        (start, located, "undetectable", "continued", located - start)]


def test_a_clean_leader_change_replaces_nothing() -> None:
    """A control: leadership moves cleanly while the client has read records; the new leader holds the same
    batches, so no event opens (the batch comparison is by CRC at the same base offset)."""
    w, judge = judged("leader-bounce", 100)
    end = read_to_end(w, w.connect(1), 0, 0)
    assert end > 0
    w.fire(PreferredElection(TP, 2))
    run_until(w, lambda: w.cluster.acting_leader(TP) == 2)
    for _ in range(20):
        w.step()
    read_to_end(w, w.connect(2), end, 1)
    assert judge.report()[0]["divergences"] == []


def test_records_deleted_below_the_log_start_are_not_replaced() -> None:
    """DeleteRecords moves the leader's log start past what the client read: those records are deleted by
    the operator, not replaced, whatever the log still holds of them (log-start-jump judges that move)."""
    w, judge = judged("log-start-jump")
    for broker in (1, 2, 3):
        w.cluster.log(broker, TP).segment_bytes = 1000  # small segments: DeleteRecords drops whole ones
    for _ in range(100):
        w.step()
    conn = w.connect(1)
    end = read_to_end(w, conn, 0, 0)
    w.fire(DeleteRecords(TP, end - 2))  # in the middle of the last batch read
    run_until(w, lambda: w.cluster.log(2, TP).log_start_offset == end - 2)
    assert w.cluster.log(2, TP).segments[0].base_offset > 0  # the first batches read are gone from the log
    w.fire(PreferredElection(TP, 2))
    run_until(w, lambda: w.cluster.acting_leader(TP) == 2)
    for _ in range(20):
        w.step()
    read_to_end(w, w.connect(2), end, 1)
    assert judge.report()[0]["divergences"] == []


def test_each_replaced_record_is_judged_once(diverged) -> None:  # noqa: F811 (the fixture)
    """A client that went on past the first divergence (silent) keeps the replaced batches in what it was
    served; a later clean leader change must not open a second event for them."""
    w, judge, served_to = diverged
    fetch(w, w.connect(2), served_to, 1)
    (event,) = judge.report()[0]["divergences"]
    assert event["verdict"] == "silent"
    w.fire(Restart(1))
    run_until(w, lambda: 1 in w.cluster.controller.state(TP).isr)
    w.fire(PreferredElection(TP, 1))
    run_until(w, lambda: w.cluster.acting_leader(TP) == 1)
    for _ in range(20):
        w.step()
    read_to_end(w, w.connect(1), served_to, w.cluster.controller.state(TP).leader_epoch)
    assert [e["verdict"] for e in judge.report()[0]["divergences"]] == ["silent"]

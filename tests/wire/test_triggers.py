"""The client triggers at the message level: a consumer that follows the log end on the acting leader
makes `served` and `caught-up` fire in every scenario, never the wall-clock time-out."""

from __future__ import annotations

import pytest

from epochguard.errors import Errors
from epochguard.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    ProducePartition,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
)
from epochguard.records import iter_batches
from epochguard.sim.faults import Fault
from epochguard.types import IsolationLevel, TopicPartition
from epochguard.wire import codec
from epochguard.wire.engine import Connection, WireCluster
from epochguard.wire.judge import STUCK_AFTER_STEPS
from epochguard.wire.scenarios import PauseProducers, ResumeProducers, build
from epochguard.wire.triggers import ClientTrigger, StageRunner

ADDRESSES = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002), 3: ("127.0.0.1", 9003)}
EVENTS = TopicPartition("events", 0)
FETCH_WAIT_MS = 500  # what librdkafka, kafka-python and aiokafka wait by default


class Follower:
    """A consumer of events-0 from offset 0 on whichever broker leads it, long-polling as real clients do."""

    def __init__(self, wire: WireCluster, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> None:
        self.wire = wire
        self.isolation = isolation
        self.conn: Connection | None = None
        self.offset = 0
        self.waiting = False
        self.empty_at_end = 0

    def tick(self) -> None:
        for conn, _, response in self.wire.drain():
            if conn is self.conn and isinstance(response, FetchResponse):
                self.waiting = False
                self._on_fetch(response)
        if self.conn is not None and self.conn.closed:
            self.conn, self.waiting = None, False
        leader = self.wire.cluster.acting_leader(EVENTS)
        if self.waiting or leader is None:
            return
        if self.conn is None or self.conn.broker_id != leader:
            self.conn = self.wire.connect(leader)
            if self.conn is None:
                return
        self.waiting = True
        self.wire.submit(self.conn, codec.RequestHeader(1, 12, 1, "follower"), FetchRequest(
            (FetchPartition(EVENTS.topic, EVENTS.partition, self.offset),), max_wait_ms=FETCH_WAIT_MS,
            isolation_level=self.isolation, version=12))

    def _on_fetch(self, response: FetchResponse) -> None:
        (p,) = response.partitions
        if p.error_code != Errors.NONE:
            self.conn = None  # go to the current leader
            return
        batches = list(iter_batches(p.records))
        if batches:
            self.offset = batches[-1].next_offset
        elif self.offset >= (p.last_stable_offset if self.isolation == IsolationLevel.READ_COMMITTED
                             else p.high_watermark):
            self.empty_at_end += 1


def run(scenario: str, trigger: str, steps: int = 1500) -> tuple[StageRunner, list[tuple[int, Fault]], Follower]:
    wire = WireCluster(build(scenario), 1, ADDRESSES)
    fired: list[tuple[int, Fault]] = []

    def fire(fault: Fault) -> None:
        fired.append((wire.step_no, fault))
        wire.fire(fault)

    runner = StageRunner(wire.scenario, trigger, fire, clock=lambda: 0.0)  # the wall clock never times out
    wire.observers.append(runner)
    follower = Follower(wire)
    for _ in range(steps):
        wire.step()
        follower.tick()
        if runner.trigger_outcome is not None and runner.settled:
            break
    return runner, fired, follower


SCENARIOS = ["unclean-election", "zombie-leader", "stale-metadata", "lagging-leader", "leader-bounce"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_caught_up_fires_on_a_consumer_idle_at_the_log_end(scenario: str) -> None:
    runner, fired, follower = run(scenario, "caught-up")
    assert runner.trigger_outcome == "met", f"{scenario}: the trigger never fired ({fired})"
    assert follower.empty_at_end > 0
    kinds = [type(f) for _, f in fired]
    # The scenario's producers were quiet while the trigger waited, and write again once it fired.
    assert ResumeProducers in kinds and PauseProducers in kinds
    assert kinds.index(PauseProducers) < kinds.index(ResumeProducers)
    assert runner.settled


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_served_fires_under_the_producers_traffic(scenario: str) -> None:
    runner, fired, _ = run(scenario, "served")
    assert runner.trigger_outcome == "met", f"{scenario}: the trigger never fired ({fired})"
    kinds = [type(f) for _, f in fired]
    # Only a scenario that pauses its producers itself (before the trigger) pauses them.
    assert (PauseProducers in kinds) == (scenario in ("unclean-election", "zombie-leader"))
    assert runner.settled


class _Watch:
    """A `ClientTrigger` as a WireCluster observer."""

    def __init__(self, trigger: ClientTrigger) -> None:
        self.trigger = trigger

    def on_exchange(self, conn: Connection, header: object, request: object, response: object, applied_step: int,
                    step: int) -> None:
        self.trigger.observe(conn.client_id, request, response)

    def on_fault(self, fault: Fault, step: int) -> None:
        pass

    def on_step(self, wire: WireCluster) -> None:
        pass


@pytest.mark.parametrize("mode", ["served", "caught-up"])
def test_a_read_committed_consumer_is_at_the_log_end_at_the_last_stable_offset(mode: str) -> None:
    """It can read no further than the LSO: with a transaction left open there, it is caught up below the HW."""
    wire = WireCluster(build("transactions"), 1, ADDRESSES)
    trigger = ClientTrigger(mode, EVENTS)
    wire.observers.append(_Watch(trigger))
    for _ in range(3000):
        wire.step()
        log = wire.leader_log(EVENTS)
        if log is not None and log.aborted_transactions and log.first_undecided_offset is not None:
            break
    wire.fire(PauseProducers())  # the open transaction stays open: the LSO stays below the HW
    for _ in range(100):  # what was in flight is committed
        wire.step()
    log = wire.leader_log(EVENTS)
    assert log is not None and log.last_stable_offset < log.high_watermark == log.log_end_offset
    follower = Follower(wire, IsolationLevel.READ_COMMITTED)
    for _ in range(300):
        wire.step()
        follower.tick()
    log = wire.leader_log(EVENTS)
    assert log is not None and follower.offset == log.last_stable_offset < log.high_watermark
    assert follower.empty_at_end > 0 and trigger.met()


def test_ack_waits_for_an_acknowledgement_from_every_expected_producer() -> None:
    """idempotent-truncation isolates the leader once every producer's batches reached its followers:
    the first acknowledgement of one client is not enough, nor an error, acks=1 or another topic."""
    trigger = ClientTrigger("ack", EVENTS, min_consumers=2)

    def produce(client: str, topic: str = "input", acks: int = -1, error: Errors = Errors.NONE) -> None:
        request = ProduceRequest((ProducePartition(topic, 0, b""),), acks=acks)
        trigger.observe(client, request, ProduceResponse((ProducePartitionResponse(topic, 0, error, 0),)))

    assert trigger.present()
    produce("a")
    produce("a")
    produce("b", error=Errors.NOT_LEADER_OR_FOLLOWER)
    produce("b", acks=1)
    produce("b", topic="events")
    assert not trigger.met()
    produce("b")
    assert trigger.met()


@pytest.mark.parametrize("scenario", ["unclean-election", "zombie-leader"])
def test_the_stuck_bound_passes_in_server_steps_after_settling(scenario: str) -> None:
    """`stuck-bound` comes exactly STUCK_AFTER_STEPS after `settled`, once: by then the judge has decided
    every divergence (the runs wait for it, not for wall-clock seconds)."""
    wire = WireCluster(build(scenario), 1, ADDRESSES)
    events: list[tuple[str, int]] = []
    runner = StageRunner(wire.scenario, "served", wire.fire, clock=lambda: 0.0,
                         on_event=lambda kind, detail: events.append((kind, detail["step"])))
    wire.observers.append(runner)
    follower = Follower(wire)
    while not runner.bound_passed and wire.step_no < 5000:
        wire.step()
        follower.tick()
    for _ in range(STUCK_AFTER_STEPS):
        wire.step()
        follower.tick()
    steps = dict(events)
    assert [k for k, _ in events].count("stuck-bound") == 1
    assert steps["stuck-bound"] - steps["settled"] == STUCK_AFTER_STEPS


@pytest.mark.parametrize(("min_consumers", "fires_at"), [(1, 30.0), (2, 120.0)])
def test_trigger_time_out_counts_from_every_consumers_first_fetch(min_consumers: int, fires_at: float) -> None:
    """The wall-clock time-out runs from when every expected consumer has fetched, never before: one
    that arrives late (a JVM started under load) is waited for. A consumer present from the start but
    never served fires at 30 s; a second one that never comes, at 4 x 30 s."""
    wire = WireCluster(build("leader-bounce"), 1, ADDRESSES)
    fired: list[Fault] = []
    now = [0.0]
    runner = StageRunner(wire.scenario, "served", fired.append, clock=lambda: now[0], min_consumers=min_consumers)
    wire.observers.append(runner)
    # one consumer fetches the partition, but only ever at its high watermark: present, never served
    for _ in range(30):
        wire.step()
    conn = wire.connect(1)
    assert conn is not None
    wire.submit(conn, codec.RequestHeader(1, 12, 1, "never-served"), FetchRequest(
        (FetchPartition(EVENTS.topic, EVENTS.partition, wire.cluster.log(1, EVENTS).high_watermark),),
        max_wait_ms=0, version=12))
    for t in (0.0, fires_at - 1, fires_at + 1):
        now[0] = t
        for _ in range(100):  # past the stage's min_steps: the trigger is armed at t=0
            wire.step()
        wire.drain()
        assert (runner.trigger_outcome == "timed out") == (t > fires_at), (t, runner.trigger_outcome)

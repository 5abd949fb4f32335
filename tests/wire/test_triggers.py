"""The client triggers at the message level: a consumer that follows the log end on the acting leader
makes `served` and `caught-up` fire in every scenario, never the wall-clock time-out."""

from __future__ import annotations

import pytest

from epochguard.errors import Errors
from epochguard.messages import FetchPartition, FetchRequest, FetchResponse
from epochguard.records import iter_batches
from epochguard.sim.faults import Fault
from epochguard.types import TopicPartition
from epochguard.wire import codec
from epochguard.wire.engine import Connection, WireCluster
from epochguard.wire.scenarios import PauseProducers, ResumeProducers, build
from epochguard.wire.triggers import StageRunner

ADDRESSES = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002), 3: ("127.0.0.1", 9003)}
EVENTS = TopicPartition("events", 0)
FETCH_WAIT_MS = 500  # what librdkafka, kafka-python and aiokafka wait by default


class Follower:
    """A consumer of events-0 from offset 0 on whichever broker leads it, long-polling as real clients do."""

    def __init__(self, wire: WireCluster) -> None:
        self.wire = wire
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
            (FetchPartition(EVENTS.topic, EVENTS.partition, self.offset),), max_wait_ms=FETCH_WAIT_MS, version=12))

    def _on_fetch(self, response: FetchResponse) -> None:
        (p,) = response.partitions
        if p.error_code != Errors.NONE:
            self.conn = None  # go to the current leader
            return
        batches = list(iter_batches(p.records))
        if batches:
            self.offset = batches[-1].next_offset
        elif self.offset >= p.high_watermark:
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

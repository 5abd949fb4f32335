"""Faults that fire on what the server observes clients doing, with a wall-clock time-out.

`--trigger served`: every consumer of the scenario's trigger partition has been served records up to
the log end (the last record it got is the last one below the high watermark, or under read_committed
the last stable offset). `--trigger caught-up`:
and it has since received an empty fetch at the log end. The two differ for clients that forget a
position's epoch on an empty fetch. `--trigger commit` waits for a commit on the partition from as many
clients as the run expects consumers, `--trigger ack` for an acknowledged acks=all produce to `input` from
as many (idempotent-truncation: each producer must be known to the followers before the faults).

A consumer is only ever caught up when nothing new arrives for a whole long poll (real clients wait
500 ms; the scenario's producer writes every 50 ms). So while `caught-up` waits, the runner pauses the
scenario's simulated producers (unless the scenario paused them itself) and resumes them when the
trigger stage ends, just before its faults; both are traced as faults like any other.

`StageRunner` walks a scenario's stages: each waits for its condition (cluster ready, a predicate on
the cluster, the client trigger) and at least `min_steps`, then its faults are scheduled at their step
offsets and fired through the `fire` callback (which traces them). A second TRIGGER stage waits for the
condition anew, from the first stage's firing on. The wall clock is consulted only
for the trigger's time-out; once fired, a fault is a step number in the trace, so replay needs no clock.
Once settled, the runner says when the judge's stuck bound (`STUCK_AFTER_STEPS`) has passed, so a run
can last long enough in server steps for every divergence to be decided.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from epochguard.errors import Errors
from epochguard.protocol.messages import (
    FetchRequest,
    FetchResponse,
    OffsetCommitRequest,
    ProduceRequest,
    ProduceResponse,
)
from epochguard.sim.faults import Fault
from epochguard.types import IsolationLevel
from epochguard.wire.judge import STUCK_AFTER_STEPS, batch_spans
from epochguard.wire.scenarios import INPUT, READY, TRIGGER, PauseProducers, ResumeProducers, WireScenario

__all__ = ["TRIGGERS", "ClientTrigger", "StageRunner"]

TRIGGERS = ("served", "caught-up", "commit", "ack")
ABSENT_FACTOR = 4  # how many time-outs the trigger waits for consumers that have not fetched yet


@dataclass
class _Progress:
    served_at_end: bool = False
    empty_at_end: bool = False


class ClientTrigger:
    """Watches exchanges for the trigger condition on one partition."""

    def __init__(self, mode: str, partition: Any, min_consumers: int = 1) -> None:
        if mode not in TRIGGERS:
            raise ValueError(f"unknown trigger {mode!r}; choose from {', '.join(TRIGGERS)}")
        self.mode = mode
        self.tp = partition
        # Consumers not yet fetching are not counted by `served`/`caught-up`: a run that expects N of
        # them waits for N, or a slow starter would first see the cluster after the faults.
        self.min_consumers = min_consumers
        self.progress: dict[str, _Progress] = {}
        self.committers: set[str] = set()  # clients that committed an offset of the partition
        self.acked: set[str] = set()  # clients with an acknowledged acks=all produce to `input`

    def observe(self, client: str, request: Any, response: Any) -> None:
        if isinstance(request, FetchRequest) and not request.is_from_follower and isinstance(response, FetchResponse):
            for p in response.partitions:
                if p.tp != self.tp or p.error_code != Errors.NONE:
                    continue
                prog = self.progress.setdefault(client, _Progress())
                # The end this client can read to: the LSO under read_committed, else the HW.
                end = (p.last_stable_offset if request.isolation_level == IsolationLevel.READ_COMMITTED
                       else p.high_watermark)
                spans = batch_spans(p.records)
                if spans:
                    prog.served_at_end = spans[-1][1] + 1 >= end
                    prog.empty_at_end = False
                elif prog.served_at_end:
                    fetched = next((q.fetch_offset for q in request.partitions if q.tp == self.tp), -1)
                    prog.empty_at_end = fetched >= end
        elif isinstance(request, OffsetCommitRequest):
            if any(p.tp == self.tp for p in request.partitions):
                self.committers.add(client)
        elif isinstance(request, ProduceRequest) and isinstance(response, ProduceResponse) and request.acks == -1:
            if any(p.tp.topic == INPUT and p.error_code == Errors.NONE for p in response.partitions):
                self.acked.add(client)

    def present(self) -> bool:
        """Every consumer the run expects has fetched the partition (always, for `commit` and `ack`)."""
        return self.mode in ("commit", "ack") or len(self.progress) >= max(self.min_consumers, 1)

    def met(self) -> bool:
        if self.mode == "commit":
            return len(self.committers) >= max(self.min_consumers, 1)
        if self.mode == "ack":
            return len(self.acked) >= max(self.min_consumers, 1)
        if len(self.progress) < max(self.min_consumers, 1):
            return False
        if self.mode == "served":
            return all(p.served_at_end for p in self.progress.values())
        return all(p.served_at_end and p.empty_at_end for p in self.progress.values())


class StageRunner:
    """Observer of a `WireCluster` that fires the scenario's faults (see the module docstring)."""

    def __init__(
        self,
        scenario: WireScenario,
        trigger: str,
        fire: Callable[[Fault], None],
        *,
        timeout_s: float = 30.0,
        min_consumers: int = 1,
        clock: Callable[[], float] = time.monotonic,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.trigger = ClientTrigger(trigger, scenario.trigger_partition, min_consumers)
        self.fire = fire
        self.timeout_s = timeout_s
        self.clock = clock
        self.on_event = on_event or (lambda kind, detail: None)
        self.stage = 0
        self.stage_started_step = 0
        self.trigger_wait_since: float | None = None
        self.consumers_present_since: float | None = None  # every expected consumer had fetched by then
        self.scheduled: list[tuple[int, int, Fault]] = []  # (step, order, fault)
        self.last_fault_step = 0
        self.settled_step: int | None = None
        self.bound_passed = False  # STUCK_AFTER_STEPS since `settled`: every divergence has been decided
        self.trigger_outcome: str | None = None  # "met" or "timed out"
        self._paused_producers = False  # by this runner, for `caught-up`

    # --- observer --------------------------------------------------------------------------------
    def on_exchange(self, conn: Any, header: Any, request: Any, response: Any, applied_step: int, step: int) -> None:
        self.trigger.observe(conn.client_id or f"connection-{conn.id}", request, response)

    def on_fault(self, fault: Any, step: int) -> None:
        pass

    def on_step(self, wire: Any) -> None:
        step = wire.step_no
        due = [s for s in self.scheduled if s[0] <= step]
        if due:
            self.scheduled = [s for s in self.scheduled if s[0] > step]
            for _, _, fault in sorted(due, key=lambda s: s[:2]):
                self.fire(fault)
                self.last_fault_step = step
        stages = self.scenario.stages
        while self.stage < len(stages) and self._holds(stages[self.stage], wire):
            stage = stages[self.stage]
            for i, (delay, fault) in enumerate(stage.faults):
                if delay == 0:
                    self.fire(fault)
                    self.last_fault_step = step
                else:
                    self.scheduled.append((step + delay, i, fault))
            self.stage += 1
            self.stage_started_step = step
        if (self.settled_step is None and self.stage >= len(stages) and not self.scheduled and wire.ready()
                and step - self.last_fault_step >= self.scenario.settle_steps):
            self.settled_step = step
            self.on_event("settled", {"step": step})
        # In steps, not seconds: under load the server's clock lags the wall clock, and a run stopped on
        # wall time alone would end before the judge could call a client stuck (and leave it undecided).
        if not self.bound_passed and self.settled_step is not None and step - self.settled_step >= STUCK_AFTER_STEPS:
            self.bound_passed = True
            self.on_event("stuck-bound", {"step": step})

    def _holds(self, stage: Any, wire: Any) -> bool:
        step = wire.step_no
        if step - self.stage_started_step < stage.min_steps:
            return False
        if stage.wait == READY:
            return bool(wire.ready())
        if stage.wait == TRIGGER:
            now = self.clock()
            if self.trigger_wait_since is None:
                self.trigger_wait_since = now
                self.on_event("trigger-armed", {"step": step, "trigger": self.trigger.mode})
                cluster = wire.cluster
                if self.trigger.mode == "caught-up" and any(p in cluster.clients for p in cluster.producers):
                    self.fire(PauseProducers())
                    self._paused_producers = True
            if self.consumers_present_since is None and self.trigger.present():
                self.consumers_present_since = now
            if self.trigger.met():
                self.trigger_outcome = "met"
            elif self._timed_out(now):
                self.trigger_outcome = "timed out"
            else:
                return False
            self.on_event("trigger", {"step": step, "trigger": self.trigger.mode, "outcome": self.trigger_outcome})
            if self._paused_producers:
                self.fire(ResumeProducers())
                self._paused_producers = False
            self._rearm()
            return True
        return bool(stage.wait(wire.cluster))

    def _rearm(self) -> None:
        """A later TRIGGER stage waits anew (`consecutive-unclean`: the clients must read the second leader's
        records before it dies): each consumer must be served to the end again, commit or ack again."""
        self.trigger_wait_since = self.consumers_present_since = None
        for p in self.trigger.progress.values():
            p.served_at_end = p.empty_at_end = False
        self.trigger.committers.clear()
        self.trigger.acked.clear()

    def _timed_out(self, now: float) -> bool:
        """`timeout_s` after every expected consumer first fetched the partition: a client that starts
        late (a JVM on a loaded machine took more than 30 s) is waited for, never faulted before it was
        there; if one never comes, `ABSENT_FACTOR` times `timeout_s` after the trigger was armed."""
        assert self.trigger_wait_since is not None
        if self.consumers_present_since is not None:
            return now - self.consumers_present_since >= self.timeout_s
        return now - self.trigger_wait_since >= ABSENT_FACTOR * self.timeout_s

    @property
    def settled(self) -> bool:
        return self.settled_step is not None

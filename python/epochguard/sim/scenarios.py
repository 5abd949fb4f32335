"""Named scenarios and the Python API: `run_scenario(name, seed=..., protocol=...) -> SimulationResult`.

Each scenario is a cluster configuration plus a fault schedule aimed at one failure the leader-epoch
protocol exists to prevent. Under "kip-320" the checker must find nothing; under "pre-kip-320"
(offsets only) it finds the failure:

- `unclean-election`: followers fall out of the ISR, the leader keeps taking acks=1 writes that a
  consumer reads, then dies; an unclean election makes a lagging replica leader. Pre-KIP-320 the
  consumer silently continues on (or resets into) the new log: phantom reads, skipped records.
- `zombie-replica` (KAFKA-6880): a follower cut off from the controller keeps fetching from its old
  leader; leadership moves away and back. Pre-KIP-320 the zombie rejoins the ISR with a divergent log.
- `stale-metadata`: one broker serves metadata late; after a leader move, clients asking it get an
  older leader epoch. Pre-KIP-232 they accept it: the metadata epoch goes backwards.
- `leader-bounce`: leaders crash and restart one after another under acks=all traffic. Pre-KIP-207 a
  new leader answers ListOffsets(latest) with a high watermark below the old one.
- `transactions`: `leader-bounce` with a transactional producer (every third transaction aborted) and
  a read_committed consumer next to a read_uncommitted one. The read_committed consumer must never see
  an aborted record and, like the other, skip nothing else; pre-KIP-207 ListOffsets still goes back.
- `random`: a seeded random mix of every fault, with unclean elections allowed.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from epochguard.sim.clock import SeededRandom
from epochguard.sim.cluster import Cluster, ClusterConfig
from epochguard.sim.consumer import ConsumedRecord
from epochguard.sim.controller import topic_id
from epochguard.sim.faults import (
    Crash,
    Heal,
    Isolate,
    LinkDelay,
    PreferredElection,
    Restart,
    Schedule,
    StaleMetadata,
    Zombie,
    random_schedule,
)
from epochguard.sim.invariants import Violation
from epochguard.sim.network import broker_node
from epochguard.sim.producer import ProducedRecord
from epochguard.sim.timeline import Event
from epochguard.storage.logdir import write_log_dir
from epochguard.types import EpochProtocol, TopicPartition

PROTOCOLS: tuple[EpochProtocol, ...] = ("kip-320", "pre-kip-320")


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    config: ClusterConfig
    schedule: Schedule
    steps: int
    check_progress: bool = True  # every fault heals before the end: consumers must have caught up

    def settled(self, settle_steps: int = 40) -> bool:
        """Whether the run goes on for `settle_steps` after the last fault (and its duration) ended."""
        last = 0
        for step, fault in self.schedule:
            duration = getattr(fault, "duration_ms", None) or 0
            last = max(last, step + -(-duration // self.config.tick_ms))
        return self.steps >= last + settle_steps


@dataclass
class SimulationResult:
    scenario: str
    seed: int
    protocol: EpochProtocol
    steps: int
    violations: list[Violation]
    events: list[Event]
    consumed: list[ConsumedRecord]
    produced: list[ProducedRecord]
    log_dirs: dict[int, Path] = field(default_factory=dict)
    cluster: Cluster | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return not self.violations

    def violated(self) -> set[str]:
        """The names of the invariants that were violated."""
        return {v.invariant for v in self.violations}

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "protocol": self.protocol,
            "steps": self.steps,
            "violations": [v.to_json() for v in self.violations],
            "events": [e.to_json() for e in self.events],
        }


# --- the scenarios -------------------------------------------------------------------------------
def unclean_election(seed: int, partitions: int) -> Scenario:
    cfg = ClusterConfig(partitions=partitions, unclean_leader_election=True, producers=(1,),
                        min_insync_replicas=1, auto_offset_reset="earliest")
    schedule: Schedule = [
        (25, Isolate(1)),  # broker 1's followers stop replicating; it shrinks its ISRs to itself
        (70, Crash(1)),  # the only in-sync replica of its partitions dies
        (72, Heal(broker_node(1))),  # its links heal; broker 1 itself stays down
    ]
    return Scenario("unclean-election", cfg, schedule, steps=160)


def zombie_replica(seed: int, partitions: int) -> Scenario:
    # A lag time well above broker 3's fetch round trip: it stays in the ISR, behind broker 2.
    cfg = ClusterConfig(partitions=partitions, producers=(1,), min_insync_replicas=1, replica_lag_time_max_ms=250)
    tp = TopicPartition(cfg.topic, 0)
    schedule: Schedule = [
        (10, LinkDelay(broker_node(3), broker_node(1), delay_ms=100)),  # broker 3 lags: the HW trails broker 2
        (20, Zombie(2)),  # broker 2 loses the controller but keeps fetching from broker 1 at epoch 0
        (30, Crash(1)),  # broker 3 (in the ISR, behind broker 2) becomes leader
        (31, LinkDelay(broker_node(3), broker_node(1))),  # back to normal
        (45, Restart(1)),  # broker 1 comes back as a follower of 3 and truncates
        (90, PreferredElection(tp, 1)),  # leadership moves back to broker 1: the zombie can fetch again
    ]
    return Scenario("zombie-replica", cfg, schedule, steps=160)


def stale_metadata(seed: int, partitions: int) -> Scenario:
    cfg = ClusterConfig(partitions=partitions, producers=(-1,))
    tp = TopicPartition(cfg.topic, 0)
    schedule: Schedule = [
        (15, StaleMetadata(3, lag_ms=600)),  # broker 3 applies controller updates 600 ms late
        (25, PreferredElection(tp, 2)),
        (60, PreferredElection(tp, 3)),
        (100, StaleMetadata(3, lag_ms=0)),
    ]
    return Scenario("stale-metadata", cfg, schedule, steps=140)


def leader_bounce(seed: int, partitions: int) -> Scenario:
    cfg = ClusterConfig(partitions=partitions, producers=(-1, 1))
    b1, b2, b3 = (broker_node(b) for b in (1, 2, 3))
    # Before each leader dies, the follower that will remain in sync with the next leader loses its
    # link to it for a while: the new leader's high watermark stays behind the old leader's until that
    # follower drops out of the ISR (the KIP-207 window).
    schedule: Schedule = [
        (25, LinkDelay(b3, b2, drop_rate=1.0, duration_ms=250)),
        (30, Crash(1)),  # leader 1 -> 2
        (50, Restart(1)),
        (85, LinkDelay(b3, b1, drop_rate=1.0, duration_ms=250)),
        (90, Crash(2)),  # leader 2 -> 1
        (110, Restart(2)),
        (150, Crash(3)),  # a follower bounces too
        (170, Restart(3)),
    ]
    return Scenario("leader-bounce", cfg, schedule, steps=220)


def transactions(seed: int, partitions: int) -> Scenario:
    bounce = leader_bounce(seed, partitions)
    cfg = replace(bounce.config, producers=(-1, 1), transactional_producers=1, consumers=2, read_committed_consumers=1)
    return Scenario("transactions", cfg, bounce.schedule, steps=bounce.steps)


def random_faults(seed: int, partitions: int, steps: int = 400) -> Scenario:
    cfg = ClusterConfig(partitions=partitions, producers=(-1, 1), unclean_leader_election=False)
    tps = tuple(sorted(cfg.assignment()))
    schedule = random_schedule(
        SeededRandom(seed).fork("faults"), steps=steps, brokers=tuple(range(1, cfg.brokers + 1)),
        topic_partitions=tps, clients=("producer-0", "producer-1", "consumer-0", "monitor"), tick_ms=cfg.tick_ms,
    )
    return Scenario("random", cfg, schedule, steps=steps)


SCENARIOS: dict[str, Callable[[int, int], Scenario]] = {
    "unclean-election": unclean_election,
    "zombie-replica": zombie_replica,
    "stale-metadata": stale_metadata,
    "leader-bounce": leader_bounce,
    "transactions": transactions,
    "random": random_faults,
}
DEFAULT_PARTITIONS = {"unclean-election": 3}


def build_scenario(name: str, *, seed: int = 0, partitions: int | None = None, steps: int | None = None) -> Scenario:
    try:
        make = SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}") from None
    n = partitions if partitions is not None else DEFAULT_PARTITIONS.get(name, 1)
    if n < 1:
        raise ValueError("partitions must be at least 1")
    scenario = random_faults(seed, n, steps) if name == "random" and steps is not None else make(seed, n)
    return scenario if steps is None else replace(scenario, steps=steps)


def run_scenario(
    name: str,
    *,
    seed: int = 0,
    protocol: EpochProtocol = "kip-320",
    steps: int | None = None,
    partitions: int | None = None,
    log_dir: str | Path | None = None,
    overwrite: bool = False,
) -> SimulationResult:
    """Run a named scenario. With `log_dir`, every broker keeps its Kafka log dir there (`broker-<id>/`);
    existing `broker-<id>/` dirs are an error unless `overwrite` (then they are deleted first)."""
    scenario = build_scenario(name, seed=seed, partitions=partitions, steps=steps)
    return run(scenario, seed=seed, protocol=protocol, log_dir=log_dir, overwrite=overwrite)


def run(
    scenario: Scenario, *, seed: int, protocol: EpochProtocol, log_dir: str | Path | None = None,
    overwrite: bool = False,
) -> SimulationResult:
    """Run `scenario`. With `log_dir`, brokers keep their logs on disk there (`broker-<id>/`, recovered
    from disk on restart) and the root files Kafka keeps (meta.properties, checkpoints) are written at the end."""
    config = scenario.config
    if log_dir is not None:
        root = Path(log_dir)
        dirs_wanted = (root / f"broker-{b}" for b in range(1, config.brokers + 1))
        taken = [p for p in dirs_wanted if p.exists() and any(p.iterdir())]
        if taken and not overwrite:
            raise FileExistsError(f"log dir not empty: {taken[0]} (choose a new --log-dir)")
        for path in taken:
            shutil.rmtree(path)
        config = replace(config, data_dir=str(root))
    cluster = Cluster(config, seed, protocol, scenario.schedule)
    cluster.run(scenario.steps)
    if scenario.check_progress and scenario.settled():
        cluster.checker.check_progress()
    dirs: dict[int, Path] = {}
    if log_dir is not None:
        topic_ids = {config.topic: topic_id(config.topic)}
        for broker_id in cluster.broker_ids:
            dirs[broker_id] = write_log_dir(Path(log_dir) / f"broker-{broker_id}", broker_id,
                                            cluster.logs_of(broker_id), topic_ids=topic_ids)
    return SimulationResult(
        scenario=scenario.name,
        seed=seed,
        protocol=protocol,
        steps=scenario.steps,
        violations=list(cluster.checker.violations),
        events=list(cluster.timeline.events),
        consumed=[r for c in cluster.consumers for r in c.consumed],
        produced=[r for p in cluster.producers for r in p.acked],
        log_dirs=dirs,
        cluster=cluster,
    )

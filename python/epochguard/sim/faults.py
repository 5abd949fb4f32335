"""Faults and fault schedules: what goes wrong, and at which step.

Each fault is a small frozen dataclass with `apply(cluster)`; a schedule is a list of `(step, fault)`.
`random_schedule` draws one from a seed (used by the `random` scenario and the hypothesis tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from epochguard.sim.clock import SeededRandom
from epochguard.sim.controller import CONTROLLER
from epochguard.sim.network import LinkFault, broker_node
from epochguard.types import TopicPartition

if TYPE_CHECKING:
    from epochguard.sim.view import FaultTarget


class Fault(Protocol):
    def apply(self, cluster: FaultTarget) -> None: ...
    def describe(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Crash:
    """The broker process dies: in-memory state and connections gone, its log dirs stay on disk."""

    broker: int

    def apply(self, cluster: FaultTarget) -> None:
        cluster.crash(self.broker)

    def describe(self) -> str:
        return f"crash broker {self.broker}"


@dataclass(frozen=True, slots=True)
class Restart:
    """A crashed broker starts again from its log dirs and registers with the controller."""

    broker: int

    def apply(self, cluster: FaultTarget) -> None:
        cluster.restart(self.broker)

    def describe(self) -> str:
        return f"restart broker {self.broker}"


@dataclass(frozen=True, slots=True)
class ConsumerRestart:
    """A consumer process restarts: it resumes from its committed offsets (and their leader epochs)."""

    consumer: int = 0

    def apply(self, cluster: FaultTarget) -> None:
        if self.consumer < len(cluster.consumers):
            cluster.consumers[self.consumer].restart()

    def describe(self) -> str:
        return f"restart consumer-{self.consumer}"


@dataclass(frozen=True, slots=True)
class Zombie:
    """Cut the broker off from the controller (KAFKA-6880): it is fenced, hears of no new epoch, and
    keeps fetching and serving on what it last knew. Heals after `duration_ms` (None = never)."""

    broker: int
    duration_ms: int | None = None

    def apply(self, cluster: FaultTarget) -> None:
        until = None if self.duration_ms is None else cluster.clock.now_ms + self.duration_ms
        cluster.network.cut(CONTROLLER, broker_node(self.broker), until_ms=until)

    def describe(self) -> str:
        span = "" if self.duration_ms is None else f" for {self.duration_ms} ms"
        return f"broker {self.broker} cut off from the controller{span} (zombie)"


@dataclass(frozen=True, slots=True)
class StaleMetadata:
    """The broker applies the controller's metadata updates `lag_ms` late (serves stale metadata)."""

    broker: int
    lag_ms: int

    def apply(self, cluster: FaultTarget) -> None:
        cluster.broker(self.broker).metadata_lag_ms = self.lag_ms

    def describe(self) -> str:
        return f"broker {self.broker} serves metadata {self.lag_ms} ms late"


@dataclass(frozen=True, slots=True)
class LinkDelay:
    """Requests and responses from `src` to `dst` take `delay_ms` longer, or are dropped with `drop_rate`."""

    src: str
    dst: str
    delay_ms: int = 0
    drop_rate: float = 0.0
    duration_ms: int | None = None

    def apply(self, cluster: FaultTarget) -> None:
        if not self.delay_ms and not self.drop_rate:
            cluster.network.heal(self.src, self.dst)
            return
        until = None if self.duration_ms is None else cluster.clock.now_ms + self.duration_ms
        cluster.network.set_fault(self.src, self.dst, LinkFault(self.delay_ms, self.drop_rate, until))

    def describe(self) -> str:
        if not self.delay_ms and not self.drop_rate:
            return f"link {self.src} -> {self.dst} back to normal"
        what = f"+{self.delay_ms} ms" if self.delay_ms else ""
        if self.drop_rate:
            what += f"{' ' if what else ''}drop {self.drop_rate:.0%}"
        span = "" if self.duration_ms is None else f" for {self.duration_ms} ms"
        return f"link {self.src} -> {self.dst}: {what}{span}"


@dataclass(frozen=True, slots=True)
class Isolate:
    """Cut a broker off from the other brokers (not from the controller or clients) for a while:
    its followers fall out of sync, or it falls out of its leaders' ISRs."""

    broker: int
    duration_ms: int | None = None

    def apply(self, cluster: FaultTarget) -> None:
        until = None if self.duration_ms is None else cluster.clock.now_ms + self.duration_ms
        for other in cluster.broker_ids:
            if other != self.broker:
                cluster.network.cut(broker_node(self.broker), broker_node(other), until_ms=until)

    def describe(self) -> str:
        span = "" if self.duration_ms is None else f" for {self.duration_ms} ms"
        return f"broker {self.broker} cut off from the other brokers{span}"


@dataclass(frozen=True, slots=True)
class Heal:
    """Remove every network fault touching `node` (a broker id or a node name)."""

    node: str

    def apply(self, cluster: FaultTarget) -> None:
        cluster.network.heal_node(self.node)

    def describe(self) -> str:
        return f"heal every link of {self.node}"


@dataclass(frozen=True, slots=True)
class PreferredElection:
    """Controlled move of a partition's leadership to an in-sync broker (a clean election)."""

    tp: TopicPartition
    broker: int

    def apply(self, cluster: FaultTarget) -> None:
        cluster.controller.elect_preferred(self.tp, self.broker)

    def describe(self) -> str:
        return f"move leadership of {self.tp} to broker {self.broker}"


@dataclass(frozen=True, slots=True)
class DeleteRecords:
    """An admin's DeleteRecords (KIP-107), or retention, on the partition's leader: its log start moves up to
    `offset` (-1: its high watermark, as `DeleteRecordsRequest.HIGH_WATERMARK`); the followers follow from
    the leader's fetch answers. Nothing happens while the partition has no live leader."""

    tp: TopicPartition
    offset: int = -1

    def apply(self, cluster: FaultTarget) -> None:
        leader = cluster.controller.state(self.tp).leader
        broker = cluster.broker(leader) if leader in cluster.broker_ids else None
        partition = None if broker is None or not broker.alive else broker.manager.partitions.get(self.tp)
        if partition is not None:
            partition.delete_records_on_leader(self.offset)

    def describe(self) -> str:
        to = "its high watermark" if self.offset == -1 else str(self.offset)
        return f"delete the records of {self.tp} below {to} on its leader"


@dataclass(frozen=True, slots=True)
class ElectUnclean:
    """An ElectLeaders request of type UNCLEAN for one leaderless partition (Kafka's admin
    `electLeaders(ElectionType.UNCLEAN, ...)`), whatever `unclean.leader.election.enable` says."""

    tp: TopicPartition

    def apply(self, cluster: FaultTarget) -> None:
        cluster.controller.elect_unclean(self.tp)

    def describe(self) -> str:
        return f"ElectLeaders UNCLEAN for {self.tp}"


@dataclass(frozen=True, slots=True)
class UncleanElections:
    """Turn `unclean.leader.election.enable` on or off."""

    enabled: bool = True

    def apply(self, cluster: FaultTarget) -> None:
        cluster.controller.unclean_leader_election = self.enabled

    def describe(self) -> str:
        return f"unclean leader election {'enabled' if self.enabled else 'disabled'}"


Schedule = list[tuple[int, Fault]]


def random_schedule(
    rng: SeededRandom,
    *,
    steps: int,
    brokers: tuple[int, ...],
    topic_partitions: tuple[TopicPartition, ...],
    clients: tuple[str, ...] = (),
    faults: int | None = None,
    unclean: bool = True,
    tick_ms: int = 10,
) -> Schedule:
    """A random mix of every fault kind over `steps`; crashed brokers come back, cuts heal.

    Faults start in the first 3/5 of the run and last at most 1/6 of it, so the cluster has time to
    settle before the end (the invariants see the recovery, and the consumers must catch up).
    """
    count = faults if faults is not None else max(1, steps // 40)
    busy_until = max(1, steps * 3 // 5)
    schedule: Schedule = []
    down: dict[int, int] = {}  # broker -> step it comes back
    for _ in range(count):
        step = rng.randint(1, busy_until)
        broker = rng.choice(brokers)
        kind = rng.choice(("crash", "zombie", "stale", "delay", "isolate", "preferred", "unclean", "consumer"))
        span = rng.randint(5, max(6, steps // 6))
        if kind == "crash":
            if down.get(broker, -1) >= step:
                continue
            schedule.append((step, Crash(broker)))
            schedule.append((step + span, Restart(broker)))
            down[broker] = step + span
        elif kind == "zombie":
            schedule.append((step, Zombie(broker, duration_ms=span * tick_ms)))
        elif kind == "stale":
            schedule.append((step, StaleMetadata(broker, lag_ms=rng.randint(20, 200))))
            schedule.append((step + span, StaleMetadata(broker, lag_ms=0)))
        elif kind == "delay":
            peers = [broker_node(b) for b in brokers if b != broker] + list(clients)
            src, dst = broker_node(broker), rng.choice(peers)
            if rng.random() < 0.5:
                src, dst = dst, src
            schedule.append((step, LinkDelay(src, dst, delay_ms=rng.randint(5, 80),
                                              drop_rate=rng.choice((0.0, 0.2, 0.5, 1.0)), duration_ms=span * tick_ms)))
        elif kind == "isolate":
            schedule.append((step, Isolate(broker, duration_ms=span * tick_ms)))
        elif kind == "preferred":
            schedule.append((step, PreferredElection(rng.choice(topic_partitions), broker)))
        elif kind == "unclean" and unclean:
            schedule.append((step, UncleanElections(True)))
        elif kind == "consumer":
            schedule.append((step, ConsumerRestart(0)))
    schedule.sort(key=lambda item: item[0])
    return schedule

"""The simulated cluster: brokers, controller, clients and network, advanced one step at a time.

A step advances the virtual clock by `tick_ms`, applies the faults scheduled for it, delivers every
message that has arrived (in arrival order), lets the controller, brokers and clients act (in a fixed
order), then publishes `StepEnded`, on which the subscribed invariant checker runs. Actors get a narrow
`ActorContext` (clock, network, config, an event sink), not the cluster. With the same seed, every run
is identical.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from epochguard.protocol.messages import FetchResponse
from epochguard.sim.broker import Broker
from epochguard.sim.clock import SeededRandom, VirtualClock
from epochguard.sim.config import ClusterConfig
from epochguard.sim.consumer import Consumer
from epochguard.sim.context import ActorContext
from epochguard.sim.controller import CONTROLLER, Controller
from epochguard.sim.coordinator import COORDINATOR, CoordinatorNode
from epochguard.sim.events import EventSink, StepEnded
from epochguard.sim.faults import Fault, Schedule
from epochguard.sim.invariants import InvariantChecker
from epochguard.sim.monitor import OffsetMonitor
from epochguard.sim.network import Actor, Disconnected, Network, broker_node
from epochguard.sim.producer import Producer
from epochguard.sim.storage import SimLog
from epochguard.sim.timeline import Timeline
from epochguard.types import EpochProtocol, TopicPartition

__all__ = ["Cluster", "ClusterConfig"]

# Fetches of one follower in one `replicate_at_once`: the one the append completes, the one reporting
# its new end, and room for a truncation (a diverging epoch) or an answer cut at the fetch size.
_AT_ONCE_ROUNDS = 4


@dataclass
class Cluster:
    config: ClusterConfig
    seed: int
    protocol: EpochProtocol = "kip-320"
    schedule: Schedule = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.protocol not in ("kip-320", "pre-kip-320"):
            raise ValueError(f"unknown protocol {self.protocol!r} (kip-320 or pre-kip-320)")
        cfg = self.config
        self.rng = SeededRandom(self.seed)
        self.clock = VirtualClock()
        self.timeline = Timeline()
        self.network = Network(self.clock, self.rng.fork("network"), cfg.base_delay_ms, cfg.jitter_ms)
        assignment = cfg.assignment()
        # The simulated clients and the checker work on the scenario's topic; other topics in the
        # assignment (`epochguard serve`'s `input`) are hosted for outside clients.
        self.topic_partitions: tuple[TopicPartition, ...] = tuple(
            sorted(tp for tp in assignment if tp.topic == cfg.topic))
        self.broker_ids: tuple[int, ...] = tuple(range(1, cfg.brokers + 1))
        self.controller = Controller(self.network, self.timeline, assignment,
                                     unclean_leader_election=cfg.unclean_leader_election,
                                     session_timeout_ms=cfg.session_timeout_ms)
        # Actors get a narrow context; the checker hears what they publish.
        self.events = EventSink(self.timeline)
        ctx = ActorContext(self.clock, self.network, cfg, self.protocol, self.events, self.broker_ids,
                           self.topic_partitions)
        self.checker = InvariantChecker(self)
        self.checker.subscribe(self.events)
        self.brokers: dict[int, Broker] = {
            b: Broker(b, ctx, [tp for tp, replicas in assignment.items() if b in replicas]) for b in self.broker_ids
        }
        self.producers = [
            Producer(f"producer-{i}", ctx, acks=acks, batch_size=cfg.producer_batch_size,
                     interval_ms=cfg.producer_interval_ms,
                     producer_id=1000 + i if i < cfg.transactional_producers else None, abort_every=cfg.abort_every)
            for i, acks in enumerate(cfg.producers)
        ]
        self.consumers = [Consumer(f"consumer-{i}", ctx, read_committed=i < cfg.read_committed_consumers)
                          for i in range(cfg.consumers)]
        self.monitors = [OffsetMonitor("monitor", ctx)] if cfg.monitor else []
        named: list[Producer | Consumer | OffsetMonitor] = [*self.producers, *self.consumers, *self.monitors]
        self.clients: list[Actor] = list(named)
        self.coordinator = CoordinatorNode(self.network)
        self._nodes: dict[str, Actor] = {CONTROLLER: self.controller, COORDINATOR: self.coordinator,
                                         **{b.node: b for b in self.brokers.values()},
                                         **{c.name: c for c in named}}
        self._faults: dict[int, list[Fault]] = {}
        for step, fault in self.schedule:
            self._faults.setdefault(step, []).append(fault)
        self.timeline.record("start", "cluster", f"{cfg.brokers} brokers, {cfg.partitions} partition(s) of "
                             f"{cfg.topic!r}, protocol {self.protocol}, seed {self.seed}",
                             protocol=self.protocol, seed=self.seed)

    # --- queries used by faults, clients and the checker -----------------------------------------
    def broker(self, broker_id: int) -> Broker:
        return self.brokers[broker_id]

    def log(self, broker_id: int, tp: TopicPartition) -> SimLog:
        return self.brokers[broker_id].logs[tp]

    def acting_leader(self, tp: TopicPartition) -> int | None:
        """The controller's leader for `tp`, once that broker is up and has taken the leadership."""
        state = self.controller.state(tp)
        if state.leader < 0:
            return None
        broker = self.brokers[state.leader]
        return state.leader if broker.alive and broker.leader_epoch(tp) == state.leader_epoch else None

    def in_current_epoch(self, tp: TopicPartition, broker_id: int) -> bool:
        """`broker_id` serves `tp` as the current leader epoch has it: the acting leader, or one of its
        followers (which serve consumers' Fetch v11+ too, KIP-392) once its log holds the current epoch (it
        truncated first); not a zombie on an older epoch, nor a follower still holding a zombie's records."""
        state = self.controller.state(tp)
        if state.leader < 0 or self.acting_leader(tp) is None:
            return False
        if broker_id == state.leader:
            return True
        broker = self.brokers.get(broker_id)
        partition = None if broker is None or not broker.alive else broker.manager.partitions.get(tp)
        return (partition is not None and partition.leader_epoch == state.leader_epoch
                and partition.log.latest_epoch == state.leader_epoch)

    # --- faults ----------------------------------------------------------------------------------
    def crash(self, broker_id: int) -> None:
        self.brokers[broker_id].crash()
        self.network.purge(broker_node(broker_id))

    def restart(self, broker_id: int) -> None:
        if self.brokers[broker_id].alive:  # a bounce: the old process dies first
            self.crash(broker_id)
        self.brokers[broker_id].restart()

    # --- replication at once (epochguard serve) --------------------------------------------------
    def replicate_at_once(self, leader_id: int, tps: Iterable[TopicPartition]) -> None:
        """The followers of `leader_id` fetch what it just appended to `tps` now, not at their next step.

        Kafka parks a follower's fetch that found nothing in the leader's purgatory (`DelayedFetch`) and
        an append completes it: the follower appends, and its next fetch reports its new end, which moves
        the high watermark and completes the acks=all produces waiting for it (`DelayedProduce`). Only
        what the regular path could also do now is done: the leader is the controller's acting leader,
        both processes are up, no fault (cut, drop, delay) is on the link between them, and the follower
        fetches from that leader in that epoch and is not backing off; each fetch goes through the same
        state machines (`ReplicaManager.handle`, `ReplicaFetcher.on_fetch_at_once`). No virtual time
        passes and no randomness is drawn for it. `epochguard serve` calls this after a client's append;
        the simulator's own traffic keeps its network delays."""
        leader = self.brokers[leader_id]
        if not leader.alive:
            return
        now = self.clock.now_ms
        for tp in tps:
            partition = leader.manager.partitions.get(tp)
            if partition is None or self.acting_leader(tp) != leader_id:
                continue
            for follower_id in partition.assignment:
                follower = self.brokers.get(follower_id)
                if (follower_id == leader_id or follower is None or not follower.alive
                        or not self.network.link_clear(leader.node, follower.node)):
                    continue
                fetcher = follower.manager.fetcher
                for _ in range(_AT_ONCE_ROUNDS):
                    request = fetcher.fetch_at_once(tp, leader_id, partition.leader_epoch, now)
                    if request is None:
                        break
                    offset = request.partitions[0].fetch_offset
                    response = leader.manager.handle(follower_id, request, now)
                    assert isinstance(response, FetchResponse)  # a Fetch is always answered at once
                    fetcher.on_fetch_at_once(leader_id, request, response, now)
                    if offset >= partition.log.log_end_offset or fetcher.states[tp].fetch_offset == offset:
                        break  # this fetch reported the leader's end, or moved nothing (an error)
        leader.deliver_delayed_responses()

    # --- running ---------------------------------------------------------------------------------
    def step(self) -> None:
        self.clock.advance(self.config.tick_ms)
        self.timeline.step += 1
        self.timeline.time_ms = self.clock.now_ms
        for fault in self._faults.pop(self.timeline.step, ()):
            self.timeline.record("fault", "cluster", fault.describe(), fault=type(fault).__name__)
            fault.apply(self)
        for env in self.network.due():
            node = self._nodes.get(env.dst)
            if isinstance(node, Broker) and not node.alive:
                if not env.is_response:
                    self.network.reply(env, Disconnected())
            elif node is not None:
                node.receive(env)
        self.controller.tick()
        for broker in self.brokers.values():
            broker.tick()
        for client in self.clients:
            client.tick()
        self.events.publish(StepEnded(self.timeline.step))

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    def logs_of(self, broker_id: int) -> Iterable[SimLog]:
        return self.brokers[broker_id].logs.values()

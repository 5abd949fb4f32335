"""The controller: broker liveness, leader elections, epoch bumps, ISR commits, metadata pushes.

A small KRaft-like controller. Brokers register and heartbeat; a broker whose heartbeats stop for
`session_timeout_ms` is fenced, which moves its leaderships (leader epoch + 1) and drops it from every
ISR (partition epoch + 1). The controller only talks to brokers it believes alive, so a broker cut off
from it (a zombie, KAFKA-6880) keeps running on its last instructions and never hears of newer epochs.

Elections: clean = first replica (assignment order) in ISR and alive; unclean (when enabled) = first
alive replica, with the ISR reset to the new leader alone. With no candidate the partition goes
offline (leader -1, epoch + 1) and keeps its last ISR, so its last leader is elected cleanly when it
comes back, as in Kafka.

ISR changes come from leaders (AlterPartition); the controller commits any proposal made by the
current leader for the current leader and partition epochs and the assigned replicas, like the
ZooKeeper-era controller of KAFKA-6880: whether a returning replica is fit to rejoin is for the
protocol (the leader's epoch fencing) to decide, and that is what the simulator tests.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from epochguard.errors import Errors
from epochguard.protocol.messages import AlterPartitionRequest, AlterPartitionResponse, LeaderAndIsrPartitionState
from epochguard.sim.network import Envelope, Network, broker_node
from epochguard.sim.timeline import Timeline
from epochguard.storage.logdir import kafka_uuid
from epochguard.types import TopicPartition

CONTROLLER = "controller"


def topic_id(topic: str) -> str:
    """The id the controller gives a simulated topic: the same in every run, as Metadata answers and
    `partition.metadata` files show."""
    return kafka_uuid(uuid.uuid5(uuid.NAMESPACE_URL, f"https://epochguard/sim/{topic}"))


# --- controller <-> broker messages (sim-only envelopes around the shared message types) ---------
@dataclass(frozen=True, slots=True)
class BrokerHeartbeat:
    broker_id: int
    broker_epoch: int  # -1 = asking to register


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResponse:
    broker_epoch: int
    fenced: bool  # the controller does not know this broker epoch: register again


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """New leadership/ISR for partitions hosted by the receiving broker."""

    partitions: tuple[LeaderAndIsrPartitionState, ...]


@dataclass(frozen=True, slots=True)
class UpdateMetadata:
    """The cluster view a broker serves to clients' Metadata requests."""

    partitions: tuple[LeaderAndIsrPartitionState, ...]
    alive_brokers: tuple[int, ...]
    broker_epochs: tuple[tuple[int, int], ...] = ()  # (broker, registered epoch) of the alive brokers


@dataclass(frozen=True, slots=True)
class Election:
    """A leader change, kept for the invariants (an unclean election excuses some regressions)."""

    step: int
    tp: TopicPartition
    leader: int
    leader_epoch: int
    clean: bool


class Controller:
    def __init__(
        self,
        network: Network,
        timeline: Timeline,
        assignment: dict[TopicPartition, tuple[int, ...]],
        *,
        unclean_leader_election: bool = False,
        session_timeout_ms: int = 60,
    ) -> None:
        self.network = network
        self.timeline = timeline
        self.unclean_leader_election = unclean_leader_election
        self.session_timeout_ms = session_timeout_ms
        self.partitions: dict[TopicPartition, LeaderAndIsrPartitionState] = {
            # A new topic: every replica in sync, no leader until the preferred one registers (epoch 0).
            tp: LeaderAndIsrPartitionState(tp.topic, tp.partition, -1, -1, replicas, replicas, 0)
            for tp, replicas in sorted(assignment.items())
        }
        self.broker_epochs: dict[int, int] = {}  # registered (unfenced) brokers
        self.last_heartbeat: dict[int, int] = {}
        self.elections: list[Election] = []
        self._next_broker_epoch = 100
        self._started = False
        self.on_change: Callable[[LeaderAndIsrPartitionState], None] | None = None

    # --- queries ---------------------------------------------------------------------------------
    @property
    def alive(self) -> set[int]:
        return set(self.broker_epochs)

    def state(self, tp: TopicPartition) -> LeaderAndIsrPartitionState:
        return self.partitions[tp]

    def unclean_after_epoch(self, tp: TopicPartition, epoch: int) -> bool:
        """Whether an unclean election of `tp` started an epoch newer than `epoch`: what was written or
        seen in `epoch` may be gone (even if a zombie learned of the election late)."""
        return any(e.tp == tp and not e.clean and e.leader_epoch > epoch for e in self.elections)

    # --- messages --------------------------------------------------------------------------------
    def receive(self, env: Envelope) -> None:
        msg = env.payload
        if isinstance(msg, BrokerHeartbeat):
            self._on_heartbeat(env, msg)
        elif isinstance(msg, AlterPartitionRequest):
            self.network.reply(env, self._on_alter_partition(msg))

    def tick(self) -> None:
        now = self.network.clock.now_ms
        for broker in sorted(self.broker_epochs):
            if now - self.last_heartbeat.get(broker, now) > self.session_timeout_ms:
                self.fence(broker, reason="session timed out")

    def _on_heartbeat(self, env: Envelope, hb: BrokerHeartbeat) -> None:
        now = self.network.clock.now_ms
        known = self.broker_epochs.get(hb.broker_id)
        if hb.broker_epoch < 0:
            self._register(hb.broker_id)
            self.last_heartbeat[hb.broker_id] = now
            self.network.reply(env, BrokerHeartbeatResponse(self.broker_epochs[hb.broker_id], fenced=False))
        elif known == hb.broker_epoch:
            self.last_heartbeat[hb.broker_id] = now
            self.network.reply(env, BrokerHeartbeatResponse(known, fenced=False))
        else:  # a fenced broker's old session: it must register again
            self.network.reply(env, BrokerHeartbeatResponse(hb.broker_epoch, fenced=True))

    def _register(self, broker: int) -> None:
        if broker in self.broker_epochs:  # a new incarnation: the old one is fenced first (KRaft)
            self.fence(broker, reason="registered again (restarted)")
        self._next_broker_epoch += 1
        self.broker_epochs[broker] = self._next_broker_epoch
        self.timeline.record("register", CONTROLLER, f"broker {broker} registered (epoch {self._next_broker_epoch})",
                             broker=broker, broker_epoch=self._next_broker_epoch)
        changed = []
        for tp, st in self.partitions.items():
            if broker in st.replicas and st.leader < 0 and (st.leader_epoch >= 0 or broker == st.replicas[0]):
                new = self._elect(tp, reason=f"broker {broker} registered")
                if new is not None:
                    changed.append(new)
        self._push(changed)
        # The returning broker needs the full state of everything it hosts, changed or not.
        mine = tuple(st for st in self.partitions.values() if broker in st.replicas)
        self.network.send(CONTROLLER, broker_node(broker), LeaderAndIsr(mine))
        self._push_metadata()

    # --- faults the controller reacts to ---------------------------------------------------------
    def fence(self, broker: int, *, reason: str) -> None:
        """Declare `broker` dead: move its leaderships, drop it from every ISR."""
        if broker not in self.broker_epochs:
            return
        del self.broker_epochs[broker]
        self.last_heartbeat.pop(broker, None)
        self.timeline.record("fence", CONTROLLER, f"broker {broker} fenced: {reason}", broker=broker)
        changed = []
        for tp, st in self.partitions.items():
            if st.leader == broker:
                new = self._elect(tp, reason=f"leader {broker} fenced")
                if new is not None:
                    changed.append(new)
            elif broker in st.isr and len(st.isr) > 1:
                new = replace(st, isr=tuple(b for b in st.isr if b != broker), partition_epoch=st.partition_epoch + 1)
                self._commit(new, f"ISR {list(new.isr)} (broker {broker} fenced)")
                changed.append(new)
        self._push(changed)

    def elect_preferred(self, tp: TopicPartition, broker: int) -> bool:
        """Move leadership of `tp` to `broker` if it is alive and in the ISR (a clean, controlled move)."""
        st = self.partitions[tp]
        if broker == st.leader or broker not in st.isr or broker not in self.broker_epochs:
            return False
        new = replace(st, leader=broker, leader_epoch=st.leader_epoch + 1, partition_epoch=st.partition_epoch + 1)
        self._commit(new, f"leader {broker} epoch {new.leader_epoch}, clean election (preferred leader)",
                     election="clean")
        self.elections.append(Election(self.timeline.step, tp, broker, new.leader_epoch, clean=True))
        self._push([new])
        return True

    def elect_unclean(self, tp: TopicPartition) -> bool:
        """An ElectLeaders request of type UNCLEAN for `tp` (KIP-460), as Kafka's
        `ReplicationControlManager.electLeader`: nothing to do (ELECTION_NOT_NEEDED) while the partition
        has a leader; else the first alive ISR member in assignment order (a clean election), else the
        first alive replica with the ISR reset to it. False when nothing was elected."""
        st = self.partitions[tp]
        if st.leader >= 0:
            return False
        alive = self.broker_epochs
        clean = [b for b in st.replicas if b in st.isr and b in alive]
        unclean = [b for b in st.replicas if b in alive]
        if clean:
            leader, isr, is_clean = clean[0], tuple(b for b in st.isr if b in alive), True
        elif unclean:
            leader, isr, is_clean = unclean[0], (unclean[0],), False
        else:
            return False
        new = replace(st, leader=leader, leader_epoch=st.leader_epoch + 1, isr=isr,
                      partition_epoch=st.partition_epoch + 1)
        kind = "clean" if is_clean else "UNCLEAN"
        self._commit(new, f"leader {leader} epoch {new.leader_epoch}, {kind} election (ElectLeaders UNCLEAN)",
                     election=kind.lower())
        self.elections.append(Election(self.timeline.step, tp, leader, new.leader_epoch, is_clean))
        self._push([new])
        return True

    # --- elections -------------------------------------------------------------------------------
    def _elect(self, tp: TopicPartition, *, reason: str) -> LeaderAndIsrPartitionState | None:
        st = self.partitions[tp]
        alive = self.broker_epochs
        clean = [b for b in st.replicas if b in st.isr and b in alive and b != st.leader]
        if clean:
            # A new topic starts with every replica in sync; later the fenced ones are already out.
            isr = st.isr if st.leader_epoch < 0 else tuple(b for b in st.isr if b in alive)
            leader, is_clean = clean[0], True
        else:
            unclean = [b for b in st.replicas if b in alive and b != st.leader]
            if self.unclean_leader_election and unclean:
                leader, isr, is_clean = unclean[0], (unclean[0],), False
            elif st.leader < 0:
                return None  # still offline: nothing to change
            else:
                leader, isr, is_clean = -1, st.isr, True
        new = replace(st, leader=leader, leader_epoch=st.leader_epoch + 1, isr=isr,
                      partition_epoch=st.partition_epoch + 1)
        kind = "clean" if is_clean else "UNCLEAN"
        what = (f"offline ({reason})" if leader < 0
                else f"leader {leader} epoch {new.leader_epoch}, {kind} election ({reason})")
        self._commit(new, what, election=kind.lower() if leader >= 0 else "offline")
        if leader >= 0:
            self.elections.append(Election(self.timeline.step, tp, leader, new.leader_epoch, is_clean))
        return new

    def _commit(self, new: LeaderAndIsrPartitionState, what: str, election: str | None = None) -> None:
        self.partitions[new.tp] = new
        detail = {"partition": str(new.tp), "leader": new.leader, "leader_epoch": new.leader_epoch,
                  "isr": list(new.isr), "partition_epoch": new.partition_epoch}
        if election is not None:
            detail["election"] = election
        self.timeline.record("election" if election else "isr", CONTROLLER, f"{new.tp}: {what}", **detail)
        if self.on_change is not None:
            self.on_change(new)

    # --- ISR changes -----------------------------------------------------------------------------
    def _on_alter_partition(self, req: AlterPartitionRequest) -> AlterPartitionResponse:
        st = self.partitions.get(req.tp)
        if st is None:
            return AlterPartitionResponse(req.topic, req.partition_index, Errors.UNKNOWN_TOPIC_OR_PARTITION)
        if (req.broker_id != st.leader or req.leader_epoch != st.leader_epoch
                or self.broker_epochs.get(req.broker_id) != req.broker_epoch):
            return AlterPartitionResponse(req.topic, req.partition_index, Errors.FENCED_LEADER_EPOCH,
                                          st.leader, st.leader_epoch, st.isr, st.partition_epoch)
        if req.partition_epoch != st.partition_epoch or not set(req.new_isr) <= set(st.replicas) \
                or st.leader not in req.new_isr:
            # Kafka answers INVALID_UPDATE_VERSION (108) here; the leader re-reads the state either way.
            return AlterPartitionResponse(req.topic, req.partition_index, Errors.for_code(108),
                                          st.leader, st.leader_epoch, st.isr, st.partition_epoch)
        new = replace(st, isr=tuple(sorted(req.new_isr, key=st.replicas.index)), partition_epoch=st.partition_epoch + 1)
        if new.isr != st.isr:
            self._commit(new, f"ISR {list(new.isr)} (requested by leader {req.broker_id})")
            self._push_metadata()  # the leader learns the result from the response
        return AlterPartitionResponse(req.topic, req.partition_index, Errors.NONE,
                                      new.leader, new.leader_epoch, new.isr, new.partition_epoch)

    # --- pushes ----------------------------------------------------------------------------------
    def _push(self, changed: list[LeaderAndIsrPartitionState]) -> None:
        """LeaderAndIsr to every alive replica of each changed partition, then metadata to every broker."""
        if not changed:
            return
        for broker in sorted(self.broker_epochs):
            mine = tuple(st for st in changed if broker in st.replicas)
            if mine:
                self.network.send(CONTROLLER, broker_node(broker), LeaderAndIsr(mine))
        self._push_metadata()

    def _push_metadata(self) -> None:
        update = UpdateMetadata(tuple(self.partitions.values()), tuple(sorted(self.broker_epochs)),
                                tuple(sorted(self.broker_epochs.items())))
        for broker in sorted(self.broker_epochs):
            self.network.send(CONTROLLER, broker_node(broker), update)

from __future__ import annotations

from epochguard.errors import Errors
from epochguard.protocol.messages import AlterPartitionRequest
from epochguard.sim.clock import SeededRandom, VirtualClock
from epochguard.sim.controller import CONTROLLER, BrokerHeartbeat, BrokerHeartbeatResponse, Controller, LeaderAndIsr
from epochguard.sim.network import Network
from epochguard.sim.timeline import Timeline
from epochguard.types import TopicPartition

TP = TopicPartition("t", 0)


class Harness:
    def __init__(self, unclean: bool = False) -> None:
        self.net = Network(VirtualClock(), SeededRandom(0), base_delay_ms=1, jitter_ms=0)
        self.timeline = Timeline()
        self.controller = Controller(self.net, self.timeline, {TP: (1, 2, 3)}, unclean_leader_election=unclean,
                                     session_timeout_ms=50)
        self.epochs: dict[int, int] = {}
        self.inbox: dict[str, list] = {}

    def run(self, ms: int = 5) -> None:
        for _ in range(ms):
            self.net.clock.advance(1)
            for env in self.net.due():
                if env.dst == CONTROLLER:
                    self.controller.receive(env)
                else:
                    self.inbox.setdefault(env.dst, []).append(env)
                    if isinstance(env.payload, BrokerHeartbeatResponse):
                        broker = int(env.dst.split("-")[1])
                        if env.payload.fenced:
                            self.epochs.pop(broker, None)  # register again
                        else:
                            self.epochs[broker] = env.payload.broker_epoch
            self.controller.tick()

    def heartbeat(self, broker: int) -> None:
        self.net.send(f"broker-{broker}", CONTROLLER, BrokerHeartbeat(broker, self.epochs.get(broker, -1)))
        self.run()

    def state(self):
        return self.controller.state(TP)


def test_first_election_waits_for_the_preferred_replica_and_keeps_the_full_isr() -> None:
    h = Harness()
    h.heartbeat(2)
    assert h.state().leader == -1
    h.heartbeat(1)
    assert (h.state().leader, h.state().leader_epoch, h.state().isr) == (1, 0, (1, 2, 3))
    states = [s for env in h.inbox["broker-1"] if isinstance(env.payload, LeaderAndIsr) for s in env.payload.partitions]
    assert states[-1].leader == 1


def test_clean_election_from_isr_bumps_the_epoch() -> None:
    h = Harness()
    for b in (1, 2, 3):
        h.heartbeat(b)
    h.controller.fence(1, reason="test")
    st = h.state()
    assert (st.leader, st.leader_epoch, st.isr) == (2, 1, (2, 3))
    assert [(e.leader, e.clean) for e in h.controller.elections] == [(1, True), (2, True)]


def test_no_isr_candidate_goes_offline_unless_unclean_is_enabled() -> None:
    for unclean, expected_leader in ((False, -1), (True, 2)):
        h = Harness(unclean=unclean)
        for b in (1, 2, 3):
            h.heartbeat(b)
        h.controller.fence(2, reason="test")
        h.controller.fence(1, reason="test")  # ISR was (1, 3) -> 3 elected cleanly
        h.controller.fence(3, reason="test")  # ISR (3): nobody left in sync
        h.heartbeat(2)  # told it is fenced
        h.heartbeat(2)  # 2 registers again, but it is out of sync
        st = h.state()
        assert st.leader == expected_leader
        assert h.controller.unclean_after_epoch(TP, 0) == unclean


def test_session_timeout_fences_a_silent_broker() -> None:
    h = Harness()
    for b in (1, 2, 3):
        h.heartbeat(b)
    for _ in range(10):  # 2 and 3 keep heartbeating, 1 is silent
        h.heartbeat(2)
        h.heartbeat(3)
        h.run(10)
    assert 1 not in h.controller.alive
    assert h.state().leader == 2


def test_alter_partition_needs_the_current_leader_and_partition_epoch() -> None:
    h = Harness()
    for b in (1, 2, 3):
        h.heartbeat(b)
    st = h.state()

    def ask(broker: int, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...]) -> Errors:
        h.net.send(f"broker-{broker}", CONTROLLER, AlterPartitionRequest(
            broker, h.epochs[broker], TP.topic, TP.partition, leader_epoch, isr, partition_epoch))
        h.run()
        return h.inbox[f"broker-{broker}"][-1].payload.error_code

    assert ask(2, st.leader_epoch, st.partition_epoch, (2,)) == Errors.FENCED_LEADER_EPOCH  # not the leader
    assert ask(1, st.leader_epoch, st.partition_epoch - 1, (1, 2)) != Errors.NONE  # stale partition epoch
    assert ask(1, st.leader_epoch, st.partition_epoch, (1, 2)) == Errors.NONE
    assert h.state().isr == (1, 2) and h.state().partition_epoch == st.partition_epoch + 1
    assert h.state().leader_epoch == st.leader_epoch  # an ISR change is not a new epoch


def test_a_restarted_broker_registering_again_is_fenced_first() -> None:
    h = Harness()
    for b in (1, 2, 3):
        h.heartbeat(b)
    h.epochs.pop(1)  # the new process does not know its old broker epoch
    h.heartbeat(1)
    assert h.state().leader == 2 and h.state().leader_epoch == 1


def test_elect_unclean_elects_an_out_of_sync_replica_only_when_there_is_no_leader() -> None:
    """ElectLeaders UNCLEAN (Kafka's ReplicationControlManager.electLeader), with the config off: nothing
    while a leader is there (ELECTION_NOT_NEEDED), else the first alive replica, ISR reset to it."""
    h = Harness(unclean=False)
    for b in (1, 2, 3):
        h.heartbeat(b)
    assert not h.controller.elect_unclean(TP)  # led by 1
    h.controller.fence(2, reason="test")
    h.controller.fence(3, reason="test")
    h.controller.fence(1, reason="test")  # ISR (1): offline, epoch 1
    h.heartbeat(3)
    h.heartbeat(3)  # 3 registers again, out of sync: stays offline
    assert (h.state().leader, h.state().leader_epoch, h.state().isr) == (-1, 1, (1,))
    assert h.controller.elect_unclean(TP)
    st = h.state()
    assert (st.leader, st.leader_epoch, st.isr) == (3, 2, (3,))
    assert h.controller.unclean_after_epoch(TP, 1)
    assert not h.controller.elect_unclean(TP)  # led again


def test_elect_unclean_needs_an_alive_replica() -> None:
    h = Harness(unclean=False)
    for b in (1, 2, 3):
        h.heartbeat(b)
    h.controller.fence(2, reason="test")
    h.controller.fence(3, reason="test")
    h.controller.fence(1, reason="test")
    assert not h.controller.elect_unclean(TP)  # nobody alive
    h.heartbeat(3)
    h.heartbeat(3)
    h.heartbeat(1)
    h.heartbeat(1)  # 1, the last ISR member, is back: elected cleanly on registering, nothing to force
    assert (h.state().leader, h.state().isr) == (1, (1,))
    assert not h.controller.elect_unclean(TP)
    assert not h.controller.unclean_after_epoch(TP, 0)

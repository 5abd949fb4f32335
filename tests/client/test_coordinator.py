"""The consumer's group membership (`epochguard.client.coordinator.ConsumerCoordinator`) against the
project's broker-side `ClassicGroups` (after Kafka's `ClassicGroup`), and single answers scripted after
Kafka's `ConsumerCoordinatorTest` / `AbstractCoordinatorTest`; the consumer protocol's bytes against
kafka-python's `ConsumerProtocol` classes; the range and round-robin assignors against Kafka's
`RangeAssignorTest` / `RoundRobinAssignorTest` expectations."""

from __future__ import annotations

from typing import Any

import pytest

from epochguard.broker.group.classic_group import ClassicGroups
from epochguard.client.assignors import Assignment, RangeAssignor, RoundRobinAssignor, Subscription
from epochguard.client.coordinator import ConsumerCoordinator, MemberState
from epochguard.errors import Errors, TopicAuthorizationFailedError
from epochguard.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from epochguard.types import TopicPartition

PARTITIONS = {"t": 4, "u": 3}


def tps(*pairs: tuple[str, int]) -> set[TopicPartition]:
    return {TopicPartition(t, p) for t, p in pairs}


# --- the embedded protocol and the assignors ------------------------------------------------------------
def test_subscription_and_assignment_bytes_are_kafka_pythons() -> None:
    proto = pytest.importorskip("kafka.protocol.old.consumer_protocol",
                                reason="kafka-python (dev extra) is the reference")
    sub = Subscription(("t", "u"), b"ud")
    theirs = proto.ConsumerProtocolMemberMetadata_v0(0, ["t", "u"], b"ud").encode()
    assert sub.encode() == theirs and Subscription.decode(theirs) == sub
    assignment = Assignment((TopicPartition("t", 0), TopicPartition("t", 3), TopicPartition("u", 1)), None)
    decoded = proto.ConsumerProtocolMemberAssignment_v0.decode(assignment.encode())
    assert decoded.assigned_partitions == [("t", [0, 3]), ("u", [1])]
    theirs = proto.ConsumerProtocolMemberAssignment_v0(0, [("t", [0, 3]), ("u", [1])], b"x").encode()
    assert Assignment.decode(theirs) == Assignment(assignment.partitions, b"x")
    assert Assignment.decode(b"") == Assignment(())


@pytest.mark.parametrize("data", [b"\x00", b"\x00\x00\x7f\xff\xff\xff", b"\x00\x00\x00\x00\x00\x01\x00\x05ab"])
def test_hostile_member_metadata_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        Subscription.decode(data)
    with pytest.raises(ValueError):
        Assignment.decode(data)


def test_range_assignor_as_kafka() -> None:
    # RangeAssignorTest.testTwoConsumersTwoTopicsSixPartitions: 3 partitions each, c0 gets 0-1, c1 gets 2.
    subs = {"c0": Subscription(("t1", "t2")), "c1": Subscription(("t1", "t2"))}
    plan = RangeAssignor().assign({"t1": 3, "t2": 3}, subs)
    assert plan == {"c0": [TopicPartition("t1", 0), TopicPartition("t1", 1), TopicPartition("t2", 0),
                           TopicPartition("t2", 1)],
                    "c1": [TopicPartition("t1", 2), TopicPartition("t2", 2)]}
    # testOneConsumerNonexistentTopic: nothing to assign, the member still listed.
    assert RangeAssignor().assign({}, {"c0": Subscription(("x",))}) == {"c0": []}


def test_round_robin_assignor_as_kafka() -> None:
    # RoundRobinAssignorTest.testTwoConsumersTwoTopicsSixPartitions.
    subs = {"c0": Subscription(("t1", "t2")), "c1": Subscription(("t1", "t2"))}
    plan = RoundRobinAssignor().assign({"t1": 3, "t2": 3}, subs)
    assert plan == {"c0": [TopicPartition("t1", 0), TopicPartition("t1", 2), TopicPartition("t2", 1)],
                    "c1": [TopicPartition("t1", 1), TopicPartition("t2", 0), TopicPartition("t2", 2)]}
    # testMultipleConsumersMixedTopics: t1 only for c0/c2, t2 for all.
    subs = {"c0": Subscription(("t1",)), "c1": Subscription(("t1", "t2")), "c2": Subscription(("t1",))}
    plan = RoundRobinAssignor().assign({"t1": 3, "t2": 2}, subs)
    assert plan == {"c0": [TopicPartition("t1", 0)],
                    "c1": [TopicPartition("t1", 1), TopicPartition("t2", 0), TopicPartition("t2", 1)],
                    "c2": [TopicPartition("t1", 2)]}


# --- against the broker's ClassicGroups -------------------------------------------------------------------
class Group:
    """Members and the coordinator's group state, one message at a time, in virtual time."""

    def __init__(self) -> None:
        self.groups = ClassicGroups()
        self.delayed: list[tuple[Any, Any]] = []
        self.groups.on_delayed_response = lambda request, response: self.delayed.append((request, response))
        self.members: dict[str, ConsumerCoordinator] = {}
        self.events: list[tuple[str, str, set[TopicPartition]]] = []
        self.now = 0
        self.owner: dict[int, str] = {}

    def member(self, name: str, topics: tuple[str, ...], **kw: Any) -> ConsumerCoordinator:
        c = ConsumerCoordinator(
            "g", session_timeout_ms=10_000, heartbeat_interval_ms=1_000, rebalance_timeout_ms=5_000,
            partitions_for=PARTITIONS.get,
            on_partitions_revoked=lambda s: self.events.append((name, "revoked", s)),
            on_partitions_assigned=lambda s: self.events.append((name, "assigned", s)), **kw)
        c.subscribe(topics)
        self.members[name] = c
        return c

    def run(self, ms: int, step: int = 50) -> None:
        for _ in range(ms // step):
            self.now += step
            for name, c in self.members.items():
                for request in c.poll_requests(self.now):
                    answer = self.groups.handle(request, self.now, client_id=name)
                    if answer is not None:
                        c.on_response(request, answer, self.now)
            self.groups.poll(self.now)
            while self.delayed:
                request, response = self.delayed.pop(0)
                for c in self.members.values():
                    if c.owns(request):
                        c.on_response(request, response, self.now)

    def assignments(self) -> dict[str, set[TopicPartition]]:
        return {n: set(c.assignment) for n, c in self.members.items()}


def test_two_members_join_one_generation_and_split_the_partitions_by_range() -> None:
    g = Group()
    a, b = g.member("a", ("t",)), g.member("b", ("t",))
    g.run(2_000)
    assert a.state is b.state is MemberState.STABLE and a.generation == b.generation >= 1
    assert g.assignments() == {"a": tps(("t", 0), ("t", 1)), "b": tps(("t", 2), ("t", 3))}
    assert a.generation_and_member == (a.generation, a.member_id) and a.member_id != b.member_id
    # Heartbeats keep the generation: nothing changes over ten session timeouts.
    generation = a.generation
    g.run(100_000, step=500)
    assert a.generation == b.generation == generation and g.assignments()["a"] == tps(("t", 0), ("t", 1))


def test_a_third_member_rebalances_everyone_revoking_before_and_assigning_after() -> None:
    g = Group()
    a, b = g.member("a", ("t", "u")), g.member("b", ("t", "u"), assignors=("roundrobin",))
    g.run(2_000)
    assert a.protocol == "roundrobin"  # the one protocol both support
    before = a.generation
    g.events.clear()
    c = g.member("c", ("t", "u"), assignors=("roundrobin", "range"))
    g.run(4_000)
    assert a.generation == b.generation == c.generation == before + 1
    together = set().union(*g.assignments().values())
    assert together == {TopicPartition(t, p) for t, n in PARTITIONS.items() for p in range(n)}
    assert sum(len(s) for s in g.assignments().values()) == 7
    for name in ("a", "b"):  # eager: each revoked everything it had before it was assigned anew
        kinds = [k for n, k, _ in g.events if n == name]
        assert kinds == ["revoked", "assigned"], (name, g.events)
    assert [k for n, k, _ in g.events if n == "c"] == ["assigned"]


def test_leaving_rebalances_the_rest() -> None:
    g = Group()
    a, b = g.member("a", ("t",)), g.member("b", ("t",))
    g.run(2_000)
    leave = b.leave()
    assert isinstance(leave, LeaveGroupRequest) and leave.members[0].member_id
    assert g.groups.handle(leave, g.now).error_code == Errors.NONE
    del g.members["b"]
    g.run(3_000)
    assert a.state is MemberState.STABLE and a.assignment == tps(("t", 0), ("t", 1), ("t", 2), ("t", 3))
    assert b.leave() is None and b.assignment == set()


def test_a_leader_rejoins_when_a_topic_it_could_not_see_gets_its_metadata() -> None:
    """The cause of test_subscribe_two_members_split's 1 failure in 10 under load: the JoinGroup can beat
    the first Metadata answer, and the leader assigned `u` to nobody; nothing asked again. As Kafka's
    `rejoinNeededOrPending` (assignmentSnapshot vs metadataSnapshot) the leader now rejoins."""
    known = {"t": 4}
    g = Group()
    a = g.member("a", ("t", "u"))
    a.partitions_for = known.get
    b = g.member("b", ("t", "u"))
    b.partitions_for = known.get
    g.run(2_000)
    assert set().union(*g.assignments().values()) == {TopicPartition("t", p) for p in range(4)}  # no `u`
    generation = a.generation
    g.run(5_000)
    assert a.generation == generation  # nothing changed, nothing to do: no rejoin
    known["u"] = 3  # the metadata answer arrives
    g.run(5_000)
    assert a.generation == b.generation > generation
    assert set().union(*g.assignments().values()) == {TopicPartition(t, p) for t, n in PARTITIONS.items()
                                                      for p in range(n)}
    generation = a.generation
    g.run(5_000)
    assert a.generation == generation  # settled


# --- single answers, as ConsumerCoordinatorTest scripts them ----------------------------------------------
def joined(**kw: Any) -> tuple[ConsumerCoordinator, JoinGroupRequest]:
    c = ConsumerCoordinator("g", partitions_for=PARTITIONS.get, **kw)
    c.subscribe(["t"])
    (join,) = c.poll_requests(0)
    assert isinstance(join, JoinGroupRequest) and join.member_id == "" and join.protocol_type == "consumer"
    assert [p.name for p in join.protocols] == ["range", "roundrobin"]
    assert Subscription.decode(join.protocols[0].metadata).topics == ("t",)
    return c, join


def test_normal_join_group_leader_assigns_and_follower_syncs_empty() -> None:
    c, join = joined()
    metadata = Subscription(("t",)).encode()
    c.on_response(join, JoinGroupResponse(Errors.NONE, 1, "consumer", "range", "m1", "m1",
                                          (JoinGroupMember("m1", metadata), JoinGroupMember("m2", metadata))), 1)
    (sync,) = c.poll_requests(1)
    assert isinstance(sync, SyncGroupRequest) and (sync.generation_id, sync.member_id) == (1, "m1")
    plan = {a.member_id: Assignment.decode(a.assignment).partitions for a in sync.assignments}
    assert plan == {"m1": (TopicPartition("t", 0), TopicPartition("t", 1)),
                    "m2": (TopicPartition("t", 2), TopicPartition("t", 3))}
    c.on_response(sync, SyncGroupResponse(Errors.NONE, Assignment(plan["m1"]).encode()), 2)
    assert c.state is MemberState.STABLE and c.assignment == set(plan["m1"])

    f, join = joined()
    f.on_response(join, JoinGroupResponse(Errors.NONE, 1, "consumer", "range", "m1", "m2", ()), 1)
    (sync,) = f.poll_requests(1)
    assert sync.assignments == ()


def test_member_id_required_rejoins_at_once_with_the_given_id() -> None:
    c, join = joined()
    c.on_response(join, JoinGroupResponse(Errors.MEMBER_ID_REQUIRED, member_id="given-1"), 5)
    (again,) = c.poll_requests(5)
    assert isinstance(again, JoinGroupRequest) and again.member_id == "given-1"


@pytest.mark.parametrize(("error", "member_id", "generation"), [
    (Errors.UNKNOWN_MEMBER_ID, "", 1),  # testUnknownMemberIdOnSyncGroup: the member id is reset
    (Errors.ILLEGAL_GENERATION, "m1", -1),  # testIllegalGenerationOnSyncGroup: the generation is reset
    (Errors.REBALANCE_IN_PROGRESS, "m1", 1),  # testRebalanceInProgressOnSyncGroup: rejoin, same id
])
def test_sync_group_errors_rejoin(error: Errors, member_id: str, generation: int) -> None:
    c, join = joined(retry_backoff_ms=100)
    c.on_response(join, JoinGroupResponse(Errors.NONE, 1, "consumer", "range", "m0", "m1", ()), 1)
    (sync,) = c.poll_requests(1)
    c.on_response(sync, SyncGroupResponse(error), 2)
    assert c.state is MemberState.UNJOINED and (c.member_id, c.generation) == (member_id, generation)
    wait = 0 if error == Errors.REBALANCE_IN_PROGRESS else 100  # a rebalance in progress: at once
    if wait:
        assert c.poll_requests(50) == []
    (again,) = c.poll_requests(2 + wait)
    assert isinstance(again, JoinGroupRequest) and again.member_id == member_id


def stable(**kw: Any) -> ConsumerCoordinator:
    c, join = joined(**kw)
    c.on_response(join, JoinGroupResponse(Errors.NONE, 3, "consumer", "range", "m0", "m1", ()), 1)
    (sync,) = c.poll_requests(1)
    c.on_response(sync, SyncGroupResponse(Errors.NONE, Assignment((TopicPartition("t", 1),)).encode()), 2)
    return c


@pytest.mark.parametrize(("error", "member_id", "generation"), [
    (Errors.REBALANCE_IN_PROGRESS, "m1", 3),
    (Errors.UNKNOWN_MEMBER_ID, "", -1),
    (Errors.ILLEGAL_GENERATION, "m1", -1),
])
def test_heartbeat_errors_rejoin_revoking_the_partitions(error: Errors, member_id: str, generation: int) -> None:
    revoked: list[set[TopicPartition]] = []
    c = stable(heartbeat_interval_ms=1_000, on_partitions_revoked=revoked.append)
    assert c.poll_requests(500) == []
    (hb,) = c.poll_requests(1_002)
    assert isinstance(hb, HeartbeatRequest) and (hb.generation_id, hb.member_id) == (3, "m1")
    c.on_response(hb, HeartbeatResponse(error), 1_003)
    assert (c.member_id, c.generation) == (member_id, generation)
    (join,) = c.poll_requests(1_003)
    assert isinstance(join, JoinGroupRequest) and revoked == [{TopicPartition("t", 1)}]
    assert c.generation_and_member == (-1, "")  # no commits from a member between generations


def test_a_fatal_join_error_is_kept_for_the_application_and_coordinator_errors_retry() -> None:
    c, join = joined(retry_backoff_ms=100)
    c.on_response(join, JoinGroupResponse(Errors.COORDINATOR_NOT_AVAILABLE), 1)
    assert c.errors == [] and c.poll_requests(50) == []
    (join,) = c.poll_requests(101)
    c.on_request_failed(join, 120)  # no answer: again after the back-off
    (join,) = c.poll_requests(220)
    c.on_response(join, JoinGroupResponse(Errors.TOPIC_AUTHORIZATION_FAILED), 230)
    assert len(c.errors) == 1 and isinstance(c.errors[0], TopicAuthorizationFailedError)

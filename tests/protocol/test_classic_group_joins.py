"""JoinGroup and SyncGroup of the classic group protocol at their edges, through `ClassicGroups` itself
(after Kafka's `GroupMetadataManagerTest` / `ClassicGroupTest`): member ids without a client id,
MEMBER_ID_REQUIRED from v4, v0's missing rebalance timeout, a rebalance timeout of 0, static members'
instance ids in the leader's member list, the protocol vote and its tie, SyncGroup's protocol checks and
answer, and voided SyncGroups answered once."""

from __future__ import annotations

import pytest

from epochguard.broker.group.classic_group import ClassicGroups, GroupState
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    HeartbeatRequest,
    JoinGroupProtocol,
    JoinGroupRequest,
    OffsetCommitRequest,
    SyncGroupAssignment,
    SyncGroupRequest,
)

G = "g"
RANGE = JoinGroupProtocol("range", b"range-meta")
RR = JoinGroupProtocol("roundrobin", b"rr-meta")


class Groups:
    """`ClassicGroups` with every delayed answer recorded in order."""

    def __init__(self, **kw) -> None:
        self.groups = ClassicGroups(**kw)
        self.delayed: list[tuple[object, object]] = []
        self.groups.on_delayed_response = lambda request, response: self.delayed.append((request, response))

    def answer(self, request):
        [response] = [resp for req, resp in self.delayed if req is request]
        return response

    def group(self):
        return self.groups.groups[G]


def join(member_id="", protocols=(RANGE,), session=10_000, rebalance=30_000, version=7, instance=None):
    return JoinGroupRequest(G, session, member_id, protocols=protocols, rebalance_timeout_ms=rebalance,
                            group_instance_id=instance, version=version)


def stable_member(g: Groups, client_id: str, **kw) -> str:
    """A member that joined an empty group alone and synced: the group is Stable at generation 1."""
    answer = g.groups.handle(join(version=3, **kw), 0, client_id)
    g.groups.handle(SyncGroupRequest(G, answer.generation_id, answer.member_id), 0)
    assert g.group().state is GroupState.STABLE
    return answer.member_id


def test_without_a_client_id_member_ids_are_made_from_member():
    groups = ClassicGroups()
    assert groups.handle(join(), 0).member_id == "member-1"
    assert groups.join(join(), 0).member_id == "member-2"


def test_member_id_required_from_join_v4():
    """KIP-394: from v4 a member with no id gets one with MEMBER_ID_REQUIRED; before, it joins at once."""
    assert ClassicGroups().handle(join(version=4), 0, "c").error_code == Errors.MEMBER_ID_REQUIRED
    v3 = ClassicGroups().handle(join(version=3), 0, "c")
    assert (v3.error_code, v3.generation_id, v3.member_id) == (Errors.NONE, 1, "c-1")


def test_a_refused_join_echoes_the_member_id_it_was_sent():
    groups = ClassicGroups()
    assert groups.handle(join("c-9", session=1), 0).member_id == "c-9"  # INVALID_SESSION_TIMEOUT
    refused = groups.handle(join(session=1), 0)
    assert (refused.error_code, refused.member_id) == (Errors.INVALID_SESSION_TIMEOUT, "")


def test_without_an_initial_delay_by_default_a_lone_member_is_answered_at_once():
    assert ClassicGroups().handle(join(version=3), 0, "c").generation_id == 1


def test_an_initial_delay_of_1_ms_holds_the_first_join():
    g = Groups(initial_rebalance_delay_ms=1)
    first = join(version=3)
    assert g.groups.handle(first, 0, "c") is None
    g.groups.poll(1)
    assert g.answer(first).generation_id == 1


def test_delayed_answers_nobody_listens_to_are_dropped():
    groups = ClassicGroups()
    a = groups.handle(join(version=3), 0, "a").member_id
    groups.handle(SyncGroupRequest(G, 1, a), 0)
    waiting = join(version=3)
    assert groups.handle(waiting, 0, "b") is None
    groups.poll(30_000)  # the round completes without a: b's answer goes to the default listener
    assert list(groups.groups[G].members) == ["b-2"] and groups.groups[G].generation_id == 2


def test_join_v0_takes_the_session_timeout_as_its_rebalance_timeout():
    g = Groups()
    a = stable_member(g, "a", session=6_000, rebalance=-1)
    b = join(version=0, session=20_000, rebalance=-1)
    assert g.groups.handle(b, 0, "b") is None  # waits for a, at most max(6 s, 20 s)
    for now in (5_000, 10_000, 15_000):  # a stays alive but does not rejoin
        assert g.groups.handle(HeartbeatRequest(G, 1, a), now).error_code == Errors.REBALANCE_IN_PROGRESS
    g.groups.poll(19_999)
    assert g.delayed == []
    g.groups.poll(20_000)
    answer = g.answer(b)
    assert (answer.generation_id, [m.member_id for m in answer.members]) == (2, [answer.member_id])


def test_a_rebalance_timeout_of_0_completes_a_round_at_once():
    g = Groups()
    a = stable_member(g, "a", rebalance=0)
    answer = g.groups.handle(join(version=3, rebalance=0), 5, "b")
    assert (answer.generation_id, answer.leader, [m.member_id for m in answer.members]) == (
        2, answer.member_id, [answer.member_id]
    )
    assert a not in g.group().members  # it had no time to rejoin


def test_the_leader_sees_each_members_group_instance_id():
    g = Groups()
    a = g.groups.handle(join(version=5, instance="i-a"), 0, "a")  # static: joins without MEMBER_ID_REQUIRED
    assert a.error_code == Errors.NONE
    g.groups.handle(SyncGroupRequest(G, 1, a.member_id), 0)
    b = join(version=5, instance="i-b")
    g.groups.handle(b, 0, "b")
    leader = g.groups.handle(join(a.member_id, version=5, instance="i-a"), 0)
    assert [(m.member_id, m.metadata, m.group_instance_id) for m in leader.members] == [
        (a.member_id, b"range-meta", "i-a"), (g.answer(b).member_id, b"range-meta", "i-b")
    ]


@pytest.mark.parametrize(("leader", "other", "chosen"), [
    ((RANGE, RR), (RR, RANGE), "range"),  # one vote each: the leader's order breaks the tie
    ((RR, RANGE), (RANGE, RR), "roundrobin"),
])
def test_a_tied_vote_goes_to_the_leaders_preference(leader, other, chosen):
    g = Groups()
    a = stable_member(g, "a", protocols=leader)
    b = join(version=3, protocols=other)
    g.groups.handle(b, 0, "b")
    assert g.groups.handle(join(a, version=3, protocols=leader), 0).protocol_name == chosen
    assert g.answer(b).protocol_name == chosen


def test_the_most_votes_win_whatever_the_names():
    g = Groups()
    a = stable_member(g, "a", protocols=(RR, RANGE))
    others = [join(version=3, protocols=(RANGE, RR)) for _ in range(2)]
    for n, request in enumerate(others):
        g.groups.handle(request, 0, f"o{n}")
    # the leader prefers roundrobin, two members range: range wins two to one
    assert g.groups.handle(join(a, version=3, protocols=(RR, RANGE)), 0).protocol_name == "range"


def test_sync_checks_the_protocol_it_names_and_answers_with_the_groups():
    g = Groups()
    answer = g.groups.handle(join(version=3), 0, "a")
    m = answer.member_id
    wrong_type = SyncGroupRequest(G, 1, m, protocol_type="connect", protocol_name="range")
    assert g.groups.handle(wrong_type, 0).error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    named = SyncGroupRequest(G, 1, m, (SyncGroupAssignment(m, b"p0"),), protocol_type="consumer", protocol_name="range")
    synced = g.groups.handle(named, 0)
    assert (synced.error_code, synced.assignment, synced.protocol_type, synced.protocol_name) == (
        Errors.NONE, b"p0", "consumer", "range"
    )


def _two_members_completing(g: Groups) -> tuple[str, str]:
    a = stable_member(g, "a")
    b_join = join(version=3)
    g.groups.handle(b_join, 0, "b")
    g.groups.handle(join(a, version=3), 0)
    return a, g.answer(b_join).member_id


def test_a_voided_sync_is_answered_once_and_not_again_in_the_next_round():
    g = Groups()
    a, b = _two_members_completing(g)
    b_sync = SyncGroupRequest(G, 2, b)
    assert g.groups.handle(b_sync, 0) is None
    c_join = join(version=3)
    g.groups.handle(c_join, 0, "c")  # voids the round b's sync waits on
    assert g.answer(b_sync).error_code == Errors.REBALANCE_IN_PROGRESS
    g.groups.handle(join(b, version=3), 0)
    g.groups.handle(join(a, version=3), 0)  # the round completes: generation 3
    g.delayed.clear()
    g.groups.handle(SyncGroupRequest(G, 3, a, (SyncGroupAssignment(b, b"x"),)), 0)
    assert g.delayed == []  # b has not sent its generation-3 sync: nothing to answer
    assert g.groups.handle(SyncGroupRequest(G, 3, b), 0).assignment == b"x"


def test_followers_waiting_on_the_leaders_sync_are_answered_once():
    g = Groups()
    a, b = _two_members_completing(g)
    b_sync = SyncGroupRequest(G, 2, b)
    g.groups.handle(b_sync, 0)
    g.groups.handle(SyncGroupRequest(G, 2, a, (SyncGroupAssignment(b, b"p1"),)), 0)
    assert [(req, resp.assignment) for req, resp in g.delayed if req is b_sync] == [(b_sync, b"p1")]
    g.delayed.clear()
    c_join = join(version=3)
    g.groups.handle(c_join, 0, "c")  # a new round from Stable: no sync is waiting any more
    g.groups.handle(join(a, version=3), 0)
    g.groups.handle(join(b, version=3), 0)
    g.delayed.clear()
    g.groups.handle(SyncGroupRequest(G, 3, a), 0)
    assert g.delayed == []


def test_a_request_outside_the_protocol_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="does not answer OffsetCommitRequest"):
        ClassicGroups().handle(OffsetCommitRequest(G, ()), 0)

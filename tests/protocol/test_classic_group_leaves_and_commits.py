"""LeaveGroup and the offset-commit check of the classic group protocol at their edges (after Kafka's
`GroupMetadataManager`: `classicGroupLeave`, `removeMemberAndUpdateClassicGroup`,
`removePendingMemberAndUpdateClassicGroup` and `ClassicGroup.validateOffsetCommit`)."""

from __future__ import annotations

import pytest

from epochguard.broker.group.classic_group import ClassicGroups, GroupState
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    JoinGroupProtocol,
    JoinGroupRequest,
    LeaveGroupMember,
    LeaveGroupRequest,
    SyncGroupRequest,
)

G = "g"
RANGE = JoinGroupProtocol("range", b"range-meta")


def join(member_id="", version=7, instance=None):
    return JoinGroupRequest(G, 10_000, member_id, protocols=(RANGE,), rebalance_timeout_ms=30_000,
                            group_instance_id=instance, version=version)


class Groups:
    def __init__(self) -> None:
        self.groups = ClassicGroups()
        self.delayed: list[tuple[object, object]] = []
        self.groups.on_delayed_response = lambda request, response: self.delayed.append((request, response))

    def stable(self, client_id: str = "a") -> str:
        member = self.groups.handle(join(version=3), 0, client_id).member_id
        self.groups.handle(SyncGroupRequest(G, 1, member), 0)
        return member

    def group(self):
        return self.groups.groups[G]


def test_a_pending_member_that_leaves_no_longer_holds_up_the_round():
    g = Groups()
    a = g.stable()
    pending = g.groups.handle(join(), 0, "p").member_id  # MEMBER_ID_REQUIRED: pending from now on
    rejoin = join(a)
    assert g.groups.handle(rejoin, 0) is None  # the round waits for the pending member
    left = g.groups.handle(LeaveGroupRequest(G, (LeaveGroupMember(pending),)), 10)
    assert [(m.member_id, m.error_code) for m in left.members] == [(pending, Errors.NONE)]
    [(request, answer)] = g.delayed
    assert request is rejoin and (answer.error_code, answer.generation_id) == (Errors.NONE, 2)
    assert g.groups.handle(join(pending), 20).error_code == Errors.UNKNOWN_MEMBER_ID  # forgotten


def test_the_last_member_leaving_with_a_member_id_pending_empties_the_group_at_once():
    g = Groups()
    a = g.stable()
    g.groups.handle(join(), 0, "p")  # pending, never joins
    g.groups.handle(LeaveGroupRequest(G, (LeaveGroupMember(a),)), 5)
    assert (g.group().state, g.group().generation_id) == (GroupState.EMPTY, 2)


def test_a_member_that_leaves_while_its_join_waits_gets_unknown_member_id():
    """Kafka answers the parked JoinGroup with UNKNOWN_MEMBER_ID and the empty member id, so the
    client, if still there, joins again as a new member."""
    g = Groups()
    g.stable()
    waiting = join(version=3)
    assert g.groups.handle(waiting, 0, "b") is None
    b = g.group().members["b-2"].member_id
    g.groups.handle(LeaveGroupRequest(G, (LeaveGroupMember(b),)), 0)
    [(request, answer)] = g.delayed
    assert request is waiting and (answer.error_code, answer.member_id) == (Errors.UNKNOWN_MEMBER_ID, "")


def test_leave_v3_echoes_each_members_group_instance_id():
    g = Groups()
    a = g.stable()
    answer = g.groups.handle(
        LeaveGroupRequest(G, (LeaveGroupMember(a, "i-a"), LeaveGroupMember("x", "i-x")), version=3), 0
    )
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in answer.members] == [
        (a, "i-a", Errors.NONE), ("x", "i-x", Errors.UNKNOWN_MEMBER_ID)
    ]


def test_leaving_an_unknown_group_knows_no_member_and_creates_no_group():
    groups = ClassicGroups()
    answer = groups.handle(LeaveGroupRequest("nobody", (LeaveGroupMember("m"),)), 0)
    assert (answer.error_code, [(m.member_id, m.error_code) for m in answer.members]) == (
        Errors.NONE, [("m", Errors.UNKNOWN_MEMBER_ID)]
    )
    assert groups.groups == {}


def test_an_old_leave_naming_no_member_answers_none():
    g = Groups()
    g.stable()
    assert g.groups.handle(LeaveGroupRequest(G, (), version=2), 0).error_code == Errors.NONE


@pytest.mark.parametrize(("generation", "member", "error"), [
    (-1, "", Errors.NONE),  # a simple commit
    (0, "", Errors.ILLEGAL_GENERATION),  # generation 0 is a real generation: there is none
    (1, "m", Errors.ILLEGAL_GENERATION),
])
def test_commits_into_an_unknown_group(generation, member, error):
    assert ClassicGroups().commit_error(G, generation, member) == error


def test_commits_into_an_empty_group():
    g = Groups()
    a = g.stable()
    g.groups.handle(LeaveGroupRequest(G, (LeaveGroupMember(a),)), 0)
    assert g.group().state is GroupState.EMPTY and g.group().generation_id == 2
    assert g.groups.commit_error(G, -1, "") == Errors.NONE
    assert g.groups.commit_error(G, 0, "") == Errors.UNKNOWN_MEMBER_ID  # not simple: a member is needed
    assert g.groups.commit_error(G, 2, a) == Errors.UNKNOWN_MEMBER_ID


def test_commits_into_a_group_with_members():
    g = Groups()
    a = g.stable()
    assert g.groups.commit_error(G, 1, a) == Errors.NONE
    assert g.groups.commit_error(G, -1, a) == Errors.ILLEGAL_GENERATION  # a member names its generation
    assert g.groups.commit_error(G, 0, a) == Errors.ILLEGAL_GENERATION
    assert g.groups.commit_error(G, -1, "") == Errors.UNKNOWN_MEMBER_ID
    assert g.groups.commit_error(G, 0, "") == Errors.UNKNOWN_MEMBER_ID


def test_a_pending_member_leaving_a_stable_group_starts_no_rebalance():
    g = Groups()
    a = g.stable()
    pending = g.groups.handle(join(), 0, "p").member_id
    g.groups.handle(LeaveGroupRequest(G, (LeaveGroupMember(pending),)), 0)
    assert (g.group().state, g.group().generation_id, list(g.group().members)) == (GroupState.STABLE, 1, [a])

"""The classic group protocol through `GroupCoordinator.handle`, after Kafka's `GroupMetadataManagerTest`
(classic groups: join, sync, heartbeat, leave, session and rebalance timeouts, offset commit checks)."""

from __future__ import annotations

import pytest

from epochguard.broker.group.classic_group import GroupState
from epochguard.broker.group.coordinator import GroupCoordinator
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    HeartbeatRequest,
    JoinGroupProtocol,
    JoinGroupRequest,
    LeaveGroupMember,
    LeaveGroupRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    SyncGroupAssignment,
    SyncGroupRequest,
)

G = "g"
RANGE = JoinGroupProtocol("range", b"range-meta")
RR = JoinGroupProtocol("roundrobin", b"rr-meta")


class Coordinator:
    """The coordinator with its delayed answers collected, as the wire engine does."""

    def __init__(self, **kw) -> None:
        self.c = GroupCoordinator(**kw)
        self.delayed: dict[int, object] = {}
        self.c.groups.on_delayed_response = lambda request, response: self.delayed.__setitem__(id(request), response)
        self.now = 0

    def send(self, request, client_id="c"):
        return self.c.handle(0, request, self.now, client_id)

    def answer(self, request):
        return self.delayed.pop(id(request))

    def group(self):
        return self.c.groups.groups[G]

    def join_new(self, protocols=(RANGE,), session=10_000, rebalance=30_000, client_id="c"):
        """A v7 consumer's first join: MEMBER_ID_REQUIRED, then the join with that id."""
        first = self.send(JoinGroupRequest(G, session, protocols=protocols, rebalance_timeout_ms=rebalance), client_id)
        assert first.error_code == Errors.MEMBER_ID_REQUIRED and first.member_id.startswith(client_id + "-")
        again = JoinGroupRequest(G, session, first.member_id, protocols=protocols, rebalance_timeout_ms=rebalance)
        return again, self.send(again, client_id)


def join(member_id, protocols=(RANGE,), session=10_000, rebalance=30_000, version=7):
    return JoinGroupRequest(G, session, member_id, protocols=protocols, rebalance_timeout_ms=rebalance, version=version)


def test_a_first_member_gets_an_id_then_leads_generation_1_alone():
    co = Coordinator()
    _, answer = co.join_new(protocols=(RANGE, RR))
    assert answer.error_code == Errors.NONE
    assert (answer.generation_id, answer.protocol_type, answer.protocol_name) == (1, "consumer", "range")
    assert answer.leader == answer.member_id
    assert [(m.member_id, m.metadata) for m in answer.members] == [(answer.member_id, b"range-meta")]
    assert co.group().state is GroupState.COMPLETING_REBALANCE
    sync = co.send(SyncGroupRequest(G, 1, answer.member_id, (SyncGroupAssignment(answer.member_id, b"all"),)))
    assert (sync.error_code, sync.assignment, sync.protocol_name) == (Errors.NONE, b"all", "range")
    assert co.group().state is GroupState.STABLE


def test_join_before_v4_takes_the_member_in_at_once():
    co = Coordinator()
    answer = co.send(join("", version=3))
    assert answer.error_code == Errors.NONE and answer.generation_id == 1 and answer.member_id


def test_two_members_rebalance_the_leader_alone_gets_the_metadata_and_hands_out_assignments():
    co = Coordinator()
    _, a = co.join_new(client_id="a")
    co.send(SyncGroupRequest(G, 1, a.member_id, (SyncGroupAssignment(a.member_id, b"p0p1"),)))
    b_join, b_now = co.join_new(protocols=(RANGE,), client_id="b")
    assert b_now is None  # waits until the known member rejoins
    assert co.group().state is GroupState.PREPARING_REBALANCE
    assert co.send(HeartbeatRequest(G, 1, a.member_id)).error_code == Errors.REBALANCE_IN_PROGRESS
    leader = co.send(join(a.member_id))  # the last one in completes the round: answered at once
    follower = co.answer(b_join)  # the one that waited: a delayed answer
    assert (leader.generation_id, follower.generation_id) == (2, 2)
    assert leader.leader == follower.leader == a.member_id  # the old leader stays leader
    assert [m.member_id for m in leader.members] == [a.member_id, follower.member_id]
    assert follower.members == ()
    # the follower's SyncGroup waits for the leader's
    f_sync = SyncGroupRequest(G, 2, follower.member_id)
    assert co.send(f_sync) is None
    l_sync = co.send(SyncGroupRequest(G, 2, a.member_id, (SyncGroupAssignment(a.member_id, b"p0"),
                                                          SyncGroupAssignment(follower.member_id, b"p1"))))
    assert l_sync.assignment == b"p0" and co.answer(f_sync).assignment == b"p1"
    assert co.send(HeartbeatRequest(G, 2, follower.member_id)).error_code == Errors.NONE
    assert co.send(HeartbeatRequest(G, 1, follower.member_id)).error_code == Errors.ILLEGAL_GENERATION


def test_a_member_left_out_of_the_leaders_assignment_gets_an_empty_one():
    co = Coordinator()
    _, a = co.join_new(client_id="a")
    co.send(SyncGroupRequest(G, 1, a.member_id))
    b_join, _ = co.join_new(client_id="b")
    co.send(join(a.member_id))
    b = co.answer(b_join)
    co.send(SyncGroupRequest(G, 2, a.member_id, (SyncGroupAssignment(a.member_id, b"x"),)))
    late = co.send(SyncGroupRequest(G, 2, b.member_id))  # Stable by now: answered at once
    assert (late.error_code, late.assignment) == (Errors.NONE, b"")


def test_a_member_the_leader_leaves_out_gets_an_empty_assignment_not_its_old_one():
    co = Coordinator()
    _, a = co.join_new()
    co.send(SyncGroupRequest(G, 1, a.member_id, (SyncGroupAssignment(a.member_id, b"all"),)))
    assert co.send(join(a.member_id)).generation_id == 2  # the leader rejoining: a new round
    assert co.send(SyncGroupRequest(G, 2, a.member_id)).assignment == b""


def test_a_member_waiting_for_its_join_answer_outlives_its_session():
    co = Coordinator()
    _, a = co.join_new(session=6_000, rebalance=30_000, client_id="a")
    co.send(SyncGroupRequest(G, 1, a.member_id))
    b_join, _ = co.join_new(session=6_000, rebalance=30_000, client_id="b")  # waits for a to rejoin
    co.now = 6_500  # both sessions are over, but b is waiting on the coordinator, not silent
    co.c.poll(co.now)
    b = co.answer(b_join)
    assert (b.error_code, b.generation_id, [m.member_id for m in b.members]) == (Errors.NONE, 2, [b.member_id])
    assert list(co.group().members) == [b.member_id]  # and its session runs from that answer
    co.now = 6_500 + 5_999
    co.c.poll(co.now)
    assert list(co.group().members) == [b.member_id]
    co.now = 6_500 + 6_000
    co.c.poll(co.now)
    assert co.group().members == {} and co.group().state is GroupState.EMPTY


def test_a_member_waiting_in_a_long_round_is_not_expired():
    co = Coordinator()
    _, a = co.join_new(session=60_000, rebalance=30_000, client_id="a")
    co.send(SyncGroupRequest(G, 1, a.member_id))
    b_join, _ = co.join_new(session=6_000, rebalance=30_000, client_id="b")
    co.now = 20_000  # b's session is long over; it waits for a, who is alive but has not rejoined
    co.c.poll(co.now)
    assert co.delayed == {}
    leader = co.send(join(a.member_id, session=60_000))
    assert [m.member_id for m in leader.members] == [a.member_id, co.answer(b_join).member_id]


def test_a_join_resent_while_the_assignment_is_being_made_gets_the_same_answer_again():
    co = Coordinator()
    _, a = co.join_new(protocols=(RANGE, RR))
    again = co.send(join(a.member_id, protocols=(RANGE, RR)))  # its answer was lost: same round
    assert (again.generation_id, [m.member_id for m in again.members]) == (1, [a.member_id])
    assert co.group().state is GroupState.COMPLETING_REBALANCE
    changed = co.send(join(a.member_id, protocols=(RR,)))  # new metadata: a new round
    assert (changed.generation_id, changed.protocol_name) == (2, "roundrobin")


def test_the_protocol_is_chosen_by_vote_among_those_every_member_supports():
    co = Coordinator()
    _, a = co.join_new(protocols=(RANGE, RR), client_id="a")
    co.send(SyncGroupRequest(G, 1, a.member_id))
    b_join, _ = co.join_new(protocols=(RR, RANGE), client_id="b")
    c_join, _ = co.join_new(protocols=(RR, RANGE), client_id="c")
    co.send(join(a.member_id, protocols=(RANGE, RR)))
    # a votes range, b and c roundrobin: two votes to one
    assert co.answer(c_join).protocol_name == co.answer(b_join).protocol_name == "roundrobin"
    d_join, _ = co.join_new(protocols=(RR,), client_id="d")
    for m in (a, co.group().members[b_join.member_id], co.group().members[c_join.member_id]):
        co.send(join(m.member_id, protocols=(RANGE, RR)))
    # now every member but d prefers range, but d supports roundrobin only: the one candidate
    assert co.answer(d_join).protocol_name == "roundrobin"


def test_a_join_with_no_protocol_in_common_or_another_type_is_inconsistent():
    co = Coordinator()
    co.join_new(protocols=(RANGE,))
    other = co.send(JoinGroupRequest(G, 10_000, protocols=(RR,)))
    assert other.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    connect = co.send(JoinGroupRequest(G, 10_000, protocol_type="connect", protocols=(RANGE,)))
    assert connect.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL


@pytest.mark.parametrize(("request_", "error"), [
    (JoinGroupRequest("", 10_000, protocols=(RANGE,)), Errors.INVALID_GROUP_ID),
    (JoinGroupRequest(G, 5_999, protocols=(RANGE,)), Errors.INVALID_SESSION_TIMEOUT),
    (JoinGroupRequest(G, 1_800_001, protocols=(RANGE,)), Errors.INVALID_SESSION_TIMEOUT),
    (JoinGroupRequest(G, 10_000, "nobody", protocols=(RANGE,)), Errors.UNKNOWN_MEMBER_ID),
    (JoinGroupRequest(G, 10_000, protocols=()), Errors.INCONSISTENT_GROUP_PROTOCOL),
])
def test_join_refusals(request_, error):
    assert Coordinator().send(request_).error_code == error


def test_session_bounds_are_inclusive():
    for session in (6_000, 1_800_000):
        assert Coordinator().send(JoinGroupRequest(G, session, protocols=(RANGE,))).error_code == Errors.MEMBER_ID_REQUIRED


def test_sync_and_heartbeat_from_strangers_and_old_generations():
    co = Coordinator()
    assert co.send(HeartbeatRequest(G, 1, "x")).error_code == Errors.UNKNOWN_MEMBER_ID
    assert co.send(SyncGroupRequest(G, 1, "x")).error_code == Errors.UNKNOWN_MEMBER_ID
    _, a = co.join_new()
    assert co.send(SyncGroupRequest(G, 0, a.member_id)).error_code == Errors.ILLEGAL_GENERATION
    assert co.send(SyncGroupRequest(G, 1, a.member_id, protocol_name="roundrobin")).error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    # CompletingRebalance: a heartbeat after the join answer is a normal heartbeat
    assert co.send(HeartbeatRequest(G, 1, a.member_id)).error_code == Errors.NONE


def test_a_member_whose_session_times_out_is_removed_and_the_others_rebalance():
    co = Coordinator()
    _, a = co.join_new(session=10_000, client_id="a")
    co.send(SyncGroupRequest(G, 1, a.member_id))
    b_join, _ = co.join_new(session=6_000, client_id="b")
    co.send(join(a.member_id, session=10_000))
    b = co.answer(b_join)
    co.send(SyncGroupRequest(G, 2, a.member_id))
    co.now = 5_999
    co.c.poll(co.now)
    assert co.send(HeartbeatRequest(G, 2, a.member_id)).error_code == Errors.NONE
    co.now = 6_000  # b's session (6 s since its last sign of life at 0) is over
    co.c.poll(co.now)
    assert b.member_id not in co.group().members
    assert co.send(HeartbeatRequest(G, 2, b.member_id)).error_code == Errors.UNKNOWN_MEMBER_ID
    assert co.send(HeartbeatRequest(G, 2, a.member_id)).error_code == Errors.REBALANCE_IN_PROGRESS
    answer = co.send(join(a.member_id))
    assert (answer.generation_id, [m.member_id for m in answer.members]) == (3, [a.member_id])
    assert co.delayed == {}


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped():
    co = Coordinator()
    _, a = co.join_new(rebalance=20_000, session=60_000, client_id="a")
    co.send(SyncGroupRequest(G, 1, a.member_id))
    b_join, _ = co.join_new(rebalance=20_000, session=60_000, client_id="b")
    co.now = 19_999
    co.c.poll(co.now)
    assert co.delayed == {}
    co.now = 20_000
    co.c.poll(co.now)
    b = co.answer(b_join)
    assert (b.generation_id, b.leader, [m.member_id for m in b.members]) == (2, b.member_id, [b.member_id])
    assert list(co.group().members) == [b.member_id]


def test_leave_v0_to_v2_answers_at_the_top_level_v3_per_member():
    co = Coordinator()
    _, a = co.join_new()
    old = co.send(LeaveGroupRequest(G, (LeaveGroupMember("nobody"),), version=2))
    assert old.error_code == Errors.UNKNOWN_MEMBER_ID and old.members == ()
    new = co.send(LeaveGroupRequest(G, (LeaveGroupMember(a.member_id), LeaveGroupMember("nobody")), version=3))
    assert new.error_code == Errors.NONE
    assert [(m.member_id, m.error_code) for m in new.members] == [(a.member_id, Errors.NONE), ("nobody", Errors.UNKNOWN_MEMBER_ID)]
    assert co.group().state is GroupState.EMPTY and co.group().generation_id == 2


def test_a_leaving_member_completes_the_join_the_others_wait_on():
    co = Coordinator()
    _, a = co.join_new(client_id="a")
    co.send(SyncGroupRequest(G, 1, a.member_id))
    b_join, _ = co.join_new(client_id="b")
    co.send(LeaveGroupRequest(G, (LeaveGroupMember(a.member_id),)))
    b = co.answer(b_join)
    assert b.error_code == Errors.NONE and b.leader == b.member_id and b.generation_id == 2


def test_a_new_join_voids_the_assignment_being_made():
    co = Coordinator()
    _, a = co.join_new(client_id="a")
    co.send(SyncGroupRequest(G, 1, a.member_id))
    b_join, _ = co.join_new(client_id="b")
    co.send(join(a.member_id))
    b = co.answer(b_join)
    waiting = SyncGroupRequest(G, 2, b.member_id)
    assert co.send(waiting) is None
    co.join_new(client_id="c")  # CompletingRebalance -> PreparingRebalance
    assert co.answer(waiting).error_code == Errors.REBALANCE_IN_PROGRESS
    assert co.send(SyncGroupRequest(G, 2, a.member_id)).error_code == Errors.REBALANCE_IN_PROGRESS


def test_a_rejoin_with_the_same_metadata_in_a_stable_group_is_answered_at_once():
    co = Coordinator()
    _, a = co.join_new(client_id="a")
    co.send(SyncGroupRequest(G, 1, a.member_id))
    b_join, _ = co.join_new(client_id="b")
    co.send(join(a.member_id))
    b = co.answer(b_join)
    co.send(SyncGroupRequest(G, 2, a.member_id))
    again = co.send(join(b.member_id))  # a follower, nothing changed: no rebalance
    assert again.generation_id == 2 and again.members == ()
    assert co.group().state is GroupState.STABLE
    assert co.send(join(a.member_id)) is None  # the leader rejoining does rebalance
    assert co.group().state is GroupState.PREPARING_REBALANCE


def test_a_member_id_handed_out_but_never_used_holds_the_round_up_only_for_its_session_timeout():
    co = Coordinator()
    lost = co.send(JoinGroupRequest(G, 6_000, protocols=(RANGE,)))  # the client never sees this answer
    assert lost.error_code == Errors.MEMBER_ID_REQUIRED
    again, now = co.join_new(session=10_000)  # it asks again with no id: a second id
    assert now is None  # the round waits for the first id to join
    co.now = 5_999
    co.c.poll(co.now)
    assert co.delayed == {}
    co.now = 6_000
    co.c.poll(co.now)
    answer = co.answer(again)
    assert (answer.generation_id, [m.member_id for m in answer.members]) == (1, [again.member_id])
    late = co.send(join(lost.member_id))  # forgotten: no longer a pending member
    assert late.error_code == Errors.UNKNOWN_MEMBER_ID


def test_a_pending_member_that_joins_after_the_round_completed_starts_the_next_one():
    co = Coordinator()
    _, a = co.join_new(rebalance=1_000, session=60_000, client_id="a")
    co.send(SyncGroupRequest(G, 1, a.member_id))
    pending = co.send(JoinGroupRequest(G, 60_000, protocols=(RANGE,), rebalance_timeout_ms=1_000))
    a_rejoin = join(a.member_id, rebalance=1_000, session=60_000)
    assert co.send(a_rejoin) is None  # waits for the pending one
    co.now = 1_000
    co.c.poll(co.now)  # the rebalance timeout completes the round without it
    assert co.answer(a_rejoin).generation_id == 2
    assert co.send(join(pending.member_id, rebalance=1_000, session=60_000)) is None  # still pending: it may join
    assert co.group().state is GroupState.PREPARING_REBALANCE


def test_the_initial_rebalance_delay_holds_the_first_join():
    co = Coordinator(initial_rebalance_delay_ms=3_000)
    again, now = co.join_new()
    assert now is None
    co.now = 2_999
    co.c.poll(co.now)
    assert co.delayed == {}
    co.now = 3_000
    co.c.poll(co.now)
    assert co.answer(again).generation_id == 1


def commit(generation=-1, member="", offset=5):
    return OffsetCommitRequest(G, (OffsetCommitPartition("t", 0, offset, 3),), generation_id_or_member_epoch=generation,
                               member_id=member)


def test_offset_commits_are_checked_against_the_generation():
    co = Coordinator()
    assert co.send(commit()).partitions[0].error_code == Errors.NONE  # a simple commit, no group
    assert co.send(commit(generation=1, member="x")).partitions[0].error_code == Errors.ILLEGAL_GENERATION
    _, a = co.join_new()
    assert co.send(commit(generation=1, member=a.member_id)).partitions[0].error_code == Errors.REBALANCE_IN_PROGRESS
    co.send(SyncGroupRequest(G, 1, a.member_id))
    assert co.send(commit(generation=1, member=a.member_id)).partitions[0].error_code == Errors.NONE
    assert co.send(commit(generation=0, member=a.member_id)).partitions[0].error_code == Errors.ILLEGAL_GENERATION
    assert co.send(commit(generation=1, member="x")).partitions[0].error_code == Errors.UNKNOWN_MEMBER_ID
    assert co.send(commit()).partitions[0].error_code == Errors.UNKNOWN_MEMBER_ID  # simple, into a live group
    refused = co.send(commit(generation=0, member=a.member_id, offset=9))
    assert refused.partitions[0].error_code == Errors.ILLEGAL_GENERATION
    assert co.c.offsets[G][next(iter(co.c.offsets[G]))].offset == 5  # the refused commit stored nothing

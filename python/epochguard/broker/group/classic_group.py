"""Consumer-group membership of the classic group protocol, sans-IO: JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, and the generation check of a group's offset commits.

Mirrors Kafka's `ClassicGroup` / `ClassicGroupMember` (group/classic/) and the classic-group handlers
of `GroupMetadataManager`: a group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable;
a JoinGroup waits (a delayed answer) until every known member has rejoined or the longest rebalance
timeout has passed, then the generation is bumped, a protocol every member supports is chosen by vote
and the leader alone gets the members' metadata; the leader's SyncGroup hands out the assignment; a
member whose session times out, or who leaves, starts a rebalance.

Differences from Kafka, on purpose: member ids are `<client id>-<n>` from a counter, not a random UUID,
so a recorded run replays byte for byte; `initial_rebalance_delay_ms` defaults to 0 (Kafka's
`group.initial.rebalance.delay.ms` is 3 s, which only slows a test); no group size limit, no
pending-sync timeout (a member that never syncs is caught by its session timeout) and no static
membership fencing (`group.instance.id` is carried, not enforced).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from epochguard.errors import Errors
from epochguard.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

__all__ = ["ClassicGroups", "ClassicGroup", "ClassicGroupMember", "GroupState"]

# Kafka's broker defaults (group.min/max.session.timeout.ms).
MIN_SESSION_TIMEOUT_MS = 6_000
MAX_SESSION_TIMEOUT_MS = 1_800_000
# JoinGroup v4+ (KIP-394): a member with no id gets one with MEMBER_ID_REQUIRED and joins again.
_MEMBER_ID_REQUIRED_VERSION = 4

DelayedAnswer = Callable[[Any, Any], None]


def _drop(request: Any, response: Any) -> None:
    """The default `on_delayed_response`: with nobody listening, a delayed answer is dropped."""


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


@dataclass(eq=False)
class ClassicGroupMember:
    member_id: str
    group_instance_id: str | None
    protocols: tuple[JoinGroupProtocol, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    heartbeat_deadline_ms: int = 0
    assignment: bytes = b""
    awaiting_join: JoinGroupRequest | None = None
    awaiting_sync: SyncGroupRequest | None = None

    def metadata(self, protocol: str) -> bytes:
        """Its metadata for `protocol`, one it supports (the group chooses among those all support)."""
        return next(p.metadata for p in self.protocols if p.name == protocol)

    def matches(self, protocols: tuple[JoinGroupProtocol, ...]) -> bool:
        return self.protocols == protocols


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicGroupMember] = field(default_factory=dict)  # in join order
    # given an id by MEMBER_ID_REQUIRED, not joined yet: id -> when it is forgotten (its session timeout)
    pending_members: dict[str, int] = field(default_factory=dict)
    join_deadline_ms: int = 0  # read only while PreparingRebalance (set on entering it)
    initial_delay: bool = False  # Kafka's InitialDelayedJoin: wait out the delay even if all joined

    def all_joined(self) -> bool:
        """Kafka's `hasAllMembersJoined`: every member rejoined and no new member is still on its way."""
        return all(m.awaiting_join is not None for m in self.members.values()) and not self.pending_members

    def supports(self, protocol_type: str, protocols: tuple[JoinGroupProtocol, ...]) -> bool:
        """Kafka's `supportsProtocols`: an empty group takes any non-empty type and protocol list; a
        group with members needs the same type and one protocol every member also supports."""
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        names = {p.name for p in protocols}
        return protocol_type == self.protocol_type and bool(names & self._candidates())

    def _candidates(self) -> set[str]:
        """The protocols every member supports (of a group with members)."""
        return set.intersection(*({p.name for p in m.protocols} for m in self.members.values()))

    def select_protocol(self) -> str:
        """Kafka's `selectProtocol`: each member votes for its most preferred protocol among those all
        members support; the most votes win (ties: the first candidate in the leader's order)."""
        candidates = self._candidates()
        votes = Counter(next(p.name for p in m.protocols if p.name in candidates) for m in self.members.values())
        order = [p.name for p in next(iter(self.members.values())).protocols if p.name in votes]
        return max(order, key=lambda name: votes[name])

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)


class ClassicGroups:
    """Every classic group of one coordinator. `handle` answers at once or returns None, and the answer
    comes later through `on_delayed_response(request, response)` (a JoinGroup waiting for the others,
    a follower's SyncGroup waiting for the leader's). `poll(now_ms)` runs the timers."""

    def __init__(self, initial_rebalance_delay_ms: int = 0) -> None:
        self.groups: dict[str, ClassicGroup] = {}
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.on_delayed_response: DelayedAnswer = _drop
        self._next_member = 0
        self._handling: Any = None
        self._immediate: Any = None

    def _deliver(self, request: Any, response: Any) -> None:
        if request is self._handling:
            self._immediate = response
        else:
            self.on_delayed_response(request, response)

    def handle(self, request: Any, now_ms: int, client_id: str = "") -> Any:
        if isinstance(request, (JoinGroupRequest, SyncGroupRequest)):
            # a join or sync that completes the round it belongs to is answered now, not later
            self._handling, self._immediate = request, None
            try:
                answer: JoinGroupResponse | SyncGroupResponse | None
                if isinstance(request, JoinGroupRequest):
                    answer = self.join(request, now_ms, client_id)
                else:
                    answer = self.sync(request, now_ms)
                return answer if answer is not None else self._immediate
            finally:
                self._handling = self._immediate = None
        if isinstance(request, HeartbeatRequest):
            return self.heartbeat(request, now_ms)
        if isinstance(request, LeaveGroupRequest):
            return self.leave(request, now_ms)
        raise TypeError(f"the classic group protocol does not answer {type(request).__name__}")

    # --- JoinGroup ----------------------------------------------------------------------------------
    def join(self, request: JoinGroupRequest, now_ms: int, client_id: str = "") -> JoinGroupResponse | None:
        def refuse(error: Errors, member_id: str = "") -> JoinGroupResponse:
            return JoinGroupResponse(error, member_id=member_id or request.member_id)

        if not request.group_id:
            return refuse(Errors.INVALID_GROUP_ID)
        if not MIN_SESSION_TIMEOUT_MS <= request.session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            return refuse(Errors.INVALID_SESSION_TIMEOUT)
        group = self.groups.get(request.group_id) or ClassicGroup(request.group_id)
        if not group.supports(request.protocol_type, request.protocols):
            return refuse(Errors.INCONSISTENT_GROUP_PROTOCOL)
        self.groups[group.group_id] = group
        if not request.member_id:
            self._next_member += 1
            member_id = f"{client_id or 'member'}-{self._next_member}"
            if request.version >= _MEMBER_ID_REQUIRED_VERSION and request.group_instance_id is None:
                group.pending_members[member_id] = now_ms + request.session_timeout_ms
                return refuse(Errors.MEMBER_ID_REQUIRED, member_id)
            self._add_member(group, member_id, request, now_ms)
            return None
        if request.member_id in group.pending_members:
            del group.pending_members[request.member_id]
            self._add_member(group, request.member_id, request, now_ms)
            return None
        member = group.members.get(request.member_id)
        if member is None:
            return refuse(Errors.UNKNOWN_MEMBER_ID)
        return self._rejoin(group, member, request, now_ms)

    def _add_member(self, group: ClassicGroup, member_id: str, request: JoinGroupRequest, now_ms: int) -> None:
        rebalance_timeout = request.rebalance_timeout_ms
        if rebalance_timeout < 0:  # JoinGroup v0 has none: the session timeout serves
            rebalance_timeout = request.session_timeout_ms
        member = ClassicGroupMember(
            member_id, request.group_instance_id, request.protocols, request.session_timeout_ms, rebalance_timeout,
            awaiting_join=request,
        )
        group.protocol_type = request.protocol_type  # the same as the members' (`supports` checked it)
        group.members[member_id] = member
        self._keep_alive(member, now_ms)
        self._prepare_rebalance(group, now_ms)
        self._maybe_complete_join(group, now_ms)

    def _rejoin(self, group: ClassicGroup, member: ClassicGroupMember, request: JoinGroupRequest,
                now_ms: int) -> JoinGroupResponse | None:
        self._keep_alive(member, now_ms)
        unchanged = member.matches(request.protocols)
        if group.state is GroupState.COMPLETING_REBALANCE and unchanged:
            return self._join_answer(group, member)  # its JoinGroup answer was lost: send it again
        if group.state is GroupState.STABLE and unchanged and member.member_id != group.leader_id:
            return self._join_answer(group, member)  # nothing to rebalance for
        member.protocols = request.protocols
        member.awaiting_join = request
        self._prepare_rebalance(group, now_ms)
        self._maybe_complete_join(group, now_ms)
        return None

    def _prepare_rebalance(self, group: ClassicGroup, now_ms: int) -> None:
        if group.state is GroupState.PREPARING_REBALANCE:
            return
        if group.state is GroupState.COMPLETING_REBALANCE:
            # the assignment being made is void: members waiting for it must rejoin (the next leader's
            # SyncGroup sets every member's assignment before anyone is answered with one)
            for m in group.members.values():
                if m.awaiting_sync is not None:
                    self._deliver(m.awaiting_sync, SyncGroupResponse(Errors.REBALANCE_IN_PROGRESS))
                    m.awaiting_sync = None
        group.initial_delay = group.state is GroupState.EMPTY and self.initial_rebalance_delay_ms > 0
        if group.initial_delay:
            delay = min(self.initial_rebalance_delay_ms, group.rebalance_timeout_ms())
        else:
            delay = group.rebalance_timeout_ms()
        group.state = GroupState.PREPARING_REBALANCE
        group.join_deadline_ms = now_ms + delay

    def _maybe_complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if (group.all_joined() and not group.initial_delay) or now_ms >= group.join_deadline_ms:
            self._complete_join(group, now_ms)

    def _complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        """Kafka's `onCompleteJoin`: members that did not rejoin in time are out; the next generation."""
        for member_id in [mid for mid, m in group.members.items() if m.awaiting_join is None]:
            del group.members[member_id]
        group.generation_id += 1
        if not group.members:
            group.state, group.protocol_name, group.protocol_type, group.leader_id = GroupState.EMPTY, None, None, None
            return
        # the longest-standing member leads: the old leader while it stays, as Kafka keeps it
        group.leader_id = next(iter(group.members))
        group.protocol_name = group.select_protocol()
        group.state = GroupState.COMPLETING_REBALANCE
        for member in group.members.values():
            request, member.awaiting_join = member.awaiting_join, None
            self._keep_alive(member, now_ms)  # its session runs again from its answer
            self._deliver(request, self._join_answer(group, member))

    @staticmethod
    def _join_answer(group: ClassicGroup, member: ClassicGroupMember) -> JoinGroupResponse:
        protocol = group.protocol_name or ""  # always chosen once a round completes
        leader = member.member_id == group.leader_id
        members = tuple(
            JoinGroupMember(m.member_id, m.metadata(protocol), m.group_instance_id)
            for m in group.members.values()
        ) if leader else ()
        return JoinGroupResponse(
            Errors.NONE, group.generation_id, group.protocol_type, group.protocol_name,
            group.leader_id or "", member.member_id, members,
        )

    # --- SyncGroup ----------------------------------------------------------------------------------
    def sync(self, request: SyncGroupRequest, now_ms: int) -> SyncGroupResponse | None:
        found = self._validate_member(request.group_id, request.member_id, request.generation_id)
        if isinstance(found, Errors):
            return SyncGroupResponse(found)
        group, member = found
        if (request.protocol_type is not None and request.protocol_type != group.protocol_type) or (
            request.protocol_name is not None and request.protocol_name != group.protocol_name
        ):
            return SyncGroupResponse(Errors.INCONSISTENT_GROUP_PROTOCOL)
        self._keep_alive(member, now_ms)
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncGroupResponse(Errors.REBALANCE_IN_PROGRESS)
        if group.state is GroupState.STABLE:
            return self._sync_answer(group, member)
        member.awaiting_sync = request  # CompletingRebalance
        if member.member_id == group.leader_id:
            given = {a.member_id: a.assignment for a in request.assignments}
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")  # a member left out gets an empty one
            group.state = GroupState.STABLE
            for m in group.members.values():
                if m.awaiting_sync is not None and m is not member:
                    self._deliver(m.awaiting_sync, self._sync_answer(group, m))
                m.awaiting_sync = None
            return self._sync_answer(group, member)
        return None

    @staticmethod
    def _sync_answer(group: ClassicGroup, member: ClassicGroupMember) -> SyncGroupResponse:
        return SyncGroupResponse(Errors.NONE, member.assignment, group.protocol_type, group.protocol_name)

    # --- Heartbeat and LeaveGroup -------------------------------------------------------------------
    def heartbeat(self, request: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
        found = self._validate_member(request.group_id, request.member_id, request.generation_id)
        if isinstance(found, Errors):
            return HeartbeatResponse(found)
        group, member = found
        self._keep_alive(member, now_ms)
        if group.state is GroupState.PREPARING_REBALANCE:
            return HeartbeatResponse(Errors.REBALANCE_IN_PROGRESS)
        return HeartbeatResponse()

    def _validate_member(
        self, group_id: str, member_id: str, generation_id: int
    ) -> tuple[ClassicGroup, ClassicGroupMember] | Errors:
        """Kafka's `validateMember` and generation check (SyncGroup, Heartbeat): the group and member,
        or UNKNOWN_MEMBER_ID for an unknown group or member, ILLEGAL_GENERATION for another generation."""
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return Errors.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return Errors.ILLEGAL_GENERATION
        return group, member

    def leave(self, request: LeaveGroupRequest, now_ms: int) -> LeaveGroupResponse:
        group = self.groups.get(request.group_id)  # an unknown group knows no member
        results = []
        for leaving in request.members:
            error = Errors.UNKNOWN_MEMBER_ID if group is None else self._leave(group, leaving.member_id, now_ms)
            results.append(LeaveGroupMemberResponse(leaving.member_id, leaving.group_instance_id, error))
        if request.version < 3:  # one member, its error at the top level
            return LeaveGroupResponse(results[0].error_code if results else Errors.NONE)
        return LeaveGroupResponse(Errors.NONE, tuple(results))

    def _leave(self, group: ClassicGroup, member_id: str, now_ms: int) -> Errors:
        if member_id in group.pending_members:  # Kafka's removePendingMemberAndUpdateClassicGroup
            del group.pending_members[member_id]
            self._maybe_complete_join(group, now_ms)
            return Errors.NONE
        if member_id not in group.members:
            return Errors.UNKNOWN_MEMBER_ID
        self._remove_member(group, member_id, now_ms)
        return Errors.NONE

    def _remove_member(self, group: ClassicGroup, member_id: str, now_ms: int) -> None:
        """Kafka's `removeMemberAndUpdateClassicGroup`: a JoinGroup it waits on is answered
        UNKNOWN_MEMBER_ID with no member id (the client, if still there, joins again as a new member)."""
        member = group.members.pop(member_id)
        if member.awaiting_join is not None:
            self._deliver(member.awaiting_join, JoinGroupResponse(Errors.UNKNOWN_MEMBER_ID))
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now_ms)
        self._maybe_complete_join(group, now_ms)

    # --- timers ---------------------------------------------------------------------------------------
    @staticmethod
    def _keep_alive(member: ClassicGroupMember, now_ms: int) -> None:
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms

    def poll(self, now_ms: int) -> None:
        """Expire sessions (a member waiting for its JoinGroup answer is kept alive, as in Kafka), forget
        pending members that did not come back within their session timeout (a client that lost its
        connection after MEMBER_ID_REQUIRED must not hold the round up for the whole rebalance
        timeout), and complete joins whose rebalance timeout has passed."""
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.pending_members.items()):
                if now_ms >= deadline:
                    del group.pending_members[member_id]
            for member_id, member in list(group.members.items()):
                if member.awaiting_join is None and now_ms >= member.heartbeat_deadline_ms:
                    self._remove_member(group, member_id, now_ms)
            self._maybe_complete_join(group, now_ms)

    # --- offset commits -------------------------------------------------------------------------------
    def commit_error(self, group_id: str, generation_id: int, member_id: str) -> Errors:
        """Kafka's `validateOffsetCommit` for a classic group: a group with members takes commits from
        its current generation's members only; an empty or unknown group takes simple commits
        (generation -1, no member id)."""
        group = self.groups.get(group_id)
        if group is None:
            return Errors.NONE if generation_id < 0 else Errors.ILLEGAL_GENERATION
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return Errors.NONE
        if member_id not in group.members:  # a simple commit (no member id) into a group with members too
            return Errors.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return Errors.ILLEGAL_GENERATION
        if group.state is GroupState.COMPLETING_REBALANCE:
            return Errors.REBALANCE_IN_PROGRESS
        return Errors.NONE

"""Group membership on the consumer's side, sans-IO: Kafka's `ConsumerCoordinator` over
`AbstractCoordinator`, for the classic group protocol with eager rebalancing.

A subscribed member joins (JoinGroup with one protocol per assignor, each carrying its
`Subscription`), the leader computes the assignment with the protocol the coordinator chose and hands
it out in its SyncGroup, every member takes its partitions from its SyncGroup answer, then heartbeats
every `heartbeat_interval_ms`. Before rejoining, a member with partitions revokes all of them (eager):
`on_partitions_revoked` first (where the owner commits, as Kafka's `onJoinPrepare` does with
auto-commit), then the JoinGroup; after the SyncGroup, `on_partitions_assigned`. Errors as Kafka's
handlers treat them: MEMBER_ID_REQUIRED rejoins at once with the id given (KIP-394), UNKNOWN_MEMBER_ID
forgets the member id, ILLEGAL_GENERATION the generation, REBALANCE_IN_PROGRESS (on SyncGroup or
Heartbeat) rejoins; coordinator errors and lost answers retry after `retry_backoff_ms`; anything else
is kept in `errors` for the application. `leave()` sends a LeaveGroup.

Driving it: `poll_requests(now_ms)` returns the requests for the group coordinator, `on_response` /
`on_request_failed` take the outcome, `next_deadline_ms()` says when to poll again. Differences from
Kafka: no cooperative rebalancing, no static-membership fencing, no client-side session expiry (the
coordinator's is authoritative), and the leader assigns from the partition counts it is given (it does
not refresh metadata for topics only other members subscribe to). As Kafka's, a leader whose counts
change after it assigned (a topic whose metadata had not arrived yet, partitions added) rejoins, so
the partitions it could not see get an owner.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from epochguard.errors import EpochGuardError, Errors
from epochguard.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMember,
    LeaveGroupRequest,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)
from epochguard.types import TopicPartition

from .assignors import ASSIGNORS, Assignment, Subscription

__all__ = ["ConsumerCoordinator", "MemberState"]

_RETRY = frozenset({Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR, Errors.COORDINATOR_LOAD_IN_PROGRESS,
                    Errors.REBALANCE_IN_PROGRESS})


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    JOINING = "joining"  # JoinGroup in flight
    SYNCING = "syncing"  # SyncGroup in flight
    STABLE = "stable"


Listener = Callable[[set[TopicPartition]], None]


class ConsumerCoordinator:
    """One member of one consumer group (see module docstring)."""

    def __init__(
        self,
        group_id: str,
        *,
        assignors: Sequence[str] = ("range", "roundrobin"),
        session_timeout_ms: int = 45_000,
        rebalance_timeout_ms: int = 300_000,
        heartbeat_interval_ms: int = 3_000,
        retry_backoff_ms: int = 100,
        group_instance_id: str | None = None,
        partitions_for: Callable[[str], int | None] = lambda topic: None,
        on_partitions_revoked: Listener | None = None,
        on_partitions_assigned: Listener | None = None,
    ) -> None:
        unknown = [a for a in assignors if a not in ASSIGNORS]
        if unknown or not assignors:
            raise ValueError(f"unknown assignors {unknown}; known: {sorted(ASSIGNORS)}")
        self.group_id = group_id
        self.assignors = tuple(assignors)
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.group_instance_id = group_instance_id
        self.partitions_for = partitions_for
        self.on_partitions_revoked = on_partitions_revoked or (lambda tps: None)
        self.on_partitions_assigned = on_partitions_assigned or (lambda tps: None)
        self.state = MemberState.UNJOINED
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.leader_id = ""
        self.topics: tuple[str, ...] = ()
        self.assignment: set[TopicPartition] = set()
        self.errors: list[EpochGuardError] = []
        self._rejoin_needed = False
        self._retry_at = 0
        self._next_heartbeat = 0
        self._in_flight: dict[int, Any] = {}  # id(request) -> request
        self._unsent: list[Any] = []  # built by a handler (the SyncGroup after a JoinGroup answer)
        # The leader's partition counts its assignment was made from (Kafka's `assignmentSnapshot`)
        self._assigned_from: dict[str, int] | None = None
        self._assigned_topics: frozenset[str] = frozenset()

    # --- application ----------------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str]) -> None:
        topics = tuple(sorted(set(topics)))
        if topics != self.topics:
            self.topics = topics
            self._rejoin_needed = bool(topics) or self.state is not MemberState.UNJOINED

    @property
    def generation_and_member(self) -> tuple[int, str]:
        """What an OffsetCommit from this member carries (-1, "" when not a member of a generation)."""
        return (self.generation, self.member_id) if self.state is MemberState.STABLE else (-1, "")

    def leave(self) -> LeaveGroupRequest | None:
        """The LeaveGroup to send (None if not a member); the member forgets its id and partitions."""
        if not self.member_id:
            return None
        request = LeaveGroupRequest(self.group_id, (LeaveGroupMember(self.member_id, self.group_instance_id),))
        self._revoke()
        self.member_id, self.generation, self.state = "", -1, MemberState.UNJOINED
        self._in_flight.clear()
        self._unsent.clear()
        self._rejoin_needed = False
        return request

    # --- the driver's side ----------------------------------------------------------------------
    def poll_requests(self, now_ms: int) -> list[Any]:
        busy = bool(self._in_flight)
        if self.state is MemberState.STABLE and self._metadata_changed():
            # `rejoinNeededOrPending`: the leader assigned from other partition counts than the metadata
            # has now (a topic unknown then, or grown since), so some partitions went to nobody: rejoin
            self._rejoin_needed = True
        if self._rejoin_needed and self.topics and not busy and now_ms >= self._retry_at:
            self._revoke()  # eager: every partition goes before the JoinGroup
            self._assigned_from = None  # only this generation's leader assigns, from its metadata then
            self._send(self._join_request())
            self.state = MemberState.JOINING
        elif self.state is MemberState.STABLE and not busy and now_ms >= self._next_heartbeat:
            self._send(HeartbeatRequest(self.group_id, self.generation, self.member_id, self.group_instance_id))
        out, self._unsent = self._unsent, []
        return out

    def next_deadline_ms(self) -> int | None:
        if self._unsent:
            return 0
        if self._in_flight:
            return None
        if self._rejoin_needed and self.topics:
            return self._retry_at
        if self.state is MemberState.STABLE:
            return self._next_heartbeat
        return None

    def owns(self, request: Any) -> bool:
        return id(request) in self._in_flight

    def on_response(self, request: Any, response: Any, now_ms: int) -> None:
        if self._in_flight.pop(id(request), None) is None:
            return
        if isinstance(response, JoinGroupResponse):
            self._on_join(response, now_ms)
        elif isinstance(response, SyncGroupResponse):
            self._on_sync(response, now_ms)
        elif isinstance(response, HeartbeatResponse):
            self._on_heartbeat(response, now_ms)

    def on_request_failed(self, request: Any, now_ms: int) -> None:
        if self._in_flight.pop(id(request), None) is None:
            return
        if isinstance(request, HeartbeatRequest):
            self._next_heartbeat = now_ms + self.retry_backoff_ms
        else:
            self._rejoin(now_ms + self.retry_backoff_ms)

    # --- handlers -------------------------------------------------------------------------------
    def _on_join(self, r: JoinGroupResponse, now_ms: int) -> None:
        if r.error_code == Errors.NONE:
            self.member_id, self.generation, self.leader_id = r.member_id, r.generation_id, r.leader
            self.protocol = r.protocol_name
            assignments = self._assign(r) if r.leader == r.member_id else ()
            self.state = MemberState.SYNCING
            self._send(SyncGroupRequest(self.group_id, self.generation, self.member_id, assignments,
                                        self.group_instance_id, "consumer", self.protocol))
            return
        if r.error_code == Errors.MEMBER_ID_REQUIRED:
            self.member_id = r.member_id
            self._rejoin(now_ms)  # at once, with the id the coordinator gave
            return
        if r.error_code == Errors.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        elif r.error_code == Errors.ILLEGAL_GENERATION:
            self.generation = -1
        elif r.error_code not in _RETRY:
            self._error(r.error_code, "JoinGroup")
        self._rejoin(now_ms + self.retry_backoff_ms)

    def _metadata_changed(self) -> bool:
        if self._assigned_from is None:
            return False
        return self._counts(self._assigned_topics) != self._assigned_from

    def _counts(self, topics: Iterable[str]) -> dict[str, int]:
        return {t: n for t in topics if (n := self.partitions_for(t))}

    def _assign(self, r: JoinGroupResponse) -> tuple[SyncGroupAssignment, ...]:
        assignor = ASSIGNORS[r.protocol_name or self.assignors[0]]
        subscriptions = {m.member_id: Subscription.decode(m.metadata) for m in r.members}
        topics = {t for s in subscriptions.values() for t in s.topics}
        counts = self._counts(topics)
        self._assigned_topics, self._assigned_from = frozenset(topics), counts
        plan = assignor.assign(counts, subscriptions)
        return tuple(SyncGroupAssignment(m, Assignment(tuple(tps)).encode()) for m, tps in sorted(plan.items()))

    def _on_sync(self, r: SyncGroupResponse, now_ms: int) -> None:
        if r.error_code == Errors.NONE:
            self.assignment = set(Assignment.decode(r.assignment).partitions)
            self.state = MemberState.STABLE
            self._rejoin_needed = False
            self._next_heartbeat = now_ms + self.heartbeat_interval_ms
            self.on_partitions_assigned(set(self.assignment))
            return
        if r.error_code == Errors.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        elif r.error_code == Errors.ILLEGAL_GENERATION:
            self.generation = -1
        elif r.error_code not in _RETRY:
            self._error(r.error_code, "SyncGroup")
        self._rejoin(now_ms + (0 if r.error_code == Errors.REBALANCE_IN_PROGRESS else self.retry_backoff_ms))

    def _on_heartbeat(self, r: HeartbeatResponse, now_ms: int) -> None:
        if self.state is not MemberState.STABLE:
            return  # an answer from before a rejoin started
        if r.error_code == Errors.NONE:
            self._next_heartbeat = now_ms + self.heartbeat_interval_ms
        elif r.error_code == Errors.REBALANCE_IN_PROGRESS:
            self._rejoin(now_ms)
        elif r.error_code in (Errors.UNKNOWN_MEMBER_ID, Errors.ILLEGAL_GENERATION):
            if r.error_code == Errors.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self.generation = -1
            self._rejoin(now_ms)
        else:  # coordinator moved or busy: try again after the back-off
            self._next_heartbeat = now_ms + self.retry_backoff_ms

    # --- internals ------------------------------------------------------------------------------
    def _join_request(self) -> JoinGroupRequest:
        metadata = Subscription(self.topics).encode()
        return JoinGroupRequest(self.group_id, self.session_timeout_ms, self.member_id, "consumer",
                                tuple(JoinGroupProtocol(name, metadata) for name in self.assignors),
                                self.rebalance_timeout_ms, self.group_instance_id)

    def _error(self, code: Errors, what: str) -> None:
        self.errors.append(code.exception(f"{what} {self.group_id}: {code.name}") or EpochGuardError(
            f"{what} {self.group_id}: {code.name}"))

    def _send(self, request: Any) -> None:
        self._in_flight[id(request)] = request
        self._unsent.append(request)

    def _rejoin(self, not_before_ms: int) -> None:
        self.state = MemberState.UNJOINED
        self._rejoin_needed = True
        self._retry_at = not_before_ms

    def _revoke(self) -> None:
        if self.assignment:
            revoked, self.assignment = self.assignment, set()
            self.on_partitions_revoked(revoked)

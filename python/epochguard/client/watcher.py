"""The cluster watcher's core, sans-IO: every partition's committed position, validated at each leader-epoch
change as a KIP-320 consumer parked at the high watermark would validate it.

Mirrors Kafka's consumer-side validation (`SubscriptionState.maybeValidatePositionForCurrentLeader` and
`maybeCompleteValidation`, the request of `OffsetsForLeaderEpochUtils`: replica id -1, the current leader
epoch set) over positions a consumer never holds: the high watermark H of every partition and the leader
epoch of the record below it. The decision is the consumer's own (`consumer.validator.validate_position`,
not a copy): an end offset D below H means the committed records [D, H) are gone.

Fed answers and time, it emits requests and events (h11's shape): `poll(now_ms)` returns
`[(node_id, request)]`, the driver hands each answer to `on_response` (or `on_failure`), and
`take_events()` returns what was found. A round every `interval_ms`: Metadata (leader, leader epoch), then
per broker one ListOffsets (LATEST: the high watermark), one OffsetsForLeaderEpoch (validations, and
learning where the current epoch starts), and for a suspected truncation one Fetch of batch headers.

The epoch of the record at H - 1, exactly, from Kafka's code:
- `Partition.makeLeader` assigns the new epoch L at the log end (`maybeAssignEpochStartOffset(leaderEpoch,
  leaderEpochStartOffset)`) before anything is written in it; so the leader's answer to
  OffsetsForLeaderEpoch(L - 1) is `LeaderEpochFileCache.endOffsetFor`'s (E', S): S the start of epoch L,
  E' the last epoch before it (the epoch of the record at S - 1).
- `Partition.fetchOffsetForTimestamp` answers LATEST with the *current leader epoch*, not the record's
  (`new TimestampAndOffset(NO_TIMESTAMP, lastFetchableOffset, Optional.of(leaderEpoch))`), and with
  OFFSET_NOT_AVAILABLE while the leader's high watermark is below S (KIP-207). So an answered H >= S, and
  the record at H - 1 is in L when H > S, in E' when H == S. Both requests carry the current leader epoch
  L, so both answers come from the same leader in the same epoch (fenced otherwise).

A suspected divergence (D, E) is confirmed before it is reported: the new leader's batch at D must carry
an epoch above E (a replacement written after the divergence), or the new leader must hold nothing at D
below its high watermark. A short or racing answer (records at D still in epoch E, the `false-divergence`
scenario) is validated again at the next round, and a clean leader change validates to no event.
Where a KIP-320 consumer is blind, the watcher is not: a new leader that never had the position's epoch
(it answers an earlier one, ending above H: a second unclean election in a row) lost every record of that
epoch, [S, H), confirmed by its batch at S carrying another epoch.

Hanging transactions (KAFKA-20716: an unclean election can drop a COMMIT/ABORT marker, so the transaction never
ends and read_committed consumers stop at its first offset): on a partition the watcher saw truncated, each round
also reads the last stable offset (ListOffsets LATEST under read_committed). An LSO below the high watermark that
has not moved for `transaction_timeout_ms` (Kafka's `transaction.max.timeout.ms`: no transaction may stay open
longer, so the coordinator would have aborted it by then) is one `lso-stuck` event per episode (until the LSO
moves), naming the producers with an open transaction that DescribeProducers (KIP-664) shows on the leader, or
saying the leader would not describe them. "since" is when this watcher first saw the LSO there: it cannot see
how long it stood before.

What the wire cannot show: records above the last high watermark the watcher read (acks=1 writes no consumer
could read, or written and lost between two rounds) are outside its sight; the audit of the disks sees them.

Groups (`groups`): after a truncation, each group's committed offset (FindCoordinator, OffsetFetch v5+ with
its leader epoch) on that partition: a group committed at c > D read the phantoms [D, c) and, with a client
that does not validate committed epochs, will skip the replacements [D, c). Names are asked for directly;
`groups=None` (every group) or a pattern lists the groups of every broker first (ListGroups, as Kafka's
`Admin.listConsumerGroups` does: each broker answers for the groups it coordinates), keeping the consumer
groups (protocol type "consumer", or none: a group that only commits offsets) whose names match. A broker
that cannot answer after `LIST_GROUPS_TRIES` rounds is named in a warning: its groups were not checked.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from epochguard.client.consumer.validator import Resume, Truncated, validate_position
from epochguard.client.metadata import is_pattern, name_matcher
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderPartition,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    Request,
    Response,
)
from epochguard.records import iter_batches
from epochguard.types import (
    LATEST_TIMESTAMP,
    NO_EPOCH,
    NO_OFFSET,
    FetchPosition,
    IsolationLevel,
    LeaderAndEpoch,
    TopicPartition,
)

__all__ = [
    "GroupAffected",
    "LsoStuck",
    "PartitionWatch",
    "Stage",
    "Truncation",
    "WatchEvent",
    "WatchWarning",
    "Watcher",
    "is_pattern",
    "name_matcher",
]

# Answers after which the partition waits for the next round's metadata (Kafka's InvalidMetadataException
# and the retriable ones: the leader moved, is not ready, or our epoch is not its epoch yet).
_RETRY_NEXT_ROUND = frozenset({
    Errors.NOT_LEADER_OR_FOLLOWER,
    Errors.LEADER_NOT_AVAILABLE,
    Errors.FENCED_LEADER_EPOCH,
    Errors.UNKNOWN_LEADER_EPOCH,
    Errors.OFFSET_NOT_AVAILABLE,
    Errors.UNKNOWN_TOPIC_OR_PARTITION,
    Errors.REPLICA_NOT_AVAILABLE,
    Errors.KAFKA_STORAGE_ERROR,
})
_COORDINATOR_RETRY = frozenset({
    Errors.COORDINATOR_LOAD_IN_PROGRESS,
    Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_COORDINATOR,
})
# An admin commit refused because the group has members (or is rebalancing): it is active.
_ACTIVE_GROUP = frozenset({
    Errors.UNKNOWN_MEMBER_ID,
    Errors.ILLEGAL_GENERATION,
    Errors.REBALANCE_IN_PROGRESS,
})
LIST_GROUPS_TRIES = 3  # rounds a broker may fail ListGroups before its groups are given up (with a warning)
CONFIRM_FETCH_BYTES = 64 * 1024  # enough for a batch header; a larger batch comes back partial, header first


class Stage(enum.Enum):
    NEW = "new"  # no position yet: learn where the current epoch starts, then read the high watermark
    READY = "ready"  # a position; its high watermark is read every round
    VALIDATING = "validating"  # the leader epoch moved past the position's: OffsetsForLeaderEpoch
    CONFIRMING = "confirming"  # a divergence below the position: read the new leader's batch headers


@dataclass(slots=True)
class PartitionWatch:
    """One partition as the watcher holds it: the position (`hw`, `hw_epoch`) read under leader epoch
    `position_epoch`, and where the current leader's epoch starts (`epoch_start`, `previous_epoch`)."""

    tp: TopicPartition
    leader: int | None = None
    leader_epoch: int = NO_EPOCH  # the newest from metadata
    stage: Stage = Stage.NEW
    hw: int = NO_OFFSET
    hw_epoch: int = NO_EPOCH  # the epoch of the record at hw - 1
    position_epoch: int = NO_EPOCH  # the leader epoch the position was read (or validated) under
    learned_epoch: int = NO_EPOCH  # the leader epoch whose start is known
    epoch_start: int = NO_OFFSET  # S: where learned_epoch starts on its leader
    previous_epoch: int = NO_EPOCH  # E': the epoch before it (of the record at S - 1)
    divergence: tuple[int, int, int] | None = None  # (D, E, the old log's epoch at D or -1) while confirming
    leader_hw: int = NO_OFFSET  # the new leader's high watermark while confirming
    polled_round: int = -1  # the round whose high watermark was read
    # Hanging transactions, on a partition seen truncated: the last stable offset, since when it stands there
    # below the high watermark (-1: it does not), whether this episode was reported, and whether the producers
    # are to be described (the event waits for them).
    lso_watch: bool = False
    lso: int = NO_OFFSET
    lso_since: int = -1
    lso_reported: bool = False
    lso_describe: bool = False
    lso_round: int = -1
    retry_round: int = -1  # after a failed step: nothing until this round
    asked_by: Any = None  # the request in flight for it (one at a time)
    _latest: ListOffsetsPartition | None = None

    def latest(self) -> ListOffsetsPartition:
        """The ListOffsets LATEST entry under the current leader epoch (the same object every round)."""
        q = self._latest
        if q is None or q.current_leader_epoch != self.leader_epoch:
            q = self._latest = ListOffsetsPartition(self.tp.topic, self.tp.partition, LATEST_TIMESTAMP,
                                                    self.leader_epoch)
        return q

    def epoch_at(self, hw: int) -> int:
        """The epoch of the record at `hw - 1` under the learned epoch (see the module docstring)."""
        if hw > self.epoch_start:
            return self.learned_epoch
        return self.previous_epoch if hw > 0 else NO_EPOCH


@dataclass(frozen=True, slots=True)
class Truncation:
    """Committed records [lost_from, lost_until) of a partition are gone: the leader elected in `new_epoch`
    diverges from the log the watcher last read in `old_epoch` at offset `lost_from`."""

    topic: str
    partition: int
    old_epoch: int
    new_epoch: int
    lost_from: int
    lost_until: int
    detected_at: int  # ms since the epoch
    divergent_epoch: int = NO_EPOCH  # the last epoch both logs share
    replaced_by_epoch: int = NO_EPOCH  # the epoch of the new leader's batch at lost_from (-1: none there)

    @property
    def lost_count(self) -> int:
        return self.lost_until - self.lost_from

    def to_json(self) -> dict[str, Any]:
        return {
            "event": "truncation", "topic": self.topic, "partition": self.partition,
            "old_epoch": self.old_epoch, "new_epoch": self.new_epoch, "lost_from": self.lost_from,
            "lost_until": self.lost_until, "lost_count": self.lost_count, "detected_at": self.detected_at,
            "divergent_epoch": self.divergent_epoch, "replaced_by_epoch": self.replaced_by_epoch,
        }


@dataclass(frozen=True, slots=True)
class GroupAffected:
    """A group committed past a truncation's divergence point: it read `phantoms` (records that no longer
    exist) and, resumed as is, skips `skips` (the records that replaced them)."""

    group: str
    topic: str
    partition: int
    committed: int
    committed_epoch: int  # -1: committed without one (no client can validate it)
    phantoms: tuple[int, int]
    skips: tuple[int, int]
    detected_at: int
    rewound: bool = False
    note: str = ""  # why it was not rewound when asked (an active group: the command to run once stopped)
    rewind_epoch: int = NO_EPOCH  # the epoch a rewind commits with D: the last epoch both logs share

    def to_json(self) -> dict[str, Any]:
        return {
            "event": "group-affected", "group": self.group, "topic": self.topic, "partition": self.partition,
            "committed": self.committed, "committed_epoch": self.committed_epoch,
            "phantoms": list(self.phantoms), "skips": list(self.skips), "rewound": self.rewound,
            "note": self.note, "detected_at": self.detected_at,
        }


@dataclass(frozen=True, slots=True)
class WatchWarning:
    """Something the watcher could not do or see (an authorization error, a broker that cannot validate)."""

    message: str
    detected_at: int
    topic: str | None = None
    partition: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"event": "warning", "message": self.message, "topic": self.topic, "partition": self.partition,
                "detected_at": self.detected_at}


@dataclass(frozen=True, slots=True)
class LsoStuck:
    """A truncated partition's last stable offset `lso` has stood below the high watermark `hw` since `since`
    (ms, as this watcher saw it) for longer than the transaction timeout: a transaction lost its end marker.
    `producers`: those with an open transaction on the leader (DescribeProducers), None if it would not say."""

    topic: str
    partition: int
    lso: int
    hw: int
    since: int
    producers: tuple[dict[str, int], ...] | None
    detected_at: int
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "event": "lso-stuck", "topic": self.topic, "partition": self.partition, "lso": self.lso, "hw": self.hw,
            "since": self.since, "producers": None if self.producers is None else [dict(p) for p in self.producers],
            "note": self.note, "detected_at": self.detected_at,
        }


WatchEvent = Truncation | GroupAffected | LsoStuck | WatchWarning


# What each request in flight was for.
@dataclass(slots=True)
class _Sent:
    kind: str  # metadata | offsets | epochs | confirm | groups | coordinator | committed | rewind
    partitions: list[PartitionWatch] = field(default_factory=list)  # each asked by this request alone
    group: str = ""
    broker: int = -1  # groups: the broker whose groups are listed
    truncations: tuple[Truncation, ...] = ()
    rewinds: tuple[GroupAffected, ...] = ()  # rewind: the commits sent; committed: an earlier run's, asked again


@dataclass(slots=True)
class _Listing:
    """One ListGroups pass over the brokers, for the truncations found before it started."""

    truncations: list[Truncation]
    brokers: dict[int, int]  # broker -> failed tries; answered brokers are removed
    retry_round: int = -1
    asked: set[int] = field(default_factory=set)  # in flight


@dataclass(slots=True)
class _GroupLookup:
    truncations: list[Truncation]
    coordinator: int | None = None
    retry_round: int = -1
    to_rewind: list[GroupAffected] = field(default_factory=list)  # affected, not yet committed back to D
    # Affected groups of an earlier run not yet rewound (`unrepaired` in the state), asked again under
    # rewind_groups: rewound only if the committed offset is still the one found affected.
    recheck: list[GroupAffected] = field(default_factory=list)


class Watcher:
    """The watcher's state machine (see the module docstring)."""

    def __init__(
        self,
        *,
        topics: Iterable[str] | None = None,
        groups: Iterable[str] | None = (),
        rewind_groups: bool = False,
        interval_ms: int = 5000,
        bootstrap_nodes: Sequence[int] = (-1,),
        any_node: Callable[[Sequence[int]], int | None] | None = None,
        include_internal: bool = False,
        transaction_timeout_ms: int = 900_000,
    ) -> None:
        self.interval_ms = interval_ms
        self.transaction_timeout_ms = transaction_timeout_ms  # Kafka's transaction.max.timeout.ms
        self._topic_ok = name_matcher(topics)
        # None: every group; names are asked for directly, patterns (and None) after a ListGroups pass.
        self.groups = None if groups is None else list(groups)
        self._group_ok = name_matcher(self.groups)
        self._list_groups = self.groups is None or any(is_pattern(g) for g in self.groups)
        self._unlisted: list[Truncation] = []  # truncations waiting for the next ListGroups pass
        self._listing: _Listing | None = None
        self.rewind_groups = rewind_groups  # the one write the watcher may do, when asked
        self.include_internal = include_internal
        self.partitions: dict[TopicPartition, PartitionWatch] = {}
        self.brokers: list[int] = list(bootstrap_nodes)
        self._bootstrap = list(bootstrap_nodes)
        self._any_node = any_node
        self._rotation = 0
        self._events: list[WatchEvent] = []
        self._in_flight: dict[int, _Sent] = {}  # id(request) -> what it was for
        self.round = 0  # rounds started
        self.rounds_done = 0
        self._round_open = False  # metadata answered, steps of this round may be due
        self._metadata_sent = False
        self._metadata_failures = 0
        self._metadata_retry = False
        self._next_round_ms: int | None = None
        self.round_started_ms = 0
        self._lookups: dict[str, _GroupLookup] = {}
        # Affected groups not rewound (not asked to, or refused: active members), by (group, topic, partition):
        # kept in the state so that a later `--rewind-groups` run can still rewind them.
        self.unrepaired: dict[tuple[str, str, int], GroupAffected] = {}
        self._due: list[PartitionWatch] = []  # partitions that may have a step this round

    # --- the driver's side -------------------------------------------------------------------------
    def take_events(self) -> list[WatchEvent]:
        events, self._events = self._events, []
        return events

    @property
    def settled(self) -> bool:
        """Every partition has a position and nothing is being validated, confirmed or looked up."""
        return (
            self.rounds_done > 0 and not self._in_flight and not self._lookups
            and self._listing is None and not self._unlisted
            and all(p.stage is Stage.READY for p in self.partitions.values() if p.leader is not None)
        )

    def next_deadline_ms(self) -> int | None:
        """When `poll` next has something to send without an answer arriving first."""
        if self._in_flight:
            return None
        if self._round_open:
            return 0  # steps of this round are due (or the round closes)
        return 0 if self._next_round_ms is None else self._next_round_ms

    def poll(self, now_ms: int) -> list[tuple[int, Request]]:
        out: list[tuple[int, Request]] = []
        if not self._round_open and not self._metadata_sent:
            if self._next_round_ms is None or now_ms >= self._next_round_ms:
                if not self._metadata_retry:
                    self._metadata_failures = 0  # a new interval: every broker may be asked again
                self._metadata_retry = False
                node = self._pick_node()
                if node is not None:
                    self.round += 1
                    self.round_started_ms = now_ms
                    self._next_round_ms = now_ms + self.interval_ms
                    out.append(self._send(node, MetadataRequest(None), _Sent("metadata")))
                    self._metadata_sent = True
            return out
        if self._round_open:
            out.extend(self._partition_requests())
            out.extend(self._group_requests())
            if not self._in_flight and not out:
                self._round_open = False
                self.rounds_done += 1
        return out

    def on_response(self, node_id: int, request: Request, response: Response, now_ms: int) -> None:
        sent = self._in_flight.pop(id(request), None)
        if sent is None:
            return
        if sent.kind == "metadata":
            self._metadata_sent = False
            self._metadata_failures = 0
            if isinstance(response, MetadataResponse):
                self._on_metadata(response)
                self._round_open = True
                self._due = list(self.partitions.values())
            return
        self._dispatch(sent, request, response, now_ms)
        for p in sent.partitions:
            if p.asked_by is sent:  # not answered (left out of the answer): next round
                p.retry_round = self.round + 1
            p.asked_by = None

    def _dispatch(self, sent: _Sent, request: Request, response: Response, now_ms: int) -> None:
        """An answer to its handler (an answer of the wrong type is ignored: the step is retried)."""
        if sent.kind == "offsets" and isinstance(response, ListOffsetsResponse):
            self._on_offsets(sent, response)
        elif sent.kind == "epochs" and isinstance(response, OffsetsForLeaderEpochResponse):
            self._on_epochs(sent, request, response, now_ms)
        elif sent.kind == "confirm" and isinstance(response, FetchResponse):
            self._on_confirm(sent, response, now_ms)
        elif sent.kind == "lso" and isinstance(response, ListOffsetsResponse):
            self._on_lso(sent, response, now_ms)
        elif sent.kind == "producers":
            self._on_producers(sent, response if isinstance(response, DescribeProducersResponse) else None, now_ms)
        elif sent.kind == "groups" and isinstance(response, ListGroupsResponse):
            self._on_groups(sent, response, now_ms)
        elif sent.kind == "coordinator" and isinstance(response, FindCoordinatorResponse):
            self._on_coordinator(sent, response)
        elif sent.kind == "committed" and isinstance(response, OffsetFetchResponse):
            self._on_committed(sent, response, now_ms)
        elif sent.kind == "rewind" and isinstance(response, OffsetCommitResponse):
            self._on_rewound(sent, response, now_ms)

    def on_failure(self, request: Request, now_ms: int) -> None:
        """The request got no answer (the broker is down, slow, or answered garbage): that step waits for
        the next round; nothing else changes."""
        sent = self._in_flight.pop(id(request), None)
        if sent is None:
            return
        if sent.kind == "metadata":
            self._metadata_sent = False
            self._rotation += 1  # ask the next broker, at once while some are left untried this interval
            self._metadata_failures += 1
            if self._metadata_failures < len(self.brokers) + len(self._bootstrap):
                self._next_round_ms, self._metadata_retry = now_ms, True
            return
        for p in sent.partitions:
            p.asked_by = None
            p.retry_round = self.round + 1  # not due again this round
        if sent.kind == "groups":
            self._listing_failed(sent.broker, "no answer", now_ms)
            return
        if sent.kind == "producers":
            self._on_producers(sent, None, now_ms)  # said plainly in the event, not retried
            return
        lookup = self._lookups.get(sent.group)
        if lookup is not None:
            lookup.coordinator = None
            lookup.retry_round = self.round + 1

    # --- persistence (the `--state` file) ----------------------------------------------------------
    def positions(self) -> dict[str, Any]:
        """What a restarted watcher needs to validate what it saw before: every position, and where the
        position's epoch starts when known (-1 if not: a leader that never had it is then seen as a consumer
        sees it)."""
        state: dict[str, Any] = {
            "partitions": [
                [p.tp.topic, p.tp.partition, p.hw, p.hw_epoch, p.position_epoch,
                 p.epoch_start if p.learned_epoch == p.hw_epoch >= 0 else NO_OFFSET]
                for p in self.partitions.values() if p.hw >= 0
            ],
        }
        # Truncated partitions whose last stable offset is watched: [topic, partition, lso, since, reported].
        lso = [[p.tp.topic, p.tp.partition, p.lso, p.lso_since, p.lso_reported]
               for p in self.partitions.values() if p.lso_watch]
        if lso:
            state["lso"] = lso
        if self.unrepaired:  # [group, topic, partition, committed, committed epoch, D, rewind epoch, detected at]
            state["unrepaired"] = [[a.group, a.topic, a.partition, a.committed, a.committed_epoch, a.phantoms[0],
                                    a.rewind_epoch, a.detected_at] for a in self.unrepaired.values()]
        return state

    def restore(self, state: Mapping[str, Any]) -> None:
        """Positions from `positions()` of an earlier run: each is validated at the first round whose
        metadata shows a newer leader epoch, exactly as if the watcher had never stopped."""
        for topic, partition, hw, hw_epoch, position_epoch, *start in state.get("partitions", ()):
            tp = TopicPartition(str(topic), int(partition))
            p = self.partitions[tp] = PartitionWatch(
                tp, hw=int(hw), hw_epoch=int(hw_epoch), position_epoch=int(position_epoch),
                leader_epoch=int(position_epoch), stage=Stage.READY,
            )
            if start and int(start[0]) >= 0 and p.hw_epoch == p.position_epoch:  # a state file of before: none
                p.learned_epoch, p.epoch_start = p.hw_epoch, int(start[0])
        for topic, partition, lso, since, reported in state.get("lso", ()):
            tp = TopicPartition(str(topic), int(partition))
            p = self.partitions.setdefault(tp, PartitionWatch(tp))
            p.lso_watch, p.lso, p.lso_since, p.lso_reported = True, int(lso), int(since), bool(reported)
        for group, topic, partition, committed, committed_epoch, lost_from, epoch, detected in state.get(
                "unrepaired", ()):
            span = (int(lost_from), int(committed))
            a = GroupAffected(str(group), str(topic), int(partition), int(committed), int(committed_epoch), span,
                              span, int(detected), rewind_epoch=int(epoch))
            self.unrepaired[(a.group, a.topic, a.partition)] = a
            if self.rewind_groups and self._group_ok(a.group):
                self._lookups.setdefault(a.group, _GroupLookup([])).recheck.append(a)

    # --- rounds --------------------------------------------------------------------------------------
    def _candidates(self) -> list[int]:
        # Once every broker the last metadata named has failed, the bootstrap addresses (KIP-899's rebootstrap:
        # a KRaft answer names only the brokers alive then, and those may all be gone now).
        if self.brokers and self._metadata_failures < len(self.brokers):
            return self.brokers
        return self._bootstrap

    def _pick_node(self) -> int | None:
        candidates = self._candidates()
        if self._any_node is not None:
            return self._any_node(candidates)
        node = candidates[self._rotation % len(candidates)]
        return node

    def _send(self, node: int, request: Request, sent: _Sent) -> tuple[int, Request]:
        self._in_flight[id(request)] = sent
        return node, request

    def _on_metadata(self, response: MetadataResponse) -> None:
        if response.brokers:
            self.brokers = sorted(b.node_id for b in response.brokers)
        trusted = response.version >= 9
        for topic in response.topics:
            if topic.error_code != Errors.NONE or (topic.is_internal and not self.include_internal):
                continue
            if not self._topic_ok(topic.name):
                continue
            name, partitions = topic.name, self.partitions
            for part in topic.partitions:
                p = partitions.get((name, part.partition_index))  # type: ignore[call-overload]  # a tuple is a TopicPartition's key
                if p is None:
                    tp = TopicPartition(name, part.partition_index)
                    p = partitions[tp] = PartitionWatch(tp)
                epoch = part.leader_epoch if trusted else NO_EPOCH
                if epoch < p.leader_epoch:
                    continue  # stale metadata from a broker behind (KIP-232): keep what we know
                p.leader = part.leader_id if part.leader_id >= 0 else None
                p.leader_epoch = epoch
                if p.stage is Stage.READY and epoch > p.position_epoch:
                    p.stage = Stage.VALIDATING  # `maybeValidatePositionForCurrentLeader`
                elif p.stage is Stage.CONFIRMING and p.divergence is not None and epoch > p.position_epoch:
                    # Leadership moved again before the confirmation: validate against the newest leader.
                    p.stage, p.divergence = Stage.VALIDATING, None

    def _step(self, p: PartitionWatch) -> tuple[str, int] | None:
        """What the partition needs next this round: ("offsets" | "confirm", 0) or ("epochs", the epoch to
        ask for); None if nothing (in flight, no leader, backing off, or done this round)."""
        if p.asked_by is not None or p.leader is None or p.retry_round > self.round or p.leader_epoch < 0:
            return None
        if p.stage is Stage.VALIDATING:
            if p.hw <= 0 or p.hw_epoch < 0:
                p.stage, p.position_epoch = Stage.READY, p.leader_epoch  # nothing below it to lose
                return None
            return "epochs", p.hw_epoch
        if p.stage is Stage.CONFIRMING:
            return ("offsets", 0) if p.leader_hw < 0 else ("confirm", 0)
        if p.learned_epoch != p.leader_epoch:
            if p.leader_epoch > 0:
                return "epochs", p.leader_epoch - 1
            p.learned_epoch, p.epoch_start, p.previous_epoch = 0, 0, NO_EPOCH  # epoch 0 starts the log
        return ("offsets", 0) if p.polled_round < self.round else None

    def _partition_requests(self) -> list[tuple[int, Request]]:
        # Only partitions that may have a step: all of them when the round opens, then those answered since
        # (a round of 10,000 partitions does not rescan them all for every answer).
        due, self._due = self._due, []
        by_node: dict[tuple[str, int], list[tuple[PartitionWatch, int]]] = {}
        rnd, ready = self.round, Stage.READY
        for p in due:
            if (p.stage is ready and p.learned_epoch == p.leader_epoch and p.asked_by is None
                    and p.retry_round <= rnd and p.leader is not None):
                # The common case, inline: a position to read again this round, or nothing.
                if p.polled_round < rnd:
                    by_node.setdefault(("offsets", p.leader), []).append((p, 0))
                elif p.lso_watch:
                    kind = "producers" if p.lso_describe else "lso" if p.lso_round < rnd else None
                    if kind is not None:
                        by_node.setdefault((kind, p.leader), []).append((p, 0))
                continue
            step = self._step(p)
            if step is not None:
                assert p.leader is not None
                by_node.setdefault((step[0], p.leader), []).append((p, step[1]))
        out: list[tuple[int, Request]] = []
        for (kind, node), entries in by_node.items():
            sent = _Sent(kind, [p for p, _ in entries])
            for p, _ in entries:
                p.asked_by = sent
            out.append(self._send(node, self._request(kind, entries), sent))
        return out

    @staticmethod
    def _request(kind: str, entries: list[tuple[PartitionWatch, int]]) -> Request:
        """One broker's request of a kind: every partition current-leader-epoch fenced."""
        if kind == "offsets":
            return ListOffsetsRequest(tuple(p.latest() for p, _ in entries),
                                      isolation_level=IsolationLevel.READ_UNCOMMITTED)
        if kind == "lso":  # LATEST under read_committed: the last stable offset
            return ListOffsetsRequest(tuple(p.latest() for p, _ in entries),
                                      isolation_level=IsolationLevel.READ_COMMITTED)
        if kind == "producers":
            return DescribeProducersRequest(tuple(p.tp for p, _ in entries))
        if kind == "epochs":
            return OffsetsForLeaderEpochRequest(tuple(
                OffsetForLeaderPartition(p.tp.topic, p.tp.partition, asked, p.leader_epoch) for p, asked in entries
            ))
        return FetchRequest(
            tuple(
                FetchPartition(p.tp.topic, p.tp.partition, p.divergence[0] if p.divergence else 0,
                               current_leader_epoch=p.leader_epoch, partition_max_bytes=CONFIRM_FETCH_BYTES)
                for p, _ in entries
            ),
            max_wait_ms=0, min_bytes=0, max_bytes=CONFIRM_FETCH_BYTES * len(entries),
        )

    # --- answers -----------------------------------------------------------------------------------
    def _answer_for(self, sent: _Sent, tp: tuple[str, int], error: Errors) -> PartitionWatch | None:
        """The partition an answer is for, if this request asked for it (a broker answering for partitions
        it was not asked about is ignored); an error defers it to the next round. Rounds do not overlap
        (metadata is read only when nothing is in flight), so the leader epoch it was asked under holds."""
        p = self.partitions.get(tp)  # type: ignore[call-overload]
        if p is None or p.asked_by is not sent:
            return None
        p.asked_by = None
        if error != Errors.NONE:
            p.retry_round = self.round + 1
            return None
        return p

    def _on_offsets(self, sent: _Sent, response: ListOffsetsResponse) -> None:
        for answer in response.partitions:
            p = self._answer_for(sent, (answer.topic, answer.partition_index), answer.error_code)
            if p is None or answer.offset < 0:
                continue
            if p.stage is Stage.CONFIRMING:
                p.leader_hw = answer.offset
                self._due.append(p)  # next: the confirmation Fetch
                continue
            if p.stage is Stage.VALIDATING or p.learned_epoch != p.leader_epoch:
                continue
            p.polled_round = self.round
            if p.stage is Stage.NEW or answer.offset > p.hw:
                p.hw, p.hw_epoch = answer.offset, p.epoch_at(answer.offset)
            p.position_epoch, p.stage = p.leader_epoch, Stage.READY
            if p.lso_watch:
                self._due.append(p)  # next: its last stable offset

    def _on_lso(self, sent: _Sent, response: ListOffsetsResponse, now_ms: int) -> None:
        """An episode starts when the LSO is first seen below the high watermark at a value, and ends when it
        moves (a moving LSO is transactions completing, not a hanging one)."""
        for answer in response.partitions:
            p = self._answer_for(sent, (answer.topic, answer.partition_index), answer.error_code)
            if p is None or answer.offset < 0:
                continue
            p.lso_round = self.round
            if answer.offset > p.hw and p.stage is Stage.READY and p.learned_epoch == p.leader_epoch:
                # The high watermark moved since this round read it: the LSO is at most the high watermark
                # when given out, so the records below it were committed and readable: the position follows.
                p.hw, p.hw_epoch = answer.offset, p.epoch_at(answer.offset)
            if answer.offset >= p.hw:
                p.lso_since, p.lso_reported = -1, False
            elif answer.offset != p.lso or p.lso_since < 0:
                p.lso_since, p.lso_reported = now_ms, False  # a new episode: first seen below here, now
            p.lso = answer.offset
            if p.lso_since >= 0 and not p.lso_reported and now_ms - p.lso_since >= self.transaction_timeout_ms:
                p.lso_describe = True
                self._due.append(p)  # next: who holds it (DescribeProducers), then the event

    def _on_producers(self, sent: _Sent, response: DescribeProducersResponse | None, now_ms: int) -> None:
        """The event of each partition asked, with its producers holding a transaction open (or why not)."""
        answers = {} if response is None else {a.tp: a for a in response.partitions}
        for p in sent.partitions:
            if p.asked_by is sent:
                p.asked_by = None
            if not p.lso_describe:
                continue
            p.lso_describe, p.lso_reported = False, True
            a = answers.get(p.tp)
            producers: tuple[dict[str, int], ...] | None = None
            if a is None:
                note = "the leader did not answer DescribeProducers: the producers are not known"
            elif a.error_code != Errors.NONE:
                note = f"the leader refused DescribeProducers ({a.error_code.name}): the producers are not known"
            else:
                note = ""
                producers = tuple(
                    {"producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
                     "current_txn_start_offset": s.current_txn_start_offset, "last_timestamp": s.last_timestamp}
                    for s in sorted(a.active_producers, key=lambda s: (s.current_txn_start_offset, s.producer_id))
                    if s.current_txn_start_offset >= 0)
            self._events.append(LsoStuck(p.tp.topic, p.tp.partition, p.lso, p.hw, p.lso_since, producers, now_ms,
                                         note))

    def _on_epochs(self, sent: _Sent, request: Request, response: OffsetsForLeaderEpochResponse, now_ms: int) -> None:
        asked = {}
        if isinstance(request, OffsetsForLeaderEpochRequest):
            asked = {part.tp: part.leader_epoch for part in request.partitions}
        for answer in response.partitions:
            p = self._answer_for(sent, answer.tp, answer.error_code)
            if p is None:
                if answer.error_code == Errors.TOPIC_AUTHORIZATION_FAILED:
                    self._warn(f"not authorized to describe {answer.tp.topic}", now_ms, answer.tp)
                continue
            self._due.append(p)  # next: confirm, learn, or read the high watermark
            if p.stage is Stage.VALIDATING:
                self._validate(p, answer.leader_epoch, answer.end_offset, now_ms)
            elif asked.get(answer.tp) == p.leader_epoch - 1:
                # Learning: (E', S) for L - 1 is where the current epoch L starts (module docstring).
                p.learned_epoch, p.epoch_start = p.leader_epoch, answer.end_offset
                p.previous_epoch = answer.leader_epoch

    def _validate(self, p: PartitionWatch, epoch: int, end_offset: int, now_ms: int) -> None:
        position = FetchPosition(p.hw, p.hw_epoch, LeaderAndEpoch(p.leader, p.leader_epoch))
        outcome = validate_position(position, "none", epoch, end_offset)
        start = p.epoch_start if p.learned_epoch == p.hw_epoch else NO_OFFSET  # where the position's epoch starts
        if 0 <= epoch < p.hw_epoch and 0 <= start < p.hw and start < end_offset:
            # The new leader never had the position's epoch (it answers an earlier one): none of that epoch's
            # records [S, H) is there, even when its end of the earlier epoch lies above H (consecutive unclean
            # elections, out of a KIP-320 consumer's sight). A follower places it so, with its own epochs
            # (`AbstractFetcherThread.getOffsetTruncationState`): min(the leader's end, its own end of E).
            p.stage, p.divergence, p.leader_hw = Stage.CONFIRMING, (start, epoch, p.hw_epoch), NO_OFFSET
        elif isinstance(outcome, Resume):
            p.stage, p.position_epoch = Stage.READY, p.leader_epoch  # a clean change: the position holds
        elif isinstance(outcome, Truncated) and outcome.divergent is not None:
            p.stage, p.divergence = Stage.CONFIRMING, (outcome.divergent.offset, epoch, NO_EPOCH)
            p.leader_hw = NO_OFFSET
        else:
            # No epoch at or below the position's on the new leader, nor any after it: Kafka answers so only
            # for an empty epoch cache. Nothing to compare with; the position is re-read there.
            self._warn(f"{p.tp.topic}-{p.tp.partition}: leader {p.leader} (epoch {p.leader_epoch}) cannot "
                       f"place offset {p.hw} of epoch {p.hw_epoch}; position re-read", now_ms, p.tp)
            self._restart(p)

    def _on_confirm(self, sent: _Sent, response: FetchResponse, now_ms: int) -> None:
        for data in response.partitions:
            p = self._answer_for(sent, data.tp, data.error_code)
            if p is None or p.stage is not Stage.CONFIRMING or p.divergence is None:
                continue
            self._due.append(p)
            divergent, epoch, old = p.divergence
            first = None
            for batch in iter_batches(data.records, verify_crc=False, allow_partial_tail=True, headers_only=True):
                if batch.last_offset >= divergent:
                    first = batch
                    break
            # An epoch has one leader: at one offset, another epoch than the old log's is another record.
            if first is not None and first.base_offset <= divergent and (
                    first.partition_leader_epoch != old if old >= 0 else first.partition_leader_epoch > epoch):
                self._truncated(p, divergent, epoch, first.partition_leader_epoch, now_ms)
            elif first is None and p.leader_hw <= divergent:
                self._truncated(p, divergent, epoch, NO_EPOCH, now_ms)  # nothing at all at D on the new leader
            else:
                # The records at D are still there in the validated epoch: a short (or racing) answer, not a
                # truncation. Validate again next round.
                p.stage, p.divergence, p.retry_round = Stage.VALIDATING, None, self.round + 1

    def _truncated(self, p: PartitionWatch, divergent: int, epoch: int, replaced_by: int, now_ms: int) -> None:
        t = Truncation(p.tp.topic, p.tp.partition, p.position_epoch, p.leader_epoch, divergent, p.hw, now_ms,
                       epoch, replaced_by)
        self._events.append(t)
        p.lso_watch = True  # its transactions may have lost their end markers (KAFKA-20716)
        if self._list_groups:
            self._unlisted.append(t)
        elif self.groups:
            for group in self.groups:
                self._lookups.setdefault(group, _GroupLookup([])).truncations.append(t)
        self._restart(p)

    def _restart(self, p: PartitionWatch) -> None:
        """Forget the position: it is read again from the current leader."""
        p.stage, p.hw, p.hw_epoch, p.divergence, p.leader_hw = Stage.NEW, NO_OFFSET, NO_EPOCH, None, NO_OFFSET

    def _warn(self, message: str, now_ms: int, tp: TopicPartition | None = None) -> None:
        self._events.append(WatchWarning(message, now_ms, tp.topic if tp else None, tp.partition if tp else None))

    # --- groups ------------------------------------------------------------------------------------
    def _listing_requests(self) -> list[tuple[int, Request]]:
        """ListGroups to every broker not yet answered in the current pass (one pass at a time)."""
        if self._listing is None and self._unlisted:
            self._listing = _Listing(self._unlisted, dict.fromkeys(self.brokers, 0))
            self._unlisted = []
        listing = self._listing
        if listing is None or listing.retry_round > self.round:
            return []
        out = []
        for broker in listing.brokers:
            if broker not in listing.asked:
                listing.asked.add(broker)
                out.append(self._send(broker, ListGroupsRequest(), _Sent("groups", broker=broker)))
        return out

    def _on_groups(self, sent: _Sent, response: ListGroupsResponse, now_ms: int) -> None:
        listing = self._listing
        if listing is None or sent.broker not in listing.brokers:
            return
        if response.error_code != Errors.NONE:
            self._listing_failed(sent.broker, response.error_code.name, now_ms)
            return
        for g in response.groups:
            if g.protocol_type in ("consumer", "") and self._group_ok(g.group_id):
                lookup = self._lookups.setdefault(g.group_id, _GroupLookup([]))
                lookup.truncations.extend(t for t in listing.truncations if t not in lookup.truncations)
        self._listing_answered(sent.broker)

    def _listing_failed(self, broker: int, why: str, now_ms: int) -> None:
        listing = self._listing
        if listing is None or broker not in listing.brokers:
            return
        listing.asked.discard(broker)
        listing.brokers[broker] += 1
        listing.retry_round = self.round + 1
        if listing.brokers[broker] >= LIST_GROUPS_TRIES:
            self._warn(f"could not list the groups broker {broker} coordinates ({why}, {LIST_GROUPS_TRIES} "
                       "tries): groups there were not checked for these truncations", now_ms)
            self._listing_answered(broker)

    def _listing_answered(self, broker: int) -> None:
        listing = self._listing
        if listing is not None:
            listing.brokers.pop(broker, None)
            listing.asked.discard(broker)
            if not listing.brokers:
                self._listing = None

    def _group_requests(self) -> list[tuple[int, Request]]:
        out: list[tuple[int, Request]] = self._listing_requests()
        busy = {s.group for s in self._in_flight.values() if s.group}
        for group, lookup in self._lookups.items():
            if group in busy or lookup.retry_round > self.round:
                continue
            if lookup.coordinator is None:
                node = self._pick_node()
                if node is not None:
                    out.append(self._send(node, FindCoordinatorRequest(key=group, coordinator_keys=(group,)),
                                          _Sent("coordinator", group=group)))
                continue
            if lookup.to_rewind:
                out.append(self._send(lookup.coordinator, self._rewind_request(group, lookup.to_rewind),
                                      _Sent("rewind", group=group, rewinds=tuple(lookup.to_rewind))))
                continue
            tps = tuple(sorted({TopicPartition(t.topic, t.partition) for t in lookup.truncations}
                               | {TopicPartition(a.topic, a.partition) for a in lookup.recheck}))
            request = OffsetFetchRequest(group, tps)
            out.append(self._send(lookup.coordinator, request,
                                  _Sent("committed", group=group, truncations=tuple(lookup.truncations),
                                        rewinds=tuple(lookup.recheck))))
        return out

    def _rewind_request(self, group: str, affected: list[GroupAffected]) -> OffsetCommitRequest:
        """An admin commit (generation -1, no member id: `AdminClient.alterConsumerGroupOffsets`) of the
        divergence point D with the epoch of the record before it on the new leader (the last epoch both logs
        share), as a consumer that had read up to D would commit. The coordinator takes it only from an
        empty group (`ClassicGroup.validateOffsetCommit` / `ConsumerGroup.validateOffsetCommit`: a member epoch
        below 0 is accepted only while the group has no member), so an active group is refused there, never
        rewound under its members' feet."""
        parts = [OffsetCommitPartition(a.topic, a.partition, a.phantoms[0], a.rewind_epoch,
                                       "epochguard watch --rewind-groups: back to the divergence point")
                 for a in affected]
        return OffsetCommitRequest(group, tuple(parts), generation_id_or_member_epoch=-1, member_id="")

    def _on_coordinator(self, sent: _Sent, response: FindCoordinatorResponse) -> None:
        lookup = self._lookups.get(sent.group)
        if lookup is None:
            return
        for c in response.coordinators:
            if c.error_code == Errors.NONE and c.node_id >= 0:
                lookup.coordinator = c.node_id
                return
        lookup.retry_round = self.round + 1

    def _on_committed(self, sent: _Sent, response: OffsetFetchResponse, now_ms: int) -> None:
        lookup = self._lookups.get(sent.group)
        if lookup is None:
            return
        if response.error_code in _COORDINATOR_RETRY:
            lookup.coordinator, lookup.retry_round = None, self.round + 1
            return
        if response.error_code != Errors.NONE:
            self._warn(f"group {sent.group}: OffsetFetch answered {response.error_code.name}", now_ms)
            del self._lookups[sent.group]
            return
        committed = {a.tp: a for a in response.partitions if a.error_code == Errors.NONE}
        for t in sent.truncations:
            c = committed.get(TopicPartition(t.topic, t.partition))
            if c is None or c.committed_offset <= t.lost_from:
                continue  # nothing committed, or at/below the divergence point: it reads the replacements
            affected = GroupAffected(
                sent.group, t.topic, t.partition, c.committed_offset, c.committed_leader_epoch,
                (t.lost_from, c.committed_offset), (t.lost_from, c.committed_offset), now_ms,
                rewind_epoch=t.divergent_epoch,
            )
            if self.rewind_groups:
                lookup.to_rewind.append(affected)  # reported once the commit is answered
            else:
                self._events.append(affected)
                self.unrepaired[(affected.group, affected.topic, affected.partition)] = affected
        for a in sent.rewinds:  # found affected by an earlier run, not rewound then
            c = committed.get(TopicPartition(a.topic, a.partition))
            if c is not None and c.committed_offset == a.committed:
                lookup.to_rewind.append(a)
                continue
            del self.unrepaired[(a.group, a.topic, a.partition)]
            now = "no committed offset any more" if c is None else f"committed {c.committed_offset} now"
            self._warn(f"group {a.group} was found affected at {a.committed} and has {now}: it resumed (and "
                       f"skipped [{a.phantoms[0]}, {a.committed})) or was reset since; not rewound to "
                       f"{a.phantoms[0]}, which would re-deliver what it read after", now_ms,
                       TopicPartition(a.topic, a.partition))
        lookup.recheck = [a for a in lookup.recheck if a not in sent.rewinds]
        rewinding = {(a.topic, a.partition) for a in lookup.to_rewind}
        lookup.truncations = [t for t in lookup.truncations
                              if t not in sent.truncations or (t.topic, t.partition) in rewinding]
        self._maybe_done(sent.group)

    def _maybe_done(self, group: str) -> None:
        lookup = self._lookups.get(group)
        if lookup is not None and not lookup.truncations and not lookup.to_rewind and not lookup.recheck:
            del self._lookups[group]

    def _on_rewound(self, sent: _Sent, response: OffsetCommitResponse, now_ms: int) -> None:
        lookup = self._lookups.get(sent.group)
        if lookup is None:
            return
        errors = {(a.topic, a.partition_index): a.error_code for a in response.partitions}
        if any(e in _COORDINATOR_RETRY for e in errors.values()):
            lookup.coordinator, lookup.retry_round = None, self.round + 1
            return
        for a in sent.rewinds:
            error = errors.get((a.topic, a.partition), Errors.UNKNOWN_SERVER_ERROR)
            note = "" if error == Errors.NONE else (
                "the group has active members: stop them, then run `epochguard watch --rewind-groups --once "
                f"--group {a.group}` with this watcher's --state (it keeps the group until then)"
                if error in _ACTIVE_GROUP else f"the commit was refused: {error.name}")
            result = GroupAffected(a.group, a.topic, a.partition, a.committed, a.committed_epoch, a.phantoms,
                                   a.skips, now_ms, error == Errors.NONE, note, a.rewind_epoch)
            self._events.append(result)
            if result.rewound:
                self.unrepaired.pop((a.group, a.topic, a.partition), None)
            else:
                self.unrepaired[(a.group, a.topic, a.partition)] = result
        done = {(a.topic, a.partition) for a in sent.rewinds}
        lookup.to_rewind = [a for a in lookup.to_rewind if (a.topic, a.partition) not in done]
        lookup.truncations = [t for t in lookup.truncations if (t.topic, t.partition) not in done]
        self._maybe_done(sent.group)

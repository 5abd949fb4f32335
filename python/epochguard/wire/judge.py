"""Verdicts on real clients, from what the server saw them do: the checker of `epochguard serve`.

A divergence event: records a client was served on a partition are no longer the acting leader's (an
unclean election replaced them, or a zombie served what the leader never had). It is found the way a
KIP-320 consumer finds it: the leader's `end_offset_for(epoch of the last served batch)` lies below
the end of what was served; the divergence point is that end offset. The client's next moves on
that partition decide the verdict:

- detected: an OffsetsForLeaderEpoch exchange (or a Fetch answered with a DivergingEpoch), then a
  fetch at or below the divergence point, or no more fetches (it raised);
- reset: a ListOffsets exchange, then a fetch at the offset it returned, at or below the divergence
  point (or a refetch from below the divergence point without asking: a restart from an older
  position). A refetch at exactly the offset of the fetch that was answered with the replaced records
  withdraws the event: that answer never reached the client (its connection died with the old
  leader), so it read none of them;
- silent: a fetch above the divergence point with no such exchange, or after an answer that told it
  to go back, or after a ListOffsets answer above it (it keeps phantom records and skips the
  replacements);
- stuck: none of these within `STUCK_AFTER_STEPS` of the event or of the last records it was served
  since (a zombie still serving its old epoch), while the leader has data.

- undetectable: records it was served were replaced below where KIP-320 can place the divergence: the
  acting leader ends the epoch of the client's position at or above the first replaced batch (compared by
  CRC at its base offset whenever the leader, its epoch or its log's generation changes), so no validation
  can find it (consecutive unclean elections: the leader never had that epoch). Reported, never blamed:
  `located` says where KIP-320 places it, `how` what the client did: `continued` past the first replaced
  record, `rewound` to it or below, `stopped`.

A divergence is also handed over (`handoff-truncation`; librdkafka#5158, sarama#1181, KAFKA-19902): a
member commits a position, an unclean election truncates below it, and the member taking the partition
over is answered that position by OffsetFetch. Its epoch is that of the batch holding offset-1 as the
committer was served it (the committed epoch when the committer was not seen fetching); when the leader
ends that epoch below the position, the new member has an event of its own (`from` is `commit`), judged
by its next moves as above. A member that leaves its group (LeaveGroup) is no longer judged on what it
was served, nor on answers to fetches it had in flight then: it consumes no more of them.

Each verdict says how and what it cost: `detected` is `rewound` (fetched again at or below the point)
or `raised` (validated, then fetched no more: the application was told); `reset` goes `back` (to a
ListOffsets answer, or a restart from an older position); `redelivered` counts the records below the
divergence point the client is served a second time, `skipped` the leader's records from the point
on that a `silent` client jumps over (the replacements). A `stuck` client that kept asking meanwhile
(`SPIN_REQUESTS` of one request type for the partition within the bound: validations or ListOffsets
retried at round-trip speed, librdkafka#4425; fetches answered with an error at once) is said to `spin`.

Also per client: metadata epochs going backwards (the `current_leader_epoch` it sends, checked by
`sim/invariants.py`'s `metadata-epoch-monotonic` rule, the one implementation), commits without a
leader epoch, with an epoch older than the batch holding offset-1 as it was served (KAFKA-19902: the
next owner validates a stale position), or beyond an open divergence point; request storms (one client
asking OffsetsForLeaderEpoch or ListOffsets for one partition `STORM_REQUESTS` times within
`STORM_STEPS`: librdkafka#4425's validation loop, #4620's ListOffsets loop); acks=all batches no
longer in the leader's log (the `acked-durable` rule at batch granularity: the leader's batch at the
acknowledged offset has another CRC, exempt after an unclean election as there), and what it did after
OFFSET_NOT_AVAILABLE (KIP-207).

A stall: a client that kept asking (its last request at least `STUCK_AFTER_STEPS` after it was last
served a new record of a partition it consumes) while the leader's log went on past what it was served:
a partition never consumed again, with or without a divergence (librdkafka#4425, #4492).

A false alarm: with no divergence open, a client that got an OffsetsForLeaderEpoch answer below the end
of what it was served fetches next at exactly that answer, or below where its last fetch began: it went
back although the leader's log never lost a record (`false-divergence`: redpanda#5435). Reported, never
blamed: the answer is indistinguishable from a truncation.

Out of range: a fetch from the leader answered OFFSET_OUT_OF_RANGE at an offset below its log start
(DeleteRecords or retention moved it: `log-start-jump`), or a first fetch at or past the log start when
what the client had been served ends below it (it asked for the log's bounds instead). Not a divergence:
the records were deleted, not replaced. The client's next successful fetch from the leader says what it
did: `start` (at the log start: it lost only what was deleted), `forward` (past it: `skipped` retained
records, a reset to the log end; franz-go #1416/#1428, Aiven tiered-storage#663), or `stopped` (none
within `STUCK_AFTER_STEPS`: raised, as auto.offset.reset=none asks, or stuck).

Follower out of range (KIP-392; `follower-fetch-lag`): a fetch from a follower (a preferred read replica)
answered OFFSET_OUT_OF_RANGE. That replica is behind; only the leader can say whether the offset is out of
range (Java's consumer clears the preferred replica and fetches the same offset from the leader: apache/kafka
PR #6731). The client's next move on the partition says what it did: `leader` (it fetched the same offset
from the leader), `replica` (it fetched the same offset from the replica again until it was served), `reset`
(a ListOffsets, or a fetch at another offset, with no fetch from the leader first: the `follower-reset` check;
redpanda PR #16146, librdkafka#4620), or `stopped` (nothing within `STUCK_AFTER_STEPS`). A reset's first fetch
answered says where it landed (`to`); below the position it is also a false alarm (nothing diverged: the
delivery log sees the re-read).

A stale leader hint (KIP-951; `stale-leader-hint`, franz-go#1413, AutoMQ#3546): a Produce or Fetch answer whose
`CurrentLeader` hint is not the controller's leader and epoch; `regress` when its epoch is no newer than the
client knows (the largest it was told by Metadata or sent itself for the partition). The client's next move
says what it did with it: `metadata` (it asked for metadata first: correct), `followed` (its next request of
that kind for the partition went to the hinted broker; with a regressing hint naming a broker that does not
lead, the `hint-regress` check: it acted on a hint that could only take it backwards), `elsewhere` (to a third
broker, without asking), `retried` (asked the answering broker again and got another stale hint), or `stopped`
(nothing within `STUCK_AFTER_STEPS`); `retried` (the count) is how often it asked the answering broker again
before its move.

An aborted read: a read_committed Fetch answer that hands a client (after the client's own filtering of
control batches and of the aborted transactions the answer names) a record whose transaction the
scenario's simulated producer had aborted, its ABORT acknowledged (Jepsen's G1a; `marker-truncated`,
KAFKA-20716: an unclean election lost the marker). The cluster's doing: reported, never blamed.

A divergence whose replaced part is transaction markers only (`marker-truncated`: the ABORT marker the
unclean election lost, served to a client whose position went past it) is flagged `marker`: no record
the client consumed is gone, so its delivery log cannot see the event, only what the client did next.

The judge sees only exchanges, faults and steps, so the same trace replayed gives the same verdicts.
"""

from __future__ import annotations

import itertools
import struct
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from epochguard.client.consumer.fetch_collector import CompletedFetch
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    FetchRequest,
    FetchResponse,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetsForLeaderEpochRequest,
    ProduceRequest,
    ProduceResponse,
)
from epochguard.records import batch_index, iter_batches
from epochguard.sim.invariants import METADATA_EPOCH_MONOTONIC
from epochguard.types import FetchPosition, IsolationLevel, TopicPartition
from epochguard.wire.anomalies import Ack, Anomaly, Healed, History, Moved, Read, Txn, find_anomalies

__all__ = ["Judge", "Divergence", "batch_spans", "leader_view", "STUCK_AFTER_STEPS", "VERDICTS"]

_SEQUENCE_LOST = (Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, Errors.UNKNOWN_PRODUCER_ID)
STUCK_AFTER_STEPS = 1000  # 10 s of the server's clock with no way forward
VERDICTS = ("detected", "reset", "silent", "stuck", "undetectable")
_OFFSET_COMMIT_EPOCH_VERSION = 6
STORM_REQUESTS, STORM_STEPS = 50, 100  # 50 asks in 1 s of the server's clock; a retry with back-off asks ~10
SPIN_REQUESTS = 100  # within STUCK_AFTER_STEPS: 10 a second; a long-polling fetch at 500 ms asks 20
_SERVED_SPANS = 256  # per client and partition: enough to place any commit near the client's position
HISTORY_LIMIT = 200_000  # served batches and acks kept per client for its anomalies (a benchmark's run is longer)
ACKED_BYTES = 64 << 20  # acknowledged batches kept per client; the healed log decoded only up to HISTORY_LIMIT records
_PENDING_ANSWERS = 8  # per client and partition: fetch answers a later fetch may show it never consumed whole
_TRANSACTIONAL, _CONTROL = 0x10, 0x20  # record batch attributes


def _acked_records(tp: TopicPartition, offset: int, records: bytes, epoch: int, step: int) -> list[Ack]:
    """The records of an acknowledged Produce request's batches, at the offsets it was answered with."""
    out: list[Ack] = []
    first = None
    for batch in iter_batches(records, verify_crc=False):
        for r in batch.records():
            first = r.offset if first is None else first
            out.append(Ack((tp.topic, tp.partition), offset + r.offset - first, r.value, epoch, at=step))
    return out


def leader_view(log: Any) -> tuple[dict[int, int], list[tuple[int, int]], list[Txn]]:
    """A leader's log to its high watermark as the anomalies read it, from the batch headers alone (no record
    decoded, no CRC computed): each data batch's CRC at its base offset, the spans of the batches a
    read_committed consumer reads (no control batch, no aborted transaction's), and the decided transactions
    (a producer's transactional batches from its first one to its marker, committed unless the log lists
    that transaction aborted; one with no marker below the high watermark is still open: none)."""
    hw, aborted = log.high_watermark, log.aborted_transactions
    values: dict[int, int] = {}
    spans: list[tuple[int, int]] = []
    transactions: list[Txn] = []
    ongoing: dict[int, tuple[int, list[tuple[int, int]]]] = {}  # producer id -> (first, its batches)
    for segment in log.segments:
        for b in segment.batches:
            if b.base_offset >= hw or b.last_offset < log.log_start_offset:
                continue  # past the high watermark, or deleted
            if b.is_control:  # a marker: no record a consumer reads; it decides its producer's transaction
                first, batches = ongoing.pop(b.producer_id, (-1, []))
                if batches:
                    transactions.append(Txn(first, batches[-1][1], tuple(batches), not any(
                        t.producer_id == b.producer_id and t.first_offset == first for t in aborted)))
                continue
            (values[b.base_offset],) = struct.unpack_from(">I", segment.data, b.position + 17)
            if b.is_transactional:
                ongoing.setdefault(b.producer_id, (b.base_offset, []))[1].append((b.base_offset, b.last_offset))
                if any(t.producer_id == b.producer_id and t.first_offset <= b.base_offset <= t.last_offset
                       for t in aborted):
                    continue  # an aborted transaction's records: held (no phantom), no index
            spans.append((b.base_offset, b.last_offset))
    return values, spans, transactions


def _leader_key(cluster: Any, tp: TopicPartition) -> tuple[int, int, int] | None:
    """(acting leader, leader epoch, its log's generation) of `tp`; None while no broker leads it."""
    leader = cluster.acting_leader(tp)
    if leader is None:
        return None
    return leader, cluster.controller.state(tp).leader_epoch, cluster.log(leader, tp).generation


def batch_spans(records: bytes) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, partition leader epoch, crc) of each whole batch in `records`."""
    if not records:
        return []
    out = []
    for position, _size, base, last in batch_index(records, allow_partial_tail=True):
        epoch, _magic, crc = struct.unpack_from(">ibI", records, position + 12)
        out.append((base, last, epoch, crc))
    return out


@dataclass
class Divergence:
    client: str
    tp: TopicPartition
    offset: int  # the divergence point: the served records from here on are not the leader's
    served_end: int  # the end of what the client had been served
    served_epoch: int
    leader_epoch: int  # of the leader that no longer has them
    step: int
    verdict: str | None = None
    detail: str = ""
    verdict_step: int | None = None
    validated: int | None = None  # end offset of a validation answer since the event
    reset_to: int | None = None  # offset a ListOffsets answer gave since the event
    served_from: int = -1  # the fetch offset of the request whose answer carried the replaced records
    how: str = ""  # detected: rewound / raised; reset: back
    redelivered: int = 0  # records below the divergence point served again
    skipped: int = 0  # records from the divergence point on that the client jumped over
    asked: dict[str, int] = field(default_factory=dict)  # request type -> asks for the partition while open
    spin: str = ""  # stuck, asking all along: "OffsetForLeaderEpoch x412"
    source: str = "served"  # "commit": a position handed over through a committed offset
    # What was replaced is transaction markers only (`marker-truncated`: the lost ABORT): the client was served
    # no record that is gone, so its delivery log cannot see the event; only its position moved past it.
    marker: bool = False
    # Where KIP-320 places the divergence (the leader's end offset for the client's epoch, or the end of what
    # it was served when that is no lower), when records below it were replaced: `undetectable`
    located: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.tp.topic, "partition": self.tp.partition, "offset": self.offset,
                "verdict": self.verdict or "undecided", "how": self.how, "redelivered": self.redelivered,
                "skipped": self.skipped, "spin": self.spin, "detail": self.detail, "served_end": self.served_end,
                "served_epoch": self.served_epoch, "step": self.step, "verdict_step": self.verdict_step,
                "from": self.source, "marker": self.marker, "located": self.located}


@dataclass
class _Served:
    epoch: int
    end: int  # next offset after the last served record
    fetched_at: int  # the fetch offset of the request those records answered
    data_end: int = -1  # next offset after the last data (not control) batch served


@dataclass
class ClientReport:
    client_id: str
    software: str = "unknown"
    connections: int = 0
    requests: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    commits: list[dict[str, Any]] = field(default_factory=list)
    acks_lost: list[dict[str, Any]] = field(default_factory=list)
    offset_not_available: list[dict[str, Any]] = field(default_factory=list)
    metadata_epoch_backwards: list[dict[str, Any]] = field(default_factory=list)
    storms: list[dict[str, Any]] = field(default_factory=list)
    false_alarms: list[dict[str, Any]] = field(default_factory=list)
    stalls: list[dict[str, Any]] = field(default_factory=list)
    out_of_range: list[dict[str, Any]] = field(default_factory=list)
    aborted_reads: list[dict[str, Any]] = field(default_factory=list)
    follower_out_of_range: list[dict[str, Any]] = field(default_factory=list)  # how: leader/replica/reset/stopped
    # A stale KIP-951 hint and what it did next (how: metadata/followed/elsewhere/stopped); `regress`: the hint's
    # epoch was not newer than the client knew (followed, that is the hint-regress check)
    leader_hints: list[dict[str, Any]] = field(default_factory=list)
    # An idempotent producer answered OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID, and what it did
    # next (`outcome`, at the end): clean, duplicate (a record it had acknowledged is in the log twice),
    # fatal (no acknowledgement on the partition after it)
    sequence_errors: list[dict[str, Any]] = field(default_factory=list)
    epochs_sent: dict[str, int] = field(default_factory=dict)  # api name -> requests carrying an epoch >= 0
    # The record-level anomalies of what it was served and acknowledged, against the leaders' final logs
    # (`epochguard.wire.anomalies`); `history_capped`: past HISTORY_LIMIT, judged on the first part only
    anomalies: list[Anomaly] = field(default_factory=list)
    history_capped: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "client_id": self.client_id, "software": self.software, "connections": self.connections,
            "requests": self.requests, "divergences": [d.to_json() for d in self.divergences],
            "commits": self.commits, "acks_lost": self.acks_lost, "offset_not_available": self.offset_not_available,
            "metadata_epoch_backwards": self.metadata_epoch_backwards, "epochs_sent": self.epochs_sent,
            "storms": self.storms, "false_alarms": self.false_alarms, "stalls": self.stalls,
            "out_of_range": self.out_of_range, "aborted_reads": self.aborted_reads,
            "sequence_errors": self.sequence_errors, "anomalies": [a.to_json() for a in self.anomalies],
            "history_capped": self.history_capped, "follower_out_of_range": self.follower_out_of_range,
            "leader_hints": self.leader_hints, "hint_regress": self.hint_regress(),
        }

    def hint_regress(self) -> list[dict[str, Any]]:
        """The hint-regress check: stale hints with an epoch no newer than the client knew, which it followed to
        a broker that did not lead."""
        return [h for h in self.leader_hints
                if h["regress"] and h["how"] == "followed" and h["hint"][0] != h["leader"][0]]


@dataclass
class _Acked:
    client: str
    tp: TopicPartition
    base_offset: int
    crcs: tuple[int, ...]
    leader_epoch: int
    step: int


class Judge:
    """An `Observer` of a `WireCluster`: `on_exchange`, `on_fault`, `on_step`; `report()` at the end."""

    def __init__(self) -> None:
        self.clients: dict[str, ClientReport] = {}
        self._served: dict[tuple[str, TopicPartition], _Served] = {}
        # (base, last, epoch, crc) of the batches each client was served, the latest last; crc None once a
        # divergence judged the batch (one event per replaced record)
        self._spans: dict[tuple[str, TopicPartition], deque[tuple[int, int, int, int | None]]] = {}
        self._leaders: dict[TopicPartition, tuple[int, int, int]] = {}  # (leader, epoch, log generation) checked
        self._asks: dict[tuple[str, str, TopicPartition], deque[int]] = {}  # steps of recent asks
        self._storming: set[tuple[str, str, TopicPartition]] = set()
        self._low_answers: dict[tuple[str, TopicPartition], int] = {}  # validation answers below the served end
        self._progress: dict[tuple[str, TopicPartition], tuple[int, int]] = {}  # furthest end served, at step
        self._last_asked: dict[str, int] = {}  # client -> step of its last request
        self._open: dict[tuple[str, TopicPartition], Divergence] = {}
        self._not_available: dict[tuple[str, TopicPartition], dict[str, Any]] = {}
        self._below_start: dict[tuple[str, TopicPartition], dict[str, Any]] = {}  # OFFSET_OUT_OF_RANGE, undecided
        self._jumped: set[tuple[str, TopicPartition, int]] = set()  # (client, tp, log start) it went past
        self._follower_oor: dict[tuple[str, TopicPartition], dict[str, Any]] = {}  # undecided, by client and tp
        self._follower_resets: dict[tuple[str, TopicPartition], dict[str, Any]] = {}  # reset, not yet landed
        self._known_epochs: dict[tuple[str, TopicPartition], int] = {}  # the newest epoch each client was told or sent
        self._hints: dict[tuple[str, TopicPartition, str], dict[str, Any]] = {}  # stale hints, undecided
        self._committed: dict[tuple[str, TopicPartition], tuple[int, int]] = {}  # (group, tp) -> (offset, epoch)
        self._read_committed: set[str] = set()  # the clients that fetched read_committed (torn-txn, lso-stuck)
        self._left: dict[str, int] = {}  # client -> step its LeaveGroup was applied
        self._acked: list[_Acked] = []  # in the order they were answered
        # id(sequence error entry) -> how many acks came before it: answers complete between steps (the
        # followers fetch at once), so an error and the next ack can share a step; their order is this.
        self._acks_before: dict[int, int] = {}
        self._producer_ids: dict[str, set[int]] = {}  # of the batches each client had acknowledged
        self._decided: set[tuple[str, TopicPartition, int, int]] = set()
        # Each client's history for its anomalies: the batches it was served (None: an answer a later fetch
        # showed it never consumed), moves, acknowledged batches
        self._reads: dict[str, list[Read | Moved | None]] = {}
        # per client: acks=all batches acknowledged (tp, offset, the request's records, epoch, step), their records
        # decoded at the end; bounded by ACKED_BYTES
        self._sent: dict[str, list[tuple[TopicPartition, int, bytes, int, int]]] = {}
        self._sent_bytes: dict[str, int] = {}
        # (fetched, indices, the leader epoch of its first batch, the last offset of its reads left: -1 none)
        self._pending: dict[tuple[str, TopicPartition], deque[tuple[int, list[int], int, int]]] = {}
        # offsets the cluster told it since, each with the epoch a validation asked about (None: any position)
        self._answered: dict[tuple[str, TopicPartition], dict[int, int | None]] = {}
        self._failed: dict[str, dict[tuple[str, int], float]] = {}  # client -> partition -> step of a Produce error
        self._conns: set[int] = set()
        self._wire: Any = None
        self.step = 0

    def client(self, conn: Any) -> ClientReport:
        name = conn.client_id or f"connection-{conn.id}"
        report = self.clients.get(name)
        if report is None:
            report = self.clients[name] = ClientReport(name)
        if conn.software_name and report.software == "unknown":
            report.software = conn.software
        if conn.id not in self._conns:
            self._conns.add(conn.id)
            report.connections += 1
        return report

    # --- observer --------------------------------------------------------------------------------
    def on_fault(self, fault: Any, step: int) -> None:
        self.step = step

    def on_exchange(self, conn: Any, header: Any, request: Any, response: Any, applied_step: int, step: int) -> None:
        self.step = step
        report = self.client(conn)
        report.requests += 1
        name = report.client_id
        self._last_asked[name] = step
        if isinstance(request, (FetchRequest, OffsetsForLeaderEpochRequest, ListOffsetsRequest)) and self._open:
            self._count_open(name, request)
        self._leader_hints(name, conn.broker_id, request, response, applied_step)
        if isinstance(request, FetchRequest) and not request.is_from_follower:
            self._follower_reset(name, conn.broker_id, request, response, applied_step)
            if applied_step > self._left.get(name, -1):  # not a fetch in flight when it left its group
                self._on_fetch(name, conn.broker_id, request, response)
        elif isinstance(request, OffsetsForLeaderEpochRequest):
            self._on_validation(report, request, response)
        elif isinstance(request, ListOffsetsRequest):
            self._sent_epochs(report, "ListOffsets", [(p.tp, p.current_leader_epoch) for p in request.partitions])
            self._count_asks(report, "ListOffsets", [p.tp for p in request.partitions])
            self._follower_reset(name, conn.broker_id, request, response, applied_step)
            if isinstance(response, ListOffsetsResponse):
                self._on_list_offsets(name, response)
        elif isinstance(request, OffsetCommitRequest):
            self._on_commit(report, request)
        elif isinstance(request, OffsetFetchRequest) and isinstance(response, OffsetFetchResponse):
            self._on_offset_fetch(name, request, response)
        elif isinstance(request, (JoinGroupRequest, LeaveGroupRequest)):
            self._on_membership(name, request, applied_step)
        elif isinstance(request, ProduceRequest) and isinstance(response, ProduceResponse):
            failed = self._failed.setdefault(name, {})
            failed.update(((p.tp.topic, p.tp.partition), step) for p in response.partitions
                          if p.error_code != Errors.NONE)
            if request.acks == -1:
                self._on_acked(name, conn.broker_id, request, response)

    def _on_membership(self, name: str, request: JoinGroupRequest | LeaveGroupRequest, applied_step: int) -> None:
        if isinstance(request, JoinGroupRequest):
            self._record(name, Moved())  # a rebalance: whatever it is assigned next starts anew
            return
        self._left[name] = applied_step
        for key in [k for k in self._served if k[0] == name]:  # it fetches no more: nothing to judge
            del self._served[key]

    def _on_validation(self, report: ClientReport, request: OffsetsForLeaderEpochRequest, response: Any) -> None:
        name = report.client_id
        sent = [(p.tp, p.current_leader_epoch) for p in request.partitions]
        asked = {p.tp: p.leader_epoch for p in request.partitions}  # the epoch of the position it validates
        self._sent_epochs(report, "OffsetForLeaderEpoch", sent)
        self._count_asks(report, "OffsetForLeaderEpoch", [tp for tp, _ in sent])
        for r in getattr(response, "partitions", ()):
            d = self._open.get((name, r.tp))
            if r.error_code == Errors.NONE:
                self._told(name, r.tp, r.end_offset, asked.get(r.tp))
            if d is not None and r.error_code == Errors.NONE:
                d.validated = r.end_offset
            served = self._served.get((name, r.tp))
            if d is None and served is not None and r.error_code == Errors.NONE and 0 <= r.end_offset < served.end:
                self._low_answers[(name, r.tp)] = r.end_offset

    def on_step(self, wire: Any) -> None:
        self._wire = wire
        self.step = wire.step_no
        self._find_divergences(wire.cluster)
        self._stop_out_of_range()
        self._stop_divergences()

    def _find_divergences(self, cluster: Any) -> None:
        """Opens an event for each client whose served records the acting leader no longer has (see the
        module docstring)."""
        changed = self._leaders_changed(cluster)
        for (name, tp), served in list(self._served.items()):
            if (name, tp) in self._open:
                continue
            leader = cluster.acting_leader(tp)
            if leader is None:
                continue
            log = cluster.log(leader, tp)
            _epoch, end = log.leader_epoch_cache.end_offset_for(served.epoch, log.log_end_offset)
            if end < 0:
                end = log.log_start_offset  # the leader has no epoch at or below it: nothing is known to agree
            state = cluster.controller.state(tp)
            if end < served.end:
                key = (name, tp, end, state.leader_epoch)
                if key in self._decided:  # the same divergence, still being served by a zombie
                    continue
                self._decided.add(key)
                d = Divergence(name, tp, end, served.end, served.epoch, state.leader_epoch, self.step,
                               served_from=served.fetched_at, marker=served.data_end <= end)
                replaced = self._first_replaced(name, tp, log, end)
                if replaced is not None:  # replaced below where KIP-320 can place it
                    d.offset, d.located = replaced, end
                self._open_event(d)
            elif tp in changed and (replaced := self._first_replaced(name, tp, log, served.end)) is not None:
                # Replaced below the position, yet the leader ends the client's epoch at or past it: a
                # validation finds nothing (a leader that never had that epoch, after consecutive unclean
                # elections; or data lost without a leader change).
                self._open_event(Divergence(name, tp, replaced, served.end, served.epoch, state.leader_epoch,
                                            self.step, served_from=served.fetched_at, located=end))

    def _stop_divergences(self) -> None:
        for (name, tp), d in list(self._open.items()):
            # From the last records it was served: a zombie serving its old epoch is progress as the
            # client sees it, and the delivery log counts from the last of them it consumed.
            if self.step - max(d.step, self._progress.get((name, tp), (0, 0))[1]) >= STUCK_AFTER_STEPS:
                if d.located is not None:
                    self._decide(d, "undetectable", "no fetch since", how="stopped")
                elif d.validated is not None and d.validated <= d.offset:
                    self._decide(d, "detected", "validated, then stopped fetching (raised)", how="raised")
                else:
                    self._decide(d, "stuck", "no fetch, validation or reset made progress")
                    api, asks = max(d.asked.items(), key=lambda kv: kv[1], default=("", 0))
                    if asks >= SPIN_REQUESTS:
                        d.spin = f"{api} x{asks}"

    # --- rules -----------------------------------------------------------------------------------
    def _on_fetch(self, name: str, broker_id: int, request: FetchRequest, response: Any) -> None:
        report = self.clients[name]
        self._sent_epochs(report, "Fetch", [(p.tp, p.current_leader_epoch) for p in request.partitions])
        offsets = {p.tp: p.fetch_offset for p in request.partitions}
        for tp, offset in offsets.items():
            self._refetched(name, tp, offset)
            na = self._not_available.pop((name, tp), None)
            if na is not None:
                na["then"] = f"fetched at {offset} without a new offset"
        if not isinstance(response, FetchResponse):
            return
        for p in response.partitions:
            if p.tp in offsets and self._from_leader(broker_id, p.tp):
                self._out_of_range(name, p.tp, offsets[p.tp], p.error_code)
            d = self._open.get((name, p.tp))
            self._told_diverging(name, p)
            if d is not None and p.diverging_epoch is not None:
                d.validated = p.diverging_epoch.end_offset
            elif p.error_code == Errors.NONE and p.tp in offsets and self._in_current_epoch(broker_id, p.tp):
                # A fetch answered with an error (out of range, fenced), or by a broker not in the current
                # epoch (a zombie still serving the old one), moves nothing: wait for the next move. A
                # follower of the current leader answers Fetch v11+ as the leader would (KIP-392).
                self._judge_fetch(name, p.tp, offsets[p.tp])
                self._false_alarm(name, p.tp, offsets[p.tp])
            if p.error_code != Errors.NONE or not p.records:
                continue
            if request.isolation_level == IsolationLevel.READ_COMMITTED:
                self._read_committed.add(name)
                self._aborted_read(name, p, offsets.get(p.tp, 0))
            fetched = offsets.get(p.tp, 0)
            spans, data_last = self._served_reads(name, p, fetched, request.isolation_level)
            kept = self._spans.setdefault((name, p.tp), deque(maxlen=_SERVED_SPANS))
            kept.extend(spans)
            if spans:
                self._note_leader(p.tp)
                _base, last, epoch, _crc = spans[-1]
                before = self._served.get((name, p.tp))
                data_end = data_last + 1 if data_last >= 0 else (before.data_end if before is not None else -1)
                self._served[(name, p.tp)] = _Served(epoch, last + 1, fetched, data_end)
                if last + 1 > self._progress.get((name, p.tp), (-1, 0))[0]:
                    self._progress[(name, p.tp)] = (last + 1, self.step)

    # --- the history behind each client's anomalies ---------------------------------------------------
    def _record(self, name: str, event: Read | Moved) -> int:
        """Appends `event` to `name`'s history; its index, or -1 past HISTORY_LIMIT."""
        history = self._reads.setdefault(name, [])
        if len(history) >= HISTORY_LIMIT:
            self.clients[name].history_capped = True
            return -1
        history.append(event)
        return len(history) - 1

    def _served_reads(self, name: str, p: Any, fetched: int,
                      isolation: IsolationLevel) -> tuple[list[tuple[int, int, int, int | None]], int]:
        """The data batches of a Fetch answer the client's consumer hands out (Kafka's `CompletedFetch`: none
        below the fetch offset, no control batch, under read_committed no batch of a transaction the answer
        names aborted), each a `Read` of its offsets whose value is its CRC; pending until a later fetch of
        the partition shows how much of the answer it consumed. Returns (base, last, leader epoch, crc) of every
        batch reaching the fetch offset, control batches too, and the last offset of the last data (not control)
        batch among them (-1: none): the one pass over the answer's batch headers."""
        aborted = sorted((t.first_offset, t.producer_id) for t in p.aborted_transactions or ()) \
            if isolation == IsolationLevel.READ_COMMITTED else []
        aborting: set[int] = set()
        indices: list[int] = []
        spans: list[tuple[int, int, int, int | None]] = []
        first_epoch, end, data_last = -1, -1, -1
        tp = (p.tp.topic, p.tp.partition)
        records = p.records
        history = self._reads.setdefault(name, [])
        for position, _size, base, last in batch_index(records, allow_partial_tail=True):
            epoch, _magic, crc, attributes = struct.unpack_from(">ibIh", records, position + 12)
            if last >= fetched:
                spans.append((base, last, epoch, crc))
                data_last = data_last if attributes & _CONTROL else last
            if attributes & (_CONTROL | _TRANSACTIONAL):
                (pid,) = struct.unpack_from(">q", records, position + 43)
                while aborted and aborted[0][0] <= base:  # Kafka's abortedProducerIds, by first offset
                    aborting.add(aborted.pop(0)[1])
                if attributes & _CONTROL:
                    aborting.discard(pid)  # its marker: what follows of that producer is another transaction
                    continue
                if pid in aborting:
                    continue
            if last < fetched:
                continue
            if len(history) >= HISTORY_LIMIT:  # `_record`'s bound, inline: this loop runs per served batch
                self.clients[name].history_capped = True
                continue
            history.append(Read(tp, max(base, fetched), crc, last=last, at=base))
            first_epoch = epoch if not indices else first_epoch
            indices.append(len(history) - 1)
            end = last
        if indices:
            pending = self._pending.setdefault((name, p.tp), deque(maxlen=_PENDING_ANSWERS))
            pending.append((fetched, indices, first_epoch, end))
            self._answered.pop((name, p.tp), None)
        return spans, data_last

    def _told(self, name: str, tp: TopicPartition, offset: int, epoch: int | None = None) -> None:
        """The cluster told `name` to go to `offset` of `tp` (a validation of a position in `epoch`; None: an
        answer for any position: ListOffsets, DivergingEpoch, OffsetFetch)."""
        told = self._answered.setdefault((name, tp), {})
        before = told.get(offset, -1)
        told[offset] = None if epoch is None or before is None else max(epoch, before)

    def _told_diverging(self, name: str, p: Any) -> None:
        if p.diverging_epoch is not None:
            self._told(name, p.tp, p.diverging_epoch.end_offset)

    def _refetched(self, name: str, tp: TopicPartition, offset: int) -> None:
        """A fetch of `tp` at `offset`: the answers before it that end at or past `offset` were not consumed
        whole (their connection died, or the client dropped what it had buffered), unless the cluster told it
        to go to `offset` since (a validation, ListOffsets, DivergingEpoch or OffsetFetch answer: it consumed
        them and went back on the cluster's word). Those records are taken out of its history. A validation's
        word counts only for an answer the position it validated could have come from: one that had consumed
        any of an answer would validate its epoch or a later one (kafka-python validated twice after an
        election, the second time, in epoch 0, after being answered the new leader's epoch-1 records at the
        divergence point, and fetched there again: it had dropped them, as its delivery log shows)."""
        pending = self._pending.get((name, tp))
        told = self._answered.pop((name, tp), {})
        if not pending:
            return
        history = self._reads[name]
        while pending:
            fetched, indices, epoch, end = pending[-1]
            if end < 0:  # trimmed away already
                pending.pop()
                continue
            if offset in told and ((asked := told[offset]) is None or asked >= epoch):
                return  # it consumed this answer and went back on the cluster's word
            if offset > end:
                return
            if offset > fetched:  # consumed up to `offset` only
                end = -1
                for i in indices:
                    r = history[i]
                    if isinstance(r, Read) and r.end >= offset:
                        r = history[i] = None if r.offset >= offset else Read(r.tp, r.offset, r.value, offset - 1, r.at)
                    end = max(end, r.end) if isinstance(r, Read) else end
                pending[-1] = (fetched, indices, epoch, end)
                return
            for i in indices:
                history[i] = None
            pending.pop()

    def _find_anomalies(self) -> None:
        """Each client's anomalies, against the leaders' logs from their log start to the high watermark."""
        cluster = self._wire.cluster
        tps = {TopicPartition(*r.tp) for h in self._reads.values() for r in h if isinstance(r, Read)}
        values: dict[tuple[str, int], dict[int, int]] = {}
        spans: dict[tuple[str, int], list[tuple[int, int]]] = {}
        transactions: dict[tuple[str, int], list[Txn]] = {}
        log_start: dict[tuple[str, int], int] = {}
        for tp in tps:
            leader = cluster.acting_leader(tp)
            if leader is None:
                continue
            log = cluster.log(leader, tp)
            key = (tp.topic, tp.partition)
            log_start[key] = log.log_start_offset
            values[key], spans[key], transactions[key] = leader_view(log)
        healed = Healed(values, spans, log_start, transactions)
        written = self._healed_records({tp for sent in self._sent.values() for tp, *_ in sent})
        for name, report in self.clients.items():
            stalled = {(s["topic"], s["partition"]) for s in report.stalls}
            events = [e for e in self._reads.get(name, ()) if e is not None]
            acks = [a for sent in self._sent.get(name, ()) for a in _acked_records(*sent)
                    if (a.tp[0], a.tp[1]) in written.values]
            history = History(events, acks, stalled, self._failed.get(name, {}), self._last_asked.get(name, 0),
                              read_committed=name in self._read_committed)
            report.anomalies = find_anomalies(
                history, healed, expected=lambda a: cluster.controller.unclean_after_epoch(TopicPartition(*a.tp),
                                                                                          a.epoch),
                stuck_after=STUCK_AFTER_STEPS, acks_healed=written)
            report.anomalies += [Anomaly("aborted-read", r["topic"], r["partition"], r["offset"])
                                 for r in report.aborted_reads]

    def _healed_records(self, tps: set[TopicPartition]) -> Healed:
        """The records (offset -> value) the leaders' logs hold to their high watermarks on `tps`, where they
        are at most HISTORY_LIMIT (a benchmark's are not decoded: its acks go unjudged)."""
        cluster = self._wire.cluster
        values: dict[tuple[str, int], dict[int, Any]] = {}
        log_start: dict[tuple[str, int], int] = {}
        for tp in tps:
            leader = cluster.acting_leader(tp)
            log = None if leader is None else cluster.log(leader, tp)
            if log is None or log.high_watermark - log.log_start_offset > HISTORY_LIMIT:
                continue
            key = (tp.topic, tp.partition)
            log_start[key], values[key] = log.log_start_offset, {}
            aborted = log.aborted_transactions
            for b in log.batches(end=log.high_watermark):
                if b.is_control or (b.is_transactional and any(
                        t.producer_id == b.producer_id and t.first_offset <= b.base_offset <= t.last_offset
                        for t in aborted)):
                    continue
                values[key].update((r.offset, r.value) for r in b.records() if r.offset < log.high_watermark)
        return Healed.of_records(values, log_start)

    def _out_of_range(self, name: str, tp: TopicPartition, offset: int, error: int) -> None:
        leader = None if self._wire is None else self._wire.leader_log(tp)
        if leader is None:
            return
        key = (name, tp)
        if error == Errors.OFFSET_OUT_OF_RANGE and offset < leader.log_start_offset:
            if key not in self._below_start:
                answered = {"topic": tp.topic, "partition": tp.partition, "offset": offset,
                            "log_start": leader.log_start_offset, "step": self.step, "how": "", "to": None,
                            "skipped": 0}
                self.clients[name].out_of_range.append(answered)
                self._below_start[key] = answered
        elif error == Errors.NONE:
            # Below the log start it would be answered out of range again: at it, or past it (skipping).
            start = leader.log_start_offset
            entry: dict[str, Any] | None = self._below_start.pop(key, None)
            served_end = self._progress.get(key, (start, 0))[0]
            if entry is None and served_end < start <= offset and (name, tp, start) not in self._jumped:
                # Past the log start with no out-of-range answer first: it asked for the log's bounds
                # (kafka-go's reader does on every new connection) and went there.
                entry = {"topic": tp.topic, "partition": tp.partition, "offset": served_end, "log_start": start,
                         "step": self.step}
                self.clients[name].out_of_range.append(entry)
            if entry is not None:
                self._jumped.add((name, tp, start))
                entry.update(to=offset, how="start" if offset <= start else "forward", skipped=max(0, offset - start))

    def _follower_reset(self, name: str, broker_id: int, request: FetchRequest | ListOffsetsRequest, response: Any,
                        applied_step: int) -> None:
        """Decide each open follower out-of-range answer by the client's next request for the partition
        (applied after that answer), then open one for each fetch a follower answers OFFSET_OUT_OF_RANGE."""
        if isinstance(request, ListOffsetsRequest):
            for lp in request.partitions:
                entry = self._follower_oor.get((name, lp.tp))
                if entry is not None and applied_step >= entry["step"]:
                    self._decide_follower(name, lp.tp, "reset", f"ListOffsets (timestamp {lp.timestamp}) before "
                                                                "any fetch from the leader")
            return
        offsets = {p.tp: p.fetch_offset for p in request.partitions}
        answers = {p.tp: p.error_code for p in getattr(response, "partitions", ())}
        for tp, offset in offsets.items():
            entry = self._follower_oor.get((name, tp))
            if entry is None or applied_step < entry["step"]:
                continue
            if offset != entry["offset"]:
                self._decide_follower(name, tp, "reset", f"fetched at {offset} from broker {broker_id} before any "
                                                         "fetch from the leader")
            elif self._from_leader(broker_id, tp):
                self._decide_follower(name, tp, "leader", f"fetched {offset} from the leader, broker {broker_id}")
            elif answers.get(tp) == Errors.NONE:
                self._decide_follower(name, tp, "replica", f"fetched {offset} from broker {broker_id} again until "
                                                           "it had it")
            else:
                entry["retried"] += 1
        self._resets_landed(name, offsets, answers, applied_step)
        for tp, code in answers.items():
            if (code == Errors.OFFSET_OUT_OF_RANGE and tp in offsets and not self._from_leader(broker_id, tp)
                    and not self._believes_it_leads(broker_id, tp) and (name, tp) not in self._follower_oor):
                entry = {"topic": tp.topic, "partition": tp.partition, "offset": offsets[tp], "broker": broker_id,
                         "step": self.step, "how": "", "detail": "", "retried": 0, "to": None}
                self.clients[name].follower_out_of_range.append(entry)
                self._follower_oor[(name, tp)] = entry

    def _leader_hints(self, name: str, broker_id: int, request: Any, response: Any, applied_step: int) -> None:
        """Decide each open stale hint by the client's next move (a Metadata request, or its next request of the
        same kind for the partition, applied after the hint was answered), then open one for each stale hint in
        this answer."""
        if isinstance(request, MetadataRequest):
            self._hint_metadata(name, broker_id, request, response, applied_step)
            return
        if not isinstance(request, (FetchRequest, ProduceRequest)) or (isinstance(request, FetchRequest)
                                                                      and request.is_from_follower):
            return
        api = "Fetch" if isinstance(request, FetchRequest) else "Produce"
        sent = {p.tp: getattr(p, "current_leader_epoch", -1) for p in request.partitions}
        for tp in sent:
            entry = self._hints.get((name, tp, api))
            if entry is None or applied_step < entry["step"]:
                continue
            named = entry["hint"][0]
            if broker_id == entry["broker"]:
                entry["retried"] += 1
            elif broker_id == named:
                self._decide_hint(name, tp, api, "followed", f"sent its next {api} to broker {named}, as hinted")
            else:
                self._decide_hint(name, tp, api, "elsewhere", f"sent its next {api} to broker {broker_id}")
        for tp, epoch in sent.items():
            self._know(name, tp, epoch)
        if self._wire is not None and isinstance(response, (FetchResponse, ProduceResponse)):
            self._open_hints(name, broker_id, api, set(sent), response)

    def _hint_metadata(self, name: str, broker_id: int, request: MetadataRequest, response: Any,
                       applied_step: int) -> None:
        for (client, tp, api), entry in list(self._hints.items()):
            if client == name and applied_step >= entry["step"] and (request.topics is None
                                                                     or tp.topic in request.topics):
                self._decide_hint(name, tp, api, "metadata", f"asked broker {broker_id} for metadata")
        if isinstance(response, MetadataResponse) and response.version >= 7:
            for t in response.topics:
                for part in t.partitions:
                    self._know(name, TopicPartition(t.name, part.partition_index), part.leader_epoch)

    def _open_hints(self, name: str, broker_id: int, api: str, sent: set[TopicPartition],
                    response: FetchResponse | ProduceResponse) -> None:
        for p in response.partitions:
            hint = p.current_leader
            if hint.leader_id < 0 or p.tp not in sent:
                continue
            state = self._wire.cluster.controller.state(p.tp)
            known = self._known_epochs.get((name, p.tp), -1)
            if (hint.leader_id, hint.leader_epoch) == (state.leader, state.leader_epoch):
                continue  # the truth: whatever the client does with it is right
            regress = hint.leader_epoch <= known
            previous = self._hints.get((name, p.tp, api))
            if previous is not None and previous["broker"] == broker_id and previous["hint"] == [hint.leader_id,
                                                                                                hint.leader_epoch]:
                continue  # the same stale hint again, for a request it had in flight: one entry
            if previous is not None:
                self._decide_hint(name, p.tp, api, "elsewhere" if broker_id != previous["broker"] else "retried",
                                  f"asked broker {broker_id} again before any other move")
            entry = {"topic": p.tp.topic, "partition": p.tp.partition, "api": api, "broker": broker_id,
                     "hint": [hint.leader_id, hint.leader_epoch], "known": known, "regress": regress,
                     "leader": [state.leader, state.leader_epoch], "error": Errors(p.error_code).name,
                     "step": self.step, "how": "", "detail": "", "retried": 0}
            self.clients[name].leader_hints.append(entry)
            self._hints[(name, p.tp, api)] = entry

    def _know(self, name: str, tp: TopicPartition, epoch: int) -> None:
        if epoch > self._known_epochs.get((name, tp), -1):
            self._known_epochs[(name, tp)] = epoch

    def _decide_hint(self, name: str, tp: TopicPartition, api: str, how: str, detail: str) -> None:
        entry = self._hints.pop((name, tp, api))
        entry.update(how=how, detail=detail)

    def _decide_follower(self, name: str, tp: TopicPartition, how: str, detail: str) -> None:
        entry = self._follower_oor.pop((name, tp))
        entry.update(how=how, detail=detail)
        if how == "reset":
            self._follower_resets[(name, tp)] = entry  # where it lands: its first fetch answered since

    def _resets_landed(self, name: str, offsets: dict[TopicPartition, int], answers: dict[TopicPartition, Any],
                       applied_step: int) -> None:
        for tp, offset in offsets.items():
            reset = self._follower_resets.get((name, tp))
            if reset is not None and answers.get(tp) == Errors.NONE and applied_step >= reset["step"]:
                self._reset_landed(name, self._follower_resets.pop((name, tp)), offset)

    def _reset_landed(self, name: str, entry: dict[str, Any], offset: int) -> None:
        """A follower reset's first fetch answered: `to`; below where it was, it goes back although nothing
        diverged, a false alarm (issue 20's definition: rewound or reset with no divergence), which the delivery
        log sees as a re-read. Where records it was served had been replaced (a divergence open for it: kcat in
        `zombie-leader`, reading the zombie, then answered out of range by it once it had healed into a
        follower), going back is that divergence's reset, judged by the same fetch, not a false alarm too."""
        entry["to"] = offset
        if offset < entry["offset"] and (name, TopicPartition(entry["topic"], entry["partition"])) not in self._open:
            self.clients[name].false_alarms.append({
                "topic": entry["topic"], "partition": entry["partition"], "offset": offset,
                "served_end": entry["offset"], "answer": None, "redelivered": entry["offset"] - offset,
                "step": self.step, "from": "follower-reset"})  # at most, as for a validation answer

    def _aborted_read(self, name: str, p: Any, fetched: int) -> None:
        aborted: set[bytes] = set()
        for producer in () if self._wire is None else self._wire.cluster.producers:
            aborted |= producer.aborted
        if not aborted:
            return
        # What the client hands out: the consumer's own read_committed rule (Kafka's isBatchAborted).
        delivered = CompletedFetch.decode(p.tp, FetchPosition(fetched, None), p.records,
                                          IsolationLevel.READ_COMMITTED, p.aborted_transactions).records
        report = self.clients[name]
        seen = {(r["topic"], r["partition"], r["offset"]) for r in report.aborted_reads}
        for r in delivered:
            if r.value in aborted and (p.tp.topic, p.tp.partition, r.offset) not in seen:
                report.aborted_reads.append({"topic": p.tp.topic, "partition": p.tp.partition, "offset": r.offset,
                                             "step": self.step})

    def _stop_out_of_range(self) -> None:
        for key, entry in list(self._below_start.items()):
            if self.step - entry["step"] >= STUCK_AFTER_STEPS:
                entry["how"] = "stopped"
                del self._below_start[key]
        for (name, tp, api), entry in list(self._hints.items()):
            if self.step - entry["step"] >= STUCK_AFTER_STEPS:
                self._decide_hint(name, tp, api, "stopped", f"no {api} of the partition nor metadata request since")
        for key, entry in list(self._follower_oor.items()):
            if self.step - entry["step"] >= STUCK_AFTER_STEPS:
                entry.update(how="stopped", detail="no fetch nor ListOffsets of the partition since")
                del self._follower_oor[key]

    def _from_leader(self, broker_id: int, tp: TopicPartition) -> bool:
        return self._wire is None or self._wire.cluster.acting_leader(tp) == broker_id

    def _believes_it_leads(self, broker_id: int, tp: TopicPartition) -> bool:
        """A zombie (`zombie-leader`) answers as the leader it still thinks it is: its out-of-range answer is
        no preferred read replica's, and what the client does next is judged as a divergence, if any."""
        if self._wire is None:
            return False
        partition = self._wire.cluster.broker(broker_id).manager.partitions.get(tp)
        return partition is not None and partition.is_leader

    def _in_current_epoch(self, broker_id: int, tp: TopicPartition) -> bool:
        return self._wire is None or self._wire.cluster.in_current_epoch(tp, broker_id)

    def _judge_fetch(self, name: str, tp: TopicPartition, offset: int) -> None:
        d = self._open.get((name, tp))
        if d is None:
            return
        back = d.offset - offset  # below the point, served again
        if d.located is not None:  # not the client's to find: what it did, never blamed
            if offset <= d.offset:
                self._decide(d, "undetectable", f"fetched at {offset}, at or below the first replaced record",
                             how="rewound", redelivered=back)
            else:
                self._decide(d, "undetectable", f"fetched at {offset}, past the first replaced record {d.offset}; "
                             f"KIP-320 places the divergence at {d.located}", how="continued", skipped=-back)
        elif d.reset_to is not None and offset == d.reset_to and offset <= d.offset:
            self._decide(d, "reset", f"ListOffsets, then fetched at {offset}", how="back", redelivered=back)
        elif d.validated is not None and d.validated <= d.offset and offset <= d.offset:
            self._decide(d, "detected", f"validated (end offset {d.validated}), then fetched at {offset}",
                         how="rewound", redelivered=back)
        elif offset > d.offset:
            # Past the divergence point the client keeps what it read and skips the replacements,
            # whatever it asked first: a ListOffsets answer there (a `latest` reset, or kafka-go's reader
            # asking for the log's bounds on reconnect and staying at its own position) is no reset.
            why = "" if d.validated is None else f" after a validation answer of {d.validated}"
            why += "" if d.reset_to is None else f" after a ListOffsets answer of {d.reset_to}"
            self._decide(d, "silent", f"fetched at {offset}, past the divergence point {d.offset}{why}",
                         skipped=offset - d.offset)
        elif d.validated is None and d.reset_to is None and offset == d.served_from:
            # The very fetch that was answered with the replaced records, again: the client never
            # applied that answer (lost with its connection when the old leader died), so it read none
            # of them. Not a divergence for this client.
            self._withdraw(d)
        elif d.validated is None and d.reset_to is None:
            self._decide(d, "reset", f"fetched again from {offset} without asking", how="back", redelivered=back)
        elif d.validated is not None:
            self._decide(d, "detected", f"validated (end offset {d.validated}), then fetched at {offset}",
                         how="rewound", redelivered=back)

    def _false_alarm(self, name: str, tp: TopicPartition, offset: int) -> None:
        answer = self._low_answers.get((name, tp))
        served = self._served.get((name, tp))
        if answer is None or served is None or (name, tp) in self._open:
            return
        # Exactly at the answer it acted on it (KIP-320 clients seek to the end offset); below where its last
        # fetch began it went back anyway. Elsewhere below the served end it only had not consumed all it
        # was served when it asked (kafka-python, served 0-534 in one fetch, asked at 500 after a 530).
        if offset == answer or offset < served.fetched_at:
            del self._low_answers[(name, tp)]
            self.clients[name].false_alarms.append({
                "topic": tp.topic, "partition": tp.partition, "offset": offset, "served_end": served.end,
                "answer": answer, "redelivered": served.end - offset, "step": self.step})  # at most
        else:
            del self._low_answers[(name, tp)]  # it went on from its own position: the answer changed nothing

    def _open_event(self, d: Divergence) -> None:
        """Opens `d`; the batches it replaced are judged by it alone (no later event for the same records)."""
        self._open[(d.client, d.tp)] = d
        self.clients[d.client].divergences.append(d)
        kept = self._spans.get((d.client, d.tp))
        if kept:
            self._spans[(d.client, d.tp)] = deque(((b, last, e, None if last >= d.offset else crc)
                                                   for b, last, e, crc in kept), maxlen=_SERVED_SPANS)

    def _note_leader(self, tp: TopicPartition) -> None:
        """What a client is first served of `tp` is the acting leader's: its key is where changes count from."""
        if tp not in self._leaders and self._wire is not None:
            if (key := _leader_key(self._wire.cluster, tp)) is not None:
                self._leaders[tp] = key

    def _leaders_changed(self, cluster: Any) -> set[TopicPartition]:
        """The partitions served to clients whose leader, leader epoch or leader's log generation (a truncation)
        changed since the last step: only then can records a client was served have been replaced under it."""
        changed = set()
        for tp in {tp for _, tp in self._served}:
            now = _leader_key(cluster, tp)
            if now is None:
                continue
            if self._leaders.get(tp, now) != now:  # set when the client was first served
                changed.add(tp)
            self._leaders[tp] = now
        return changed

    def _first_replaced(self, name: str, tp: TopicPartition, log: Any, below: int) -> int | None:
        """The lowest base offset below `below` of a batch `name` was served that the leader's log no longer
        holds (another batch, or none, at that offset); None when it holds every one. Batches deleted below
        the log start, or judged by an earlier event, are not counted."""
        def held(base: int, crc: int) -> bool:
            batch = next(iter(log.batches(base)), None)
            return batch is not None and batch.crc == crc  # a batch's CRC covers its base offset

        return min((base for base, _last, _epoch, crc in self._spans.get((name, tp), ())
                    if crc is not None and log.log_start_offset <= base < below and not held(base, crc)),
                   default=None)

    def _withdraw(self, d: Divergence) -> None:
        self.clients[d.client].divergences.remove(d)
        self._open.pop((d.client, d.tp), None)
        self._served.pop((d.client, d.tp), None)

    def _decide(self, d: Divergence, verdict: str, detail: str, *, how: str = "", redelivered: int = 0,
                skipped: int = 0) -> None:
        d.verdict, d.detail, d.verdict_step = verdict, detail, self.step
        d.how, d.redelivered, d.skipped = how, redelivered, skipped
        self._open.pop((d.client, d.tp), None)
        self._served.pop((d.client, d.tp), None)

    def _on_list_offsets(self, name: str, response: ListOffsetsResponse) -> None:
        for p in response.partitions:
            key = (name, p.tp)
            na = self._not_available.pop(key, None)
            if na is not None:
                na["then"] = "asked again" + ("" if p.error_code != Errors.NONE else f" and got {p.offset}")
            if p.error_code == Errors.OFFSET_NOT_AVAILABLE:
                entry = {"topic": p.tp.topic, "partition": p.tp.partition, "step": self.step, "then": "nothing"}
                self.clients[name].offset_not_available.append(entry)
                self._not_available[key] = entry
            if p.error_code == Errors.NONE:
                self._told(name, p.tp, p.offset)
            if p.error_code == Errors.NONE and key in self._open:
                self._open[key].reset_to = p.offset

    def _on_commit(self, report: ClientReport, request: OffsetCommitRequest) -> None:
        for p in request.partitions:
            d = self._open.get((report.client_id, p.tp))
            served_epoch = self._served_epoch(report.client_id, p.tp, p.committed_offset - 1)
            epoch = p.committed_leader_epoch if served_epoch is None else served_epoch
            self._committed[(request.group_id, p.tp)] = (p.committed_offset, epoch)
            if request.version >= _OFFSET_COMMIT_EPOCH_VERSION and p.committed_leader_epoch < 0:
                report.commits.append({"topic": p.topic, "partition": p.partition_index, "offset": p.committed_offset,
                                       "step": self.step, "problem": "committed without a leader epoch"})
            elif request.version >= _OFFSET_COMMIT_EPOCH_VERSION and p.committed_offset > 0:
                served = self._served_epoch(report.client_id, p.tp, p.committed_offset - 1)
                if served is not None and served > p.committed_leader_epoch:
                    report.commits.append({
                        "topic": p.topic, "partition": p.partition_index, "offset": p.committed_offset,
                        "step": self.step, "problem": f"committed with epoch {p.committed_leader_epoch}, older than "
                        f"epoch {served} of the batch holding offset {p.committed_offset - 1} as served"})
            if d is not None and p.committed_offset > d.offset:
                problem = f"committed beyond the divergence point {d.offset}"
                report.commits.append({"topic": p.topic, "partition": p.partition_index, "offset": p.committed_offset,
                                       "step": self.step, "problem": problem})

    def _on_offset_fetch(self, name: str, request: OffsetFetchRequest, response: OffsetFetchResponse) -> None:
        """A committed position handed to `name`: an event of its own when the leader ends its epoch below it."""
        for p in response.partitions:
            if p.error_code == Errors.NONE and p.committed_offset >= 0:  # it resumes from a commit
                self._record(name, Moved(p.tp))
                self._told(name, p.tp, p.committed_offset)
            if p.error_code != Errors.NONE or p.committed_offset < 0 or (name, p.tp) in self._open:
                continue
            answered = (p.committed_offset, p.committed_leader_epoch)
            offset, epoch = self._committed.get((request.group_id, p.tp), answered)
            leader = None if self._wire is None else self._wire.leader_log(p.tp)
            if offset != p.committed_offset or epoch < 0 or leader is None:
                continue  # another commit since, or nothing to validate with
            _epoch, end = leader.leader_epoch_cache.end_offset_for(epoch, leader.log_end_offset)
            if end < 0:
                end = leader.log_start_offset
            leader_epoch = self._wire.cluster.controller.state(p.tp).leader_epoch
            key = (name, p.tp, end, leader_epoch)
            if end < offset and key not in self._decided:
                self._decided.add(key)
                self._open_event(Divergence(name, p.tp, end, offset, epoch, leader_epoch, self.step, source="commit"))

    def _count_open(self, name: str, request: Any) -> None:
        if isinstance(request, FetchRequest) and request.is_from_follower:
            return
        api = {FetchRequest: "Fetch", OffsetsForLeaderEpochRequest: "OffsetForLeaderEpoch",
               ListOffsetsRequest: "ListOffsets"}[type(request)]
        for tp in {p.tp for p in request.partitions}:
            d = self._open.get((name, tp))
            if d is not None:
                d.asked[api] = d.asked.get(api, 0) + 1

    def _served_epoch(self, client: str, tp: TopicPartition, offset: int) -> int | None:
        """The epoch of the batch holding `offset` as last served to `client` (None: not served lately)."""
        for base, last, epoch, _crc in reversed(self._spans.get((client, tp), ())):
            if base <= offset <= last:
                return epoch
        return None

    def _count_asks(self, report: ClientReport, api: str, tps: list[TopicPartition]) -> None:
        for tp in tps:
            key = (report.client_id, api, tp)
            steps = self._asks.setdefault(key, deque(maxlen=STORM_REQUESTS))
            steps.append(self.step)
            if (len(steps) == STORM_REQUESTS and self.step - steps[0] < STORM_STEPS
                    and key not in self._storming):
                self._storming.add(key)  # once per client, API and partition
                report.storms.append({"api": api, "topic": tp.topic, "partition": tp.partition, "step": self.step,
                                      "requests": STORM_REQUESTS, "within_steps": self.step - steps[0]})

    def _on_acked(self, name: str, broker_id: int, request: ProduceRequest, response: ProduceResponse) -> None:
        wire = self._wire
        results = {p.tp: p for p in response.partitions}
        for p in request.partitions:
            r = results.get(p.tp)
            if r is not None and r.error_code in _SEQUENCE_LOST:
                entry = {"topic": p.tp.topic, "partition": p.tp.partition, "error": r.error_code.name,
                         "step": self.step, "outcome": ""}
                self.clients[name].sequence_errors.append(entry)
                self._acks_before[id(entry)] = len(self._acked)
            if r is None or r.error_code != Errors.NONE or not isinstance(p.records, bytes):
                continue
            if len(p.records) >= 51:  # the producer id of its batches (a request holds one producer's)
                (pid,) = struct.unpack_from(">q", p.records, 43)
                if pid >= 0:
                    self._producer_ids.setdefault(name, set()).add(pid)
            epoch = -1
            if wire is not None:
                # The epoch the answering broker appended it in, not the controller's: a zombie acknowledges
                # in the epoch it still believes in, after the controller elected another leader.
                held = wire.cluster.log(broker_id, p.tp).epoch_for_offset(r.base_offset)
                epoch = wire.cluster.controller.state(p.tp).leader_epoch if held is None else held
            spans = batch_spans(p.records)
            crcs = tuple(s[3] for s in spans)
            self._acked.append(_Acked(name, p.tp, r.base_offset, crcs, epoch, self.step))
            kept = self._sent_bytes.get(name, 0) + len(p.records)
            if kept <= ACKED_BYTES:
                self._sent_bytes[name] = kept
                self._sent.setdefault(name, []).append((p.tp, r.base_offset, p.records, epoch, self.step))
            else:
                self.clients[name].history_capped = True

    def _sent_epochs(self, report: ClientReport, api: str, epochs: list[tuple[TopicPartition, int]]) -> None:
        if any(e >= 0 for _, e in epochs):
            report.epochs_sent[api] = report.epochs_sent.get(api, 0) + 1
        checker = None if self._wire is None else self._wire.cluster.checker
        if checker is None:
            return
        before = len(checker.violations)
        for tp, epoch in epochs:
            checker.on_metadata_accepted(f"client:{report.client_id}", tp, None, epoch)
        for v in checker.violations[before:]:
            if v.invariant == METADATA_EPOCH_MONOTONIC:
                report.metadata_epoch_backwards.append({"partition": v.partition, "step": v.step, "message": v.message,
                                                        "api": api})

    # --- the end ---------------------------------------------------------------------------------
    def finish(self) -> None:
        """Close the run: acks=all batches checked against the leaders' logs, open events left undecided
        (or stuck, past the bound)."""
        wire = self._wire
        if wire is None:
            return
        cluster = wire.cluster
        for (name, tp), (end, at) in sorted(self._progress.items()):
            leader = cluster.acting_leader(tp)
            asked = self._last_asked.get(name, at)
            if leader is not None and asked - at >= STUCK_AFTER_STEPS and cluster.log(leader, tp).high_watermark > end:
                self.clients[name].stalls.append({"topic": tp.topic, "partition": tp.partition, "served_end": end,
                                                  "served_at": at, "asked_until": asked})
        self._decide_sequence_errors()
        self._find_anomalies()
        for a in self._acked:
            leader = cluster.acting_leader(a.tp)
            if leader is None:
                continue
            log = cluster.log(leader, a.tp)
            batches = list(itertools.islice(log.batches(a.base_offset), len(a.crcs)))
            if batches and batches[0].base_offset == a.base_offset and tuple(b.crc for b in batches) == a.crcs:
                continue
            if cluster.controller.unclean_after_epoch(a.tp, a.leader_epoch):
                continue
            self.clients[a.client].acks_lost.append({"topic": a.tp.topic, "partition": a.tp.partition,
                                                     "offset": a.base_offset, "step": a.step})

    def _decide_sequence_errors(self) -> None:
        wire = self._wire
        for name, report in self.clients.items():
            for e in report.sequence_errors:
                tp = TopicPartition(e["topic"], e["partition"])
                later = self._acked[self._acks_before.get(id(e), len(self._acked)):]
                if not any(a.client == name and a.tp == tp for a in later):
                    e["outcome"] = "fatal"
                    continue
                # A record of its own twice in the leader's log: sent again after it was written.
                log = None if wire is None else wire.leader_log(tp)
                pids = self._producer_ids.get(name, set())
                held: Counter[bytes] = Counter()
                for b in () if log is None else log.batches():
                    if b.producer_id in pids:
                        held.update(rec.value for rec in b.records() if rec.value)
                e["outcome"] = "duplicate" if any(n > 1 for n in held.values()) else "clean"

    def report(self) -> list[dict[str, Any]]:
        return [c.to_json() for c in sorted(self.clients.values(), key=lambda c: c.client_id)]

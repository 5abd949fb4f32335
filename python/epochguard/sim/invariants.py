"""The invariant checker: five properties of a correct leader-epoch protocol, checked after every step.

1. `isr-agreement`: every replica in the controller's ISR holds the same records as the leader below
   the leader's high watermark.
2. `acked-durable`: with clean elections, an acks=all record acknowledged to a producer is in the
   current leader's log at its offset (exempt: records acknowledged before an unclean election).
3. `consumer-continuity`: a consumer never skips an offset, never delivers a different record at an
   offset it already delivered, and never continues on a log that disagrees with what it already
   delivered, unless it raised or reported the truncation (a `TruncationEvent`; a plain
   out-of-range reset excuses a skip only).
4. `list-offsets-monotonic`: the latest offset a client gets from ListOffsets never goes backwards,
   unless an unclean election happened in between.
5. `metadata-epoch-monotonic`: the leader epoch a client accepts for a partition never goes backwards
   (within one client process: a restarted client starts from nothing).

And one liveness check, at the end of a scenario whose faults have all healed: `consumer-progress`,
every consumer has caught up with every partition that has a leader (no state without a way out:
validation loops, partitions stuck awaiting validation or reset, metadata flip-flops).

Each violation is reported once (per invariant, partition and offset), with the step, and the last
events as a readable trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from epochguard.sim.events import (
    Acked,
    ClientRestarted,
    Consumed,
    ConsumerResumed,
    EventSink,
    FetchServed,
    ListOffsetsAnswered,
    MetadataAccepted,
    ResetReported,
    SimEvent,
    StepEnded,
    TruncationReported,
    TxnAborted,
)
from epochguard.types import ConsumerRecord, OffsetResetEvent, TopicPartition, TruncationEvent

if TYPE_CHECKING:
    from epochguard.sim.storage import SimLog
    from epochguard.sim.view import ClusterView

ISR_AGREEMENT = "isr-agreement"
ACKED_DURABLE = "acked-durable"
CONSUMER_CONTINUITY = "consumer-continuity"
LIST_OFFSETS_MONOTONIC = "list-offsets-monotonic"
METADATA_EPOCH_MONOTONIC = "metadata-epoch-monotonic"
READ_COMMITTED = "read-committed"  # a read_committed consumer never delivers a record of an aborted transaction
ALL_INVARIANTS = (
    ISR_AGREEMENT, ACKED_DURABLE, CONSUMER_CONTINUITY, LIST_OFFSETS_MONOTONIC, METADATA_EPOCH_MONOTONIC, READ_COMMITTED,
)
CONSUMER_PROGRESS = "consumer-progress"
MAX_FINAL_LAG = 50  # offsets; a caught-up consumer is a fetch or two behind (a few offsets)

TRACE_LENGTH = 12
_NOT_IN_TRACE = frozenset({"ack", "violation"})  # the bulk, and the other reports
_NO_LIMIT = 1 << 62


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    step: int
    time_ms: int
    node: str
    partition: str | None
    message: str
    trace: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "invariant": self.invariant,
            "step": self.step,
            "time_ms": self.time_ms,
            "node": self.node,
            "partition": self.partition,
            "message": self.message,
            "trace": list(self.trace),
        }

    def __str__(self) -> str:
        where = f" {self.partition}" if self.partition else ""
        lines = [f"VIOLATION {self.invariant} at step {self.step} ({self.time_ms} ms) on {self.node}{where}: "
                 f"{self.message}"]
        lines += [f"    {line}" for line in self.trace]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class AckedRecord:
    """An acks=all record a producer was told is committed."""

    tp: TopicPartition
    offset: int
    key: bytes | None
    value: bytes | None
    step: int
    leader_epoch: int  # of the leader that acknowledged it


@dataclass(slots=True)
class _Delivered:
    identity: tuple[int | None, bytes | None, bytes | None]
    seq: int  # delivery order within its (consumer, partition)


@dataclass(slots=True)
class _ConsumerView:
    """What one consumer delivered for one partition, and what it reported."""

    delivered: dict[int, _Delivered] = field(default_factory=dict)
    last_offset: int | None = None
    seq: int = 0
    # (seq of the last delivery when reported, divergent offset): covers deliveries with seq <= that
    truncations: list[tuple[int, int | None]] = field(default_factory=list)
    last_reset_seq: int = -1
    # Everything delivered, in order, with the step: a restart rebuilds `delivered` from it.
    history: list[tuple[int, int, _Delivered]] = field(default_factory=list)  # (step, offset, delivery)
    truncation_steps: list[int] = field(default_factory=list)  # step of each entry of `truncations`
    last_reset_step: int = -1
    checked_against: tuple[int, int] | None = None  # (broker, log generation) last compared against
    # Bumped by every truncation, reset and resume: reports are keyed by it, once per incident. (A count
    # of truncations and the last reset's seq would come back to an earlier value when a resume forgets
    # them, and fold a new incident into one reported before.)
    incident: int = 0

    def truncation_covers(self, offset: int, after_seq: int) -> bool:
        return any(seq >= after_seq and (div is None or div <= offset) for seq, div in self.truncations)


class InvariantChecker:
    def __init__(self, cluster: ClusterView) -> None:
        self.cluster = cluster
        self.violations: list[Violation] = []
        self._reported: set[tuple[Any, ...]] = set()
        self._agreed: dict[tuple[TopicPartition, int, int], tuple[int, int, int]] = {}
        self.acked: dict[TopicPartition, list[AckedRecord]] = {}
        self._acked_checked: dict[TopicPartition, tuple[tuple[int, int, int] | None, int]] = {}
        self._consumers: dict[tuple[str, TopicPartition], _ConsumerView] = {}
        self._list_offsets: dict[tuple[str, TopicPartition], tuple[int, int, int]] = {}  # (max, step, epoch)
        self._metadata_epochs: dict[tuple[str, TopicPartition], int] = {}
        self._restarts: dict[str, int] = {}  # client -> step of its last restart
        self._noted: set[tuple[str, TopicPartition, int]] = set()
        self._aborted_values: dict[TopicPartition, set[bytes | None]] = {}
        self._read_committed: set[str] = set()  # consumers seen reading with isolation read_committed

    # --- what actors publish ----------------------------------------------------------------------
    def subscribe(self, events: EventSink) -> None:
        events.subscribe(self.on_event)

    def on_event(self, event: SimEvent) -> None:
        """Route one published fact to its check (the `on_*` methods stay callable on their own)."""
        if isinstance(event, StepEnded):
            self.check_step()
        elif isinstance(event, Acked):
            epoch = self.cluster.broker(event.broker).leader_epoch(event.tp)  # the leader that acknowledged
            self.on_acked(event.tp, event.offset, event.key, event.value, -1 if epoch is None else epoch)
        elif isinstance(event, Consumed):
            self.on_consumed(event.consumer, event.record, event.served_by, event.read_committed)
        elif isinstance(event, TxnAborted):
            self.on_txn_aborted(event.tp, event.values)
        elif isinstance(event, FetchServed):
            self.on_fetch_served(event.consumer, event.tp, event.broker, event.fetch_offset)
        elif isinstance(event, ListOffsetsAnswered):
            self.on_list_offsets(event.client, event.tp, event.offset, event.leader_epoch)
        elif isinstance(event, MetadataAccepted):
            self.on_metadata_accepted(event.client, event.tp, event.leader, event.epoch)
        elif isinstance(event, TruncationReported):
            self.on_truncation(event.consumer, event.event)
        elif isinstance(event, ResetReported):
            self.on_reset(event.consumer, event.event)
        elif isinstance(event, ClientRestarted):
            self.on_client_restart(event.client)
        elif isinstance(event, ConsumerResumed):
            self.on_consumer_resumed(event.consumer, event.tp, event.committed, event.commit_step)

    # --- reporting -------------------------------------------------------------------------------
    def report(self, invariant: str, node: str, tp: TopicPartition | None, message: str, key: tuple[Any, ...]) -> None:
        if (invariant, *key) in self._reported:
            return
        self._reported.add((invariant, *key))
        timeline = self.cluster.timeline
        trace = tuple(str(e) for e in timeline.tail(TRACE_LENGTH, exclude=_NOT_IN_TRACE))
        partition = None if tp is None else str(tp)
        violation = Violation(invariant, timeline.step, timeline.time_ms, node, partition, message, trace)
        self.violations.append(violation)
        timeline.record("violation", node, f"{invariant}: {message}", invariant=invariant,
                        partition=None if tp is None else str(tp))

    # --- after every step ------------------------------------------------------------------------
    def check_step(self) -> None:
        for tp in self.cluster.topic_partitions:
            leader = self.cluster.acting_leader(tp)
            if leader is None:
                continue
            self._check_isr_agreement(tp, leader)
            self._check_acked(tp, leader)

    def _check_isr_agreement(self, tp: TopicPartition, leader: int) -> None:
        state = self.cluster.controller.state(tp)
        leader_log = self.cluster.log(leader, tp)
        hw = leader_log.high_watermark
        for replica in state.isr:
            if replica == leader:
                continue
            log = self.cluster.log(replica, tp)
            bound = min(hw, log.log_end_offset)
            key = (tp, leader, replica)
            start = 0
            agreed = self._agreed.get(key)
            if agreed is not None and agreed[:2] == (leader_log.generation, log.generation):
                start = agreed[2]
            if start >= bound:
                continue
            leader_bytes = leader_log.read(start, max_bytes=_NO_LIMIT, upper_bound=bound)
            if leader_bytes == log.read(start, max_bytes=_NO_LIMIT, upper_bound=bound):
                self._agreed[key] = (leader_log.generation, log.generation, bound)
                continue
            offset, mine, theirs = _first_difference(leader_log, log, start, bound)
            self.report(
                ISR_AGREEMENT, f"broker-{replica}", tp,
                f"ISR member {replica} disagrees with leader {leader} at offset {offset} below the high watermark "
                f"{hw}: leader has {_show(mine)}, replica has {_show(theirs)} (ISR {list(state.isr)})",
                key=(tp, replica, offset),
            )

    def _check_acked(self, tp: TopicPartition, leader: int) -> None:
        """New acks are checked once; all of them again whenever the leader, its epoch or its log's
        generation (a truncation) changes."""
        mine = self.acked.get(tp)
        if not mine:
            return
        log = self.cluster.log(leader, tp)
        state = self.cluster.controller.state(tp)
        marker = (leader, state.leader_epoch, log.generation)
        last_marker, checked = self._acked_checked.get(tp, (None, 0))
        todo = mine[checked:] if last_marker == marker else mine
        self._acked_checked[tp] = (marker, len(mine))
        if not todo:
            return
        present = log.records_between(min(r.offset for r in todo), max(r.offset for r in todo) + 1)
        for rec in todo:
            got = present.get(rec.offset)
            if got is not None and (got[1], got[2]) == (rec.key, rec.value):
                continue
            if self.cluster.controller.unclean_after_epoch(tp, rec.leader_epoch):
                continue
            self.report(
                ACKED_DURABLE, f"broker-{leader}", tp,
                f"acknowledged acks=all record {_show((None, rec.key, rec.value))} at offset {rec.offset} "
                f"(acked at step {rec.step} in epoch {rec.leader_epoch}) is gone: leader {leader} (epoch "
                f"{state.leader_epoch}) has {_show(got)} there, log end {log.log_end_offset}; no unclean election",
                key=(tp, rec.offset),
            )

    def check_progress(self) -> None:
        """End of run: each consumer is close to the high watermark of every partition with a leader."""
        for consumer in self.cluster.consumers:
            for tp in self.cluster.topic_partitions:
                leader = self.cluster.acting_leader(tp)
                if leader is None:
                    continue
                hw = self.cluster.log(leader, tp).high_watermark
                position = consumer.machine.position(tp)
                state = consumer.machine.state_of(tp).name
                if position is None or hw - position.offset > MAX_FINAL_LAG:
                    at = "no position" if position is None else f"offset {position.offset}"
                    self.report(
                        CONSUMER_PROGRESS, consumer.name, tp,
                        f"stuck at {at} ({state}) while leader {leader} has high watermark {hw}",
                        key=(consumer.name, tp),
                    )

    # --- hooks called by the clients as things happen --------------------------------------------
    def on_acked(
        self, tp: TopicPartition, offset: int, key: bytes | None, value: bytes | None, leader_epoch: int
    ) -> None:
        record = AckedRecord(tp, offset, key, value, self.cluster.timeline.step, leader_epoch)
        self.acked.setdefault(tp, []).append(record)

    def on_truncation(self, consumer: str, event: TruncationEvent) -> None:
        view = self._view(consumer, event.partition)
        view.truncations.append((view.seq, event.divergent_offset))
        view.truncation_steps.append(self.cluster.timeline.step)
        view.incident += 1

    def on_reset(self, consumer: str, event: OffsetResetEvent) -> None:
        view = self._view(consumer, event.partition)
        view.last_reset_seq = view.seq
        view.last_reset_step = self.cluster.timeline.step
        view.incident += 1

    def on_txn_aborted(self, tp: TopicPartition, values: tuple[bytes | None, ...]) -> None:
        aborted = self._aborted_values.setdefault(tp, set())
        aborted.update(values)
        for (consumer, view_tp), view in self._consumers.items():  # delivered before the abort was known?
            if view_tp == tp and consumer in self._read_committed:
                for offset, delivered in sorted(view.delivered.items()):
                    if delivered.identity[2] in aborted:
                        self._report_aborted_read(consumer, tp, offset, delivered.identity[2])

    def _report_aborted_read(self, consumer: str, tp: TopicPartition, offset: int, value: bytes | None) -> None:
        self.report(
            READ_COMMITTED, consumer, tp,
            f"read_committed consumer delivered {_show((None, None, value))} at offset {offset}, "
            "a record of an aborted transaction",
            key=(consumer, tp, offset),
        )

    def _invisible(self, broker: int, tp: TopicPartition, start: int, end: int, read_committed: bool) -> bool:
        """Whether offsets [start, end) on `broker` hold nothing a consumer returns: control batches
        (transaction markers), and for read_committed also batches of aborted transactions."""
        if broker not in self.cluster.brokers:
            return False
        log = self.cluster.log(broker, tp)
        aborted = log.collect_aborted_transactions(start, end) if read_committed else []
        covered = start
        for info in log.batch_infos():
            if info.last_offset < covered or info.base_offset >= end:
                continue
            if info.base_offset > covered:
                return False
            hidden = info.control is not None or (
                info.is_transactional
                and any(t.producer_id == info.producer_id and t.first_offset <= info.base_offset <= t.last_offset
                        for t in aborted)
            )
            if not hidden:
                return False
            covered = info.next_offset
        return covered >= end

    def on_consumed(self, consumer: str, record: ConsumerRecord, served_by: int, read_committed: bool = False) -> None:
        tp = record.topic_partition
        view = self._view(consumer, tp)
        offset = record.offset
        if read_committed:
            self._read_committed.add(consumer)
            if record.value in self._aborted_values.get(tp, ()):
                self._report_aborted_read(consumer, tp, offset, record.value)
        identity = (record.leader_epoch, record.key, record.value)
        before = view.delivered.get(offset)
        if before is not None and before.identity != identity and not view.truncation_covers(offset, before.seq):
            self.report(
                CONSUMER_CONTINUITY, consumer, tp,
                f"delivered {_show(identity)} at offset {offset} (from broker {served_by}), but it had delivered "
                f"{_show(before.identity)} there before, and no truncation was reported",
                key=(consumer, tp, "redelivered", view.incident),  # once per incident
            )
        if view.last_offset is not None and offset > view.last_offset + 1:
            since = view.delivered[view.last_offset].seq
            excused = (
                view.last_reset_seq >= since
                or any(seq >= since for seq, _ in view.truncations)
                or self._invisible(served_by, tp, view.last_offset + 1, offset, read_committed)
            )
            if not excused:
                self.report(
                    CONSUMER_CONTINUITY, consumer, tp,
                    f"skipped offsets {view.last_offset + 1}..{offset - 1}: delivered {view.last_offset} then {offset} "
                    "with no truncation or reset reported",
                    key=(consumer, tp, "skip", view.incident),
                )
        if view.checked_against is not None and view.checked_against[0] != served_by:
            view.checked_against = None  # records from another broker: compare again at the next fetch
        view.seq += 1
        view.delivered[offset] = _Delivered(identity, view.seq)
        view.history.append((self.cluster.timeline.step, offset, view.delivered[offset]))
        view.last_offset = offset

    def on_fetch_served(self, consumer: str, tp: TopicPartition, broker: int, fetch_offset: int) -> None:
        """A broker hands `consumer` records from `fetch_offset` on: everything the consumer delivered
        below that must still be in this broker's log now (checked when served, not when delivered,
        so a truncation while the response is in flight is not held against the consumer)."""
        view = self._consumers.get((consumer, tp))
        if view is None or not view.delivered:
            return
        log = self.cluster.log(broker, tp)
        if view.checked_against == (broker, log.generation):
            return  # same log, nothing removed from it, nothing delivered from elsewhere since
        view.checked_against = (broker, log.generation)
        earlier = [o for o in view.delivered if log.log_start_offset <= o < fetch_offset]
        if not earlier:
            return
        actual = log.records_between(min(earlier), fetch_offset)
        for o in sorted(earlier):
            seen = view.delivered[o]
            now = actual.get(o)
            if now is not None and now == seen.identity:
                continue
            if view.truncation_covers(o, seen.seq):
                continue
            if self._undetectable_after_unclean(tp, seen, log):
                if (consumer, tp, o) in self._noted:
                    return
                self._noted.add((consumer, tp, o))
                self.cluster.timeline.record(
                    "note", consumer,
                    f"{tp}: offset {o} diverged from what the consumer read (epoch {seen.identity[0]}), which KIP-320 "
                    f"cannot see: after an unclean election, broker {broker} never had that epoch to compare with",
                    partition=str(tp), offset=o,
                )
                return
            self.report(
                CONSUMER_CONTINUITY, consumer, tp,
                f"continued at offset {fetch_offset} on broker {broker}, whose log has {_show(now)} "
                f"at offset {o} where the consumer delivered {_show(seen.identity)}; no truncation was reported",
                key=(consumer, tp, "diverged", view.incident),
            )
            return

    def _undetectable_after_unclean(self, tp: TopicPartition, seen: _Delivered, log: SimLog) -> bool:
        """KIP-320 validates a position by asking the leader where the epoch of the last record read
        ends. A leader that never had that epoch (it came in through an unclean election) answers with
        the end of an older epoch, which can lie above the real divergence, or even above the position:
        the KIP accepts that such "pathological cases (e.g. multiple consecutive unclean leader
        elections)" are located only approximately, or not at all. Divergence is excused exactly then."""
        epoch = seen.identity[0]
        if epoch is None or not self.cluster.controller.unclean_after_epoch(tp, epoch):
            return False
        return all(e != epoch for e, _ in log.leader_epoch_cache.entries())

    def on_list_offsets(self, client: str, tp: TopicPartition, offset: int, leader_epoch: int) -> None:
        """A ListOffsets(latest) answer `offset` from a leader in `leader_epoch`."""
        step = self.cluster.timeline.step
        seen = self._list_offsets.get((client, tp))
        if seen is not None and offset < seen[0] and not self.cluster.controller.unclean_after_epoch(tp, seen[2]):
            self.report(
                LIST_OFFSETS_MONOTONIC, client, tp,
                f"ListOffsets(latest) went back from {seen[0]} (step {seen[1]}, epoch {seen[2]}) to {offset} "
                f"(epoch {leader_epoch}) with no unclean election in between",
                key=(client, tp, seen[0]),
            )
        if seen is None or offset >= seen[0]:
            self._list_offsets[(client, tp)] = (offset, step, leader_epoch)

    def on_metadata_accepted(self, client: str, tp: TopicPartition, leader: int | None, epoch: int | None) -> None:
        if epoch is None or epoch < 0:
            return
        before = self._metadata_epochs.get((client, tp))
        if before is not None and epoch < before:
            self.report(
                METADATA_EPOCH_MONOTONIC, client, tp,
                f"accepted metadata with leader {leader} epoch {epoch} after having epoch {before}",
                key=(client, tp, before),
            )
        self._metadata_epochs[(client, tp)] = max(epoch, before if before is not None else epoch)

    def on_client_restart(self, client: str) -> None:
        """A new client process knows nothing: the metadata epochs it accepts start over."""
        for key in [k for k in self._metadata_epochs if k[0] == client]:
            del self._metadata_epochs[key]
        self._restarts[client] = self.cluster.timeline.step

    def on_consumer_resumed(self, consumer: str, tp: TopicPartition, committed: int, commit_step: int | None) -> None:
        """A restarted consumer resumed `tp` from a committed offset whose commit was sent at
        `commit_step`. Its history is what that commit covered: the deliveries made before it, below the
        committed offset. What the old process delivered (or reported) after the commit died with it,
        and may now legitimately be read differently. No known commit: no history."""
        view = self._view(consumer, tp)
        kept = [] if commit_step is None else [h for h in view.history if h[0] < commit_step and h[1] < committed]
        view.history = kept
        view.delivered = {}
        for _, offset, delivery in kept:
            view.delivered[offset] = delivery
        view.last_offset = kept[-1][1] if kept else None
        restart = self._restarts.get(consumer, -1)

        def covered(step: int) -> bool:  # reported before the commit, or by the new process
            return step >= restart or (commit_step is not None and step < commit_step)

        # both lists are appended together (`on_truncation`), one step per truncation
        kept_truncations = [i for i, step in enumerate(view.truncation_steps) if covered(step)]
        view.truncations = [view.truncations[i] for i in kept_truncations]
        view.truncation_steps = [view.truncation_steps[i] for i in kept_truncations]
        if not covered(view.last_reset_step):
            view.last_reset_seq = -1  # the reset died with the old process (a later resume finds it forgotten)
        view.checked_against = None
        view.incident += 1

    def _view(self, consumer: str, tp: TopicPartition) -> _ConsumerView:
        return self._consumers.setdefault((consumer, tp), _ConsumerView())


def _first_difference(a: SimLog, b: SimLog, start: int, end: int) -> tuple[int, Any, Any]:
    ra, rb = a.records_between(start, end), b.records_between(start, end)
    for offset in range(start, end):
        if ra.get(offset) != rb.get(offset):
            return offset, ra.get(offset), rb.get(offset)
    return start, None, None  # same records, different batch framing


def _show(record: Any) -> str:
    if record is None:
        return "nothing"
    epoch, _key, value = record
    text = (value or b"").decode("utf-8", "replace")
    return f"{text!r}" + ("" if epoch is None else f" (epoch {epoch})")

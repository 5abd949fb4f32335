"""Ground truth for a judged run, from a client's own delivery log and the final log alone.

Nothing here reads the server's trace or its checker: the final log is read back after the cluster has
healed by a fresh reader (`read_final_log`), and each client's verdicts follow from comparing what it
consumed, record by record (by content digest, not offset), with that log.

A divergence is a maximal run of consumed records the final log does not hold (phantoms: served, then
truncated and replaced). What the client consumed next on that partition decides the verdict:
- detected: it re-read from the divergence point (next offset <= the run's first offset, above the log
  start), or it raised/logged a truncation and consumed nothing more;
- reset: it jumped to the log start (drivers run with auto.offset.reset=earliest);
- silent: it went on past the divergence point: phantoms kept, the replacing records skipped;
- stuck: it consumed nothing on the partition for `stuck_after_s` while the final log had more (up to its
  log's `stopping` line where it has one: the driver consumes no more after it), counted from its last
  phantom or, when the run says when its faults started (`faults_t`, once or at each trigger), from the
  first start after it: a client that read its last phantom while the cluster was still healthy idles
  until the faults make it a phantom (under `--trigger caught-up` the producers are paused meanwhile),
  and that is no stall.
- undetectable: the final log ends the epoch of the last phantom (as its client, or another client of the
  run, read it) above the first phantom: no OffsetsForLeaderEpoch answer could point there (consecutive
  unclean elections); reported, never blamed, with what the client did: `continued`, `rewound`, `stopped`.
Each verdict says how and what it cost, as the server's judge does: `detected` is `rewound` or `raised`,
`reset` goes `back`; `redelivered` counts records below the first phantom consumed again, `skipped` the
final log's records from the first phantom on that a `silent` client never consumed.
Records below the final log's start were deleted (DeleteRecords, retention), not replaced: they are
never phantoms. A client that consumed below the start and next at or above it jumped the log start
(`log-start-jump`): `start` when it went on at the log start, `forward` when past it (`skipped` the
retained records between), `stopped` when it consumed nothing more for `stuck_after_s` (raised or stuck).
The same comparison on a run without faults shows loss, duplicates and gaps.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from epochguard.wire.anomalies import Ack, Anomaly, Healed, History, Moved, Read, Txn, find_anomalies
from epochguard.wire.drivers.delivery_log import CONSUME_TOPIC, PRODUCE_TOPIC, digest, read_log

TopicPartition = tuple[str, int]
VERDICTS = ("detected", "reset", "silent", "stuck", "undetectable")  # and "undecided": too soon to tell


@dataclass(frozen=True)
class FinalLog:
    """Each partition's records, offset -> digest, from its log start to its high watermark."""

    partitions: Mapping[TopicPartition, Mapping[int, str]]  # read_uncommitted: aborted records included
    log_start: Mapping[TopicPartition, int]
    high_watermark: Mapping[TopicPartition, int]
    # The decided transactions, where a partition has any (`read_final_log`): which records were aborted.
    transactions: Mapping[TopicPartition, tuple[Txn, ...]] = field(default_factory=dict)
    # Each record's leader epoch, offset -> epoch, where the reader was told (`undetectable`)
    epochs: Mapping[TopicPartition, Mapping[int, int]] = field(default_factory=dict)

    def aborted(self) -> set[str]:
        """The digests of the records of aborted transactions."""
        return {self.partitions[tp][o] for tp, ts in self.transactions.items() for t in ts if not t.committed
                for o in range(t.first, t.last + 1) if o in self.partitions.get(tp, {})}

    def digest_at(self, tp: TopicPartition, offset: int) -> str | None:
        return self.partitions.get(tp, {}).get(offset)

    def epoch_end(self, tp: TopicPartition, epoch: int) -> int | None:
        """Where this log ends `epoch` as its leader answers OffsetsForLeaderEpoch (Kafka's
        `LeaderEpochFileCache.endOffsetFor`): the first offset holding a later epoch, else the high
        watermark; None without the records' epochs."""
        epochs = self.epochs.get(tp)
        if not epochs:
            return None
        return min((o for o, e in epochs.items() if e > epoch), default=self.high_watermark.get(tp, 0))


@dataclass(frozen=True)
class Divergence:
    topic: str
    partition: int
    offset: int  # the first phantom the client consumed
    last_phantom: int
    phantoms: int
    verdict: str
    next_offset: int | None  # what the client consumed next on the partition
    evidence: tuple[str, ...] = ()  # truncation/reset/error texts the client surfaced meanwhile
    how: str = ""  # detected: rewound / raised; reset: back
    redelivered: int = 0  # records below the first phantom consumed again
    skipped: int = 0  # final-log records from the first phantom on jumped over
    # It went back to the log start, where the divergence began (an empty leader: `unclean-empty-leader`):
    # a reset to the start and a rewind to the divergence point read the same records, and the log alone
    # cannot tell which it was (`rewound` is what it says); only the requests the server saw can.
    at_log_start: bool = False
    epoch: int | None = None  # of the last phantom, as its client or another of the run read it; None: unknown
    located: int | None = None  # where the final log ends that epoch: KIP-320's divergence point

    def reads_as(self, server: Iterable[str]) -> tuple[str, str]:
        """(verdict, how) once the server's verdicts (`verdict/how` labels) are heard where the log alone cannot
        tell: at the log start a reset the server saw (its ListOffsets) stands for the rewind the log reads;
        with no epoch known for the phantoms, an `undetectable` the server saw stands for the silent or
        rewound client the log reads. Anywhere else the log's own verdict stands."""
        said = set(server)
        if self.at_log_start and "reset/back" in said:
            return "reset", "back"
        how = {"silent": "continued", "detected": "rewound"}.get(self.verdict)
        if self.epoch is None and how is not None and f"undetectable/{how}" in said:
            return "undetectable", how
        return self.verdict, self.how

    def key(self) -> tuple[str, int, int]:
        return (self.topic, self.partition, self.offset)


@dataclass(frozen=True)
class OutOfRange:
    """A client whose position fell below the final log's start, and what it consumed next."""

    topic: str
    partition: int
    offset: int  # the position: one past the last record it consumed below the log start
    log_start: int
    to: int | None  # the next offset it consumed (None: nothing more)
    how: str  # start / forward / stopped; "" when the run ended too soon to tell
    skipped: int = 0  # retained records between the log start and `to`


@dataclass
class ClientTruth:
    client_id: str
    software: str
    divergences: list[Divergence] = field(default_factory=list)
    consumed: int = 0
    produced_acked: int = 0
    lost_acked: list[str] = field(default_factory=list)  # digests of acks=all records not in the final log
    duplicated_produced: list[str] = field(default_factory=list)  # digests the final log holds twice or more
    reread: int = 0  # offsets consumed more than once outside a divergence
    # Went back to records it had consumed with no phantom involved (nothing diverged: a false alarm, as
    # the server's judge calls it, or Jepsen's nonmonotonic-poll): (topic, partition, to, redelivered).
    rewinds: list[tuple[str, int, int, int]] = field(default_factory=list)
    # Consumed nothing on a partition for `stuck_after_s` before it stopped while the final log went on past
    # its last record, whatever came before (a partition never consumed again): (topic, partition, last).
    stalls: list[tuple[str, int, int]] = field(default_factory=list)
    skipped: int = 0  # final-log offsets below the client's furthest position it never consumed
    out_of_range: list[OutOfRange] = field(default_factory=list)  # its position fell below the log start
    # What its producer did, as the server's judge names an idempotent producer's outcome after a lost
    # sequence: fatal (no acknowledgement for `stuck_after_s` before the run ended),
    # duplicate (an acknowledged record twice in the final log), clean. The server says whether there was a
    # sequence error at all; this is the same outcome from the client's side.
    producer_outcome: str = "clean"
    # The record-level anomalies of its history against the final log (`epochguard.wire.anomalies`)
    anomalies: list[Anomaly] = field(default_factory=list)
    # Records it consumed at the offset of a transaction marker (a control record handed to the application:
    # a consumer must hide them); left out of every verdict and anomaly, which judge data records.
    markers_read: int = 0

    def verdicts(self) -> dict[tuple[str, int, int], str]:
        return {d.key(): d.verdict for d in self.divergences}


def read_final_log(
    bootstrap: str, topics: Iterable[str] = (CONSUME_TOPIC, PRODUCE_TOPIC), timeout_s: float = 30.0
) -> FinalLog:
    """Read every partition of `topics` from its log start to its high watermark with a fresh
    confluent-kafka consumer (assign, no group), read_uncommitted: every record, an aborted transaction's
    too; then, where that read left gaps (transaction markers), again read_committed, which tells the
    aborted transactions' records from the committed ones (`FinalLog.transactions`). Run it once the
    cluster has healed."""
    import confluent_kafka as ck

    def consumer(isolation: str) -> Any:
        return ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "epochguard-final-log",
                            "enable.auto.commit": False, "client.id": "epochguard-final-log", "log_level": 3,
                            "isolation.level": isolation})

    everything = consumer("read_uncommitted")
    try:
        md = everything.list_topics(timeout=timeout_s)
        bounds: dict[TopicPartition, tuple[int, int]] = {}
        for topic in topics:
            meta = md.topics.get(topic)
            if meta is None or meta.error is not None:
                continue
            for p in meta.partitions:
                low, high = everything.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=timeout_s)
                bounds[(topic, p)] = (low, high)
        records, epochs, todo = _read_to(everything, bounds, timeout_s, stop_when_idle=False)
        if todo:
            raise TimeoutError(f"final log: could not read {sorted(todo)} to the high watermark in {timeout_s}s")
    finally:
        everything.close()
    marked = {tp: b for tp, b in bounds.items() if len(records[tp]) < b[1] - b[0]}  # a marker, or a gap
    transactions: dict[TopicPartition, tuple[Txn, ...]] = {}
    if marked:
        visible = consumer("read_committed")
        try:
            committed, _, _ = _read_to(visible, marked, timeout_s, stop_when_idle=True)
        finally:
            visible.close()
        transactions = {tp: _transactions(records[tp], committed[tp], *marked[tp]) for tp in marked}
    return FinalLog(records, {tp: b[0] for tp, b in bounds.items()}, {tp: b[1] for tp, b in bounds.items()},
                    {tp: t for tp, t in transactions.items() if t}, epochs)


_IDLE_S = 1.5  # a read_committed reader with nothing new for this long sits at the last stable offset


def _read_to(consumer: Any, bounds: Mapping[TopicPartition, tuple[int, int]], timeout_s: float, *,
             stop_when_idle: bool) -> tuple[dict[TopicPartition, dict[int, str]], dict[TopicPartition, dict[int, int]],
                                            set[TopicPartition]]:
    """offset -> digest and offset -> leader epoch of each partition from its low to its high bound, and the
    partitions not read to the end (a position at or past the high bound ends a partition: a marker may sit
    just below it); with `stop_when_idle`, once nothing arrived for `_IDLE_S` (a read_committed reader stops
    at the LSO)."""
    import confluent_kafka as ck

    records: dict[TopicPartition, dict[int, str]] = {tp: {} for tp in bounds}
    epochs: dict[TopicPartition, dict[int, int]] = {tp: {} for tp in bounds}
    todo = {tp for tp, (low, high) in bounds.items() if high > low}
    consumer.assign([ck.TopicPartition(t, p, bounds[(t, p)][0]) for (t, p) in todo])
    deadline = time.monotonic() + timeout_s
    last_news = time.monotonic()
    while todo and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None:
            tp, offset = (str(msg.topic()), int(msg.partition() or 0)), msg.offset()
            if msg.error() is None and tp in todo and offset is not None and offset < bounds[tp][1]:
                records[tp][offset] = digest(msg.value())
                if (epoch := msg.leader_epoch()) is not None and epoch >= 0:
                    epochs[tp][offset] = epoch
                last_news = time.monotonic()
                if offset == bounds[tp][1] - 1:
                    todo.discard(tp)
            continue
        # Nothing for a poll: a partition whose position is at its high bound is done (its last offset holds
        # a marker, which no consumer is handed).
        for position in consumer.position([ck.TopicPartition(t, p) for t, p in todo]):
            if position.offset >= bounds[(str(position.topic), int(position.partition))][1]:
                todo.discard((str(position.topic), int(position.partition)))
        if stop_when_idle and time.monotonic() - last_news > _IDLE_S:
            break
    return records, epochs, todo


def _transactions(everything: Mapping[int, str], committed: Mapping[int, str], low: int, high: int
                  ) -> tuple[Txn, ...]:
    """A partition's decided transactions as its records show them: each run of successive offsets that an
    offset holding no record (its marker) ends, below the high watermark; committed when a read_committed
    reader got its records, aborted when that reader went past it without them; a run the reader did not
    reach (past the last stable offset) is undecided for it and left out. One transactional producer a
    partition is assumed (the scenarios' `events`): interleaved producers' transactions would read as one."""
    reach = max(committed, default=low - 1)
    out: list[Txn] = []
    run: list[int] = []
    for offset in range(low, high):
        if offset in everything:
            run.append(offset)
            continue
        if run:  # a marker (or a compacted offset) ends the run
            first, last = run[0], run[-1]
            if any(o in committed for o in run):
                out.append(Txn(first, last, ((first, last),), True))
            elif last < reach:
                out.append(Txn(first, last, ((first, last),), False))
        run = []
    return tuple(out)


def judge_client(
    log: Iterable[Mapping[str, Any]] | str | Path,
    final: FinalLog,
    *,
    consume_topic: str = CONSUME_TOPIC,
    stuck_after_s: float = 10.0,
    faults_t: float | Sequence[float] | None = None,
    unclean: bool = False,
    read_committed: bool = False,
    epochs: Mapping[str, int] | None = None,
) -> ClientTruth:
    """The client's verdicts, anomalies and producer outcome from its delivery log and the final log;
    `faults_t`, when known, is the wall-clock time the run's faults started (the delivery logs' clock), or
    each time they did (`consecutive-unclean` triggers twice);
    `epochs`: record digest -> leader epoch, as the run's delivery logs say (`read_epochs`), for the records
    this client consumed without one (its client does not expose it);
    `unclean`: the run's cluster allows unclean elections (a lost acknowledged record is then expected);
    `read_committed`: the client was asked to read committed records only (torn-txn, lso-stuck)."""
    entries: list[Mapping[str, Any]] = list(read_log(log)) if isinstance(log, (str, Path)) else list(log)
    markers = {(tp, t.last + 1) for tp, ts in final.transactions.items() for t in ts}
    marker_reads = [e for e in entries if e["kind"] == "consumed" and ((e["topic"], e["partition"]), e["offset"])
                    in markers and final.digest_at((e["topic"], e["partition"]), e["offset"]) is None]
    if marker_reads:
        dropped = {id(e) for e in marker_reads}
        entries = [e for e in entries if id(e) not in dropped]
    start = next((e for e in entries if e["kind"] == "start"), {})
    end_t = max((e["t"] for e in entries), default=0.0)
    # The consumer's history ends when the driver was told to stop, though its producer may flush for
    # seconds after (kafka-go's async writer): a log going on meanwhile is no stall.
    consumed_until = next((e["t"] for e in entries if e["kind"] == "stopping"), end_t)
    software = " ".join(str(start[k]) for k in ("software", "version") if start.get(k))
    truth = ClientTruth(client_id=start.get("client_id", "?"), software=software or "?",
                        markers_read=len(marker_reads))
    surfaced = [e for e in entries if e["kind"] in ("truncation", "reset", "error")]
    by_tp: dict[TopicPartition, list[Mapping[str, Any]]] = defaultdict(list)
    for e in entries:
        if e["kind"] == "consumed" and e["topic"] == consume_topic:
            by_tp[(e["topic"], e["partition"])].append(e)
    for tp, consumed in sorted(by_tp.items()):
        truth.consumed += len(consumed)
        _judge_partition(tp, consumed, final, surfaced, consumed_until, stuck_after_s, truth, faults_t, epochs)
    _judge_produced(entries, final, truth)
    acked_t = [e["t"] for e in entries if e["kind"] == "produced" and e.get("offset") is not None]
    if acked_t and end_t - acked_t[-1] >= stuck_after_s:
        truth.producer_outcome = "fatal"
    elif truth.duplicated_produced:
        truth.producer_outcome = "duplicate"
    healed = Healed.of_records(final.partitions, final.log_start, final.transactions)
    history = client_history(entries, consume_topic, truth)
    history.read_committed = read_committed
    truth.anomalies = find_anomalies(history, healed, expected=lambda _ack: unclean, aborted=final.aborted(),
                                     stuck_after=stuck_after_s)
    return truth


def client_history(entries: Iterable[Mapping[str, Any]], consume_topic: str, truth: ClientTruth) -> History:
    """The client's history as its delivery log tells it: `consumed` records of `consume_topic` (value: the
    digest), `assigned` entries as moves (of their `partitions`, or of all), acknowledged `produced`
    records in the order acknowledged, when a send to each partition last failed (one without a partition:
    to each of its topic's it had acknowledgements from), the partitions it stalled on (`truth.stalls`), and
    when its log ends."""
    history = History(stalled={(t, p) for t, p, _last in truth.stalls}, end=max((e["t"] for e in entries),
                                                                                   default=0.0))
    failed: dict[str, list[tuple[int | None, float]]] = defaultdict(list)
    for e in entries:
        if e["kind"] == "produced" and e.get("offset") is None:
            failed[e["topic"]].append((e.get("partition"), e["t"]))
        if e["kind"] == "consumed" and e["topic"] == consume_topic:
            history.events.append(Read((e["topic"], e["partition"]), e["offset"], e["digest"]))
        elif e["kind"] == "assigned":
            parts = e.get("partitions")
            history.events.extend([Moved((e["topic"], p)) for p in parts] if parts is not None else [Moved()])
        elif e["kind"] == "produced" and e.get("offset") is not None and e.get("partition") is not None:
            history.acks.append(Ack((e["topic"], e["partition"]), e["offset"], e["digest"], at=e["t"]))
    for tp in {a.tp for a in history.acks}:
        history.failed[tp] = max((t for p, t in failed[tp[0]] if p is None or p == tp[1]), default=0.0)
    return history


def _judge_partition(
    tp: TopicPartition,
    consumed: list[Mapping[str, Any]],
    final: FinalLog,
    surfaced: list[Mapping[str, Any]],
    end_t: float,
    stuck_after_s: float,
    truth: ClientTruth,
    faults_t: float | Sequence[float] | None = None,
    epochs: Mapping[str, int] | None = None,
) -> None:
    faults = [faults_t] if isinstance(faults_t, (int, float)) else sorted(faults_t or ())
    log_start = final.log_start.get(tp, 0)
    high_watermark = final.high_watermark.get(tp, 0)

    def phantom(e: Mapping[str, Any]) -> bool:  # below the log start: deleted, not replaced
        return e["offset"] >= log_start and final.digest_at(tp, e["offset"]) != e["digest"]

    seen: Counter[int] = Counter()
    read: dict[int, str] = {}  # offset -> the digest last consumed there
    i, n = 0, len(consumed)
    furthest = -1  # of the records consumed that the final log holds; a divergence's rewind starts anew
    while i < n:
        if not phantom(consumed[i]):
            offset = consumed[i]["offset"]
            if offset <= furthest:
                truth.rewinds.append((tp[0], tp[1], offset, furthest + 1 - offset))
            seen[offset] += 1
            read[offset] = consumed[i]["digest"]
            furthest = offset
            i += 1
            continue
        j = i
        while j < n and phantom(consumed[j]):
            e = consumed[j]
            if j > i and e["offset"] <= consumed[j - 1]["offset"] and read.get(e["offset"], e["digest"]) != e["digest"]:
                break  # back to an offset read before, holding another record now: a later replacement's run
            read[e["offset"]] = e["digest"]
            j += 1
        run = consumed[i:j]
        first, last = run[0]["offset"], max(e["offset"] for e in run)
        nxt = consumed[j] if j < n else None
        t0, t1 = run[0]["t"], (nxt["t"] if nxt is not None else end_t)
        evidence = tuple(e["text"] for e in surfaced if t0 <= e["t"] <= t1)
        # From the faults that made them phantoms: the first to start after the last was read, if any
        last_t = next((f for f in faults if f >= run[-1]["t"]), run[-1]["t"])
        epoch = run[-1].get("leader_epoch")
        epoch = (epochs or {}).get(run[-1]["digest"]) if epoch is None else epoch
        located = None if epoch is None else final.epoch_end(tp, epoch)
        if located is not None and located > first:  # KIP-320 cannot point at the first phantom
            verdict, how = _undetectable(first, last_t, nxt, end_t, stuck_after_s)
        else:
            verdict, how = _verdict(first, last, last_t, nxt, (log_start, high_watermark), evidence, end_t,
                                    stuck_after_s)
        nxt_offset = nxt["offset"] if nxt is not None else None
        redelivered = first - nxt_offset if how in ("rewound", "back") and nxt_offset is not None else 0
        skipped = 0
        if (verdict == "silent" or how == "continued") and nxt_offset is not None:
            skipped = sum(1 for o in final.partitions.get(tp, {}) if first <= o < nxt_offset)
        truth.divergences.append(Divergence(
            tp[0], tp[1], first, last, len(run), verdict, nxt_offset, evidence, how, max(redelivered, 0), skipped,
            at_log_start=how == "rewound" and nxt_offset == log_start and verdict == "detected",  # a reset
            epoch=epoch, located=located,
        ))
        furthest = -1  # what comes next is judged by the divergence's verdict, not as a rewind
        i = j
    truth.reread += sum(c - 1 for c in seen.values())
    _judge_log_start(tp, consumed, final, end_t, stuck_after_s, truth)
    tail = consumed[-1]
    if high_watermark > tail["offset"] + 1 and end_t - tail["t"] >= stuck_after_s:
        truth.stalls.append((tp[0], tp[1], tail["offset"]))
    if seen:
        furthest = max(seen)
        truth.skipped += sum(1 for o in final.partitions.get(tp, {}) if o <= furthest and o not in seen
                             and not any(d.offset <= o for d in truth.divergences if (d.topic, d.partition) == tp))


def _judge_log_start(
    tp: TopicPartition, consumed: list[Mapping[str, Any]], final: FinalLog, end_t: float, stuck_after_s: float,
    truth: ClientTruth,
) -> None:
    """The first time the client's position fell below the log start (it consumed up to below it), and
    what it consumed next: at the start, past it, or nothing."""
    log_start = final.log_start.get(tp, 0)
    below = [i for i, e in enumerate(consumed) if e["offset"] < log_start]
    if not below or consumed[below[-1]]["offset"] + 1 >= log_start:  # none, or it read up to the start
        return
    i = below[-1]
    position = consumed[i]["offset"] + 1
    nxt = next((e for e in consumed[i + 1:] if e["offset"] >= log_start), None)
    if nxt is not None:
        to = nxt["offset"]
        skipped = sum(1 for o in final.partitions.get(tp, {}) if log_start <= o < to)
        truth.out_of_range.append(OutOfRange(tp[0], tp[1], position, log_start, to,
                                             "start" if to == log_start else "forward", skipped))
    elif final.high_watermark.get(tp, 0) > log_start:
        how = "stopped" if end_t - consumed[i]["t"] >= stuck_after_s else ""
        truth.out_of_range.append(OutOfRange(tp[0], tp[1], position, log_start, None, how))


def _verdict(
    first: int,
    last: int,
    last_t: float,
    nxt: Mapping[str, Any] | None,
    final_bounds: tuple[int, int],
    evidence: tuple[str, ...],
    end_t: float,
    stuck_after_s: float,
) -> tuple[str, str]:
    """One divergence's verdict and how; `undecided` when the run ended too soon after it to tell."""
    log_start, high_watermark = final_bounds
    if nxt is None:
        if any("truncat" in text.lower() for text in evidence):
            return "detected", "raised"  # consumed nothing more
        if end_t - last_t < stuck_after_s:
            return "undecided", ""
        return ("stuck" if high_watermark > last + 1 else "silent"), ""
    if nxt["t"] - last_t > stuck_after_s:
        return "stuck", ""
    offset = nxt["offset"]
    if offset == log_start and first > log_start:
        return "reset", "back"
    if offset <= first:
        return "detected", "rewound"
    return "silent", ""


def _undetectable(first: int, last_t: float, nxt: Mapping[str, Any] | None, end_t: float,
                  stuck_after_s: float) -> tuple[str, str]:
    """A divergence KIP-320 cannot locate: `undetectable`, and what the client did: went on past the first
    phantom (`continued`), back to it or below (`rewound`), or consumed nothing more (`stopped`)."""
    if nxt is None:
        return ("undecided", "") if end_t - last_t < stuck_after_s else ("undetectable", "stopped")
    if nxt["t"] - last_t > stuck_after_s:
        return "undetectable", "stopped"
    return "undetectable", "rewound" if nxt["offset"] <= first else "continued"


def read_epochs(logs: Iterable[Iterable[Mapping[str, Any]] | str | Path]) -> dict[str, int]:
    """Record digest -> leader epoch, from the `consumed` entries of a run's delivery logs that carry one: a
    record is written once, in one batch of one epoch (the scenarios' values are unique), so any client that
    read it can say, for one whose client does not expose epochs."""
    out: dict[str, int] = {}
    for log in logs:
        for e in read_log(log) if isinstance(log, (str, Path)) else log:
            if e["kind"] == "consumed" and e.get("leader_epoch") is not None:
                out.setdefault(e["digest"], e["leader_epoch"])
    return out


def _judge_produced(entries: list[Mapping[str, Any]], final: FinalLog, truth: ClientTruth) -> None:
    acked = [e for e in entries if e["kind"] == "produced" and e.get("offset") is not None]
    topics = {e["topic"] for e in acked}
    held: Counter[str] = Counter(
        d for tp, records in final.partitions.items() if tp[0] in topics for d in records.values()
    )
    truth.produced_acked = len(acked)
    truth.lost_acked = [e["digest"] for e in acked if held[e["digest"]] == 0]
    truth.duplicated_produced = sorted({e["digest"] for e in acked if held[e["digest"]] > 1})


def judge_handoff(
    before: Iterable[Mapping[str, Any]] | str | Path,
    after: Iterable[Mapping[str, Any]] | str | Path,
    final: FinalLog,
    *,
    consume_topic: str = CONSUME_TOPIC,
    stuck_after_s: float = 10.0,
) -> list[Divergence]:
    """A partition handed over through a committed offset (`handoff-truncation`): `before` is the delivery
    log of the member that read records, committed its position and left; `after` that of the member that
    took the partition over from the commit. The divergence point is the first record `before` consumed
    that the final log does not hold (at or above its log start: a phantom), as for one client; where `after`
    first consumed on the partition says what it did with the position it was handed: at the log start
    (below the point) `reset`/`back`, at or below the point `detected`/`rewound` (it validated the committed
    offset and epoch), past it `silent` (`skipped`: the final log's records from the point on it jumped
    over); nothing for `stuck_after_s` after it started, `stuck` (`undecided` before that)."""
    def entries(log: Iterable[Mapping[str, Any]] | str | Path) -> list[Mapping[str, Any]]:
        return list(read_log(log)) if isinstance(log, (str, Path)) else list(log)

    first, later = entries(before), entries(after)
    out: list[Divergence] = []
    for tp in sorted({(e["topic"], e["partition"]) for e in first if e["kind"] == "consumed"
                      and e["topic"] == consume_topic}):
        log_start = final.log_start.get(tp, 0)
        phantoms = [e for e in first if e["kind"] == "consumed" and (e["topic"], e["partition"]) == tp
                    and e["offset"] >= log_start and final.digest_at(tp, e["offset"]) != e["digest"]]
        if not phantoms:
            continue
        point, last = phantoms[0]["offset"], max(e["offset"] for e in phantoms)
        nxt = next((e for e in later if e["kind"] == "consumed" and (e["topic"], e["partition"]) == tp), None)
        start_t = next((e["t"] for e in later if e["kind"] == "start"), None)
        end_t = max((e["t"] for e in later), default=0.0)
        verdict, how, skipped = "undecided", "", 0
        if nxt is None:
            if start_t is not None and end_t - start_t >= stuck_after_s:
                verdict = "stuck"
        elif nxt["offset"] == log_start and point > log_start:
            verdict, how = "reset", "back"
        elif nxt["offset"] <= point:
            verdict, how = "detected", "rewound"
        else:
            verdict = "silent"
            skipped = sum(1 for o in final.partitions.get(tp, {}) if point <= o < nxt["offset"])
        out.append(Divergence(tp[0], tp[1], point, last, len(phantoms), verdict,
                              None if nxt is None else nxt["offset"], how=how, skipped=skipped))
    return out

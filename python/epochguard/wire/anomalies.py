"""Per-client record-level anomalies, from one client's history against the healed log, named after
Jepsen's Kafka checker (`jepsen.tests.kafka` in jepsen-io/jepsen) where it has one.

One implementation, two inputs: the delivery-log truth (`wire/drivers/truth.py`) builds a `History` from
what the client's own log says it consumed and had acknowledged, the server's judge (`wire/judge.py`) from
what `epochguard serve` served it and acknowledged to it; each compares it with the log as the healed
cluster holds it (`Healed`: the truth reads it back with a fresh consumer, the judge takes the leaders'
logs). The values compared are opaque: a record's digest on the truth's side, a batch's CRC on the
server's (a served batch is a `Read` of its offsets; a replaced batch has another CRC).

The history, per client: `Read`s and `Moved`s in the order the client consumed them (a `Moved` is a
position set on purpose: an assignment, a resume from a committed offset), and `Ack`s in the order the
client got them. Successive reads are those on one partition with no `Moved` of it between (Jepsen's
"no assign/subscribe between dropping the key"). Offsets are compared as the healed log's dense index:
only offsets holding a record count, so a transaction marker (a control batch occupies an offset and
holds no record) or a compacted offset between two reads is no gap.

- `phantom-read` (Jepsen: inconsistent-offsets): a maximal run of successive reads whose value the healed
  log does not hold at that offset (at or above its log start: records below it were deleted, not
  replaced): the client consumed records an unclean election or a zombie later replaced.
- `rewind` (nonmonotonic-poll): a read at or below the previous successive read (index delta < 1), both
  held by the healed log: the client went back though nothing it had read was replaced (after a phantom
  the rewind is the divergence's `detected` or `reset`, judged per event). `count`: records consumed again.
- `skip` (poll-skip): a read more than one index past the previous successive read (delta > 1), both held
  by the healed log: records the healed log has between them were never consumed. After a phantom the
  jump is the divergence's `silent`; from below the log start it is `out-of-range` (records deleted).
  Jepsen compares a value's index only when both values are in its version order, the same rule.
- `unseen` (unseen): on a partition where the client stalled (it stopped consuming while the log went
  on), the healed log's records past the furthest it read. `count`: those records.
- `lost-ack` (lost-write): an acknowledged (acks=all) send whose value the healed log holds nowhere on its
  partition; tagged `expected` when an unclean election made the loss allowed.
- `duplicate-write` (duplicate): an acknowledged send whose value the healed log holds at more than one
  offset (a retry written twice).
- `send-reorder` (nonmonotonic-send): an acknowledged send that the healed log holds below the send
  acknowledged just before it on the same partition (in acknowledgement order: what the client and the
  server both see; a retried batch acknowledged after a later one is in order there).
- `aborted-read` (G1a): a read of a record whose transaction was aborted (the caller says which values).
- `torn-txn` (Jepsen's lost-write through transaction atomicity; Bufstream's torn transactions): a
  read_committed client that, in one stretch of successive reads of a partition, read a record below a
  committed transaction of the healed log, some but not all of that transaction's records, and a record
  past it: it went through the transaction and saw part of it (`count`: its records it never read).
  `offset`: the transaction's first. A stretch that starts inside the transaction (a position set there
  on purpose) or that passes it reading none of it (a `skip`) tears nothing.
- `lso-stuck` (no Jepsen name; KAFKA-20716): a read_committed client that stalled on a partition (as for
  `unseen`) right below a transaction the healed log holds decided (its COMMIT or ABORT marker is in the
  log): the first record the log holds past the client's furthest read is that transaction's first, and the
  client never got past it, as a consumer whose position sits at a last stable offset that stopped moving
  does. `offset`: the transaction's first; `count`: the records the log holds from it on.
- `producer-stuck` (no Jepsen name; Bufstream's "stuck producers" are kin): the client's last acknowledgement
  on a partition came the stuck bound or more before its history ends, and a send to it failed after;
  `offset`: that last acknowledgement's.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ANOMALIES", "Ack", "Anomaly", "Healed", "History", "Moved", "Read", "Txn", "find_anomalies", "summary"]

TP = tuple[str, int]
ANOMALIES = ("phantom-read", "rewind", "skip", "unseen", "lost-ack", "duplicate-write", "send-reorder",
             "aborted-read", "torn-txn", "lso-stuck", "producer-stuck")


@dataclass(frozen=True, slots=True)
class Read:
    """Records `offset`..`last` of `tp` the client consumed, whose content is `value` (the healed log is
    asked for its value at `at`: the record's own offset, or the base offset of a served batch)."""

    tp: TP
    offset: int
    value: Hashable
    last: int = -1  # -1: `offset` alone
    at: int = -1  # -1: `offset`

    @property
    def end(self) -> int:
        return max(self.last, self.offset)

    @property
    def key(self) -> int:
        return self.offset if self.at < 0 else self.at


@dataclass(frozen=True, slots=True)
class Moved:
    """The client's position on `tp` was set on purpose (an assignment, a resume from a commit); None: all."""

    tp: TP | None = None


@dataclass(frozen=True, slots=True)
class Ack:
    """An acknowledged send of `value` (a record, or a batch) to `tp`, acknowledged at `offset`."""

    tp: TP
    offset: int
    value: Hashable
    epoch: int = -1  # the partition's leader epoch when it was acknowledged, where known
    at: float = 0.0  # when (the history's clock: the server's steps, the delivery log's seconds)


@dataclass
class History:
    """One client's history: reads and moves in consumption order, acks in acknowledgement order."""

    events: list[Read | Moved] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    stalled: set[TP] = field(default_factory=set)  # partitions it stopped consuming while the log went on
    failed: dict[TP, float] = field(default_factory=dict)  # when a send to each partition last failed
    end: float = 0.0  # when its history ends (the acks' clock)
    read_committed: bool = False  # its reads were read_committed (torn-txn and lso-stuck judge only those)


@dataclass(frozen=True, slots=True)
class Txn:
    """A decided transaction of the healed log on one partition: its first and last data offsets, the spans
    of offsets holding its records, and whether it committed (its marker is in the log; an open one is no
    `Txn`)."""

    first: int
    last: int
    spans: tuple[tuple[int, int], ...]
    committed: bool

    @property
    def records(self) -> int:
        return sum(last - first + 1 for first, last in self.spans)

    def overlap(self, low: int, high: int) -> set[int]:
        """Its record offsets within `low`..`high`."""
        return {o for f, last in self.spans for o in range(max(f, low), min(last, high) + 1)}


class Healed:
    """The healed cluster's log: per partition, what it holds at each keyed offset, where its records are
    (spans of offsets holding a record: the dense index), and its log start."""

    def __init__(self, values: Mapping[TP, Mapping[int, Hashable]], spans: Mapping[TP, Sequence[tuple[int, int]]],
                 log_start: Mapping[TP, int], transactions: Mapping[TP, Sequence[Txn]] | None = None) -> None:
        """`spans`: the records a consumer of the isolation judged reads (an aborted transaction's are no
        record of the dense index; `values` may still hold them, so reading one is no phantom);
        `transactions`: each partition's decided transactions."""
        self.values = values
        self.log_start = log_start
        self.transactions = {tp: sorted(ts, key=lambda t: t.first) for tp, ts in (transactions or {}).items()}
        self.txn_firsts = {tp: [t.first for t in ts] for tp, ts in self.transactions.items()}
        self._firsts: dict[TP, list[int]] = {}
        self._lasts: dict[TP, list[int]] = {}
        self._before: dict[TP, list[int]] = {}  # records held in the spans before each one
        for tp, ss in spans.items():
            ordered = sorted(ss)
            self._firsts[tp] = [f for f, _ in ordered]
            self._lasts[tp] = [last for _, last in ordered]
            counts, n = [], 0
            for f, last in ordered:
                counts.append(n)
                n += last - f + 1
            self._before[tp] = [*counts, n]
        self._where: dict[TP, dict[Hashable, list[int]]] = {}

    @classmethod
    def of_records(cls, records: Mapping[TP, Mapping[int, Hashable]], log_start: Mapping[TP, int],
                   transactions: Mapping[TP, Sequence[Txn]] | None = None) -> Healed:
        """A log given record by record (offset -> value): each offset is its own span, but an aborted
        transaction's (`transactions`)."""
        aborted = {tp: {o for t in ts if not t.committed for f, last in t.spans for o in range(f, last + 1)}
                   for tp, ts in (transactions or {}).items()}
        return cls(records, {tp: [(o, o) for o in r if o not in aborted.get(tp, ())] for tp, r in records.items()},
                   log_start, transactions)

    def first_after(self, tp: TP, offset: int) -> int | None:
        """The first offset past `offset` holding a value (a record, an aborted one included)."""
        later = [o for o in self.values.get(tp, {}) if o > offset]
        return min(later, default=None)

    def value_at(self, tp: TP, offset: int) -> Hashable | None:
        return self.values.get(tp, {}).get(offset)

    def held_up_to(self, tp: TP, offset: int) -> int:
        """Records the log holds at offsets <= `offset`."""
        firsts = self._firsts.get(tp)
        if not firsts:
            return 0
        i = bisect.bisect_right(firsts, offset)  # spans starting at or before it
        if i == 0:
            return 0
        before = self._before[tp][i - 1]
        return before + min(offset, self._lasts[tp][i - 1]) - firsts[i - 1] + 1

    def held_between(self, tp: TP, low: int, high: int) -> int:
        """Records the log holds strictly between offsets `low` and `high`."""
        return max(0, self.held_up_to(tp, high - 1) - self.held_up_to(tp, low))

    def held_after(self, tp: TP, offset: int) -> int:
        return self._before.get(tp, [0])[-1] - self.held_up_to(tp, offset)

    def where(self, tp: TP, value: Hashable) -> list[int]:
        """The keyed offsets holding `value` on `tp`, ascending."""
        index = self._where.get(tp)
        if index is None:
            index = self._where[tp] = defaultdict(list)
            for offset in sorted(self.values.get(tp, {})):
                index[self.values[tp][offset]].append(offset)
        return index.get(value, [])


@dataclass(frozen=True)
class Anomaly:
    name: str
    topic: str
    partition: int
    offset: int
    count: int = 1
    tag: str = ""  # lost-ack: "expected" where an unclean election allowed it

    @property
    def label(self) -> str:
        return f"{self.name}/{self.tag}" if self.tag else self.name

    def to_json(self) -> dict[str, Any]:
        return {"anomaly": self.name, "topic": self.topic, "partition": self.partition, "offset": self.offset,
                "count": self.count, "tag": self.tag}


def find_anomalies(history: History, healed: Healed, *, expected: Callable[[Ack], bool] = lambda _a: False,
                   aborted: Iterable[Hashable] = (), stuck_after: float | None = None,
                   acks_healed: Healed | None = None) -> list[Anomaly]:
    """Every anomaly of one client's `history` against `healed`; `expected(ack)` says whether an unclean
    election allowed that ack's loss, `aborted` holds the values of aborted transactions' records,
    `stuck_after` is the stuck bound on the history's clock (None: no producer-stuck), `acks_healed` the
    log the acks are looked up in when their values are not `healed`'s (records, where reads are batches)."""
    out = _reads(history, healed, set(aborted))
    if history.read_committed:
        out += _torn(history, healed) + _lso_stuck(history, healed)
    out += _acks(history.acks, healed if acks_healed is None else acks_healed, expected)
    if stuck_after is not None:
        out += _producer_stuck(history, stuck_after)
    return out


def _producer_stuck(history: History, bound: float) -> list[Anomaly]:
    """Partitions whose last acknowledgement came `bound` or more before the history's end, a send failing
    after it: the producer stopped getting through (aiokafka#1017: refused OUT_OF_ORDER_SEQUENCE_NUMBER until
    restarted; librdkafka#3584: fatal). A producer that stopped sending by itself had no failure after."""
    last: dict[TP, Ack] = {}
    for a in history.acks:
        if a.tp not in last or a.at >= last[a.tp].at:
            last[a.tp] = a
    return [Anomaly("producer-stuck", tp[0], tp[1], a.offset) for tp, a in sorted(last.items())
            if history.failed.get(tp, a.at) > a.at and history.end - a.at >= bound]


def _reads(history: History, healed: Healed, aborted: set[Hashable]) -> list[Anomaly]:
    out: list[Anomaly] = []
    previous: dict[TP, Read] = {}  # the last successive read per partition
    phantom_run: dict[TP, list[int]] = {}  # first offset, records, of the phantom run in progress
    furthest: dict[TP, int] = {}

    def phantom(r: Read) -> bool:
        return r.key >= healed.log_start.get(r.tp, 0) and healed.value_at(r.tp, r.key) != r.value

    def close_run(tp: TP) -> None:
        run = phantom_run.pop(tp, None)
        if run is not None:
            out.append(Anomaly("phantom-read", tp[0], tp[1], run[0], run[1]))

    for e in history.events:
        if isinstance(e, Moved):
            for tp in [e.tp] if e.tp is not None else list(previous):
                previous.pop(tp, None)
                close_run(tp)
            continue
        tp, prev = e.tp, previous.get(e.tp)
        records = e.end - e.offset + 1
        furthest[tp] = max(furthest.get(tp, -1), e.end)
        if e.value in aborted:
            out.append(Anomaly("aborted-read", tp[0], tp[1], e.offset, records))
        if phantom(e):
            run = phantom_run.setdefault(tp, [e.offset, 0])
            run[1] += records
        else:
            close_run(tp)
        if prev is not None and not phantom(prev) and not phantom(e):  # both in the healed order, as Jepsen's
            out.extend(_successive(prev, e, healed))
        previous[tp] = e
    for tp in list(phantom_run):
        close_run(tp)
    return out + _unseen(history.stalled, furthest, healed)


def _torn(history: History, healed: Healed) -> list[Anomaly]:
    """The committed transactions a read_committed client went through reading part of them: per stretch of
    successive reads of a partition (a `Moved` ends it), the lowest offset read, and of each transaction it
    read into, which of its records, until a read past it decides."""
    out: list[Anomaly] = []
    low: dict[TP, int] = {}  # the lowest offset read in the stretch
    into: dict[TP, dict[int, tuple[Txn, set[int]]]] = defaultdict(dict)  # the transactions read into, by first
    for e in history.events:
        if isinstance(e, Moved):
            for tp in [e.tp] if e.tp is not None else list(low):
                low.pop(tp, None)
                into.pop(tp, None)
            continue
        txns = healed.transactions.get(e.tp)
        if not txns:
            continue
        low[e.tp] = min(low.get(e.tp, e.offset), e.offset)
        touched = into[e.tp]
        for first, (t, seen) in list(touched.items()):
            if e.offset > t.last:  # past it: decided
                del touched[first]
                if low[e.tp] < t.first and len(seen) < t.records:
                    out.append(Anomaly("torn-txn", e.tp[0], e.tp[1], t.first, t.records - len(seen)))
        firsts = healed.txn_firsts[e.tp]
        for t in txns[max(0, bisect.bisect_right(firsts, e.offset) - 1):bisect.bisect_right(firsts, e.end)]:
            if t.committed and t.last >= e.offset and (part := t.overlap(e.offset, e.end)):
                touched.setdefault(t.first, (t, set()))[1].update(part)
    return out


def _lso_stuck(history: History, healed: Healed) -> list[Anomaly]:
    """The stalled partitions whose next record past the furthest read starts a decided transaction."""
    furthest: dict[TP, int] = {}
    for e in history.events:
        if isinstance(e, Read):
            furthest[e.tp] = max(furthest.get(e.tp, -1), e.end)
    out = []
    for tp in sorted(history.stalled):
        at = healed.first_after(tp, furthest.get(tp, healed.log_start.get(tp, 0) - 1))
        if at is not None and any(t.first == at for t in healed.transactions.get(tp, ())):
            out.append(Anomaly("lso-stuck", tp[0], tp[1], at, healed.held_after(tp, at - 1)))
    return out


def _unseen(stalled: Iterable[TP], furthest: Mapping[TP, int], healed: Healed) -> list[Anomaly]:
    """What the healed log holds past the furthest read of each partition the client stalled on."""
    out = []
    for tp in sorted(stalled):
        left = healed.held_after(tp, furthest.get(tp, healed.log_start.get(tp, 0) - 1))
        if left:
            out.append(Anomaly("unseen", tp[0], tp[1], furthest.get(tp, -1) + 1, left))
    return out


def _successive(prev: Read, read: Read, healed: Healed) -> list[Anomaly]:
    """`rewind` or `skip` between two successive reads of one partition, the first held by the healed log."""
    tp = read.tp
    if read.offset <= prev.end:
        return [Anomaly("rewind", tp[0], tp[1], read.offset, prev.end + 1 - read.offset)]
    if prev.end + 1 < healed.log_start.get(tp, 0):  # deleted records between: out-of-range's
        return []
    gap = healed.held_between(tp, prev.end, read.offset)  # the dense index: more than one past
    return [Anomaly("skip", tp[0], tp[1], prev.end + 1, gap)] if gap else []


def _acks(acks: Sequence[Ack], healed: Healed, expected: Callable[[Ack], bool]) -> list[Anomaly]:
    out: list[Anomaly] = []
    last: dict[TP, int] = {}  # the healed offset of the send acknowledged last
    doubled: set[tuple[TP, Hashable]] = set()
    for a in acks:
        tp = a.tp
        where = healed.where(tp, a.value)
        if not where:
            out.append(Anomaly("lost-ack", tp[0], tp[1], a.offset, tag="expected" if expected(a) else ""))
            continue
        if len(where) > 1 and (tp, a.value) not in doubled:
            doubled.add((tp, a.value))
            out.append(Anomaly("duplicate-write", tp[0], tp[1], where[1], len(where) - 1))
        if where[0] < last.get(tp, -1):
            out.append(Anomaly("send-reorder", tp[0], tp[1], where[0]))
        last[tp] = where[0]
    return out


def summary(anomalies: Iterable[Anomaly]) -> Counter[str]:
    """How many of each anomaly (by label: `lost-ack/expected` apart from `lost-ack`)."""
    return Counter(a.label for a in anomalies)

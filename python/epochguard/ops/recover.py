"""`epochguard recover`'s rules, by column: which records of an audit's `lost_records.parquet` go back into
a partition, and which are there already. No Kafka class does this (Kafka's answer to an unclean election
is a backup); the producing side is `client.KafkaProducer`'s idempotent (or transactional) producer.

- What is lost: rows of kind "lost" that are not control records (aborted-transaction records and
  markers never); per partition the union over the old replicas that listed them: one record per
  (offset, leader epoch), however many brokers held it (the lowest broker id named as its source), in
  offset order.
- Provenance: each re-published record carries the header `epochguard.recovered-from` =
  "topic/partition/offset/leader_epoch/broker" (decimal; defined once, by column: `provenance_column`
  writes it, `provenance_origins` reads it back; `provenance` / `parse_provenance` are the one-record forms).
- Already there (`plan`), from the records the partition holds now from the divergence point on:
  a record carrying the provenance of a lost one was re-published by an earlier run (complete or cut
  off): skipped; a record whose key, value and headers equal a lost one's is that record retried by its
  producer to the new leader: "already present", each present record matching at most one lost record.
- Records of a transaction no marker ends in the old replica's log (the audit's `uncommitted`: its
  COMMIT, if the coordinator wrote one, never reached that replica, so no read_committed consumer read
  them there, and whether it committed is not on the disk) are left, reported as such, unless
  `include_uncommitted`.
- The operator's limits (`until_offset`, `from_epoch`) skip the rest, reported as such.

The plan works on Arrow tables (a million lost records are a million rows, not a million Python objects):
the provenance matches are an `index_in` of the lost records' origins in the present ones'; the content
matches an `is_in` prefilter on key and value, then, for the rows it keeps, one integer per distinct (key,
value, headers) (`_contents`) paired with its occurrence number (`_nth`): the k-th lost record of a content
takes its k-th present copy. `LostRecord` lists are made only when asked for (`Plan.publish`, ...).

`recover(audit_dir, bootstrap_servers, ...)` applies them to a live cluster: it reads the audit's
`lost_records.parquet` (pyarrow), each partition from its divergence point (the lowest the audit's
`partitions.parquet` gives a diverged replica of it, else its first lost offset) to its end (read_uncommitted:
an earlier run's records count even if a transaction of it is still open), produces what is left with the
idempotent producer (acks=all, one partition's records in order, original timestamps, the provenance header
added; `send_arrow`: encoded in Rust, by column), to the same partition of the same topic or of `to_topic`,
and writes `recovered.parquet` (original and new place of every lost record, and its outcome) atomically into
the audit dir. `dry_run` plans only. Every action is logged. `transactional_id`: each partition's records in
one transaction (read_committed consumers never see half a recovery), the partition read read_committed.

`EPOCHGUARD_RECOVER_HALT_AFTER=N` (for tests only: tests/real_kafka/test_real_recover.py) makes a run stop
still, once the first N records of a partition are acknowledged, until it is killed: a kill mid-partition
at a known point.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from epochguard.types import TopicPartition

__all__ = ["PROVENANCE_HEADER", "OUTCOMES", "LostRecord", "Present", "Plan", "lost_by_partition", "lost_tables",
           "divergence_points", "provenance", "provenance_column", "parse_provenance", "provenance_origins", "plan",
           "recover"]

log = logging.getLogger(__name__)

PROVENANCE_HEADER = "epochguard.recovered-from"
# its value: topic/partition/offset/leader_epoch/broker, the numbers in decimal as Arrow casts them; a topic
# may hold '/' (the numbers are the last four fields)
_PROVENANCE = rb"^.+/-?[0-9]+/-?[0-9]+/-?[0-9]+/-?[0-9]+$"
_ORIGIN = ("topic", "partition", "offset", "leader_epoch")  # what identifies a record across replicas and runs

Headers = tuple[tuple[str, bytes | None], ...]

# the outcomes of a lost record, in the order the rules try them (a record takes the first that holds)
OUTCOMES = ("recovered before", "already present", "uncommitted, left", "skipped by limits", "publish")
_RECOVERED, _PRESENT, _UNCOMMITTED, _LIMITS, _PUBLISH = range(len(OUTCOMES))


class LostRecord(NamedTuple):
    """One lost record as the audit decoded it from an old replica's log (a row of a lost table, made only
    when asked for)."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int
    broker: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    uncommitted: bool = False  # of a transaction no marker ends in the replica's log (the audit's column)

    @property
    def origin(self) -> tuple[str, int, int, int]:
        """What identifies it across replicas and runs (not the broker: two replicas held one record)."""
        return self.topic, self.partition, self.offset, self.leader_epoch


@dataclass(frozen=True, slots=True)
class Present:
    """A record the partition holds now (at or past the divergence point)."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


def _header_type() -> Any:
    import pyarrow as pa

    return pa.struct([("key", pa.string()), ("value", pa.binary())])


def _lost_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                      ("leader_epoch", pa.int32()), ("broker", pa.int32()), ("timestamp", pa.int64()),
                      ("key", pa.binary()), ("value", pa.binary()), ("headers", pa.list_(_header_type())),
                      ("uncommitted", pa.bool_())])


def _present_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("offset", pa.int64()), ("key", pa.binary()), ("value", pa.binary()),
                      ("headers", pa.list_(_header_type()))])


@dataclass
class Plan:
    """One partition's outcome: its lost records (a table in offset order, `lost_tables`' columns), each
    one's outcome (an index into `OUTCOMES`) and, for those already there, the offset that holds it now."""

    lost: Any  # pyarrow.Table
    outcome: Any  # numpy int8, one a row
    at: Any  # numpy int64, one a row: the present offset, or -1

    def table(self, outcome: str) -> Any:
        """The lost records with this outcome (a table, in offset order)."""
        return _keep(self.lost, self.outcome == OUTCOMES.index(outcome))

    def count(self, outcome: str) -> int:
        return int((self.outcome == OUTCOMES.index(outcome)).sum())

    def _found(self, outcome: str) -> list[tuple[LostRecord, int]]:
        chosen = self.outcome == OUTCOMES.index(outcome)
        return list(zip(_records(self.lost.filter(chosen)), self.at[chosen].tolist(), strict=True))

    @property
    def publish(self) -> list[LostRecord]:
        return _records(self.table("publish"))

    @property
    def already_present(self) -> list[tuple[LostRecord, int]]:
        """(lost, the offset its retried copy has now)."""
        return self._found("already present")

    @property
    def recovered_before(self) -> list[tuple[LostRecord, int]]:
        """(lost, the offset an earlier run gave it)."""
        return self._found("recovered before")

    @property
    def uncommitted(self) -> list[LostRecord]:
        """Left: see the module docstring."""
        return _records(self.table("uncommitted, left"))

    @property
    def skipped_by_limits(self) -> list[LostRecord]:
        return _records(self.table("skipped by limits"))


def _headers(raw: Any) -> Headers:
    """Headers as the audit's Parquet holds them (list of {key, value} or (key, value), or a map)."""
    if not raw:
        return ()
    items = raw.items() if isinstance(raw, Mapping) else raw
    out = []
    for item in items:
        key, value = (item["key"], item["value"]) if isinstance(item, Mapping) else item
        out.append((str(key), None if value is None else bytes(value)))
    return tuple(out)


def _records(table: Any) -> list[LostRecord]:
    """A lost table's rows as `LostRecord`s (for callers that want objects; the plan never makes them)."""
    columns = [table.column(c).to_pylist() for c in _lost_schema().names]
    with _no_gc():  # a million tuples would set the cyclic collector scanning them over and over
        return [LostRecord(topic, partition, offset, epoch, broker, stamp, key, value,
                           _headers(headers) if headers else (), bool(uncommitted))
                for topic, partition, offset, epoch, broker, stamp, key, value, headers, uncommitted
                in zip(*columns, strict=True)]


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _rows_table(rows: Iterable[Mapping[str, Any]]) -> Any:
    """lost_records rows (dicts, headers in any of `_headers`' forms) as a table of the audit's columns."""
    import pyarrow as pa

    names = ("kind", "is_control", *_lost_schema().names)
    columns: dict[str, list[Any]] = {name: [] for name in names}
    for row in rows:
        for name in names:
            value = row.get(name)
            columns[name].append([{"key": k, "value": v} for k, v in _headers(value)] if name == "headers" else value)
    schema = pa.schema([("kind", pa.string()), ("is_control", pa.bool_()), *_lost_schema()])
    return pa.table(columns, schema=schema)


def lost_tables(table: Any) -> dict[TopicPartition, Any]:
    """Per partition, its lost records (see the module docstring) from lost_records.parquet's table: a
    table of `_lost_schema`'s columns in offset order, one row per origin. Filtered, sorted and deduplicated
    by Arrow."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    for name, value in (("kind", "lost"), ("is_control", False), ("uncommitted", False), ("headers", None),
                        ("key", None)):
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(n) if value is None else pa.array([value] * n))
    for name in (*_ORIGIN, "broker"):
        if table[name].null_count:
            raise ValueError(f"lost_records: {table[name].null_count} row(s) with no {name} (not an audit's table?)")
    table = _keep(table, pc.and_(pc.equal(pc.fill_null(table["kind"], "lost"), "lost"),
                                 pc.invert(pc.fill_null(table["is_control"], False))))
    table = table.select(_lost_schema().names).cast(_lost_schema()).combine_chunks()
    if table.num_rows == 0:
        return {}
    table = table.set_column(9, "uncommitted", pc.fill_null(table["uncommitted"], False))
    topics = table["topic"].combine_chunks().dictionary_encode()
    codes = topics.indices.to_numpy(zero_copy_only=False)
    keys = [codes, *(table[c].to_numpy() for c in (*_ORIGIN[1:], "broker"))]
    # in origin order, the lowest broker first (topics in any order): each origin's first row is kept. An
    # audit lists them in order already: then nothing is sorted or copied.
    if not _ordered(keys):
        order = np.lexsort(keys[::-1])
        table, keys = table.take(pa.array(order)), [k[order] for k in keys]
        codes = keys[0]
    new_origin = np.zeros(table.num_rows, bool)
    new_origin[0] = True
    for column in keys[:4]:
        new_origin[1:] |= column[1:] != column[:-1]
    table = _keep(table, new_origin)
    codes, partitions = codes[new_origin], keys[1][new_origin]
    starts = np.flatnonzero(np.r_[True, (codes[1:] != codes[:-1]) | (partitions[1:] != partitions[:-1])])
    bounds = [*starts.tolist(), table.num_rows]
    names = topics.dictionary.to_pylist()
    return {TopicPartition(names[codes[a]], int(partitions[a])): table.slice(a, b - a)
            for a, b in itertools.pairwise(bounds)}


def _keep(table: Any, mask: Any) -> Any:
    """table.filter(mask), without a copy when the mask keeps every row."""
    import numpy as np
    import pyarrow as pa

    mask = np.asarray(mask, bool)
    return table if mask.all() else table.filter(pa.array(mask))


def _ordered(keys: list[Any]) -> bool:
    """Whether rows are in ascending order of `keys` (the first the most significant)."""
    import numpy as np

    tied = np.ones(len(keys[0]) - 1, bool)
    for key in keys:
        if (tied & (key[1:] < key[:-1])).any():
            return False
        tied &= key[1:] == key[:-1]
    return True


def lost_by_partition(rows: Iterable[Mapping[str, Any]] | Any) -> dict[TopicPartition, list[LostRecord]]:
    """The records to consider per partition, as objects, from lost_records.parquet's rows or its pyarrow
    Table (`lost_tables`)."""
    table = rows if hasattr(rows, "column_names") else _rows_table(rows)
    return {tp: _records(t) for tp, t in lost_tables(table).items()}


def provenance_column(table: Any) -> Any:
    """The provenance header's value of each row of a lost table (binary)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = [pc.cast(table[c], pa.string()) for c in (*_ORIGIN, "broker")]
    return pc.cast(pc.binary_join_element_wise(*text, "/"), pa.binary())


def provenance_origins(values: Any) -> Any:
    """The origin ("topic/partition/offset/leader_epoch", binary) each provenance value names, null where
    it is not one of ours; comparable to `_origin_column` of a lost table."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = pc.cast(values, pa.binary())
    ours = pc.fill_null(pc.match_substring_regex(values, _PROVENANCE), False)
    origins = pc.replace_substring_regex(values, rb"/-?[0-9]+$", b"", max_replacements=1)  # the broker off
    return pc.if_else(ours, origins, pa.scalar(None, pa.binary()))


def _origin_column(table: Any) -> Any:
    """The origin of each row of a lost table: what its provenance header names (so the two cannot differ)."""
    return provenance_origins(provenance_column(table))


def provenance(record: LostRecord) -> bytes:
    """`provenance_column` of one record."""
    value: bytes = provenance_column(_records_table([record]))[0].as_py()
    return value


def parse_provenance(value: bytes | None) -> tuple[str, int, int, int] | None:
    """The origin a provenance header names (`provenance_origins` of one value); None if it is not ours."""
    import pyarrow as pa

    origin = provenance_origins(pa.array([value], pa.binary()))[0].as_py()
    if origin is None:
        return None
    topic, partition, offset, epoch = origin.decode().rsplit("/", 3)
    return topic, int(partition), int(offset), int(epoch)


def _records_table(records: Iterable[LostRecord]) -> Any:
    import pyarrow as pa

    records = list(records)
    columns: dict[str, list[Any]] = {name: [getattr(r, name) for r in records] for name in _lost_schema().names}
    columns["headers"] = [[{"key": k, "value": v} for k, v in r.headers] for r in records]
    return pa.table(columns, schema=_lost_schema())


def _present_table(present: Iterable[Present]) -> Any:
    import pyarrow as pa

    present = list(present)
    return pa.table({"offset": [p.offset for p in present], "key": [p.key for p in present],
                     "value": [p.value for p in present],
                     "headers": [[{"key": k, "value": v} for k, v in p.headers] for p in present]},
                    schema=_present_schema())


def _present_origins(present: Any) -> tuple[Any, Any]:
    """The present rows carrying a provenance header of ours (their row numbers) and the origin each names
    (its first such header's)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    headers = present["headers"].combine_chunks() if present.num_rows else pa.array([], pa.list_(_header_type()))
    flat = headers.flatten()
    ours = pc.fill_null(pc.equal(flat.field("key"), PROVENANCE_HEADER), False)
    if not pc.any(ours).as_py():
        return np.zeros(0, np.int64), pa.array([], pa.binary())
    parents = pc.list_parent_indices(headers).filter(ours)
    origins = provenance_origins(flat.field("value").filter(ours))
    valid = pc.is_valid(origins)
    parents, origins = parents.filter(valid).to_numpy(zero_copy_only=False), origins.filter(valid)
    rows, first = np.unique(parents, return_index=True)  # a record's first header of ours counts
    return rows.astype(np.int64), origins.take(pa.array(first))


def plan(lost: Any, present: Any, *, until_offset: int | None = None, from_epoch: int | None = None,
         include_uncommitted: bool = False) -> Plan:
    """One partition's plan (see the module docstring). `lost`: its lost table (`lost_tables`) or
    `LostRecord`s, in offset order; `present`: the partition's records from the divergence point on, a
    table (offset, key, value, headers: `poll_arrow`'s columns) or `Present`s, in offset order."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    lost = lost if hasattr(lost, "column_names") else _records_table(lost)
    present = present if hasattr(present, "column_names") else _present_table(present)
    n = lost.num_rows
    outcome = np.full(n, _PUBLISH, np.int8)
    at = np.full(n, -1, np.int64)
    offsets = present["offset"].to_numpy()
    # an earlier run's: a present record naming the lost one's origin (the first such record counts)
    rows, origins = _present_origins(present)
    if len(rows):
        found = pc.index_in(_origin_column(lost), value_set=origins)
        hit = found.is_valid().to_numpy(zero_copy_only=False)
        outcome[hit] = _RECOVERED
        at[hit] = offsets[rows[found.filter(pa.array(hit)).to_numpy()]]
    # retried by its producer: the same key, value and headers, one present copy for one lost record; only
    # the rows whose key and value some present record has are compared
    plain = np.ones(present.num_rows, bool)
    plain[rows] = False
    others = present.filter(pa.array(plain))
    maybe = (outcome == _PUBLISH) & _in(lost["value"], others["value"]) & _in(lost["key"], others["key"])
    if maybe.any():
        candidates = lost.filter(pa.array(maybe))
        others = others.filter(pa.array(_in(others["value"], candidates["value"])))
        mine, theirs = _contents(candidates, others)
        # the k-th lost record of a content takes its k-th present copy (in offset order), if there is one
        base = len(mine) + len(theirs)
        mine, theirs = _nth(mine, base), _nth(theirs, base)
        order = np.argsort(theirs, kind="stable")
        ranked = theirs[order]
        where = np.minimum(np.searchsorted(ranked, mine), len(ranked) - 1)
        hit = ranked[where] == mine
        rows = np.flatnonzero(maybe)[hit]
        outcome[rows] = _PRESENT
        at[rows] = others["offset"].to_numpy()[order[where[hit]]]
    left = outcome == _PUBLISH
    if not include_uncommitted:
        held_back = left & lost["uncommitted"].to_numpy(zero_copy_only=False)
        outcome[held_back] = _UNCOMMITTED
        left &= ~held_back
    beyond = np.zeros(n, bool)
    if until_offset is not None:
        beyond |= lost["offset"].to_numpy() > until_offset
    if from_epoch is not None:
        beyond |= lost["leader_epoch"].to_numpy() < from_epoch
    outcome[left & beyond] = _LIMITS
    return Plan(lost, outcome, at)


def _contents(lost: Any, present: Any) -> tuple[Any, Any]:
    """One integer per row of each table, equal where key, value and headers are (nulls equal)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = ("key", "value", "headers")
    both = pa.concat_tables([lost.select(columns).cast(_present_schema().remove(0)),
                             present.select(columns).cast(_present_schema().remove(0))])
    codes = np.zeros(both.num_rows, np.int64)
    for column in (both["key"], both["value"], _headers_bytes(both["headers"])):
        column = column if isinstance(column, pa.Array) else column.combine_chunks()
        code = pc.dictionary_encode(column, null_encoding="encode").indices.to_numpy().astype(np.int64)
        codes = np.unique(codes * (int(code.max()) + 1) + code, return_inverse=True)[1].reshape(-1)
    return codes[:lost.num_rows], codes[lost.num_rows:]


def _headers_bytes(headers: Any) -> Any:
    """Each row's headers as one binary value, equal where the headers are (in order; none = null =
    empty): each header as "len(key):key len(value):value", a null value's length "-"."""
    import pyarrow as pa
    import pyarrow.compute as pc

    offsets, flat = _flat_headers(headers)
    key = pc.cast(pc.fill_null(pc.struct_field(flat, "key"), ""), pa.binary())
    value = pc.struct_field(flat, "value")
    length = pc.if_else(pc.is_null(value), "-", pc.cast(pc.binary_length(value), pa.string()))
    one = pc.binary_join_element_wise(pc.cast(pc.cast(pc.binary_length(key), pa.string()), pa.binary()), b":", key,
                                      pc.cast(length, pa.binary()), b":", pc.fill_null(value, b""), b"")
    return pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), one), b"")


def _flat_headers(headers: Any) -> tuple[Any, Any]:
    """A headers column as list offsets from 0 (numpy, one more than rows; a null list is empty) and the
    headers they index."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    held = headers.combine_chunks()
    if held.null_count:
        held = pc.fill_null(held, pa.scalar([], held.type))
    offsets = held.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    return offsets - offsets[0], held.values.slice(offsets[0], offsets[-1] - offsets[0])


def _nth(codes: Any, base: int) -> Any:
    """Each code paired with how many equal codes come before it, as one integer (`base` > that count)."""
    import numpy as np

    order = np.argsort(codes, kind="stable")
    ranked = codes[order]
    starts = np.r_[True, ranked[1:] != ranked[:-1]]
    first = np.maximum.accumulate(np.where(starts, np.arange(len(ranked)), 0))
    nth = np.empty(len(codes), np.int64)
    nth[order] = np.arange(len(ranked)) - first
    return codes * base + nth


def _in(values: Any, among: Any) -> Any:
    """numpy mask: which of `values` are among `among` (null matches null)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(among) == 0:
        return np.zeros(len(values), bool)
    return pc.is_in(values, value_set=pc.unique(pa.chunked_array(among).combine_chunks()).cast(
        values.type)).to_numpy(zero_copy_only=False)


def divergence_points(rows: Iterable[Mapping[str, Any]]) -> dict[TopicPartition, int]:
    """Per partition, the lowest divergence offset of a diverged replica (partitions.parquet's rows): the
    new leader's records from there on may hold a lost record its producer retried, even at an offset
    below the first lost record the audit lists (an aborted record or a marker before it)."""
    out: dict[TopicPartition, int] = {}
    for row in rows:
        offset = row.get("divergence_offset")
        if row.get("kind") != "diverged" or offset is None or offset < 0:
            continue
        tp = TopicPartition(str(row["topic"]), int(row["partition"]))
        out[tp] = min(out.get(tp, offset), int(offset))
    return out


def _end_offset(bootstrap_servers: str, tp: TopicPartition, client: Mapping[str, Any]) -> int:
    """The partition's log end offset now (ListOffsets LATEST, through a consumer's reset to latest;
    read_committed: the last stable offset)."""
    from epochguard.client import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, auto_offset_reset="latest",
                             enable_auto_commit=False, **client)
    try:
        consumer.assign([tp])
        return consumer.position(tp)
    finally:
        consumer.close()


def _read_from(bootstrap_servers: str, tp: TopicPartition, start: int, end: int, client: Mapping[str, Any],
               timeout_s: float) -> Any:
    """The partition's records in [start, end): a table of `_present_schema`'s columns (poll_arrow's
    batches, decoded in Rust, never made into objects)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from epochguard.client import KafkaConsumer

    schema = _present_schema()
    parts: list[Any] = []
    if start >= end:
        return schema.empty_table()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False, **client)
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        deadline = time.monotonic() + timeout_s
        while consumer.position(tp) < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{tp}: could not read offsets {start}..{end - 1} within {timeout_s} s")
            batch = consumer.poll_arrow(timeout_ms=200).get(tp)
            if batch is None:
                continue
            part = pa.table([batch.column(c) for c in schema.names], names=schema.names).cast(schema)
            parts.append(part.filter(pc.less(part["offset"], end)))
        return pa.concat_tables(parts) if parts else schema.empty_table()
    finally:
        consumer.close()


class _Report:
    """recovered.parquet: every lost record's origin, outcome and new place, a partition's table at a time."""

    NAMES = ("topic", "partition", "offset", "leader_epoch", "broker", "outcome", "new_topic", "new_offset")

    def __init__(self) -> None:
        self.parts: list[Any] = []

    def add(self, outcome: Plan, new_topic: str, published: str, new_offsets: Any = None) -> None:
        """One partition's plan; `published`: the outcome name of the records to publish ("published",
        "would publish"), `new_offsets` their offsets now (in order)."""
        import pyarrow as pa

        where = outcome.at.copy()
        if new_offsets is not None:
            where[outcome.outcome == _PUBLISH] = new_offsets
        names = pa.array([*OUTCOMES[:_PUBLISH], published], pa.string())
        n = outcome.lost.num_rows
        self.parts.append(pa.table({
            **{c: outcome.lost[c] for c in self.NAMES[:5]}, "outcome": names.take(pa.array(outcome.outcome)),
            "new_topic": pa.repeat(pa.scalar(new_topic), n), "new_offset": pa.array(where, pa.int64())}))

    def write(self, path: str) -> None:
        """Atomically: a temporary file renamed over it."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        types = (pa.string(), pa.int32(), pa.int64(), pa.int32(), pa.int32(), pa.string(), pa.string(), pa.int64())
        schema = pa.schema(list(zip(self.NAMES, types, strict=True)))
        table = pa.concat_tables(self.parts) if self.parts else schema.empty_table()
        tmp = f"{path}.tmp-{os.getpid()}"
        pq.write_table(table.cast(schema), tmp)
        os.replace(tmp, path)


def recover(audit_dir: str, bootstrap_servers: str, *, topics: Iterable[str] | None = None,
            to_topic: str | None = None, dry_run: bool = False, until_offset: int | None = None,
            from_epoch: int | None = None, client: Mapping[str, Any] | None = None,
            transactional_id: str | None = None, include_uncommitted: bool = False,
            timeout_s: float = 120.0) -> dict[TopicPartition, Plan]:
    """Put the audit's lost records back (see the module docstring); the plan of every partition."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from epochguard.client import KafkaProducer

    client = dict(client or {})
    if transactional_id is not None:
        # read_committed: a killed earlier run's open transaction (aborted by init_transactions) is not there
        client["isolation_level"] = "read_committed"
    wanted = None if topics is None else set(topics)
    path = os.path.join(audit_dir, "lost_records.parquet")  # a file, or the driver's directory of parts
    held = set(ds.dataset(path, format="parquet").schema.names)
    table = pq.read_table(path, columns=[c for c in ("kind", "is_control", *_lost_schema().names) if c in held])
    if "uncommitted" not in table.column_names:
        log.warning("lost_records.parquet has no `uncommitted` column (an older audit): records of a transaction "
                    "whose outcome is not on the old replica's disk cannot be told apart; all are published")
    lost = lost_tables(table)
    summary = os.path.join(audit_dir, "partitions.parquet")
    diverged = divergence_points(pq.read_table(summary).to_pylist()) if os.path.exists(summary) else {}
    halt_after = int(os.environ.get("EPOCHGUARD_RECOVER_HALT_AFTER") or 0)  # tests only (module docstring)
    plans: dict[TopicPartition, Plan] = {}
    report = _Report()
    producing = {k: v for k, v in client.items() if k != "isolation_level"}
    # batches of up to 1 MB after 5 ms: a recovery is a bulk load (the client benchmark's producer settings)
    producer = None if dry_run else KafkaProducer(bootstrap_servers=bootstrap_servers, enable_idempotence=True,
                                                  acks="all", transactional_id=transactional_id, linger_ms=5,
                                                  batch_size=1_000_000, **producing)
    try:
        if producer is not None and transactional_id is not None:
            producer.init_transactions()  # fences (and aborts the open transaction of) a killed earlier run
            log.info("transactional id %r initialized", transactional_id)
        for tp, records in sorted(lost.items()):
            if wanted is not None and tp.topic not in wanted:
                continue
            target = TopicPartition(to_topic or tp.topic, tp.partition)
            first = records["offset"][0].as_py()
            # the divergence point (its first lost offset at the latest); a quarantine topic from its start
            start = min(first, diverged.get(tp, first)) if target.topic == tp.topic else 0
            end = _end_offset(bootstrap_servers, target, client)
            present = _read_from(bootstrap_servers, target, start, end, client, timeout_s)
            plans[tp] = outcome = plan(records, present, until_offset=until_offset, from_epoch=from_epoch,
                                       include_uncommitted=include_uncommitted)
            counts = {name: outcome.count(name) for name in OUTCOMES}
            log.info("%s -> %s: %d lost, %d already present, %d recovered before, %d uncommitted left, "
                     "%d skipped by limits, %d to publish (read %s from offset %d to %d)", tp, target,
                     records.num_rows, counts["already present"], counts["recovered before"],
                     counts["uncommitted, left"], counts["skipped by limits"], counts["publish"], target, start, end)
            if counts["uncommitted, left"]:
                left = outcome.table("uncommitted, left")["offset"]
                log.warning("%s: %d records of transactions no COMMIT marker ends in the old replica's log left "
                            "(offsets %d..%d): whether they committed is not on its disk and no read_committed "
                            "consumer read them there; --include-uncommitted re-publishes them", tp,
                            len(left), left[0].as_py(), left[-1].as_py())
            if producer is None:
                report.add(outcome, target.topic, "would publish")
                continue
            offsets = _publish(producer, tp, target, outcome.table("publish"), transactional_id is not None,
                               halt_after, timeout_s)
            report.add(outcome, target.topic, "published", offsets)
    finally:
        if producer is not None:
            producer.close()
    report.write(os.path.join(audit_dir, "recovered.parquet"))
    return plans


def _publish(producer: Any, tp: TopicPartition, target: TopicPartition, records: Any, transactional: bool,
             halt_after: int, timeout_s: float) -> Any:
    """Produce one partition's records (a lost table, in order; in one transaction if `transactional`) with
    `send_arrow` (encoded into batches in Rust); their new offsets (numpy) once every one is acknowledged."""
    import numpy as np

    n = records.num_rows
    if not n:
        return np.zeros(0, np.int64)
    if transactional:
        producer.begin_transaction()  # one transaction per partition: all of it or none is read
    cut = halt_after if 0 < halt_after < n else n
    # a chunk at a time: the producer sends one chunk's batches while the next is built and encoded (in
    # order: one thread's send_arrow calls to a partition are written in call order)
    bounds = sorted({*range(0, n, _CHUNK), cut, n})
    sent = []
    for start, stop in itertools.pairwise(bounds):
        sent.append(producer.send_arrow(target.topic, _arrow(records.slice(start, stop - start), target.partition)))
        if stop == cut < n:
            for delivery in sent:
                delivery.offsets(timeout_s)  # every record before the cut acknowledged
            _halt(tp, cut)
    offsets = [delivery.offsets(timeout_s).column("offset").to_numpy() for delivery in sent]
    if transactional:
        producer.commit_transaction()
    else:
        producer.flush(timeout_s)
    log.info("%s -> %s: published %d records", tp, target, n)
    return np.concatenate(offsets)


_CHUNK = 131_072  # rows a send_arrow call: about 16 MB of 100-byte records


def _arrow(records: Any, partition: int) -> Any:
    """A lost table as `send_arrow`'s table, by column: key, value, headers with the provenance header
    appended (`provenance_column`), the original timestamp, the partition."""
    import numpy as np
    import pyarrow as pa

    records = records.combine_chunks()
    n = records.num_rows
    header = _header_type()
    added = pa.StructArray.from_arrays([pa.repeat(pa.scalar(PROVENANCE_HEADER), n),
                                        pa.chunked_array(provenance_column(records)).combine_chunks()],
                                       fields=list(header))
    offsets, flat = _flat_headers(records["headers"])
    flat = flat.cast(header)
    new_offsets = offsets + np.arange(n + 1)  # one more header a record: the provenance, last
    if len(flat) == 0:  # no record has headers of its own (the common case): the provenance alone
        values = added
    else:
        is_added = np.zeros(int(new_offsets[-1]), bool)
        is_added[new_offsets[1:] - 1] = True
        order = np.empty(len(is_added), np.int64)
        order[~is_added] = np.arange(len(flat))
        order[is_added] = len(flat) + np.arange(n)
        values = pa.concat_arrays([flat, added]).take(pa.array(order))
    headers = pa.ListArray.from_arrays(pa.array(new_offsets, pa.int32()), values)
    return pa.table({"key": records["key"], "value": records["value"], "headers": headers,
                     "timestamp": records["timestamp"], "partition": pa.repeat(pa.scalar(partition, pa.int32()), n)})


def _halt(tp: TopicPartition, count: int) -> None:
    """EPOCHGUARD_RECOVER_HALT_AFTER (tests only): the first `count` records acknowledged, stand still
    until killed."""
    log.warning("%s: %d records acknowledged; halted by EPOCHGUARD_RECOVER_HALT_AFTER until killed", tp, count)
    while True:
        time.sleep(60)

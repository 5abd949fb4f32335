"""`epochguard recover`'s rules, pure: which records of an audit's `lost_records.parquet` go back into a
partition, and which are there already. No Kafka class does this (Kafka's answer to an unclean election is
a backup); the producing side is `client.KafkaProducer`'s idempotent (or transactional) producer.

- What is lost: rows of kind "lost" that are not control records (aborted-transaction records and
  markers never); per partition the union over the old replicas that listed them: one record per
  (offset, leader epoch), however many brokers held it (the lowest broker id named as its source), in
  offset order.
- Provenance: each re-published record carries the header `epochguard.recovered-from` =
  "topic/partition/offset/leader_epoch/broker" (`provenance` / `parse_provenance`).
- Already there (`plan`), from the records the partition holds now from the divergence point on:
  a record carrying the provenance of a lost one was re-published by an earlier run (complete or cut
  off): skipped; a record whose key, value and headers equal a lost one's is that record retried by its
  producer to the new leader: "already present", each present record matching at most one lost record.
- Records of a transaction no marker ends in the old replica's log (the audit's `uncommitted`: its
  COMMIT, if the coordinator wrote one, never reached that replica, so no read_committed consumer read
  them there, and whether it committed is not on the disk) are left, reported as such, unless
  `include_uncommitted`.
- The operator's limits (`until_offset`, `from_epoch`) skip the rest, reported as such.

`recover(audit_dir, bootstrap_servers, ...)` applies them to a live cluster: it reads the audit's
`lost_records.parquet` (pyarrow), each partition from its divergence point (the lowest the audit's
`partitions.parquet` gives a diverged replica of it, else its first lost offset) to its end (read_uncommitted:
an earlier run's records count even if a transaction of it is still open), produces what is left with the
idempotent producer (acks=all, one partition's records in order, original timestamps, the provenance header
added), to the same partition of the same topic or of `to_topic`, and writes `recovered.parquet` (original
and new place of every re-published record) atomically into the audit dir. `dry_run` plans only. Every
action is logged. `transactional_id`: each partition's records in one transaction (read_committed
consumers never see half a recovery), the partition read read_committed.

`EPOCHGUARD_RECOVER_HALT_AFTER=N` (for tests only: tests/real_kafka/test_real_recover.py) makes a run stop
still, once the first N records of a partition are acknowledged, until it is killed: a kill mid-partition
at a known point.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from epochguard.types import TopicPartition

__all__ = ["PROVENANCE_HEADER", "LostRecord", "Present", "Plan", "lost_by_partition", "divergence_points",
           "provenance", "parse_provenance", "plan", "recover"]

log = logging.getLogger(__name__)

PROVENANCE_HEADER = "epochguard.recovered-from"

Headers = tuple[tuple[str, bytes | None], ...]


class LostRecord(NamedTuple):
    """One lost record as the audit decoded it from an old replica's log (a tuple: a million are made in
    a second)."""

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
    row: int = -1  # its row in the table `_table_lost` read it from (its columns are taken from there)

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


@dataclass
class Plan:
    """One partition's outcome: what to publish, in order, and why the rest is not."""

    publish: list[LostRecord] = field(default_factory=list)
    already_present: list[tuple[LostRecord, int]] = field(default_factory=list)  # (lost, its offset now)
    recovered_before: list[tuple[LostRecord, int]] = field(default_factory=list)  # an earlier run's
    uncommitted: list[LostRecord] = field(default_factory=list)  # left: see the module docstring
    skipped_by_limits: list[LostRecord] = field(default_factory=list)


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


def lost_by_partition(rows: Iterable[Mapping[str, Any]] | Any) -> dict[TopicPartition, list[LostRecord]]:
    """The records to consider per partition from lost_records.parquet's rows, or from the pyarrow Table
    itself (filtered and sorted by Arrow, read by column: no dict per row), see the module docstring."""
    if hasattr(rows, "column_names"):
        return _table_lost(rows)[0]
    chosen: dict[tuple[str, int, int, int], LostRecord] = {}
    for record in _row_records(rows):
        held = chosen.get(record.origin)
        if held is None or record.broker < held.broker:
            chosen[record.origin] = record
    return _by_partition(chosen[origin] for origin in sorted(chosen))


def _by_partition(records: Iterable[LostRecord]) -> dict[TopicPartition, list[LostRecord]]:
    out: dict[TopicPartition, list[LostRecord]] = defaultdict(list)
    for record in records:
        out[TopicPartition(record.topic, record.partition)].append(record)
    return dict(out)


def _row_records(rows: Iterable[Mapping[str, Any]]) -> Iterator[LostRecord]:
    for row in rows:
        if row.get("kind", "lost") == "lost" and not row.get("is_control"):
            yield _record(row["topic"], row["partition"], row["offset"], row["leader_epoch"], row["broker"],
                          row["timestamp"], row.get("key"), row.get("value"), row.get("headers"),
                          row.get("uncommitted"))


def _table_lost(table: Any) -> tuple[dict[TopicPartition, list[LostRecord]], Any]:
    """The records per partition, and the filtered, sorted table their `row` points into."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    for name, default in (("kind", pa.scalar("lost")), ("is_control", pa.scalar(False)),
                          ("uncommitted", pa.scalar(False)), ("headers", None)):
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(n) if default is None else pa.array([default.as_py()] * n))
    table = table.filter(pc.and_(pc.equal(pc.fill_null(table["kind"], "lost"), "lost"),
                                 pc.invert(pc.fill_null(table["is_control"], False))))
    # in origin order, the lowest broker first: one pass keeps each origin's first row
    table = table.sort_by([(c, "ascending") for c in ("topic", "partition", "offset", "leader_epoch", "broker")])
    names = ("topic", "partition", "offset", "leader_epoch", "broker", "timestamp", "key", "value", "headers",
             "uncommitted")
    columns = [table.column(c).to_pylist() for c in names]
    records = []
    last = None
    with _no_gc():  # a million tuples would set the cyclic collector scanning them over and over
        for row, (topic, partition, offset, epoch, broker, stamp, key, value, headers, uncommitted) in enumerate(
                zip(*columns, strict=True)):
            origin = (topic, partition, offset, epoch)
            if origin != last:  # Parquet's types are the record's: no conversions
                records.append(LostRecord(topic, partition, offset, epoch, broker, stamp, key, value,
                                          _headers(headers) if headers else (), bool(uncommitted), row))
                last = origin
        return _by_partition(records), table


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _record(topic: Any, partition: Any, offset: Any, epoch: Any, broker: Any, timestamp: Any, key: Any,
            value: Any, headers: Any, uncommitted: Any) -> LostRecord:
    return LostRecord(str(topic), int(partition), int(offset), int(epoch), int(broker), int(timestamp),
                      None if key is None else bytes(key), None if value is None else bytes(value), _headers(headers),
                      bool(uncommitted))


def provenance(record: LostRecord) -> bytes:
    return f"{record.topic}/{record.partition}/{record.offset}/{record.leader_epoch}/{record.broker}".encode()


def parse_provenance(value: bytes | None) -> tuple[str, int, int, int] | None:
    """The origin a provenance header names; None if it is not one of ours (a topic may hold '/')."""
    if value is None:
        return None
    try:
        topic, partition, offset, epoch, _broker = value.decode().rsplit("/", 4)
        return topic, int(partition), int(offset), int(epoch)
    except ValueError:
        return None


def plan(lost: Iterable[LostRecord], present: Iterable[Present], *, until_offset: int | None = None,
         from_epoch: int | None = None, include_uncommitted: bool = False) -> Plan:
    """One partition's plan (see the module docstring): `lost` in offset order, `present` the
    partition's records from the divergence point on."""
    recovered: dict[tuple[str, int, int, int], int] = {}
    by_content: dict[tuple[bytes | None, bytes | None, Headers], list[int]] = defaultdict(list)
    for p in present:
        origins = [parse_provenance(v) for k, v in p.headers if k == PROVENANCE_HEADER]
        origin = next((o for o in origins if o is not None), None)
        if origin is not None:
            recovered.setdefault(origin, p.offset)
        else:
            by_content[(p.key, p.value, p.headers)].append(p.offset)
    out = Plan()
    for record in lost:
        if record.origin in recovered:
            out.recovered_before.append((record, recovered[record.origin]))
            continue
        matches = by_content.get((record.key, record.value, record.headers))
        if matches:
            out.already_present.append((record, matches.pop(0)))  # each present copy stands for one lost record
        elif record.uncommitted and not include_uncommitted:
            out.uncommitted.append(record)
        elif (until_offset is not None and record.offset > until_offset) or (
                from_epoch is not None and record.leader_epoch < from_epoch):
            out.skipped_by_limits.append(record)
        else:
            out.publish.append(record)
    return out


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
               timeout_s: float) -> list[Present]:
    """The partition's records in [start, end)."""
    from epochguard.client import KafkaConsumer

    out: list[Present] = []
    if start >= end:
        return out
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False, **client)
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        deadline = time.monotonic() + timeout_s
        while consumer.position(tp) < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{tp}: could not read offsets {start}..{end - 1} within {timeout_s} s")
            batch = consumer.poll_arrow(timeout_ms=200).get(tp)  # decoded in Rust, read by column
            if batch is None:
                continue
            columns = [batch.column(c).to_pylist() for c in ("offset", "key", "value", "headers")]
            with _no_gc():
                out += [Present(offset, key, value, _headers(headers) if headers else ())
                        for offset, key, value, headers in zip(*columns, strict=True) if offset < end]
        return out
    finally:
        consumer.close()


class _Report:
    """recovered.parquet's columns, filled a partition's outcome at a time (no dict per record)."""

    NAMES = ("topic", "partition", "offset", "leader_epoch", "broker", "outcome", "new_topic", "new_offset")

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {name: [] for name in self.NAMES}

    def add(self, records: list[LostRecord], outcome: str, new_topic: str,
            new_offsets: list[int] | None = None) -> None:
        c = self.columns
        for name, index in (("topic", 0), ("partition", 1), ("offset", 2), ("leader_epoch", 3), ("broker", 4)):
            c[name] += [r[index] for r in records]
        c["outcome"] += [outcome] * len(records)
        c["new_topic"] += [new_topic] * len(records)
        c["new_offset"] += [-1] * len(records) if new_offsets is None else new_offsets

    def write(self, path: str) -> None:
        """Atomically: a temporary file renamed over it."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        types = (pa.string(), pa.int32(), pa.int64(), pa.int32(), pa.int32(), pa.string(), pa.string(), pa.int64())
        table = pa.table({n: pa.array(self.columns[n], t) for n, t in zip(self.NAMES, types, strict=True)})
        tmp = f"{path}.tmp-{os.getpid()}"
        pq.write_table(table, tmp)
        os.replace(tmp, path)


def recover(audit_dir: str, bootstrap_servers: str, *, topics: Iterable[str] | None = None,
            to_topic: str | None = None, dry_run: bool = False, until_offset: int | None = None,
            from_epoch: int | None = None, client: Mapping[str, Any] | None = None,
            transactional_id: str | None = None, include_uncommitted: bool = False,
            timeout_s: float = 120.0) -> dict[TopicPartition, Plan]:
    """Put the audit's lost records back (see the module docstring); the plan of every partition."""
    import pyarrow.parquet as pq

    from epochguard.client import KafkaProducer

    client = dict(client or {})
    if transactional_id is not None:
        # read_committed: a killed earlier run's open transaction (aborted by init_transactions) is not there
        client["isolation_level"] = "read_committed"
    wanted = None if topics is None else set(topics)
    table = pq.read_table(os.path.join(audit_dir, "lost_records.parquet"))
    if "uncommitted" not in table.column_names:
        log.warning("lost_records.parquet has no `uncommitted` column (an older audit): records of a transaction "
                    "whose outcome is not on the old replica's disk cannot be told apart; all are published")
    lost, source = _table_lost(table)
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
            # the divergence point (its first lost offset at the latest); a quarantine topic from its start
            start = min(records[0].offset, diverged.get(tp, records[0].offset)) if target.topic == tp.topic else 0
            end = _end_offset(bootstrap_servers, target, client)
            present = _read_from(bootstrap_servers, target, start, end, client, timeout_s)
            plans[tp] = outcome = plan(records, present, until_offset=until_offset, from_epoch=from_epoch,
                                       include_uncommitted=include_uncommitted)
            log.info("%s -> %s: %d lost, %d already present, %d recovered before, %d uncommitted left, "
                     "%d skipped by limits, %d to publish (read %s from offset %d to %d)", tp, target, len(records),
                     len(outcome.already_present), len(outcome.recovered_before), len(outcome.uncommitted),
                     len(outcome.skipped_by_limits), len(outcome.publish), target, start, end)
            if outcome.uncommitted:
                log.warning("%s: %d records of transactions no COMMIT marker ends in the old replica's log left "
                            "(offsets %d..%d): whether they committed is not on its disk and no read_committed "
                            "consumer read them there; --include-uncommitted re-publishes them", tp,
                            len(outcome.uncommitted), outcome.uncommitted[0].offset, outcome.uncommitted[-1].offset)
            for kind, found in (("already present", outcome.already_present),
                                ("recovered before", outcome.recovered_before)):
                report.add([r for r, _ in found], kind, target.topic, [at for _, at in found])
            report.add(outcome.skipped_by_limits, "skipped by limits", target.topic)
            report.add(outcome.uncommitted, "uncommitted, left", target.topic)
            if producer is None:
                report.add(outcome.publish, "would publish", target.topic)
                continue
            offsets = _publish(producer, source, tp, target, outcome.publish, transactional_id is not None, halt_after,
                               timeout_s)
            report.add(outcome.publish, "published", target.topic, offsets)
    finally:
        if producer is not None:
            producer.close()
    report.write(os.path.join(audit_dir, "recovered.parquet"))
    return plans


def _publish(producer: Any, source: Any, tp: TopicPartition, target: TopicPartition, records: list[LostRecord],
             transactional: bool, halt_after: int, timeout_s: float) -> list[int]:
    """Produce one partition's records in order (in one transaction if `transactional`) with `send_arrow`
    (the rows encoded into batches in Rust); their new offsets once every one is acknowledged."""
    if not records:
        return []
    if transactional:
        producer.begin_transaction()  # one transaction per partition: all of it or none is read
    cut = halt_after if 0 < halt_after < len(records) else len(records)
    parts = [records[:cut], records[cut:]] if cut < len(records) else [records]
    offsets: list[int] = []
    for i, part in enumerate(parts):
        sent = producer.send_arrow(target.topic, _arrow(source, part, target.partition))
        offsets += sent.offsets(timeout_s).column("offset").to_pylist()  # once every batch is acknowledged
        if i == 0 and len(parts) == 2:
            _halt(tp, cut)
    if transactional:
        producer.commit_transaction()
    else:
        producer.flush(timeout_s)
    log.info("%s -> %s: published %d records", tp, target, len(records))
    return offsets


def _arrow(source: Any, records: list[LostRecord], partition: int) -> Any:
    """The records as `send_arrow`'s table, taken by row from the lost_records table they were read from:
    key, value, headers with the provenance header appended, the original timestamp, the partition."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    taken = source.take(pa.array([r.row for r in records], pa.int64()))
    n = taken.num_rows
    text = [pc.cast(taken[c], pa.string()) for c in ("topic", "partition", "offset", "leader_epoch", "broker")]
    origin = pc.cast(pc.binary_join_element_wise(*text, "/"), pa.binary())  # `provenance`, by column
    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    added = pa.StructArray.from_arrays([pa.array([PROVENANCE_HEADER] * n, pa.string()), origin.combine_chunks()],
                                       fields=list(header))
    held = taken["headers"].combine_chunks() if taken["headers"].null_count < n else pa.nulls(n, pa.list_(header))
    offsets = held.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    offsets -= offsets[0]
    flat = held.flatten().cast(header)
    new_offsets = offsets + np.arange(n + 1)  # one more header a record: the provenance, last
    is_added = np.zeros(int(new_offsets[-1]), bool)
    is_added[new_offsets[1:] - 1] = True
    order = np.empty(len(is_added), np.int64)
    order[~is_added] = np.arange(len(flat))
    order[is_added] = len(flat) + np.arange(n)
    values = pa.concat_arrays([flat, added]).take(pa.array(order))
    headers = pa.ListArray.from_arrays(pa.array(new_offsets, pa.int32()), values)
    return pa.table({"key": taken["key"], "value": taken["value"], "headers": headers,
                     "timestamp": pc.cast(taken["timestamp"], pa.int64()),
                     "partition": pa.array([partition] * n, pa.int32())})


def _halt(tp: TopicPartition, count: int) -> None:
    """EPOCHGUARD_RECOVER_HALT_AFTER (tests only): the first `count` records acknowledged, stand still
    until killed."""
    log.warning("%s: %d records acknowledged; halted by EPOCHGUARD_RECOVER_HALT_AFTER until killed", tp, count)
    while True:
        time.sleep(60)

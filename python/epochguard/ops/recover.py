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
- The operator's limits (`until_offset`, `from_epoch`) skip the rest, reported as such.

Not done yet (issue 35): reading the audit dir and the partition, producing, the report, the CLI.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from epochguard.types import TopicPartition

__all__ = ["PROVENANCE_HEADER", "LostRecord", "Present", "Plan", "lost_by_partition", "provenance",
           "parse_provenance", "plan"]

PROVENANCE_HEADER = "epochguard.recovered-from"

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class LostRecord:
    """One lost record as the audit decoded it from an old replica's log."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int
    broker: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()

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


def lost_by_partition(rows: Iterable[Mapping[str, Any]]) -> dict[TopicPartition, list[LostRecord]]:
    """The records to consider per partition from lost_records.parquet's rows (see the module docstring)."""
    chosen: dict[tuple[str, int, int, int], LostRecord] = {}
    for row in rows:
        if row.get("kind", "lost") != "lost" or row.get("is_control"):
            continue
        record = LostRecord(str(row["topic"]), int(row["partition"]), int(row["offset"]), int(row["leader_epoch"]),
                            int(row["broker"]), int(row["timestamp"]),
                            None if row.get("key") is None else bytes(row["key"]),
                            None if row.get("value") is None else bytes(row["value"]), _headers(row.get("headers")))
        held = chosen.get(record.origin)
        if held is None or record.broker < held.broker:
            chosen[record.origin] = record
    out: dict[TopicPartition, list[LostRecord]] = defaultdict(list)
    for record in sorted(chosen.values(), key=lambda r: (r.topic, r.partition, r.offset, r.leader_epoch)):
        out[TopicPartition(record.topic, record.partition)].append(record)
    return dict(out)


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
         from_epoch: int | None = None) -> Plan:
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
        elif (until_offset is not None and record.offset > until_offset) or (
                from_epoch is not None and record.leader_epoch < from_epoch):
            out.skipped_by_limits.append(record)
        else:
            out.publish.append(record)
    return out

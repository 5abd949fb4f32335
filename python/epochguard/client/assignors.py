"""The consumer's embedded protocol of the classic group: subscriptions and assignments on the wire, and
the range and round-robin assignors.

Mirrors `org.apache.kafka.clients.consumer.internals.ConsumerProtocol` (the `consumer` protocol type:
`ConsumerProtocolSubscription` / `ConsumerProtocolAssignment`, written at version 0, which every
client reads; later versions add owned partitions, generation and rack, read here and ignored), and
`RangeAssignor` / `RoundRobinAssignor` without rack awareness. Bad bytes are a `ValueError` naming the
field, never an allocation larger than the input.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from epochguard.types import TopicPartition

__all__ = ["Subscription", "Assignment", "RangeAssignor", "RoundRobinAssignor", "ASSIGNORS"]


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def take(self, n: int, field: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"{self.what}: {field} of {n} bytes but {len(self.data) - self.pos} left")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def i16(self, field: str) -> int:
        return int(struct.unpack(">h", self.take(2, field))[0])

    def i32(self, field: str) -> int:
        return int(struct.unpack(">i", self.take(4, field))[0])

    def string(self, field: str) -> str:
        n = self.i16(field)
        try:
            return self.take(n, field).decode()
        except UnicodeDecodeError:
            raise ValueError(f"{self.what}: {field} is not UTF-8") from None

    def count(self, field: str, item_size: int) -> int:
        n = self.i32(field)
        if n < 0 or n * item_size > len(self.data) - self.pos:
            raise ValueError(f"{self.what}: {field} count {n} exceeds the bytes left")
        return n

    def nullable_bytes(self, field: str) -> bytes | None:
        n = self.i32(field)
        return None if n == -1 else self.take(n, field)

    @property
    def done(self) -> bool:
        return self.pos >= len(self.data)


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _partitions_by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


def _read_topic_partitions(r: _Reader, field: str) -> list[TopicPartition]:
    out = []
    for _ in range(r.count(field, 6)):
        topic = r.string(f"{field} topic")
        for _ in range(r.count(f"{field} partitions", 4)):
            out.append(TopicPartition(topic, r.i32(f"{field} partition")))
    return out


@dataclass(frozen=True, slots=True)
class Subscription:
    """`ConsumerProtocolSubscription`: the topics a member wants (what a JoinGroup carries)."""

    topics: tuple[str, ...]
    user_data: bytes | None = None

    def encode(self) -> bytes:
        out = struct.pack(">hi", 0, len(self.topics)) + b"".join(_string(t) for t in self.topics)
        ud = self.user_data
        return out + (struct.pack(">i", -1) if ud is None else struct.pack(">i", len(ud)) + ud)

    @classmethod
    def decode(cls, data: bytes) -> Subscription:
        r = _Reader(data, "subscription")
        if r.i16("version") < 0:
            raise ValueError("subscription: negative version")
        topics = tuple(r.string("topic") for _ in range(r.count("topics", 2)))
        user_data = r.nullable_bytes("user data") if not r.done else None
        return cls(topics, user_data)  # v1+ fields (owned partitions, generation, rack) follow: not needed


@dataclass(frozen=True, slots=True)
class Assignment:
    """`ConsumerProtocolAssignment`: a member's partitions (what a SyncGroup carries)."""

    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None

    def encode(self) -> bytes:
        by_topic = _partitions_by_topic(self.partitions)
        out = struct.pack(">hi", 0, len(by_topic))
        for topic, parts in by_topic.items():
            out += _string(topic) + struct.pack(f">i{len(parts)}i", len(parts), *parts)
        ud = self.user_data
        return out + (struct.pack(">i", -1) if ud is None else struct.pack(">i", len(ud)) + ud)

    @classmethod
    def decode(cls, data: bytes) -> Assignment:
        if not data:  # a member the leader left out gets an empty assignment
            return cls(())
        r = _Reader(data, "assignment")
        if r.i16("version") < 0:
            raise ValueError("assignment: negative version")
        partitions = tuple(_read_topic_partitions(r, "assigned"))
        user_data = r.nullable_bytes("user data") if not r.done else None
        return cls(partitions, user_data)


class RangeAssignor:
    """Kafka's `RangeAssignor`: per topic, members in id order each take a contiguous range; the first
    `partitions % members` take one more."""

    name = "range"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        for topic, count in sorted(partitions_per_topic.items()):
            members = sorted(m for m, s in subscriptions.items() if topic in s.topics)
            if not members:
                continue
            per, extra = divmod(count, len(members))
            start = 0
            for i, member in enumerate(members):
                n = per + (1 if i < extra else 0)
                out[member] += [TopicPartition(topic, p) for p in range(start, start + n)]
                start += n
        return out


class RoundRobinAssignor:
    """Kafka's `RoundRobinAssignor`: every partition in (topic, partition) order goes to the next member
    (in id order, cycling) subscribed to its topic."""

    name = "roundrobin"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        members: Sequence[str] = sorted(subscriptions)
        if not members:
            return out
        subscribed = {t for s in subscriptions.values() for t in s.topics}
        i = 0
        for topic in sorted(t for t in partitions_per_topic if t in subscribed):
            for p in range(partitions_per_topic[topic]):
                while topic not in subscriptions[members[i % len(members)]].topics:
                    i += 1
                out[members[i % len(members)]].append(TopicPartition(topic, p))
                i += 1
        return out


ASSIGNORS = {a.name: a for a in (RangeAssignor(), RoundRobinAssignor())}

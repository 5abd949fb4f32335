"""Public value types of the protocol layer.

Mirrors Kafka's `TopicPartition`, `OffsetAndMetadata`, `OffsetAndTimestamp`, `ConsumerRecord`,
`ConsumerRecords` (clients/.../consumer), `SubscriptionState.FetchPosition`,
`Metadata.LeaderAndEpoch` and `IsolationLevel`. All immutable; hashable where Kafka's are
(`ConsumerRecords` is a container, not a value, and is not hashable).

Epochs are `int | None` on the public API (None = "no epoch"); the wire's -1 sentinel is only used
inside `epochguard.protocol.messages`. Offsets are ints (int64 on the wire), epochs int32.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Self

__all__ = [
    "EpochProtocol",
    "ResetPolicy",
    "ResetReason",
    "TruncationResolution",
    "NO_EPOCH",
    "NO_OFFSET",
    "CONSUMER_REPLICA_ID",
    "DEBUGGING_REPLICA_ID",
    "LATEST_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "EARLIEST_LOCAL_TIMESTAMP",
    "IsolationLevel",
    "TopicPartition",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "LeaderAndEpoch",
    "FetchPosition",
    "ConsumerRecord",
    "ConsumerRecords",
    "TruncationEvent",
    "OffsetResetEvent",
    "epoch_or_none",
    "epoch_or_sentinel",
]

EpochProtocol = Literal["kip-320", "pre-kip-320"]
"""Which protocol a state machine speaks: epochs (KIP-101/320/232/207) or offsets only.
(Named `Protocol` before 0.2; renamed because that name shadowed `typing.Protocol`.)"""

ResetPolicy = Literal["earliest", "latest", "none"]
"""`auto.offset.reset`."""

ResetReason = Literal["no_position", "out_of_range", "truncation"]
TruncationResolution = Literal["rewound", "reset", "raised"]

NO_EPOCH = -1
NO_OFFSET = -1
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2  # also the OffsetForLeaderEpoch default below v3

# ListOffsets special target timestamps (ListOffsetsRequest).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4


def epoch_or_none(epoch: int | None) -> int | None:
    """The wire sentinel (-1, or any negative) as None, like `OffsetAndMetadata.leaderEpoch()`."""
    return None if epoch is None or epoch < 0 else epoch


def epoch_or_sentinel(epoch: int | None) -> int:
    """None as the wire sentinel -1."""
    return NO_EPOCH if epoch is None else epoch


class IsolationLevel(enum.IntEnum):
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class TopicPartition(NamedTuple):
    """A topic and a partition: Kafka's `TopicPartition`.

    A named tuple, so it unpacks (`topic, partition = tp`), orders by topic then partition, and equals
    and hashes like kafka-python's and aiokafka's `TopicPartition` with the same fields: a dict keyed by
    one finds the other. `str(tp)` is Kafka's `topic-partition`.
    """

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class _OffsetAndMetadataFields(NamedTuple):
    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


class OffsetAndMetadata(_OffsetAndMetadataFields):
    """A committed or seek offset with its metadata and leader epoch: Kafka's `OffsetAndMetadata`.

    A named tuple `(offset, metadata, leader_epoch)` in kafka-python 3's field order, so it equals
    kafka-python's `OffsetAndMetadata` field for field when the epoch is known. Differences:
    an unknown epoch is None here (Kafka's `leaderEpoch()` is `Optional.empty()`), where kafka-python
    writes -1, so `OffsetAndMetadata(5)` != kafka-python's `OffsetAndMetadata(5, "", -1)`; negative
    epochs given here become None. A negative offset is refused (as in Kafka), and a None metadata
    becomes "". aiokafka's `OffsetAndMetadata` has no epoch: compare with `om[:2]`.
    """

    __slots__ = ()

    def __new__(cls, offset: int, metadata: str | None = "", leader_epoch: int | None = None) -> OffsetAndMetadata:
        if offset < 0:
            raise ValueError(f"invalid negative offset {offset}")
        return super().__new__(cls, offset, "" if metadata is None else metadata, epoch_or_none(leader_epoch))

    @classmethod
    def _make(cls, iterable: Iterable[Any]) -> Self:  # type: ignore[override]  # typeshed: a generic _cls
        return cls(*iterable)  # validated like the constructor (namedtuple's _make and _replace skip __new__)


class _OffsetAndTimestampFields(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int | None = None


class OffsetAndTimestamp(_OffsetAndTimestampFields):
    """An `offsets_for_times` answer: Kafka's `OffsetAndTimestamp` (offset, timestamp, leader epoch).

    A named tuple in kafka-python 3's field order; it equals kafka-python's `OffsetAndTimestamp` field
    for field when the epoch is known. An unknown epoch is None here (Kafka: `Optional.empty()`) where
    kafka-python writes -1, and the epoch may be omitted (kafka-python requires it). Negative offsets
    and timestamps are refused, as in Kafka. aiokafka's has no epoch: compare with `ot[:2]`.
    """

    __slots__ = ()

    def __new__(cls, offset: int, timestamp: int, leader_epoch: int | None = None) -> OffsetAndTimestamp:
        if offset < 0:
            raise ValueError(f"invalid negative offset {offset}")
        if timestamp < 0:
            raise ValueError(f"invalid negative timestamp {timestamp}")
        return super().__new__(cls, offset, timestamp, epoch_or_none(leader_epoch))

    @classmethod
    def _make(cls, iterable: Iterable[Any]) -> Self:  # type: ignore[override]  # typeshed: a generic _cls
        return cls(*iterable)


@dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    """The current leader of a partition as the client knows it (`Metadata.LeaderAndEpoch`)."""

    leader: int | None = None
    epoch: int | None = None

    @staticmethod
    def no_leader_or_epoch() -> LeaderAndEpoch:
        return LeaderAndEpoch(None, None)


@dataclass(frozen=True, slots=True)
class FetchPosition:
    """A consumer position: next offset, the epoch of the record before it, the leader it was read from.

    Equality covers all three fields, as in Kafka: a position re-pointed at a new leader is a new position.
    """

    offset: int
    offset_epoch: int | None = None
    current_leader: LeaderAndEpoch = field(default_factory=LeaderAndEpoch)

    def __post_init__(self) -> None:
        object.__setattr__(self, "offset_epoch", epoch_or_none(self.offset_epoch))


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One record as the consumer returns it, with the leader epoch of the batch it came from."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    leader_epoch: int | None = None

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class ConsumerRecords(Mapping[TopicPartition, Sequence[ConsumerRecord]]):
    """The records of one `poll()`, by partition, plus the position after each partition's last record."""

    __slots__ = ("_next_offsets", "_records")

    def __init__(
        self,
        records: Mapping[TopicPartition, Sequence[ConsumerRecord]] | None = None,
        next_offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
    ) -> None:
        self._records = {tp: tuple(rs) for tp, rs in (records or {}).items() if rs}
        self._next_offsets = dict(next_offsets or {})

    @staticmethod
    def empty() -> ConsumerRecords:
        return ConsumerRecords()

    def __getitem__(self, tp: TopicPartition) -> Sequence[ConsumerRecord]:
        return self._records.get(tp, ())

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def records(self, tp: TopicPartition | None = None) -> Iterator[ConsumerRecord]:
        """All records in partition order, or one partition's."""
        if tp is not None:
            yield from self[tp]
            return
        for rs in self._records.values():
            yield from rs

    def partitions(self) -> set[TopicPartition]:
        return set(self._records)

    def count(self) -> int:
        return sum(len(rs) for rs in self._records.values())

    def is_empty(self) -> bool:
        return not self._records

    def next_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """Per drained partition, OffsetAndMetadata(next offset, epoch of the last record read): commit this."""
        return dict(self._next_offsets)

    def __repr__(self) -> str:
        return f"ConsumerRecords({self.count()} records in {len(self)} partitions)"


@dataclass(frozen=True, slots=True)
class TruncationEvent:
    """Structured report of a log truncation the consumer detected (DESIGN.md section 4, item 3).

    Recorded whether or not a reset policy repaired it. `divergent_offset`/`divergent_epoch` are the
    leader's answer when known (None when the leader could not say: the epoch is gone from its cache).
    `offsets_affected` = position offset - divergent offset (records the consumer already read that the
    log no longer has), None when the divergent offset is unknown. `resolution` says what happened:
    "rewound" (seek to the divergence point), "reset" (policy reset earliest/latest), "raised"
    (`LogTruncationError` under policy none).
    """

    partition: TopicPartition
    position: FetchPosition
    divergent_offset: int | None
    divergent_epoch: int | None
    offsets_affected: int | None
    resolution: TruncationResolution
    detected_at_ms: int


@dataclass(frozen=True, slots=True)
class OffsetResetEvent:
    """A position the consumer set by its reset policy, distinct from a detected truncation.

    `reason`: "no_position" (nothing committed, no position yet), "out_of_range" (a fetch answered
    OFFSET_OUT_OF_RANGE: retention, or a truncation the offsets-only protocol cannot tell apart),
    "truncation" (a KIP-320 validation found a truncation the leader could not locate; the matching
    `TruncationEvent` has resolution "reset"). `from_offset` is the position before (None if none).
    """

    partition: TopicPartition
    policy: ResetPolicy
    reason: ResetReason
    from_offset: int | None
    to_offset: int
    to_epoch: int | None
    at_ms: int


def __getattr__(name: str) -> Any:
    """The pre-0.2 name `Protocol`, kept for one release with a DeprecationWarning."""
    if name == "Protocol":
        warnings.warn(
            "epochguard.types.Protocol is renamed EpochProtocol (it shadowed typing.Protocol)",
            DeprecationWarning,
            stacklevel=2,
        )
        return EpochProtocol
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

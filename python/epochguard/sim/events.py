"""What actors report, and who hears it: the simulator's event sink.

Actors do not call the invariant checker; they publish typed facts (a record acknowledged, delivered,
served; a ListOffsets or metadata answer accepted; a truncation or reset reported; a client restarted)
to the `EventSink`, and whoever cares subscribes: the `InvariantChecker` does, for every kind. The sink
also writes the human-readable timeline (`record`), and the cluster publishes `StepEnded` after each
step, when the checker runs its per-step checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from epochguard.sim.timeline import Event, Timeline
from epochguard.types import (
    ConsumerRecord,
    OffsetResetEvent,
    TopicPartition,
    TruncationEvent,
)

__all__ = [
    "Acked",
    "ClientRestarted",
    "Consumed",
    "ConsumerResumed",
    "EventSink",
    "FetchServed",
    "ListOffsetsAnswered",
    "MetadataAccepted",
    "ResetReported",
    "SimEvent",
    "StepEnded",
    "TruncationReported",
    "TxnAborted",
]


@dataclass(frozen=True, slots=True)
class Acked:
    """An acks=all produce answered: `offset` holds (key, value), written by leader `broker`."""

    tp: TopicPartition
    offset: int
    key: bytes | None
    value: bytes | None
    broker: int


@dataclass(frozen=True, slots=True)
class Consumed:
    consumer: str
    record: ConsumerRecord
    served_by: int
    read_committed: bool = False


@dataclass(frozen=True, slots=True)
class TxnAborted:
    """A producer's transaction on `tp` was aborted (its ABORT marker acknowledged): these values must
    never reach a read_committed consumer."""

    tp: TopicPartition
    values: tuple[bytes | None, ...]


@dataclass(frozen=True, slots=True)
class FetchServed:
    """Broker `broker` answered a consumer's fetch at `fetch_offset` with records."""

    consumer: str
    tp: TopicPartition
    broker: int
    fetch_offset: int


@dataclass(frozen=True, slots=True)
class ListOffsetsAnswered:
    client: str
    tp: TopicPartition
    offset: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class MetadataAccepted:
    client: str
    tp: TopicPartition
    leader: int | None
    epoch: int | None


@dataclass(frozen=True, slots=True)
class TruncationReported:
    consumer: str
    event: TruncationEvent


@dataclass(frozen=True, slots=True)
class ResetReported:
    consumer: str
    event: OffsetResetEvent


@dataclass(frozen=True, slots=True)
class ClientRestarted:
    client: str


@dataclass(frozen=True, slots=True)
class ConsumerResumed:
    consumer: str
    tp: TopicPartition
    committed: int
    commit_step: int | None


@dataclass(frozen=True, slots=True)
class StepEnded:
    step: int


SimEvent = (
    Acked | Consumed | FetchServed | ListOffsetsAnswered | MetadataAccepted | TruncationReported
    | ResetReported | ClientRestarted | ConsumerResumed | StepEnded | TxnAborted
)


class EventSink:
    """Publishes facts to subscribers (in subscription order, at once) and records the timeline."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self._subscribers: list[Callable[[SimEvent], None]] = []

    def subscribe(self, handler: Callable[[SimEvent], None]) -> None:
        self._subscribers.append(handler)

    def publish(self, event: SimEvent) -> None:
        for handler in self._subscribers:
            handler(event)

    def record(self, kind: str, node: str, message: str, **detail: Any) -> Event:
        return self.timeline.record(kind, node, message, **detail)

    @property
    def step(self) -> int:
        return self.timeline.step

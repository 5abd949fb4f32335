"""A producer: one batch in flight per partition (max.in.flight=1, so order holds), retried until acknowledged.

Values are unique (`<producer>-p<partition>-<n>`) so every record can be followed through the cluster.
Retries after a timeout can duplicate a record, as in Kafka without idempotence; that is not a fault.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from epochguard.errors import Errors
from epochguard.messages import ProducePartition, ProduceRequest, ProduceResponse
from epochguard.sim.client import Client
from epochguard.sim.events import Acked
from epochguard.types import TopicPartition

if TYPE_CHECKING:
    from epochguard.sim.context import ActorContext


@dataclass(frozen=True, slots=True)
class ProducedRecord:
    """A record a producer was told is written: where, with which acks, by which leader."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    acks: int
    leader: int
    step: int

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic, "partition": self.partition, "offset": self.offset,
            "key": _text(self.key), "value": _text(self.value), "acks": self.acks,
            "leader": self.leader, "step": self.step,
        }


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "replace")


class Producer(Client):
    def __init__(self, name: str, ctx: ActorContext, *, acks: int, batch_size: int = 2, interval_ms: int = 20) -> None:
        super().__init__(name, ctx)
        self.acks = acks
        self.batch_size = batch_size
        self.interval_ms = interval_ms
        self._seq: dict[TopicPartition, int] = {}
        self._batch: dict[TopicPartition, tuple[tuple[bytes, bytes], ...]] = {}
        self._next_send: dict[TopicPartition, int] = {}
        self.acked: list[ProducedRecord] = []
        self.errors = 0

    def work(self) -> None:
        now = self.now_ms
        for tp in self.ctx.topic_partitions:
            if self.in_flight("produce", tp) or now < self._next_send.get(tp, 0):
                continue
            leader = self.metadata.current_leader(tp).leader
            if leader is None:
                self.metadata.request_update()
                continue
            batch = self._batch.get(tp)
            if batch is None:
                batch = self._batch[tp] = self._new_batch(tp)
            request = ProduceRequest((ProducePartition(tp.topic, tp.partition, batch),), acks=self.acks,
                                     timeout_ms=self.ctx.config.request_timeout_ms)
            self.send(leader, request, "produce", tp)

    def _new_batch(self, tp: TopicPartition) -> tuple[tuple[bytes, bytes], ...]:
        start = self._seq.get(tp, 0)
        self._seq[tp] = start + self.batch_size
        key = f"{self.name}".encode()
        return tuple((key, f"{self.name}-p{tp.partition}-{n}".encode()) for n in range(start, start + self.batch_size))

    def on_response(self, kind: str, context: Any, response: ProduceResponse, broker: int) -> None:
        tp: TopicPartition = context
        part = next((p for p in response.partitions if p.tp == tp), None)
        error = Errors.UNKNOWN_SERVER_ERROR if part is None else part.error_code
        if error != Errors.NONE or part is None:
            self.errors += 1
            self.metadata.request_update()
            self._next_send[tp] = self.now_ms + self.ctx.config.retry_backoff_ms
            return
        batch = self._batch.pop(tp)
        step = self.ctx.events.step
        for i, (key, value) in enumerate(batch):
            record = ProducedRecord(tp.topic, tp.partition, part.base_offset + i, key, value, self.acks, broker, step)
            self.acked.append(record)
            if self.acks == -1:
                self.ctx.events.publish(Acked(tp, record.offset, key, value, broker))
        self.ctx.events.record(
            "ack", self.name,
            f"{tp} offsets {part.base_offset}..{part.base_offset + len(batch) - 1} acked by broker {broker} (acks={self.acks})",
            partition=str(tp), base_offset=part.base_offset, count=len(batch), acks=self.acks, broker=broker,
        )
        self._next_send[tp] = self.now_ms + self.interval_ms

    def on_timeout(self, kind: str, context: Any) -> None:
        super().on_timeout(kind, context)
        self._next_send[context] = self.now_ms + self.ctx.config.retry_backoff_ms
        self.errors += 1  # the batch stays and is sent again: maybe a duplicate

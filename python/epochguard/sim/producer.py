"""A producer: one batch in flight per partition (max.in.flight=1, so order holds), retried until acknowledged.

Values are unique (`<producer>-p<partition>-<n>`) so every record can be followed through the cluster.
Retries after a timeout can duplicate a record, as in Kafka without idempotence; that is not a fault.

A transactional producer (`transactional_id` given) writes each partition in transactions of
`batches_per_txn` acks=all batches under its producer id, then ends the transaction with a
WriteTxnMarkers request to the partition's leader, aborting every `abort_every`-th one. Deliberate
simplification: there is no transaction coordinator; the producer writes its own markers (what Kafka's
coordinator does after EndTxn), retrying them on the current leader until the ISR has them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from epochguard.errors import Errors
from epochguard.protocol.messages import (
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
    TxnMarker,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from epochguard.sim.client import Client
from epochguard.sim.events import Acked, TxnAborted
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
    def __init__(
        self,
        name: str,
        ctx: ActorContext,
        *,
        acks: int,
        batch_size: int = 2,
        interval_ms: int = 20,
        producer_id: int | None = None,
        batches_per_txn: int = 2,
        abort_every: int = 3,
    ) -> None:
        super().__init__(name, ctx)
        if producer_id is not None and acks != -1:
            raise ValueError("a transactional producer needs acks=all")
        self.acks = acks
        self.batch_size = batch_size
        self.interval_ms = interval_ms
        self.producer_id = producer_id  # transactional when set
        self.batches_per_txn = batches_per_txn
        self.abort_every = abort_every
        self._seq: dict[TopicPartition, int] = {}
        self._batch: dict[TopicPartition, tuple[tuple[bytes, bytes], ...]] = {}
        self._next_send: dict[TopicPartition, int] = {}
        self._txn_values: dict[TopicPartition, list[bytes]] = {}  # the open transaction's records so far
        self._txn_count: dict[TopicPartition, int] = {}  # transactions ended per partition
        self._ending: dict[TopicPartition, bool] = {}  # marker to write (True commit, False abort)
        self.acked: list[ProducedRecord] = []
        self.aborted: set[bytes] = set()  # values of aborted transactions (markers acknowledged)
        self.errors = 0

    @property
    def transactional(self) -> bool:
        return self.producer_id is not None

    def pending_marker(self, tp: TopicPartition) -> bool | None:
        """The marker this transactional producer is about to write for `tp`: True COMMIT, False ABORT,
        None when its transaction is still taking records (or it is not transactional)."""
        return self._ending.get(tp)

    def work(self) -> None:
        now = self.now_ms
        for tp in self.ctx.topic_partitions:
            if self.in_flight("produce", tp) or self.in_flight("marker", tp) or now < self._next_send.get(tp, 0):
                continue
            leader = self.metadata.current_leader(tp).leader
            if leader is None:
                self.metadata.request_update()
                continue
            if tp in self._ending:
                self._send_marker(leader, tp)
                continue
            batch = self._batch.get(tp)
            if batch is None:
                batch = self._batch[tp] = self._new_batch(tp)
            pid = -1 if self.producer_id is None else self.producer_id
            part = ProducePartition(tp.topic, tp.partition, batch, producer_id=pid,
                                    producer_epoch=0 if self.transactional else -1, transactional=self.transactional)
            request = ProduceRequest((part,), acks=self.acks, timeout_ms=self.ctx.config.request_timeout_ms)
            self.send(leader, request, "produce", tp)

    def _send_marker(self, leader: int, tp: TopicPartition) -> None:
        assert self.producer_id is not None
        marker = TxnMarker(self.producer_id, 0, self._ending[tp], 0, tp.topic, tp.partition)
        self.send(leader, WriteTxnMarkersRequest((marker,)), "marker", tp)

    def _new_batch(self, tp: TopicPartition) -> tuple[tuple[bytes, bytes], ...]:
        start = self._seq.get(tp, 0)
        self._seq[tp] = start + self.batch_size
        key = f"{self.name}".encode()
        return tuple((key, f"{self.name}-p{tp.partition}-{n}".encode()) for n in range(start, start + self.batch_size))

    def on_response(
        self, kind: str, context: Any, response: ProduceResponse | WriteTxnMarkersResponse, broker: int
    ) -> None:
        tp: TopicPartition = context
        if isinstance(response, WriteTxnMarkersResponse):
            self._on_marker(tp, response)
            return
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
        if self.transactional:
            self._txn_values.setdefault(tp, []).extend(value for _, value in batch)
            if len(self._txn_values[tp]) >= self.batches_per_txn * self.batch_size:
                ended = self._txn_count.get(tp, 0)
                self._ending[tp] = (ended + 1) % self.abort_every != 0  # every abort_every-th aborts
        self.ctx.events.record(
            "ack", self.name,
            f"{tp} offsets {part.base_offset}..{part.base_offset + len(batch) - 1} acked by broker {broker} "
            f"(acks={self.acks})",
            partition=str(tp), base_offset=part.base_offset, count=len(batch), acks=self.acks, broker=broker,
        )
        self._next_send[tp] = self.now_ms + self.interval_ms

    def _on_marker(self, tp: TopicPartition, response: WriteTxnMarkersResponse) -> None:
        part = next((p for p in response.partitions if p.tp == tp), None)
        if part is None or part.error_code != Errors.NONE:
            self.errors += 1
            self.metadata.request_update()
            self._next_send[tp] = self.now_ms + self.ctx.config.retry_backoff_ms
            return
        commit = self._ending.pop(tp)
        values = self._txn_values.pop(tp, [])
        self._txn_count[tp] = self._txn_count.get(tp, 0) + 1
        if not commit:
            self.aborted.update(values)
            self.ctx.events.publish(TxnAborted(tp, tuple(values)))
        self.ctx.events.record(
            "txn", self.name, f"{tp}: transaction of {len(values)} records {'committed' if commit else 'aborted'}",
            partition=str(tp), committed=commit, count=len(values),
        )
        self._next_send[tp] = self.now_ms + self.interval_ms

    def on_timeout(self, kind: str, context: Any) -> None:
        super().on_timeout(kind, context)
        self._next_send[context] = self.now_ms + self.ctx.config.retry_backoff_ms
        self.errors += 1  # the batch stays and is sent again: maybe a duplicate

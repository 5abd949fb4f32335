"""A producer's batching, partitioning and retries, sans-IO: Kafka's `RecordAccumulator`, `Sender`,
`BuiltInPartitioner` and, for `enable_idempotence`, the idempotent half of `TransactionManager`,
reduced to what epochguard needs.

- partitioning: an explicit partition wins; a key goes to `toPositive(murmur2(key)) % partitions`
  (`Utils.murmur2`, the Java default partitioner's hash, bit for bit, in Rust: `send_arrow` partitions
  with the same); records without a key stick to one partition until its batch is sent (KIP-480), then
  move on at random;
- batching: one open batch per partition, ready when it reaches `batch_size` bytes of record payload or
  is `linger_ms` old (or on `flush()`); up to `max_in_flight` Produce requests in flight per broker
  (`max.in.flight.requests.per.connection`): with 1, or with idempotence, one batch in flight per
  partition (Java's muted partitions), so a retry never reorders; with more, a partition's next batch
  goes out while the last is unanswered (pipelining), and a retried batch may land after a later one,
  as Java's and kafka-python's producers warn for that setting without idempotence (batches that fail
  together go back in the order they were made);
- sending: ready batches grouped by their partition's leader into one Produce per broker, encoded in
  Rust (`_core.encode_batch`, any codec); acks=0 completes on send;
- answers: NONE completes every record of the batch (offset = base offset + index, the leader epoch
  the batch was sent to); a retriable error (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, ...) or no
  answer puts the batch back at the head of its partition after `retry_backoff_ms` and refreshes
  metadata, until `delivery_timeout_ms` since the record was added; anything else fails its records.

- idempotence (`idempotent=True`, acks=all): an InitProducerId (no transactional id) before the first
  Produce; each batch carries the producer id and epoch and its partition's next sequence, kept across
  its retries. OUT_OF_ORDER_SEQUENCE_NUMBER and UNKNOWN_PRODUCER_ID are retried after the producer epoch
  is bumped locally and that partition's sequences restart at 0 (KIP-360; `TransactionManager.canRetry`
  and `bumpIdempotentProducerEpoch` for a producer without a transactional id; past epoch 32767 a new
  InitProducerId); another partition restarts at 0 under the new epoch with its next batch
  (`maybeUpdateProducerIdAndEpoch`). A batch that expires after it was sent leaves its sequence
  unresolved: the epoch is bumped the same way. DUPLICATE_SEQUENCE_NUMBER completes the batch (the
  broker has it); INVALID_PRODUCER_EPOCH, PRODUCER_FENCED and the rest fail it.

Metadata and InitProducerId go to `ClientMetadata.any_node` (the driver's least loaded node: a dead first
bootstrap address is not asked forever). Driving it is the consumer's contract: `poll_requests(now_ms)`,
`on_response`, `on_request_failed`, `next_deadline_ms`. Results come back as `Delivery` objects, resolved in place.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from epochguard import _core
from epochguard.client.metadata import ClientMetadata, NodeChooser
from epochguard.client.transactions import TransactionManager
from epochguard.errors import EpochGuardError, Errors, KafkaTimeoutError, TransactionAbortableError
from epochguard.protocol.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataRequest,
    MetadataResponse,
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
)
from epochguard.records import murmur2, partition_for_key  # Java's partitioner, in Rust (send_arrow's too)
from epochguard.types import TopicPartition

__all__ = ["murmur2", "partition_for_key", "Delivery", "RecordMetadata", "BatchMetadata", "Producer", "RETRIABLE"]

RETRIABLE = frozenset({
    Errors.NOT_LEADER_OR_FOLLOWER, Errors.LEADER_NOT_AVAILABLE, Errors.NOT_ENOUGH_REPLICAS,
    Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.REQUEST_TIMED_OUT, Errors.UNKNOWN_TOPIC_OR_PARTITION,
    Errors.KAFKA_STORAGE_ERROR, Errors.FENCED_LEADER_EPOCH, Errors.UNKNOWN_LEADER_EPOCH,
    # transaction version 2: the leader's add of the partition met the previous transaction still ending
    Errors.CONCURRENT_TRANSACTIONS,
})
_MAX_EPOCH = 32767  # Short.MAX_VALUE: past it, a new producer id
# Idempotent producer: retried after an epoch bump and a restart of the partition's sequences at 0
_SEQUENCE_LOST = frozenset({Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, Errors.UNKNOWN_PRODUCER_ID})


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record was written (kafka-python's `RecordMetadata`, plus the leader epoch it was written in)."""

    topic: str
    partition: int
    offset: int  # -1 with acks=0
    timestamp: int
    leader_epoch: int | None
    serialized_key_size: int
    serialized_value_size: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Where one batch of `send_arrow`'s rows was written: its records are at `base_offset` ..
    `base_offset + record_count - 1` of the partition (-1 with acks=0), holding the input rows `rows`
    (little-endian u32 row numbers, see `row_indices`) in that order."""

    topic: str
    partition: int
    base_offset: int
    record_count: int
    leader_epoch: int | None
    rows: bytes = field(repr=False)

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def row_indices(self) -> Any:
        """The input rows of this batch, in offset order, as a `pyarrow.UInt32Array` (zero-copy)."""
        import pyarrow as pa

        return pa.UInt32Array.from_buffers(pa.uint32(), self.record_count, [None, pa.py_buffer(self.rows)])


_M = TypeVar("_M", RecordMetadata, BatchMetadata)


class Delivery(Generic[_M]):
    """One record's outcome (`RecordMetadata`), or one `send_arrow` batch's (`BatchMetadata`),
    resolved by the producer (`FutureRecordMetadata`)."""

    __slots__ = ("_callbacks", "error", "metadata")

    def __init__(self) -> None:
        self.metadata: _M | None = None
        self.error: EpochGuardError | None = None
        self._callbacks: list[Callable[[Delivery[_M]], None]] = []

    @property
    def done(self) -> bool:
        return self.metadata is not None or self.error is not None

    def on_done(self, callback: Callable[[Delivery[_M]], None]) -> None:
        if self.done:
            callback(self)
        else:
            self._callbacks.append(callback)

    def _resolve(self, metadata: _M | None, error: EpochGuardError | None) -> None:
        self.metadata, self.error = metadata, error
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            try:
                cb(self)
            except Exception:
                logging.getLogger(__name__).exception("delivery callback failed")


@dataclass(slots=True)
class _Record:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    added_ms: int
    delivery: Delivery[RecordMetadata]


@dataclass(slots=True)
class _Encoded:
    """A batch `send_arrow` encoded whole: its bytes, the input rows it holds, one delivery for all."""

    raw: bytes
    rows: bytes
    count: int
    delivery: Delivery[BatchMetadata]


@dataclass(slots=True)
class _Batch:
    tp: TopicPartition
    created_ms: int
    records: list[_Record] = field(default_factory=list)
    size: int = 0
    retry_at_ms: int = 0
    attempts: int = 0
    base_sequence: int = -1  # idempotent: assigned on the first send, kept across retries
    producer: tuple[int, int] = (-1, -1)  # the (producer id, epoch) the sequence belongs to
    encoded: _Encoded | None = None  # send_arrow's: sent as encoded, never appended to
    number: int = 0  # the order batches were made in (a retry goes back to its place among its partition's)

    @property
    def count(self) -> int:
        return self.encoded.count if self.encoded is not None else len(self.records)

    @property
    def added_ms(self) -> int:
        return self.created_ms if self.encoded is not None else self.records[0].added_ms


class Producer:
    """The sans-IO producer (see module docstring). Times are the caller's milliseconds."""

    def __init__(
        self,
        *,
        bootstrap: Iterable[int],
        acks: int = -1,
        linger_ms: int = 5,
        batch_size: int = 16_384,
        compression_type: str = "none",
        retry_backoff_ms: int = 100,
        request_timeout_ms: int = 30_000,
        delivery_timeout_ms: int = 120_000,
        metadata_max_age_ms: int = 300_000,
        idempotent: bool = False,
        rng: random.Random | None = None,
        least_loaded: NodeChooser | None = None,
        max_in_flight: int = 1,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
    ) -> None:
        if acks not in (0, 1, -1):
            raise ValueError(f"acks must be 0, 1 or -1 (all): {acks!r}")
        if idempotent and acks != -1:
            raise ValueError("an idempotent producer needs acks=all (-1), as Java's ProducerConfig requires")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1: {max_in_flight!r}")
        if transactional_id is not None and not idempotent:
            raise ValueError("a transactional producer is idempotent (idempotent=True), as Java's requires")
        # The transactional half of Java's TransactionManager (coordinator, partitions, EndTxn), or None
        self.transactions = None if transactional_id is None else TransactionManager(
            transactional_id, transaction_timeout_ms=transaction_timeout_ms, retry_backoff_ms=retry_backoff_ms)
        self.idempotent = idempotent
        self.max_in_flight = max_in_flight
        self._mute = max_in_flight == 1 or idempotent  # one batch in flight per partition: order kept
        self.producer_id, self.producer_epoch = -1, -1
        self._init_at_ms = 0  # the next InitProducerId not before (its back-off)
        self._sequences: dict[TopicPartition, tuple[tuple[int, int], int]] = {}  # tp -> ((id, epoch), next)
        self.acks = acks
        self.linger_ms, self.batch_size = linger_ms, batch_size
        self.compression_type = compression_type
        self.retry_backoff_ms, self.request_timeout_ms = retry_backoff_ms, request_timeout_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.metadata = ClientMetadata(topics=(), refresh_backoff_ms=retry_backoff_ms,
                                       metadata_max_age_ms=metadata_max_age_ms, least_loaded=least_loaded)
        self._bootstrap = tuple(bootstrap)
        self._rng = rng or random.Random()
        self._unpartitioned: list[tuple[str, int | None, _Record]] = []  # waiting for the topic's metadata
        self._batches: dict[TopicPartition, list[_Batch]] = {}
        self._sticky: dict[str, int] = {}
        # id(request) -> (node, sent at, the batches it carries: none for a Metadata request)
        self._in_flight: dict[int, tuple[int, int, dict[TopicPartition, _Batch]]] = {}
        self._in_flight_requests: dict[int, Any] = {}  # id -> the request (InitProducerId is looked for)
        self._busy: set[TopicPartition] = set()
        self._metadata_in_flight: int | None = None
        self._flushing = False
        self._topics: set[str] = set()  # every topic sent to (in metadata's topics)
        self._made = itertools.count()  # numbers the batches in the order they are made

    # --- application ----------------------------------------------------------------------------
    def send(self, topic: str, value: bytes | None, key: bytes | None = None, *, partition: int | None = None,
             headers: Iterable[tuple[str, bytes | None]] = (), timestamp_ms: int | None = None,
             now_ms: int = 0, delivery: Delivery[RecordMetadata] | None = None) -> Delivery[RecordMetadata]:
        """Queue one record; `delivery`: the one to resolve (a driver that made it on another thread)."""
        if value is None and key is None:
            raise ValueError("a record needs a key or a value")
        if self.transactions is not None:
            self.transactions.check_send()
        delivery = Delivery() if delivery is None else delivery
        record = _Record(key, value, tuple(headers), now_ms if timestamp_ms is None else timestamp_ms, now_ms, delivery)
        if topic not in self._topics:
            self._topics.add(topic)
            self.metadata.add_topics([topic])
        if not self._unpartitioned and self.metadata.partition_count(topic):
            self._place_one(topic, partition, record, now_ms)  # the common case: no list to go through
        else:
            self._unpartitioned.append((topic, partition, record))
            self._place(now_ms)
        return delivery

    def partitions_for(self, topic: str) -> int:
        """The topic's partition count as metadata has it (0 while unknown); asks for it if not known."""
        if topic not in self._topics:
            self._topics.add(topic)
            self.metadata.add_topics([topic])
        return self.metadata.partition_count(topic)

    def sticky_partition(self, topic: str) -> int:
        """Where keyless records of `topic` go now (KIP-480: until that partition's batch is sent)."""
        partitions = self.partitions_for(topic)
        if partitions <= 0:
            raise ValueError(f"no metadata for topic {topic!r} yet")
        return self._sticky.setdefault(topic, self._rng.randrange(partitions))

    def send_encoded(self, topic: str, partition: int, raw: bytes, rows: bytes, now_ms: int) -> Delivery[BatchMetadata]:
        """Queue one batch `_core.encode_arrow_batches` encoded for `partition` (after the records
        queued before it there); it is sent whole, as soon as its partition may send."""
        count = len(rows) // 4
        if count <= 0:
            raise ValueError("an encoded batch holds at least one record")
        if self.transactions is not None:
            self.transactions.check_send()
        partitions = self.partitions_for(topic)
        if not 0 <= partition < partitions:
            raise ValueError(f"{topic} has no partition {partition} ({partitions} known)")
        delivery: Delivery[BatchMetadata] = Delivery()
        tp = TopicPartition(topic, partition)
        self._place(now_ms)  # records sent before this batch keep their place ahead of it
        if self.transactions is not None:
            self.transactions.add_partition(tp)
        self._batches.setdefault(tp, []).append(
            _Batch(tp, now_ms, size=len(raw), encoded=_Encoded(raw, rows, count, delivery), number=next(self._made)))
        return delivery

    def flush(self) -> None:
        """Send every batch now, without waiting for linger_ms (until `pending()` is 0)."""
        self._flushing = True

    def abort_unsent(self, err: EpochGuardError) -> int:
        """Fail every record not in flight with `err` (Java's `RecordAccumulator.abortUndrainedBatches`,
        as its Sender does on a fatal error such as a failed authentication): those waiting for their
        topic's metadata and the batches not yet sent. How many records failed."""
        failed = 0
        for _, _, record in self._unpartitioned:
            record.delivery._resolve(None, err)
            failed += 1
        self._unpartitioned = []
        for tp, batches in self._batches.items():
            for b in batches:
                if self.idempotent and b.base_sequence >= 0:
                    self._bump_epoch(tp, None)  # sent before, outcome unknown: as an expired batch
                self._fail(b, err)
                failed += b.count
            batches.clear()
        return failed

    def pending(self) -> int:
        """Records not yet resolved."""
        return (len(self._unpartitioned) + sum(b.count for bs in self._batches.values() for b in bs)
                + sum(b.count for _, _, bs in self._in_flight.values() for b in bs.values()))

    # --- the driver's side ----------------------------------------------------------------------
    def poll_requests(self, now_ms: int) -> list[tuple[int, Any]]:
        self._expire(now_ms)
        self._place(now_ms)
        out: list[tuple[int, Any]] = []
        if self._metadata_in_flight is None and self.metadata.topics and self.metadata.should_update(now_ms):
            node = self.metadata.any_node(self._bootstrap)
            if node is None:  # every broker in its reconnect back-off: after the refresh back-off
                self.metadata.failed_update(now_ms)
            else:
                request = self.metadata.build_request(now_ms)
                self._metadata_in_flight = id(request)
                self._in_flight[id(request)] = (node, now_ms, {})
                out.append((node, request))
        if self.transactions is not None:
            out += self._poll_transactions(now_ms)
        elif self.idempotent and self.producer_id < 0:
            if not self._init_in_flight() and now_ms >= self._init_at_ms:
                node = self.metadata.any_node(self._bootstrap)
                if node is None:
                    self._init_at_ms = now_ms + self.retry_backoff_ms
                else:
                    init = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1)
                    self._in_flight[id(init)] = (node, now_ms, {})
                    self._in_flight_requests[id(init)] = init
                    out.append((node, init))
            if self._flushing and self.pending() == 0:
                self._flushing = False
            return out  # no Produce before the producer id
        for node, chosen in sorted(self._ready_by_leader(now_ms).items()):
            out.append((node, self._produce_request(node, chosen, now_ms)))
        if self._flushing and self.pending() == 0:
            self._flushing = False
        return out

    def _poll_transactions(self, now_ms: int) -> list[tuple[int, Any]]:
        """The transaction coordinator's next request; an abort drops what was not sent, a commit flushes."""
        txn = self.transactions
        assert txn is not None
        if txn.aborting:  # Java's Sender aborts the undrained batches of an aborted transaction
            self.abort_unsent(TransactionAbortableError("the transaction was aborted"))
        elif txn.committing:
            self._flushing = True  # EndTxn goes once everything is answered
        out = txn.poll_requests(now_ms, lambda: self.metadata.any_node(self._bootstrap), idle=self._idle())
        for node, request in out:
            self._in_flight[id(request)] = (node, now_ms, {})
        self.producer_id, self.producer_epoch = txn.producer_id, txn.producer_epoch
        return out

    def _idle(self) -> bool:
        """No record waiting or in flight: an EndTxn may go."""
        return not self._unpartitioned and not any(self._batches.values()) and not any(
            carried for _, _, carried in self._in_flight.values())

    def _init_in_flight(self) -> bool:
        return any(isinstance(r, InitProducerIdRequest) for r in self._in_flight_requests.values())

    def _full_nodes(self) -> set[int]:
        """Brokers with `max_in_flight` Produce requests unanswered: nothing more goes to them now."""
        requests: dict[int, int] = {}
        for node, _, carried in self._in_flight.values():
            if carried:
                requests[node] = requests.get(node, 0) + 1
        return {node for node, n in requests.items() if n >= self.max_in_flight}

    def _ready_by_leader(self, now_ms: int) -> dict[int, dict[TopicPartition, _Batch]]:
        """The head batch of every partition that may send now, by its leader."""
        by_node: dict[int, dict[TopicPartition, _Batch]] = {}
        full = self._full_nodes()
        for tp, batches in self._batches.items():
            if not batches or tp in self._busy:
                continue
            if self.transactions is not None and not self.transactions.may_send(tp):
                continue  # not added to the transaction yet (AddPartitionsToTxn first)
            batch = batches[0]
            ready = (self._flushing or batch.size >= self.batch_size or len(batches) > 1
                     or batch.encoded is not None or now_ms - batch.created_ms >= self.linger_ms)
            if not ready or now_ms < batch.retry_at_ms:
                continue
            leader = self.metadata.current_leader(tp)
            if leader.leader is None:
                self.metadata.request_update()
                continue
            if leader.leader in full:
                continue
            by_node.setdefault(leader.leader, {})[tp] = batch
        return by_node

    def _produce_request(self, node: int, chosen: dict[TopicPartition, _Batch], now_ms: int) -> ProduceRequest:
        parts = []
        for tp, batch in chosen.items():
            self._batches[tp].pop(0)
            if self._mute:
                self._busy.add(tp)
            if self._sticky.get(tp.topic) == tp.partition:
                del self._sticky[tp.topic]  # KIP-480: the next keyless record picks a new partition
            batch.attempts += 1
            if self.idempotent:
                self._sequence(batch)
            if batch.encoded is not None:
                raw = batch.encoded.raw if not self.idempotent else _core.with_producer_state(
                    batch.encoded.raw, batch.producer[0], batch.producer[1], batch.base_sequence,
                    is_transactional=self.transactions is not None)
            else:
                records = [(r.key, r.value, list(r.headers), r.timestamp) for r in batch.records]
                raw = _core.encode_batch(records, compression=self.compression_type,
                                         base_timestamp=batch.records[0].timestamp, producer_id=batch.producer[0],
                                         producer_epoch=batch.producer[1], base_sequence=batch.base_sequence,
                                         is_transactional=self.transactions is not None)
            parts.append(ProducePartition(tp.topic, tp.partition, bytes(raw)))
        if self.transactions is None:
            request = ProduceRequest(tuple(parts), acks=self.acks, timeout_ms=self.request_timeout_ms)
        else:  # the version tells a transaction version 2 broker whether to add the partitions itself
            request = ProduceRequest(tuple(parts), acks=self.acks, timeout_ms=self.request_timeout_ms,
                                     version=self.transactions.produce_version,
                                     transactional_id=self.transactions.transactional_id)
        if self.acks == 0:  # no answer comes: done once sent
            for tp, batch in chosen.items():
                self._busy.discard(tp)
                self._complete(batch, -1, None)
        else:
            self._in_flight[id(request)] = (node, now_ms, chosen)
        return request

    def next_deadline_ms(self) -> int | None:
        times: list[int] = []
        if self.transactions is not None:
            txn_at = self.transactions.next_deadline_ms(self._idle())
            if txn_at is not None:
                times.append(txn_at)
        if self._unpartitioned or self.metadata.update_requested:
            times.append(self.metadata.next_update_ms())
        if self.idempotent and self.producer_id < 0 and self.transactions is None:  # nothing before the id
            if not self._init_in_flight():
                times.append(self._init_at_ms)
            times += [sent + self.request_timeout_ms for _, sent, _ in self._in_flight.values()]
            return min(times, default=None)
        full = self._full_nodes()  # their partitions wait for an answer, which wakes the driver anyway
        for tp, batches in self._batches.items():
            if batches and tp not in self._busy and self.metadata.current_leader(tp).leader not in full:
                b = batches[0]
                times.append(max(b.retry_at_ms, b.created_ms if self._flushing else b.created_ms + self.linger_ms))
        times += [sent + self.request_timeout_ms for _, sent, _ in self._in_flight.values()]
        return min(times, default=None)

    def on_response(self, node_id: int, request: Any, response: Any, now_ms: int) -> None:
        entry = self._in_flight.pop(id(request), None)
        if entry is None:
            return
        self._in_flight_requests.pop(id(request), None)
        if self.transactions is not None and self.transactions.owns(request):
            self.transactions.on_response(node_id, request, response, now_ms)
            self.producer_id, self.producer_epoch = self.transactions.producer_id, self.transactions.producer_epoch
            return
        if isinstance(request, InitProducerIdRequest):
            if isinstance(response, InitProducerIdResponse) and response.error_code == Errors.NONE:
                self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
            else:  # every error of a producer without a transactional id is retried (coordinator loading...)
                self._init_at_ms = now_ms + self.retry_backoff_ms
            return
        if isinstance(request, MetadataRequest):
            self._metadata_in_flight = None
            if isinstance(response, MetadataResponse):
                self.metadata.update(response, now_ms)
                self._place(now_ms)  # records waiting for the topic join their batches now (linger starts)
            return
        assert isinstance(response, ProduceResponse)
        self._on_produce_answer(entry[2], response, now_ms)

    def _on_produce_answer(self, batches: dict[TopicPartition, _Batch], response: ProduceResponse,
                           now_ms: int) -> None:
        answered = {p.tp: p for p in response.partitions}
        for tp, batch in batches.items():
            self._busy.discard(tp)
            answer = answered.get(tp)
            if answer is None:
                self._retry(batch, now_ms)
            elif answer.error_code == Errors.NONE:
                self._complete(batch, answer.base_offset, self.metadata.current_leader(tp).epoch)
            elif self.idempotent and answer.error_code == Errors.DUPLICATE_SEQUENCE_NUMBER:
                self._complete(batch, -1, self.metadata.current_leader(tp).epoch)  # written before
            elif self.transactions is not None and answer.error_code in _SEQUENCE_LOST:
                # in a transaction a lost sequence is not retried: abortable, a new epoch after the abort
                self._fail(batch, answer.error_code.exception(f"produce to {tp}: {answer.error_code.name}")
                           or EpochGuardError(answer.error_code.name))
                self.transactions.on_batch_failed(EpochGuardError(answer.error_code.name), sequence_unresolved=True)
            elif self.idempotent and answer.error_code in _SEQUENCE_LOST:
                if not (answer.error_code == Errors.UNKNOWN_PRODUCER_ID and answer.log_start_offset < 0):
                    self._bump_epoch(tp, batch)  # else: the leader could not say yet, retry as is (canRetry)
                self._retry(batch, now_ms)
            elif answer.error_code in RETRIABLE:
                self.metadata.request_update()
                self._retry(batch, now_ms)
            else:
                name = answer.error_code.name
                err = answer.error_code.exception(f"produce to {tp}: {name}") or EpochGuardError(name)
                self._fail(batch, err)
                if self.transactions is not None:
                    self.transactions.on_batch_failed(err)

    def on_request_failed(self, node_id: int, request: Any, now_ms: int) -> None:
        entry = self._in_flight.pop(id(request), None)
        if entry is None:
            return
        self._in_flight_requests.pop(id(request), None)
        if self.transactions is not None and self.transactions.owns(request):
            self.transactions.on_request_failed(node_id, request, now_ms)
            return
        if isinstance(request, InitProducerIdRequest):
            self._init_at_ms = now_ms + self.retry_backoff_ms
            return
        if isinstance(request, MetadataRequest):
            self._metadata_in_flight = None
            self.metadata.failed_update(now_ms)
            return
        self.metadata.request_update()
        for tp, batch in entry[2].items():
            self._busy.discard(tp)
            self._retry(batch, now_ms)

    # --- internals ------------------------------------------------------------------------------
    def _place(self, now_ms: int) -> None:
        waiting = []
        for topic, partition, record in self._unpartitioned:
            if not self.metadata.partition_count(topic):
                waiting.append((topic, partition, record))
                continue
            self._place_one(topic, partition, record, now_ms)
        self._unpartitioned = waiting

    def _place_one(self, topic: str, partition: int | None, record: _Record, now_ms: int) -> None:
        """Partition one record of a topic whose partitions are known, and batch it."""
        partitions = self.metadata.partition_count(topic)
        if partition is None:
            if record.key is not None:
                partition = partition_for_key(record.key, partitions)
            else:
                partition = self._sticky.setdefault(topic, self._rng.randrange(partitions))
        elif not 0 <= partition < partitions:
            record.delivery._resolve(None, EpochGuardError(f"{topic} has no partition {partition}"))
            return
        self._append(TopicPartition(topic, partition), record, now_ms)

    def _append(self, tp: TopicPartition, record: _Record, now_ms: int) -> None:
        if self.transactions is not None:
            self.transactions.add_partition(tp)
        batches = self._batches.setdefault(tp, [])
        size = len(record.key or b"") + len(record.value or b"") + 16  # as Rust's produce::record_size
        if record.headers:
            size += sum(len(k) + len(v or b"") for k, v in record.headers)
        full = bool(batches) and batches[-1].size + size > self.batch_size and bool(batches[-1].records)
        if not batches or full or batches[-1].attempts or batches[-1].encoded is not None:
            batches.append(_Batch(tp, now_ms, number=next(self._made)))
        batches[-1].records.append(record)
        batches[-1].size += size

    def _retry(self, batch: _Batch, now_ms: int) -> None:
        """Back into its partition's queue ahead of every batch made after it: two pipelined batches that
        both failed go out again in their order (Java's `insertInSequenceOrder` does so for sequences)."""
        batch.retry_at_ms = now_ms + self.retry_backoff_ms
        queue = self._batches.setdefault(batch.tp, [])
        at = next((i for i, queued in enumerate(queue) if queued.number > batch.number), len(queue))
        queue.insert(at, batch)

    def _expire(self, now_ms: int) -> None:
        waiting = []
        for topic, partition, record in self._unpartitioned:
            if now_ms - record.added_ms >= self.delivery_timeout_ms:
                record.delivery._resolve(None, KafkaTimeoutError(f"no metadata for topic {topic!r} within "
                                                                 f"{self.delivery_timeout_ms} ms"))
            else:
                waiting.append((topic, partition, record))
        self._unpartitioned = waiting
        for tp, batches in self._batches.items():
            keep = []
            for b in batches:
                if tp not in self._busy and now_ms - b.added_ms >= self.delivery_timeout_ms:
                    if self.idempotent and b.base_sequence >= 0:
                        self._bump_epoch(tp, None)  # sent, outcome unknown: its sequence is unresolved
                    self._fail(b, KafkaTimeoutError(f"{b.count} records for {tp} expired after "
                                                    f"{self.delivery_timeout_ms} ms"))
                else:
                    keep.append(b)
            self._batches[tp] = keep

    # --- idempotence (TransactionManager, no transactional id) --------------------------------------
    def _sequence(self, batch: _Batch) -> None:
        """Give a batch its sequence on its first send (a retry keeps it); a partition whose sequences
        belong to an older producer id or epoch restarts at 0 (`maybeUpdateProducerIdAndEpoch`)."""
        current = (self.producer_id, self.producer_epoch)
        if batch.base_sequence >= 0 and batch.producer == current:
            return
        owner, following = self._sequences.get(batch.tp, (current, 0))
        if owner != current:
            following = 0
        batch.producer, batch.base_sequence = current, following
        self._sequences[batch.tp] = (current, (following + batch.count) & 0x7FFFFFFF)

    def _bump_epoch(self, tp: TopicPartition, batch: _Batch | None) -> None:
        """`bumpIdempotentProducerEpoch`: the next epoch, locally (past 32767 a new producer id), and
        `tp`'s sequences from 0; `batch` (the one that failed) is sequenced again when resent."""
        if batch is not None and batch.producer != (self.producer_id, self.producer_epoch):
            return  # sent under an epoch bumped since: resent with a new sequence anyway
        if self.transactions is not None:  # the coordinator bumps it, after the abort this makes necessary
            self.transactions.on_batch_failed(EpochGuardError(f"a batch of {tp} left its sequence unresolved"),
                                              sequence_unresolved=True)
            return
        if self.producer_epoch >= _MAX_EPOCH:
            self.producer_id, self.producer_epoch = -1, -1  # InitProducerId again before any Produce
        else:
            self.producer_epoch += 1
        self._sequences.pop(tp, None)
        for queued in self._batches.get(tp, ()):
            queued.base_sequence = -1
        if batch is not None:
            batch.base_sequence = -1

    def _complete(self, batch: _Batch, base_offset: int, epoch: int | None) -> None:
        if batch.encoded is not None:
            e = batch.encoded
            e.delivery._resolve(BatchMetadata(batch.tp.topic, batch.tp.partition, base_offset, e.count, epoch, e.rows),
                                None)
            return
        for i, r in enumerate(batch.records):
            r.delivery._resolve(RecordMetadata(batch.tp.topic, batch.tp.partition,
                                               base_offset + i if base_offset >= 0 else -1, r.timestamp, epoch,
                                               len(r.key or b""), len(r.value or b"")), None)

    def _fail(self, batch: _Batch, err: EpochGuardError) -> None:
        if batch.encoded is not None:
            batch.encoded.delivery._resolve(None, err)
        for r in batch.records:
            r.delivery._resolve(None, err)

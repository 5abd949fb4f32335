"""`AsyncProducer` and `KafkaProducer`: the sans-IO `client.producer.Producer` on real sockets.

Mirrors the application face of Kafka's `KafkaProducer` as kafka-python 3 spells it (`send` returning a
future, `flush`, `close`, its setting names): partitioning, batching, retries and what an answer means
are the state machine's; this module moves its requests to brokers and their answers back, and tells it
the time. `enable_idempotence` as Java's idempotent producer (the state machine's); `transactional_id`
as Java's transactional producer (`init_transactions`, `begin_transaction`, `send_offsets_to_transaction`,
`commit_transaction`, `abort_transaction`: `client.transactions`);
`max_in_flight_requests_per_connection` (5) requests in flight per broker. The blocking `send` queues
from the caller's thread (`AsyncProducer.submit`) without waiting for the loop thread.

`send_arrow(topic, table)` produces the rows of a pyarrow Table / RecordBatch (or any object with
`__arrow_c_stream__`): columns `key`, `value` (bytes or strings; at least one), `headers`
(list<struct<key: string, value: binary>> as `poll_arrow` hands them out, or map<string, binary>),
`partition` and `timestamp` (optional; null rows are partitioned / stamped now); other columns are
ignored. It waits for the topic's metadata (up to `max_block_ms`), then Rust partitions the rows as
`send` does (an explicit partition, else murmur2 of the key, else the topic's sticky partition, one
implementation: `_core.partition_for_key`) and encodes them into batches of at most `batch_size` bytes
per partition with `compression_type`, off the event loop with the GIL released; the batches join the
same queues as `send`'s records (order per partition kept). The result is one delivery per batch
(`BatchMetadata`: partition, base offset, record count, leader epoch and the input rows it holds, in
offset order), and `offsets()` maps every input row to its (partition, offset). Columns of the wrong
type raise `ArrowSchemaError` (a TypeError) and bad values (a partition out of range, a row with
neither key nor value) ValueError, before anything is queued. The serializers do not apply to it.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from epochguard import _core
from epochguard.errors import (
    AuthenticationError,
    BufferExhaustedError,
    ClientClosedError,
    EpochGuardError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    RecordTooLargeError,
)
from epochguard.protocol.messages import FindCoordinatorResponse, MetadataResponse
from epochguard.types import TopicPartition

from .blocking import BlockingClient
from .network import NetworkClient
from .producer import BatchMetadata, Delivery, Producer, RecordMetadata
from .security import SECURITY_DEFAULTS, security_of
from .settings import COMMON_UNSUPPORTED, check_settings
from .transactions import TransactionalResult, TransactionManager

__all__ = ["AsyncProducer", "KafkaProducer", "PRODUCER_DEFAULTS", "UNSUPPORTED_SETTINGS", "FutureRecordMetadata",
           "ArrowDelivery", "FutureArrowMetadata"]

_IDLE_S = 1.0
_MIN_ROUND_S = 0.002
_RECORD_OVERHEAD = 22  # a record's fixed fields in a v2 batch, at most (length, attributes, deltas, counts)

PRODUCER_DEFAULTS: dict[str, Any] = {
    "bootstrap_servers": "localhost:9092",
    "client_id": "epochguard-producer",
    "key_serializer": None,
    "value_serializer": None,
    "acks": 1,
    "compression_type": None,
    "linger_ms": 5,  # Java's default since 3.9 (kafka-python: 0)
    "batch_size": 16_384,
    "retry_backoff_ms": 100,
    "request_timeout_ms": 30_000,
    "delivery_timeout_ms": 120_000,
    "reconnect_backoff_ms": 50,
    "reconnect_backoff_max_ms": 1_000,
    "metadata_max_age_ms": 300_000,
    "max_block_ms": 60_000,  # send's wait for room in buffer_memory; send_arrow's for the topic's metadata
    "buffer_memory": 33_554_432,  # bytes of records sent and not yet answered (Java's buffer.memory, 32 MiB)
    "enable_idempotence": False,
    # kafka-python's and Java's default; an idempotent producer keeps one batch in flight per partition
    "max_in_flight_requests_per_connection": 5,
    "transactional_id": None,  # set: the transactional producer (idempotent, acks=all), Java's TransactionManager
    "transaction_timeout_ms": 60_000,
    **SECURITY_DEFAULTS,  # security_protocol, ssl_*, sasl_mechanism, sasl_plain_username/password
}


# kafka-python settings this client refuses when set to anything but None, and why.
UNSUPPORTED_SETTINGS: dict[str, str] = {
    **COMMON_UNSUPPORTED,
    "retries": "a batch is retried until delivery_timeout_ms, as Java's producer (retries=MAX_INT); "
               "bound it with delivery_timeout_ms",
    "partitioner": "Java's default partitioner only (murmur2 of the key, sticky for null keys); "
                   "pass partition= to send() to choose",
    "max_request_size": "batches hold up to batch_size bytes (a larger record travels alone in its own); a "
                        "record larger than buffer_memory is refused",
    "receive_message_max_bytes": "not offered: Produce answers are small",
}


def producer_config(configs: Mapping[str, Any]) -> dict[str, Any]:
    """The settings with defaults filled in; unknown names are a TypeError, unsupported ones (set) a
    ValueError naming why, as kafka-python refuses unrecognised configs."""
    check_settings(configs, PRODUCER_DEFAULTS, UNSUPPORTED_SETTINGS, "producer")
    config = {**PRODUCER_DEFAULTS, **{k: v for k, v in configs.items() if k in PRODUCER_DEFAULTS}}
    acks = config["acks"]
    if config["transactional_id"] is not None:
        # Java: a transactional.id implies idempotence and acks=all; either set otherwise is refused
        if configs.get("enable_idempotence") is False:
            raise ValueError("transactional_id needs enable_idempotence (a transactional producer is idempotent)")
        config["enable_idempotence"] = True
        if "acks" not in configs:
            acks = "all"
    config["acks"] = -1 if acks in ("all", -1) else acks
    if config["acks"] not in (0, 1, -1):
        raise ValueError(f"acks must be 0, 1 or 'all': {acks!r}")
    if config["enable_idempotence"] and config["acks"] != -1:
        raise ValueError(f"enable_idempotence needs acks='all' (got {acks!r}), as Java's ProducerConfig requires")
    config["security"] = security_of(config)
    config["compression_type"] = config["compression_type"] or "none"
    for name in ("buffer_memory", "max_block_ms"):
        if not isinstance(config[name], int) or config[name] < (1 if name == "buffer_memory" else 0):
            raise ValueError(f"{name} must be a {'positive' if name == 'buffer_memory' else 'non-negative'} "
                             f"int: {config[name]!r}")
    in_flight = config["max_in_flight_requests_per_connection"]
    if not isinstance(in_flight, int) or in_flight < 1:
        raise ValueError(f"max_in_flight_requests_per_connection must be a positive int: {in_flight!r}")
    return config


class FutureRecordMetadata:
    """kafka-python's future: `get(timeout)`, `add_callback`, `add_errback`, `succeeded()`."""

    def __init__(self, delivery: Delivery[RecordMetadata], wait: Callable[[float | None], None]) -> None:
        self._delivery = delivery
        self._wait = wait

    def get(self, timeout: float | None = None) -> RecordMetadata:
        if not self._delivery.done:
            self._wait(timeout)
        if self._delivery.error is not None:
            raise self._delivery.error
        if self._delivery.metadata is None:
            raise KafkaTimeoutError(f"no answer within {timeout} s")
        return self._delivery.metadata

    @property
    def delivery(self) -> Delivery[RecordMetadata]:
        return self._delivery

    def is_done(self) -> bool:
        return self._delivery.done

    def succeeded(self) -> bool:
        return self._delivery.metadata is not None

    def add_callback(self, fn: Callable[[RecordMetadata], Any]) -> FutureRecordMetadata:
        self._delivery.on_done(lambda d: fn(d.metadata) if d.metadata is not None else None)
        return self

    def add_errback(self, fn: Callable[[EpochGuardError], Any]) -> FutureRecordMetadata:
        self._delivery.on_done(lambda d: fn(d.error) if d.error is not None else None)
        return self


class ArrowDelivery:
    """What one `send_arrow` queued: one `Delivery[BatchMetadata]` per encoded batch (`batches`)."""

    def __init__(self, batches: list[Delivery[BatchMetadata]]) -> None:
        self.batches = batches

    @property
    def done(self) -> bool:
        return all(d.done for d in self.batches)

    @property
    def error(self) -> EpochGuardError | None:
        """The first failed batch's error (None while none failed)."""
        return next((d.error for d in self.batches if d.error is not None), None)

    def metadata(self) -> list[BatchMetadata]:
        """Every batch's metadata; raises the first batch's error, or KafkaTimeoutError if not all are done."""
        if self.error is not None:
            raise self.error
        out = [d.metadata for d in self.batches]
        if any(m is None for m in out):
            raise KafkaTimeoutError(f"{sum(m is None for m in out)} of {len(out)} batches not answered yet")
        return [m for m in out if m is not None]

    def offsets(self) -> Any:
        """A pyarrow Table with one row per input row, in input order: `partition` (int32) and `offset`
        (int64; -1 with acks=0). Raises as `metadata()` while a batch failed or is not answered."""
        import numpy as np
        import pyarrow as pa

        done = self.metadata()
        n = sum(m.record_count for m in done)
        partitions = np.empty(n, dtype=np.int32)
        offsets = np.empty(n, dtype=np.int64)
        for m in done:
            rows = np.frombuffer(m.rows, dtype="<u4")
            partitions[rows] = m.partition
            offsets[rows] = m.base_offset + np.arange(m.record_count) if m.base_offset >= 0 else -1
        return pa.table({"partition": partitions, "offset": offsets})


class FutureArrowMetadata:
    """`send_arrow`'s future on the blocking producer: `get(timeout)` -> every batch's `BatchMetadata`
    (raising the first batch's error), `offsets(timeout)` -> (partition, offset) per input row."""

    def __init__(self, sent: ArrowDelivery, wait: Callable[[float | None], None]) -> None:
        self._sent = sent
        self._wait = wait

    @property
    def delivery(self) -> ArrowDelivery:
        return self._sent

    def is_done(self) -> bool:
        return self._sent.done

    def succeeded(self) -> bool:
        return self._sent.done and self._sent.error is None

    def get(self, timeout: float | None = None) -> list[BatchMetadata]:
        if not self._sent.done and self._sent.error is None:
            self._wait(timeout)
        return self._sent.metadata()

    def offsets(self, timeout: float | None = None) -> Any:
        self.get(timeout)
        return self._sent.offsets()


class AsyncProducer:
    """A producer on asyncio: `await p.send(topic, value, key=...)` returns a `Delivery` once queued;
    `await p.wait(delivery)` / `await p.flush()` wait for the answers."""

    def __init__(self, **configs: Any) -> None:
        self.config = c = producer_config(configs)
        self._network = NetworkClient(
            c["bootstrap_servers"], client_id=c["client_id"], request_timeout_ms=c["request_timeout_ms"],
            reconnect_backoff_ms=c["reconnect_backoff_ms"], reconnect_backoff_max_ms=c["reconnect_backoff_max_ms"],
            security=c["security"])
        self._machine = Producer(
            bootstrap=sorted(self._network.bootstrap, reverse=True), acks=c["acks"], linger_ms=c["linger_ms"],
            batch_size=c["batch_size"], compression_type=c["compression_type"],
            retry_backoff_ms=c["retry_backoff_ms"], request_timeout_ms=c["request_timeout_ms"],
            delivery_timeout_ms=c["delivery_timeout_ms"], metadata_max_age_ms=c["metadata_max_age_ms"],
            idempotent=c["enable_idempotence"], least_loaded=self._network.least_loaded_node,
            max_in_flight=c["max_in_flight_requests_per_connection"], transactional_id=c["transactional_id"],
            transaction_timeout_ms=c["transaction_timeout_ms"])
        self._driver: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._closed = False
        self._failure: BaseException | None = None
        self._epoch = time.monotonic()
        self.last_error: EpochGuardError | None = None
        # Records the blocking face queues from its callers' threads (`submit`), taken in on the loop: a
        # send costs no thread hop (as kafka-python's accumulator, which its sender thread drains).
        self._intake: collections.deque[tuple[Any, ...]] = collections.deque()
        self._intake_signalled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        # buffer_memory (Java's BufferPool, counted per record rather than per pooled batch): the bytes of
        # the records sent and not yet answered. A send that would pass it waits up to max_block_ms.
        # Bytes reserved (by sends, on any thread, under the lock) and released (by each record's answer,
        # on the loop thread only: its one writer, so no lock). A lock per release made the loop and a
        # sending thread hand the GIL and the lock back and forth once a record. The Condition, on the
        # same lock, only for a send waiting for room, notified only while one waits.
        self._buffer_lock = threading.Lock()
        self._buffer = threading.Condition(self._buffer_lock)
        self._buffer_waiters = 0
        self._reserved = 0
        self._released = 0

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _now_ms(self) -> int:
        return int((time.monotonic() - self._epoch) * 1000)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("this producer is closed")
        if self._failure is not None:
            raise ClientClosedError(f"the producer's driver failed: {self._failure!r}") from self._failure

    async def start(self) -> None:
        self._check_open()
        if self._driver is None:
            self._loop = asyncio.get_running_loop()
            self._driver = self._loop.create_task(self._drive(), name="epochguard-producer")

    async def _drive(self) -> None:
        try:
            while not self._closed:
                self._wake.clear()
                self._take_intake()
                txn = self._machine.transactions
                state = None if txn is None else txn.state
                if txn is not None:  # KIP-890: whether the cluster offers transaction version 2
                    txn.update_finalized_features(self._network.finalized_features,
                                                  self._network.finalized_features_epoch)
                sent = self._machine.poll_requests(self._now_ms())
                for node, request in sent:
                    task = asyncio.get_running_loop().create_task(self._exchange(node, request))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                if sent or (txn is not None and txn.state is not state):
                    # acks=0 batches complete on send; a transaction no partition joined ends with no
                    # request (Java's nextRequest completes it): its commit_transaction waits on this
                    self._changed.set()
                deadline = self._machine.next_deadline_ms()
                delay = _IDLE_S if deadline is None else (deadline - self._now_ms()) / 1000
                delay = min(max(delay, 0.0 if sent else _MIN_ROUND_S), _IDLE_S)
                try:
                    await asyncio.wait_for(self._wake.wait(), delay)
                except TimeoutError:
                    pass
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._failure = exc
            self._changed.set()
            raise

    async def _exchange(self, node: int, request: Any) -> None:
        try:
            response = await self._network.send(node, request)
        except (EpochGuardError, ValueError, TypeError) as exc:
            self.last_error = exc if isinstance(exc, EpochGuardError) else KafkaConnectionError(repr(exc))
            self._machine.on_request_failed(node, request, self._now_ms())
            if isinstance(exc, AuthenticationError):
                # not retried until it expires: what waits fails now with it (Java's Sender aborts the
                # undrained batches on a fatal error; its send() raises the metadata's auth failure)
                self._machine.abort_unsent(exc)
        else:
            if response is not None:
                self._machine.on_response(node, request, response, self._now_ms())
            if isinstance(response, MetadataResponse):
                self._network.update_brokers({b.node_id: (b.host, b.port) for b in response.brokers})
            elif isinstance(response, FindCoordinatorResponse):  # a transaction's or group's coordinator
                self._network.update_brokers({c.node_id: (c.host, c.port) for c in response.coordinators
                                              if c.node_id >= 0 and c.host})
        finally:
            self._wake.set()
            self._changed.set()

    async def send(self, topic: str, value: Any = None, key: Any = None, *, partition: int | None = None,
                   headers: Iterable[tuple[str, bytes | None]] = (),
                   timestamp_ms: int | None = None) -> Delivery[RecordMetadata]:
        """Queue one record; its `Delivery` resolves when the broker answers (or the record fails)."""
        self._check_open()
        await self.start()
        self._take_intake()  # what the blocking face queued before goes first
        key_bytes, value_bytes, stamp = self._serialized(key, value, timestamp_ms)
        headers = tuple(headers)
        size = self._record_size(key_bytes, value_bytes, headers)
        if not self._try_reserve(size):
            limit, waited = self.config["buffer_memory"], self.config["max_block_ms"]
            self._wake.set()
            try:
                await self.wait_for(lambda: self._try_reserve(size), waited / 1000)
            except KafkaTimeoutError:
                raise BufferExhaustedError(f"no room for a {size}-byte record in buffer_memory ({limit} bytes) "
                                           f"within max_block_ms ({waited} ms)") from None
        delivery: Delivery[RecordMetadata] = Delivery()
        delivery.on_done(functools.partial(self._release, size))
        try:
            self._machine.send(topic, value_bytes, key_bytes, partition=partition, headers=headers,
                               timestamp_ms=stamp, now_ms=self._now_ms(), delivery=delivery)
        except BaseException:
            self._release(size, delivery)
            raise
        self._wake.set()
        return delivery

    def _record_size(self, key: Any, value: Any, headers: tuple[tuple[str, bytes | None], ...]) -> int:
        """What a record holds of buffer_memory (Java's upper bound of its size in a batch, roughly:
        its bytes and a record's overhead); one larger than buffer_memory is refused outright."""
        size = _RECORD_OVERHEAD + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
        for name, data in headers:
            size += len(name) + (len(data) if data is not None else 0) + 2
        if size > self.config["buffer_memory"]:
            raise RecordTooLargeError(f"the record is {size} bytes serialized, more than buffer_memory "
                                      f"({self.config['buffer_memory']} bytes)")
        return size

    def _try_reserve(self, size: int) -> bool:
        with self._buffer_lock:
            if self._buffered + size > self.config["buffer_memory"]:
                return False
            self._reserved += size
            return True

    def _reserve_blocking(self, size: int) -> None:
        """On the caller's thread (the blocking `send`): wait for room up to max_block_ms."""
        limit, waited = self.config["buffer_memory"], self.config["max_block_ms"]
        with self._buffer_lock:
            if self._buffered + size <= limit:
                self._reserved += size
                return
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._wake.set)  # the queued records go out: room comes back
            self._buffer_waiters += 1  # before wait_for checks the room again: a release after it notifies
            try:
                room = self._buffer.wait_for(lambda: self._buffered + size <= limit or self._closed, waited / 1000)
            finally:
                self._buffer_waiters -= 1
            if not room:
                raise BufferExhaustedError(f"no room for a {size}-byte record in buffer_memory ({limit} bytes) "
                                           f"within max_block_ms ({waited} ms)")
            self._check_open()
            self._reserved += size

    @property
    def _buffered(self) -> int:
        """Bytes of records sent and not yet answered."""
        return self._reserved - self._released

    def _release(self, size: int, _delivery: Any = None) -> None:
        """On the loop thread only (deliveries resolve there)."""
        self._released += size
        if self._buffer_waiters:
            with self._buffer_lock:
                self._buffer.notify_all()

    def _serialized(self, key: Any, value: Any, timestamp_ms: int | None) -> tuple[Any, Any, int]:
        ks, vs = self.config["key_serializer"], self.config["value_serializer"]
        key_bytes = ks(key) if ks is not None and key is not None else key
        value_bytes = vs(value) if vs is not None and value is not None else value
        for what, got in (("key", key_bytes), ("value", value_bytes)):
            if got is not None and not isinstance(got, bytes | bytearray | memoryview):
                raise TypeError(f"the {what} must be bytes (or set a {what}_serializer), not {type(got).__name__}")
        return key_bytes, value_bytes, timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)

    def submit(self, topic: str, value: Any, key: Any, partition: int | None,
               headers: tuple[tuple[str, bytes | None], ...], timestamp_ms: int | None) -> Delivery[RecordMetadata]:
        """`send` from another thread (the blocking face), once `start()` has run: the record is queued
        for the loop, which is woken only if it has not been since it last took the queue in."""
        self._check_open()
        if self._machine.transactions is not None:
            self._machine.transactions.check_send()  # outside a transaction: raised here, on the caller's thread
        key_bytes, value_bytes, stamp = self._serialized(key, value, timestamp_ms)
        if key_bytes is None and value_bytes is None:
            raise ValueError("a record needs a key or a value")
        size = self._record_size(key_bytes, value_bytes, headers)
        self._reserve_blocking(size)
        delivery: Delivery[RecordMetadata] = Delivery()
        delivery.on_done(functools.partial(self._release, size))  # before the loop can see it: no race
        self._intake.append((topic, value_bytes, key_bytes, partition, headers, stamp, delivery))
        if not self._intake_signalled:
            assert self._loop is not None, "submit() before start()"
            self._intake_signalled = True
            self._loop.call_soon_threadsafe(self._wake.set)
        return delivery

    def _take_intake(self) -> None:
        """Move the records `submit` queued into the state machine (on the loop)."""
        self._intake_signalled = False  # before taking: a record queued from now on signals again
        if not self._intake:
            return
        now = self._now_ms()
        while self._intake:
            topic, value, key, partition, headers, stamp, delivery = self._intake.popleft()
            try:
                self._machine.send(topic, value, key, partition=partition, headers=headers, timestamp_ms=stamp,
                                   now_ms=now, delivery=delivery)
            except EpochGuardError as exc:  # the transaction became abortable or was fenced meanwhile
                delivery._resolve(None, exc)
            except (ValueError, TypeError) as exc:
                delivery._resolve(None, EpochGuardError(f"record refused: {exc}"))

    async def send_arrow(self, topic: str, data: Any) -> ArrowDelivery:
        """Queue the rows of an Arrow table (see the module docstring); the `ArrowDelivery` resolves
        batch by batch. Waits for the topic's metadata first, up to `max_block_ms`."""
        self._check_open()
        await self.start()
        if not hasattr(data, "__arrow_c_stream__"):
            raise TypeError(f"send_arrow needs a pyarrow Table or RecordBatch (an object with __arrow_c_stream__), "
                            f"not {type(data).__name__}")
        if self._machine.partitions_for(topic) == 0:
            self._wake.set()
            try:
                await self.wait_for(lambda: self._machine.partitions_for(topic) > 0,
                                    self.config["max_block_ms"] / 1000)
            except KafkaTimeoutError:
                raise KafkaTimeoutError(f"no metadata for topic {topic!r} within max_block_ms "
                                        f"({self.config['max_block_ms']} ms)") from None
        encode = functools.partial(
            _core.encode_arrow_batches, data, partitions=self._machine.partitions_for(topic),
            sticky_partition=self._machine.sticky_partition(topic), default_timestamp=int(time.time() * 1000),
            batch_size=self.config["batch_size"], compression=self.config["compression_type"])
        # Off the loop (the GIL is released while Rust encodes): sends and answers go on meanwhile.
        encoded = await asyncio.get_running_loop().run_in_executor(None, encode)
        self._check_open()
        self._take_intake()  # records the blocking face sent before this call go ahead of it
        now = self._now_ms()
        sent = ArrowDelivery([self._machine.send_encoded(topic, partition, raw, rows, now)
                              for partition, raw, rows in encoded])
        self._wake.set()
        return sent

    # --- transactions (kafka-python's names; Java's TransactionManager in client.transactions) ----------
    def _transactions(self) -> TransactionManager:
        if self._machine.transactions is None:
            raise IllegalStateError("transactions need a transactional_id (set it when creating the producer)")
        return self._machine.transactions

    async def _txn_wait(self, result: TransactionalResult, what: str) -> None:
        self._wake.set()
        try:
            await self.wait_for(lambda: result.done, self.config["max_block_ms"] / 1000)
        except KafkaTimeoutError:
            raise KafkaTimeoutError(f"{what} not done within max_block_ms ({self.config['max_block_ms']} ms)") from None
        if result.error is not None:
            raise result.error

    async def init_transactions(self) -> None:
        """Find the transaction coordinator and get the producer id and epoch for `transactional_id`,
        fencing any older producer with the same id (its open transaction is aborted)."""
        await self.start()
        await self._txn_wait(self._transactions().init_transactions(), "init_transactions")

    def begin_transaction(self) -> None:
        self._transactions().begin_transaction()

    async def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, Any], consumer_group_id: Any) -> None:
        """Commit a consumer group's `offsets` (TopicPartition -> the next offset, an int or anything with
        `.offset` and optional `.metadata`) as part of the transaction. `consumer_group_id`: the group id,
        or a consumer's group metadata (`group_id`, `generation_id`, `member_id`, `group_instance_id`)."""
        parts: dict[TopicPartition, int | tuple[int, str]] = {
            tp: v if isinstance(v, int) else (v.offset, getattr(v, "metadata", "") or "") for tp, v in offsets.items()}
        if isinstance(consumer_group_id, str):
            result = self._transactions().send_offsets(parts, consumer_group_id)
        else:
            g = consumer_group_id
            result = self._transactions().send_offsets(
                parts, g.group_id, generation_id=getattr(g, "generation_id", -1), member_id=getattr(g, "member_id", ""),
                group_instance_id=getattr(g, "group_instance_id", None))
        await self._txn_wait(result, "send_offsets_to_transaction")

    async def commit_transaction(self) -> None:
        """Send what is queued, wait for every answer, then commit (EndTxn); raises the error that left
        the transaction abortable (then `abort_transaction`), or a fatal one."""
        self._take_intake()
        await self._txn_wait(self._transactions().begin_commit(), "commit_transaction")

    async def abort_transaction(self) -> None:
        """Drop what was not sent (its records fail with TransactionAbortableError), wait for what is in
        flight, then abort (EndTxn): read_committed consumers never see the transaction's records."""
        self._take_intake()
        await self._txn_wait(self._transactions().begin_abort(), "abort_transaction")

    async def partitions_for(self, topic: str) -> set[int]:
        """The topic's partition numbers (waits for its metadata up to max_block_ms, as kafka-python's)."""
        await self.start()
        if self._machine.partitions_for(topic) == 0:
            self._wake.set()
            try:
                await self.wait_for(lambda: self._machine.partitions_for(topic) > 0, self.config["max_block_ms"] / 1000)
            except KafkaTimeoutError:
                raise KafkaTimeoutError(f"no metadata for topic {topic!r} within max_block_ms "
                                        f"({self.config['max_block_ms']} ms)") from None
        return set(range(self._machine.partitions_for(topic)))

    def metrics(self) -> dict[str, dict[str, float]]:
        """A few of Java's producer metrics, kafka-python's shape ({group: {name: value}})."""
        pending = self._machine.pending()
        txn = self._machine.transactions
        return {"producer-metrics": {
            "buffer-total-bytes": float(self.config["buffer_memory"]),
            "buffer-available-bytes": float(self.config["buffer_memory"] - self._buffered),
            "records-pending": float(pending + len(self._intake)),
            "requests-in-flight": float(len(self._machine._in_flight)),
            "producer-id": float(self._machine.producer_id),
            "producer-epoch": float(self._machine.producer_epoch),
            **({"transaction-state-ready": float(txn.state.value == "ready"),
                # KIP-890: the transaction version the current (or last) transaction uses, 1 or 2
                "transaction-version": 2.0 if txn.transaction_v2 else 1.0} if txn is not None else {}),
        }}

    async def wait_for(self, done: Callable[[], bool], timeout_s: float | None) -> None:
        loop = asyncio.get_running_loop()
        end = None if timeout_s is None else loop.time() + timeout_s
        while not done():
            self._check_open()
            self._changed.clear()
            if done():
                return
            remaining = None if end is None else end - loop.time()
            if remaining is not None and remaining <= 0:
                raise KafkaTimeoutError(f"not done within {timeout_s} s")
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything now and wait until every record is answered."""
        self._take_intake()
        self._machine.flush()
        self._wake.set()
        await self.wait_for(lambda: self._machine.pending() == 0, timeout)

    async def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        if self._driver is not None:
            try:
                await self.flush(timeout)
            except EpochGuardError as exc:
                self.last_error = exc
        self._closed = True
        with self._buffer:
            self._buffer.notify_all()  # a send waiting for room raises ClientClosedError
        for task in [self._driver, *self._tasks]:
            if task is not None:
                task.cancel()
        for task in [self._driver, *self._tasks]:
            if task is not None:
                try:
                    await task
                except BaseException:
                    pass
        await self._network.close()


class KafkaProducer(BlockingClient[AsyncProducer]):
    """The blocking producer (kafka-python's `KafkaProducer` API) on a private event-loop thread."""

    _what = "producer"

    def __init__(self, **configs: Any) -> None:
        producer_config(configs)  # refuse bad settings here, before a thread exists
        super().__init__(lambda: AsyncProducer(**configs))
        self.config = self._async.config
        self._call(self._async.start)  # the driver runs from here on: `send` queues without a thread hop

    def send(self, topic: str, value: Any = None, key: Any = None, headers: Iterable[tuple[str, bytes | None]] = (),
             partition: int | None = None, timestamp_ms: int | None = None) -> FutureRecordMetadata:
        if self._loop.loop.is_closed():
            raise ClientClosedError("this producer is closed")
        delivery = self._async.submit(topic, value, key, partition, tuple(headers), timestamp_ms)
        return FutureRecordMetadata(delivery, lambda timeout: self._call(
            lambda: self._async.wait_for(lambda: delivery.done, timeout)))

    def send_arrow(self, topic: str, data: Any) -> FutureArrowMetadata:
        """Produce the rows of a pyarrow Table / RecordBatch (see the module docstring): a future of
        every batch's `BatchMetadata` (`get`) and of each row's partition and offset (`offsets`)."""
        sent = self._call(lambda: self._async.send_arrow(topic, data))
        return FutureArrowMetadata(sent, lambda timeout: self._call(
            lambda: self._async.wait_for(lambda: sent.done or sent.error is not None, timeout)))

    def flush(self, timeout: float | None = None) -> None:
        self._call(lambda: self._async.flush(timeout))

    def init_transactions(self) -> None:
        self._call(self._async.init_transactions)

    def begin_transaction(self) -> None:
        self._call(self._begin)

    async def _begin(self) -> None:
        self._async.begin_transaction()  # on the loop thread: the state machine is the loop's

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, Any], consumer_group_id: Any) -> None:
        self._call(lambda: self._async.send_offsets_to_transaction(offsets, consumer_group_id))

    def commit_transaction(self) -> None:
        self._call(self._async.commit_transaction)

    def abort_transaction(self) -> None:
        self._call(self._async.abort_transaction)

    def partitions_for(self, topic: str) -> set[int]:
        return self._call(lambda: self._async.partitions_for(topic))

    def metrics(self, raw: bool = False) -> dict[str, dict[str, float]]:
        return self._async.metrics()

    def close(self, timeout: float | None = None) -> None:
        self._close(lambda: self._async.close(timeout))

"""`AsyncProducer` and `KafkaProducer`: the sans-IO `client.producer.Producer` on real sockets.

Mirrors the application face of Kafka's `KafkaProducer` as kafka-python 3 spells it (`send` returning a
future, `flush`, `close`, its setting names): partitioning, batching, retries and what an answer means
are the state machine's; this module moves its requests to brokers and their answers back, and tells it
the time. `enable_idempotence` as Java's idempotent producer (the state machine's). Not there yet:
transactions, `send_arrow`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from epochguard.errors import ClientClosedError, EpochGuardError, KafkaConnectionError, KafkaTimeoutError
from epochguard.protocol.messages import MetadataResponse

from .blocking import BlockingClient
from .network import NetworkClient
from .producer import Delivery, Producer, RecordMetadata

__all__ = ["AsyncProducer", "KafkaProducer", "PRODUCER_DEFAULTS", "FutureRecordMetadata"]

_IDLE_S = 1.0
_MIN_ROUND_S = 0.002

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
    "enable_idempotence": False,
    "security_protocol": "PLAINTEXT",
}


def producer_config(configs: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(configs) - set(PRODUCER_DEFAULTS))
    if unknown:
        raise TypeError(f"unrecognised (or not yet supported) producer settings: {', '.join(unknown)}")
    config = {**PRODUCER_DEFAULTS, **configs}
    acks = config["acks"]
    config["acks"] = -1 if acks in ("all", -1) else acks
    if config["acks"] not in (0, 1, -1):
        raise ValueError(f"acks must be 0, 1 or 'all': {acks!r}")
    if config["enable_idempotence"] and config["acks"] != -1:
        raise ValueError(f"enable_idempotence needs acks='all' (got {acks!r}), as Java's ProducerConfig requires")
    if config["security_protocol"] != "PLAINTEXT":
        raise ValueError(f"security_protocol {config['security_protocol']!r} is not supported: only PLAINTEXT yet")
    config["compression_type"] = config["compression_type"] or "none"
    return config


class FutureRecordMetadata:
    """kafka-python's future: `get(timeout)`, `add_callback`, `add_errback`, `succeeded()`."""

    def __init__(self, delivery: Delivery, wait: Callable[[float | None], None]) -> None:
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
    def delivery(self) -> Delivery:
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


class AsyncProducer:
    """A producer on asyncio: `await p.send(topic, value, key=...)` returns a `Delivery` once queued;
    `await p.wait(delivery)` / `await p.flush()` wait for the answers."""

    def __init__(self, **configs: Any) -> None:
        self.config = c = producer_config(configs)
        self._network = NetworkClient(
            c["bootstrap_servers"], client_id=c["client_id"], request_timeout_ms=c["request_timeout_ms"],
            reconnect_backoff_ms=c["reconnect_backoff_ms"], reconnect_backoff_max_ms=c["reconnect_backoff_max_ms"])
        self._machine = Producer(
            bootstrap=sorted(self._network.bootstrap, reverse=True), acks=c["acks"], linger_ms=c["linger_ms"],
            batch_size=c["batch_size"], compression_type=c["compression_type"],
            retry_backoff_ms=c["retry_backoff_ms"], request_timeout_ms=c["request_timeout_ms"],
            delivery_timeout_ms=c["delivery_timeout_ms"], metadata_max_age_ms=c["metadata_max_age_ms"],
            idempotent=c["enable_idempotence"], least_loaded=self._network.least_loaded_node)
        self._driver: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._closed = False
        self._failure: BaseException | None = None
        self._epoch = time.monotonic()
        self.last_error: EpochGuardError | None = None

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
            self._driver = asyncio.get_running_loop().create_task(self._drive(), name="epochguard-producer")

    async def _drive(self) -> None:
        try:
            while not self._closed:
                self._wake.clear()
                sent = self._machine.poll_requests(self._now_ms())
                for node, request in sent:
                    task = asyncio.get_running_loop().create_task(self._exchange(node, request))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                if sent:
                    self._changed.set()  # acks=0 batches complete on send
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
        else:
            if response is not None:
                self._machine.on_response(node, request, response, self._now_ms())
            if isinstance(response, MetadataResponse):
                self._network.update_brokers({b.node_id: (b.host, b.port) for b in response.brokers})
        finally:
            self._wake.set()
            self._changed.set()

    async def send(self, topic: str, value: Any = None, key: Any = None, *, partition: int | None = None,
                   headers: Iterable[tuple[str, bytes | None]] = (), timestamp_ms: int | None = None) -> Delivery:
        """Queue one record; its `Delivery` resolves when the broker answers (or the record fails)."""
        self._check_open()
        await self.start()
        ks, vs = self.config["key_serializer"], self.config["value_serializer"]
        key_bytes = ks(key) if ks is not None and key is not None else key
        value_bytes = vs(value) if vs is not None and value is not None else value
        stamp = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        delivery = self._machine.send(topic, value_bytes, key_bytes, partition=partition, headers=headers,
                                      timestamp_ms=stamp, now_ms=self._now_ms())
        self._wake.set()
        return delivery

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

    def send(self, topic: str, value: Any = None, key: Any = None, headers: Iterable[tuple[str, bytes | None]] = (),
             partition: int | None = None, timestamp_ms: int | None = None) -> FutureRecordMetadata:
        hs = list(headers)
        delivery = self._call(lambda: self._async.send(topic, value, key, partition=partition, headers=hs,
                                                       timestamp_ms=timestamp_ms))
        return FutureRecordMetadata(delivery, lambda timeout: self._call(
            lambda: self._async.wait_for(lambda: delivery.done, timeout)))

    def flush(self, timeout: float | None = None) -> None:
        self._call(lambda: self._async.flush(timeout))

    def close(self, timeout: float | None = None) -> None:
        self._close(lambda: self._async.close(timeout))

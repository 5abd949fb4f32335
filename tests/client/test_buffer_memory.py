"""The producer's `buffer_memory` bound (Java's `buffer.memory` with `max.block.ms`): records sent and not
yet answered hold buffer memory; a `send` that finds no room waits up to `max_block_ms`, then raises
`BufferExhaustedError` (a `KafkaTimeoutError`, as Java's `BufferExhaustedException` is a
`TimeoutException`); room comes back as records are answered; a record larger than the whole buffer is
refused at once (`RecordTooLargeError`)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from epochguard.client import AsyncProducer, KafkaProducer
from epochguard.errors import BufferExhaustedError, ClientClosedError, KafkaTimeoutError, RecordTooLargeError

VALUE = bytes(100)
RECORD = 22 + len(VALUE)  # what one keyless 100-byte record holds of the buffer


def _nobody_listens() -> str:
    """An address that refuses connections: nothing sent there is ever answered."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _producer(**kw: object) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=_nobody_listens(), reconnect_backoff_ms=20, **kw)


def test_a_send_past_buffer_memory_waits_max_block_ms_then_raises() -> None:
    producer = _producer(buffer_memory=5 * RECORD, max_block_ms=300)
    try:
        futures = [producer.send("t", VALUE) for _ in range(5)]  # exactly full: none waits
        start = time.monotonic()
        with pytest.raises(BufferExhaustedError, match=r"buffer_memory \(610 bytes\) within max_block_ms \(300 ms\)"):
            producer.send("t", VALUE)
        assert 0.25 <= time.monotonic() - start < 5
        assert isinstance(BufferExhaustedError("x"), KafkaTimeoutError)
        assert not any(f.is_done() for f in futures)
    finally:
        producer.close(timeout=0)


def test_a_record_larger_than_the_buffer_is_refused_at_once() -> None:
    producer = _producer(buffer_memory=100, max_block_ms=60_000)
    try:
        start = time.monotonic()
        with pytest.raises(RecordTooLargeError, match="more than buffer_memory"):
            producer.send("t", VALUE)
        assert time.monotonic() - start < 1
    finally:
        producer.close(timeout=0)


def test_room_comes_back_when_records_are_answered(served) -> None:
    """Against `serve`: far more records than the buffer holds go through, each send waiting for room."""
    producer = KafkaProducer(bootstrap_servers=served.bootstrap, acks="all", linger_ms=0,
                             buffer_memory=20 * RECORD, max_block_ms=30_000)
    try:
        futures = [producer.send("input", VALUE, partition=0) for _ in range(200)]
        producer.flush(30)
        assert all(f.get(0).offset >= 0 for f in futures)
        assert producer._async._buffered == 0  # every answered record gave its room back
    finally:
        producer.close()


def test_a_send_waiting_for_room_wakes_when_an_answer_frees_it(served) -> None:
    """The release on the loop thread wakes the waiting send (not max_block_ms's end): with one record's
    room and a minute to wait, the second send goes through as soon as the first is answered."""
    producer = KafkaProducer(bootstrap_servers=served.bootstrap, acks="all", linger_ms=0,
                             buffer_memory=RECORD, max_block_ms=60_000)
    try:
        producer.send("input", VALUE, partition=0).get(30)  # connections and metadata, then room again
        began = time.monotonic()
        first = producer.send("input", VALUE, partition=0)
        second = producer.send("input", VALUE, partition=0)  # waits for the first's answer
        assert second.get(30).offset == first.get(0).offset + 1
        assert time.monotonic() - began < 20, "the waiting send slept on to max_block_ms"
    finally:
        producer.close()


def test_a_send_waiting_for_room_is_released_by_close() -> None:
    producer = _producer(buffer_memory=RECORD, max_block_ms=60_000)
    producer.send("t", VALUE)
    raised: list[BaseException] = []

    def blocked() -> None:
        try:
            producer.send("t", VALUE)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=blocked)
    thread.start()
    time.sleep(0.3)
    producer.close(timeout=0)
    thread.join(10)
    assert not thread.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], ClientClosedError)


def test_the_asyncio_send_waits_and_raises_too() -> None:
    async def run() -> None:
        async with AsyncProducer(bootstrap_servers=_nobody_listens(), buffer_memory=2 * RECORD,
                                 max_block_ms=200) as producer:
            await producer.send("t", VALUE)
            await producer.send("t", VALUE)
            with pytest.raises(BufferExhaustedError):
                await producer.send("t", VALUE)
            await producer.close(timeout=0)

    asyncio.run(run())


@pytest.mark.parametrize("bad", [{"buffer_memory": 0}, {"buffer_memory": "32m"}, {"max_block_ms": -1}])
def test_bad_settings_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        KafkaProducer(bootstrap_servers="127.0.0.1:1", **bad)

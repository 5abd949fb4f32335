"""The blocking face of the asyncio clients: a private event loop on a daemon thread, and the shape
every blocking client shares (start its asyncio twin there, run each call there and wait, close).

kafka-python's `KafkaConsumer` / `KafkaProducer` and Java's run their network I/O on threads of their
own too; here the thread runs the very asyncio client the `Async*` classes are, so both faces share
one implementation.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from epochguard.errors import ClientClosedError

__all__ = ["LoopThread", "BlockingClient"]

T = TypeVar("T")
A = TypeVar("A")


class LoopThread:
    """A private event loop on a daemon thread; the blocking client's calls run there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="epochguard-client", daemon=True)
        self.thread.start()

    def run(self, make: Callable[[], Awaitable[T]]) -> T:
        async def call() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class BlockingClient(Generic[A]):
    """An asyncio client (`A`, built by `factory` on the loop thread) behind blocking calls."""

    _what = "client"

    def __init__(self, factory: Callable[[], A]) -> None:
        self._loop = LoopThread()
        try:
            self._async: A = self._loop.run(lambda: _made(factory))
        except BaseException:
            self._loop.stop()
            raise

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, make: Callable[[], Awaitable[T]]) -> T:
        if self._loop.loop.is_closed():
            raise ClientClosedError(f"this {self._what} is closed")
        return self._loop.run(make)

    def _close(self, make: Callable[[], Awaitable[None]]) -> None:
        if self._loop.loop.is_closed():
            return
        try:
            self._loop.run(make)
        finally:
            self._loop.stop()

    def close(self) -> None:
        raise NotImplementedError


async def _made(factory: Callable[[], A]) -> A:
    return factory()

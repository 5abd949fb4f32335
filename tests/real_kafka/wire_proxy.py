"""A Kafka-wire TCP proxy in front of real brokers that can hold clients' Fetch requests: the test's handle on
"the election falls between a task's planning and its read" on a real cluster (serve's `hold_fetches`).

The brokers advertise the proxy's ports on an extra client listener (`KafkaCluster(advertised_ports=...)`),
so a client bootstrapping there sends every request through the proxy, while the brokers' own traffic
(replication, the controller) and the tests' admin and producer stay on the direct PLAINTEXT listener.
Per client connection the proxy opens one to the broker and copies bytes both ways; of the client's side it
reads only the frames' size prefixes and, of a Fetch (api key 1), the request (kafka-python's generated
`FetchRequest`, every version Kafka 4.4 speaks), to see its fetch offsets. While holding, a Fetch asking
for an offset at or past `from_offset` (or naming no partition: the continuation of an incremental fetch
session, which the broker would answer from the session's offsets) is not sent on, nor is anything later on
its connection (Kafka answers a connection's requests in order), until `release_fetches`. A held request
whose connection closes meanwhile (a broker stopped, a client timed out) is dropped, as the broker would
drop it.

Bounded: a frame's size prefix above `max_frame_bytes` (or below the 8 bytes of a request header) closes
the connection; at most `max_held` frames wait per connection; a hold ends by itself after `max_hold_s`;
connecting to a broker that is down closes the client's connection after at most `connect_timeout_s`.
`close()` releases nothing: it closes every connection and the listening sockets.

It can also spoil brokers' answers, as a failing broker would (`sabotage`): the answers to the next requests
of one API key come back as garbage, late, or not at all (the connection closed), to show that a client
survives them. Answers are read frame by frame (their size prefix, then the frame) to find them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

FETCH = 1
KAFKA_MAX_REQUEST_BYTES = 100 * 1024 * 1024  # the broker's socket.request.max.bytes default


@dataclass(eq=False)  # a connection is itself, kept in a set
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    target: tuple[str, int] = ("", 0)
    held: list[bytes] = field(default_factory=list)  # frames (with their size prefix) not sent on yet
    spoiled: dict[int, str] = field(default_factory=dict)  # correlation id -> how its answer is spoiled


@dataclass(frozen=True)
class HeldFetch:
    client_id: str
    offsets: tuple[int, ...]  # the fetch offsets it named (none: an incremental session's continuation)


def fetch_offsets(frame: bytes) -> tuple[str, tuple[int, ...]]:
    """(client id, fetch offsets) of a Fetch request frame (without its size prefix); ValueError if it is not
    one kafka-python's `FetchRequest` can decode."""
    from kafka.protocol.consumer.fetch import FetchRequest

    if len(frame) < 8 or int.from_bytes(frame[:2], "big", signed=True) != FETCH:
        raise ValueError("not a Fetch request")
    version = int.from_bytes(frame[2:4], "big", signed=True)
    try:
        request = FetchRequest.decode(frame, version=version, header=True)
    except Exception as exc:  # a truncated or malformed body, or a version kafka-python does not know
        raise ValueError(f"undecodable Fetch v{version}: {exc!r}") from exc
    client_id = request._header.client_id or ""
    return client_id, tuple(p.fetch_offset for t in request.topics for p in t.partitions)


class KafkaWireProxy:
    """`KafkaWireProxy(n)` binds n listening ports on 127.0.0.1 (`ports`, known before the brokers start, so
    they can advertise them); `start(targets)` forwards the i-th port to `targets[i]`. Runs its own event
    loop on a daemon thread; the hold methods may be called from any thread."""

    def __init__(self, n: int, *, max_frame_bytes: int = KAFKA_MAX_REQUEST_BYTES, max_held: int = 1000,
                 max_hold_s: float = 300.0, connect_timeout_s: float = 5.0) -> None:
        self.max_frame_bytes, self.max_held = max_frame_bytes, max_held
        self.max_hold_s, self.connect_timeout_s = max_hold_s, connect_timeout_s
        self._socks = []
        for _ in range(n):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            s.listen(64)
            s.setblocking(False)
            self._socks.append(s)
        self.ports = [s.getsockname()[1] for s in self._socks]
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="kafka-wire-proxy")
        self._servers: list[asyncio.Server] = []
        self._conns: set[_Conn] = set()
        self._hold: tuple[int, str] | None = None  # (from offset, a part of the client id)
        self._expiry: asyncio.TimerHandle | None = None
        self.held: list[HeldFetch] = []  # the Fetches held since the last hold_fetches, in arrival order
        self.errors: list[str] = []  # frames it could not read (their connection was closed, or sent on)
        self.connections = 0  # client connections accepted so far
        self._sabotage: dict[int, tuple[str, int]] = {}  # api key -> (how, requests left)
        self._late_s = 0.0
        self._down: set[tuple[str, int]] = set()  # targets whose connections are refused (`down`)
        self.spoiled: list[tuple[int, str]] = []  # (api key, how) of every answer spoiled so far

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    @property
    def held_at(self) -> list[int]:
        """The fetch offsets of the held Fetches that named partitions (`GuardCluster.held_at`'s face)."""
        return [o for h in list(self.held) for o in h.offsets]

    def _call(self, fn: Any) -> Any:
        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    # --- lifecycle ----------------------------------------------------------------------------------
    def start(self, targets: Sequence[tuple[str, int]]) -> KafkaWireProxy:
        if len(targets) != len(self._socks):
            raise ValueError(f"{len(self._socks)} ports, {len(targets)} targets")
        self.targets = list(targets)
        self._thread.start()

        async def listen() -> None:
            for sock, target in zip(self._socks, targets, strict=True):
                self._servers.append(await asyncio.start_server(partial(self._serve, target=target), sock=sock))

        asyncio.run_coroutine_threadsafe(listen(), self.loop).result(30)
        return self

    def close(self) -> None:
        if not self._thread.is_alive():
            for s in self._socks:
                s.close()
            self.loop.close()
            return

        async def shut() -> None:
            for server in self._servers:
                server.close()
            for conn in list(self._conns):
                self._drop(conn)
            for server in self._servers:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(server.wait_closed(), 5)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shut(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()

    def __enter__(self) -> KafkaWireProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- holding ------------------------------------------------------------------------------------
    def hold_fetches(self, from_offset: int, client_id: str = "") -> None:
        """From now on hold every Fetch (of a client whose id contains `client_id`) asking for an offset
        >= `from_offset`, or naming no partition, and everything behind it on its connection."""
        def install() -> None:
            self.held.clear()
            if self._expiry is not None:
                self._expiry.cancel()
            self._hold = (from_offset, client_id)
            self._expiry = self.loop.call_later(self.max_hold_s, self._expire)

        self._call(install)

    def release_fetches(self) -> int:
        """Stop holding and send on what was held, in order; returns how many frames that was."""
        return int(self._call(self._release))

    def _expire(self) -> None:
        self.errors.append(f"a hold outlived max_hold_s={self.max_hold_s}: released")
        self._release()

    def _release(self) -> int:
        self._hold = None
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        sent = 0
        for conn in list(self._conns):
            frames, conn.held = conn.held, []
            for frame in frames:
                conn.upstream.write(frame)
            sent += len(frames)
        return sent

    def _holds(self, frame: bytes) -> HeldFetch | None:
        if self._hold is None or int.from_bytes(frame[:2], "big", signed=True) != FETCH:
            return None
        from_offset, client_part = self._hold
        try:
            client_id, offsets = fetch_offsets(frame)
        except ValueError as exc:
            self.errors.append(str(exc))
            return None
        if client_part not in client_id or (offsets and max(offsets) < from_offset):
            return None
        return HeldFetch(client_id, offsets)

    # --- failing brokers ----------------------------------------------------------------------------
    def sabotage(self, api_key: int, how: str, count: int = 1, late_s: float = 3.0) -> None:
        """Spoil the answers to the next `count` requests of `api_key` (any client, any broker): `garbage`
        (every byte after the correlation id replaced by 0x7fffffff words: arrays and strings that claim 2^31
        elements, the frame's size kept), `late` (sent `late_s` later, and what follows on its connection
        behind it: a broker answering after the client's time-out) or `drop` (the connection closed instead:
        a broker gone mid-request)."""
        if how not in ("garbage", "late", "drop"):
            raise ValueError(f"sabotage how={how!r}: garbage, late or drop")

        def install() -> None:
            self._sabotage[api_key] = (how, count)
            self._late_s = late_s

        self._call(install)

    def down(self, ports: Sequence[int]) -> None:
        """Until `down([])`, connections through these of the proxy's ports (the i-th forwards to the i-th
        target: broker i + 1 of `start_proxied_cluster`) are closed as soon as they are made, and the open ones
        now: to its clients, those brokers are down."""
        def install() -> None:
            self._down = {self.targets[i] for i in ports}
            for conn in list(self._conns):
                if conn.target in self._down:
                    self._drop(conn)

        self._call(install)

    @property
    def sabotage_pending(self) -> int:
        """Requests still to be spoiled."""
        return sum(n for _, n in list(self._sabotage.values()))

    def _mark(self, frame: bytes, conn: _Conn) -> None:
        key = int.from_bytes(frame[:2], "big", signed=True)
        plan = self._sabotage.get(key)
        if plan is None:
            return
        how, left = plan
        conn.spoiled[int.from_bytes(frame[4:8], "big", signed=True)] = how
        if left <= 1:
            del self._sabotage[key]
        else:
            self._sabotage[key] = (how, left - 1)
        self.spoiled.append((key, how))

    # --- the connections ----------------------------------------------------------------------------
    def _drop(self, conn: _Conn) -> None:
        self._conns.discard(conn)
        conn.held.clear()
        for w in (conn.client, conn.upstream):
            with contextlib.suppress(Exception):
                w.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, *,
                     target: tuple[str, int]) -> None:
        self.connections += 1
        if target in self._down:
            client_w.close()
            return
        try:
            up_r, up_w = await asyncio.wait_for(asyncio.open_connection(*target), self.connect_timeout_s)
        except OSError:  # refused, or TimeoutError (an OSError): the client sees its connection close
            client_w.close()
            return
        conn = _Conn(client_w, up_w, target=target)
        self._conns.add(conn)
        pumps = [asyncio.ensure_future(self._requests(client_r, conn)),
                 asyncio.ensure_future(self._responses(up_r, conn))]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for p in pumps:
                p.cancel()
            self._drop(conn)

    async def _requests(self, reader: asyncio.StreamReader, conn: _Conn) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                prefix = await reader.readexactly(4)
                size = int.from_bytes(prefix, "big", signed=True)
                if not 8 <= size <= self.max_frame_bytes:
                    self.errors.append(f"a request frame of {size} bytes: connection closed")
                    return
                frame = await reader.readexactly(size)
                if conn.held:
                    if len(conn.held) >= self.max_held:
                        self.errors.append(f"more than {self.max_held} requests held on one connection: closed")
                        return
                    conn.held.append(prefix + frame)  # in order behind the held Fetch
                elif (held := self._holds(frame)) is not None:
                    conn.held.append(prefix + frame)
                    self.held.append(held)
                else:
                    if self._sabotage:
                        self._mark(frame, conn)
                    conn.upstream.write(prefix + frame)
                    await conn.upstream.drain()

    async def _responses(self, reader: asyncio.StreamReader, conn: _Conn) -> None:
        writer = conn.client
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                prefix = await reader.readexactly(4)
                frame = await reader.readexactly(int.from_bytes(prefix, "big", signed=True))
                how = conn.spoiled.pop(int.from_bytes(frame[:4], "big", signed=True), None) if conn.spoiled else None
                if how == "drop":
                    return  # the connection is closed (`_serve`), its answer never sent
                if how == "late":
                    await asyncio.sleep(self._late_s)
                elif how == "garbage":
                    frame = frame[:4] + (b"\x7f\xff\xff\xff" * (len(frame) // 4))[: len(frame) - 4]
                writer.write(prefix + frame)
                await writer.drain()


def start_proxied_cluster(base: Path, brokers: int = 3, **kwargs: Any) -> tuple[Any, KafkaWireProxy]:
    """A started `KafkaCluster` whose brokers also listen on a `PROXIED` PLAINTEXT listener advertised at a
    started `KafkaWireProxy`'s ports (its `bootstrap`); close both (the proxy after the cluster)."""
    from epochguard.kafka import KafkaCluster

    proxy = KafkaWireProxy(brokers)
    try:
        cluster = KafkaCluster(base, brokers=brokers, listeners={"PROXIED": "PLAINTEXT"},
                               advertised_ports={"PROXIED": dict(zip(range(1, brokers + 1), proxy.ports, strict=True))},
                               **kwargs)
        proxy.start([("127.0.0.1", cluster.listener_ports["PROXIED"][b]) for b in range(1, brokers + 1)])
        try:
            cluster.start()
        except BaseException:
            cluster.close()
            raise
    except BaseException:
        proxy.close()
        raise
    return cluster, proxy

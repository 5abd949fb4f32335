"""Broker connections on asyncio streams: the bytes-and-time layer under `epochguard.client`.

Mirrors Kafka's `NetworkClient` + `Selector` + `ClusterConnectionStates` (and kafka-python's
`BrokerConnection`): one connection per broker, opened on first use, an ApiVersions handshake on each
new connection before anything else is sent (an UNSUPPORTED_VERSION answer is retried at the newest
version the broker lists), correlation ids, a request version chosen as the newest both the broker
and the codec serve (never above the version the request was built for), `request_timeout_ms` per
request (a request without an answer in time closes its connection, as Kafka does, failing every
request in flight on it), and an exponential reconnect back-off per broker (`reconnect_backoff_ms`
doubling up to `reconnect_backoff_max_ms`, with Kafka's 20% jitter) during which requests to that broker
fail at once instead of waiting (a request held back until the broker returns would be stale: the
state machine that built it retries with a fresh one).

Security (Kafka's `SslTransportLayer` and `SaslClientAuthenticator`, `security.Security`): with SSL or
SASL_SSL the socket is TLS (the `ssl` module, the handshake within the request timeout; a failed one
is `SslAuthenticationError`); with SASL_* the ApiVersions handshake is followed by SaslHandshake v1 and
SaslAuthenticate rounds (v0-v2 as the broker serves them) before anything else is sent. A refusal is a
typed `AuthenticationError` (`SaslAuthenticationError` naming the mechanism and the broker's message,
`UnsupportedSaslMechanismError` listing what the broker offers); the node then backs off as after any
failed connect, and the clients raise it to the application instead of retrying in silence.

Frames go through the Rust codec (`_core.encode_request` / `decode_response`). Answers are read by
a buffered protocol (`_FrameReader`, the part of Kafka's `NetworkReceive` that frames): small ones from
one 64 KiB receive buffer, several a read, and a large one (a Fetch answer) straight into a buffer of
its own size, as much as the socket holds in each read, so a 1 MiB answer costs a few reads and no
copy on the way. A response's size
prefix is checked against `max_response_bytes` before anything of that size is read (a hostile or
corrupt size closes the connection with `FrameTooLargeError`); a broker that closes mid-frame, sends
an answer that does not parse or a correlation id nobody asked for fails the connection with
`KafkaConnectionError`; one that goes silent times out with `KafkaTimeoutError`. Nothing here
decides anything about the protocol beyond the connection: callers get an answer or an exception.

Node ids: brokers by their ids from metadata; bootstrap addresses as -1, -2, ... (as Kafka's
bootstrap `Node`s), until metadata names the brokers. Requests that may go to any broker (Metadata,
FindCoordinator, InitProducerId) go to `least_loaded_node` (Java's `NetworkClient.leastLoadedNode`): a
connected node with the fewest requests in flight, else one connecting, else the node out of its back-off
whose last connect attempt is oldest; with every candidate in its back-off, none (the caller waits).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import random
import ssl
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from epochguard import _core
from epochguard.errors import (
    AuthenticationError,
    CorruptFrameError,
    EpochGuardError,
    Errors,
    FrameTooLargeError,
    IllegalSaslStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    SaslAuthenticationError,
    SslAuthenticationError,
    UnsupportedSaslMechanismError,
    UnsupportedVersionError,
)
from epochguard.protocol.api_versions import ApiKey, ApiVersionsRequest, ApiVersionsResponse, NodeApiVersions
from epochguard.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from .security import Security

__all__ = ["NetworkClient", "BrokerConnection", "parse_bootstrap", "api_key_of", "CODEC_VERSIONS", "SOFTWARE_NAME"]

SOFTWARE_NAME = "epochguard"
# What this client's codec encodes and decodes: (min, max) per API key (the served APIs and SASL).
CODEC_VERSIONS: dict[int, tuple[int, int]] = {k: (lo, hi) for k, lo, hi in _core.CLIENT_API_VERSIONS}
_SASL_MAX_ROUNDS = 4  # SCRAM takes two SaslAuthenticate rounds, PLAIN one: a broker asking more is stuck

_API_KEYS: dict[str, ApiKey] = {
    "ApiVersionsRequest": ApiKey.API_VERSIONS,
    "MetadataRequest": ApiKey.METADATA,
    "FetchRequest": ApiKey.FETCH,
    "ListOffsetsRequest": ApiKey.LIST_OFFSETS,
    "OffsetsForLeaderEpochRequest": ApiKey.OFFSET_FOR_LEADER_EPOCH,
    "OffsetCommitRequest": ApiKey.OFFSET_COMMIT,
    "OffsetFetchRequest": ApiKey.OFFSET_FETCH,
    "FindCoordinatorRequest": ApiKey.FIND_COORDINATOR,
    "ProduceRequest": ApiKey.PRODUCE,
    "InitProducerIdRequest": ApiKey.INIT_PRODUCER_ID,
    "JoinGroupRequest": ApiKey.JOIN_GROUP,
    "SyncGroupRequest": ApiKey.SYNC_GROUP,
    "HeartbeatRequest": ApiKey.HEARTBEAT,
    "LeaveGroupRequest": ApiKey.LEAVE_GROUP,
    "AddPartitionsToTxnRequest": ApiKey.ADD_PARTITIONS_TO_TXN,
    "AddOffsetsToTxnRequest": ApiKey.ADD_OFFSETS_TO_TXN,
    "TxnOffsetCommitRequest": ApiKey.TXN_OFFSET_COMMIT,
    "EndTxnRequest": ApiKey.END_TXN,
    "ListGroupsRequest": ApiKey.LIST_GROUPS,
    "DescribeGroupsRequest": ApiKey.DESCRIBE_GROUPS,
    "DescribeProducersRequest": ApiKey.DESCRIBE_PRODUCERS,
}


def api_key_of(request: Any) -> ApiKey:
    """The API key of an `epochguard.protocol.messages` request."""
    try:
        return _API_KEYS[type(request).__name__]
    except KeyError:
        raise TypeError(f"not a request this client sends: {type(request).__name__}") from None


def parse_bootstrap(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    """`"host:port,host:port"` or a list of `host[:port]` (port 9092 when absent) -> addresses."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, "9092"
        host = host.strip("[]")  # [::1]:9092
        try:
            number = int(port)
        except ValueError:
            raise ValueError(f"bad bootstrap server {item!r}: port {port!r} is not a number") from None
        if not host or not 0 < number < 65536:
            raise ValueError(f"bad bootstrap server {item!r}")
        out.append((host, number))
    if not out:
        raise ValueError("bootstrap_servers is empty")
    return out


_RECEIVE_BUFFER = 1 << 16  # small answers and the heads of large ones are read into this


class _FrameReader(asyncio.BufferedProtocol):
    """Cuts a connection's bytes into response frames (size prefix removed) for `BrokerConnection`.

    Answers that fit the receive buffer are taken from it, as many as one read brought; a larger one is
    read into a buffer of its own size (after what the receive buffer already held of it), each read
    as large as the rest of the frame. The size prefix is checked before a frame's buffer is made."""

    def __init__(self, conn: BrokerConnection) -> None:
        self._conn = conn
        self._buf = bytearray(_RECEIVE_BUFFER)
        self._filled = 0  # bytes of _buf holding data not yet framed
        self._frame: bytearray | None = None  # a large frame being read into its own buffer
        self._got = 0  # bytes of _frame read so far
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._got:]
        return memoryview(self._buf)[self._filled:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._conn.closed is not None:
            return
        if self._frame is not None:
            self._got += nbytes
            if self._got == len(self._frame):
                frame, self._frame = self._frame, None
                self._conn._on_frame(frame)
            return
        self._filled += nbytes
        buf, pos, limit = self._buf, 0, self._conn.max_response_bytes
        while self._filled - pos >= 4 and self._conn.closed is None:
            size = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
            if size < 4 or size > limit:
                self._conn.close(FrameTooLargeError(f"node {self._conn.node_id}: response size {size} outside "
                                                    f"[4, {limit}]"))
                return
            start, end = pos + 4, pos + 4 + size
            if end <= self._filled:
                self._conn._on_frame(bytes(buf[start:end]))
                pos = end
            elif 4 + size > len(buf):  # larger than the receive buffer: read into its own
                frame = bytearray(size)
                have = self._filled - start
                frame[:have] = buf[start:self._filled]
                self._frame, self._got, self._filled = frame, have, 0
                return
            else:
                break
        rest = self._filled - pos
        if pos and rest:
            buf[:rest] = buf[pos:self._filled]  # same length: no resize while the transport holds a view
        self._filled = rest

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost says how

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn.closed is not None:
            return
        if exc is not None:
            self._conn.close(KafkaConnectionError(f"node {self._conn.node_id}: {exc!r}"))
            return
        what = "mid-frame" if self._frame is not None or self._filled else "between frames"
        self._conn.close(KafkaConnectionError(f"node {self._conn.node_id} closed the connection {what}"))


@dataclass(slots=True)
class _InFlight:
    api_key: int
    version: int
    future: asyncio.Future[Any]
    deadline: float  # loop time


class BrokerConnection:
    """One TCP connection to one broker; `send` returns the decoded answer (or raises)."""

    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        *,
        client_id: str,
        request_timeout_ms: int,
        max_response_bytes: int,
        software_version: str,
        security: Security | None = None,
    ) -> None:
        self.node_id = node_id
        self.security = security or Security()
        self.host, self.port = host, port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000
        self.max_response_bytes = max_response_bytes
        self.software_version = software_version
        self.api_versions: NodeApiVersions | None = None
        self._transport: asyncio.Transport | None = None
        self._in_flight: dict[int, _InFlight] = {}
        self._correlation = itertools.count(1)
        self._timer: asyncio.TimerHandle | None = None
        self.closed: EpochGuardError | None = None
        self._ready = asyncio.Event()

    async def connect(self) -> None:
        """Open the socket (TLS if configured), handshake (ApiVersions) and authenticate (SASL), each
        step within the request timeout."""
        context = self.security.ssl_context
        try:
            transport, _ = await asyncio.wait_for(
                asyncio.get_running_loop().create_connection(
                    lambda: _FrameReader(self), self.host, self.port, ssl=context,
                    server_hostname=self.host if context is not None else None,
                    ssl_handshake_timeout=self.request_timeout_s if context is not None else None),
                self.request_timeout_s)
            self._transport = transport
        except ssl.SSLError as exc:  # before OSError, its base: a TLS refusal is not a network blip
            raise self._fail(SslAuthenticationError(f"TLS handshake with node {self.node_id} at "
                                                    f"{self.host}:{self.port} failed: {exc}")) from exc
        except (TimeoutError, OSError) as exc:
            # Closed during the TLS handshake: retried as a disconnect, as Kafka's NetworkClient does ("terminated
            # during authentication"), but say what it may be
            hint = " during the TLS handshake (is it a TLS listener?)" if context is not None else ""
            raise self._fail(KafkaConnectionError(f"cannot connect to node {self.node_id} "
                                                  f"at {self.host}:{self.port}{hint}: {exc!r}")) from exc
        self.api_versions = await self._handshake()
        if self.security.sasl_mechanism is not None:
            try:
                await self._authenticate()
            except AuthenticationError as exc:
                raise self._fail(exc) from None
        self._ready.set()

    async def _authenticate(self) -> None:
        """Kafka's `SaslClientAuthenticator`: SaslHandshake v1 naming the mechanism, then its tokens in
        SaslAuthenticate requests until the mechanism is complete; any refusal raises."""
        client = self.security.sasl_client()
        assert client is not None and self.api_versions is not None
        mechanism = client.mechanism
        try:
            handshake = self.api_versions.latest_usable_version(ApiKey.SASL_HANDSHAKE, 1, 1)
            authenticate = self.version_for(ApiKey.SASL_AUTHENTICATE, 2)
        except UnsupportedVersionError as exc:
            raise IllegalSaslStateError(f"node {self.node_id} does not serve SaslHandshake v1 and SaslAuthenticate "
                                        f"({exc}): is {self.host}:{self.port} a SASL listener of a broker 1.0 or "
                                        "newer?") from None
        answer = await self._exchange(SaslHandshakeRequest(mechanism, version=handshake), ApiKey.SASL_HANDSHAKE,
                                      handshake)
        assert isinstance(answer, SaslHandshakeResponse)
        if answer.error_code == Errors.UNSUPPORTED_SASL_MECHANISM:
            offered = ", ".join(answer.mechanisms) or "none"
            raise UnsupportedSaslMechanismError(f"node {self.node_id} does not enable SASL mechanism {mechanism}; "
                                                f"it offers: {offered}", mechanism, answer.mechanisms)
        if answer.error_code != Errors.NONE:
            raise IllegalSaslStateError(f"node {self.node_id}: SaslHandshake for {mechanism} failed "
                                        f"({answer.error_code.name})")
        token: bytes | None = client.first()
        for _ in range(_SASL_MAX_ROUNDS):
            assert token is not None
            reply = await self._exchange(SaslAuthenticateRequest(token, version=authenticate), ApiKey.SASL_AUTHENTICATE,
                                         authenticate)
            assert isinstance(reply, SaslAuthenticateResponse)
            if reply.error_code != Errors.NONE:
                message = reply.error_message or reply.error_code.name
                if reply.error_code == Errors.ILLEGAL_SASL_STATE:
                    raise IllegalSaslStateError(f"{mechanism} authentication with node {self.node_id}: {message}")
                raise SaslAuthenticationError(f"{mechanism} authentication with node {self.node_id} failed: "
                                              f"{message}", mechanism)
            token = client.respond(reply.auth_bytes)
            if client.complete:
                return
        raise SaslAuthenticationError(f"{mechanism} authentication with node {self.node_id} did not complete "
                                      f"in {_SASL_MAX_ROUNDS} rounds", mechanism)

    async def _handshake(self) -> NodeApiVersions:
        lo, hi = CODEC_VERSIONS[ApiKey.API_VERSIONS]
        version = hi
        for _ in range(2):  # the newest version, then the one the broker lists if it refused
            response = await self._exchange(ApiVersionsRequest(SOFTWARE_NAME, self.software_version, version=version),
                                            ApiKey.API_VERSIONS, version)
            assert isinstance(response, ApiVersionsResponse)
            if response.error_code == Errors.NONE:
                return response.node_api_versions
            own = response.node_api_versions.version_range(ApiKey.API_VERSIONS)
            # Java's NetworkClient: retry at the version the broker lists for ApiVersions, v0 if it lists
            # none (brokers before 2.4; librdkafka's mock cluster, whose refusal of v3 reads as no range)
            retry = lo if own is None else max(lo, own.max_version)
            if response.error_code != Errors.UNSUPPORTED_VERSION or retry >= version:
                break
            version = retry
        err = KafkaConnectionError(f"node {self.node_id}: ApiVersions handshake failed ({response.error_code.name})")
        self.close(err)
        raise err

    def version_for(self, api_key: int, request_version: int) -> int:
        """The newest version the broker, the codec and the request all allow."""
        assert self.api_versions is not None
        lo, hi = CODEC_VERSIONS.get(api_key, (0, -1))
        return self.api_versions.latest_usable_version(api_key, lo, min(hi, request_version))

    async def send(self, request: Any, timeout_ms: int | None = None) -> Any:
        """Send one request; its decoded answer (acks=0 Produce: None). `timeout_ms`: this request's
        own limit instead of `request_timeout_ms` (a JoinGroup waits up to the rebalance timeout)."""
        answer = await self.write(request, timeout_ms)
        return None if answer is None else await answer

    async def write(self, request: Any, timeout_ms: int | None = None) -> asyncio.Future[Any] | None:
        """Put one request on the wire (once the handshake is done); the future of its decoded answer
        (acks=0 Produce: None, no answer comes)."""
        await self._ready.wait()
        if self.closed is not None:
            raise self.closed
        key = api_key_of(request)
        version = self.version_for(key, request.version)
        if key == ApiKey.PRODUCE and request.acks == 0:
            self._write(key, version, request)
            return None
        return self._write(key, version, request, timeout_ms)

    async def _exchange(self, request: Any, key: int, version: int, timeout_ms: int | None = None) -> Any:
        future = self._write(key, version, request, timeout_ms)
        return await future

    def _write(self, key: int, version: int, request: Any, timeout_ms: int | None = None) -> asyncio.Future[Any]:
        if self.closed is not None:
            raise self.closed
        assert self._transport is not None
        correlation = next(self._correlation) & 0x7FFFFFFF
        header = _core.RequestHeader(key, version, correlation, self.client_id)
        frame = _core.encode_request(header, request)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not (key == ApiKey.PRODUCE and getattr(request, "acks", -1) == 0):
            timeout_s = self.request_timeout_s if timeout_ms is None else timeout_ms / 1000
            self._in_flight[correlation] = _InFlight(key, version, future, loop.time() + timeout_s)
            self._arm_timer()
        else:
            future.set_result(None)
        self._transport.write(frame)
        return future

    def _arm_timer(self) -> None:
        if not self._in_flight:
            return
        first = min(f.deadline for f in self._in_flight.values())
        if self._timer is not None:
            if self._timer.when() <= first:
                return
            self._timer.cancel()  # a request with a shorter limit came after a longer one
        self._timer = asyncio.get_running_loop().call_at(first, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = asyncio.get_running_loop().time()
        late = [(c, f) for c, f in self._in_flight.items() if f.deadline <= now]
        if late:
            correlation, sent = late[0]
            self.close(KafkaTimeoutError(f"node {self.node_id}: no answer to correlation id {correlation} (api key "
                                         f"{sent.api_key}) in time (request_timeout_ms "
                                         f"{self.request_timeout_s * 1000:.0f}); disconnecting"))
            return
        self._arm_timer()

    def _on_frame(self, frame: bytes | bytearray) -> None:
        """One response frame (size prefix removed): decoded and handed to its request's waiter. An
        answer nobody asked for, or one that does not parse, fails the connection."""
        correlation = int.from_bytes(frame[:4], "big", signed=True)
        sent = self._in_flight.pop(correlation, None)
        if sent is None:
            self.close(KafkaConnectionError(f"node {self.node_id}: answer for correlation id {correlation}, "
                                            "which is not in flight"))
            return
        try:
            _, response = _core.decode_response(sent.api_key, sent.version, frame)
        except (CorruptFrameError, UnsupportedVersionError, ValueError, TypeError) as exc:
            err = KafkaConnectionError(f"node {self.node_id}: undecodable answer to api key "
                                       f"{sent.api_key} v{sent.version}: {exc}")
            err.__cause__ = exc
            self._fail_one(sent, err)  # no longer in flight: close() would not fail it
            self.close(err)
            return
        if not sent.future.done():
            sent.future.set_result(response)

    @staticmethod
    def _fail_one(sent: _InFlight, err: EpochGuardError) -> None:
        if not sent.future.done():
            sent.future.set_exception(err)
            sent.future.exception()  # a failed request nobody awaits any more is not an error to log

    def _fail(self, err: EpochGuardError) -> EpochGuardError:
        self.close(err)
        return err

    def close(self, err: EpochGuardError | None = None) -> None:
        """Close and fail everything in flight with `err`."""
        if self.closed is not None:
            return
        self.closed = err or KafkaConnectionError(f"node {self.node_id}: connection closed")
        self._ready.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for sent in self._in_flight.values():
            self._fail_one(sent, self.closed)
        self._in_flight.clear()
        if self._transport is not None:
            self._transport.close()

    def abort_transport(self) -> None:
        """Drop the socket now: a TLS connection's close waits for the broker's close_notify, which a
        client shutting down its event loop would never see (its socket left open)."""
        if self._transport is not None:
            self._transport.abort()


class NetworkClient:
    """Connections to every broker by node id, opened on demand, with per-broker reconnect back-off."""

    def __init__(
        self,
        bootstrap_servers: str | Iterable[str],
        *,
        client_id: str,
        request_timeout_ms: int = 30_000,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1_000,
        max_response_bytes: int = _core.MAX_FRAME_BYTES,
        software_version: str = _core.__version__,
        security: Security | None = None,
    ) -> None:
        self.security = security or Security()
        self.bootstrap = {-(i + 1): addr for i, addr in enumerate(parse_bootstrap(bootstrap_servers))}
        self.addresses: dict[int, tuple[str, int]] = dict(self.bootstrap)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self.max_response_bytes = max_response_bytes
        self.software_version = software_version
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Task[BrokerConnection]] = {}
        self._failures: dict[int, int] = {}  # node -> consecutive failed connects
        self._not_before: dict[int, float] = {}  # node -> monotonic time of the next attempt
        self._last_attempt: dict[int, float] = {}  # node -> monotonic time of its last connect attempt
        self._write_order: dict[int, asyncio.Lock] = {}  # node -> held from send() until its request is written
        # The cluster's finalized features (KIP-584) from the handshake with the highest features epoch any
        # broker answered (Java's `ApiVersions.update`): a broker that has not seen the latest levels yet
        # does not set them back
        self.finalized_features: Mapping[str, int] = {}
        self.finalized_features_epoch = -1
        self.closed = False

    def update_brokers(self, brokers: Mapping[int, tuple[str, int]]) -> None:
        """The brokers metadata lists (bootstrap entries stay, for when they all go away)."""
        for node, addr in brokers.items():
            old = self.addresses.get(node)
            self.addresses[node] = addr
            if old is not None and old != addr and node in self._connections:
                self._connections.pop(node).close()

    def connected(self) -> bool:
        """Whether any broker connection is open with its handshake done."""
        return any(c.closed is None and c.api_versions is not None for c in self._connections.values())

    def connection_count(self) -> int:
        return sum(1 for c in self._connections.values() if c.closed is None)

    def in_flight(self, node_id: int) -> int:
        conn = self._connections.get(node_id)
        return 0 if conn is None or conn.closed is not None else len(conn._in_flight)

    def api_versions(self, node_id: int) -> NodeApiVersions | None:
        conn = self._connections.get(node_id)
        return None if conn is None or conn.closed is not None else conn.api_versions

    def backoff_remaining_s(self, node_id: int) -> float:
        return max(0.0, self._not_before.get(node_id, 0.0) - time.monotonic())

    def least_loaded_node(self, candidates: Sequence[int]) -> int | None:
        """Java's `NetworkClient.leastLoadedNode`: from a random starting point, the first connected
        candidate with nothing in flight, else the connected one with the fewest requests in flight, else
        one that is connecting, else the one out of its back-off whose last connect attempt is oldest (a
        node never tried first); None if every candidate is in its back-off (or has no address)."""
        if not candidates:
            return None
        start = random.randrange(len(candidates))
        ready, fewest, connecting, can_connect = None, None, None, None
        for i in range(len(candidates)):
            node = candidates[(start + i) % len(candidates)]
            conn = self._connections.get(node)
            if conn is not None and conn.closed is None and conn.api_versions is not None:
                load = len(conn._in_flight)
                if load == 0:
                    return node
                if fewest is None or load < fewest:
                    ready, fewest = node, load
            elif node in self._connecting:
                connecting = node
            elif node in self.addresses and self.backoff_remaining_s(node) == 0:
                if can_connect is None or self._last_attempt.get(node, -math.inf) < self._last_attempt.get(
                        can_connect, -math.inf):
                    can_connect = node
        for found in (ready, connecting, can_connect):
            if found is not None:
                return found
        return None

    async def connection(self, node_id: int) -> BrokerConnection:
        """The open connection to `node_id`, connecting (after its back-off) if needed."""
        if self.closed:
            raise KafkaConnectionError("the network client is closed")
        conn = self._connections.get(node_id)
        if conn is not None and conn.closed is None:
            return conn
        task = self._connecting.get(node_id)
        wait = self.backoff_remaining_s(node_id)
        if task is None and wait > 0:
            # Fail at once, as Kafka's NetworkClient does for a node in its back-off: a request held
            # back until the broker returns would be stale by then (its sender retries a fresh one).
            raise KafkaConnectionError(f"node {node_id} is in its reconnect back-off ({wait * 1000:.0f} ms left)")
        if task is None:
            task = asyncio.get_running_loop().create_task(self._connect(node_id))
            self._connecting[node_id] = task
        return await asyncio.shield(task)

    async def _connect(self, node_id: int) -> BrokerConnection:
        self._last_attempt[node_id] = time.monotonic()
        try:
            addr = self.addresses.get(node_id)
            if addr is None:
                raise KafkaConnectionError(f"no address known for node {node_id}")
            conn = BrokerConnection(node_id, addr[0], addr[1], client_id=self.client_id,
                                    request_timeout_ms=self.request_timeout_ms,
                                    max_response_bytes=self.max_response_bytes,
                                    software_version=self.software_version, security=self.security)
            try:
                await conn.connect()
            except EpochGuardError:
                self._backoff(node_id)
                raise
            except BaseException:  # cancelled mid-handshake (the client closing): leave no socket open
                conn.close()
                raise
            self._failures.pop(node_id, None)
            self._connections[node_id] = conn
            versions = conn.api_versions
            if versions is not None and versions.finalized_features_epoch > self.finalized_features_epoch:
                self.finalized_features = versions.finalized_features
                self.finalized_features_epoch = versions.finalized_features_epoch
            return conn
        finally:
            self._connecting.pop(node_id, None)

    def _backoff(self, node_id: int) -> None:
        """Kafka's `ClusterConnectionStates`: exponential back-off with 20% jitter."""
        n = self._failures.get(node_id, 0)
        self._failures[node_id] = n + 1
        base = min(self.reconnect_backoff_ms * (2 ** min(n, 30)), self.reconnect_backoff_max_ms)
        self._not_before[node_id] = time.monotonic() + base * random.uniform(0.8, 1.2) / 1000

    async def send(self, node_id: int, request: Any, timeout_ms: int | None = None) -> Any:
        """Send `request` to `node_id`; the answer, or `KafkaConnectionError` / `KafkaTimeoutError`
        (its connection is then closed and the node backs off before the next connect)."""
        # One broker's requests go on the wire in the order send() was called, as Java's NetworkClient
        # writes them: Kafka answers a connection's requests in order, and a producer's pipelined batches
        # of one partition land in that order. Without the lock a request sent just as the connection came
        # up was written before one still waking from the connect (issue 35: a send_arrow batch before
        # the records `send` queued ahead of it). Held until the request is written, not answered.
        lock = self._write_order.get(node_id)
        if lock is None:
            lock = self._write_order[node_id] = asyncio.Lock()
        async with lock:
            conn = await self.connection(node_id)
            if isinstance(request, ApiVersionsRequest) and conn.api_versions is not None:
                # The connection's handshake answered this already (Java's NetworkClient keeps the versions per
                # connection too). Sent again, it would need the software name Kafka validates from v3 on: the
                # state machine's empty one is INVALID_REQUEST there, and validation waited for versions forever.
                versions = conn.api_versions
                return ApiVersionsResponse(tuple(versions), version=request.version,
                                           finalized_features=tuple(versions.finalized_features.items()),
                                           finalized_features_epoch=versions.finalized_features_epoch)
            try:
                answer = await conn.write(request, timeout_ms)
            except (KafkaConnectionError, KafkaTimeoutError):
                self._drop(node_id, conn)
                raise
        try:
            return None if answer is None else await answer
        except (KafkaConnectionError, KafkaTimeoutError):
            self._drop(node_id, conn)
            raise

    def _drop(self, node_id: int, conn: BrokerConnection) -> None:
        """A connection that failed a request: forgotten (if still the node's), the node backs off."""
        if self._connections.get(node_id) is conn:
            self._connections.pop(node_id, None)
            self._backoff(node_id)

    def disconnect(self, node_id: int) -> None:
        conn = self._connections.pop(node_id, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        self.closed = True
        for task in list(self._connecting.values()):
            task.cancel()
        for task in list(self._connecting.values()):
            with contextlib.suppress(BaseException):
                await task
        conns = list(self._connections.values())
        for conn in conns:
            conn.close()
        self._connections.clear()
        await asyncio.sleep(0)  # let the cancelled readers finish
        for conn in conns:
            conn.abort_transport()
        await asyncio.sleep(0)  # the sockets close in the callbacks the aborts scheduled

"""`epochguard.client.network` against tiny hostile brokers (asyncio servers in the test): the handshake,
correlation, and every way a broker can misbehave gives a typed error within the configured time,
never a hang or an allocation of what a size prefix claims."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from epochguard import _core
from epochguard.client.network import BrokerConnection, NetworkClient, parse_bootstrap
from epochguard.errors import Errors, FrameTooLargeError, KafkaConnectionError, KafkaTimeoutError
from epochguard.protocol.api_versions import (
    BROKER_API_VERSIONS,
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    answer_api_versions,
)
from epochguard.protocol.messages import MetadataRequest, MetadataResponse, MetadataResponseBroker
from tests.client.test_client_codec import api_versions_v3

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[_core.RequestHeader, object]:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return _core.decode_request(await reader.readexactly(size))


async def answer(writer: asyncio.StreamWriter, header: _core.RequestHeader, response: object) -> None:
    writer.write(_core.encode_response(header, response))
    await writer.drain()


async def handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    header, request = await read_request(reader)
    assert header.api_key == ApiKey.API_VERSIONS
    await answer(writer, header, answer_api_versions(request))


async def with_server(handler: Handler, body: Callable[[str], Awaitable[None]]) -> None:
    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away first
        finally:
            writer.close()

    server = await asyncio.start_server(closing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await body(f"127.0.0.1:{port}")
    finally:
        server.close()
        await server.wait_closed()


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 20))  # the outer bound: a hang fails, it never blocks the suite


METADATA = MetadataResponse((), brokers=(MetadataResponseBroker(1, "127.0.0.1", 1),), version=12)


def test_handshake_then_the_newest_common_version_with_correlation_ids() -> None:
    seen: list[_core.RequestHeader] = []

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # An older broker: ApiVersions v3 refused (answered v0 with its range), Metadata only up to v9.
        served = BROKER_API_VERSIONS.with_range(ApiKey.API_VERSIONS, 0, 2).with_range(ApiKey.METADATA, 0, 9)
        while True:
            try:
                header, request = await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            seen.append(header)
            if header.api_key == ApiKey.API_VERSIONS:
                await answer(writer, header, answer_api_versions(request, served))
            else:
                await answer(writer, header, METADATA)

    async def body(bootstrap: str) -> None:
        client = NetworkClient(bootstrap, client_id="net-test")
        first = await client.send(-1, MetadataRequest(("t",)))
        second = await client.send(-1, MetadataRequest(("t",)))
        assert first == second == MetadataResponse((), brokers=METADATA.brokers, version=9)
        assert client.api_versions(-1).version_range(ApiKey.METADATA).max_version == 9
        # The state machine's own ApiVersions (no software name: Kafka answers INVALID_REQUEST to that
        # at v3) is answered from the handshake, never sent again
        again = await client.send(-1, ApiVersionsRequest())
        assert again.error_code == Errors.NONE and again.node_api_versions == client.api_versions(-1)
        await client.close()

    run(with_server(broker, body))
    assert [(h.api_key, h.api_version) for h in seen] == [(18, 3), (18, 2), (3, 9), (3, 9)]
    assert [h.correlation_id for h in seen] == [1, 2, 3, 4]
    assert {h.client_id for h in seen} == {"net-test"}


def test_a_refusal_listing_no_range_is_retried_at_v0() -> None:
    """librdkafka's mock cluster refuses ApiVersions v3 with an answer that lists no range (read as no
    keys); Java's NetworkClient then retries at v0, and so does the handshake."""
    seen: list[int] = []

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                header, request = await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            seen.append(header.api_version)
            if header.api_key != ApiKey.API_VERSIONS:
                await answer(writer, header, METADATA)
            elif header.api_version > 0:
                await answer(writer, header, ApiVersionsResponse((), Errors.UNSUPPORTED_VERSION, version=0))
            else:
                await answer(writer, header, answer_api_versions(request))

    async def body(bootstrap: str) -> None:
        client = NetworkClient(bootstrap, client_id="c")
        await client.send(-1, MetadataRequest(("t",)))
        await client.close()

    run(with_server(broker, body))
    assert seen[:2] == [3, 0]


def test_answers_are_matched_by_correlation_id_not_order() -> None:
    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handshake(reader, writer)
        first = await read_request(reader)
        second = await read_request(reader)
        await answer(writer, second[0], MetadataResponse((), cluster_id="second", version=12))
        await answer(writer, first[0], MetadataResponse((), cluster_id="first", version=12))
        await reader.read()

    async def body(bootstrap: str) -> None:
        client = NetworkClient(bootstrap, client_id="c")
        a, b = await asyncio.gather(client.send(-1, MetadataRequest(("a",))), client.send(-1, MetadataRequest(("b",))))
        assert (a.cluster_id, b.cluster_id) == ("first", "second")
        await client.close()

    run(with_server(broker, body))


@pytest.mark.parametrize("chunks", [(1, 2, 3, 511), (3, 1, 4093, 70_001, 2), (65_536,), (1 << 20,)],
                         ids=["small", "mixed", "receive-buffer-sized", "all-at-once"])
def test_answers_are_framed_however_their_bytes_arrive(chunks: tuple[int, ...]) -> None:
    """The frame reader: several answers in one read, a size prefix split across reads, an answer larger
    than the 64 KiB receive buffer whose head came in with the answers before it (read on into a buffer
    of its own), and small answers after it: every answer reaches its request intact."""
    # cluster ids: small, larger than the receive buffer, ..., then small ones past a receive buffer's worth
    sizes = [10, 150_000, 0, 70_000, 65_530, 3, *[1_000] * 70, 5]

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handshake(reader, writer)
        requests = [await read_request(reader) for _ in sizes]
        data = b"".join(_core.encode_response(
            header, MetadataResponse((), cluster_id="y" * int(request.topics[0][1:]), version=12))
            for header, request in requests)
        pos, i = 0, 0
        while pos < len(data):
            step = chunks[i % len(chunks)]
            writer.write(data[pos:pos + step])
            await writer.drain()
            await asyncio.sleep(0)
            pos, i = pos + step, i + 1
        await reader.read()

    async def body(bootstrap: str) -> None:
        client = NetworkClient(bootstrap, client_id="c")
        names = [f"x{n}" for n in sizes]
        answers = await asyncio.gather(*(client.send(-1, MetadataRequest((name,))) for name in names))
        assert [len(a.cluster_id) for a in answers] == sizes and {*"".join(a.cluster_id for a in answers)} == {"y"}
        await client.close()

    run(with_server(broker, body))


def hostile(reply: bytes, *, then_close: bool) -> Handler:
    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handshake(reader, writer)
        await read_request(reader)
        writer.write(reply)
        await writer.drain()
        if then_close:
            writer.close()
        else:
            await reader.read()  # stay silent until the client goes

    return broker


@pytest.mark.parametrize(("reply", "then_close", "error", "match"), [
    # A size prefix of 2 GiB: refused on the prefix, nothing of that size read or allocated.
    (struct.pack(">i", 0x7FFFFFFF), False, FrameTooLargeError, "outside"),
    (struct.pack(">i", -5), False, FrameTooLargeError, "outside"),
    # Closed mid-frame: 100 bytes promised, 6 sent.
    (struct.pack(">i", 100) + b"\x00\x00\x00\x02ab", True, KafkaConnectionError, "mid-frame"),
    # Closed between frames, before any answer.
    (b"", True, KafkaConnectionError, "between frames"),
    # An answer for a correlation id never sent.
    (struct.pack(">ii", 4, 777), False, KafkaConnectionError, "not in flight"),
    # Garbage where a Metadata v12 answer belongs (right correlation id 2).
    (struct.pack(">ii", 9, 2) + b"\x00\x7f\xff\xff\xff", False, KafkaConnectionError, "undecodable"),
])
def test_a_misbehaving_broker_fails_the_request_with_a_typed_error(
    reply: bytes, then_close: bool, error: type[Exception], match: str
) -> None:
    async def body(bootstrap: str) -> None:
        client = NetworkClient(bootstrap, client_id="c", request_timeout_ms=5_000)
        started = time.monotonic()
        with pytest.raises(error, match=match):
            await client.send(-1, MetadataRequest(("t",)))
        assert time.monotonic() - started < 2  # at once, not after the request timeout
        await client.close()

    run(with_server(hostile(reply, then_close=then_close), body))


def test_a_silent_broker_times_out_after_request_timeout_ms_and_the_node_backs_off() -> None:
    connects = 0

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connects
        connects += 1
        await handshake(reader, writer)
        await reader.read()  # never answers anything else

    async def body(bootstrap: str) -> None:
        client = NetworkClient(bootstrap, client_id="c", request_timeout_ms=300, reconnect_backoff_ms=400,
                               reconnect_backoff_max_ms=400)
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="request_timeout_ms 300"):
            await client.send(-1, MetadataRequest(("t",)))
        assert 0.25 < time.monotonic() - started < 1.5
        assert client.backoff_remaining_s(-1) > 0.25  # 400 ms +-20% from the failure
        # During the back-off a request fails at once (held back, it would be stale when sent).
        with pytest.raises(KafkaConnectionError, match="back-off"):
            await client.send(-1, MetadataRequest(("t",)))
        await asyncio.sleep(client.backoff_remaining_s(-1))
        with pytest.raises(KafkaTimeoutError):
            await client.send(-1, MetadataRequest(("t",)))  # a new connection once it is over
        await client.close()

    run(with_server(broker, body))
    assert connects == 2


def test_a_broker_that_never_answers_the_handshake_times_out() -> None:
    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async def body(bootstrap: str) -> None:
        client = NetworkClient(bootstrap, client_id="c", request_timeout_ms=200)
        with pytest.raises(KafkaTimeoutError):
            await client.send(-1, MetadataRequest(("t",)))
        await client.close()

    run(with_server(broker, body))


def test_a_refused_connection_is_a_connection_error() -> None:
    async def body() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        client = NetworkClient(f"127.0.0.1:{port}", client_id="c")
        with pytest.raises(KafkaConnectionError, match="cannot connect"):
            await client.send(-1, MetadataRequest(("t",)))
        await client.close()

    run(body())


def test_a_handshake_error_closes_the_connection() -> None:
    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        header, _ = await read_request(reader)
        await answer(writer, header, ApiVersionsResponse((), Errors.UNKNOWN_SERVER_ERROR, version=3))
        await reader.read()

    async def body(bootstrap: str) -> None:
        client = NetworkClient(bootstrap, client_id="c")
        with pytest.raises(KafkaConnectionError, match="handshake failed"):
            await client.send(-1, MetadataRequest(("t",)))
        await client.close()

    run(with_server(broker, body))


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["a", "[::1]:9093"]) == [("a", 9092), ("::1", 9093)]
    for bad in ("", "a:x", "a:0", ":5"):
        with pytest.raises(ValueError):
            parse_bootstrap(bad)


def test_a_request_with_its_own_longer_limit_does_not_delay_the_timeout_of_a_shorter_one() -> None:
    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handshake(reader, writer)
        await reader.read()

    async def body(bootstrap: str) -> None:
        client = NetworkClient(bootstrap, client_id="c", request_timeout_ms=300)
        await client.connection(-1)
        long = asyncio.ensure_future(client.send(-1, MetadataRequest(("a",)), timeout_ms=10_000))
        await asyncio.sleep(0.01)
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError):
            await client.send(-1, MetadataRequest(("b",)))
        assert time.monotonic() - started < 1.5  # the 300 ms one, not the 10 s one
        with pytest.raises(KafkaTimeoutError):  # the connection closed: the long one failed with it
            await long
        await client.close()

    run(with_server(broker, body))


def test_closing_during_a_handshake_closes_the_half_open_connection() -> None:
    """The client closing while a connection waits for its ApiVersions answer (a consumer closed right
    after it found a new coordinator): the socket is closed, not left for the garbage collector to find
    after the loop is gone ("unclosed transport")."""
    handshaking = asyncio.Event()
    eof = asyncio.Event()

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)  # the ApiVersions request, never answered
        handshaking.set()
        await reader.read()  # until the client's side is closed
        eof.set()

    async def body(bootstrap: str) -> None:
        client = NetworkClient(bootstrap, client_id="c", request_timeout_ms=10_000)
        pending = asyncio.ensure_future(client.send(-1, MetadataRequest(("t",))))
        await handshaking.wait()
        await client.close()
        await asyncio.wait_for(eof.wait(), 2)  # the broker saw the connection close
        with pytest.raises((KafkaConnectionError, asyncio.CancelledError)):
            await pending

    run(with_server(broker, body))


def test_requests_to_a_broker_go_on_the_wire_in_the_order_they_were_sent() -> None:
    """A producer's pipelined batches of one partition are written in the order its state machine
    made them (Kafka answers one connection's requests in order: that is the order they land in). The
    interleaving that reordered them, forced: B is sent after the connection was made, while A, sent
    before it, still waits to wake from the connect (issue 35's send_arrow batch written before the
    `send` records queued ahead of it)."""
    seen: list[tuple[str, ...]] = []

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handshake(reader, writer)
        for _ in range(2):
            header, request = await read_request(reader)
            assert isinstance(request, MetadataRequest)
            seen.append(tuple(request.topics or ()))
            await answer(writer, header, MetadataResponse((), version=12))
        await reader.read()

    async def body(bootstrap: str) -> None:
        client = NetworkClient(bootstrap, client_id="c")
        connect = client._connect
        later: list[asyncio.Task[Any]] = []

        async def connect_then_send_b(node_id: int) -> BrokerConnection:
            conn = await connect(node_id)
            # the connection is registered; A, which started it, wakes only after this task is done
            later.append(asyncio.get_running_loop().create_task(client.send(node_id, MetadataRequest(("b",)))))
            return conn

        client._connect = connect_then_send_b  # type: ignore[method-assign]
        await client.send(-1, MetadataRequest(("a",)))
        await asyncio.gather(*later)
        assert seen == [("a",), ("b",)]
        await client.close()

    run(with_server(broker, body))


def test_the_finalized_features_of_the_newest_features_epoch_are_kept() -> None:
    """KIP-584 (Java's `ApiVersions.update`): a broker that has not seen the newest feature levels yet
    (a lower features epoch) does not set `transaction.version` back."""
    ranges = [(r.api_key, r.min_version, r.max_version) for r in BROKER_API_VERSIONS]

    def broker(level: int, epoch: int) -> Handler:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            header, _ = await read_request(reader)
            body = api_versions_v3(header.correlation_id, ranges, {"transaction.version": level}, epoch)
            writer.write(struct.pack(">i", len(body)) + body)
            await writer.drain()
            await reader.read()  # until the client closes
        return serve

    async def body(new: str, old: str) -> None:
        client = NetworkClient([new, old], client_id="net-test")
        assert (client.finalized_features, client.finalized_features_epoch) == ({}, -1)
        await client.connection(-1)
        assert (client.finalized_features, client.finalized_features_epoch) == ({"transaction.version": 2}, 7)
        await client.connection(-2)
        assert client.api_versions(-2).feature_level("transaction.version") == 1  # that broker's own answer
        assert (client.finalized_features, client.finalized_features_epoch) == ({"transaction.version": 2}, 7)
        again = await client.send(-2, ApiVersionsRequest())  # the state machine's, answered from the handshake
        assert again.finalized_features == (("transaction.version", 1),) and again.finalized_features_epoch == 6
        await client.close()

    run(with_server(broker(2, 7), lambda new: with_server(broker(1, 6), lambda old: body(new, old))))

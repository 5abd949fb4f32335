"""The wire proxy of the streaming matrix's real-Kafka cells (`wire_proxy.KafkaWireProxy`), on its own: in
front of a stand-in broker that answers every request frame with its correlation id, no Kafka needed."""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.real_kafka.wire_proxy import KafkaWireProxy, fetch_offsets


def fetch(correlation_id: int, offsets: list[int], version: int = 17, client_id: str = "executor-1") -> bytes:
    """A Fetch request frame (with its size prefix) as a client of Kafka 4.4 sends it."""
    from kafka.protocol.consumer.fetch import FetchRequest

    topic, part = FetchRequest.FetchTopic, FetchRequest.FetchTopic.FetchPartition
    topics = [topic(topic="t", topic_id=uuid.uuid4(), partitions=[part(partition=p, fetch_offset=o,
                                                                       partition_max_bytes=1)
                                                                  for p, o in enumerate(offsets)])] if offsets else []
    request = FetchRequest(max_wait_ms=500, min_bytes=1, topics=topics, version=version)
    request.with_header(correlation_id, client_id)
    return bytes(request.encode(header=True, framed=True))


def other(correlation_id: int, api_key: int = 3) -> bytes:
    """A request frame of another kind: only its header (v1) matters to the proxy."""
    body = struct.pack(">hhih", api_key, 12, correlation_id, 6) + b"client"
    return struct.pack(">i", len(body)) + body


class _Answering(socketserver.BaseRequestHandler):
    """The stand-in broker: answers each request, in order, with a frame holding its correlation id."""

    def handle(self) -> None:
        f = self.request.makefile("rb")
        while len(prefix := f.read(4)) == 4:
            frame = f.read(struct.unpack(">i", prefix)[0])
            self.request.sendall(struct.pack(">ii", 4, struct.unpack(">i", frame[4:8])[0]))


@pytest.fixture
def broker() -> Iterator[socketserver.ThreadingTCPServer]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Answering)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(broker: socketserver.ThreadingTCPServer) -> Iterator[KafkaWireProxy]:
    p = KafkaWireProxy(1, max_frame_bytes=1 << 16, max_held=8)
    p.start([broker.server_address[:2]])
    yield p
    p.close()


def connect(proxy: KafkaWireProxy) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", proxy.ports[0]), timeout=5)
    return s


def answers(s: socket.socket, n: int, timeout: float = 5.0) -> list[int]:
    """The correlation ids of the next `n` answers; fewer if none comes within `timeout`."""
    s.settimeout(timeout)
    got: list[int] = []
    buf = b""
    try:
        while len(got) < n:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 8:
                got.append(struct.unpack(">i", buf[4:8])[0])
                buf = buf[8:]
    except TimeoutError:
        pass
    return got


@pytest.mark.parametrize("version", [4, 12, 13, 17, 18])
def test_reads_a_fetchs_offsets_in_every_version(version: int) -> None:
    frame = fetch(7, [15, 3], version=version)[4:]
    assert fetch_offsets(frame) == ("executor-1", (15, 3))


def test_an_undecodable_fetch_is_a_value_error() -> None:
    frame = fetch(7, [15])[4:]
    with pytest.raises(ValueError, match="undecodable Fetch v17"):
        fetch_offsets(frame[:-12])
    with pytest.raises(ValueError, match="not a Fetch"):
        fetch_offsets(other(1)[4:])


def test_passes_requests_and_answers_through_in_order(proxy: KafkaWireProxy) -> None:
    with connect(proxy) as s:
        s.sendall(other(1) + fetch(2, [15]) + other(3))
        assert answers(s, 3) == [1, 2, 3]
    assert proxy.held == [] and proxy.errors == []


def test_holds_a_fetch_at_or_past_the_offset_and_what_follows_it_until_released(proxy: KafkaWireProxy) -> None:
    proxy.hold_fetches(15)
    with connect(proxy) as a, connect(proxy) as b:
        a.sendall(fetch(1, [14]) + fetch(2, [15]) + other(3) + fetch(4, [14]))
        assert answers(a, 4, timeout=0.5) == [1]  # 2 held, 3 and 4 behind it (answers come in order)
        b.sendall(other(5) + fetch(6, [], version=12) + other(7))  # no partition: a session's continuation
        assert answers(b, 3, timeout=0.5) == [5]
        assert proxy.held_at == [15]
        assert [h.offsets for h in proxy.held] == [(15,), ()]
        assert proxy.release_fetches() == 5
        assert answers(a, 3) == [2, 3, 4]
        assert answers(b, 2) == [6, 7]
        a.sendall(fetch(8, [20]))  # released: nothing held any more
        assert answers(a, 1) == [8]


def test_holds_only_the_named_clients(proxy: KafkaWireProxy) -> None:
    proxy.hold_fetches(0, client_id="executor")
    with connect(proxy) as s:
        s.sendall(fetch(1, [15], client_id="driver") + fetch(2, [15], client_id="spark-executor-3"))
        assert answers(s, 2, timeout=0.5) == [1]
        proxy.release_fetches()
        assert answers(s, 1) == [2]


def test_a_held_request_of_a_closed_connection_is_dropped(proxy: KafkaWireProxy,
                                                          broker: socketserver.ThreadingTCPServer) -> None:
    proxy.hold_fetches(15)
    with connect(proxy) as s:
        s.sendall(fetch(1, [15]))
        deadline = time.monotonic() + 5
        while not proxy.held and time.monotonic() < deadline:
            time.sleep(0.01)
    assert proxy.held_at == [15]
    time.sleep(0.2)
    assert proxy.release_fetches() == 0  # its connection is gone: nothing to send on
    assert proxy.errors == []


def test_bounds_close_the_connection(proxy: KafkaWireProxy) -> None:
    with connect(proxy) as s:  # a size prefix above max_frame_bytes
        s.sendall(struct.pack(">i", 1 << 20) + b"x" * 64)
        assert s.recv(16) == b""
    with connect(proxy) as s:  # a size prefix below a request header's
        s.sendall(struct.pack(">i", 2) + b"xx")
        assert s.recv(16) == b""
    proxy.hold_fetches(0)
    with connect(proxy) as s:  # more than max_held frames waiting on one connection
        s.sendall(fetch(1, [1]) + b"".join(other(i) for i in range(2, 12)))
        assert answers(s, 1) == []
    assert proxy.errors == ["a request frame of 1048576 bytes: connection closed",
                            "a request frame of 2 bytes: connection closed",
                            "more than 8 requests held on one connection: closed"]


def test_a_hold_ends_by_itself_after_max_hold_s(broker: socketserver.ThreadingTCPServer) -> None:
    with KafkaWireProxy(1, max_hold_s=0.6) as p:
        p.start([broker.server_address[:2]])
        p.hold_fetches(0)
        with connect(p) as s:
            s.sendall(fetch(1, [5]) + other(2))
            assert answers(s, 2, timeout=0.2) == []
            assert answers(s, 2) == [1, 2]  # sent on when the hold expired
            s.sendall(fetch(3, [5]))
            assert answers(s, 1) == [3]
        assert p.errors == ["a hold outlived max_hold_s=0.6: released"]


def test_a_broker_that_is_down_closes_the_clients_connection() -> None:
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with KafkaWireProxy(1) as p:
        p.start([("127.0.0.1", port)])
        with connect(p) as s:
            s.settimeout(5)
            assert s.recv(16) == b""


def test_spoils_the_answers_to_the_next_requests_of_one_api_key(proxy: KafkaWireProxy) -> None:
    """`sabotage`: garbage keeps the frame and its correlation id, late holds it (and what follows it), drop
    closes the connection; other API keys and later requests pass untouched."""
    proxy.sabotage(2, "garbage", count=1)
    with connect(proxy) as s:
        s.sendall(other(1, api_key=2) + other(2, api_key=3) + other(3, api_key=2))
        s.settimeout(5)
        raw = b""
        while len(raw) < 24:
            raw += s.recv(4096)
    assert [struct.unpack(">ii", raw[i:i + 8]) for i in range(0, 24, 8)] == [(4, 1), (4, 2), (4, 3)]
    assert proxy.spoiled == [(2, "garbage")] and proxy.sabotage_pending == 0
    proxy.sabotage(2, "late", count=1, late_s=1.5)
    with connect(proxy) as s:
        s.sendall(other(4, api_key=2) + other(5, api_key=3))
        assert answers(s, 2, timeout=0.5) == []  # held, and the answer behind it too
        assert answers(s, 2, timeout=5) == [4, 5]
    proxy.sabotage(3, "drop", count=1)
    with connect(proxy) as s:
        s.sendall(other(6, api_key=3))
        s.settimeout(5)
        assert s.recv(4096) == b""  # closed, no answer
    assert proxy.spoiled[1:] == [(2, "late"), (3, "drop")]
    with pytest.raises(ValueError, match="garbage, late or drop"):
        proxy.sabotage(2, "slowly")


def test_a_broker_down_closes_its_connections_until_it_is_up(proxy: KafkaWireProxy) -> None:
    s = connect(proxy)
    with s:
        s.sendall(other(1))
        assert answers(s, 1) == [1]
        proxy.down([0])
        s.settimeout(5)
        assert s.recv(4096) == b""  # the open connection closed
    with connect(proxy) as s:
        s.settimeout(5)
        assert s.recv(4096) == b""  # a new one too
    proxy.down([])
    with connect(proxy) as s:
        s.sendall(other(2))
        assert answers(s, 1) == [2]

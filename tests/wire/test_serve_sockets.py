"""The socket layer of `epochguard serve`: hostile connections do not stall the others."""

from __future__ import annotations

import socket
import struct
import time

from tests.wire.serving import Served


def _api_versions(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, 4) + b"test"
    return struct.pack(">i", len(body)) + body


def _round_trip(address: tuple[str, int], correlation_id: int) -> float:
    start = time.monotonic()
    with socket.create_connection(address, timeout=5) as sock:
        sock.sendall(_api_versions(correlation_id))
        head = sock.recv(10)
        assert struct.unpack_from(">iih", head)[1:] == (correlation_id, 0)
    return time.monotonic() - start


def test_a_flooding_client_and_a_mid_frame_disconnect_do_not_stall_another_client() -> None:
    served = Served("clean")
    try:
        host, port = served.bootstrap.split(",")[0].split(":")
        address = (host, int(port))
        # A client that floods requests and never reads its answers.
        flood = socket.create_connection(address)
        flood.setblocking(False)
        frames = _api_versions(1) * 5000
        sent = 0
        try:
            while sent < len(frames):
                sent += flood.send(frames[sent:sent + 65536])
        except BlockingIOError:
            pass  # the server stopped reading it: its queue is full (TCP pushes back)
        # A client that dies in the middle of a frame: size prefix says 1000 bytes, 10 arrive.
        torn = socket.create_connection(address)
        torn.sendall(struct.pack(">i", 1000) + b"x" * 10)
        torn.close()
        # A frame claiming more than the server reads at all: that connection is closed.
        huge = socket.create_connection(address, timeout=5)
        huge.sendall(struct.pack(">i", 1 << 30))
        assert huge.recv(1) == b""
        huge.close()
        # Meanwhile an ordinary client is answered promptly.
        assert max(_round_trip(address, 100 + i) for i in range(20)) < 2.0
        flood.close()
        assert _round_trip(address, 200) < 2.0
    finally:
        result = served.stop()
    assert result["violations"] == []

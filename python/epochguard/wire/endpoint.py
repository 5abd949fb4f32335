"""Bytes in, bytes out: request frames through the codec into a `WireCluster`, answers back to frames.

Still sans-IO (the asyncio server in `server.py` only moves bytes), so a trace can be replayed through
the same code. A frame that does not decode closes its connection, as Kafka's `SocketServer` does;
an ApiVersions request at a version the broker does not serve is answered at v0 with
UNSUPPORTED_VERSION, so the client can fall back. Every exchange goes to the trace, if any.
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any

from epochguard.protocol.api_versions import ApiKey, ApiVersionsRequest, ApiVersionsResponse
from epochguard.sim.faults import Fault
from epochguard.wire import codec
from epochguard.wire.engine import Connection, WireCluster
from epochguard.wire.trace import TraceWriter

__all__ = ["Endpoint", "response_digest"]


def response_digest(frame: bytes) -> str:
    return hashlib.blake2b(frame, digest_size=16).hexdigest()


class Endpoint:
    def __init__(self, wire: WireCluster, trace: TraceWriter | None = None) -> None:
        self.wire = wire
        self.trace = trace

    def connect(self, broker_id: int) -> Connection | None:
        conn = self.wire.connect(broker_id)
        if self.trace is not None:
            self.trace.write({"type": "connect", "step": self.wire.step_no, "broker": broker_id,
                              "conn": None if conn is None else conn.id})
        return conn

    def disconnect(self, conn: Connection) -> None:
        if conn.closed:
            return
        self.wire.close(conn)
        if self.trace is not None:
            self.trace.write({"type": "disconnect", "step": self.wire.step_no, "conn": conn.id})

    def receive(self, conn: Connection, frame: bytes) -> None:
        """One request frame (without its size prefix) from `conn`."""
        if conn.closed:
            return
        if self.trace is not None:
            self.trace.write({"type": "request", "step": self.wire.step_no, "conn": conn.id, "frame": frame})
        try:
            header, request = codec.decode_request(frame)
        except codec.UnsupportedVersionError as exc:
            known = getattr(exc, "header", None)  # the header, when only the body's version is unknown
            if known is not None and known.api_key == ApiKey.API_VERSIONS:
                self.wire.submit(conn, known, ApiVersionsRequest(version=known.api_version))
            else:
                self._drop(conn, str(exc))
            return
        except codec.CorruptFrameError as exc:
            self._drop(conn, str(exc))
            return
        try:
            self.wire.submit(conn, header, request)
        except Exception as exc:  # a bug answering one client must not take the server down
            self._drop(conn, f"internal error answering {type(request).__name__}: {exc!r}")
            print(f"epochguard serve: {type(exc).__name__} on connection {conn.id}: {exc}", file=sys.stderr)

    def _drop(self, conn: Connection, why: str) -> None:
        if self.trace is not None:
            self.trace.write({"type": "bad-frame", "step": self.wire.step_no, "conn": conn.id, "error": why})
        self.wire.close(conn)

    def step(self) -> None:
        self.wire.step()
        if self.trace is not None:
            self.trace.step(self.wire.step_no)

    def fire(self, fault: Fault) -> None:
        self.wire.fire(fault)
        if self.trace is not None:
            self.trace.fault(self.wire.step_no, fault)

    def outgoing(self) -> list[tuple[Connection, bytes]]:
        """Encoded answers, in order, for connections still open."""
        out = []
        for conn, header, response in self.wire.drain():
            if isinstance(response, ApiVersionsResponse) and response.version != header.api_version:
                header = codec.RequestHeader(header.api_key, response.version, header.correlation_id, header.client_id)
            try:
                frame = codec.encode_response(header, response)
            except Exception as exc:  # as above: this connection goes, the others stay
                self._drop(conn, f"cannot encode {type(response).__name__}: {exc!r}")
                print(f"epochguard serve: cannot encode {type(response).__name__} v{header.api_version}: {exc}",
                      file=sys.stderr)
                continue
            if self.trace is not None:
                self.trace.write({"type": "response", "step": self.wire.step_no, "conn": conn.id,
                                  "correlation_id": header.correlation_id, "api_key": header.api_key,
                                  "api_version": header.api_version, "client_id": conn.client_id,
                                  "software": conn.software, "size": len(frame), "digest": response_digest(frame)})
            out.append((conn, frame))
        return out

    def closed(self) -> list[Connection]:
        out = list(self.wire.closing)
        self.wire.closing.clear()
        return out

    def close_trace(self, summary: dict[str, Any] | None = None) -> None:
        if self.trace is not None:
            self.trace.write({"type": "end", "step": self.wire.step_no, **(summary or {})})
            self.trace.close()

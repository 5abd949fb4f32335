"""Request frames -> `epochguard.protocol.messages`, response messages -> frames.

The codec is Rust: `epochguard._core` built with the `wire` cargo feature (always on in the package),
over the `kafka-protocol` crate's messages generated from Kafka's JSON schemas (vendored with a
bounded-allocation patch, see vendor/kafka-protocol/PATCHED.md). This module is the server's one
import point for it. `decode_request` takes a frame without its 4-byte size prefix and raises
`UnsupportedVersionError` (with the parsed `.header`) or `CorruptFrameError`; `encode_response`
returns a frame with its size prefix. The client's half (`encode_request`, `decode_response`) is the
mirror, used by `epochguard.client.network`.
"""

from __future__ import annotations

from epochguard._core import (
    CLIENT_API_VERSIONS,
    MAX_FRAME_BYTES,
    WIRE_API_VERSIONS,
    CorruptFrameError,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from epochguard.errors import UnsupportedVersionError

__all__ = ["RequestHeader", "decode_request", "encode_response", "encode_request", "decode_response",
           "UnsupportedVersionError", "CorruptFrameError", "MAX_FRAME_BYTES", "WIRE_API_VERSIONS",
           "CLIENT_API_VERSIONS"]  # what `serve` speaks; what the network client speaks besides (SASL)

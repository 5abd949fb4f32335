"""kafka-python's setting names this client refuses, and why: one table for the consumer and the producer.

A kafka-python user changes one import. A setting this client does not honour is refused by name with
the reason (a `ValueError` when it is set), never accepted and silently ignored; a name neither client
knows is a `TypeError`, as kafka-python raises for an unrecognised config. Names and defaults of what
is supported live with each face (`CONSUMER_DEFAULTS`, `PRODUCER_DEFAULTS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .security import SECURITY_UNSUPPORTED

__all__ = ["COMMON_UNSUPPORTED", "check_settings"]

_ASYNCIO = "the network layer is asyncio"
_SOCKET = "socket options are the operating system's"
_METRICS = "no metrics yet"
_PROXY = "no proxies: connections go straight to the brokers' advertised addresses"

# Refused by both faces.
COMMON_UNSUPPORTED: dict[str, str] = {
    **SECURITY_UNSUPPORTED,
    "api_version": "versions always come from the ApiVersions handshake (every broker this client serves has it)",
    "kafka_client": "the network client is epochguard's own",
    "selector": _ASYNCIO,
    "sock_chunk_bytes": _ASYNCIO,
    "sock_chunk_buffer_count": _ASYNCIO,
    "client_dns_lookup": "addresses are resolved by asyncio's getaddrinfo",
    "bootstrap_timeout_ms": "no separate bootstrap wait: request_timeout_ms bounds every request from the first",
    "connections_max_idle_ms": "idle connections are kept",
    "receive_buffer_bytes": _SOCKET,
    "send_buffer_bytes": _SOCKET,
    "socket_options": _SOCKET,
    "proxy_url": _PROXY,
    "socks5_proxy": _PROXY,
    "allow_auto_create_topics": "Metadata requests never create topics (Java's consumer default); create them "
                                "with Kafka's admin tools",
    "metrics_enabled": _METRICS,
    "metric_reporters": _METRICS,
    "metrics_num_samples": _METRICS,
    "metrics_sample_window_ms": _METRICS,
    "metric_group_prefix": _METRICS,
}


def check_settings(configs: Mapping[str, Any], defaults: Mapping[str, Any], unsupported: Mapping[str, str],
                   face: str) -> None:
    """TypeError for a name that is neither a setting nor a refused one; ValueError, with the reason, for a
    refused one that is set (None counts as unset)."""
    unknown = sorted(set(configs) - set(defaults) - set(unsupported))
    if unknown:
        raise TypeError(f"unrecognised {face} settings: {', '.join(unknown)}")
    for name in sorted(set(configs) & set(unsupported)):
        if configs[name] is not None:
            raise ValueError(f"{name} is not supported: {unsupported[name]}")

"""Replay of an `epochguard serve` trace (`epochguard.wire.trace`) against a fresh cluster.

`replay(path)` rebuilds the run: a fresh `WireCluster` with the recorded seed and addresses, stepped
to each line's step, fed the same frames, faults and disconnects in the same order. Every response
must come out byte-identical (same digest, same order); `ReplayMismatch` says where it did not. It sits
above the endpoint, the engine and the judge it drives; the trace writer below them knows none of it.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from epochguard.errors import EpochGuardError
from epochguard.sim.faults import Fault
from epochguard.types import TopicPartition
from epochguard.wire.endpoint import Endpoint, response_digest
from epochguard.wire.engine import WireCluster
from epochguard.wire.judge import Judge
from epochguard.wire.scenarios import FAULT_TYPES, build
from epochguard.wire.trace import TRACE_VERSION, read_trace

__all__ = ["replay", "ReplayMismatch", "fault_from_json"]


class ReplayMismatch(EpochGuardError):
    """A replayed response differs from the recorded one."""


def fault_from_json(data: dict[str, Any]) -> Fault:
    cls = FAULT_TYPES[data["kind"]]
    fields = dict(data["fields"])
    if "tp" in fields:
        fields["tp"] = TopicPartition(*fields["tp"])
    if "tps" in fields:  # StaleLeaderHint
        fields["tps"] = tuple(TopicPartition(*tp) for tp in fields["tps"])
    return cls(**fields)  # type: ignore[no-any-return]


def replay(path: str | Path, *, check: bool = True, observers: tuple[Any, ...] = ()) -> Judge:
    """Replay a trace; returns the `Judge` that watched the replay (its verdicts are the run's). Further
    `observers` (`epochguard.wire.engine.Observer`) see the replayed exchanges too, after the judge."""
    records = iter(read_trace(path))
    run = _Replay(path, _config(path, next(records, None)))
    run.wire.observers.extend(observers)
    for rec in records:
        run.feed(rec)
    run.judge.finish()
    if check:
        run.check()
    return run.judge


def _config(path: str | Path, config: dict[str, Any] | None) -> dict[str, Any]:
    """The trace's first line, which must be a config record of this trace version."""
    if config is None or config.get("type") != "config":
        raise EpochGuardError(f"{path}: the first line is not a config record")
    if config.get("trace_version") != TRACE_VERSION:
        raise EpochGuardError(
            f"{path}: trace version {config.get('trace_version')} (this epochguard reads {TRACE_VERSION})")
    return config


# Records that happened at a step: the cluster is stepped up to it before they are fed.
_STEPPED = frozenset({"connect", "request", "disconnect", "fault", "last-step", "end"})


class _Replay:
    """A fresh cluster fed a trace's records, and the responses it sends (to compare with the recorded)."""

    def __init__(self, path: str | Path, config: dict[str, Any]) -> None:
        self.path = path
        addresses = {int(b): (h, p) for b, (h, p) in config["addresses"].items()}
        self.wire = WireCluster(build(config["scenario"]), config["seed"], addresses)
        self.judge = Judge()
        self.wire.observers.append(self.judge)
        self.endpoint = Endpoint(self.wire)
        self._digest = response_digest
        self.conns: dict[int, Any] = {}  # recorded connection id -> the replay's connection
        self.produced: list[tuple[int, int, str]] = []  # (conn, correlation id, digest) in order
        self.expected: list[tuple[int, int, str]] = []

    def feed(self, rec: dict[str, Any]) -> None:
        kind = rec.get("type")
        if kind in _STEPPED:
            self._advance(rec.get("step", self.wire.step_no))
        handler = self._HANDLERS.get(kind)
        if handler is not None:
            handler(self, rec)

    def check(self) -> None:
        """Raise `ReplayMismatch` at the first response that differs, or if there are more or fewer."""
        remap = {new.id: old for old, new in self.conns.items()}
        got = [(remap.get(c, c), corr, d) for c, corr, d in self.produced]
        # Not strict: a prefix is compared first so the first differing response is named.
        for i, (want, have) in enumerate(zip(self.expected, got, strict=False)):
            if want != have:
                raise ReplayMismatch(f"{self.path}: response {i + 1} differs: recorded {want}, replayed {have}")
        if len(got) != len(self.expected):
            raise ReplayMismatch(f"{self.path}: {len(self.expected)} responses recorded, {len(got)} replayed")

    def _flush(self) -> None:
        for conn, frame in self.endpoint.outgoing():
            self.produced.append((conn.id, _correlation(frame), self._digest(frame)))

    def _advance(self, step: int) -> None:
        while self.wire.step_no < step:
            self.endpoint.step()
            self._flush()

    def _on_connect(self, rec: dict[str, Any]) -> None:
        conn = self.endpoint.connect(rec["broker"])
        if conn is not None:
            self.conns[rec["conn"]] = conn

    def _on_request(self, rec: dict[str, Any]) -> None:
        conn = self.conns.get(rec["conn"])
        if conn is not None:
            self.endpoint.receive(conn, base64.b64decode(rec["frame"]))
            self._flush()

    def _on_disconnect(self, rec: dict[str, Any]) -> None:
        conn = self.conns.get(rec["conn"])
        if conn is not None:
            self.endpoint.disconnect(conn)
            self._flush()

    def _on_fault(self, rec: dict[str, Any]) -> None:
        self.endpoint.fire(fault_from_json(rec))
        self._flush()

    def _on_response(self, rec: dict[str, Any]) -> None:
        self.expected.append((rec["conn"], rec["correlation_id"], rec["digest"]))

    _HANDLERS: ClassVar[dict[Any, Callable[[_Replay, dict[str, Any]], None]]] = {
        "connect": _on_connect,
        "request": _on_request,
        "disconnect": _on_disconnect,
        "fault": _on_fault,
        "response": _on_response,
    }


def _correlation(frame: bytes) -> int:
    return int.from_bytes(frame[4:8], "big", signed=True)

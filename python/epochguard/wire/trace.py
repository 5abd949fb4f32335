"""The trace of an `epochguard serve` run (JSON lines) and its replay against a fresh cluster.

Lines, in the order things happened: `config` (scenario, seed, trigger, broker addresses), `connect` /
`disconnect`, `request` (the frame, base64, and the step it arrived at), `response` (connection,
correlation id, API key/version, client id, software from ApiVersions v3+, size and digest of the
frame), `fault` (the simulator fault and its fields), `step` marks (run-length: the last step
reached), `trigger`/`settled` notes and `end`. Responses are kept as digests: replay recomputes them.

`replay(path)` rebuilds the run: a fresh `WireCluster` with the recorded seed and addresses, stepped
to each line's step, fed the same frames, faults and disconnects in the same order. Every response
must come out byte-identical (same digest, same order); `ReplayMismatch` says where it did not.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from epochguard.errors import EpochGuardError
from epochguard.sim.faults import Fault
from epochguard.types import TopicPartition

__all__ = ["TraceWriter", "read_trace", "replay", "ReplayMismatch", "TRACE_VERSION", "fault_to_json", "fault_from_json"]

TRACE_VERSION = 1


class ReplayMismatch(EpochGuardError):
    """A replayed response differs from the recorded one."""


def fault_to_json(fault: Fault) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(fault):  # type: ignore[arg-type]
        value = getattr(fault, f.name)
        fields[f.name] = [value.topic, value.partition] if isinstance(value, TopicPartition) else value
    return {"kind": type(fault).__name__, "fields": fields, "describe": fault.describe()}


def fault_from_json(data: dict[str, Any]) -> Fault:
    from epochguard.wire.scenarios import FAULT_TYPES

    cls = FAULT_TYPES[data["kind"]]
    fields = dict(data["fields"])
    if "tp" in fields:
        fields["tp"] = TopicPartition(*fields["tp"])
    return cls(**fields)  # type: ignore[no-any-return]


class TraceWriter:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._f: IO[str] = self.path.open("w", encoding="utf-8")
        self._step = 0

    def write(self, record: dict[str, Any]) -> None:
        step = record.get("step")
        if step is not None and step != self._step:
            self._step = step
        frame = record.get("frame")
        if isinstance(frame, (bytes, bytearray, memoryview)):
            record = {**record, "frame": base64.b64encode(bytes(frame)).decode("ascii")}
        self._f.write(json.dumps(record, separators=(",", ":")) + "\n")

    def step(self, step: int) -> None:
        """Steps are implicit in the records that carry them; the last one is written at the end."""
        self._step = step

    def fault(self, step: int, fault: Fault) -> None:
        self.write({"type": "fault", "step": step, **fault_to_json(fault)})

    def close(self) -> None:
        if not self._f.closed:
            self._f.write(json.dumps({"type": "last-step", "step": self._step}) + "\n")
            self._f.close()


def read_trace(path: str | Path) -> Iterator[dict[str, Any]]:
    with Path(path).open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                if n > 1:  # a run killed mid-write leaves a torn last line
                    return
                raise EpochGuardError(f"{path}: not a trace ({exc})") from exc


def replay(path: str | Path, *, check: bool = True) -> Any:
    """Replay a trace; returns the `Judge` that watched the replay (its verdicts are the run's)."""
    from epochguard.wire.endpoint import Endpoint, response_digest
    from epochguard.wire.engine import WireCluster
    from epochguard.wire.judge import Judge
    from epochguard.wire.scenarios import build

    records = iter(read_trace(path))
    config = next(records, None)
    if config is None or config.get("type") != "config":
        raise EpochGuardError(f"{path}: the first line is not a config record")
    if config.get("trace_version") != TRACE_VERSION:
        raise EpochGuardError(f"{path}: trace version {config.get('trace_version')} (this epochguard reads {TRACE_VERSION})")
    addresses = {int(b): (h, p) for b, (h, p) in config["addresses"].items()}
    wire = WireCluster(build(config["scenario"]), config["seed"], addresses)
    judge = Judge()
    wire.observers.append(judge)
    endpoint = Endpoint(wire)
    conns: dict[int, Any] = {}
    produced: list[tuple[int, int, str]] = []  # (conn, correlation id, digest) in order
    expected: list[tuple[int, int, str]] = []

    def flush() -> None:
        for conn, frame in endpoint.outgoing():
            produced.append((conn.id, _correlation(frame), response_digest(frame)))

    def advance(step: int) -> None:
        while wire.step_no < step:
            endpoint.step()
            flush()

    for rec in records:
        kind = rec.get("type")
        step = rec.get("step", wire.step_no)
        if kind in ("connect", "request", "disconnect", "fault", "last-step", "end"):
            advance(step)
        if kind == "connect":
            conn = endpoint.connect(rec["broker"])
            if conn is not None:
                conns[rec["conn"]] = conn
        elif kind == "request":
            conn = conns.get(rec["conn"])
            if conn is not None:
                endpoint.receive(conn, base64.b64decode(rec["frame"]))
                flush()
        elif kind == "disconnect":
            conn = conns.get(rec["conn"])
            if conn is not None:
                endpoint.disconnect(conn)
                flush()
        elif kind == "fault":
            endpoint.fire(fault_from_json(rec))
            flush()
        elif kind == "response":
            expected.append((rec["conn"], rec["correlation_id"], rec["digest"]))
    judge.finish()
    if check:
        remap = {new.id: old for old, new in conns.items()}
        got = [(remap.get(c, c), corr, d) for c, corr, d in produced]
        for i, (want, have) in enumerate(zip(expected, got)):
            if want != have:
                raise ReplayMismatch(f"{path}: response {i + 1} differs: recorded {want}, replayed {have}")
        if len(got) != len(expected):
            raise ReplayMismatch(f"{path}: {len(expected)} responses recorded, {len(got)} replayed")
    return judge


def _correlation(frame: bytes) -> int:
    return int.from_bytes(frame[4:8], "big", signed=True)

"""The trace of an `epochguard serve` run (JSON lines); `epochguard.wire.replay` replays one.

Lines, in the order things happened: `config` (scenario, seed, trigger, broker addresses), `connect` /
`disconnect`, `request` (the frame, base64, and the step it arrived at), `response` (connection,
correlation id, API key/version, client id, software from ApiVersions v3+, size and digest of the
frame), `fault` (the simulator fault and its fields), `step` marks (run-length: the last step
reached), `trigger`/`settled` notes and `end`. Responses are kept as digests: replay recomputes them.

The writer sits below the endpoint that writes it; the replay, which needs the endpoint, the engine
and the judge, is its own module above them (`epochguard.wire.replay`).
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

__all__ = ["TraceWriter", "read_trace", "TRACE_VERSION", "fault_to_json"]

TRACE_VERSION = 1


def fault_to_json(fault: Fault) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(fault):  # type: ignore[arg-type]
        value = getattr(fault, f.name)
        fields[f.name] = [value.topic, value.partition] if isinstance(value, TopicPartition) else value
    return {"kind": type(fault).__name__, "fields": fields, "describe": fault.describe()}


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

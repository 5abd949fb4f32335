"""The event timeline: what happened, when, where; printed as text or dumped as JSON."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Event:
    """One notable thing: a fault, an election, an ISR change, a truncation, a delivery, a violation."""

    step: int
    time_ms: int
    kind: str
    node: str
    message: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "time_ms": self.time_ms,
            "kind": self.kind,
            "node": self.node,
            "message": self.message,
            "detail": self.detail,
        }

    def __str__(self) -> str:
        return f"[{self.step:>4} {self.time_ms:>6}ms] {self.node:<12} {self.kind:<11} {self.message}"


class Timeline:
    """Append-only event list; the cluster stamps each event with the current step and time."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.step = 0
        self.time_ms = 0

    def record(self, kind: str, node: str, message: str, **detail: Any) -> Event:
        event = Event(self.step, self.time_ms, kind, node, message, detail)
        self.events.append(event)
        return event

    def tail(self, n: int, *, exclude: frozenset[str] = frozenset()) -> list[Event]:
        """The last `n` events (but those of the excluded kinds): the readable trace of a violation."""
        picked: list[Event] = []
        for event in reversed(self.events):
            if event.kind not in exclude:
                picked.append(event)
                if len(picked) == n:
                    break
        return picked[::-1]

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

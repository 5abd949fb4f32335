"""An in-memory message network: per-link delay, jitter, drops and cuts, deterministic delivery order.

Messages on one link arrive in the order they were sent (Kafka relies on per-connection ordering);
across links, ties on the delivery time are broken by send order. Randomness comes from the network's
own seeded stream, so a seed fixes every delay and drop.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Protocol

from epochguard.sim.clock import SeededRandom, VirtualClock

Node = str
"""A network address: "controller", "broker-1", "producer-0", "consumer-0", ..."""


def broker_node(broker_id: int) -> Node:
    return f"broker-{broker_id}"


class Actor(Protocol):
    """A node of the simulation: takes messages, and acts once per step."""

    def receive(self, env: Envelope) -> None: ...

    def tick(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Disconnected:
    """The answer a request gets when its destination process is down: the connection was refused/reset."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """A request or the response to one (`reply_to` = the request's id)."""

    src: Node
    dst: Node
    payload: Any
    msg_id: int
    sent_ms: int
    reply_to: int | None = None

    @property
    def is_response(self) -> bool:
        return self.reply_to is not None


@dataclass(slots=True)
class LinkFault:
    """A fault on the directed link src -> dst until `until_ms` (None = until healed)."""

    extra_delay_ms: int = 0
    drop_rate: float = 0.0
    until_ms: int | None = None


@dataclass(slots=True)
class Network:
    clock: VirtualClock
    rng: SeededRandom
    base_delay_ms: int = 2
    jitter_ms: int = 3
    _queue: list[tuple[int, int, Envelope]] = field(default_factory=list)
    _seq: int = 0
    _last_arrival: dict[tuple[Node, Node], int] = field(default_factory=dict)
    _faults: dict[tuple[Node, Node], LinkFault] = field(default_factory=dict)
    dropped: int = 0
    delivered: int = 0

    # --- sending ---------------------------------------------------------------------------------
    def send(self, src: Node, dst: Node, payload: Any, *, reply_to: int | None = None) -> int:
        """Queue a message; returns its id (what a response's `reply_to` will name)."""
        self._seq += 1
        now = self.clock.now_ms
        env = Envelope(src, dst, payload, self._seq, now, reply_to)
        fault = self._active_fault(src, dst)
        delay = self.base_delay_ms + (self.rng.randint(0, self.jitter_ms) if self.jitter_ms else 0)
        if fault is not None:
            if fault.drop_rate >= 1.0 or (fault.drop_rate > 0 and self.rng.random() < fault.drop_rate):
                self.dropped += 1
                return env.msg_id
            delay += fault.extra_delay_ms
        arrival = max(now + delay, self._last_arrival.get((src, dst), 0))
        self._last_arrival[(src, dst)] = arrival
        heapq.heappush(self._queue, (arrival, env.msg_id, env))
        return env.msg_id

    def reply(self, request: Envelope, payload: Any) -> int:
        return self.send(request.dst, request.src, payload, reply_to=request.msg_id)

    # --- delivering ------------------------------------------------------------------------------
    def due(self) -> list[Envelope]:
        """Pop every message whose arrival time has come, in (arrival, send order)."""
        now = self.clock.now_ms
        out = []
        while self._queue and self._queue[0][0] <= now:
            out.append(heapq.heappop(self._queue)[2])
        self.delivered += len(out)
        return out

    def purge(self, node: Node) -> int:
        """Drop everything `node` had in flight (its send buffers die with the process).

        Requests on their way to it still arrive, and bounce as `Disconnected`."""
        kept = [item for item in self._queue if item[2].src != node]
        purged = len(self._queue) - len(kept)
        heapq.heapify(kept)
        self._queue = kept
        self.dropped += purged
        return purged

    def in_flight(self) -> int:
        return len(self._queue)

    # --- faults ----------------------------------------------------------------------------------
    def set_fault(self, src: Node, dst: Node, fault: LinkFault) -> None:
        self._faults[(src, dst)] = fault

    def heal(self, src: Node, dst: Node) -> None:
        self._faults.pop((src, dst), None)

    def heal_node(self, node: Node) -> None:
        for key in [k for k in self._faults if node in k]:
            del self._faults[key]

    def cut(self, a: Node, b: Node, until_ms: int | None = None) -> None:
        """Both directions between a and b drop everything."""
        self.set_fault(a, b, LinkFault(drop_rate=1.0, until_ms=until_ms))
        self.set_fault(b, a, LinkFault(drop_rate=1.0, until_ms=until_ms))

    def link_clear(self, a: Node, b: Node) -> bool:
        """No fault (cut, drop, delay) on either direction between a and b now."""
        return self._active_fault(a, b) is None and self._active_fault(b, a) is None

    def _active_fault(self, src: Node, dst: Node) -> LinkFault | None:
        fault = self._faults.get((src, dst))
        if fault is not None and fault.until_ms is not None and fault.until_ms <= self.clock.now_ms:
            del self._faults[(src, dst)]
            return None
        return fault

"""Virtual time and seeded randomness: the only sources of time and chance in a simulation.

Nothing in `epochguard.sim` reads the wall clock or the global `random` module, so a seed fixes the
whole run: same seed, same event list.
"""

from __future__ import annotations

import random


class VirtualClock:
    """Milliseconds since the start of the simulation; moves only when the cluster steps."""

    __slots__ = ("_now_ms",)

    def __init__(self, start_ms: int = 0) -> None:
        self._now_ms = start_ms

    @property
    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError(f"time cannot go backwards ({ms} ms)")
        self._now_ms += ms
        return self._now_ms


class SeededRandom(random.Random):
    """`random.Random` with named, independent sub-streams.

    `fork("network")` gives a stream that depends only on the seed and the name, so adding a random
    draw in one component does not shift the draws of another (schedules stay comparable across edits).
    """

    def __init__(self, seed: int | str) -> None:
        super().__init__(str(seed))
        self.seed_value = seed

    def fork(self, name: str) -> SeededRandom:
        return SeededRandom(f"{self.seed_value}/{name}")

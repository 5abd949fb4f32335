"""Two contestants taking turns in one pytest-benchmark run.

On a shared 2-core machine a burst of load lasts seconds: run one client's rounds and then the other's,
and the burst falls on one of them. Here each timed round of ours follows one round of the baseline
(pytest-benchmark's `setup`), so both meet the same load; the baseline's round times go into the JSON as
`extra_info["baseline_seconds"]`, which benches/ratios.py reads (its `TURNS`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def take_turns(benchmark: Any, ours: Callable[[], Any], theirs: Callable[[], Any], *, rounds: int,
               baseline: str, prepare: Callable[[], Any] | None = None) -> list[float]:
    """`rounds` timed rounds of `ours` after a warm-up, each after a round of `theirs` timed here; the
    baseline's round times (the warm-up's dropped). `prepare`, untimed, runs before each of ours."""
    times: list[float] = []

    def turn_of_theirs() -> None:
        began = time.perf_counter()
        theirs()
        times.append(time.perf_counter() - began)
        if prepare is not None:
            prepare()

    benchmark.pedantic(ours, setup=turn_of_theirs, rounds=rounds, warmup_rounds=1, iterations=1)
    del times[:-rounds]
    benchmark.extra_info["baseline"] = baseline
    benchmark.extra_info["baseline_seconds"] = times
    return times

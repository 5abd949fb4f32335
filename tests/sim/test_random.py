"""Randomized fault schedules: no invariant may break under KIP-320, whatever goes wrong.

A bounded number of schedules runs by default; `pytest -m slow` runs many more, longer ones, and also
checks that the offsets-only protocol does break invariants on random schedules (the checker has teeth).
"""

from __future__ import annotations

import collections

import pytest
from hypothesis import HealthCheck, given, settings

from epochguard.sim.clock import SeededRandom
from epochguard.sim.cluster import ClusterConfig
from epochguard.sim.faults import Schedule, random_schedule
from epochguard.sim.scenarios import Scenario, run, run_scenario
from epochguard.types import TopicPartition

from .strategies import schedules

CONFIG = ClusterConfig(partitions=2, producers=(-1, 1))
_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(schedule: Schedule, steps: int, seed: int = 0) -> None:
    # Arbitrary schedules may leave brokers down or links cut: safety only, no progress check.
    result = run(Scenario("hypothesis", CONFIG, schedule, steps, check_progress=False), seed=seed, protocol="kip-320")
    assert result.violations == [], "\n".join(map(str, result.violations))


@pytest.mark.no_mutants  # 12 long schedules: the scenario tests reach the same code in a tenth of the time
@settings(max_examples=12, derandomize=True, **_SETTINGS)  # the same schedules in every CI run
@given(schedules(steps=200, partitions=2))
def test_kip320_survives_random_fault_schedules(schedule: Schedule) -> None:
    _check(schedule, steps=200)


@pytest.mark.slow
@settings(max_examples=300, **_SETTINGS)  # new schedules on every slow run
@given(schedules(steps=600, partitions=2, max_faults=25))
def test_kip320_survives_many_long_random_fault_schedules(schedule: Schedule) -> None:
    _check(schedule, steps=600)


@pytest.mark.parametrize("seed", range(4))
def test_random_scenario_is_clean_under_kip320(seed: int) -> None:
    result = run_scenario("random", seed=seed, steps=300)
    assert result.violations == [], "\n".join(map(str, result.violations))
    assert any(e.kind == "fault" for e in result.events)


def test_random_schedule_is_seeded() -> None:
    kwargs = dict(steps=300, brokers=(1, 2, 3), topic_partitions=(TopicPartition("events", 0),))
    a = random_schedule(SeededRandom(5), **kwargs)
    assert a == random_schedule(SeededRandom(5), **kwargs)
    assert a != random_schedule(SeededRandom(6), **kwargs)


@pytest.mark.slow
def test_random_scenario_survey_both_protocols() -> None:
    """Many seeds of the `random` scenario: none violates under KIP-320; offsets only, some do."""
    found: dict[str, collections.Counter[str]] = {}
    runs, steps = 200, 400
    for protocol in ("kip-320", "pre-kip-320"):
        counter: collections.Counter[str] = collections.Counter()
        for seed in range(runs):
            counter.update(run_scenario("random", seed=seed, protocol=protocol, steps=steps, partitions=3).violated())
        found[protocol] = counter
    print(f"\n{runs} random schedules x {steps} steps: {found}")
    assert not found["kip-320"]
    assert found["pre-kip-320"]


def test_regression_seed_1644_zombie_leader_keeps_its_pending_isr() -> None:
    """A zombie leader whose ISR expansion was committed but never acknowledged must not fall back to
    its smaller committed ISR when the controller later fences it: that raised its HW above the log of
    the (cleanly) elected new leader."""
    result = run_scenario("random", seed=1644, steps=400, partitions=3)
    assert result.violations == [], "\n".join(map(str, result.violations))

from __future__ import annotations

import pytest

from epochguard.sim.scenarios import run_scenario


@pytest.mark.parametrize("name", ["random", "unclean-election"])
@pytest.mark.parametrize("protocol", ["kip-320", "pre-kip-320"])
def test_same_seed_same_events(name: str, protocol: str) -> None:
    a = run_scenario(name, seed=7, protocol=protocol, steps=200)
    b = run_scenario(name, seed=7, protocol=protocol, steps=200)
    assert [e.to_json() for e in a.events] == [e.to_json() for e in b.events]
    assert [v.to_json() for v in a.violations] == [v.to_json() for v in b.violations]
    assert a.consumed == b.consumed


def test_different_seeds_differ() -> None:
    a = run_scenario("random", seed=1, steps=200)
    b = run_scenario("random", seed=2, steps=200)
    assert [e.to_json() for e in a.events] != [e.to_json() for e in b.events]

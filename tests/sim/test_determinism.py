from __future__ import annotations

import pytest

from epochguard.sim.scenarios import run_scenario


@pytest.mark.no_mutants  # both runs carry the same mutant: only nondeterminism can fail this
@pytest.mark.parametrize("name", ["random", "unclean-election"])
@pytest.mark.parametrize("protocol", ["kip-320", "pre-kip-320"])
def test_same_seed_same_events(name: str, protocol: str) -> None:
    a = run_scenario(name, seed=7, protocol=protocol, steps=200)
    b = run_scenario(name, seed=7, protocol=protocol, steps=200)
    assert [e.to_json() for e in a.events] == [e.to_json() for e in b.events]
    assert [v.to_json() for v in a.violations] == [v.to_json() for v in b.violations]
    assert a.consumed == b.consumed


@pytest.mark.no_mutants  # as above
def test_different_seeds_differ() -> None:
    a = run_scenario("random", seed=1, steps=200)
    b = run_scenario("random", seed=2, steps=200)
    assert [e.to_json() for e in a.events] != [e.to_json() for e in b.events]


@pytest.mark.no_mutants  # two interpreter start-ups per mutant
def test_same_seed_same_output_across_processes_and_hash_seeds() -> None:
    """Nothing depends on set or dict ordering of hashed values (PYTHONHASHSEED differs per process)."""
    import os
    import subprocess
    import sys

    outputs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        cmd = [sys.executable, "-m", "epochguard", "simulate", "random", "--seed", "5",
               "--partitions", "3", "--steps", "150", "--json"]
        outputs.add(subprocess.run(cmd, env=env, capture_output=True, text=True, check=False).stdout)
    assert len(outputs) == 1 and '"events"' in outputs.pop()


@pytest.mark.parametrize("name", ["leader-bounce", "random"])
def test_logs_on_disk_behave_like_logs_in_memory(name: str, tmp_path) -> None:
    """On disk, restarts recover every log with PartitionLog.open; the run must not notice."""
    in_memory = run_scenario(name, seed=3, steps=250)
    on_disk = run_scenario(name, seed=3, steps=250, log_dir=tmp_path)
    assert [e.to_json() for e in on_disk.events] == [e.to_json() for e in in_memory.events]
    assert any(e.kind == "restart" for e in on_disk.events) or name == "random"

"""tools/mutants.py: the changed-files selection behind `make mutants CHANGED=1` (mutmut itself is
not run here: `make mutants` does that)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "mutants.py"


@pytest.fixture(scope="module")
def mutants():
    spec = importlib.util.spec_from_file_location("mutants_tool", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_changed_targets_are_package_relative_and_only_the_mutated_modules(mutants, monkeypatch):
    changed = {
        "python/epochguard/broker/partition.py",
        "python/epochguard/client/consumer/requests/fetch.py",
        "python/epochguard/sim/invariants.py",
        "python/epochguard/sim/cluster.py",  # not a target
        "python/epochguard/spark/auditing.py",  # not a target
        "tests/protocol/test_leader.py",
        "rust/epoch_cache.rs",
        "README.md",
    }
    monkeypatch.setattr(mutants, "changed_files", lambda base: changed)
    assert mutants.changed_python_targets("main") == [
        "broker/partition.py",
        "client/consumer/requests/fetch.py",
        "sim/invariants.py",
    ]


def test_every_target_glob_names_an_existing_module(mutants):
    package = TOOL.parent.parent / "python" / "epochguard"
    for pattern in mutants.PY_TARGETS:
        assert list(package.glob(pattern)), pattern

"""Fixtures of the simulator tests."""

from __future__ import annotations

import pytest

from epochguard.sim.cluster import Cluster, ClusterConfig


@pytest.fixture
def cluster() -> Cluster:
    """A quiet cluster (no consumers, no monitor) that has run 40 steps with no violation."""
    c = Cluster(ClusterConfig(consumers=0, monitor=False), seed=0)
    c.run(40)
    assert c.checker.violations == []
    return c

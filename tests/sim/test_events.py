"""Actors see a narrow context and publish what they observe; the checker is one subscriber."""

from __future__ import annotations

from epochguard.sim.cluster import Cluster, ClusterConfig
from epochguard.sim.context import ActorContext
from epochguard.sim.events import Acked, Consumed, StepEnded


def test_actors_get_a_narrow_context_not_the_cluster() -> None:
    cluster = Cluster(ClusterConfig(), seed=1)
    actors = [*cluster.brokers.values(), *cluster.clients]
    assert actors and all(isinstance(a.ctx, ActorContext) and not hasattr(a, "cluster") for a in actors)


def test_published_events_reach_every_subscriber_and_the_checker() -> None:
    cluster = Cluster(ClusterConfig(), seed=1)
    seen: list[object] = []
    cluster.events.subscribe(seen.append)
    cluster.run(60)
    kinds = {type(e) for e in seen}
    assert {Acked, Consumed, StepEnded} <= kinds
    assert sum(isinstance(e, StepEnded) for e in seen) == 60
    acked = [e for e in seen if isinstance(e, Acked)]
    # the checker heard the same acknowledgements, with the acknowledging leader's epoch
    assert len(cluster.checker.acked[acked[0].tp]) == sum(e.tp == acked[0].tp for e in acked)
    assert {r.leader_epoch for r in cluster.checker.acked[acked[0].tp]} != {-1}

"""Script 2 with KIP-966's eligible leader replicas on (4.4's default for a fresh cluster).

The session's cluster runs with ELR off, as Kafka's UncleanLeaderElectionTest does; here it is turned
on (UpdateFeatures) for one run of script 2 and off again. With ELR on, the last ISR member's
controlled shutdown empties the ISR and puts that member in the ELR (ISR [] / ELR [1], where ELR off
keeps ISR [1]); an ElectLeaders UNCLEAN still elects the out-of-sync replica, and everything the
replicas end with, and every answer, is what the ELR-off run gave.
"""

from __future__ import annotations

from typing import Any

import pytest

from epochguard.kafka import KafkaCluster

from .differential import Backend, KafkaBackend, Observer
from .test_differential import flatten, run_unclean_script

pytestmark = [pytest.mark.kafka, pytest.mark.no_mutants]


class _Leaderless(Observer):
    def __init__(self, cluster: KafkaCluster, topic: str) -> None:
        self.cluster, self.topic = cluster, topic
        self.seen: dict[str, Any] = {}

    def leader_stopped(self, b: Backend) -> None:
        self.seen = self.cluster.describe_partition(self.topic, 0)


def test_unclean_election_with_elr_on(kafka_cluster: KafkaCluster, kafka_runs: dict[str, Any]) -> None:
    assert kafka_cluster.elr_level() == 0
    kafka_cluster.set_elr(True)
    backend = KafkaBackend(kafka_cluster, "elr-script2", [1, 2])
    watch = _Leaderless(kafka_cluster, "elr-script2")
    try:
        run = run_unclean_script(backend, empty_follower=False, observer=watch)
    finally:
        backend.close()
        kafka_cluster.set_elr(False)
    assert (watch.seen["leader_id"], watch.seen["isr_nodes"], watch.seen["eligible_leader_replicas"]) == (-1, [], [1])
    without = flatten(kafka_runs["script2"][0])
    with_elr = flatten(run)
    # ISR [] instead of [1] while leaderless: the one field ELR changes
    assert with_elr.pop("leader_stopped leader/epoch/isr") == (-1, 1, ())
    assert without.pop("leader_stopped leader/epoch/isr") == (-1, 1, (1,))
    diffs = [f"{k}: ELR on {with_elr[k]!r} != off {without[k]!r}" for k in without if with_elr[k] != without[k]]
    assert not diffs, "\n".join(diffs)

"""Invariant-checker behaviours at their edges: an unclean election excuses the acks=all records of the
epochs before it and not those acknowledged after it, and a delivery from another broker makes the next
fetch compare the consumer's records again, whatever numbers the brokers and log generations carry."""

from __future__ import annotations

from epochguard.sim import invariants as inv
from epochguard.sim.cluster import Cluster
from epochguard.sim.controller import Election
from epochguard.types import ConsumerRecord

from .checker_support import TP, record


def test_an_unclean_election_excuses_only_the_acks_of_earlier_epochs(cluster: Cluster) -> None:
    checker = cluster.checker
    earlier = checker.acked[TP]
    assert earlier and {r.leader_epoch for r in earlier} == {0}
    cluster.controller.elections.append(Election(cluster.timeline.step, TP, 2, 1, clean=False))
    log = cluster.log(1, TP)
    later = log.log_end_offset
    checker.on_acked(TP, later, b"k", b"acked-in-epoch-1", 1)  # acked after the unclean election
    log.truncate_to(0)  # every record gone: the epoch-0 ones excused, the epoch-1 one not
    checker.check_step()
    [v] = [v for v in checker.violations if v.invariant == inv.ACKED_DURABLE]
    assert f"at offset {later} " in v.message and "acked-in-epoch-1" in v.message


def test_a_delivery_from_another_broker_is_compared_at_the_next_fetch(cluster: Cluster) -> None:
    checker = cluster.checker
    epoch, key, value = cluster.log(2, TP).records_between(0, 1)[0]
    checker.on_consumed("c", ConsumerRecord(TP.topic, TP.partition, 0, 0, 0, key, value, (), epoch), 1)
    checker.on_fetch_served("c", TP, 2, 1)  # offset 0 agrees with broker 2's log
    assert checker.violations == []
    # a broker whose id happens to equal broker 2's log generation serves a record broker 2 lacks
    other = cluster.log(2, TP).generation
    checker.on_consumed("c", record(1, b"forged", epoch), other)
    checker.on_fetch_served("c", TP, 2, 2)
    [v] = checker.violations
    assert v.invariant == inv.CONSUMER_CONTINUITY and "continued at offset 2 on broker 2" in v.message

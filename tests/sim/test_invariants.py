"""The checker on its own: each invariant fails on a doctored cluster or input, and its excuses hold."""

from __future__ import annotations

from epochguard.sim import invariants as inv
from epochguard.sim.cluster import Cluster, ClusterConfig
from epochguard.sim.controller import Election
from epochguard.types import ConsumerRecord, FetchPosition, OffsetResetEvent, TruncationEvent

from .checker_support import TP, record


def _real(cluster: Cluster, offset: int) -> ConsumerRecord:
    epoch, key, value = cluster.log(1, TP).records_between(offset, offset + 1)[offset]
    return ConsumerRecord(TP.topic, TP.partition, offset, 0, 0, key, value, (), epoch)


def _unclean(cluster: Cluster, epoch: int) -> None:
    cluster.controller.elections.append(Election(cluster.timeline.step, TP, 2, epoch, clean=False))


def test_isr_member_with_a_different_record_below_the_hw(cluster: Cluster) -> None:
    follower = cluster.log(2, TP)
    hw = cluster.log(1, TP).high_watermark
    assert hw >= 4 and 2 in cluster.controller.state(TP).isr
    follower.truncate_to(2)
    follower.append_as_leader([(b"k", b"forged")], 0)
    cluster.checker.check_step()
    [v] = cluster.checker.violations
    assert (v.invariant, v.node, v.partition) == (inv.ISR_AGREEMENT, "broker-2", "events-0")
    assert "offset 2" in v.message and "forged" in v.message
    cluster.checker.check_step()
    assert len(cluster.checker.violations) == 1  # reported once


def test_lost_acks_allrecord(cluster: Cluster) -> None:
    acked = cluster.checker.acked[TP]
    assert acked
    cluster.log(1, TP).truncate_to(acked[0].offset)
    cluster.checker.check_step()
    assert inv.ACKED_DURABLE in {v.invariant for v in cluster.checker.violations}


def test_lost_acks_all_record_is_excused_by_a_later_unclean_epoch(cluster: Cluster) -> None:
    _unclean(cluster, epoch=1)
    cluster.log(1, TP).truncate_to(0)
    cluster.checker.check_step()
    assert inv.ACKED_DURABLE not in {v.invariant for v in cluster.checker.violations}


def test_consumer_skip_and_its_excuse(cluster: Cluster) -> None:
    checker = cluster.checker
    for o in (0, 1, 3):
        checker.on_consumed("c", _real(cluster, o), 1)
    assert [v.invariant for v in checker.violations] == [inv.CONSUMER_CONTINUITY]
    assert "skipped offsets 2..2" in checker.violations[0].message
    checker.on_reset("c2", OffsetResetEvent(TP, "latest", "out_of_range", 1, 3, None, 0))
    checker.on_consumed("c3", _real(cluster, 0), 1)
    checker.on_reset("c3", OffsetResetEvent(TP, "latest", "out_of_range", 1, 3, None, 0))
    checker.on_consumed("c3", _real(cluster, 3), 1)
    assert len(checker.violations) == 1


def test_consumer_redelivering_a_differentrecord(cluster: Cluster) -> None:
    checker = cluster.checker
    checker.on_consumed("c", record(0, b"first"), 1)
    checker.on_consumed("c", record(0, b"second"), 1)
    assert any("had delivered" in v.message for v in checker.violations)


def test_consumer_redelivery_after_a_reported_truncation_is_fine(cluster: Cluster) -> None:
    checker = cluster.checker
    checker.on_consumed("c", record(5, b"first"), 1)
    event = TruncationEvent(TP, FetchPosition(6, 0), 5, 0, 1, "rewound", 0)
    checker.on_truncation("c", event)
    checker.on_consumed("c", record(5, b"second", epoch=1), 1)
    assert not [v for v in checker.violations if "had delivered" in v.message]


def test_consumer_continuing_on_a_log_that_lost_what_it_read(cluster: Cluster) -> None:
    checker = cluster.checker
    checker.on_consumed("c", record(0, b"phantom"), 1)  # not what broker 1 has at offset 0 (any more)
    checker.on_fetch_served("c", TP, 1, 1)
    [v] = checker.violations
    assert v.invariant == inv.CONSUMER_CONTINUITY and "continued at offset 1 on broker 1" in v.message
    assert "phantom" in v.message


def test_list_offsets_going_back(cluster: Cluster) -> None:
    checker = cluster.checker
    checker.on_list_offsets("m", TP, 10, 0)
    checker.on_list_offsets("m", TP, 12, 0)
    checker.on_list_offsets("m", TP, 11, 1)
    [v] = checker.violations
    assert v.invariant == inv.LIST_OFFSETS_MONOTONIC and "from 12" in v.message


def test_list_offsets_going_back_after_an_unclean_election_is_fine(cluster: Cluster) -> None:
    checker = cluster.checker
    checker.on_list_offsets("m", TP, 12, 0)
    _unclean(cluster, epoch=1)
    checker.on_list_offsets("m", TP, 8, 1)
    assert checker.violations == []


def test_metadata_epoch_going_back(cluster: Cluster) -> None:
    checker = cluster.checker
    checker.on_metadata_accepted("c", TP, 1, 3)
    checker.on_metadata_accepted("c", TP, 2, 3)  # equal: an ISR change, fine
    checker.on_metadata_accepted("c", TP, None, None)  # no epoch: nothing to compare
    checker.on_metadata_accepted("c", TP, 1, 2)
    [v] = checker.violations
    assert v.invariant == inv.METADATA_EPOCH_MONOTONIC and "epoch 2 after having epoch 3" in v.message
    assert v.trace and v.to_json()["invariant"] == inv.METADATA_EPOCH_MONOTONIC


def test_a_consumer_that_cannot_reach_the_brokers_is_reported_stuck() -> None:
    from epochguard.sim.faults import LinkDelay

    cut = [(20, LinkDelay("consumer-0", f"broker-{b}", drop_rate=1.0)) for b in (1, 2, 3)]
    c = Cluster(ClusterConfig(monitor=False), seed=0, schedule=cut)
    c.run(300)
    c.checker.check_progress()
    [v] = c.checker.violations
    assert v.invariant == inv.CONSUMER_PROGRESS and v.node == "consumer-0" and "stuck at offset" in v.message


def test_a_caught_up_consumer_is_not_reported() -> None:
    c = Cluster(ClusterConfig(monitor=False), seed=0)
    c.run(100)
    c.checker.check_progress()
    assert c.checker.violations == []


def test_a_restarted_consumer_keeps_only_its_committed_history(cluster: Cluster) -> None:
    checker = cluster.checker
    for o in range(6):
        checker.on_consumed("c", record(o, b"old-%d" % o), 1)
    commit_step = cluster.timeline.step + 1  # offset 3 committed after these deliveries...
    cluster.run(2)
    checker.on_truncation("c", TruncationEvent(TP, FetchPosition(6, 0), 1, 0, 5, "rewound", 0))
    checker.on_consumed("c", record(1, b"later-1"), 1)  # ...then a rewind and re-read (not committed)
    assert checker.violations == []
    cluster.run(1)
    checker.on_client_restart("c")
    cluster.run(1)
    checker.on_consumer_resumed("c", TP, 3, commit_step)  # deliveries 3..5 were never committed
    checker.on_consumed("c", record(3, b"new-3"), 1)
    checker.on_consumed("c", record(4, b"new-4"), 1)
    assert checker.violations == []
    checker.on_consumed("c", record(1, b"old-1"), 1)  # what the commit covered: the old record, fine
    assert checker.violations == []
    checker.on_consumed("c", record(2, b"new-2"), 1)  # below the committed offset: still its history
    [v] = checker.violations
    assert "had delivered" in v.message and "offset 2" in v.message

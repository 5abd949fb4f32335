"""A partition's role changes and its state around them (Kafka's `Partition.makeLeader`, `makeFollower`,
`updateAssignmentAndIsr`, `maybeIncrementLeaderHW`), through `Partition`'s public methods: the state
before any LeaderAndIsr, the follower states a new leader starts from, a follower named leader at its
own epoch, what becoming follower clears, the topic id, and the high watermark's ISR members."""

from __future__ import annotations

import dataclasses

from protocol_support import TP, recs, state

from epochguard import Partition, PartitionLog
from epochguard.errors import Errors
from epochguard.protocol.messages import FetchPartition, LeaderIdAndEpoch

LAG_MAX = 10_000


def fetch_from(p: Partition, replica: int, offset: int, now_ms: int, *, last_fetched_epoch: int = -1):
    return p.fetch(FetchPartition(TP.topic, TP.partition, offset, p.leader_epoch, last_fetched_epoch),
                   replica_id=replica, now_ms=now_ms)


def test_a_partition_before_its_first_leader_and_isr_has_kafkas_initial_state():
    """Kafka: leaderEpoch = InitialLeaderEpoch - 1 and partitionEpoch = InitialPartitionEpoch - 1 (-1
    both), no leader, empty assignment and ISR, no epoch start offset, no ISR change in flight."""
    p = Partition(TP, 1, PartitionLog(TP))
    assert (p.leader_id, p.leader_epoch, p.partition_epoch) == (None, -1, -1)
    assert (p.assignment, p.isr, p.maximal_isr, p.replicas) == ((), (), (), {})
    assert p.leader_epoch_start_offset is None
    assert not p.is_leader and not p.isr_change_in_flight
    assert p.poll_isr_change(10 * LAG_MAX) is None


def test_a_partition_with_no_leader_yet_refuses_a_follower_fetch_with_an_empty_leader_hint():
    p = Partition(TP, 1, PartitionLog(TP))
    answer = p.fetch(FetchPartition(TP.topic, TP.partition, 0), replica_id=2)
    assert answer.error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert answer.current_leader == LeaderIdAndEpoch()  # -1 / -1: no leader to point at


def test_a_partition_speaks_kip_320_unless_told_otherwise():
    """The default protocol answers a follower's last fetched epoch with a diverging epoch."""
    p = Partition(TP, 1, PartitionLog(TP))
    p.make_leader(state(1, 1, isr=(1, 2), replicas=(1, 2)), 0)
    p.append_records_to_leader(recs(3), acks=1, min_insync_replicas=1, now_ms=0)
    p.make_leader(state(1, 2, isr=(1, 2), replicas=(1, 2)), 0)
    p.append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0)
    answer = fetch_from(p, 2, 5, 0, last_fetched_epoch=0)  # epoch 0 never existed here
    assert answer.diverging_epoch is not None and answer.records == b""


def test_a_new_leader_counts_only_its_isr_as_caught_up_at_the_election():
    """`resetReplicaState`: lastCaughtUpTimeMs = now for an ISR member, 0 for any other replica. A replica
    the controller then adds to the ISR at the same epoch, never having fetched, is out of sync as
    soon as replica.lag.time.max.ms has passed since time 0."""
    p = Partition(TP, 1, PartitionLog(TP), replica_lag_time_max_ms=LAG_MAX)
    p.make_leader(state(1, 3, isr=(1, 2), replicas=(1, 2, 3)), 5_000)
    assert {r: (s.broker_id, s.last_caught_up_time_ms) for r, s in p.replicas.items()} == {2: (2, 5_000), 3: (3, 0)}
    p.make_leader(state(1, 3, isr=(1, 2, 3), replicas=(1, 2, 3), partition_epoch=1), 5_000)
    fetch_from(p, 2, 0, LAG_MAX)  # 2 is at the (empty) log's end
    shrink = p.poll_isr_change(LAG_MAX + 1)
    assert shrink is not None and shrink.new_isr == (1, 2)


def test_becoming_follower_clears_the_epoch_start_offset_and_the_follower_states():
    p = Partition(TP, 1, PartitionLog(TP))
    p.make_leader(state(1, 3, isr=(1, 2), replicas=(1, 2)), 0)
    p.append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0)
    assert p.leader_epoch_start_offset == 0 and set(p.replicas) == {2}
    assert p.make_follower(state(2, 4, isr=(1, 2), replicas=(1, 2))) is True
    assert (p.leader_epoch_start_offset, p.replicas) == (None, {})


def test_a_follower_named_leader_at_its_own_epoch_becomes_leader_and_tracks_its_followers():
    """A same-epoch LeaderAndIsr naming this broker: it becomes leader (`makeLeader` returns isNewLeader)
    without a new epoch start, and learns each follower's position from its fetches."""
    p = Partition(TP, 1, PartitionLog(TP))
    p.make_follower(state(2, 4, isr=(1, 2), replicas=(1, 2)))
    assert p.make_leader(state(1, 4, isr=(1, 2), replicas=(1, 2)), 100) is True
    assert p.is_leader and (p.leader_epoch, p.leader_epoch_start_offset) == (4, None)
    p.append_records_to_leader(recs(3), acks=1, min_insync_replicas=1, now_ms=100)
    assert fetch_from(p, 2, 2, 200).error_code == Errors.NONE
    assert (p.replicas[2].log_end_offset, p.log.high_watermark) == (2, 2)


def test_the_topic_id_is_taken_from_a_state_that_has_one_and_kept_otherwise():
    p = Partition(TP, 1, PartitionLog(TP))
    with_id = dataclasses.replace(state(1, 3, isr=(1,), replicas=(1,)), topic_id="AAAAAAAAAAAAAAAAAAAAAA")
    p.make_leader(with_id, 0)
    assert p.topic_id == "AAAAAAAAAAAAAAAAAAAAAA"
    p.make_leader(state(1, 4, isr=(1,), replicas=(1,)), 0)  # no topic id in this one
    assert p.topic_id == "AAAAAAAAAAAAAAAAAAAAAA"


# --- the high watermark and its ISR --------------------------------------------------------------------
def test_an_isr_member_the_leader_has_not_heard_from_holds_the_high_watermark():
    """A replica added to assignment and ISR at the same epoch has no follower state yet: its end offset
    is unknown, so the HW stays where it is until it fetches."""
    p = Partition(TP, 1, PartitionLog(TP))
    p.make_leader(state(1, 3, isr=(1,), replicas=(1,)), 0)
    p.append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0)
    assert p.log.high_watermark == 2
    p.make_leader(state(1, 3, isr=(1, 3), replicas=(1, 3), partition_epoch=1), 0)
    p.append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0)
    assert 3 not in p.replicas and p.log.high_watermark == 2
    fetch_from(p, 3, 4, 10)
    assert p.log.high_watermark == 4


def test_only_a_leader_moves_its_high_watermark():
    p = Partition(TP, 2, PartitionLog(TP))
    p.make_follower(state(1, 3, isr=(1, 2), replicas=(1, 2)))
    assert p.maybe_increment_high_watermark(0) is False
    assert p.log.high_watermark == 0

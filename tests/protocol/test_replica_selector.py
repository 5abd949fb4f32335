"""KIP-392's preferred read replica on the leader: Kafka's `RackAwareReplicaSelector`
(`ReplicaSelectorTest.testSameRackSelector`) and `ReplicaManager.findPreferredReadReplica`
(`ReplicaManagerTest.testReplicaSelector`, `testPreferredReplicaAsFollower`, `testPreferredReplicaAsLeader`,
`testPreferredReplicaAsLeaderWhenSameRackFollowerIsOutOfIsr`,
`testFetchShouldReturnImmediatelyWhenPreferredReadReplicaIsDefined`), plus the conditions those tests leave
implicit: a follower is named only if its log, as the leader knows it, holds the fetch offset, only to
consumers on Fetch v11+, and never when the metadata has no endpoint for it."""

from __future__ import annotations

from protocol_support import CONTROLLER, TP, recs, state

from epochguard import ReplicaManager
from epochguard.broker.replica_selector import RackAwareReplicaSelector, ReplicaView
from epochguard.errors import Errors
from epochguard.protocol.messages import BrokerRegistration, FetchPartition, FetchRequest

RACKS = {1: "rack-a", 2: "rack-b", 3: "rack-b"}


def _view(broker: int, leo: int, since_ms: int, rack: str) -> ReplicaView:
    return ReplicaView(broker, leo, since_ms, rack)


def test_same_rack_selector():
    """`ReplicaSelectorTest.testSameRackSelector`: replica 3 (rack-b, offset 4, caught up 2 ms ago) beats
    replica 2 (rack-b, offset 3); no replica in the rack, or the leader in it: the leader."""
    leader = _view(0, 4, 0, "rack-a")
    replicas = [leader, _view(1, 2, 5, "rack-a"), _view(2, 3, 3, "rack-b"), _view(3, 4, 2, "rack-b")]
    selector = RackAwareReplicaSelector()
    assert selector.select("rack-b", replicas, leader) == replicas[3]
    assert selector.select("not-a-rack", replicas, leader) == leader
    assert selector.select("rack-a", replicas, leader) == leader
    assert selector.select("", replicas, leader) == leader  # no client.rack


def test_ties_on_the_offset_go_to_the_replica_caught_up_last_then_the_higher_id():
    leader = _view(1, 9, 0, "rack-a")
    stale, fresh, twin = _view(2, 9, 50, "rack-b"), _view(3, 9, 10, "rack-b"), _view(4, 9, 10, "rack-b")
    selector = RackAwareReplicaSelector()
    assert selector.select("rack-b", [leader, stale, fresh], leader) == fresh
    assert selector.select("rack-b", [leader, fresh, twin], leader) == twin
    unknown = ReplicaView(5, 20, 0, None, known=False)  # Node.noNode(): no rack, never chosen
    assert selector.select("rack-b", [leader, unknown, stale], leader) == stale


def leader(isr=(1, 2, 3), selector=True, racks=RACKS) -> ReplicaManager:
    """Broker 1 leads t-0 (epoch 3, replicas 1-3) holding 10 records; brokers registered with `racks`."""
    rm = ReplicaManager(1, controller_id=CONTROLLER, replica_selector=RackAwareReplicaSelector() if selector else None)
    rm.update_brokers(BrokerRegistration(b, 1, rack=rack) for b, rack in racks.items())
    rm.apply_partition_state(state(1, 3, isr=isr), 0)
    rm.partitions[TP].append_records_to_leader(recs(10), acks=1, min_insync_replicas=1, now_ms=0)
    return rm


def follower_fetch(rm: ReplicaManager, replica: int, offset: int, now_ms: int = 0, log_start: int = 0) -> None:
    request = FetchRequest((FetchPartition(TP.topic, 0, offset, 3, log_start_offset=log_start),), replica_id=replica,
                           replica_epoch=1)
    assert rm.handle(replica, request, now_ms).partitions[0].error_code == Errors.NONE


def consumer_fetch(rm: ReplicaManager, offset: int, rack: str = "rack-b", version: int = 17, epoch: int = 3,
                   now_ms: int = 0):
    request = FetchRequest((FetchPartition(TP.topic, 0, offset, epoch),), rack_id=rack, version=version,
                           max_wait_ms=5000)
    [data] = rm.handle(-1, request, now_ms).partitions
    return data


def test_the_leader_names_a_same_rack_follower_and_reads_nothing():
    """`testFetchShouldReturnImmediatelyWhenPreferredReadReplicaIsDefined`: the leader must have heard the
    follower's fetch offset; then a rack-b consumer is sent to it with the leader's offsets, no records."""
    rm = leader()
    assert consumer_fetch(rm, 0).preferred_read_replica == -1  # no follower has fetched yet: read here
    follower_fetch(rm, 2, 10)
    data = consumer_fetch(rm, 4)
    assert data.error_code == Errors.NONE and data.preferred_read_replica == 2 and data.records == b""
    log = rm.partitions[TP].log
    assert (data.high_watermark, data.log_start_offset, data.last_stable_offset) == (
        log.high_watermark, log.log_start_offset, log.last_stable_offset)


def test_the_most_caught_up_same_rack_follower_is_named():
    rm = leader()
    follower_fetch(rm, 2, 6)
    follower_fetch(rm, 3, 10)
    assert consumer_fetch(rm, 4).preferred_read_replica == 3
    assert consumer_fetch(rm, 8).preferred_read_replica == 3  # 2 lacks offset 8 anyway


def test_no_follower_for_the_leaders_rack_nor_without_a_rack():
    """`testReplicaSelector` / `testPreferredReplicaAsLeader`: the selector picks the leader: None."""
    rm = leader()
    follower_fetch(rm, 2, 10)
    assert consumer_fetch(rm, 4, rack="rack-a").preferred_read_replica == -1
    assert consumer_fetch(rm, 4, rack="").preferred_read_replica == -1
    assert consumer_fetch(rm, 4, rack="rack-z").preferred_read_replica == -1
    assert rm.find_preferred_read_replica(rm.partitions[TP], FetchRequest((), rack_id="rack-a"), 1, 0) is None


def test_a_follower_whose_log_lacks_the_offset_is_not_named():
    """Kafka's `replicaState.logEndOffset >= fetchOffset && replicaState.logStartOffset <= fetchOffset`: a
    follower that has (as the leader knows it) fetched up to 6 is not named for offset 7; one whose log
    starts at 3 not for offset 2. A wrong bound (`>` or none) would send the consumer to a replica answering
    OFFSET_OUT_OF_RANGE."""
    rm = leader()
    follower_fetch(rm, 2, 6, log_start=3)
    assert consumer_fetch(rm, 6).preferred_read_replica == 2
    assert consumer_fetch(rm, 3).preferred_read_replica == 2
    assert consumer_fetch(rm, 7).preferred_read_replica == -1
    assert consumer_fetch(rm, 2).preferred_read_replica == -1


def test_a_same_rack_follower_out_of_the_isr_is_not_named():
    """`testPreferredReplicaAsLeaderWhenSameRackFollowerIsOutOfIsr` (KAFKA-14372)."""
    rm = leader(isr=(1, 3))
    follower_fetch(rm, 2, 10)
    assert 2 not in rm.partitions[TP].isr
    assert consumer_fetch(rm, 4).preferred_read_replica == -1


def test_a_fenced_or_unregistered_follower_has_no_endpoint_and_is_not_named():
    rm = leader(racks={1: "rack-a", 3: "rack-b"})  # broker 2 unknown to the metadata
    follower_fetch(rm, 2, 10)
    assert consumer_fetch(rm, 4).preferred_read_replica == -1
    rm.update_brokers([BrokerRegistration(2, 1, rack="rack-b")])
    assert consumer_fetch(rm, 4).preferred_read_replica == 2
    rm.update_brokers([BrokerRegistration(2, 1, fenced=True, rack="rack-b")])
    assert consumer_fetch(rm, 4).preferred_read_replica == -1


def test_only_consumers_on_fetch_v11_or_later_and_only_with_a_selector():
    rm = leader()
    follower_fetch(rm, 2, 10)
    assert consumer_fetch(rm, 4, version=10).preferred_read_replica == -1  # no ClientMetadata before v11
    assert consumer_fetch(rm, 4, version=11).preferred_read_replica == 2
    follower = FetchRequest((FetchPartition(TP.topic, 0, 4, 3),), replica_id=3, replica_epoch=1, rack_id="rack-b")
    assert rm.handle(3, follower, 0).partitions[0].preferred_read_replica == -1  # replication never redirected
    plain = leader(selector=False)
    follower_fetch(plain, 2, 10)
    assert consumer_fetch(plain, 4).preferred_read_replica == -1  # replica.selector.class unset: Kafka's default


def test_a_follower_never_names_a_replica_and_serves_the_consumer():
    """`testPreferredReplicaAsFollower`: only the leader computes a preferred replica; a follower serves a
    v11+ consumer up to its high watermark."""
    rm = ReplicaManager(2, controller_id=CONTROLLER, replica_selector=RackAwareReplicaSelector())
    rm.update_brokers(BrokerRegistration(b, 1, rack=rack) for b, rack in RACKS.items())
    rm.apply_partition_state(state(1, 3), 0)
    data = consumer_fetch(rm, 0)
    assert data.error_code == Errors.NONE and data.preferred_read_replica == -1


def test_the_epoch_is_checked_before_naming_a_replica():
    """Kafka's `fetchOffsetSnapshot(currentLeaderEpoch, ...)` on the preferred-replica path."""
    rm = leader()
    follower_fetch(rm, 2, 10)
    fenced = consumer_fetch(rm, 4, epoch=2)
    assert fenced.error_code == Errors.FENCED_LEADER_EPOCH and fenced.preferred_read_replica == -1
    assert consumer_fetch(rm, 4, epoch=4).error_code == Errors.UNKNOWN_LEADER_EPOCH
    assert consumer_fetch(rm, 4, epoch=-1).preferred_read_replica == 2  # no epoch: no fencing

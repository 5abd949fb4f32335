"""Broker API versions in the protocol state machines: brokers answer ApiVersions from their table;
the consumer validates only against OffsetForLeaderEpoch v3+ and not before it knows the broker's
versions (OffsetFetcherTest, SubscriptionStateTest); a follower whose leader cannot answer
OffsetsForLeaderEpoch truncates to its high watermark (AbstractFetcherThreadTest)."""

from __future__ import annotations

from protocol_support import CONTROLLER, TP, Network, recs, state
from test_consumer import Cluster, consumer, truncated_cluster

from epochguard.broker.fetcher import FetchState
from epochguard.broker.replica_manager import ReplicaManager
from epochguard.errors import Errors
from epochguard.protocol.api_versions import (
    BROKER_API_VERSIONS,
    ApiKey,
    ApiVersionRange,
    ApiVersionsRequest,
    ApiVersionsResponse,
    NodeApiVersions,
)
from epochguard.protocol.messages import FetchRequest, OffsetsForLeaderEpochRequest
from epochguard.storage.log import PartitionLog
from epochguard.types import LeaderAndEpoch, OffsetAndMetadata

OLD_BROKER = BROKER_API_VERSIONS.with_range(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 2)


def test_broker_answers_api_versions_from_its_table():
    assert ReplicaManager(1).handle(-1, ApiVersionsRequest(), 0) == ApiVersionsResponse(tuple(BROKER_API_VERSIONS))
    old = ReplicaManager(1, api_versions=OLD_BROKER)
    answer = old.handle(-1, ApiVersionsRequest(), 0)
    assert answer.node_api_versions == OLD_BROKER
    refused = old.handle(-1, ApiVersionsRequest(version=9), 0)  # a version it does not serve: v0 fallback
    assert refused.error_code == Errors.UNSUPPORTED_VERSION and refused.version == 0


def test_validation_awaits_the_node_api_versions():
    """OffsetFetcherTest.testOffsetValidationAwaitsNodeApiVersion: a position awaiting validation is
    not sent to a broker whose versions are unknown; the versions are asked first."""
    cluster = truncated_cluster()
    c = consumer()
    cluster.run(c)
    c.poll()
    c.forget_api_versions(2)  # as after a disconnect from broker 2
    cluster.hold_types = (ApiVersionsRequest,)  # broker 2's answer is slow
    cluster.meta = (2, 2)
    c.metadata.request_update()
    cluster.sent.clear()
    cluster.run(c, now_ms=200, rounds=4)
    assert c.awaiting_validation(TP)
    assert cluster.sent_of(OffsetsForLeaderEpochRequest) == []
    assert [n for n, r in cluster.sent if isinstance(r, ApiVersionsRequest)].count(2) == 1  # asked once
    cluster.hold_types = ()
    node, request, response = cluster.hold.pop()
    c.on_response(node, request, response, 250)
    cluster.run(c, now_ms=300, rounds=1)
    [validation] = cluster.sent_of(OffsetsForLeaderEpochRequest)
    assert validation.version == 4  # the newest both sides serve
    assert not c.awaiting_validation(TP)
    assert [e.resolution for e in c.truncations] == ["rewound"]


def test_validation_skipped_for_an_old_broker():
    """OffsetFetcherTest.testOffsetValidationSkippedForOldBroker / SubscriptionStateTest: a leader whose
    OffsetForLeaderEpoch stops below v3 gets no validation; the position moves to it as fetchable."""
    cluster = truncated_cluster()
    cluster.brokers[2].api_versions = OLD_BROKER
    c = consumer()
    cluster.run(c)
    c.poll()
    assert c.node_api_versions(2) == OLD_BROKER
    cluster.meta = (2, 2)
    c.metadata.request_update()
    cluster.sent.clear()
    cluster.run(c, now_ms=200, rounds=3)
    assert cluster.sent_of(OffsetsForLeaderEpochRequest) == []
    assert c.truncations == [] and not c.awaiting_validation(TP)
    assert c.position(TP).current_leader == LeaderAndEpoch(2, 2)
    assert [n for n, r in cluster.sent if isinstance(r, FetchRequest)][-1] == 2  # fetching from the new leader


def test_committed_epoch_against_an_old_broker_completes_without_validation():
    """`validatePositionsAsync`: a position awaiting validation at a pre-v3 broker is completed."""
    cluster = Cluster({1: [(0, 2), (1, 4)]}, leader=1, epoch=1)
    cluster.brokers[1].api_versions = OLD_BROKER
    cluster.coordinator.offsets["g"] = {TP: OffsetAndMetadata(2, "", 0)}
    c = consumer(group_id="g", coordinator_id=500)
    cluster.run(c)
    assert cluster.sent_of(OffsetsForLeaderEpochRequest) == []
    assert [r.offset for r in c.poll().records()] == [2, 3, 4, 5]


def test_api_versions_refused_at_a_new_version_is_retried_at_the_broker_s_version():
    cluster = Cluster({1: [(0, 2)]}, leader=1, epoch=1)
    narrow = NodeApiVersions([*(r for r in BROKER_API_VERSIONS if r.api_key != ApiKey.API_VERSIONS),
                              ApiVersionRange(ApiKey.API_VERSIONS, 0, 2)])
    cluster.brokers[1].api_versions = narrow
    c = consumer()
    cluster.run(c)
    sent = [r.version for n, r in cluster.sent if n == 1 and isinstance(r, ApiVersionsRequest)]
    assert sent == [3, 2]
    assert c.node_api_versions(1) == narrow


def test_follower_truncates_to_high_watermark_when_the_leader_cannot_answer_offsets_for_leader_epoch():
    """AbstractFetcherThreadTest.testTruncateToHighWatermarkIfLeaderEpochRequestNotSupported: no
    OffsetsForLeaderEpoch and no truncation on fetch: the follower truncates to its HW and fetches."""
    no_epochs = BROKER_API_VERSIONS.without(ApiKey.OFFSET_FOR_LEADER_EPOCH).with_range(ApiKey.FETCH, 4, 11)
    leader_log = PartitionLog(TP)
    for epoch in (0, 2, 4, 5):
        leader_log.append_as_leader(recs(1, f"L{epoch}-"), epoch, timestamp_ms=1000)
    follower_log = PartitionLog(TP)
    for epoch in (0, 2, 4):
        follower_log.append_as_leader(recs(1, f"F{epoch}-"), epoch, timestamp_ms=1000)
    follower_log.update_high_watermark(2)
    leader = ReplicaManager(1, controller_id=CONTROLLER, logs={TP: leader_log}, api_versions=no_epochs)
    follower = ReplicaManager(2, controller_id=CONTROLLER, logs={TP: follower_log},
                              peer_api_versions={1: no_epochs}.get)
    leader.apply_partition_state(state(1, 5, isr=(1, 2), replicas=(1, 2)), 0)
    follower.apply_partition_state(state(1, 5, isr=(1, 2), replicas=(1, 2)), 0)
    assert follower_log.log_end_offset == 2
    [t] = follower.fetcher.truncations
    assert (t.from_offset, t.to_offset, t.reason) == (3, 2, "high_watermark")
    assert follower.fetcher.states[TP].state == FetchState.FETCHING
    net = Network({1: leader, 2: follower})
    net.pump(0)
    assert not any(isinstance(r, OffsetsForLeaderEpochRequest) for _, _, r, _ in net.log)
    fetches = [r for src, _, r, _ in net.log if src == 2 and isinstance(r, FetchRequest)]
    assert fetches[0].partitions[0].fetch_offset == 2 and fetches[0].partitions[0].last_fetched_epoch == -1
    assert follower_log.log_end_offset == 4

"""Consumer behaviour pinned by Apache Kafka's own client tests (OffsetFetcherTest, FetcherTest,
SubscriptionStateTest), driven through the public Consumer API. Each test names the Kafka test whose
behaviour it takes."""

from __future__ import annotations

import pytest
from protocol_support import TP
from test_consumer import Cluster, consumer, truncated_cluster

from epochguard.client.consumer import Consumer
from epochguard.client.metadata import ClientMetadata
from epochguard.errors import OffsetOutOfRangeError
from epochguard.protocol.api_versions import BROKER_API_VERSIONS
from epochguard.protocol.messages import (
    ListOffsetsRequest,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    OffsetsForLeaderEpochRequest,
)
from epochguard.types import LeaderAndEpoch, OffsetAndMetadata


def test_first_validation_pass_repoints_positions_at_the_current_leader():
    """OffsetFetcherUtils.validatePositionsOnMetadataChange with metadataUpdateVersion starting at -1:
    the first pass re-points every position, so metadata the consumer did not fetch itself (a shared
    cache) triggers validation before any fetch is sent."""
    metadata = ClientMetadata(topics=["t"])
    c = Consumer(bootstrap=(1,), reset_policy="none", metadata=metadata, api_versions={2: BROKER_API_VERSIONS})
    c.assign([TP])
    c.seek(TP, OffsetAndMetadata(4, leader_epoch=1))  # no leader known yet
    part = MetadataResponsePartition(0, 2, 2, (2,), (2,))
    metadata.update(MetadataResponse((MetadataResponseTopic("t", (part,), "id"),), (MetadataResponseBroker(2),)), 0)
    sent = c.poll_requests(0)
    validations = [(n, r) for n, r in sent if isinstance(r, OffsetsForLeaderEpochRequest)]
    assert [(n, r.partitions[0].leader_epoch, r.partitions[0].current_leader_epoch) for n, r in validations] == [(2, 1, 2)]
    assert c.position(TP).current_leader == LeaderAndEpoch(2, 2)


def test_out_of_range_without_policy_raises_on_every_poll_until_the_position_moves():
    """FetcherTest.testFetchOffsetOutOfRangeException: one OFFSET_OUT_OF_RANGE answer, collected twice,
    raises twice; no reset is requested. A seek clears it."""
    cluster = Cluster({1: [(0, 4)]}, leader=1, epoch=1)
    c = consumer("none")
    c.seek(TP, 10)
    cluster.run(c, rounds=2)
    for _ in range(2):
        with pytest.raises(OffsetOutOfRangeError) as info:
            c.poll()
        assert info.value.offset_out_of_range_partitions == {TP: 10}
    assert not c.awaiting_reset(TP)
    c.seek(TP, 1)
    assert c.poll().count() == 0  # the stale error went with the old position
    cluster.run(c, now_ms=1000)
    assert [r.offset for r in c.poll().records()] == [1, 2, 3]


def test_list_offsets_with_an_unknown_epoch_requests_no_metadata_update():
    """OffsetFetcherTest.testListOffsetNoUpdateMissingEpoch: metadata without leader epochs, a reset
    answered with epoch 1: the reset is done, no metadata update is requested, no last-seen epoch."""
    cluster = Cluster({1: [(1, 5)]}, leader=1, epoch=1)
    cluster.meta = (1, -1)  # leader known, no epoch
    c = consumer("latest")
    cluster.run(c, rounds=1)  # metadata
    assert not c.metadata.update_requested
    cluster.run(c, rounds=1)  # the reset
    assert len(cluster.sent_of(ListOffsetsRequest)) == 1
    assert not c.awaiting_reset(TP) and c.position(TP).offset == 5
    assert not c.metadata.update_requested
    assert c.metadata.last_seen_leader_epoch(TP) is None
    assert len(cluster.sent_of(MetadataRequest)) == 1


def test_epochless_metadata_resumes_validation_when_metadata_ages_out():
    """With no epoch in the metadata nothing is validated (Kafka); the periodic refresh
    (metadata.max.age.ms) brings the epoch back and validation resumes."""
    cluster = truncated_cluster()
    c = consumer()
    cluster.run(c)
    c.poll()
    cluster.meta = (2, -1)
    c.metadata.request_update()
    cluster.run(c, now_ms=200, rounds=1)
    assert c.position(TP).current_leader == LeaderAndEpoch(2, None)
    assert not c.metadata.update_requested
    cluster.meta = (2, 2)
    age = c.metadata.metadata_max_age_ms
    cluster.run(c, now_ms=200 + age, rounds=3)
    assert [e.resolution for e in c.truncations] == ["rewound"]

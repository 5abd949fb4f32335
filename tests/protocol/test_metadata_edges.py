"""ClientMetadata behaviours pinned through the public API: restricted topic sets, the defaults, and the
public update counter."""

from __future__ import annotations

from epochguard import ClientMetadata, TopicPartition
from epochguard.client.metadata import PartitionMetadata
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

TP = TopicPartition("a", 0)


def response(epoch: int = 3, topic: str = "a") -> MetadataResponse:
    part = MetadataResponsePartition(0, 1, epoch, (1,), (1,))
    return MetadataResponse((MetadataResponseTopic(topic, (part,), f"id-{topic}"),), (MetadataResponseBroker(1),), version=12)


def test_adding_a_topic_to_a_restricted_set_requests_a_refresh():
    md = ClientMetadata(topics=["a"])
    assert md.build_request(0).topics == ("a",)
    md.update(response(), 0)
    assert not md.update_requested
    md.add_topics(["a"])
    assert not md.update_requested  # nothing new
    md.add_topics(["a", "b"])
    assert md.update_requested
    assert md.should_update(100) and md.build_request(100).topics == ("a", "b")


def test_adding_topics_to_an_all_topics_metadata_asks_for_nothing():
    md = ClientMetadata()
    md.update(response(), 0)
    md.add_topics(["b"])
    assert not md.update_requested and md.topics is None
    assert md.build_request(0).topics is None


def test_defaults():
    md = ClientMetadata()
    assert (md.protocol, md.topics, md.refresh_backoff_ms, md.metadata_max_age_ms, md.updates) == (
        "kip-320",
        None,
        100,
        300_000,
        0,
    )
    assert md.update_requested and md.should_update(0)  # nothing known yet: ask at once


def test_the_default_max_age_and_backoff_schedule_refreshes():
    md = ClientMetadata()
    md.build_request(1_000)
    md.update(response(), 1_000)
    assert md.time_to_next_update(1_000) == 300_000
    assert not md.should_update(300_999) and md.should_update(301_000)
    md.request_update()
    assert md.time_to_next_update(1_050) == 50  # requested: only the backoff since the last attempt
    assert not md.should_update(1_099) and md.should_update(1_100)
    md.failed_update(2_000)
    assert not md.should_update(2_099) and md.should_update(2_100)


def test_the_default_protocol_rejects_a_lower_epoch():
    md = ClientMetadata()
    md.update(response(epoch=3), 0)
    assert md.update(response(epoch=2), 1).rejected == (TP,)
    assert md.current_leader(TP).epoch == 3


def test_the_update_counter_counts_every_applied_response_and_nothing_else():
    md = ClientMetadata()
    assert md.updates == 0
    md.update(response(epoch=3), 0)
    assert md.updates == 1
    md.update(response(epoch=2), 1)  # rejected partition, still an applied response
    assert md.updates == 2
    md.failed_update(2)
    md.request_update()
    md.build_request(3)
    md.update_last_seen_epoch_if_newer(TP, 9)
    assert md.updates == 2


# --- what the cache keeps of a partition --------------------------------------------------------
BROKERS = tuple(MetadataResponseBroker(n) for n in (1, 2, 3, 4))


def detailed(epoch: int, *, version: int = 12, leader: int = 1) -> MetadataResponse:
    """A partition whose replicas, ISR, offline replicas and error all differ, so a field taken from
    the wrong place shows."""
    part = MetadataResponsePartition(0, leader, epoch, (1, 2, 3, 4), (1, 2), (4,), Errors.REPLICA_NOT_AVAILABLE)
    return MetadataResponse((MetadataResponseTopic("a", (part,), "id-a"),), BROKERS, version=version)


def test_a_partition_without_a_usable_epoch_is_kept_whole_but_its_epoch():
    m = ClientMetadata(topics=["a"])
    m.update(detailed(5), 0)
    m.update(detailed(-1, leader=2), 1)  # a leaderless-style answer: no epoch to trust
    assert m.partition_metadata(TP) == PartitionMetadata(TP, 2, None, (1, 2, 3, 4), (1, 2), (4,), Errors.REPLICA_NOT_AVAILABLE)
    m.update(detailed(7, version=8, leader=3), 2)  # before v9 the epoch is not trusted either
    assert m.partition_metadata(TP) == PartitionMetadata(TP, 3, None, (1, 2, 3, 4), (1, 2), (4,), Errors.REPLICA_NOT_AVAILABLE)
    # nothing known to compare with: a hint without an epoch is still no hint
    assert not m.update_partition_leadership(TP, 2, -1)
    assert m.partition_metadata(TP).leader_id == 3


def test_a_leader_hint_replaces_leader_and_epoch_and_keeps_the_replica_sets():
    m = ClientMetadata(topics=["a"])
    m.update(detailed(5), 0)
    assert not m.update_partition_leadership(TP, 2, -1)  # no epoch in the hint
    assert m.partition_metadata(TP).leader_epoch == 5
    assert m.update_partition_leadership(TP, 2, 6)
    # Kafka's Metadata.updatePartitionLeadership keeps the cached replica sets and error
    assert m.partition_metadata(TP) == PartitionMetadata(TP, 2, 6, (1, 2, 3, 4), (1, 2), (4,), Errors.REPLICA_NOT_AVAILABLE)
    assert m.last_seen_leader_epoch(TP) == 6  # the hint raises the last-seen epoch (KIP-951)
    assert m.update(detailed(5), 1).rejected == (TP,)  # so metadata older than the hint is stale


def test_a_leader_hint_does_not_move_the_last_seen_epoch_before_kip_320():
    m = ClientMetadata(topics=["a"], protocol="pre-kip-320")
    m.update(detailed(5), 0)
    assert m.update_partition_leadership(TP, 2, 6)
    assert m.partition_metadata(TP).leader_epoch == 6
    assert m.last_seen_leader_epoch(TP) is None
    # still compared with the current leader's epoch (Kafka's currentLeader()), so no going back
    assert not m.update_partition_leadership(TP, 3, 6)
    assert not m.update_partition_leadership(TP, 3, 5)
    assert m.partition_metadata(TP).leader_id == 2

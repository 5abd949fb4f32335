"""How ClientMetadata reads one Metadata response (Kafka's `Metadata.handleMetadataResponse` and
`MetadataResponse.PartitionMetadata`, SPEC (f)): every partition field kept as sent, broker 0 a real
leader, -1 no leader, epochs trusted from response v9 on, a topic error skipping only its own topic,
and the partitions a full update removes."""

from __future__ import annotations

import pytest

from epochguard.client.metadata import ClientMetadata, PartitionMetadata
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from epochguard.types import LeaderAndEpoch, TopicPartition

BROKERS = tuple(MetadataResponseBroker(n) for n in (0, 1, 2))
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def topic(name: str, *partitions: MetadataResponsePartition, error: Errors = Errors.NONE) -> MetadataResponseTopic:
    return MetadataResponseTopic(name, partitions, f"id-{name}", error)


def answer(*topics: MetadataResponseTopic, version: int = 12) -> MetadataResponse:
    return MetadataResponse(topics, BROKERS, version=version)


@pytest.mark.parametrize("protocol", ["kip-320", "pre-kip-320"])
def test_every_partition_field_is_stored_as_sent(protocol):
    md = ClientMetadata(protocol=protocol)
    sent = MetadataResponsePartition(1, 2, 7, (2, 0, 1), (2, 0), (1,), Errors.REPLICA_NOT_AVAILABLE)
    md.update(answer(topic("a", sent)), 0)
    assert md.partition_metadata(A1) == PartitionMetadata(
        A1, 2, 7, (2, 0, 1), (2, 0), (1,), Errors.REPLICA_NOT_AVAILABLE
    )


def test_broker_0_is_a_leader_like_any_other():
    md = ClientMetadata()
    md.update(answer(topic("a", MetadataResponsePartition(0, 0, 4, (0,), (0,)))), 0)
    assert md.partition_metadata(A0).leader_id == 0
    assert md.current_leader(A0) == LeaderAndEpoch(0, 4)


def test_leader_minus_1_is_stored_as_no_leader():
    md = ClientMetadata()
    leaderless = MetadataResponsePartition(0, -1, 4, (1,), (), (1,), Errors.LEADER_NOT_AVAILABLE)
    md.update(answer(topic("a", leaderless)), 0)
    assert md.partition_metadata(A0) == PartitionMetadata(A0, None, 4, (1,), (), (1,), Errors.LEADER_NOT_AVAILABLE)
    assert md.current_leader(A0) == LeaderAndEpoch(None, 4)


def test_epochs_are_trusted_from_response_version_9():
    """MetadataResponse.hasReliableLeaderEpochs: v9 and later; a v9 answer with a lower epoch is stale."""
    md = ClientMetadata()
    md.update(answer(topic("a", MetadataResponsePartition(0, 1, 5)), version=9), 0)
    assert md.last_seen_leader_epoch(A0) == 5
    stale = md.update(answer(topic("a", MetadataResponsePartition(0, 2, 4)), version=9), 1)
    assert stale.rejected == (A0,) and md.current_leader(A0) == LeaderAndEpoch(1, 5)


def test_a_topic_error_skips_that_topic_only():
    md = ClientMetadata()
    result = md.update(
        answer(topic("a", error=Errors.TOPIC_AUTHORIZATION_FAILED), topic("b", MetadataResponsePartition(0, 1, 3))), 0
    )
    assert result.accepted == (B0,)
    assert md.current_leader(B0) == LeaderAndEpoch(1, 3)


@pytest.mark.parametrize(
    "error, refresh", [(Errors.LEADER_NOT_AVAILABLE, True), (Errors.UNKNOWN_TOPIC_OR_PARTITION, True),
                       (Errors.TOPIC_AUTHORIZATION_FAILED, False)]
)
def test_a_retriable_topic_error_asks_for_another_refresh(error, refresh):
    md = ClientMetadata(topics=["a"])
    md.update(answer(topic("a", error=error)), 1_000)
    assert md.update_requested is refresh
    assert md.time_to_next_update(1_000) == (md.refresh_backoff_ms if refresh else md.metadata_max_age_ms)


def test_a_full_update_reports_the_partitions_it_removed():
    md = ClientMetadata()
    two = (MetadataResponsePartition(0, 1, 3), MetadataResponsePartition(1, 1, 3))
    first = md.update(answer(topic("a", *two), topic("b", MetadataResponsePartition(0, 1, 3))), 0)
    assert first.removed == ()
    second = md.update(answer(topic("a", two[0])), 1)  # a-1 and the whole of b gone
    assert second.accepted == (A0,) and second.removed == (A1, B0)
    assert md.partition_metadata(A1) is None and md.partition_metadata(B0) is None
    assert md.update(answer(topic("a", two[0])), 2).removed == ()


def test_a_stale_partition_is_neither_accepted_nor_removed():
    md = ClientMetadata()
    md.update(answer(topic("a", MetadataResponsePartition(0, 1, 5))), 0)
    result = md.update(answer(topic("a", MetadataResponsePartition(0, 2, 4))), 1)
    assert (result.accepted, result.rejected, result.removed) == ((), (A0,), ())

"""KIP-951 leader hints (Kafka's `Metadata.updatePartitionLeadership`, SPEC (f)) at their edges: broker 0
and epoch 0 are real values, -1 is none even when no broker list is known to check the node against."""

from __future__ import annotations

from epochguard.client.metadata import ClientMetadata
from epochguard.protocol.messages import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from epochguard.types import LeaderAndEpoch, TopicPartition

TP = TopicPartition("a", 0)


def cached(*, epoch: int = 3, version: int = 12, brokers: tuple[int, ...] = (0, 1, 2)) -> ClientMetadata:
    md = ClientMetadata()
    part = MetadataResponsePartition(0, 1, epoch, (0, 1, 2), (0, 1))
    nodes = tuple(MetadataResponseBroker(n) for n in brokers)
    md.update(MetadataResponse((MetadataResponseTopic("a", (part,), "id-a"),), nodes, version=version), 0)
    return md


def test_a_hint_naming_broker_0_moves_the_leader_there():
    md = cached()
    assert md.update_partition_leadership(TP, 0, 4)
    assert md.current_leader(TP) == LeaderAndEpoch(0, 4)
    assert md.partition_metadata(TP).tp == TP


def test_a_hint_at_epoch_0_is_taken_when_no_epoch_is_known():
    md = cached(epoch=7, version=8)  # an untrusted epoch: stored without one, nothing last seen
    assert md.last_seen_leader_epoch(TP) is None
    assert md.update_partition_leadership(TP, 2, 0)
    assert md.current_leader(TP) == LeaderAndEpoch(2, 0)
    assert md.last_seen_leader_epoch(TP) == 0


def test_without_a_broker_list_a_hint_needs_a_leader_but_not_a_known_node():
    md = cached(brokers=())
    assert md.brokers == {}
    assert not md.update_partition_leadership(TP, -1, 9)  # no leader in the hint
    assert md.current_leader(TP) == LeaderAndEpoch(1, 3)
    assert md.update_partition_leadership(TP, 7, 9)  # nothing to check node 7 against
    assert md.current_leader(TP) == LeaderAndEpoch(7, 9)

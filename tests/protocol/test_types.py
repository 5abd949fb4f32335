"""Public value types: Kafka's validation and normalisation rules (SPEC (e))."""

import pytest

from epochguard.types import (
    ConsumerRecord,
    ConsumerRecords,
    FetchPosition,
    LeaderAndEpoch,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)

TP = TopicPartition("t", 0)


def test_topic_partition_is_a_hashable_ordered_value():
    assert {TopicPartition("t", 0), TopicPartition("t", 0)} == {TP}
    assert sorted([TopicPartition("t", 1), TopicPartition("a", 5), TP]) == [TopicPartition("a", 5), TP, TopicPartition("t", 1)]
    assert str(TopicPartition("my-topic", 3)) == "my-topic-3"


@pytest.mark.parametrize("epoch, expected", [(None, None), (-1, None), (-5, None), (0, 0), (7, 7)])
def test_offset_and_metadata_leader_epoch_empty_if_negative(epoch, expected):
    assert OffsetAndMetadata(10, leader_epoch=epoch).leader_epoch == expected


def test_offset_and_metadata_rejects_negative_offset_and_is_hashable():
    with pytest.raises(ValueError):
        OffsetAndMetadata(-1)
    assert hash(OffsetAndMetadata(3, "m", 2)) == hash(OffsetAndMetadata(3, "m", 2))
    assert OffsetAndMetadata(3, "m", 2) != OffsetAndMetadata(3, "m", 1)


def test_offset_and_timestamp_rejects_negatives_and_normalises_epoch():
    with pytest.raises(ValueError):
        OffsetAndTimestamp(-1, 0)
    with pytest.raises(ValueError):
        OffsetAndTimestamp(0, -1)
    assert OffsetAndTimestamp(5, 100, -1).leader_epoch is None
    assert OffsetAndTimestamp(5, 100, 3).leader_epoch == 3


def test_fetch_position_equality_covers_offset_epoch_and_leader():
    a = FetchPosition(5, 1, LeaderAndEpoch(1, 2))
    assert a == FetchPosition(5, 1, LeaderAndEpoch(1, 2))
    assert a != FetchPosition(5, 1, LeaderAndEpoch(2, 2))
    assert a != FetchPosition(5, 1, LeaderAndEpoch(1, 3))
    assert a != FetchPosition(5, None, LeaderAndEpoch(1, 2))
    assert FetchPosition(5, -1).offset_epoch is None


def test_consumer_records_next_offsets_and_iteration():
    r = [ConsumerRecord("t", 0, o, 0, 0, None, b"v", (), 4) for o in (3, 4)]
    records = ConsumerRecords({TP: r, TopicPartition("t", 1): []}, {TP: OffsetAndMetadata(5, "", 4)})
    assert records.partitions() == {TP}  # empty partitions are not reported
    assert records.count() == 2 and list(records.records()) == r and records[TP] == tuple(r)
    assert records.next_offsets() == {TP: OffsetAndMetadata(5, "", 4)}
    assert records[TopicPartition("x", 0)] == ()
    assert ConsumerRecords.empty().is_empty()
    with pytest.raises(TypeError):
        hash(records)

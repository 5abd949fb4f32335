"""The public value types mix with the other Python Kafka clients' (kafka-python 3, aiokafka): named
tuples that unpack, compare and hash field for field, and the documented -1/None difference."""

from __future__ import annotations

import pickle
import typing

import pytest

import epochguard
from epochguard.types import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

kafka_structs = pytest.importorskip("kafka.structs", reason="kafka-python (the dev extra) is the reference")


def test_topic_partition_equals_and_hashes_like_kafka_pythons() -> None:
    ours, theirs = TopicPartition("t", 3), kafka_structs.TopicPartition("t", 3)
    assert ours == theirs and theirs == ours and hash(ours) == hash(theirs)
    assert {ours: "x"}[theirs] == "x" and {theirs: "y"}[ours] == "y"  # a dict keyed by one finds the other
    assert ours != kafka_structs.TopicPartition("t", 4)
    topic, partition = ours
    assert (topic, partition) == ("t", 3) and ours._fields == theirs._fields
    assert str(ours) == "t-3"


def test_offset_and_metadata_is_kafka_pythons_tuple_when_the_epoch_is_known() -> None:
    ours = OffsetAndMetadata(10, "meta", 4)
    theirs = kafka_structs.OffsetAndMetadata(10, "meta", 4)
    assert ours == theirs and hash(ours) == hash(theirs) and ours._fields == theirs._fields
    offset, metadata, epoch = ours
    assert (offset, metadata, epoch) == (10, "meta", 4)
    # The documented difference: an unknown epoch is None here, -1 in kafka-python.
    assert OffsetAndMetadata(10).leader_epoch is None
    assert kafka_structs.OffsetAndMetadata(10).leader_epoch == -1
    assert OffsetAndMetadata(10, "", -1) == OffsetAndMetadata(10) != kafka_structs.OffsetAndMetadata(10)
    assert "kafka-python" in (OffsetAndMetadata.__doc__ or "") and "-1" in (OffsetAndMetadata.__doc__ or "")


def test_offset_and_timestamp_is_kafka_pythons_tuple_when_the_epoch_is_known() -> None:
    ours = OffsetAndTimestamp(7, 1_700_000_000_000, 2)
    theirs = kafka_structs.OffsetAndTimestamp(7, 1_700_000_000_000, 2)
    assert ours == theirs and hash(ours) == hash(theirs) and ours._fields == theirs._fields
    assert OffsetAndTimestamp(7, 5).leader_epoch is None
    assert "kafka-python" in (OffsetAndTimestamp.__doc__ or "")


def test_aiokafka_shape_is_the_first_two_fields() -> None:
    """aiokafka's OffsetAndMetadata/OffsetAndTimestamp are (offset, metadata) / (offset, timestamp)."""
    assert OffsetAndMetadata(10, "m", 4)[:2] == (10, "m")
    assert OffsetAndTimestamp(7, 5, 1)[:2] == (7, 5)
    aiokafka = pytest.importorskip("aiokafka.structs", reason="aiokafka not installed: the tuple shape above stands in")
    assert TopicPartition("t", 1) == aiokafka.TopicPartition("t", 1)
    assert OffsetAndMetadata(10, "m", 4)[:2] == aiokafka.OffsetAndMetadata(10, "m")


def test_validation_survives_every_way_of_making_one() -> None:
    with pytest.raises(ValueError, match="negative offset"):
        OffsetAndMetadata(-1)
    with pytest.raises(ValueError, match="negative offset"):
        OffsetAndMetadata(5)._replace(offset=-2)
    with pytest.raises(ValueError, match="negative timestamp"):
        OffsetAndTimestamp._make([1, -5, None])
    assert OffsetAndMetadata(5, None, -3) == (5, "", None)  # metadata None -> "", negative epoch -> None
    assert OffsetAndMetadata(5, "m", 1)._replace(leader_epoch=-1).leader_epoch is None
    assert OffsetAndMetadata._make((5, "m", 2)) == OffsetAndMetadata(5, "m", 2)


@pytest.mark.parametrize(
    "value", [TopicPartition("t", 0), OffsetAndMetadata(3, "m", 1), OffsetAndTimestamp(3, 9, None)]
)
def test_types_pickle_and_stay_immutable(value: tuple) -> None:
    assert pickle.loads(pickle.dumps(value)) == value and type(pickle.loads(pickle.dumps(value))) is type(value)
    with pytest.raises(AttributeError):
        value.offset = 4  # type: ignore[attr-defined,misc]


def test_consumer_accepts_kafka_python_topic_partitions() -> None:
    consumer = epochguard.Consumer(group_id="g")
    consumer.assign([kafka_structs.TopicPartition("t", 0)])
    assert TopicPartition("t", 0) in consumer.assignment
    consumer.assign([TopicPartition("t", 0)])  # the same partition, not a second one
    assert len(consumer.assignment) == 1


def test_epoch_protocol_no_longer_shadows_typing_protocol() -> None:
    import epochguard.types as types

    assert "Protocol" not in types.__all__ and "EpochProtocol" in types.__all__
    assert typing.get_args(types.EpochProtocol) == ("kip-320", "pre-kip-320")
    with pytest.warns(DeprecationWarning, match="EpochProtocol"):
        assert types.Protocol is types.EpochProtocol  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        types.NoSuchName  # type: ignore[attr-defined]  # noqa: B018

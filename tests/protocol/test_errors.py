"""Kafka error codes by number, retriability, and the exception hierarchy (SPEC (h))."""

import pytest

from epochguard.errors import (
    ApiError,
    CheckpointError,
    CorruptRecordError,
    EpochGuardError,
    Errors,
    FencedLeaderEpochError,
    LogTruncationError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from epochguard.types import OffsetAndMetadata, TopicPartition


@pytest.mark.parametrize(
    "member, code, retriable",
    [
        (Errors.UNKNOWN_SERVER_ERROR, -1, False),
        (Errors.NONE, 0, False),
        (Errors.OFFSET_OUT_OF_RANGE, 1, False),
        (Errors.UNKNOWN_TOPIC_OR_PARTITION, 3, True),
        (Errors.LEADER_NOT_AVAILABLE, 5, True),
        (Errors.NOT_LEADER_OR_FOLLOWER, 6, True),
        (Errors.REPLICA_NOT_AVAILABLE, 9, True),
        (Errors.TOPIC_AUTHORIZATION_FAILED, 29, False),
        (Errors.KAFKA_STORAGE_ERROR, 56, True),
        (Errors.FENCED_LEADER_EPOCH, 74, True),
        (Errors.UNKNOWN_LEADER_EPOCH, 75, True),
        (Errors.OFFSET_NOT_AVAILABLE, 78, True),
        (Errors.INELIGIBLE_REPLICA, 107, False),
    ],
)
def test_codes_and_retriability_match_kafka(member, code, retriable):
    assert int(member) == code
    assert Errors.for_code(code) is member
    assert member.retriable is retriable
    if member is not Errors.NONE:
        exc = member.exception()
        assert isinstance(exc, ApiError) and isinstance(exc, EpochGuardError)
        assert exc.code is member and exc.retriable is retriable


def test_unknown_code_maps_to_unknown_server_error():
    assert Errors.for_code(12345) is Errors.UNKNOWN_SERVER_ERROR
    assert Errors.NONE.exception() is None


def test_exception_classes():
    assert Errors.FENCED_LEADER_EPOCH.exception_class is FencedLeaderEpochError
    assert Errors.UNKNOWN_LEADER_EPOCH.exception_class is UnknownLeaderEpochError
    assert Errors.OFFSET_NOT_AVAILABLE.exception_class is OffsetNotAvailableError
    assert Errors.NOT_LEADER_OR_FOLLOWER.exception_class is NotLeaderOrFollowerError
    for core in (CorruptRecordError, CheckpointError):
        assert issubclass(core, EpochGuardError)


def test_log_truncation_error_carries_divergent_offsets():
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    err = LogTruncationError(
        offset_out_of_range_partitions={tp0: 20, tp1: 7},
        divergent_offsets={tp0: OffsetAndMetadata(12, "", 3), tp1: None},
    )
    assert isinstance(err, OffsetOutOfRangeError) and not err.retriable
    assert err.offset_out_of_range_partitions == {tp0: 20, tp1: 7}
    assert err.divergent_offsets[tp0] == OffsetAndMetadata(12, "", 3)
    assert err.divergent_offsets[tp1] is None
    assert "t-0 at 20" in str(err)
    with pytest.raises(OffsetOutOfRangeError):
        raise err

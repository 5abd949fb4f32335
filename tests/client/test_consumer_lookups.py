"""The consumer faces' offset lookups (`end_offsets`, `beginning_offsets`, `offsets_for_times`) raise what
kafka-python raises: `UnsupportedVersionError` when the lookup's request can never be sent, `KafkaTimeoutError`
when it is not answered in time, ValueError for a negative target, before anything is sent. The lookups
themselves are the sans-IO consumer's (tests/protocol/test_consumer_list_offsets.py); the answers against
kafka-python's on Kafka 4.4 are tests/real_kafka/test_consumer_offsets_kafka.py."""

from __future__ import annotations

import asyncio

import pytest

from epochguard.client import AsyncConsumer, KafkaConsumer
from epochguard.client.consumer import OffsetsForTimesLookup
from epochguard.errors import IllegalStateError, KafkaTimeoutError, RequestTimedOutError, UnsupportedVersionError
from epochguard.types import TopicPartition

TP = TopicPartition("t", 0)
NOWHERE = "127.0.0.1:1"  # nothing listens: no lookup is ever answered


def failed(error: Exception):
    def start(_partitions, now_ms: int, timeout_ms: int) -> OffsetsForTimesLookup:
        lookup = OffsetsForTimesLookup({TP: -1}, now_ms + timeout_ms)
        lookup.error = error  # type: ignore[assignment]
        return lookup
    return start


def test_a_lookup_that_can_never_be_sent_raises_unsupported_version_and_a_late_one_a_timeout() -> None:
    async def main() -> None:
        consumer = AsyncConsumer(bootstrap_servers=NOWHERE, enable_auto_commit=False)
        try:
            refused = UnsupportedVersionError("the broker does not support ListOffsets")
            consumer._machine.end_offsets = failed(refused)  # type: ignore[method-assign]
            with pytest.raises(UnsupportedVersionError) as raised:
                await consumer.end_offsets([TP])
            assert raised.value is refused
            consumer._machine.beginning_offsets = failed(RequestTimedOutError("x"))  # type: ignore[method-assign]
            with pytest.raises(KafkaTimeoutError, match="beginning_offsets did not complete within 200 ms"):
                await consumer.beginning_offsets([TP], timeout_ms=200)
        finally:
            await consumer.close()

    asyncio.run(main())


def test_unanswered_lookups_time_out_and_bad_arguments_are_refused_at_once() -> None:
    consumer = KafkaConsumer(bootstrap_servers=NOWHERE, enable_auto_commit=False, request_timeout_ms=300)
    try:
        with pytest.raises(KafkaTimeoutError):
            consumer.end_offsets([TP], timeout_ms=100)
        with pytest.raises(KafkaTimeoutError):
            consumer.offsets_for_times({TP: 1_000}, timeout_ms=100)
        with pytest.raises(ValueError, match=r"^The target time for partition .* is -1\. The target time cannot be "
                                             r"negative\.$"):
            consumer.offsets_for_times({TP: -1})
        with pytest.raises(IllegalStateError, match="not assigned"):
            consumer.highwater(TP)
        assert consumer.paused() == set() and not consumer.bootstrap_connected()
        consumer.assign([TP])
        assert consumer.highwater(TP) is None
        consumer.pause(TP)
        assert consumer.paused() == {TP}
        metrics = consumer.metrics()
        assert metrics["consumer-coordinator-metrics"] == {"assigned-partitions": 1.0}
        assert metrics["consumer-metrics"] == {"connection-count": 0.0}
    finally:
        consumer.close()

"""Shared by the invariant-checker tests: records on `events`-0 (the `cluster` fixture is in conftest)."""

from __future__ import annotations

from epochguard.types import ConsumerRecord, TopicPartition

TP = TopicPartition("events", 0)


def record(offset: int, value: bytes, epoch: int | None = 0) -> ConsumerRecord:
    return ConsumerRecord(TP.topic, TP.partition, offset, 0, 0, b"k", value, (), epoch)

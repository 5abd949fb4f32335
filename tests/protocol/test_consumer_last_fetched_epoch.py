"""The consumer's `send_last_fetched_epoch` (beyond Kafka's consumer, a follower's rule: KIP-595's
truncate-on-fetch): Fetch v12+ carries the position's offset epoch as LastFetchedEpoch, a seek with an
epoch needs no OffsetsForLeaderEpoch, and a DivergingEpoch answer is applied as that request's answer
would be (`SubscriptionState.maybeCompleteValidation`)."""

from __future__ import annotations

import pytest
from consumer_requests_support import TP0, answer_fetch, known_consumer

from epochguard.errors import LogTruncationError
from epochguard.protocol.api_versions import BROKER_API_VERSIONS, ApiKey
from epochguard.protocol.messages import (
    DivergingEpoch,
    FetchPartitionData,
    FetchRequest,
    OffsetsForLeaderEpochRequest,
)
from epochguard.types import OffsetAndMetadata


def _seeked(policy: str = "none", **kw):
    c = known_consumer([TP0], policy=policy, **kw)
    c.seek(TP0, OffsetAndMetadata(5, leader_epoch=1))
    return c


def _sent(c, now_ms: int = 0) -> list:
    return [r for _, r in c.poll_requests(now_ms)]


def _fetched(requests: list) -> list[tuple[int, int]]:
    return [(p.fetch_offset, p.last_fetched_epoch) for r in requests if isinstance(r, FetchRequest)
            for p in r.partitions]


def test_a_seek_with_an_epoch_is_fetched_with_it_and_not_validated_apart():
    c = _seeked(send_last_fetched_epoch=True)
    sent = _sent(c)
    assert not any(isinstance(r, OffsetsForLeaderEpochRequest) for r in sent)
    assert _fetched(sent) == [(5, 1)]


def test_without_the_setting_kafkas_rule_validate_then_fetch_without_an_epoch():
    c = _seeked()
    sent = _sent(c)
    assert any(isinstance(r, OffsetsForLeaderEpochRequest) for r in sent) and _fetched(sent) == []


def test_a_broker_without_fetch_v12_is_validated_apart():
    old = BROKER_API_VERSIONS.with_range(ApiKey.FETCH, 4, 11)
    c = known_consumer([TP0], policy="none", send_last_fetched_epoch=True)
    c._ctx.api_versions.update(dict.fromkeys((0, 1, 2, 3), old))  # the leader's answer to the handshake
    c.seek(TP0, OffsetAndMetadata(5, leader_epoch=1))
    sent = _sent(c)
    assert any(isinstance(r, OffsetsForLeaderEpochRequest) for r in sent) and _fetched(sent) == []


def test_a_diverging_epoch_below_the_position_is_a_truncation_at_its_end():
    c = _seeked(send_last_fetched_epoch=True)
    [fetch] = [r for r in _sent(c) if isinstance(r, FetchRequest)]
    answer_fetch(c, 1, fetch, FetchPartitionData("t", 0, diverging_epoch=DivergingEpoch(0, 3)))
    with pytest.raises(LogTruncationError) as info:
        c.poll(1)
    assert info.value.divergent_offsets[TP0] == OffsetAndMetadata(3, leader_epoch=0)


def test_a_diverging_epoch_alone_resumes_at_the_leaders_epoch():
    """The leader lacks epoch 1 but its epoch 0 reaches past the position: Kafka's validation resumes (a
    different epoch alone is no truncation); the next Fetch names epoch 0, so it does not diverge again."""
    c = _seeked(send_last_fetched_epoch=True)
    [fetch] = [r for r in _sent(c) if isinstance(r, FetchRequest)]
    answer_fetch(c, 1, fetch, FetchPartitionData("t", 0, diverging_epoch=DivergingEpoch(0, 9)))
    c.poll(1)
    assert (c.position(TP0).offset, c.position(TP0).offset_epoch) == (5, 0)
    assert _fetched(_sent(c, 1)) == [(5, 0)]

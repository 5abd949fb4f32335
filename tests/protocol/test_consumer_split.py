"""The consumer's parts on their own: the pure validator (Kafka's `maybeCompleteValidation` outcomes)
and `next_deadline_ms()` (a driver that calls `poll_requests` only when it says misses nothing)."""

from __future__ import annotations

import pytest
from protocol_support import TP
from test_consumer import consumer, truncated_cluster

from epochguard.client.consumer.validator import (
    Reset,
    Resume,
    Rewind,
    Truncated,
    validate_position,
)
from epochguard.protocol.messages import FetchRequest, OffsetsForLeaderEpochRequest
from epochguard.types import FetchPosition, LeaderAndEpoch, OffsetAndMetadata

POS = FetchPosition(10, 3, LeaderAndEpoch(2, 4))


@pytest.mark.parametrize(
    "policy, epoch, end, outcome",
    [
        ("earliest", 3, 12, Resume()),  # the leader has the position
        ("latest", 3, 10, Resume()),  # ends exactly at it
        ("none", 2, 15, Resume()),  # a different epoch alone is not truncation
        ("earliest", 3, 7, Rewind(FetchPosition(7, 3, LeaderAndEpoch(2, 4)))),  # precise rewind, no reset
        ("none", 3, 7, Truncated(OffsetAndMetadata(7, "", 3))),
        ("latest", -1, -1, Reset()),  # undefined: policy reset
        ("none", -1, -1, Truncated(None)),  # undefined: no divergent offset
        ("earliest", 3, -1, Reset()),
    ],
)
def test_validator_outcomes(policy, epoch, end, outcome):
    assert validate_position(POS, policy, epoch, end) == outcome


def test_poll_requests_sends_nothing_before_next_deadline():
    """Whatever the consumer does (reset, fetch, a leader change, validation, a rewind), calling
    `poll_requests` earlier than `next_deadline_ms()` sends nothing, so a driver may sleep until then."""
    cluster = truncated_cluster()
    c = consumer("earliest")
    c.seek(TP, 0)
    sent_kinds = set()
    for now in range(0, 3000, 10):
        if now == 1000:
            cluster.meta = (2, 2)  # leader change; the consumer learns it at its next refresh
            c.metadata.request_update()
        deadline = c.next_deadline_ms()
        requests = c.poll_requests(now)
        if deadline is None or deadline > now:
            assert requests == [], (now, deadline, requests)
        for node, request in requests:
            sent_kinds.add(type(request))
            if node in cluster.brokers or isinstance(request, type(cluster.metadata())):
                c.on_response(node, request, cluster.answer(node, request), now)
            else:
                c.on_request_failed(node, request, now)
        c.poll(now)
    assert {FetchRequest, OffsetsForLeaderEpochRequest} <= sent_kinds
    assert [e.resolution for e in c.truncations] == ["rewound"]


def test_next_deadline_is_the_retry_backoff_after_an_error():
    cluster = truncated_cluster()
    c = consumer("earliest", retry_backoff_ms=100)
    c.seek(TP, 0)
    cluster.run(c)
    c.poll()
    cluster.meta = (1, 2)  # metadata runs ahead of broker 1 (still at epoch 1): UNKNOWN_LEADER_EPOCH
    c.metadata.request_update()
    cluster.run(c, now_ms=1000, rounds=3)
    assert c.awaiting_validation(TP)
    assert c.next_deadline_ms() == 1100
    assert c.poll_requests(1099) == []
    assert OffsetsForLeaderEpochRequest in [type(r) for _, r in c.poll_requests(1100)]

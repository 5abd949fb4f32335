"""When ClientMetadata asks for a refresh and which topics it asks about (Kafka's `Metadata.requestUpdate`,
`timeToNextUpdate` and the refresh back-off): a request sent counts as an attempt, topics added join the
set already asked about, and a bad leader epoch is refused with a message naming it."""

from __future__ import annotations

import pytest

from epochguard.client.metadata import ClientMetadata
from epochguard.protocol.messages import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from epochguard.types import TopicPartition


def answer(name: str = "a") -> MetadataResponse:
    part = MetadataResponsePartition(0, 1, 3, (1,), (1,))
    return MetadataResponse((MetadataResponseTopic(name, (part,), f"id-{name}"),), (MetadataResponseBroker(1),))


def test_topics_added_join_the_ones_already_asked_about():
    md = ClientMetadata(topics=["a"])
    md.update(answer(), 0)
    md.add_topics(["b"])
    assert md.topics == {"a", "b"}
    assert md.build_request(200).topics == ("a", "b")


def test_a_request_sent_waits_out_the_back_off_before_the_next():
    """Sending the request is the attempt: with no answer yet, the next one waits the back-off."""
    md = ClientMetadata(refresh_backoff_ms=100)
    assert md.should_update(1_000)
    md.build_request(1_000)
    assert md.update_requested and not md.should_update(1_000)
    assert md.time_to_next_update(1_040) == 60
    assert md.should_update(1_100)


def test_an_invalid_epoch_is_refused_with_its_value():
    md = ClientMetadata()
    with pytest.raises(ValueError, match="invalid leader epoch -2"):
        md.update_last_seen_epoch_if_newer(TopicPartition("a", 0), -2)

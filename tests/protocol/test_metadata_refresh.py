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


def test_with_every_known_broker_unavailable_it_asks_the_bootstrap_addresses_again():
    """KIP-899's rebootstrap (Kafka 4.0's default): a KRaft broker answers Metadata naming only the brokers
    alive then. Heard last from broker 1 alone (2 and 3 had stopped), a client whose broker 1 then stopped too
    must not ask it forever once 2 is back: with no named broker available, a bootstrap node is asked. Found on
    Kafka 4.4 in `consecutive-unclean`: epochguard's consumer read nothing for 120 s after broker 2's election."""
    available = {-2, -3}  # the bootstrap addresses that answer; broker 1 is in its reconnect back-off
    asked: list[list[int]] = []

    def least_loaded(candidates):
        asked.append(list(candidates))
        return next((c for c in candidates if c in available), None)

    md = ClientMetadata(least_loaded=least_loaded)
    assert md.any_node((-1, -2, -3)) == -2  # before any answer: the bootstrap nodes
    md.update(answer(), 0)  # names broker 1 alone
    asked.clear()
    assert md.any_node((-1, -2, -3)) == -2
    assert asked == [[1], [-1, -2, -3]]  # the named brokers first, then the bootstrap addresses
    available.add(1)
    assert md.any_node((-1, -2, -3)) == 1  # a named broker available again: no rebootstrap

"""ClientMetadata behaviours pinned through the public API: restricted topic sets, the defaults, and the
public update counter."""

from __future__ import annotations

from epochguard import ClientMetadata, TopicPartition
from epochguard.messages import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

TP = TopicPartition("a", 0)


def response(epoch: int = 3, topic: str = "a") -> MetadataResponse:
    part = MetadataResponsePartition(0, 1, epoch, (1,), (1,))
    return MetadataResponse((MetadataResponseTopic(topic, (part,), f"id-{topic}"),), (MetadataResponseBroker(1),), version=12)


def test_adding_a_topic_to_a_restricted_set_requests_a_refresh():
    md = ClientMetadata(topics=["a"])
    assert md.build_request(0).topics == ("a",)
    md.update(response(), 0)
    assert not md.update_requested
    md.add_topics(["a"])
    assert not md.update_requested  # nothing new
    md.add_topics(["a", "b"])
    assert md.update_requested
    assert md.should_update(100) and md.build_request(100).topics == ("a", "b")


def test_adding_topics_to_an_all_topics_metadata_asks_for_nothing():
    md = ClientMetadata()
    md.update(response(), 0)
    md.add_topics(["b"])
    assert not md.update_requested and md.topics is None
    assert md.build_request(0).topics is None


def test_defaults():
    md = ClientMetadata()
    assert (md.protocol, md.topics, md.refresh_backoff_ms, md.metadata_max_age_ms, md.updates) == (
        "kip-320",
        None,
        100,
        300_000,
        0,
    )
    assert md.update_requested and md.should_update(0)  # nothing known yet: ask at once


def test_the_default_max_age_and_backoff_schedule_refreshes():
    md = ClientMetadata()
    md.build_request(1_000)
    md.update(response(), 1_000)
    assert md.time_to_next_update(1_000) == 300_000
    assert not md.should_update(300_999) and md.should_update(301_000)
    md.request_update()
    assert md.time_to_next_update(1_050) == 50  # requested: only the backoff since the last attempt
    assert not md.should_update(1_099) and md.should_update(1_100)
    md.failed_update(2_000)
    assert not md.should_update(2_099) and md.should_update(2_100)


def test_the_default_protocol_rejects_a_lower_epoch():
    md = ClientMetadata()
    md.update(response(epoch=3), 0)
    assert md.update(response(epoch=2), 1).rejected == (TP,)
    assert md.current_leader(TP).epoch == 3


def test_the_update_counter_counts_every_applied_response_and_nothing_else():
    md = ClientMetadata()
    assert md.updates == 0
    md.update(response(epoch=3), 0)
    assert md.updates == 1
    md.update(response(epoch=2), 1)  # rejected partition, still an applied response
    assert md.updates == 2
    md.failed_update(2)
    md.request_update()
    md.build_request(3)
    md.update_last_seen_epoch_if_newer(TP, 9)
    assert md.updates == 2

"""The `Consumer` class itself: its configuration (Kafka's defaults, the metadata it builds), the verbs
that take per-partition settings (`assign`'s reset policy, `commit`'s default offsets), and the driver's
side (`poll_requests` after a metadata change, a failed or expired request forgetting the broker's
versions, per-partition fetch state as the application may read it)."""

from __future__ import annotations

import pytest
from consumer_script import BACKOFF, TIMEOUT, Cluster, consumer, sent_now

from epochguard import Consumer
from epochguard.client.consumer import FetchState
from epochguard.errors import NoOffsetForPartitionError
from epochguard.protocol.api_versions import BROKER_API_VERSIONS, ApiVersionsRequest
from epochguard.protocol.messages import (
    FetchRequest,
    ListOffsetsRequest,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    OffsetCommitRequest,
    OffsetsForLeaderEpochRequest,
)
from epochguard.types import FetchPosition, LeaderAndEpoch, TopicPartition

A = TopicPartition("a", 0)
B = TopicPartition("a", 1)
COORD = 500


def kinds(sent) -> list[tuple[int, type]]:
    return [(n, type(r)) for n, r in sent]


# --- configuration -----------------------------------------------------------------------------------------
def test_an_unknown_reset_policy_is_refused_by_name():
    with pytest.raises(ValueError, match=r"^invalid reset policy 'smallest'$"):
        Consumer(reset_policy="smallest")  # type: ignore[arg-type]  # the pre-0.9 name Kafka no longer takes


def test_kafka_default_request_timeout_and_retry_backoff():
    """request.timeout.ms = 30000 and retry.backoff.ms = 100 (ConsumerConfig)."""
    c = Consumer(bootstrap=(7,))
    assert kinds(c.poll_requests(0)) == [(7, MetadataRequest)]
    assert c.next_deadline_ms() == 30_000  # the unanswered request times out
    assert c.poll_requests(29_999) == []
    assert c.poll_requests(30_000) == []  # expired now: retried after the backoff
    assert c.next_deadline_ms() == 30_100
    assert kinds(c.poll_requests(30_100)) == [(7, MetadataRequest)]


def test_the_metadata_asks_only_for_the_assigned_topics():
    c = consumer(A, TopicPartition("b", 3))
    [(_, request)] = sent_now(c, 0, MetadataRequest)
    assert request.topics == ("a", "b")


def test_a_failed_metadata_request_is_retried_after_the_consumers_retry_backoff():
    c = Consumer(bootstrap=(1,), retry_backoff_ms=250)
    [(node, request)] = c.poll_requests(0)
    c.on_request_failed(node, request, 1_000)
    assert c.poll_requests(1_249) == []
    assert kinds(c.poll_requests(1_250)) == [(1, MetadataRequest)]


def metadata(leader: int, epoch: int) -> MetadataResponse:
    part = MetadataResponsePartition(0, leader, epoch, (leader,), (leader,))
    return MetadataResponse((MetadataResponseTopic("a", (part,), "id-a"),),
                            (MetadataResponseBroker(1), MetadataResponseBroker(2)), version=12)


@pytest.mark.parametrize("protocol, leader", [("kip-320", 1), ("pre-kip-320", 2)])
def test_the_consumers_protocol_decides_whether_metadata_with_an_older_epoch_is_taken(protocol, leader):
    c = consumer(A, protocol=protocol)
    [(node, request)] = sent_now(c, 0, MetadataRequest)
    c.on_response(node, request, metadata(1, 5), 0)
    [(node, request)] = sent_now(c, 300_000, MetadataRequest)
    c.on_response(node, request, metadata(2, 3), 300_000)
    assert c.metadata.current_leader(A).leader == leader


# --- per-partition settings --------------------------------------------------------------------------------
def test_assign_takes_a_reset_policy_for_just_those_partitions():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    cluster.lead(B, 1, 1, [(1, 2)])
    c = consumer(B, policy="earliest")
    c.assign([A], reset_policy="none")
    cluster.run(c, 0)
    with pytest.raises(NoOffsetForPartitionError) as raised:
        c.poll(0)
    assert raised.value.partitions == {A}
    assert c.state_of(A) == FetchState.INITIALIZING
    assert [r.partition for r in c.resets] == [B]


def test_commit_without_a_group_is_refused():
    with pytest.raises(ValueError, match=r"^commit needs a group_id and a coordinator_id$"):
        consumer(A, group_id="g").commit()


def test_commit_by_default_takes_only_fetching_positions_with_their_epochs():
    c = consumer(A, B, group_id="g", coordinator_id=COORD)
    c.seek_position(A, FetchPosition(3, 1, LeaderAndEpoch(1, 1)), validate=False)
    c.seek_position(B, FetchPosition(5, 1, LeaderAndEpoch(1, 1)))
    assert c.awaiting_validation(B)
    c.commit()
    [(node, request)] = sent_now(c, 0, OffsetCommitRequest)
    assert node == COORD and request.group_id == "g"
    assert [(p.topic, p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
            for p in request.partitions] == [("a", 0, 3, 1, "")]


# --- the driver's side -------------------------------------------------------------------------------------
def fetching_from_broker_1() -> tuple[Cluster, Consumer]:
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    c = consumer(A)
    cluster.run(c, 0)
    assert c.poll(0).count() == 3 and c.node_api_versions(1) == BROKER_API_VERSIONS
    return cluster, c


def test_a_failed_request_makes_the_consumer_ask_the_brokers_versions_again():
    _cluster, c = fetching_from_broker_1()
    [(node, fetch)] = sent_now(c, 0, FetchRequest)
    c.on_request_failed(node, fetch, 0)
    assert c.node_api_versions(1) is None
    assert (1, ApiVersionsRequest) in kinds(c.poll_requests(0))


def test_an_expired_request_makes_the_consumer_ask_the_brokers_versions_again():
    _cluster, c = fetching_from_broker_1()
    assert len(sent_now(c, 0, FetchRequest)) == 1
    sent = c.poll_requests(TIMEOUT)
    assert c.node_api_versions(1) is None
    assert (1, ApiVersionsRequest) in kinds(sent)


def test_metadata_the_driver_applies_re_points_positions_before_the_next_requests():
    cluster, c = fetching_from_broker_1()
    cluster.lead(A, 2, 2, [(1, 3), (2, 1)])
    c.update_api_versions(2, BROKER_API_VERSIONS)
    c.metadata.update(cluster.metadata(), 1_000)
    sent = c.poll_requests(1_000)
    assert kinds(sent) == [(2, OffsetsForLeaderEpochRequest)]  # validated at the new leader, not fetched from the old
    assert c.position(A) == FetchPosition(3, 1, LeaderAndEpoch(2, 2))


def test_a_leaderless_partition_keeps_its_position_and_leader():
    _cluster, c = fetching_from_broker_1()
    c.metadata.update(metadata(-1, 2), 1_000)
    assert c.metadata.current_leader(A) == LeaderAndEpoch(None, 2)
    c.poll_requests(1_000)
    assert (c.state_of(A), c.position(A)) == (FetchState.FETCHING, FetchPosition(3, 1, LeaderAndEpoch(1, 1)))


def test_a_pending_reset_strategy_is_shown_only_while_the_reset_waits():
    cluster, c = fetching_from_broker_1()
    c.seek_to_end(A)
    assert (c.assignment[A].state, c.assignment[A].reset_strategy) == (FetchState.AWAIT_RESET, "latest")
    cluster.run(c, 0, rounds=1)
    assert (c.assignment[A].state, c.assignment[A].reset_strategy) == (FetchState.FETCHING, None)
    c.seek_to_beginning(A)
    c.seek(A, 1)
    assert (c.assignment[A].state, c.assignment[A].reset_strategy) == (FetchState.FETCHING, None)


def test_a_failed_reset_request_is_sent_again_after_the_backoff():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    c = consumer(A)
    [(node, request, _)] = cluster.run(c, 0, hold=lambda r: isinstance(r, ListOffsetsRequest))
    c.on_request_failed(node, request, 2_000)
    assert sent_now(c, 2_000 + BACKOFF - 1, ListOffsetsRequest) == []
    assert len(sent_now(c, 2_000 + BACKOFF, ListOffsetsRequest)) == 1


# --- beyond Kafka: consumed-epoch history from a reset position ---------------------------------------------
def test_a_position_from_a_reset_tracks_the_consumed_epochs():
    """Read 0-9 from broker 1 (epoch 0 at 0-3, epoch 1 at 4-9) from a reset to earliest; broker 2 only had
    epoch-0 records 0-5 and was elected uncleanly: the tracked history finds 4, Kafka's rule 6."""
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(0, 4), (1, 6)])
    c = consumer(A, track_consumed_epochs=True)
    cluster.run(c, 0)
    assert c.resets[0].to_offset == 0 and c.poll(0).count() == 10
    cluster.lead(A, 2, 2, [(0, 6), (2, 3)])
    c.metadata.request_update()
    cluster.run(c, 1_000)
    [event] = c.truncations
    assert (event.divergent_offset, event.divergent_epoch, event.resolution) == (4, 0, "rewound")

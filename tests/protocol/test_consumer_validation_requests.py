"""The consumer's OffsetsForLeaderEpoch requests through its public API (Kafka's
`OffsetFetcher.validatePositionsAsync` and `onSuccessfulResponseForValidatingPositions`, KIP-320): the
request version, which positions are sent to which leader when others must wait, how each answer of a
multi-partition response is applied on its own, and what the truncation events record."""

from __future__ import annotations

import pytest
from consumer_script import BACKOFF, Cluster, consumer, sent_now

from epochguard.client.consumer import FetchState
from epochguard.errors import Errors, LogTruncationError, TopicAuthorizationFailedError
from epochguard.protocol.api_versions import BROKER_API_VERSIONS, ApiKey, ApiVersionsRequest
from epochguard.protocol.messages import (
    EpochEndOffset,
    FetchRequest,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
)
from epochguard.types import FetchPosition, LeaderAndEpoch, OffsetAndMetadata, TopicPartition, TruncationEvent

A = TopicPartition("a", 0)
B = TopicPartition("a", 1)
OLD_BROKER = BROKER_API_VERSIONS.with_range(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 2)  # cannot validate (< v3)
NOW = 1_000


def epoch_end(tp: TopicPartition, epoch: int, end: int, error: Errors = Errors.NONE) -> EpochEndOffset:
    return EpochEndOffset(tp.topic, tp.partition, error, epoch, end)


def answered(*parts: EpochEndOffset) -> OffsetsForLeaderEpochResponse:
    return OffsetsForLeaderEpochResponse(parts)


def awaiting(cluster: Cluster, *tps: TopicPartition, policy: str = "earliest", **kw):
    """A consumer whose partitions all sit at offset 5 of epoch 1 and await validation (seeks with an
    epoch), with the metadata and the brokers' versions known and an unanswered fetch in flight."""
    c = consumer(*tps, policy=policy, **kw)
    for tp in tps:
        c.seek(tp, 0)
    cluster.run(c, 0, hold=lambda r: isinstance(r, FetchRequest))
    for tp in tps:
        c.seek(tp, OffsetAndMetadata(5, leader_epoch=1))
        assert c.awaiting_validation(tp)
    return c


def validations(c, now_ms: int = NOW) -> list[tuple[int, OffsetsForLeaderEpochRequest]]:
    return sent_now(c, now_ms, OffsetsForLeaderEpochRequest)


def asked(request: OffsetsForLeaderEpochRequest) -> list[tuple[int, int, int]]:
    return [(p.partition_index, p.leader_epoch, p.current_leader_epoch) for p in request.partitions]


# --- the request -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("served, version", [((0, 3), 3), ((3, 5), 4), ((0, 4), 4)])
def test_validation_uses_the_newest_version_both_sides_know(served, version):
    cluster = Cluster()
    cluster.lead(A, 1, 2, [(1, 6), (2, 1)])
    cluster.versions[1] = BROKER_API_VERSIONS.with_range(ApiKey.OFFSET_FOR_LEADER_EPOCH, *served)
    c = awaiting(cluster, A)
    [(node, request)] = validations(c)
    assert (node, request.version, asked(request)) == (1, version, [(0, 1, 2)])


def test_a_position_re_pointed_by_the_application_is_validated_there_until_the_metadata_changes():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 6)])
    cluster.lead(B, 2, 1, [(1, 6)])  # broker 2 is known (and handshaken), leading another partition
    c = consumer(A)
    cluster.run(c, 0, rounds=3)
    assert c.poll(0).count() == 6
    assert c.validate_position(A, LeaderAndEpoch(2, 2)) is True
    [(node, request)] = validations(c)
    assert (node, asked(request)) == (2, [(0, 1, 2)])
    assert c.position(A).current_leader == LeaderAndEpoch(2, 2)


# --- the leader's versions decide whether to validate ---------------------------------------------------
def moved_to_broker_2(versions_of_2):
    """A consumer fetching A from broker 1 (epoch 1) learns that broker 2 leads at epoch 2."""
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 6)])
    c = consumer(A)
    cluster.run(c, 0, hold=lambda r: isinstance(r, FetchRequest))
    c.poll(0)
    assert c.position(A) == FetchPosition(0, None, LeaderAndEpoch(1, 1))
    c.seek(A, OffsetAndMetadata(4, leader_epoch=1))
    cluster.lead(A, 2, 2, [(1, 6), (2, 1)])
    c.update_api_versions(2, versions_of_2)
    c.metadata.update(cluster.metadata(), NOW)
    return c


def test_a_new_leader_too_old_to_validate_becomes_the_fetch_target_at_once():
    c = moved_to_broker_2(OLD_BROKER)
    assert c.validate_position(A) is False
    assert (c.state_of(A), c.position(A)) == (FetchState.FETCHING, FetchPosition(4, 1, LeaderAndEpoch(2, 2)))
    assert validations(c) == []


def test_a_new_leader_that_can_validate_is_asked():
    c = moved_to_broker_2(BROKER_API_VERSIONS)
    assert c.validate_position(A) is True
    assert (c.state_of(A), c.position(A)) == (FetchState.AWAIT_VALIDATION, FetchPosition(4, 1, LeaderAndEpoch(2, 2)))
    [(node, _)] = validations(c)
    assert node == 2


# --- one partition or leader that must wait does not hold the others back -------------------------------
def two_leaders(versions_of_1=BROKER_API_VERSIONS):
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 6)])
    cluster.lead(B, 2, 1, [(1, 6)])
    cluster.versions[1] = versions_of_1
    return cluster, awaiting(cluster, A, B)


def test_a_leader_whose_versions_are_unknown_does_not_hold_back_another_leader():
    _cluster, c = two_leaders()
    c.forget_api_versions(1)
    sent = c.poll_requests(NOW)
    assert (1, ApiVersionsRequest()) in [(n, r) for n, r in sent if isinstance(r, ApiVersionsRequest)]
    [(node, request)] = [(n, r) for n, r in sent if isinstance(r, OffsetsForLeaderEpochRequest)]
    assert (node, asked(request)) == (2, [(1, 1, 1)])
    assert c.awaiting_validation(A)


def test_a_leader_too_old_to_validate_does_not_hold_back_another_leader():
    _cluster, c = two_leaders()
    c.update_api_versions(1, OLD_BROKER)
    [(node, request)] = validations(c)
    assert (node, asked(request)) == (2, [(1, 1, 1)])
    assert c.state_of(A) == FetchState.FETCHING  # completed without a request (`completeValidation`)


def test_a_partition_without_a_leader_does_not_hold_back_the_others():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 6)])
    cluster.lead(B, 1, 1, [(1, 6)])
    c = awaiting(cluster, A, B)
    c.metadata.update_last_seen_epoch_if_newer(A, 7)  # newer than the metadata: no leader until a refresh
    c.seek(A, OffsetAndMetadata(3, leader_epoch=7))
    assert c.position(A).current_leader == LeaderAndEpoch(None, 7)
    [(node, request)] = validations(c)
    assert (node, asked(request)) == (1, [(1, 1, 1)])
    assert c.metadata.update_requested


def test_a_partition_in_its_backoff_does_not_hold_back_the_others():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 6)])
    cluster.lead(B, 1, 1, [(1, 6)])
    c = awaiting(cluster, A, B)
    [(node, request)] = validations(c)
    assert asked(request) == [(0, 1, 1), (1, 1, 1)]
    c.on_response(node, request, answered(epoch_end(A, -1, -1, Errors.UNKNOWN_LEADER_EPOCH)), NOW)  # B unanswered
    [(_, again)] = validations(c)
    assert asked(again) == [(1, 1, 1)]
    assert c.awaiting_validation(A)


# --- answers -----------------------------------------------------------------------------------------------
def one_request(cluster: Cluster, *tps: TopicPartition, **kw):
    c = awaiting(cluster, *tps, **kw)
    [(node, request)] = validations(c)
    return c, node, request


def both_on_broker_1() -> Cluster:
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 6)])
    cluster.lead(B, 1, 1, [(1, 6)])
    return cluster


def test_an_error_for_one_partition_does_not_stop_the_next_one_being_applied():
    c, node, request = one_request(both_on_broker_1(), A, B)
    c.on_response(node, request, answered(epoch_end(A, -1, -1, Errors.NOT_LEADER_OR_FOLLOWER), epoch_end(B, 1, 6)), NOW)
    assert c.state_of(B) == FetchState.FETCHING and c.position(B).offset == 5
    assert c.awaiting_validation(A) and c.metadata.update_requested
    assert validations(c, NOW + BACKOFF - 1) == []
    [(_, again)] = validations(c, NOW + BACKOFF)
    assert asked(again) == [(0, 1, 1)]


def test_an_unknown_leader_epoch_is_retried_after_the_backoff_without_a_metadata_refresh():
    c, node, request = one_request(both_on_broker_1(), A)
    assert not c.metadata.update_requested
    c.on_response(node, request, answered(epoch_end(A, -1, -1, Errors.UNKNOWN_LEADER_EPOCH)), NOW)
    assert not c.metadata.update_requested
    assert c.poll(NOW).count() == 0  # nothing to raise
    assert c.next_deadline_ms() == NOW + BACKOFF


def test_topic_authorization_failure_is_raised_and_the_validation_retried():
    c, node, request = one_request(both_on_broker_1(), A)
    c.on_response(node, request, answered(epoch_end(A, -1, -1, Errors.TOPIC_AUTHORIZATION_FAILED)), NOW)
    with pytest.raises(TopicAuthorizationFailedError, match=r"^not authorized to describe a$"):
        c.poll(NOW)
    assert c.poll(NOW).count() == 0
    assert c.awaiting_validation(A)
    assert len(validations(c, NOW + BACKOFF)) == 1


def test_answers_for_partitions_not_asked_are_ignored():
    c, node, request = one_request(both_on_broker_1(), A)
    foreign = epoch_end(B, -1, -1, Errors.TOPIC_AUTHORIZATION_FAILED)  # assigned, but not in this request
    c.on_response(node, request, answered(foreign, epoch_end(A, 1, 6)), NOW)
    assert c.poll(NOW).count() == 0  # nothing raised for B
    assert c.state_of(A) == FetchState.FETCHING


def test_an_answer_for_a_partition_unassigned_meanwhile_is_ignored():
    c, node, request = one_request(both_on_broker_1(), A, B)
    c.unassign([A])
    c.on_response(node, request, answered(epoch_end(A, 1, 2), epoch_end(B, 1, 6)), NOW)
    assert c.truncations == [] and A not in c.assignment
    assert c.state_of(B) == FetchState.FETCHING


def test_an_answer_for_a_position_that_moved_meanwhile_is_ignored_and_the_rest_applied():
    c, node, request = one_request(both_on_broker_1(), A, B)
    c.seek(A, OffsetAndMetadata(3, leader_epoch=1))  # still awaiting validation, at another position
    c.on_response(node, request, answered(epoch_end(A, 1, 2), epoch_end(B, 1, 6)), NOW)
    assert c.truncations == []
    assert (c.state_of(A), c.position(A).offset) == (FetchState.AWAIT_VALIDATION, 3)
    assert c.state_of(B) == FetchState.FETCHING


# --- what the truncation events record ------------------------------------------------------------------
def test_a_rewind_records_when_it_was_detected():
    c, node, request = one_request(both_on_broker_1(), A)
    position = c.position(A)
    c.on_response(node, request, answered(epoch_end(A, 1, 2)), NOW)
    assert c.truncations == [TruncationEvent(A, position, 2, 1, 3, "rewound", NOW)]


def test_an_undefined_answer_records_a_reset_event_and_resets_by_policy():
    c, node, request = one_request(both_on_broker_1(), A)
    position = c.position(A)
    c.on_response(node, request, answered(epoch_end(A, -1, -1)), NOW)
    assert c.truncations == [TruncationEvent(A, position, None, None, None, "reset", NOW)]
    assert c.awaiting_reset(A)


def test_a_raised_truncation_records_the_divergent_epoch():
    c, node, request = one_request(both_on_broker_1(), A, policy="none")
    position = c.position(A)
    c.on_response(node, request, answered(epoch_end(A, 0, 2)), NOW)
    assert c.truncations == [TruncationEvent(A, position, 2, 0, 3, "raised", NOW)]
    with pytest.raises(LogTruncationError) as raised:
        c.poll(NOW)
    assert raised.value.divergent_offsets == {A: OffsetAndMetadata(2, "", 0)}
    assert raised.value.offset_out_of_range_partitions == {A: 5}


def test_a_truncation_validated_again_before_the_application_polls_is_raised_once():
    """Policy none keeps the partition awaiting validation; asked again after the back-off, the same
    answer replaces the pending error (Kafka keeps one, `cachedValidatePositionsException`)."""
    c, node, request = one_request(both_on_broker_1(), A, policy="none")
    c.on_response(node, request, answered(epoch_end(A, 0, 2)), NOW)
    ((node, again),) = validations(c, NOW + BACKOFF)
    c.on_response(node, again, answered(epoch_end(A, 0, 2)), NOW + BACKOFF)
    with pytest.raises(LogTruncationError) as raised:
        c.poll(NOW + BACKOFF)
    assert raised.value.divergent_offsets == {A: OffsetAndMetadata(2, "", 0)}
    c.seek(A, raised.value.divergent_offsets[A])
    assert c.poll(NOW + BACKOFF).count() == 0  # nothing else pending: the application's seek stands
    assert c.awaiting_validation(A) and c.position(A).offset == 2


# --- beyond Kafka: a rewind that must be validated again (track_consumed_epochs) -------------------------
def test_a_rewind_to_an_epoch_the_new_leader_never_had_is_validated_again():
    """Read 0-4 in epoch 0 and 5-9 in epoch 2 from broker 1; broker 2 never had epoch 2 (it has epoch 0
    up to 6 and epoch 1 at 6-7): the rewind to 5 is validated again, in epoch 0, and holds."""
    cluster = Cluster()
    cluster.lead(A, 1, 2, [(0, 5), (2, 5)])
    c = consumer(A, track_consumed_epochs=True)
    c.seek(A, 0)
    cluster.run(c, 0)
    assert c.poll(0).count() == 10
    cluster.lead(A, 2, 3, [(0, 6), (1, 2), (3, 1)])
    c.metadata.request_update()
    cluster.sent.clear()
    cluster.run(c, NOW)
    assert [asked(r) for r in cluster.requests(OffsetsForLeaderEpochRequest)] == [[(0, 2, 3)], [(0, 0, 3)]]
    [event] = c.truncations
    assert (event.divergent_offset, event.divergent_epoch, event.resolution) == (5, 0, "rewound")
    assert (c.state_of(A), c.position(A)) == (FetchState.FETCHING, FetchPosition(5, 0, LeaderAndEpoch(2, 3)))
    assert [(r.offset, r.leader_epoch) for r in c.poll(NOW).records()] == [(5, 0), (6, 1), (7, 1), (8, 3)]
    assert c.assignment[A].consumed.entries() == [(0, 0), (1, 6), (3, 8)]

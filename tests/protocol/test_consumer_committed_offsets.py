"""Committed offsets in the consumer (the offset part of Kafka's `CommitRequestManager` /
`ConsumerCoordinator`), driven through the public `Consumer` with hand-made coordinator answers:
OffsetFetch for partitions without a position (the committed leader epoch read from v5 on, KIP-320;
offset 0 is a real offset, -1 means none), answers that no longer apply, per-partition errors, and
OffsetCommit (what a request carries, what counts as committed, a lost request sent again)."""

from __future__ import annotations

import pytest
from consumer_requests_support import (
    BACKOFF,
    EPOCH,
    TIMEOUT,
    TP0,
    TP1,
    answer_fetch,
    batch,
    cluster,
    fetched,
    known_consumer,
    offsets,
    one_fetch,
)

from epochguard import Consumer
from epochguard.client.consumer import FetchState
from epochguard.errors import Errors, NoOffsetForPartitionError
from epochguard.protocol.messages import (
    EpochEndOffset,
    FetchRequest,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchPartitionResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
)
from epochguard.types import FetchPosition, LeaderAndEpoch, OffsetAndMetadata, TopicPartition

COORD = 500
LEADER = LeaderAndEpoch(1, EPOCH)


def group_consumer(*partitions: TopicPartition, **kw) -> Consumer:
    return known_consumer(partitions or (TP0,), group_id="g", coordinator_id=COORD, **kw)


def sent(c: Consumer, now_ms: int, kind: type) -> list:
    """The requests of `kind` that `poll_requests` sends now (node, request)."""
    return [(node, r) for node, r in c.poll_requests(now_ms) if isinstance(r, kind)]


def offset_fetch(c: Consumer, now_ms: int = 0) -> OffsetFetchRequest:
    [(node, request)] = sent(c, now_ms, OffsetFetchRequest)
    assert node == COORD
    return request


def committed(tp: TopicPartition, offset: int, epoch: int = -1, metadata: str = "", error: Errors = Errors.NONE):
    return OffsetFetchPartitionResponse(tp.topic, tp.partition, offset, epoch, metadata, error)


def answer(c: Consumer, request, *parts, version: int = 8, now_ms: int = 0) -> None:
    c.on_response(COORD, request, OffsetFetchResponse(parts, version=version), now_ms)


# --- where a committed offset puts the position ------------------------------------------------------
@pytest.mark.parametrize("version", [5, 8])
def test_a_committed_offset_from_v5_on_carries_its_leader_epoch_and_is_validated(version):
    c = group_consumer()
    request = offset_fetch(c)
    assert request.partitions == (TP0,)
    answer(c, request, committed(TP0, 42, EPOCH - 1, "meta"), version=version)
    assert c.position(TP0) == FetchPosition(42, EPOCH - 1, LEADER)
    assert c.awaiting_validation(TP0)
    assert c.committed == {TP0: OffsetAndMetadata(42, "meta", EPOCH - 1)}


def test_a_committed_offset_before_v5_has_no_epoch_and_is_fetched_at_once():
    c = group_consumer()
    answer(c, offset_fetch(c), committed(TP0, 42, EPOCH - 1, "meta"), version=4)
    assert c.position(TP0) == FetchPosition(42, None, LEADER)
    assert c.state_of(TP0) == FetchState.FETCHING
    assert c.committed == {TP0: OffsetAndMetadata(42, "meta", None)}


def test_a_pre_kip320_consumer_ignores_the_committed_epoch():
    c = group_consumer(protocol="pre-kip-320")
    answer(c, offset_fetch(c), committed(TP0, 42, EPOCH - 1), version=8)
    assert c.position(TP0).offset == 42 and c.position(TP0).offset_epoch is None
    assert c.state_of(TP0) == FetchState.FETCHING
    assert c.committed[TP0].leader_epoch is None


def test_committed_offset_zero_is_a_position_not_a_reset():
    c = group_consumer()
    answer(c, offset_fetch(c), committed(TP0, 0))
    assert c.position(TP0) == FetchPosition(0, None, LEADER)
    assert sent(c, 0, ListOffsetsRequest) == []


def test_no_committed_offset_resets_by_policy_for_lack_of_a_position():
    c = group_consumer()
    answer(c, offset_fetch(c), committed(TP0, -1), now_ms=7)
    assert c.awaiting_reset(TP0)
    [(node, request)] = sent(c, 7, ListOffsetsRequest)
    c.on_response(node, request, ListOffsetsResponse((ListOffsetsPartitionResponse("t", 0, offset=3, leader_epoch=EPOCH),)), 8)
    [event] = c.resets
    assert (event.policy, event.reason, event.from_offset, event.to_offset) == ("earliest", "no_position", None, 3)


def test_no_committed_offset_under_policy_none_raises():
    c = group_consumer(policy="none")
    answer(c, offset_fetch(c), committed(TP0, -1))
    with pytest.raises(NoOffsetForPartitionError):
        c.poll(0)


# --- several partitions in one answer: each is taken on its own ---------------------------------------
@pytest.mark.parametrize(
    "first",
    [committed(TP0, 0, error=Errors.COORDINATOR_NOT_AVAILABLE), committed(TP0, -1)],
    ids=["error", "nothing-committed"],
)
def test_a_partition_answered_with_an_error_or_nothing_does_not_stop_the_next(first):
    c = group_consumer(TP0, TP1)
    request = offset_fetch(c)
    assert request.partitions == (TP0, TP1)
    answer(c, request, first, committed(TP1, 9))
    assert c.position(TP1) == FetchPosition(9, None, LEADER)


def test_a_partition_positioned_meanwhile_keeps_its_position_and_the_next_is_still_taken():
    c = group_consumer(TP0, TP1)
    request = offset_fetch(c)
    c.seek(TP0, 100)
    answer(c, request, committed(TP0, 3), committed(TP1, 9))
    assert c.position(TP0).offset == 100
    assert c.position(TP1).offset == 9
    assert TP0 not in c.committed


def test_an_answer_for_a_partition_unassigned_meanwhile_is_ignored():
    c = group_consumer(TP0, TP1)
    request = offset_fetch(c)
    c.unassign([TP0])
    answer(c, request, committed(TP0, 3), committed(TP1, 9))
    assert set(c.assignment) == {TP1} and c.position(TP1).offset == 9


def test_an_error_answer_is_asked_again_after_the_backoff_not_at_once():
    c = group_consumer()
    answer(c, offset_fetch(c), committed(TP0, 0, error=Errors.COORDINATOR_NOT_AVAILABLE), now_ms=20)
    assert c.state_of(TP0) == FetchState.INITIALIZING
    assert c.next_deadline_ms() == 20 + BACKOFF
    assert sent(c, 20 + BACKOFF - 1, OffsetFetchRequest) == []
    assert offset_fetch(c, 20 + BACKOFF).partitions == (TP0,)


# --- without a group the reset policy decides ---------------------------------------------------------
@pytest.mark.parametrize(("group_id", "coordinator_id"), [("g", None), (None, COORD)])
def test_without_both_a_group_and_a_coordinator_the_reset_policy_decides(group_id, coordinator_id):
    c = known_consumer([TP0], group_id=group_id, coordinator_id=coordinator_id)
    requests = c.poll_requests(0)
    assert [type(r) for _, r in requests] == [ListOffsetsRequest]
    assert c.awaiting_reset(TP0)


# --- OffsetCommit ------------------------------------------------------------------------------------
def positioned(*partitions: TopicPartition) -> Consumer:
    c = group_consumer(*partitions)
    for tp in partitions:
        c.seek(tp, 0)
    return c


def test_a_commit_carries_offset_epoch_and_metadata_and_counts_once_answered():
    c = positioned(TP0, TP1)
    c.commit({TP1: OffsetAndMetadata(8, "m1", 4), TP0: OffsetAndMetadata(0, "m0", None)})
    [(node, request)] = sent(c, 0, OffsetCommitRequest)
    assert node == COORD and request.group_id == "g"
    parts = [(p.tp, p.committed_offset, p.committed_leader_epoch, p.committed_metadata) for p in request.partitions]
    assert parts == [(TP0, 0, -1, "m0"), (TP1, 8, 4, "m1")]
    assert c.committed == {}  # not before the coordinator says so
    c.on_response(COORD, request, OffsetCommitResponse(tuple(OffsetCommitPartitionResponse("t", p) for p in (0, 1))), 0)
    assert c.committed == {TP0: OffsetAndMetadata(0, "m0", None), TP1: OffsetAndMetadata(8, "m1", 4)}


def test_a_partition_whose_commit_failed_is_not_counted_as_committed():
    c = positioned(TP0, TP1)
    c.commit({TP0: OffsetAndMetadata(5, "a"), TP1: OffsetAndMetadata(6, "b")})
    [(_, request)] = sent(c, 0, OffsetCommitRequest)
    answers = (
        OffsetCommitPartitionResponse("t", 0, Errors.ILLEGAL_GENERATION),
        OffsetCommitPartitionResponse("t", 1),
        OffsetCommitPartitionResponse("t", 2),  # not in the request
    )
    c.on_response(COORD, request, OffsetCommitResponse(answers), 0)
    assert c.committed == {TP1: OffsetAndMetadata(6, "b")}


def test_a_lost_commit_is_sent_again_with_the_same_offsets():
    c = positioned(TP0)
    c.commit({TP0: OffsetAndMetadata(5, "kept", 3)})
    [(node, request)] = sent(c, 0, OffsetCommitRequest)
    c.on_request_failed(node, request, 10)
    [(_, again)] = sent(c, 10, OffsetCommitRequest)
    assert again.partitions == request.partitions
    c.on_response(COORD, again, OffsetCommitResponse((OffsetCommitPartitionResponse("t", 0),)), 11)
    assert c.committed == {TP0: OffsetAndMetadata(5, "kept", 3)}


def test_an_answer_of_the_wrong_kind_to_a_commit_is_ignored():
    c = positioned(TP0)
    c.commit({TP0: OffsetAndMetadata(5)})
    [(_, request)] = sent(c, 0, OffsetCommitRequest)
    c.on_response(COORD, request, cluster({TP0: 1}), 0)  # a MetadataResponse: dropped, no crash
    assert c.committed == {}


def test_a_queued_commit_is_due_at_once_and_nothing_else_is():
    c = positioned(TP0)
    one_fetch(c, 0)
    assert c.next_deadline_ms() == TIMEOUT  # only the fetch's timeout: no commit is due
    c.commit({TP0: OffsetAndMetadata(1)})
    assert c.next_deadline_ms() == 0
    assert [type(r) for _, r in c.poll_requests(0)] == [OffsetCommitRequest]
    assert c.next_deadline_ms() == TIMEOUT


# --- beyond Kafka: the consumed-epoch history starts at the committed offset ----------------------------
def test_consumed_epochs_are_tracked_from_a_committed_position():
    """The consumer starts from committed offset 0 (epoch 0) and reads 0-3 in epoch 0, 4-9 in epoch 1.
    An uncleanly elected leader that only ever had epoch-0 records up to 12 answers (0, 12) for epoch 1:
    Kafka's rule sees nothing (12 >= 10); the tracked history finds the divergence at 4."""
    c = group_consumer(track_consumed_epochs=True)
    answer(c, offset_fetch(c), committed(TP0, 0, 0), version=8)
    validate(c, 0, leader_epoch=0, end_offset=4)
    request = one_fetch(c, 0)
    answer_fetch(c, 1, request, fetched(TP0, batch(0, 4, epoch=0) + batch(4, 6, epoch=1)))
    assert offsets(c.poll(0)) == list(range(10))
    c.metadata.update(cluster({TP0: 2}, epoch=EPOCH + 1), 0)
    validate(c, 0, leader_epoch=0, end_offset=12)
    [event] = c.truncations
    assert (event.divergent_offset, event.divergent_epoch) == (4, 0)
    assert c.position(TP0).offset == 4


def validate(c: Consumer, now_ms: int, leader_epoch: int, end_offset: int) -> None:
    """Answer the one OffsetsForLeaderEpoch the consumer sends now."""
    requests = [(n, r) for n, r in c.poll_requests(now_ms) if not isinstance(r, MetadataRequest | FetchRequest)]
    [(node, request)] = requests
    assert isinstance(request, OffsetsForLeaderEpochRequest)
    answer_ = EpochEndOffset("t", 0, Errors.NONE, leader_epoch, end_offset)
    c.on_response(node, request, OffsetsForLeaderEpochResponse((answer_,)), now_ms)

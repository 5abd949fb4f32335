"""The consumer's ListOffsets requests through its public API (Kafka's `OffsetsRequestManager`): what a
reset or an `offsets_for_times` lookup sends (the current leader epoch for KIP-320 fencing, the
isolation level), how an error answer is retried, when a lookup times out, what a reset reports, and
when `next_deadline_ms` says the next attempt is due."""

from __future__ import annotations

import pytest
from consumer_script import BACKOFF, TIMEOUT, Cluster, consumer, sent_now

from epochguard.errors import Errors, RequestTimedOutError
from epochguard.protocol.messages import (
    FetchRequest,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from epochguard.types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchPosition,
    IsolationLevel,
    LeaderAndEpoch,
    OffsetResetEvent,
    TopicPartition,
)

A = TopicPartition("a", 0)
B = TopicPartition("a", 1)
LATER = 10_000  # a time when everything of the first rounds is settled


def answer(
    tp: TopicPartition, offset: int, epoch: int = -1, error: Errors = Errors.NONE, timestamp: int = -1
) -> ListOffsetsResponse:
    return ListOffsetsResponse((ListOffsetsPartitionResponse(tp.topic, tp.partition, error, timestamp, offset, epoch),))


def held_reset(cluster: Cluster, *tps: TopicPartition, **kw):
    """A consumer whose first reset request is held back: (consumer, node, request)."""
    c = consumer(*tps, **kw)
    [(node, request, _)] = cluster.run(c, 0, hold=lambda r: isinstance(r, ListOffsetsRequest))
    return c, node, request


# --- what is sent ---------------------------------------------------------------------------------------
def test_a_reset_asks_the_leader_with_its_current_epoch_and_the_isolation_level():
    cluster = Cluster()
    cluster.lead(A, 1, 3, [(3, 4)])
    _c, node, request = held_reset(cluster, A, policy="latest", isolation_level=IsolationLevel.READ_COMMITTED)
    assert node == 1
    [part] = request.partitions
    assert (part.topic, part.partition_index, part.timestamp, part.current_leader_epoch) == ("a", 0, LATEST_TIMESTAMP, 3)
    assert request.isolation_level == IsolationLevel.READ_COMMITTED  # LATEST means the LSO under read_committed


def test_a_lookup_asks_the_leader_with_its_current_epoch_and_the_isolation_level():
    cluster = Cluster()
    cluster.lead(A, 1, 3, [(3, 4)])
    c = consumer(A, isolation_level=IsolationLevel.READ_COMMITTED)
    cluster.run(c, 0)
    c.offsets_for_times({A: 1_250}, LATER)
    [(node, request)] = sent_now(c, LATER, ListOffsetsRequest)
    assert node == 1
    [part] = request.partitions
    assert (part.topic, part.partition_index, part.timestamp, part.current_leader_epoch) == ("a", 0, 1_250, 3)
    assert request.isolation_level == IsolationLevel.READ_COMMITTED


def test_a_pre_kip_320_consumer_sends_no_leader_epoch():
    cluster = Cluster()
    cluster.lead(A, 1, 3, [(3, 4)])
    c, _node, request = held_reset(cluster, A, protocol="pre-kip-320")
    assert request.partitions[0].current_leader_epoch == -1
    c.offsets_for_times({A: 1_250}, LATER)
    [(_, lookup)] = sent_now(c, LATER, ListOffsetsRequest)
    assert lookup.partitions[0].current_leader_epoch == -1


def test_resets_of_partitions_led_by_different_brokers_go_to_each_leader():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 2)])
    cluster.lead(B, 2, 5, [(5, 2)])
    c = consumer(A, B, policy="earliest")
    cluster.run(c, 0)
    sent = [(n, [(p.partition_index, p.timestamp, p.current_leader_epoch) for p in r.partitions])
            for n, r in cluster.sent if isinstance(r, ListOffsetsRequest)]
    assert sent == [(1, [(0, EARLIEST_TIMESTAMP, 1)]), (2, [(1, EARLIEST_TIMESTAMP, 5)])]


# --- answers ---------------------------------------------------------------------------------------------
def test_a_reset_reports_the_partition_offset_epoch_and_time():
    cluster = Cluster()
    cluster.lead(A, 1, 2, [(1, 3), (2, 2)])
    c, node, request = held_reset(cluster, A, policy="latest")
    c.on_response(node, request, answer(A, 5, 2), 1_234)
    assert c.resets == [OffsetResetEvent(A, "latest", "no_position", None, 5, 2, 1_234)]
    assert c.position(A) == FetchPosition(5, None, LeaderAndEpoch(1, 2))


def test_a_reset_answer_with_epoch_one_raises_a_last_seen_epoch_of_zero():
    cluster = Cluster()
    cluster.lead(A, 1, 0, [(0, 3)])
    c, node, request = held_reset(cluster, A, policy="latest")
    assert c.metadata.last_seen_leader_epoch(A) == 0
    c.on_response(node, request, answer(A, 5, 1), 0)
    assert c.metadata.last_seen_leader_epoch(A) == 1
    assert c.metadata.update_requested


@pytest.mark.parametrize("error", [Errors.NOT_LEADER_OR_FOLLOWER, Errors.UNKNOWN_TOPIC_OR_PARTITION])
def test_a_reset_failing_on_stale_metadata_refreshes_it_and_retries_after_the_backoff(error):
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    c, node, request = held_reset(cluster, A)
    assert not c.metadata.update_requested
    c.on_response(node, request, answer(A, -1, error=error), LATER)
    assert c.metadata.update_requested
    assert c.awaiting_reset(A)
    assert sent_now(c, LATER + BACKOFF - 1, ListOffsetsRequest) == []
    assert len(sent_now(c, LATER + BACKOFF, ListOffsetsRequest)) == 1


@pytest.mark.parametrize("error", [Errors.NONE, Errors.UNKNOWN_SERVER_ERROR])
def test_a_reset_without_an_offset_is_retried_without_asking_for_metadata(error):
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    c, node, request = held_reset(cluster, A)
    c.on_response(node, request, answer(A, -1, error=error), LATER)
    assert not c.metadata.update_requested
    assert c.awaiting_reset(A) and c.resets == []
    assert c.next_deadline_ms() == LATER + BACKOFF


# --- when the next attempt is due ------------------------------------------------------------------------
def quiet(cluster: Cluster, *tps: TopicPartition, **kw):
    """A consumer that reset, fetched, and now has a fetch in flight that nobody answers."""
    c = consumer(*tps, **kw)
    cluster.run(c, 0, hold=lambda r: isinstance(r, FetchRequest))
    cluster.run(c, 0, rounds=1)
    return c


def test_a_fetching_consumer_with_a_fetch_in_flight_is_next_due_when_the_fetch_times_out():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    c = quiet(cluster, A)
    assert c.position(A).offset == 0 and not c.awaiting_reset(A)
    assert c.next_deadline_ms() == TIMEOUT


def test_a_partition_waiting_for_its_reset_backoff_sets_the_deadline():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    c, node, request = held_reset(cluster, A)
    c.on_response(node, request, answer(A, -1, error=Errors.UNKNOWN_SERVER_ERROR), LATER)
    assert c.next_deadline_ms() == LATER + BACKOFF


def test_a_new_lookup_is_due_at_once():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    c = quiet(cluster, A)
    c.offsets_for_times({A: 1_000}, 0)
    assert c.next_deadline_ms() <= 0


def test_a_failed_lookup_is_retried_after_the_backoff_and_its_deadline_is_due_then():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    c = quiet(cluster, A)
    lookup = c.offsets_for_times({A: 1_000}, 1_000)
    [(node, request)] = sent_now(c, 1_000, ListOffsetsRequest)
    c.on_response(node, request, answer(A, -1, error=Errors.UNKNOWN_SERVER_ERROR), 1_000)
    assert not lookup.done
    assert c.next_deadline_ms() == 1_000 + BACKOFF
    assert sent_now(c, 1_000 + BACKOFF - 1, ListOffsetsRequest) == []
    [(node, request)] = sent_now(c, 1_000 + BACKOFF, ListOffsetsRequest)
    c.on_response(node, request, answer(A, 2, 1, timestamp=1_100), 1_000 + BACKOFF)
    assert lookup.done and lookup.error is None and lookup.result[A].offset == 2


def test_a_lookup_that_cannot_be_sent_is_due_now_and_times_out_at_its_deadline():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    c = quiet(cluster, A)
    nowhere = TopicPartition("gone", 0)  # no metadata names a leader for it
    lookup = c.offsets_for_times({nowhere: 1_000}, 1_000)
    assert c.next_deadline_ms() <= 1_000
    sent_now(c, 1_000 + TIMEOUT - 1, ListOffsetsRequest)
    assert not lookup.done
    assert sent_now(c, 1_000 + TIMEOUT, ListOffsetsRequest) == []
    assert lookup.done and lookup.result == {}
    assert isinstance(lookup.error, RequestTimedOutError)
    assert str(lookup.error) == "offsets_for_times timed out"


def test_an_answered_lookup_does_not_time_out_later():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    c = quiet(cluster, A)
    lookup = c.offsets_for_times({A: 1_000}, 1_000)
    [(node, request)] = sent_now(c, 1_000, ListOffsetsRequest)
    c.on_response(node, request, answer(A, 2, 1, timestamp=1_100), 1_000)
    c.poll_requests(1_000 + 2 * TIMEOUT)
    assert lookup.done and lookup.error is None


# --- beginning_offsets / end_offsets / highwater / paused (kafka-python's methods) ----------------------
def test_end_and_beginning_offsets_ask_latest_and_earliest_and_read_the_offset_of_an_answer_without_timestamp():
    """The broker answers EARLIEST / LATEST with timestamp -1: an offset, not an `OffsetAndTimestamp` (which
    refuses a negative timestamp, so building one would fail the lookup)."""
    cluster = Cluster()
    cluster.lead(A, 1, 3, [(1, 4), (3, 2)])
    c = consumer(A, isolation_level=IsolationLevel.READ_COMMITTED)
    cluster.run(c, 0)
    end, begin = c.end_offsets([A], LATER), c.beginning_offsets([A], LATER)
    sent = sent_now(c, LATER, ListOffsetsRequest)
    assert [(p.timestamp, p.current_leader_epoch, r.isolation_level) for _, r in sent for p in r.partitions] == [
        (LATEST_TIMESTAMP, 3, IsolationLevel.READ_COMMITTED), (EARLIEST_TIMESTAMP, 3, IsolationLevel.READ_COMMITTED)]
    for node, request in sent:
        c.on_response(node, request, cluster.answer(node, request), LATER)
    assert (end.done, end.error, end.offsets) == (True, None, {A: 6})
    assert (begin.done, begin.error, begin.offsets) == (True, None, {A: 0})
    assert end.result == {} and begin.result == {}


def test_a_lookup_past_the_last_timestamp_is_none_and_its_offset_minus_one():
    cluster = Cluster()
    cluster.lead(A, 1, 3, [(1, 4), (3, 2)])  # timestamps 1100 and 1300
    c = consumer(A)
    cluster.run(c, 0)
    lookup = c.offsets_for_times({A: 1_301}, LATER)
    [(node, request)] = sent_now(c, LATER, ListOffsetsRequest)
    c.on_response(node, request, cluster.answer(node, request), LATER)
    assert (lookup.done, lookup.result, lookup.offsets) == (True, {A: None}, {A: -1})


def test_a_timestamp_answer_without_a_timestamp_is_none_not_a_crash():
    cluster = Cluster()
    cluster.lead(A, 1, 3, [(3, 2)])
    c = consumer(A)
    cluster.run(c, 0)
    lookup = c.offsets_for_times({A: 1_000}, LATER)
    [(node, request)] = sent_now(c, LATER, ListOffsetsRequest)
    c.on_response(node, request, answer(A, 4, 3, timestamp=-1), LATER)
    assert lookup.done and lookup.result == {A: None}


def test_a_lookup_no_list_offsets_version_can_carry_fails_at_once_and_a_lost_one_is_retried():
    from epochguard.errors import KafkaConnectionError, UnsupportedVersionError

    cluster = Cluster()
    cluster.lead(A, 1, 3, [(3, 2)])
    c = consumer(A)
    cluster.run(c, 0)
    lost = c.end_offsets([A], LATER)
    [(node, request)] = sent_now(c, LATER, ListOffsetsRequest)
    c.on_request_failed(node, request, LATER, KafkaConnectionError("reset by peer"))
    assert not lost.done and lost.error is None
    [(node, request)] = sent_now(c, LATER + BACKOFF, ListOffsetsRequest)  # retried after the back-off
    refused = UnsupportedVersionError("the broker does not support ListOffsets")
    c.on_request_failed(node, request, LATER + BACKOFF, refused)
    assert lost.done and lost.error is refused
    assert sent_now(c, LATER + 2 * BACKOFF, ListOffsetsRequest) == []  # not retried
    assert c.awaiting_reset(A) is False  # the position's own requests are untouched


def test_a_lookup_times_out_after_its_own_timeout():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    c = consumer(A)
    cluster.run(c, 0)
    lookup = c.end_offsets([TopicPartition("gone", 0)], LATER, timeout_ms=50)
    sent_now(c, LATER + 49, ListOffsetsRequest)
    assert not lookup.done
    sent_now(c, LATER + 50, ListOffsetsRequest)
    assert isinstance(lookup.error, RequestTimedOutError)


def test_highwater_is_none_before_a_fetch_and_the_last_fetch_answers_after_it():
    cluster = Cluster()
    cluster.lead(A, 1, 1, [(1, 3)])
    c = consumer(A)
    assert c.highwater(A) is None
    cluster.run(c, 0)
    assert c.highwater(A) == 3 and c.poll(0).count() == 3
    cluster.lead(A, 1, 1, [(1, 5)])  # the leader's log grew to 5
    cluster.run(c, 1)
    assert c.highwater(A) == 5 and c.poll(1).count() == 2
    with pytest.raises(ValueError, match="not assigned"):
        c.highwater(B)


def test_paused_lists_the_paused_assigned_partitions():
    c = consumer(A, B)
    assert c.paused() == set()
    c.pause(A)
    assert c.paused() == {A}
    c.resume(A)
    c.pause(B)
    assert c.paused() == {B}
    c.unassign([B])
    assert c.paused() == set()

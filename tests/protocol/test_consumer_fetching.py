"""The consumer's Fetch requests and how it takes their answers (Kafka's `FetchRequestManager` /
`AbstractFetch` and `FetchCollector.handleInitializeErrors`), driven through the public `Consumer`
with hand-made answers: which partitions go out to which node and when, answers that no longer apply,
preferred read replicas (KIP-392), OFFSET_OUT_OF_RANGE, stale-leader errors and KIP-951 leader hints,
and the answers that carry no records to hand out."""

from __future__ import annotations

import struct

import pytest
from consumer_requests_support import (
    BACKOFF,
    EPOCH,
    TP0,
    TP1,
    answer_fetch,
    batch,
    cluster,
    fetched,
    fetches,
    known_consumer,
    offsets,
    one_fetch,
)

from epochguard import Consumer
from epochguard._core import encode_batch
from epochguard.client.consumer import FetchState
from epochguard.errors import (
    CorruptRecordError,
    Errors,
    OffsetOutOfRangeError,
    TopicAuthorizationFailedError,
)
from epochguard.protocol.messages import FetchRequest, LeaderIdAndEpoch, ListOffsetsRequest, MetadataRequest
from epochguard.types import EARLIEST_TIMESTAMP, FetchPosition, LeaderAndEpoch, TopicPartition


def consumer(
    positions: dict[TopicPartition, int],
    leaders: dict[TopicPartition, int] | None = None,
    policy: str = "earliest",
    **kw,
) -> Consumer:
    """A consumer fetching `positions` (validated, so fetches go out at once)."""
    c = known_consumer(positions, leaders, policy=policy, **kw)
    for tp, offset in positions.items():
        c.seek(tp, offset)
    return c


# --- which partitions go out, to which node, and when ----------------------------------------------
def test_a_partition_with_records_waiting_for_poll_is_not_fetched_again():
    c = consumer({TP0: 0})
    request = one_fetch(c, 0)
    answer_fetch(c, 1, request, fetched(TP0, batch(0, 3)))
    assert fetches(c, 0) == {}  # the records are buffered: nothing more until poll() hands them out
    assert offsets(c.poll(0)) == [0, 1, 2]
    assert fetches(c, 0)[1][1] == [(TP0, 3)]


def test_a_paused_partition_does_not_hold_back_the_ones_after_it():
    c = consumer({TP0: 0, TP1: 7})
    c.pause(TP0)
    assert fetches(c, 0)[1][1] == [(TP1, 7)]


def test_a_partition_in_retry_backoff_waits_while_the_others_are_fetched():
    c = consumer({TP0: 0, TP1: 7})
    [(request, sent)] = fetches(c, 0).values()
    assert sent == [(TP0, 0), (TP1, 7)]
    answer_fetch(c, 1, request, fetched(TP0, error=Errors.UNKNOWN_LEADER_EPOCH), fetched(TP1), now_ms=10)
    [(request, sent)] = fetches(c, 10).values()
    assert sent == [(TP1, 7)]
    answer_fetch(c, 1, request, fetched(TP1), now_ms=10 + BACKOFF)
    assert fetches(c, 10 + BACKOFF)[1][1] == [(TP0, 0), (TP1, 7)]


def test_a_fetch_that_failed_is_sent_again_after_the_backoff_not_at_once():
    c = consumer({TP0: 0})
    request = one_fetch(c, 0)
    answer_fetch(c, 1, request, fetched(TP0, error=Errors.UNKNOWN_LEADER_EPOCH), now_ms=10)
    assert c.next_deadline_ms() == 10 + BACKOFF
    assert fetches(c, 10 + BACKOFF - 1) == {}
    assert fetches(c, 10 + BACKOFF)[1][1] == [(TP0, 0)]


def test_a_partition_without_a_leader_asks_for_metadata_and_the_others_are_still_fetched():
    c = consumer({TP0: 0, TP1: 7}, leaders={TP0: -1, TP1: 2})
    sent = c.poll_requests(0)
    assert [(node, [p.tp for p in r.partitions]) for node, r in sent] == [(2, [TP1])]
    assert [type(r) for _, r in c.poll_requests(0)] == [MetadataRequest]  # asked for by the fetch round


def test_partitions_are_fetched_from_their_own_leaders_one_request_per_node():
    c = consumer({TP0: 0, TP1: 7}, leaders={TP0: 2, TP1: 1})
    out = fetches(c, 0)
    assert {node: sent for node, (_, sent) in out.items()} == {1: [(TP1, 7)], 2: [(TP0, 0)]}
    assert all(r.partitions[0].current_leader_epoch == EPOCH for r, _ in out.values())


# --- answers that no longer apply --------------------------------------------------------------------
def test_an_answer_of_the_wrong_kind_is_ignored_and_the_partition_fetched_again():
    c = consumer({TP0: 0})
    request = one_fetch(c, 0)
    c.on_response(1, request, cluster({TP0: 1}), 0)  # a MetadataResponse to a Fetch: dropped, no crash
    assert c.poll(0).count() == 0
    assert fetches(c, 0)[1][1] == [(TP0, 0)]


def test_an_answer_for_a_partition_unassigned_meanwhile_is_dropped():
    c = consumer({TP0: 0, TP1: 0})
    request = one_fetch(c, 0)
    c.unassign([TP0])
    answer_fetch(c, 1, request, fetched(TP0, batch(0, 2)), fetched(TP1, batch(0, 1)))
    records = c.poll(0)
    assert set(records) == {TP1}


def test_an_answer_for_a_position_moved_by_a_seek_meanwhile_is_dropped():
    c = consumer({TP0: 3})
    request = one_fetch(c, 0)
    c.seek(TP0, 0)
    answer_fetch(c, 1, request, fetched(TP0, batch(3, 2)))  # records 3 and 4: not what position 0 asks for
    assert c.poll(0).count() == 0
    assert c.position(TP0).offset == 0
    assert fetches(c, 0)[1][1] == [(TP0, 0)]


def test_an_answer_for_a_position_now_awaiting_validation_is_dropped():
    c = consumer({TP0: 3})
    request = one_fetch(c, 0)
    position = c.position(TP0)
    # The same offset and leader, now with an offset epoch to validate first: not fetchable.
    unvalidated = FetchPosition(position.offset, EPOCH, position.current_leader)
    c.seek_position(TP0, unvalidated, validate=True)
    assert c.awaiting_validation(TP0)
    answer_fetch(c, 1, request, fetched(TP0, batch(3, 2)))
    assert c.poll(0).count() == 0
    assert c.awaiting_validation(TP0)


def test_an_answer_for_a_partition_not_in_the_request_is_ignored():
    c = consumer({TP0: 0, TP1: 0})
    c.pause(TP1)
    request = one_fetch(c, 0)
    answer_fetch(c, 1, request, fetched(TP0), fetched(TP1, batch(0, 2)))
    c.resume(TP1)
    assert c.poll(0).count() == 0


# --- errors ------------------------------------------------------------------------------------------
def test_topic_authorization_failure_is_raised_by_poll_naming_the_topic():
    c = consumer({TP0: 0})
    request = one_fetch(c, 0)
    answer_fetch(c, 1, request, fetched(TP0, error=Errors.TOPIC_AUTHORIZATION_FAILED))
    with pytest.raises(TopicAuthorizationFailedError, match="not authorized to read t"):
        c.poll(0)


def test_unknown_leader_epoch_retries_after_the_backoff_without_a_metadata_refresh():
    c = consumer({TP0: 0})
    request = one_fetch(c, 0)
    answer_fetch(c, 1, request, fetched(TP0, error=Errors.UNKNOWN_LEADER_EPOCH), now_ms=50)
    assert c.poll_requests(50) == []
    sent = c.poll_requests(50 + BACKOFF)
    assert [type(r) for _, r in sent] == [FetchRequest]


@pytest.mark.parametrize("error", [Errors.NOT_LEADER_OR_FOLLOWER, Errors.FENCED_LEADER_EPOCH])
def test_a_stale_leader_error_without_a_hint_refreshes_metadata_and_backs_off(error):
    c = consumer({TP0: 0})
    request = one_fetch(c, 0)
    answer_fetch(c, 1, request, fetched(TP0, error=error), now_ms=50)
    sent = c.poll_requests(50)
    assert [type(r) for _, r in sent] == [MetadataRequest]
    c.on_response(sent[0][0], sent[0][1], cluster({TP0: 1}), 50)
    assert fetches(c, 50 + BACKOFF - 1) == {}
    assert fetches(c, 50 + BACKOFF)[1][1] == [(TP0, 0)]


def test_a_kip951_leader_hint_repoints_the_position_without_a_metadata_request():
    c = consumer({TP0: 0})
    request = one_fetch(c, 0)
    hint = LeaderIdAndEpoch(2, EPOCH + 1)
    answer_fetch(c, 1, request, fetched(TP0, error=Errors.NOT_LEADER_OR_FOLLOWER, current_leader=hint), now_ms=50)
    assert c.position(TP0).current_leader == LeaderAndEpoch(2, EPOCH + 1)
    assert c.metadata.current_leader(TP0) == LeaderAndEpoch(2, EPOCH + 1)
    sent = c.poll_requests(50 + BACKOFF)
    assert not any(isinstance(r, MetadataRequest) for _, r in sent)
    assert [(node, [p.current_leader_epoch for p in r.partitions]) for node, r in sent] == [(2, [EPOCH + 1])]


def test_a_stale_leader_error_from_a_read_replica_sends_the_consumer_back_to_the_leader():
    c = consumer({TP0: 0})
    request = one_fetch(c, 0)
    answer_fetch(c, 1, request, fetched(TP0, batch(0, 2), preferred_read_replica=3))
    c.poll(0)
    request = one_fetch(c, 0)
    answer_fetch(c, 3, request, fetched(TP0, error=Errors.NOT_LEADER_OR_FOLLOWER, current_leader=LeaderIdAndEpoch(1, EPOCH)))
    assert list(fetches(c, BACKOFF)) == [1]  # the hint is not newer: metadata refresh, and the leader again


# --- preferred read replica (KIP-392) ------------------------------------------------------------------
def test_every_fetch_carries_the_client_rack():
    """client.rack goes out as Fetch's rack_id (v11+), to the leader and to the replica it names alike."""
    c = consumer({TP0: 0}, client_rack="rack-2")
    request = one_fetch(c, 0)
    assert request.rack_id == "rack-2"
    answer_fetch(c, 1, request, fetched(TP0, batch(0, 2), preferred_read_replica=3))
    c.poll(0)
    assert [r.rack_id for r, _ in fetches(c, 0).values()] == ["rack-2"]
    assert one_fetch(consumer({TP0: 0}), 0).rack_id == ""  # none set: Kafka's default


@pytest.mark.parametrize("replica", [0, 3])
def test_the_next_fetch_goes_to_the_preferred_read_replica(replica):
    c = consumer({TP0: 0})
    request = one_fetch(c, 0)
    answer_fetch(c, 1, request, fetched(TP0, batch(0, 2), preferred_read_replica=replica))
    assert offsets(c.poll(0)) == [0, 1]
    assert {node: sent for node, (_, sent) in fetches(c, 0).items()} == {replica: [(TP0, 2)]}


def test_no_preferred_read_replica_keeps_fetching_from_the_leader():
    c = consumer({TP0: 0})
    request = one_fetch(c, 0)
    answer_fetch(c, 1, request, fetched(TP0, batch(0, 2), preferred_read_replica=-1))
    c.poll(0)
    assert list(fetches(c, 0)) == [1]


def test_out_of_range_from_a_read_replica_goes_back_to_the_leader_without_a_reset():
    c = consumer({TP0: 0}, policy="none")
    request = one_fetch(c, 0)
    answer_fetch(c, 1, request, fetched(TP0, batch(0, 2), preferred_read_replica=2))
    c.poll(0)
    request = one_fetch(c, 0)
    answer_fetch(c, 2, request, fetched(TP0, error=Errors.OFFSET_OUT_OF_RANGE))
    assert c.poll(0).count() == 0  # not raised: the replica is only behind
    assert c.state_of(TP0) == FetchState.FETCHING
    assert {node: sent for node, (_, sent) in fetches(c, 0).items()} == {1: [(TP0, 2)]}
    assert c.resets == []


# --- OFFSET_OUT_OF_RANGE from the leader ---------------------------------------------------------------
def test_out_of_range_from_the_leader_under_policy_none_is_raised_with_the_offset():
    c = consumer({TP0: 42}, policy="none")
    request = one_fetch(c, 0)
    answer_fetch(c, 1, request, fetched(TP0, error=Errors.OFFSET_OUT_OF_RANGE))
    with pytest.raises(OffsetOutOfRangeError) as raised:
        c.poll(0)
    assert raised.value.offset_out_of_range_partitions == {TP0: 42}
    assert c.state_of(TP0) == FetchState.FETCHING


@pytest.mark.parametrize(("policy", "timestamp"), [("earliest", EARLIEST_TIMESTAMP), ("latest", -1)])
def test_out_of_range_from_the_leader_resets_by_policy(policy, timestamp):
    c = consumer({TP0: 42}, policy=policy)
    request = one_fetch(c, 0)
    answer_fetch(c, 1, request, fetched(TP0, error=Errors.OFFSET_OUT_OF_RANGE))
    assert c.awaiting_reset(TP0)
    sent = c.poll_requests(0)
    assert [type(r) for _, r in sent] == [ListOffsetsRequest]
    assert [p.timestamp for p in sent[0][1].partitions] == [timestamp]


# --- answers without records to hand out ---------------------------------------------------------------
def control_batch(offset: int, epoch: int) -> bytes:
    """A transaction COMMIT marker: a control batch of one record (key: version 0, type 1)."""
    key, value = struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0)
    return encode_batch(
        [(key, value)], base_offset=offset, partition_leader_epoch=epoch, base_timestamp=1,
        is_control=True, is_transactional=True, producer_id=7, producer_epoch=0,
    )


@pytest.mark.parametrize("track", [False, True], ids=["kafka", "tracking-consumed-epochs"])
def test_an_answer_of_only_a_control_batch_steps_the_position_over_it(track):
    c = consumer({TP0: 5}, track_consumed_epochs=track)
    request = one_fetch(c, 0)
    answer_fetch(c, 1, request, fetched(TP0, control_batch(5, EPOCH + 2)))
    assert c.poll(0).count() == 0
    assert c.position(TP0) == FetchPosition(6, EPOCH + 2, LeaderAndEpoch(1, EPOCH))
    assert fetches(c, 0)[1][1] == [(TP0, 6)]


def test_an_empty_answer_leaves_the_position_and_fetches_again_at_once():
    c = consumer({TP0: 5})
    before = c.position(TP0)
    request = one_fetch(c, 0)
    answer_fetch(c, 1, request, fetched(TP0))
    assert c.position(TP0) == before
    assert fetches(c, 0)[1][1] == [(TP0, 5)]


def test_records_all_below_the_fetch_offset_are_skipped_and_the_position_moves_past_them():
    c = consumer({TP0: 3})
    request = one_fetch(c, 0)
    # The leader answers from the start of the batch holding offset 3; a batch ending at 2 precedes it.
    answer_fetch(c, 1, request, fetched(TP0, batch(0, 3) + batch(3, 2, EPOCH + 1)))
    assert offsets(c.poll(0)) == [3, 4]
    c2 = consumer({TP0: 3})
    request = one_fetch(c2, 0)
    answer_fetch(c2, 1, request, fetched(TP0, batch(0, 3)))
    assert c2.poll(0).count() == 0
    assert c2.position(TP0).offset == 3  # nothing past the fetch offset: stays, and fetches again
    assert fetches(c2, 0)[1][1] == [(TP0, 3)]


def test_corrupt_records_are_raised_by_poll_and_fetched_again_after_the_backoff():
    c = consumer({TP0: 0})
    request = one_fetch(c, 0)
    good = bytearray(batch(0, 2))
    good[-1] ^= 0xFF  # the CRC no longer matches
    answer_fetch(c, 1, request, fetched(TP0, bytes(good)), now_ms=20)
    with pytest.raises(CorruptRecordError):
        c.poll(20)
    assert fetches(c, 20 + BACKOFF - 1) == {}
    assert fetches(c, 20 + BACKOFF)[1][1] == [(TP0, 0)]

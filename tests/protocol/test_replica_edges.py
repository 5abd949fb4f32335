"""Follower-side behaviours pinned through the public API (`ReplicaManager` + its fetcher): stale answers
from a re-elected leader, the leader's log start offset, and the retries of out-of-range recovery and
failed fetches."""

from __future__ import annotations

from protocol_support import TP, Network, brokers, recs, state

from epochguard import PartitionLog, ReplicaManager
from epochguard.broker.fetcher import TruncationRecord
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    EpochEndOffset,
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
)
from epochguard.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

BACKOFF = 1_000


def pair(isr=(1, 2), **kw) -> dict[int, ReplicaManager]:
    bs = brokers(2, fetch_backoff_ms=BACKOFF, **kw)
    for b in bs.values():
        b.apply_partition_state(state(1, 3, isr=isr, replicas=(1, 2)), 0)
    return bs


def produce(rm: ReplicaManager, n: int, now_ms: int = 0) -> None:
    rm.partitions[TP].append_records_to_leader(recs(n), acks=1, min_insync_replicas=1, now_ms=now_ms)


def only(requests, kind):
    [(node, request)] = requests
    assert isinstance(request, kind), request
    return node, request


def test_answers_sent_under_an_older_epoch_by_the_re_elected_leader_are_ignored():
    bs = pair()
    produce(bs[1], 4)
    _, old = only(bs[2].poll_requests(0), FetchRequest)
    assert old.partitions[0].current_leader_epoch == 3
    stale = bs[1].handle(2, old, 0)  # answered at epoch 3 (records 0..3), delivered late
    assert stale.partitions[0].records
    for b in bs.values():  # broker 1 is re-elected at epoch 4
        b.apply_partition_state(state(1, 4, isr=(1, 2), replicas=(1, 2)), 10)
    bs[2].on_response(1, old, stale, 20)
    assert bs[2].partitions[TP].log.log_end_offset == 0  # not appended: sent for epoch 3
    _, fresh = only(bs[2].poll_requests(20), FetchRequest)
    assert (fresh.partitions[0].fetch_offset, fresh.partitions[0].current_leader_epoch) == (0, 4)


def test_the_follower_adopts_the_leaders_log_start_offset():
    bs = pair()
    net = Network(bs)
    produce(bs[1], 6)
    net.pump()
    assert bs[2].partitions[TP].log.log_start_offset == 0
    bs[1].partitions[TP].log.increment_log_start_offset(4)  # DeleteRecords / retention on the leader
    produce(bs[1], 1)
    net.pump()
    follower = bs[2].partitions[TP].log
    assert (follower.log_end_offset, follower.log_start_offset) == (7, 4)


def test_a_lower_leader_log_start_offset_does_not_lower_the_followers():
    bs = pair()
    net = Network(bs)
    produce(bs[1], 6)
    net.pump()
    bs[2].partitions[TP].log.increment_log_start_offset(3)
    produce(bs[1], 1)
    net.pump()
    assert bs[2].partitions[TP].log.log_start_offset == 3


def out_of_range_follower():
    """Broker 2 (empty) follows broker 1, whose log starts at 10: its first fetch is out of range."""
    bs = pair(isr=(1,))  # the leader alone: its high watermark follows its end, so records can be deleted
    produce(bs[1], 12)
    assert bs[1].partitions[TP].log.increment_log_start_offset(10)
    _, fetch = only(bs[2].poll_requests(0), FetchRequest)
    bs[2].on_response(1, fetch, bs[1].handle(2, fetch, 0), 0)
    return bs


def test_a_failed_list_offsets_during_out_of_range_recovery_is_retried_after_the_backoff():
    bs = out_of_range_follower()
    node, lo = only(bs[2].poll_requests(0), ListOffsetsRequest)
    assert node == 1
    bs[2].on_request_failed(1, lo, 100)
    assert bs[2].poll_requests(100 + BACKOFF - 1) == []
    _, again = only(bs[2].poll_requests(100 + BACKOFF), ListOffsetsRequest)
    assert again.partitions == lo.partitions
    bs[2].on_response(1, again, bs[1].handle(2, again, 1_100), 1_100)
    Network(bs).pump(1_100)  # ...and the recovery completes: the follower starts at the leader's start
    follower = bs[2].partitions[TP].log
    assert (follower.log_start_offset, follower.log_end_offset) == (10, 12)


def test_a_list_offsets_error_during_out_of_range_recovery_is_retried_after_the_backoff():
    bs = out_of_range_follower()
    _, lo = only(bs[2].poll_requests(0), ListOffsetsRequest)
    answer = ListOffsetsResponse((ListOffsetsPartitionResponse(TP.topic, TP.partition, Errors.NOT_LEADER_OR_FOLLOWER),))
    bs[2].on_response(1, lo, answer, 100)
    assert bs[2].poll_requests(100 + BACKOFF - 1) == []
    _, again = only(bs[2].poll_requests(100 + BACKOFF), ListOffsetsRequest)
    assert again.partitions == lo.partitions


def test_a_failed_fetch_is_retried_after_the_fetch_backoff_not_at_once():
    bs = pair()
    _, fetch = only(bs[2].poll_requests(0), FetchRequest)
    bs[2].on_request_failed(1, fetch, 500)
    assert bs[2].poll_requests(500) == []
    assert bs[2].poll_requests(500 + BACKOFF - 1) == []
    _, again = only(bs[2].poll_requests(500 + BACKOFF), FetchRequest)
    assert again.partitions[0].fetch_offset == fetch.partitions[0].fetch_offset


def test_an_unanswered_fetch_is_resent_after_the_request_timeout():
    bs = brokers(2, fetch_backoff_ms=BACKOFF, request_timeout_ms=5_000)
    for b in bs.values():
        b.apply_partition_state(state(1, 3, isr=(1, 2), replicas=(1, 2)), 0)
    only(bs[2].poll_requests(0), FetchRequest)
    assert bs[2].poll_requests(4_999) == []  # one in flight per leader
    only(bs[2].poll_requests(5_000), FetchRequest)


def test_out_of_range_list_offsets_carries_the_current_leader_epoch_only_under_kip_320():
    bs = out_of_range_follower()
    _, lo = only(bs[2].poll_requests(0), ListOffsetsRequest)
    assert (lo.partitions[0].current_leader_epoch, lo.replica_id) == (3, 2)
    old = brokers(2, protocol="pre-kip-320", fetch_backoff_ms=BACKOFF)
    for b in old.values():
        b.apply_partition_state(state(1, 3, isr=(1,), replicas=(1, 2)), 0)
    produce(old[1], 12)
    assert old[1].partitions[TP].log.increment_log_start_offset(10)
    _, fetch = only(old[2].poll_requests(0), FetchRequest)
    old[2].on_response(1, fetch, old[1].handle(2, fetch, 0), 0)
    _, lo = only(old[2].poll_requests(0), ListOffsetsRequest)
    assert lo.partitions[0].current_leader_epoch == -1


# --- out-of-range recovery, answer by answer (Kafka's fetchOffsetAndTruncate) ---------------------
def ahead_follower(records: int = 10):
    """Broker 2 holds `records` offsets of epoch 0 and follows broker 1 at epoch 3; its first fetch (at
    its log end) was answered OFFSET_OUT_OF_RANGE, so it asks the leader for its log end offset."""
    log = PartitionLog(TP)
    log.append_as_leader(recs(records), 0)
    rm = ReplicaManager(2, controller_id=1000, fetch_backoff_ms=BACKOFF, logs={TP: log})
    rm.apply_partition_state(state(1, 3, isr=(1,), replicas=(1, 2)), 0)
    _, fetch = only(rm.poll_requests(0), FetchRequest)
    assert fetch.partitions[0].fetch_offset == records
    rm.on_response(1, fetch, FetchResponse((FetchPartitionData(TP.topic, TP.partition, Errors.OFFSET_OUT_OF_RANGE),)), 0)
    _, lo = only(rm.poll_requests(0), ListOffsetsRequest)
    assert lo.partitions[0].timestamp == LATEST_TIMESTAMP
    return rm, lo


def offset_answer(offset: int, error: Errors = Errors.NONE) -> ListOffsetsResponse:
    return ListOffsetsResponse((ListOffsetsPartitionResponse(TP.topic, TP.partition, error, -1, offset),))


def test_a_leader_end_below_ours_truncates_there_and_fetches():
    rm, lo = ahead_follower()
    rm.on_response(1, lo, offset_answer(6), 70)
    assert rm.fetcher.truncations[-1] == TruncationRecord(TP, 3, 10, 6, "out_of_range", 70)
    _, fetch = only(rm.poll_requests(70), FetchRequest)
    assert (fetch.partitions[0].fetch_offset, fetch.partitions[0].last_fetched_epoch) == (6, 0)


def leader_end_at_ours():
    rm, lo = ahead_follower()
    rm.on_response(1, lo, offset_answer(10), 70)
    assert rm.fetcher.truncations == []
    _, earliest = only(rm.poll_requests(70), ListOffsetsRequest)
    assert earliest.partitions[0].timestamp == EARLIEST_TIMESTAMP
    return rm, earliest


def test_a_leader_end_at_ours_asks_for_the_leader_start_next():
    leader_end_at_ours()


def test_a_leader_start_at_our_end_keeps_our_log():
    rm, earliest = leader_end_at_ours()
    rm.on_response(1, earliest, offset_answer(10), 80)
    log = rm.partitions[TP].log
    assert (log.log_start_offset, log.log_end_offset, rm.fetcher.truncations) == (0, 10, [])
    _, fetch = only(rm.poll_requests(80), FetchRequest)
    assert (fetch.partitions[0].fetch_offset, fetch.partitions[0].last_fetched_epoch) == (10, 0)


def test_a_leader_start_beyond_our_end_restarts_our_log_there():
    rm, earliest = leader_end_at_ours()
    rm.on_response(1, earliest, offset_answer(25), 80)
    log = rm.partitions[TP].log
    assert (log.log_start_offset, log.log_end_offset, log.latest_epoch) == (25, 25, None)
    assert rm.fetcher.truncations == [TruncationRecord(TP, 3, 10, 25, "out_of_range", 80)]
    _, fetch = only(rm.poll_requests(80), FetchRequest)
    assert (fetch.partitions[0].fetch_offset, fetch.partitions[0].last_fetched_epoch) == (25, -1)


def test_a_fenced_list_offsets_parks_the_partition():
    rm, lo = ahead_follower()
    rm.on_response(1, lo, offset_answer(-1, Errors.FENCED_LEADER_EPOCH), 70)
    assert rm.poll_requests(70 + 10 * BACKOFF) == []  # until new leadership arrives


def test_a_list_offsets_answer_after_stop_replica_is_dropped():
    rm, lo = ahead_follower()
    rm.stop_replica(TP)
    rm.on_response(1, lo, offset_answer(6), 70)
    assert rm.poll_requests(70) == [] and rm.fetcher.truncations == []


def test_an_offsets_for_leader_epoch_truncation_is_recorded_when_it_happens():
    log = PartitionLog(TP)
    log.append_as_leader(recs(5), 0)
    log.append_as_leader(recs(5), 1)
    rm = ReplicaManager(2, controller_id=1000, truncate_on_fetch=False, logs={TP: log})
    rm.apply_partition_state(state(1, 3, isr=(1,), replicas=(1, 2)), 0)
    _, request = only(rm.poll_requests(0), OffsetsForLeaderEpochRequest)
    assert request.partitions[0].leader_epoch == 1
    answer = OffsetsForLeaderEpochResponse((EpochEndOffset(TP.topic, TP.partition, Errors.NONE, 0, 3),))
    rm.on_response(1, request, answer, 70)
    assert rm.fetcher.truncations == [TruncationRecord(TP, 3, 10, 3, "offsets_for_leader_epoch", 70)]

"""Follower-side behaviours pinned through the public API (`ReplicaManager` + its fetcher): stale answers
from a re-elected leader, the leader's log start offset, and the retries of out-of-range recovery and
failed fetches."""

from __future__ import annotations

from protocol_support import TP, Network, brokers, recs, state

from epochguard import ReplicaManager
from epochguard.errors import Errors
from epochguard.messages import FetchRequest, ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse

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

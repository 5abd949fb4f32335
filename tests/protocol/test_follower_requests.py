"""The follower's requests and how it takes their answers (Kafka's `AbstractFetcherThread` /
`ReplicaFetcherThread`), pinned through `ReplicaManager` and `ReplicaFetcher`: what a follower Fetch
carries, answers that must be ignored (late, of another kind, sent under an older epoch, epoch 0
included), the leader's undefined epoch end offset, and an empty follower log whose start lies on
the last offset of the leader's first batch."""

from __future__ import annotations

import pytest
from protocol_support import TP, Network, brokers, kafka_python_batch, recs, state

from epochguard import Partition, PartitionLog, ReplicaManager
from epochguard.broker.fetcher import FetchState, ReplicaFetcher, TruncationRecord
from epochguard.errors import Errors
from epochguard.protocol.api_versions import BROKER_API_VERSIONS, ApiKey, NodeApiVersions
from epochguard.protocol.messages import (
    DivergingEpoch,
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

BACKOFF = 1_000


def only(requests, kind):
    [(node, request)] = requests
    assert isinstance(request, kind), request
    return node, request


def pair(epoch: int = 3, isr=(1, 2), **kw) -> dict[int, ReplicaManager]:
    bs = brokers(2, fetch_backoff_ms=BACKOFF, **kw)
    for b in bs.values():
        b.apply_partition_state(state(1, epoch, isr=isr, replicas=(1, 2)), 0)
    return bs


def produce(rm: ReplicaManager, n: int) -> None:
    rm.partitions[TP].append_records_to_leader(recs(n), acks=1, min_insync_replicas=1, now_ms=0)


# --- what a follower Fetch carries ------------------------------------------------------------------------
def test_the_follower_reports_its_log_start_offset_to_the_leader():
    """KIP-107: the leader learns each follower's log start offset from its fetches (the DeleteRecords
    low watermark is computed from them)."""
    bs = pair()
    net = Network(bs)
    produce(bs[1], 6)
    net.pump()
    assert bs[1].partitions[TP].replicas[2].log_start_offset == 0
    bs[1].partitions[TP].log.increment_log_start_offset(4)
    produce(bs[1], 1)
    net.pump()
    assert bs[2].partitions[TP].log.log_start_offset == 4
    _, fetch = only(bs[2].poll_requests(0), FetchRequest)
    assert fetch.partitions[0].log_start_offset == 4
    bs[2].on_response(1, fetch, bs[1].handle(2, fetch, 0), 0)
    assert bs[1].partitions[TP].replicas[2].log_start_offset == 4


def test_a_follower_fetch_asks_for_at_most_its_fetch_max_bytes_per_partition():
    """replica.fetch.max.bytes: the partition's byte limit in each follower Fetch; the leader then
    returns the first batch only when the next one would go over it."""
    leader = Partition(TP, 1, PartitionLog(TP))
    leader.make_leader(state(1, 2, isr=(1,), replicas=(1, 2)), 0)
    for _ in range(3):
        leader.append_records_to_leader(recs(5), acks=1, min_insync_replicas=1, now_ms=0)
    batch = len(leader.log.read(0, max_bytes=1))
    follower = Partition(TP, 2, PartitionLog(TP))
    follower.make_follower(state(1, 2, isr=(1,), replicas=(1, 2)))
    fetcher = ReplicaFetcher(2, fetch_max_bytes=batch + 10)
    fetcher.add_partition(follower, 0)
    [(_, fetch)] = fetcher.poll_requests(0)
    assert fetch.partitions[0].partition_max_bytes == batch + 10
    data = leader.fetch(fetch.partitions[0], replica_id=2, now_ms=0)
    assert len(data.records) == batch
    fetcher.on_response(1, fetch, FetchResponse((data,)), 0)
    assert follower.log.log_end_offset == 5


# --- answers that are ignored --------------------------------------------------------------------------------
def test_the_late_answer_to_a_timed_out_fetch_is_ignored():
    bs = brokers(2, fetch_backoff_ms=BACKOFF, request_timeout_ms=5_000)
    for b in bs.values():
        b.apply_partition_state(state(1, 3, isr=(1, 2), replicas=(1, 2)), 0)
    produce(bs[1], 3)
    _, first = only(bs[2].poll_requests(0), FetchRequest)
    _, resent = only(bs[2].poll_requests(5_000), FetchRequest)  # timed out: sent again
    late = bs[1].handle(2, first, 5_001)
    bs[2].on_response(1, first, late, 5_001)
    bs[2].on_request_failed(1, first, 5_001)
    follower = bs[2].partitions[TP].log
    assert follower.log_end_offset == 0  # the late answer was dropped
    assert bs[2].poll_requests(5_001) == []  # the resent fetch is still the one in flight
    bs[2].on_response(1, resent, bs[1].handle(2, resent, 5_002), 5_002)
    assert follower.log_end_offset == 3


def fetching():
    bs = pair()
    _, request = only(bs[2].poll_requests(0), FetchRequest)
    return bs[2], request, ListOffsetsResponse((ListOffsetsPartitionResponse(TP.topic, TP.partition, Errors.NONE, -1, 7),))


def truncating():
    log = PartitionLog(TP)
    log.append_as_leader(recs(5), 0)
    rm = ReplicaManager(2, controller_id=1000, truncate_on_fetch=False, fetch_backoff_ms=BACKOFF, logs={TP: log})
    rm.apply_partition_state(state(1, 3, isr=(1,), replicas=(1, 2)), 0)
    _, request = only(rm.poll_requests(0), OffsetsForLeaderEpochRequest)
    return rm, request, FetchResponse((FetchPartitionData(TP.topic, TP.partition, Errors.NONE, high_watermark=2),))


def out_of_range():
    log = PartitionLog(TP)
    log.append_as_leader(recs(5), 0)
    rm = ReplicaManager(2, controller_id=1000, fetch_backoff_ms=BACKOFF, logs={TP: log})
    rm.apply_partition_state(state(1, 3, isr=(1,), replicas=(1, 2)), 0)
    _, fetch = only(rm.poll_requests(0), FetchRequest)
    rm.on_response(1, fetch, FetchResponse((FetchPartitionData(TP.topic, TP.partition, Errors.OFFSET_OUT_OF_RANGE),)), 0)
    _, request = only(rm.poll_requests(0), ListOffsetsRequest)
    return rm, request, FetchResponse((FetchPartitionData(TP.topic, TP.partition, Errors.NONE, high_watermark=2),))


@pytest.mark.parametrize("setup", [fetching, truncating, out_of_range])
def test_an_answer_of_another_kind_than_the_request_is_ignored(setup):
    rm, request, wrong = setup()
    log = rm.partitions[TP].log
    before = (log.log_start_offset, log.log_end_offset, log.high_watermark)
    rm.on_response(1, request, wrong, 10)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == before
    assert rm.fetcher.truncations == []
    _, again = only(rm.poll_requests(10), type(request))  # no longer in flight, and no back-off
    assert again == request


def test_an_answer_sent_under_epoch_zero_is_ignored_once_the_leader_is_re_elected_at_epoch_one():
    """Epoch 0 is a real epoch (only -1 means none): an answer fenced by it is as stale as any."""
    bs = pair(epoch=0)
    produce(bs[1], 4)
    _, old = only(bs[2].poll_requests(0), FetchRequest)
    assert old.partitions[0].current_leader_epoch == 0
    stale = bs[1].handle(2, old, 0)
    assert stale.partitions[0].records
    for b in bs.values():
        b.apply_partition_state(state(1, 1, isr=(1, 2), replicas=(1, 2)), 10)
    bs[2].on_response(1, old, stale, 20)
    assert bs[2].partitions[TP].log.log_end_offset == 0
    _, fresh = only(bs[2].poll_requests(20), FetchRequest)
    assert (fresh.partitions[0].fetch_offset, fresh.partitions[0].current_leader_epoch) == (0, 1)


# --- the leader's answers ------------------------------------------------------------------------------------
def test_an_undefined_epoch_end_offset_truncates_to_the_high_watermark_and_then_fetches():
    """Kafka's `getOffsetTruncationState`: an UNDEFINED_EPOCH_OFFSET answer truncates to the initial fetch
    offset (the high watermark) and truncation is complete, even for a follower that does not truncate
    on fetch (it must not ask again)."""
    log = PartitionLog(TP)
    log.append_as_leader(recs(6), 0)
    log.update_high_watermark(2)
    rm = ReplicaManager(2, controller_id=1000, truncate_on_fetch=False, logs={TP: log})
    rm.apply_partition_state(state(1, 3, isr=(1,), replicas=(1, 2)), 0)
    _, request = only(rm.poll_requests(0), OffsetsForLeaderEpochRequest)
    undefined = OffsetsForLeaderEpochResponse((EpochEndOffset(TP.topic, TP.partition, Errors.NONE, -1, -1),))
    rm.on_response(1, request, undefined, 50)
    assert rm.fetcher.truncations == [TruncationRecord(TP, 3, 6, 2, "offsets_for_leader_epoch", 50)]
    assert rm.fetcher.states[TP].state == FetchState.FETCHING
    _, fetch = only(rm.poll_requests(50), FetchRequest)
    assert fetch.partitions[0].fetch_offset == 2


def test_an_empty_follower_whose_start_is_the_last_offset_of_the_leaders_first_batch_restarts_there():
    """`appendRecordsToFollowerOrFutureReplica`: a log start moved by DeleteRecords may lie inside the
    leader's first batch, its last offset included; the empty follower restarts at the batch's base."""
    bs = pair(isr=(1,))
    produce(bs[1], 5)  # offsets 0..4 in one batch
    produce(bs[1], 5)  # 5..9
    assert bs[1].partitions[TP].log.increment_log_start_offset(4)
    Network(bs).pump()
    follower = bs[2].partitions[TP].log
    assert TP not in bs[2].fetcher.failed
    assert (follower.log_start_offset, follower.log_end_offset) == (4, 10)


def test_a_request_the_caller_dropped_unanswered_is_resent_after_the_timeout():
    """Requests are tracked by identity: a lost request whose object the caller let go must keep its
    slot (a later request taking it would leave the lost one's partition in flight for ever)."""
    rm = ReplicaManager(3, controller_id=1000, request_timeout_ms=5_000)
    other = TP._replace(partition=1)
    rm.apply_partition_state(state(1, 3, isr=(1, 3), replicas=(1, 3)), 0)
    rm.apply_partition_state(state(2, 3, isr=(2, 3), replicas=(2, 3), tp=other), 0)
    [(_, lost), (_, answered)] = rm.poll_requests(0)
    assert lost.partitions[0].tp == TP
    del lost  # the caller dropped it: no answer, no failure report
    rm.on_response(2, answered, FetchResponse((FetchPartitionData(other.topic, 1, Errors.NONE),)), 0)
    only(rm.poll_requests(0), FetchRequest)  # the next fetch to broker 2
    resent = sorted((node, request.partitions[0].tp) for node, request in rm.poll_requests(5_000))
    assert resent == [(1, TP), (2, other)]


def test_an_answer_whose_batches_overlap_parks_the_partition_and_leaves_the_log_alone():
    """Batches out of offset order (a broken leader) cannot be appended: the partition is failed until the
    next leadership change, and the empty log keeps what it had, its epoch cache included (the restart
    at the leader's batch base is only for a log start inside the first batch)."""
    log = PartitionLog(TP)
    log.assign_epoch_start(5)  # it led epoch 5 without writing anything
    rm = ReplicaManager(2, controller_id=1000, logs={TP: log})
    rm.apply_partition_state(state(1, 6, isr=(1,), replicas=(1, 2)), 0)
    _, fetch = only(rm.poll_requests(0), FetchRequest)
    batch = kafka_python_batch(0, 6, [b"a", b"b"])
    answer = FetchPartitionData(TP.topic, TP.partition, Errors.NONE, high_watermark=2, records=batch + batch)
    rm.on_response(1, fetch, FetchResponse((answer,)), 10)
    assert "not increasing" in rm.fetcher.failed[TP]
    assert (log.log_end_offset, log.leader_epoch_cache.entries()) == (0, [(5, 0)])
    assert rm.poll_requests(10 + 10 * BACKOFF) == []


# --- what the leader serves decides how the follower truncates ------------------------------------------------
def follower_of(leader_versions: NodeApiVersions) -> ReplicaManager:
    """Broker 2 holds offsets 0-2 of epoch 0 and follows broker 1 (which serves `leader_versions`) at epoch 3."""
    log = PartitionLog(TP)
    log.append_as_leader(recs(3), 0)
    rm = ReplicaManager(2, controller_id=1000, logs={TP: log}, peer_api_versions=lambda node: leader_versions)
    rm.apply_partition_state(state(1, 3, isr=(1,), replicas=(1, 2)), 0)
    return rm


@pytest.mark.parametrize(("fetch_max", "on_fetch"), [(11, False), (12, True), (17, True)])
def test_a_follower_truncates_on_fetch_only_when_its_leader_serves_fetch_v12(fetch_max, on_fetch):
    """Fetch v12 (KIP-595's LastFetchedEpoch / DivergingEpoch): against an older leader the follower asks
    OffsetsForLeaderEpoch first (`isTruncationOnFetchSupported`)."""
    rm = follower_of(BROKER_API_VERSIONS.with_range(ApiKey.FETCH, 4, fetch_max))
    [(_, request)] = rm.poll_requests(0)
    if on_fetch:
        assert isinstance(request, FetchRequest)
        assert (request.partitions[0].fetch_offset, request.partitions[0].last_fetched_epoch) == (3, 0)
    else:
        assert isinstance(request, OffsetsForLeaderEpochRequest)
        assert request.partitions[0].leader_epoch == 0
        assert rm.partitions[TP].log.log_end_offset == 3  # nothing truncated before the answer


def test_a_leaderless_partition_stops_the_fetching_from_its_old_leader():
    bs = pair()
    only(bs[2].poll_requests(0), FetchRequest)
    bs[2].apply_partition_state(state(-1, 4, isr=(2,), replicas=(1, 2)), 10)
    assert TP not in bs[2].fetcher.states
    assert bs[2].poll_requests(10 + 100 * BACKOFF) == []


# --- fetch answers -------------------------------------------------------------------------------------------
def test_a_fetch_fenced_by_the_leader_parks_the_partition_until_new_leadership():
    """`onPartitionFenced`: FENCED_LEADER_EPOCH means the leader has moved on; no retry until this broker
    hears of the new leadership itself."""
    bs = pair()
    _, fetch = only(bs[2].poll_requests(0), FetchRequest)
    fenced = FetchResponse((FetchPartitionData(TP.topic, TP.partition, Errors.FENCED_LEADER_EPOCH),))
    bs[2].on_response(1, fetch, fenced, 10)
    assert bs[2].fetcher.states[TP].state == FetchState.PARKED
    assert bs[2].poll_requests(10 + 100 * BACKOFF) == []
    bs[2].apply_partition_state(state(1, 4, isr=(1, 2), replicas=(1, 2)), 20)
    _, fresh = only(bs[2].poll_requests(20), FetchRequest)
    assert fresh.partitions[0].current_leader_epoch == 4


def test_the_next_fetch_carries_the_epoch_of_what_the_last_one_appended():
    bs = pair()
    produce(bs[1], 2)
    _, first = only(bs[2].poll_requests(0), FetchRequest)
    assert first.partitions[0].last_fetched_epoch == -1  # an empty log: no epoch yet
    bs[2].on_response(1, first, bs[1].handle(2, first, 0), 0)
    _, second = only(bs[2].poll_requests(0), FetchRequest)
    assert (second.partitions[0].fetch_offset, second.partitions[0].last_fetched_epoch) == (2, 3)


def test_a_diverging_epoch_truncation_is_recorded_when_it_happens():
    log = PartitionLog(TP)
    log.append_as_leader(recs(3), 0)
    log.append_as_leader(recs(3), 1)  # epoch 1 at 3-5, which the leader never had
    rm = ReplicaManager(2, controller_id=1000, logs={TP: log})
    rm.apply_partition_state(state(1, 3, isr=(1,), replicas=(1, 2)), 0)
    _, fetch = only(rm.poll_requests(0), FetchRequest)
    diverged = FetchPartitionData(TP.topic, TP.partition, Errors.NONE, high_watermark=3,
                                  diverging_epoch=DivergingEpoch(0, 3))
    rm.on_response(1, fetch, FetchResponse((diverged,)), 70)
    assert rm.fetcher.truncations == [TruncationRecord(TP, 3, 6, 3, "diverging_epoch", 70)]


def test_a_pre_kip_320_fetch_answer_for_an_offset_given_up_since_is_ignored():
    """Without epochs in the requests, only the fetch offset tells an answer to an older fetch: the
    re-elected leader's new records must not land above the follower's truncated end."""
    bs = pair(protocol="pre-kip-320")
    net = Network(bs)
    produce(bs[1], 5)
    _, first = only(bs[2].poll_requests(0), FetchRequest)
    bs[2].on_response(1, first, bs[1].handle(2, first, 0), 0)  # follower: 0-4, its HW still 0
    _, second = only(bs[2].poll_requests(0), FetchRequest)
    assert second.partitions[0].fetch_offset == 5
    produce(bs[1], 3)  # 5-7
    late = bs[1].handle(2, second, 0)
    assert late.partitions[0].records
    bs[2].apply_partition_state(state(1, 4, isr=(1, 2), replicas=(1, 2)), 10)  # truncates to its HW, 0
    follower = bs[2].partitions[TP].log
    assert follower.log_end_offset == 0
    bs[2].on_response(1, second, late, 20)
    assert follower.log_end_offset == 0
    net.pump(30)
    assert follower.log_end_offset == 8


def test_a_follower_whose_leader_cannot_answer_epochs_truncates_to_its_hw_and_records_when():
    log = PartitionLog(TP)
    log.append_as_leader(recs(3), 0)
    log.update_high_watermark(1)
    no_epochs = BROKER_API_VERSIONS.with_range(ApiKey.FETCH, 4, 11).without(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    rm = ReplicaManager(2, controller_id=1000, logs={TP: log}, peer_api_versions=lambda node: no_epochs)
    rm.apply_partition_state(state(1, 3, isr=(1,), replicas=(1, 2)), 40)
    assert rm.fetcher.truncations == [TruncationRecord(TP, 3, 3, 1, "high_watermark", 40)]
    _, fetch = only(rm.poll_requests(40), FetchRequest)
    assert fetch.partitions[0].fetch_offset == 1


# --- unanswered requests are sent again after the request timeout ------------------------------------------
def test_an_unanswered_offsets_for_leader_epoch_is_resent_after_the_request_timeout():
    log = PartitionLog(TP)
    log.append_as_leader(recs(3), 0)
    rm = ReplicaManager(2, controller_id=1000, truncate_on_fetch=False, request_timeout_ms=5_000, logs={TP: log})
    rm.apply_partition_state(state(1, 3, isr=(1,), replicas=(1, 2)), 0)
    _, first = only(rm.poll_requests(100), OffsetsForLeaderEpochRequest)
    assert rm.poll_requests(5_099) == []
    _, again = only(rm.poll_requests(5_100), OffsetsForLeaderEpochRequest)
    assert again.partitions == first.partitions


def test_an_unanswered_list_offsets_is_resent_after_the_request_timeout():
    log = PartitionLog(TP)
    log.append_as_leader(recs(5), 0)
    rm = ReplicaManager(2, controller_id=1000, request_timeout_ms=5_000, logs={TP: log})
    rm.apply_partition_state(state(1, 3, isr=(1,), replicas=(1, 2)), 0)
    _, fetch = only(rm.poll_requests(0), FetchRequest)
    rm.on_response(1, fetch, FetchResponse((FetchPartitionData(TP.topic, TP.partition, Errors.OFFSET_OUT_OF_RANGE),)), 0)
    _, first = only(rm.poll_requests(100), ListOffsetsRequest)
    assert rm.poll_requests(5_099) == []
    _, again = only(rm.poll_requests(5_100), ListOffsetsRequest)
    assert again.partitions == first.partitions


def test_a_replica_fetcher_on_its_own_has_kafkas_follower_defaults():
    """KIP-320 epochs in every request, truncation on fetch (IBP >= 2.7), replica.fetch.backoff.ms = 1000
    after a failure, and a request unanswered for 30 s (replica.socket.timeout.ms) sent again."""
    log = PartitionLog(TP)
    log.append_as_leader(recs(2), 1)
    follower = Partition(TP, 2, log)
    follower.make_follower(state(1, 3, isr=(1, 2), replicas=(1, 2)))
    fetcher = ReplicaFetcher(2)
    fetcher.add_partition(follower, 0)
    [(_, fetch)] = fetcher.poll_requests(0)
    assert isinstance(fetch, FetchRequest)
    p = fetch.partitions[0]
    assert (p.fetch_offset, p.current_leader_epoch, p.last_fetched_epoch) == (2, 3, 1)
    fetcher.on_request_failed(1, fetch, 100)
    assert fetcher.poll_requests(1_099) == []
    [(_, again)] = fetcher.poll_requests(1_100)
    assert fetcher.poll_requests(31_099) == []
    [(_, resent)] = fetcher.poll_requests(31_100)
    assert resent.partitions == again.partitions == fetch.partitions

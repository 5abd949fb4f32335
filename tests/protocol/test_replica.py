"""Follower truncation and fetching (SPEC (d)): every branch of the truncation rule, both the
OffsetsForLeaderEpoch and the diverging-epoch paths, out-of-range, fencing, pre-KIP-320."""

from __future__ import annotations

from protocol_support import CONTROLLER, TP, Network, recs, state

from epochguard._core import iter_batches
from epochguard.broker.fetcher import FetchState
from epochguard.broker.replica_manager import ReplicaManager
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    DivergingEpoch,
    EpochEndOffset,
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
)
from epochguard.storage.log import PartitionLog


def make_log(batches, hw=None):
    """`batches` = [(epoch, count, prefix)], identical prefixes -> identical bytes (fixed timestamps)."""
    log = PartitionLog(TP)
    for epoch, count, prefix in batches:
        log.append_as_leader(recs(count, prefix), epoch, timestamp_ms=1000)
    if hw is not None:
        log.update_high_watermark(hw)
    return log


def broker(broker_id, log=None, **kw):
    return ReplicaManager(broker_id, controller_id=CONTROLLER, logs={TP: log} if log else None, **kw)


def leader_with(broker_id, base_batches, epoch, new_records, replicas=(1, 2), hw=None, **kw):
    """A broker that became leader at `epoch` on `base_batches`, then wrote `new_records` records."""
    rm = broker(broker_id, make_log(base_batches, hw), **kw)
    rm.apply_partition_state(state(broker_id, epoch, isr=(broker_id,), replicas=replicas), 0)
    if new_records:
        rm.partitions[TP].append_records_to_leader(recs(new_records, f"L{epoch}-"), acks=1, min_insync_replicas=1, now_ms=2000)
    return rm


def log_of(rm):
    return rm.partitions[TP].log


def batches(rm):
    return [(b.base_offset, b.partition_leader_epoch, b.records_count) for b in iter_batches(log_of(rm).read(0))]


SHARED = [(1, 2, "s0-"), (1, 2, "s1-")]  # offsets 0-3, epoch 1


def diverged_pair(truncate_on_fetch=True, protocol="kip-320"):
    """Broker 1 led epoch 1 and wrote 4-5 that never replicated; broker 2 took over at epoch 2 at
    offset 4 and wrote 4-6. Broker 1 now follows broker 2."""
    b1 = broker(1, make_log([*SHARED, (1, 2, "lost-")], hw=4), truncate_on_fetch=truncate_on_fetch, protocol=protocol)
    b2 = leader_with(2, SHARED, 2, 3, hw=4, protocol=protocol)
    b1.apply_partition_state(state(2, 2, isr=(2,), replicas=(1, 2)), 0)
    return b1, b2


def test_truncation_via_diverging_epoch():
    b1, b2 = diverged_pair()
    s = b1.fetcher.states[TP]
    assert (s.state, s.fetch_offset, s.last_fetched_epoch) == (FetchState.FETCHING, 6, 1)  # starts at its LEO
    net = Network({1: b1, 2: b2})
    net.pump(rounds=6)
    first = next(r for src, dst, req, r in net.log if src == 1)
    assert first.partitions[0].diverging_epoch == DivergingEpoch(1, 4)
    assert log_of(b1).read(0) == log_of(b2).read(0)
    assert batches(b1) == [(0, 1, 2), (2, 1, 2), (4, 2, 3)]
    assert log_of(b1).leader_epoch_cache == log_of(b2).leader_epoch_cache
    [t] = b1.fetcher.truncations
    assert (t.from_offset, t.to_offset, t.reason) == (6, 4, "diverging_epoch")
    assert log_of(b1).high_watermark == log_of(b2).high_watermark == 7
    assert b2.partitions[TP].isr == (1, 2)  # caught up -> AlterPartition accepted by the controller


def test_diverging_epoch_with_epoch_minus_one_is_absent():
    """The wire default DivergingEpoch(-1, -1) is "no divergence": the records are appended, nothing
    is truncated (treating it as present would truncate to the high watermark)."""
    b1 = broker(1, make_log(SHARED, hw=2))
    b1.apply_partition_state(state(2, 2, isr=(2,), replicas=(1, 2)), 0)
    [(_, fetch)] = b1.poll_requests(0)
    leader = leader_with(2, SHARED, 2, 2)
    data = leader.handle(1, fetch, 0).partitions[0]
    assert data.diverging_epoch is None and data.records
    import dataclasses

    b1.on_response(2, fetch, FetchResponse((dataclasses.replace(data, diverging_epoch=DivergingEpoch(-1, -1)),)), 0)
    assert b1.fetcher.truncations == [] and log_of(b1).log_end_offset == 6


def test_truncation_via_offsets_for_leader_epoch_sends_current_epoch():
    b1, b2 = diverged_pair(truncate_on_fetch=False)
    s = b1.fetcher.states[TP]
    assert (s.state, s.fetch_offset) == (FetchState.TRUNCATING, 4)  # at its HW, Truncating
    net = Network({1: b1, 2: b2})
    net.pump(rounds=6)
    oe = [req for src, dst, req, r in net.log if isinstance(req, OffsetsForLeaderEpochRequest)]
    assert oe[0].replica_id == 1
    assert (oe[0].partitions[0].leader_epoch, oe[0].partitions[0].current_leader_epoch) == (1, 2)
    fetches = [req for src, dst, req, r in net.log if isinstance(req, FetchRequest) and src == 1]
    assert all(f.partitions[0].last_fetched_epoch == -1 for f in fetches)  # no truncate-on-fetch
    assert log_of(b1).read(0) == log_of(b2).read(0)
    assert [(t.from_offset, t.to_offset, t.reason) for t in b1.fetcher.truncations] == [(6, 4, "offsets_for_leader_epoch")]


def non_final_pair(truncate_on_fetch):
    """Follower epochs [(0,0),(3,4)] LEO 6; leader [(0,0),(2,3),(4,7)] LEO 9. The leader's answer for
    epoch 3 is (2,7), an epoch the follower never had: truncate to 4, not final, ask again -> 3."""
    follower_log = make_log([(0, 3, "a-"), (0, 1, "f-"), (3, 2, "g-")], hw=3)
    leader_log = make_log([(0, 3, "a-"), (2, 4, "b-")], hw=3)
    b1 = broker(1, follower_log, truncate_on_fetch=truncate_on_fetch)
    b2 = broker(2, leader_log)
    b2.apply_partition_state(state(2, 4, isr=(2,), replicas=(1, 2)), 0)
    b2.partitions[TP].append_records_to_leader(recs(2, "c-"), acks=1, min_insync_replicas=1, now_ms=0)
    assert log_of(b2).leader_epoch_cache.entries() == [(0, 0), (2, 3), (4, 7)]
    b1.apply_partition_state(state(2, 4, isr=(2,), replicas=(1, 2)), 0)
    return b1, b2


def test_non_final_truncation_asks_again_offsets_for_leader_epoch():
    b1, b2 = non_final_pair(truncate_on_fetch=False)
    net = Network({1: b1, 2: b2})
    net.pump(rounds=8)
    asked = [req.partitions[0].leader_epoch for src, dst, req, r in net.log if isinstance(req, OffsetsForLeaderEpochRequest)]
    assert asked == [3, 0]
    assert [(t.from_offset, t.to_offset) for t in b1.fetcher.truncations] == [(6, 4), (4, 3)]
    assert log_of(b1).read(0) == log_of(b2).read(0)


def test_non_final_truncation_via_diverging_epochs():
    b1, b2 = non_final_pair(truncate_on_fetch=True)
    net = Network({1: b1, 2: b2})
    net.pump(rounds=8)
    diverging = [
        r.partitions[0].diverging_epoch for src, dst, req, r in net.log if isinstance(r, FetchResponse) and r.partitions[0].diverging_epoch
    ]
    assert diverging == [DivergingEpoch(2, 7), DivergingEpoch(0, 3)]
    assert [(t.from_offset, t.to_offset) for t in b1.fetcher.truncations] == [(6, 4), (4, 3)]
    assert log_of(b1).read(0) == log_of(b2).read(0)


def test_undefined_answer_truncates_to_the_initial_fetch_offset():
    b1 = broker(1, make_log([(1, 2, "a-"), (3, 2, "z-")], hw=2), truncate_on_fetch=False)
    b2 = leader_with(2, [(1, 2, "a-")], 3, 0)
    log_of(b2).leader_epoch_cache.clear()  # e.g. a leader whose history is gone (pre-v2 data)
    b1.apply_partition_state(state(2, 3, isr=(2,), replicas=(1, 2)), 0)
    Network({1: b1, 2: b2}).pump(rounds=4)
    assert [(t.from_offset, t.to_offset) for t in b1.fetcher.truncations] == [(4, 2)]


def crafted_follower(batches, hw):
    """A follower of broker 2 (epoch 9) fed hand-made answers: for branches a real leader rarely takes."""
    b1 = broker(1, make_log(batches, hw), truncate_on_fetch=False)
    b1.apply_partition_state(state(2, 9, isr=(2,), replicas=(1, 2)), 0)
    [(node, request)] = b1.poll_requests(0)
    assert node == 2 and isinstance(request, OffsetsForLeaderEpochRequest)
    return b1, request


def answer(b1, request, epoch, end_offset, code=Errors.NONE):
    b1.on_response(2, request, OffsetsForLeaderEpochResponse((EpochEndOffset(TP.topic, 0, code, epoch, end_offset),)), 0)


def test_leader_epoch_undefined_truncates_to_min_of_offset_and_leo():
    b1, req = crafted_follower([(5, 2, "a-"), (5, 2, "b-")], hw=1)
    answer(b1, req, -1, 3)
    assert log_of(b1).log_end_offset == 2  # min(3, LEO 4) at batch granularity -> 2
    assert b1.fetcher.states[TP].state == FetchState.FETCHING


def test_epoch_unknown_locally_truncates_to_min_of_offset_and_leo():
    b1, req = crafted_follower([(5, 2, "a-"), (5, 2, "b-")], hw=0)
    answer(b1, req, 7, 10)  # local cache has nothing at or above 7: min(10, LEO 4)
    assert log_of(b1).log_end_offset == 4 and b1.fetcher.truncations == []
    assert b1.fetcher.states[TP].state == FetchState.FETCHING


def test_same_epoch_truncates_to_min_of_both_ends():
    b1, req = crafted_follower([(5, 2, "a-"), (6, 2, "b-"), (6, 2, "c-")], hw=0)
    answer(b1, req, 6, 4)
    assert log_of(b1).log_end_offset == 4 and log_of(b1).leader_epoch_cache.entries() == [(5, 0), (6, 2)]


def test_fenced_parks_until_new_leadership_unknown_retries():
    b1, req = crafted_follower([(5, 2, "a-")], hw=0)
    answer(b1, req, -1, -1, Errors.UNKNOWN_LEADER_EPOCH)
    s = b1.fetcher.states[TP]
    assert s.state == FetchState.TRUNCATING and s.delay_until_ms == b1.fetcher.fetch_backoff_ms
    assert b1.poll_requests(0) == []
    [(_, retry)] = b1.poll_requests(s.delay_until_ms)
    answer(b1, retry, -1, -1, Errors.FENCED_LEADER_EPOCH)
    assert b1.fetcher.states[TP].state == FetchState.PARKED
    assert b1.poll_requests(10**9) == []
    b1.apply_partition_state(state(2, 10, isr=(2,), replicas=(1, 2)), 0)  # new leadership: resume
    [(_, again)] = b1.poll_requests(0)
    assert again.partitions[0].current_leader_epoch == 10


def test_stale_answer_after_leader_change_is_ignored():
    b1, req = crafted_follower([(5, 2, "a-"), (5, 2, "b-")], hw=0)
    b1.apply_partition_state(state(3, 10, isr=(3,), replicas=(1, 3)), 0)
    answer(b1, req, 5, 0)  # from broker 2, for epoch 9: ignored
    assert log_of(b1).log_end_offset == 4


def test_out_of_range_leader_end_below_ours_truncates_to_it():
    b1 = broker(1, make_log([(1, 2, "a-"), (1, 2, "b-")], hw=2))
    b1.apply_partition_state(state(2, 3, isr=(2,), replicas=(1, 2)), 0)
    [(_, fetch)] = b1.poll_requests(0)
    oor = FetchResponse((FetchPartitionData(TP.topic, 0, Errors.OFFSET_OUT_OF_RANGE),))
    b1.on_response(2, fetch, oor, 0)
    [(_, latest)] = b1.poll_requests(0)
    assert isinstance(latest, ListOffsetsRequest) and latest.replica_id == 1 and latest.partitions[0].timestamp == -1
    leader = leader_with(2, [(1, 2, "a-")], 3, 0)
    b1.on_response(2, latest, leader.handle(1, latest, 0), 0)
    assert log_of(b1).log_end_offset == 2
    assert b1.fetcher.states[TP].state == FetchState.FETCHING


def test_out_of_range_leader_start_beyond_our_end_restarts_the_log():
    b2 = leader_with(2, [(1, 4, "a-"), (1, 4, "b-"), (1, 4, "c-")], 2, 0, hw=12)
    log_of(b2).increment_log_start_offset(8)
    b1 = broker(1, make_log([(1, 4, "a-")], hw=4))
    b1.apply_partition_state(state(2, 2, isr=(2,), replicas=(1, 2)), 0)
    Network({1: b1, 2: b2}).pump(rounds=6)
    assert log_of(b1).log_start_offset == 8
    assert log_of(b1).log_end_offset == 12
    assert log_of(b1).read(8) == log_of(b2).read(8)
    assert b1.fetcher.truncations[0].reason == "out_of_range"


def test_out_of_range_restart_at_a_log_start_inside_a_batch_starts_at_the_batch():
    """The leader's log start (DeleteRecords) lies inside batch 4-7. The follower restarts its log at 6,
    gets the whole batch 4-7 back, and (Kafka's `appendRecordsToFollowerOrFutureReplica`) restarts its
    still-empty log at the batch's base offset instead of failing the partition for good."""
    b2 = leader_with(2, [(1, 4, "a-"), (1, 4, "b-"), (1, 4, "c-")], 2, 0, hw=12)
    log_of(b2).increment_log_start_offset(6)
    b1 = broker(1)
    b1.apply_partition_state(state(2, 2, isr=(2,), replicas=(1, 2)), 0)
    Network({1: b1, 2: b2}).pump(rounds=8)
    assert TP not in b1.fetcher.failed and b1.fetcher.states[TP].state == FetchState.FETCHING
    assert log_of(b1).log_end_offset == 12
    assert log_of(b1).read(4) == log_of(b2).read(4)


def test_pre_kip_320_follower_truncates_to_high_watermark_and_sends_no_epochs():
    b1, b2 = diverged_pair(protocol="pre-kip-320")
    assert log_of(b1).log_end_offset == 4  # truncated to its HW on becoming follower
    net = Network({1: b1, 2: b2})
    net.pump(rounds=4)
    sent = [req for src, dst, req, r in net.log if src == 1]
    assert sent and all(isinstance(r, FetchRequest) for r in sent)
    assert all(p.current_leader_epoch == -1 and p.last_fetched_epoch == -1 for r in sent for p in r.partitions)
    assert log_of(b1).read(0) == log_of(b2).read(0)
    assert b1.fetcher.truncations[0].reason == "high_watermark"


def pre_kip_320_history(protocol):
    """Broker 1's HW covers offsets 4-5 that broker 2 (the new leader) never had; broker 2 writes two
    batches 4-5 and 6-8 at epoch 2 (KIP-101's replica-divergence scenario)."""
    b1 = broker(1, make_log([*SHARED, (1, 2, "lost-")], hw=6), protocol=protocol)
    b2 = leader_with(2, SHARED, 2, 2, protocol=protocol)
    b2.partitions[TP].append_records_to_leader(recs(3, "more-"), acks=1, min_insync_replicas=1, now_ms=3000)
    b1.apply_partition_state(state(2, 2, isr=(2,), replicas=(1, 2)), 0)
    Network({1: b1, 2: b2}).pump(rounds=6)
    return b1, b2


def test_pre_kip_320_follower_diverges_silently():
    b1, b2 = pre_kip_320_history("pre-kip-320")
    assert log_of(b1).log_end_offset == log_of(b2).log_end_offset == 9
    assert log_of(b1).read(6) == log_of(b2).read(6)
    assert log_of(b1).read(0, upper_bound=6) != log_of(b2).read(0, upper_bound=6)  # offsets 4-5 differ
    assert b1.fetcher.truncations == [] and b1.fetcher.failed == {}


def test_kip_320_follower_repairs_the_same_history():
    b1, b2 = pre_kip_320_history("kip-320")
    assert log_of(b1).read(0) == log_of(b2).read(0)
    assert [(t.from_offset, t.to_offset) for t in b1.fetcher.truncations] == [(6, 4)]


def test_append_below_log_end_parks_the_partition():
    b1 = broker(1, make_log([*SHARED, (1, 2, "lost-")], hw=6), protocol="pre-kip-320")
    b2 = leader_with(2, SHARED, 2, 3, protocol="pre-kip-320")  # one batch 4-6 straddles our end 6
    b1.apply_partition_state(state(2, 2, isr=(2,), replicas=(1, 2)), 0)
    Network({1: b1, 2: b2}).pump(rounds=3)
    assert TP in b1.fetcher.failed and b1.fetcher.states[TP].state == FetchState.PARKED
    b1.apply_partition_state(state(2, 3, isr=(2,), replicas=(1, 2)), 0)
    assert TP not in b1.fetcher.failed


def test_three_broker_replication_end_to_end():
    rms = {i: broker(i) for i in (1, 2, 3)}
    for rm in rms.values():
        rm.apply_partition_state(state(1, 1, isr=(1,), replicas=(1, 2, 3)), 0)
    net = Network(rms)
    leader = rms[1].partitions[TP]
    for i in range(3):
        leader.append_records_to_leader(recs(2, f"r{i}-"), acks=1, min_insync_replicas=1, now_ms=100 * i)
        net.pump(now_ms=100 * i, rounds=4)
    assert leader.isr == (1, 2, 3)
    assert all(log_of(rm).read(0) == log_of(rms[1]).read(0) for rm in rms.values())
    assert {log_of(rm).high_watermark for rm in rms.values()} == {6}


def test_corrupt_fetch_response_is_retried_not_appended():
    b1 = broker(1, make_log([(1, 2, "a-")], hw=2))
    b1.apply_partition_state(state(2, 3, isr=(2,), replicas=(1, 2)), 0)
    [(_, fetch)] = b1.poll_requests(0)
    good = make_log([(1, 2, "a-"), (3, 2, "b-")]).read(2)
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # breaks the CRC
    b1.on_response(2, fetch, FetchResponse((FetchPartitionData(TP.topic, 0, Errors.NONE, 4, 4, 0, records=bytes(bad)),)), 0)
    assert log_of(b1).log_end_offset == 2
    s = b1.fetcher.states[TP]
    assert s.state == FetchState.FETCHING and s.delay_until_ms == b1.fetcher.fetch_backoff_ms

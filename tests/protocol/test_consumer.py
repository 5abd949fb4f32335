"""Consumer positions (SPEC (e)): fetch states, validation outcomes per reset policy, LogTruncationError,
committed epochs, resets, offsets-for-times, pre-KIP-320, and the ways out of every state."""

from __future__ import annotations

import pytest
from protocol_support import CONTROLLER, TP, recs, state

from epochguard.broker.group.coordinator import GroupCoordinator
from epochguard.broker.replica_manager import ReplicaManager
from epochguard.client.consumer import Consumer, FetchState
from epochguard.errors import LogTruncationError, NoOffsetForPartitionError, OffsetOutOfRangeError
from epochguard.protocol.messages import (
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    OffsetCommitRequest,
    OffsetsForLeaderEpochRequest,
)
from epochguard.storage.log import PartitionLog
from epochguard.types import FetchPosition, LeaderAndEpoch, OffsetAndMetadata, OffsetAndTimestamp

COORD = 500


class Cluster:
    """Brokers (ReplicaManagers), a coordinator, and the metadata the test decides to announce."""

    def __init__(self, leaders: dict[int, list[tuple[int, int]]] | None = None, leader: int = 1, epoch: int = 1):
        self.brokers: dict[int, ReplicaManager] = {}
        self.coordinator = GroupCoordinator()
        self.meta = (leader, epoch)
        self.topic_id = "topic-a"
        self.meta_version = 12
        self.sent: list[tuple[int, object]] = []
        self.hold: list[tuple[int, object, object]] = []  # (node, request, response) not yet delivered
        self.hold_types: tuple[type, ...] = ()
        for broker_id, batches in (leaders or {}).items():
            self.add_leader(broker_id, batches, epoch if broker_id == leader else 0)

    def add_leader(self, broker_id: int, batches: list[tuple[int, int]], epoch: int, hw: int | None = None) -> ReplicaManager:
        """Broker `broker_id` leads TP at `epoch` over a log of `batches` = [(epoch, count)], HW at its LEO."""
        log = PartitionLog(TP)
        for e, n in batches:
            log.append_as_leader(recs(n, f"e{e}-"), e, timestamp_ms=1000 + 100 * e)
        rm = ReplicaManager(broker_id, controller_id=CONTROLLER, logs={TP: log})
        rm.apply_partition_state(state(broker_id, epoch, isr=(broker_id,), replicas=(broker_id,)), 0)
        if hw is not None:
            log.update_high_watermark(hw)
        self.brokers[broker_id] = rm
        return rm

    def metadata(self) -> MetadataResponse:
        leader, epoch = self.meta
        part = MetadataResponsePartition(0, leader, epoch, (leader,), (leader,))
        brokers = tuple(MetadataResponseBroker(b) for b in sorted({*self.brokers, 1, 2, 3}))
        return MetadataResponse((MetadataResponseTopic(TP.topic, (part,), self.topic_id),), brokers, version=self.meta_version)

    def answer(self, node: int, request):
        if isinstance(request, MetadataRequest):
            return self.metadata()
        if node == COORD:
            return self.coordinator.handle(0, request, 0)
        return self.brokers[node].handle(-1, request, 0)

    def run(self, consumer: Consumer, now_ms: int = 0, rounds: int = 6) -> None:
        for _ in range(rounds):
            for node, request in consumer.poll_requests(now_ms):
                self.sent.append((node, request))
                if node not in self.brokers and node != COORD and not isinstance(request, MetadataRequest):
                    consumer.on_request_failed(node, request, now_ms)  # no such broker (any more)
                    continue
                response = self.answer(node, request)
                if isinstance(request, self.hold_types):
                    self.hold.append((node, request, response))
                else:
                    consumer.on_response(node, request, response, now_ms)

    def sent_of(self, kind):
        return [r for _, r in self.sent if isinstance(r, kind)]


def consumer(policy="earliest", protocol="kip-320", **kw) -> Consumer:
    c = Consumer(bootstrap=(1,), reset_policy=policy, protocol=protocol, **kw)
    c.assign([TP])
    return c


def values(records):
    return [r.value for r in records.records()]


# --- state machine ---------------------------------------------------------------------------------
def test_transition_table_ignores_disallowed_transitions():
    c = consumer("earliest")
    pos = FetchPosition(5, 1, LeaderAndEpoch(1, 2))
    c.seek_to_end(TP)
    assert c.awaiting_reset(TP) and c.position(TP) is None
    assert not c.validate_position(TP, LeaderAndEpoch(2, 3))  # AWAIT_RESET -> AWAIT_VALIDATION: ignored
    assert c.awaiting_reset(TP)
    c.seek_position(TP, pos)  # via FETCHING, so it lands in AWAIT_VALIDATION
    assert c.awaiting_validation(TP) and c.position(TP) == pos
    c.seek_position(TP, FetchPosition(5, None, LeaderAndEpoch(1, 2)))  # no offset epoch: nothing to validate
    assert c.state_of(TP) == FetchState.FETCHING
    c.seek_position(TP, FetchPosition(5, 3, LeaderAndEpoch(1, None)))  # no leader epoch: nothing to validate with
    assert c.state_of(TP) == FetchState.FETCHING
    assert c.validate_position(TP, LeaderAndEpoch(2, 3))  # a new leader, with an epoch: validate there
    assert c.position(TP) == FetchPosition(5, 3, LeaderAndEpoch(2, 3))
    c.seek_position(TP, pos, validate=False)
    assert c.state_of(TP) == FetchState.FETCHING and c.position(TP) == pos


# --- reset, fetch, records ---------------------------------------------------------------------------
@pytest.mark.parametrize("policy, first", [("earliest", 0), ("latest", 6)])
def test_reset_then_fetch_records_with_epochs(policy, first):
    cluster = Cluster({1: [(0, 2), (1, 4)]}, leader=1, epoch=1)
    c = consumer(policy)
    cluster.run(c)
    [reset] = c.resets
    assert (reset.policy, reset.reason, reset.to_offset) == (policy, "no_position", first)
    if policy == "latest":
        cluster.brokers[1].partitions[TP].append_records_to_leader(recs(2, "new-"), acks=1, min_insync_replicas=1, now_ms=0)
        cluster.run(c)
    got = c.poll()
    assert next(r.offset for r in got.records()) == first
    assert {r.leader_epoch for r in got.records()} == ({0, 1} if policy == "earliest" else {1})
    last = list(got.records())[-1]
    assert got.next_offsets() == {TP: OffsetAndMetadata(last.offset + 1, "", 1)}
    assert c.position(TP) == FetchPosition(last.offset + 1, 1, LeaderAndEpoch(1, 1))
    [fetch] = cluster.sent_of(FetchRequest)[:1]
    assert fetch.partitions[0].current_leader_epoch == 1 and fetch.partitions[0].last_fetched_epoch == -1


def test_no_committed_offset_and_policy_none_raises():
    cluster = Cluster({1: [(0, 2)]})
    c = consumer("none")
    cluster.run(c)
    with pytest.raises(NoOffsetForPartitionError):
        c.poll()
    assert c.state_of(TP) == FetchState.INITIALIZING


def test_commit_carries_epoch_and_committed_epoch_is_validated():
    cluster = Cluster({1: [(0, 2), (1, 4)]}, epoch=1)
    c = consumer("earliest", group_id="g", coordinator_id=COORD)
    cluster.run(c)
    c.poll()
    c.commit()
    cluster.run(c)
    [commit] = cluster.sent_of(OffsetCommitRequest)
    assert (commit.partitions[0].committed_offset, commit.partitions[0].committed_leader_epoch) == (6, 1)
    assert c.committed[TP] == OffsetAndMetadata(6, "", 1)
    # A new consumer of the group starts from the committed offset, validated with its epoch.
    fresh = consumer("none", group_id="g", coordinator_id=COORD)
    cluster.sent.clear()
    cluster.run(fresh)
    [validation] = cluster.sent_of(OffsetsForLeaderEpochRequest)
    assert (validation.partitions[0].leader_epoch, validation.partitions[0].current_leader_epoch) == (1, 1)
    assert validation.replica_id == -1
    assert fresh.state_of(TP) == FetchState.FETCHING and fresh.position(TP).offset == 6


# --- validation outcomes -----------------------------------------------------------------------------
def truncated_cluster():
    """Consumer read offsets 0-5 (epoch 1) from broker 1; broker 2 took over at epoch 2 with only 0-3."""
    cluster = Cluster({1: [(0, 2), (1, 4)]}, leader=1, epoch=1)
    cluster.add_leader(2, [(0, 2), (1, 2), (2, 3)], 2)  # epoch 1 ends at 4 on the new leader
    return cluster


def read_all_then_move_leader(cluster, c, count=6):
    cluster.run(c)
    assert c.poll().count() == count
    cluster.meta = (2, 2)
    c.metadata.request_update()
    cluster.sent.clear()
    cluster.run(c, now_ms=200, rounds=3)  # metadata, then validation, then a fetch from the new leader


@pytest.mark.parametrize("policy", ["earliest", "latest"])
def test_truncation_rewinds_precisely_under_a_reset_policy(policy):
    cluster = truncated_cluster()
    c = consumer(policy)
    c.seek(TP, 0)
    read_all_then_move_leader(cluster, c)
    [validation] = cluster.sent_of(OffsetsForLeaderEpochRequest)
    assert (validation.partitions[0].leader_epoch, validation.partitions[0].current_leader_epoch) == (1, 2)
    assert c.state_of(TP) == FetchState.FETCHING
    assert c.position(TP) == FetchPosition(4, 1, LeaderAndEpoch(2, 2))  # the divergence point, no policy reset
    [event] = c.truncations
    assert (event.divergent_offset, event.divergent_epoch, event.offsets_affected, event.resolution) == (4, 1, 2, "rewound")
    assert event.position.offset == 6
    assert c.resets == []  # a precise rewind, not a policy reset
    cluster.run(c)
    assert [r.offset for r in c.poll().records()] == [4, 5, 6]


def test_truncation_raises_log_truncation_error_under_none():
    cluster = truncated_cluster()
    c = consumer("none")
    c.seek(TP, 0)
    read_all_then_move_leader(cluster, c)
    with pytest.raises(LogTruncationError) as info:
        c.poll()
    err = info.value
    assert err.offset_out_of_range_partitions == {TP: 6}
    assert err.divergent_offsets == {TP: OffsetAndMetadata(4, "", 1)}
    assert c.state_of(TP) == FetchState.AWAIT_VALIDATION  # stays until the application seeks
    assert [(e.resolution, e.divergent_offset) for e in c.truncations] == [("raised", 4)]
    cluster.run(c, now_ms=1000)  # retried: raised again, reported once
    with pytest.raises(LogTruncationError):
        c.poll()
    assert len(c.truncations) == 1
    c.seek(TP, err.divergent_offsets[TP])  # the way out: seek to the divergence point, with its epoch
    cluster.run(c, now_ms=2000)
    assert c.state_of(TP) == FetchState.FETCHING and [r.offset for r in c.poll().records()] == [4, 5, 6]


def undefined_cluster():
    cluster = Cluster({1: [(3, 6)]}, leader=1, epoch=3)
    rm = cluster.add_leader(2, [(3, 4)], 4)
    rm.partitions[TP].log.leader_epoch_cache.clear()  # the leader cannot place epoch 3: (-1, -1)
    return cluster


def test_undefined_answer_resets_by_policy_and_reports_it():
    cluster = undefined_cluster()
    c = consumer("latest")
    c.seek(TP, 0)
    cluster.run(c)
    c.poll()
    cluster.meta = (2, 4)
    c.metadata.request_update()
    cluster.run(c, now_ms=200)
    [event] = c.truncations
    assert (event.divergent_offset, event.divergent_epoch, event.offsets_affected, event.resolution) == (None, None, None, "reset")
    [reset] = c.resets
    assert (reset.reason, reset.from_offset, reset.to_offset) == ("truncation", 6, 4)
    assert c.state_of(TP) == FetchState.FETCHING


def test_undefined_answer_under_none_raises_without_divergent_offset():
    """OffsetFetcherTest.testOffsetValidationWithUndefinedEpochAndOffset: the partition is in the
    out-of-range map only (`OffsetFetcherUtils.buildLogTruncationException`)."""
    cluster = undefined_cluster()
    c = consumer("none")
    c.seek(TP, 0)
    cluster.run(c)
    c.poll()
    cluster.meta = (2, 4)
    c.metadata.request_update()
    cluster.run(c, now_ms=200)
    with pytest.raises(LogTruncationError) as info:
        c.poll()
    assert info.value.divergent_offsets == {}  # only known divergence points (OffsetFetcherUtils)
    assert info.value.offset_out_of_range_partitions == {TP: 6}


def test_different_epoch_alone_is_not_truncation():
    cluster = Cluster({1: [(0, 2), (2, 4)]}, leader=1, epoch=2)
    c = consumer()
    c.seek(TP, OffsetAndMetadata(2, leader_epoch=1))  # the leader never had epoch 1: answers (0, 2)
    cluster.run(c)
    [validation] = cluster.sent_of(OffsetsForLeaderEpochRequest)
    assert validation.partitions[0].leader_epoch == 1
    assert c.truncations == [] and c.state_of(TP) == FetchState.FETCHING
    assert [r.offset for r in c.poll().records()] == [2, 3, 4, 5]


def test_seek_with_epoch_reads_leader_before_bump():
    cluster = Cluster({1: [(0, 2)]}, leader=1, epoch=1)
    c = consumer()
    cluster.run(c)
    c.seek(TP, OffsetAndMetadata(1, leader_epoch=5))  # an epoch newer than the metadata
    assert c.position(TP) == FetchPosition(1, 5, LeaderAndEpoch(1, 1))
    assert c.metadata.last_seen_leader_epoch(TP) == 5 and c.metadata.update_requested


def test_committed_epoch_newer_than_metadata_waits_for_metadata():
    cluster = Cluster({1: [(0, 2), (3, 2)]}, leader=1, epoch=3)
    cluster.coordinator.offsets["g"] = {TP: OffsetAndMetadata(3, "", 3)}
    cluster.meta = (1, 2)  # metadata still shows the previous epoch
    c = consumer(group_id="g", coordinator_id=COORD)
    cluster.run(c)
    cluster.run(c, now_ms=200)
    assert c.state_of(TP) == FetchState.AWAIT_VALIDATION
    assert c.position(TP).current_leader == LeaderAndEpoch(None, 3)
    assert cluster.sent_of(OffsetsForLeaderEpochRequest) == []  # no leader to ask yet
    assert len(cluster.sent_of(MetadataRequest)) >= 2  # it keeps refreshing
    cluster.meta = (1, 3)
    cluster.run(c, now_ms=400)
    assert len(cluster.sent_of(OffsetsForLeaderEpochRequest)) == 1
    assert c.state_of(TP) == FetchState.FETCHING
    assert [r.offset for r in c.poll().records()] == [3]


def test_records_buffered_from_the_old_leader_are_not_handed_out_after_validation():
    """Records fetched from broker 1 but not yet polled when broker 2 takes over: validation against
    broker 2 (epoch 1 ends at 5 there) passes for position 4, yet 5-9 from broker 1 are not broker 2's
    log. They must be dropped and refetched from the leader the position now points at."""
    cluster = Cluster({1: [(0, 2), (1, 8)]}, leader=1, epoch=1)  # epoch 1 at 2-9
    cluster.add_leader(2, [(0, 2), (1, 3), (2, 3)], 2)  # epoch 1 at 2-4, epoch 2 at 5-7
    c = consumer()
    c.seek(TP, OffsetAndMetadata(4, leader_epoch=1))
    cluster.run(c)  # validated against broker 1, 4-9 fetched and buffered
    cluster.meta = (2, 2)
    c.metadata.request_update()
    cluster.run(c, now_ms=200, rounds=2)  # metadata, validation: (1, 5) >= 4, FETCHING at 4 on broker 2
    assert c.position(TP) == FetchPosition(4, 1, LeaderAndEpoch(2, 2))
    assert c.poll().is_empty()  # nothing from broker 1
    cluster.run(c, now_ms=400)
    got = [(r.offset, r.value, r.leader_epoch) for r in c.poll().records()]
    assert got == [(4, b"e1-2", 1), (5, b"e2-0", 2), (6, b"e2-1", 2), (7, b"e2-2", 2)]


def test_reset_answer_without_an_offset_is_retried_not_used_as_a_position():
    """A ListOffsets answer NONE with offset -1 (UNKNOWN_OFFSET) is no position: Kafka's
    `handleListOffsetResponse` leaves the partition out and the reset is retried."""
    import dataclasses

    from epochguard.protocol.messages import ListOffsetsRequest, ListOffsetsResponse

    cluster = Cluster({1: [(0, 4)]}, leader=1, epoch=1)
    c = consumer("earliest")
    cluster.hold_types = (ListOffsetsRequest,)
    cluster.run(c, rounds=2)
    [(node, request, response)] = cluster.hold
    unknown = ListOffsetsResponse(tuple(dataclasses.replace(p, offset=-1, leader_epoch=-1) for p in response.partitions))
    c.on_response(node, request, unknown, 0)
    assert c.state_of(TP) == FetchState.AWAIT_RESET and c.position(TP) is None and c.resets == []
    cluster.hold_types = ()
    cluster.run(c, now_ms=500)
    assert [r.offset for r in c.poll().records()] == [0, 1, 2, 3]


def test_reset_answer_applies_only_to_the_same_pending_strategy_and_bumps_the_last_seen_epoch():
    import dataclasses

    from epochguard.protocol.messages import ListOffsetsRequest, ListOffsetsResponse

    cluster = Cluster({1: [(0, 2), (1, 4)]}, leader=1, epoch=1)
    c = consumer("latest")
    cluster.hold_types = (ListOffsetsRequest,)
    cluster.run(c, rounds=2)
    [(node, request, response)] = cluster.hold
    c.seek_to_beginning(TP)  # a different strategy while the latest reset is in flight
    c.on_response(node, request, response, 0)
    assert c.state_of(TP) == FetchState.AWAIT_RESET and c.resets == []  # the latest answer is not used
    cluster.hold.clear()
    cluster.run(c, now_ms=200, rounds=1)
    [(node, request, response)] = cluster.hold
    assert request.partitions[0].timestamp == -2
    newer = ListOffsetsResponse(tuple(dataclasses.replace(p, leader_epoch=3) for p in response.partitions))
    c.on_response(node, request, newer, 200)
    [reset] = c.resets
    assert (reset.policy, reset.to_offset, reset.to_epoch) == ("earliest", 0, 3)
    # Position: no offset epoch (not validated), the leader read before the bump; last-seen bumped.
    assert c.position(TP) == FetchPosition(0, None, LeaderAndEpoch(1, 1))
    assert c.metadata.last_seen_leader_epoch(TP) == 3 and c.metadata.update_requested


# --- fetch errors ------------------------------------------------------------------------------------
def test_fenced_fetch_follows_the_leader_hint_and_validates():
    cluster = Cluster({1: [(0, 2)]}, leader=1, epoch=1)
    c = consumer()
    cluster.run(c)
    c.poll()
    cluster.brokers[1].apply_partition_state(state(1, 2, isr=(1,), replicas=(1,)), 0)  # broker moved to epoch 2
    cluster.sent.clear()
    cluster.run(c, rounds=1)
    [fetch] = cluster.sent_of(FetchRequest)
    assert fetch.partitions[0].current_leader_epoch == 1  # answered FENCED_LEADER_EPOCH with a KIP-951 hint
    assert c.metadata.current_leader(TP) == LeaderAndEpoch(1, 2)
    assert c.state_of(TP) == FetchState.AWAIT_VALIDATION
    cluster.run(c, now_ms=200)
    assert c.state_of(TP) == FetchState.FETCHING


def test_unknown_leader_epoch_retries_without_refresh():
    cluster = Cluster({1: [(0, 2)]}, leader=1, epoch=1)
    c = consumer()
    cluster.run(c)
    c.poll()
    cluster.meta = (1, 2)  # metadata ahead of the broker
    c.metadata.request_update()
    cluster.run(c, now_ms=100, rounds=3)
    assert c.state_of(TP) == FetchState.AWAIT_VALIDATION
    [validation] = cluster.sent_of(OffsetsForLeaderEpochRequest)
    assert validation.partitions[0].current_leader_epoch == 2
    assert not c.metadata.update_requested  # UNKNOWN_LEADER_EPOCH: the broker will catch up, just retry
    cluster.brokers[1].apply_partition_state(state(1, 2, isr=(1,), replicas=(1,)), 0)
    cluster.run(c, now_ms=300)
    assert c.state_of(TP) == FetchState.FETCHING


@pytest.mark.parametrize("policy", ["earliest", "none"])
def test_offset_out_of_range_resets_or_raises(policy):
    cluster = Cluster({1: [(0, 4)]}, leader=1, epoch=1)
    c = consumer(policy)
    c.seek(TP, 10)  # beyond the log end
    cluster.run(c, rounds=3)
    if policy == "none":
        with pytest.raises(OffsetOutOfRangeError) as info:
            c.poll()
        assert info.value.offset_out_of_range_partitions == {TP: 10}
        assert not isinstance(info.value, LogTruncationError)
    else:
        cluster.run(c)
        [reset] = c.resets
        assert (reset.reason, reset.from_offset, reset.to_offset) == ("out_of_range", 10, 0)
        assert c.truncations == []  # a reset, not a detected truncation


def test_offset_out_of_range_from_a_preferred_read_replica_is_dropped_not_reset():
    """KIP-392: a read replica behind the position answers OFFSET_OUT_OF_RANGE. The consumer goes back
    to the leader; a policy reset ("latest" here) would skip records."""
    import dataclasses

    cluster = Cluster({1: [(0, 2), (1, 4)]}, leader=1, epoch=1)
    cluster.add_leader(2, [(0, 2)], 1)  # a replica that only has 0-1
    c = consumer("latest")
    c.seek(TP, 0)
    cluster.run(c, rounds=1)
    [(node, fetch)] = [(n, r) for n, r in c.poll_requests(0) if isinstance(r, FetchRequest)]
    response = cluster.answer(node, fetch)
    redirect = FetchResponse(tuple(dataclasses.replace(p, records=b"", preferred_read_replica=2) for p in response.partitions))
    c.on_response(node, fetch, redirect, 0)
    c.seek(TP, 4)  # beyond the replica's end
    cluster.sent.clear()
    cluster.run(c, now_ms=100, rounds=1)
    assert [n for n, r in cluster.sent if isinstance(r, FetchRequest)] == [2]
    assert c.state_of(TP) == FetchState.FETCHING and c.position(TP).offset == 4 and c.resets == []
    cluster.run(c, now_ms=300)
    assert [r.offset for r in c.poll().records()] == [4, 5]  # from the leader


# --- ways out ------------------------------------------------------------------------------------------
def test_two_quick_leader_changes_do_not_stall_validation():
    cluster = truncated_cluster()
    cluster.add_leader(3, [(0, 2), (1, 4), (3, 1)], 3)
    c = consumer()
    cluster.run(c)
    c.poll()
    cluster.hold_types = (OffsetsForLeaderEpochRequest,)  # the first validation is slow
    cluster.meta = (2, 2)
    c.metadata.request_update()
    cluster.run(c, now_ms=200, rounds=2)
    assert len(cluster.hold) == 1 and c.state_of(TP) == FetchState.AWAIT_VALIDATION
    cluster.hold_types = ()
    cluster.meta = (3, 3)  # second leader change while the first validation is in flight
    c.metadata.request_update()
    cluster.run(c, now_ms=400, rounds=2)
    assert c.state_of(TP) == FetchState.FETCHING  # validated against broker 3 without waiting
    node, request, response = cluster.hold.pop()
    c.on_response(node, request, response, 500)  # the late answer for broker 2 is ignored
    assert c.truncations == [] and c.position(TP).current_leader == LeaderAndEpoch(3, 3)


def test_lost_validation_request_is_retried_after_timeout():
    cluster = truncated_cluster()
    c = consumer(request_timeout_ms=1000)
    cluster.run(c)
    c.poll()
    cluster.hold_types = (OffsetsForLeaderEpochRequest,)
    cluster.meta = (2, 2)
    c.metadata.request_update()
    cluster.run(c, now_ms=200, rounds=2)
    cluster.hold_types = ()
    cluster.run(c, now_ms=700, rounds=2)
    assert len(cluster.sent_of(OffsetsForLeaderEpochRequest)) == 1  # still in flight
    cluster.run(c, now_ms=1300, rounds=2)  # expired: failed, retried after backoff
    cluster.run(c, now_ms=1500, rounds=2)
    assert len(cluster.sent_of(OffsetsForLeaderEpochRequest)) == 2
    assert c.state_of(TP) == FetchState.FETCHING


def test_lower_epoch_after_topic_recreation_is_accepted():
    cluster = Cluster({1: [(5, 2)]}, leader=1, epoch=5)
    c = consumer()
    cluster.run(c)
    c.poll()
    cluster.brokers.clear()
    cluster.add_leader(2, [(0, 1)], 0)
    cluster.meta, cluster.topic_id = (2, 0), "topic-b"
    c.metadata.request_update()
    cluster.run(c, now_ms=100)
    assert c.metadata.current_leader(TP) == LeaderAndEpoch(2, 0)
    assert c.position(TP).current_leader == LeaderAndEpoch(2, 0)


def test_stale_lower_epoch_with_same_topic_id_is_rejected():
    cluster = Cluster({1: [(5, 2)]}, leader=1, epoch=5)
    c = consumer()
    cluster.run(c)
    cluster.meta = (2, 4)
    c.metadata.request_update()
    cluster.run(c, now_ms=100, rounds=1)
    assert c.position(TP).current_leader == LeaderAndEpoch(1, 5)
    assert c.metadata.update_requested  # asks again


# --- offsets for times ---------------------------------------------------------------------------------
def test_offsets_for_times_returns_epochs():
    cluster = Cluster({1: [(0, 2), (1, 4)]}, leader=1, epoch=1)
    c = consumer()
    lookup = c.offsets_for_times({TP: 1050}, 0)
    cluster.run(c)
    assert lookup.done and lookup.result == {TP: OffsetAndTimestamp(2, 1100, 1)}
    missing = c.offsets_for_times({TP: 99_999}, 0)
    cluster.run(c)
    assert missing.result == {TP: None}


# --- pre-KIP-320 ---------------------------------------------------------------------------------------
def test_pre_kip_320_consumer_never_validates():
    cluster = truncated_cluster()
    for rm in cluster.brokers.values():
        rm.partitions[TP].protocol = "pre-kip-320"
    c = consumer(protocol="pre-kip-320")
    cluster.run(c)
    c.poll()
    cluster.meta = (2, 2)
    c.metadata.request_update()
    cluster.run(c, now_ms=200)
    assert cluster.sent_of(OffsetsForLeaderEpochRequest) == []
    assert all(p.current_leader_epoch == -1 for f in cluster.sent_of(FetchRequest) for p in f.partitions)
    assert c.truncations == []
    # It continues at 6 on the new leader: offsets 4-5 it read are gone and it never knows.
    assert [r.offset for r in c.poll().records()] == [6]
    c.seek(TP, OffsetAndMetadata(2, leader_epoch=1))
    assert c.state_of(TP) == FetchState.FETCHING


def test_corrupt_records_surface_from_poll():
    from epochguard.errors import CorruptRecordError

    cluster = Cluster({1: [(0, 2)]}, leader=1, epoch=1)
    c = consumer()
    cluster.run(c, rounds=2)  # metadata, reset
    [(node, request)] = [(n, r) for n, r in c.poll_requests(0) if isinstance(r, FetchRequest)]
    response = cluster.answer(node, request)
    data = response.partitions[0]
    bad = bytearray(data.records)
    bad[-1] ^= 0xFF
    import dataclasses

    c.on_response(node, request, FetchResponse((dataclasses.replace(data, records=bytes(bad)),)), 0)
    with pytest.raises(CorruptRecordError):
        c.poll()
    assert c.position(TP).offset == 0


def test_control_batches_advance_the_position_but_are_not_records():
    from epochguard._core import encode_batch

    log = PartitionLog(TP)
    log.append_as_follower(
        encode_batch([(None, b"a")], base_offset=0, partition_leader_epoch=1, base_timestamp=1)
        + encode_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], base_offset=1, partition_leader_epoch=1, base_timestamp=1, is_control=True, is_transactional=True, producer_id=5, producer_epoch=0)
        + encode_batch([(None, b"b")], base_offset=2, partition_leader_epoch=2, base_timestamp=1)
    )
    rm = ReplicaManager(1, controller_id=CONTROLLER, logs={TP: log})
    rm.apply_partition_state(state(1, 2, isr=(1,), replicas=(1,)), 0)
    cluster = Cluster()
    cluster.brokers[1] = rm
    cluster.meta = (1, 2)
    c = consumer("earliest")
    cluster.run(c)
    got = c.poll()
    assert [(r.offset, r.value, r.leader_epoch) for r in got.records()] == [(0, b"a", 1), (2, b"b", 2)]
    assert got.next_offsets() == {TP: OffsetAndMetadata(3, "", 2)}
    # a fetch that returns only a control batch moves the position without records
    log.append_as_follower(
        encode_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], base_offset=3, partition_leader_epoch=2, base_timestamp=1, is_control=True, is_transactional=True, producer_id=5, producer_epoch=0)
    )
    log.update_high_watermark(4)
    cluster.run(c, now_ms=100)
    assert c.poll().is_empty() and c.position(TP).offset == 4


def test_pause_resume_and_unassign():
    cluster = Cluster({1: [(0, 2)]}, leader=1, epoch=1)
    c = consumer()
    c.pause(TP)
    cluster.run(c)
    assert cluster.sent_of(FetchRequest) == [] and c.state_of(TP) == FetchState.FETCHING
    c.resume(TP)
    cluster.run(c)
    assert c.poll().count() == 2
    c.unassign([TP])
    assert c.assignment == {}
    with pytest.raises(ValueError):
        c.position(TP)


# --- beyond Kafka: consumed-epoch history (opt-in) ------------------------------------------------------
def unclean_history(new_leader_epoch0_records):
    """Consumer reads 0-9 from broker 1: epoch 0 at 0-3, epoch 1 at 4-9. Broker 2, which only ever had
    epoch-0 records (0..n-1), is elected uncleanly at epoch 2: the consumer's 4-9 all diverged."""
    cluster = Cluster({1: [(0, 4), (1, 6)]}, leader=1, epoch=1)
    cluster.add_leader(2, [(0, new_leader_epoch0_records), (2, 3)], 2)
    return cluster


@pytest.mark.parametrize("n, kafka_divergent", [(6, 6), (12, None)])
def test_kafka_rule_misses_part_of_the_divergence(n, kafka_divergent):
    cluster = unclean_history(n)
    c = consumer()
    c.seek(TP, 0)
    read_all_then_move_leader(cluster, c, count=10)
    # The leader answers (0, n) for epoch 1: Kafka rewinds to n, or sees nothing when n >= 10.
    assert [e.divergent_offset for e in c.truncations] == ([kafka_divergent] if kafka_divergent else [])


@pytest.mark.parametrize("n", [6, 12])
def test_consumed_epochs_find_the_first_diverged_offset(n):
    cluster = unclean_history(n)
    c = consumer(track_consumed_epochs=True)
    c.seek(TP, 0)
    read_all_then_move_leader(cluster, c, count=10)
    [event] = c.truncations
    assert (event.divergent_offset, event.divergent_epoch, event.offsets_affected, event.resolution) == (4, 0, 6, "rewound")
    assert c.position(TP) == FetchPosition(4, 0, LeaderAndEpoch(2, 2))
    cluster.run(c, now_ms=300)
    assert [(r.offset, r.leader_epoch) for r in c.poll().records()][:2] == [(4, 0), (5, 0)]


def test_consumed_epochs_under_none_report_the_first_diverged_offset():
    cluster = unclean_history(12)
    c = consumer("none", track_consumed_epochs=True)
    c.seek(TP, 0)
    read_all_then_move_leader(cluster, c, count=10)
    with pytest.raises(LogTruncationError) as info:
        c.poll()
    assert info.value.divergent_offsets == {TP: OffsetAndMetadata(4, "", 0)}


def test_consumed_epochs_agree_with_kafka_when_history_is_consistent():
    cluster = truncated_cluster()
    c = consumer(track_consumed_epochs=True)
    c.seek(TP, 0)
    read_all_then_move_leader(cluster, c)
    [event] = c.truncations
    assert (event.divergent_offset, event.divergent_epoch, event.offsets_affected) == (4, 1, 2)


def test_consumed_epochs_after_seek_with_epoch_match_kafka():
    cluster = Cluster({1: [(0, 2), (2, 4)]}, leader=1, epoch=2)
    c = consumer(track_consumed_epochs=True)
    c.seek(TP, OffsetAndMetadata(2, leader_epoch=1))  # the leader answers (0, 2): not a truncation
    cluster.run(c)
    assert c.truncations == [] and c.state_of(TP) == FetchState.FETCHING

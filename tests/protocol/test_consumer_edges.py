"""Consumer behaviours pinned through the public API (`Consumer` driven by real sans-IO brokers): errors
raised again only after a back-off, stale ListOffsets answers, the epoch of offsets_for_times, lost
OffsetFetch and Metadata requests, and seeks over buffered records."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from protocol_support import CONTROLLER, TP, recs, state

from epochguard import Consumer, PartitionLog, ReplicaManager
from epochguard.broker.group.coordinator import GroupCoordinator
from epochguard.client.consumer import FetchState
from epochguard.errors import Errors, LogTruncationError, NoOffsetForPartitionError, OffsetOutOfRangeError
from epochguard.protocol.api_versions import (
    BROKER_API_VERSIONS,
    ApiKey,
    ApiVersionRange,
    ApiVersionsRequest,
    NodeApiVersions,
)
from epochguard.protocol.messages import (
    FetchRequest,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    OffsetFetchRequest,
)
from epochguard.types import LATEST_TIMESTAMP, FetchPosition, LeaderAndEpoch, OffsetAndTimestamp, TopicPartition

COORD = 500
BACKOFF = 100
TIMEOUT = 5_000


class World:
    """Sans-IO brokers leading TP, a group coordinator, and the metadata the test announces."""

    def __init__(self) -> None:
        self.brokers: dict[int, ReplicaManager] = {}
        self.coordinator = GroupCoordinator()
        self.leader, self.epoch = 1, 1
        self.add_leader(1, [(0, 2), (1, 4)], 1)

    def add_leader(self, broker_id: int, batches: list[tuple[int, int]], epoch: int) -> None:
        log = PartitionLog(TP)
        for e, n in batches:
            log.append_as_leader(recs(n, f"b{broker_id}-e{e}-"), e, timestamp_ms=1000 + 100 * e)
        rm = ReplicaManager(broker_id, controller_id=CONTROLLER, logs={TP: log})
        rm.apply_partition_state(state(broker_id, epoch, isr=(broker_id,), replicas=(broker_id,)), 0)
        log.update_high_watermark(log.log_end_offset)
        self.brokers[broker_id] = rm

    def metadata(self) -> MetadataResponse:
        part = MetadataResponsePartition(TP.partition, self.leader, self.epoch, (self.leader,), (self.leader,))
        brokers = tuple(MetadataResponseBroker(b) for b in sorted(self.brokers))
        return MetadataResponse((MetadataResponseTopic(TP.topic, (part,), "topic-a"),), brokers, version=12)

    def answer(self, node: int, request):
        if isinstance(request, MetadataRequest):
            return self.metadata()
        if node == COORD:
            return self.coordinator.handle(0, request, 0)
        return self.brokers[node].handle(-1, request, 0)

    def run(self, c: Consumer, now_ms: int = 0, rounds: int = 6, hold: Callable[[object], bool] = lambda r: False) -> list:
        """Deliver every request the consumer sends for `rounds` rounds; `hold` keeps some answers back."""
        held = []
        for _ in range(rounds):
            for node, request in c.poll_requests(now_ms):
                response = self.answer(node, request)
                if hold(request):
                    held.append((node, request, response))
                else:
                    c.on_response(node, request, response, now_ms)
        return held


def consumer(policy: str = "earliest", **kw) -> Consumer:
    c = Consumer(bootstrap=(1,), reset_policy=policy, retry_backoff_ms=BACKOFF, request_timeout_ms=TIMEOUT, **kw)
    c.assign([TP])
    return c


def kinds(requests) -> list[type]:
    return [type(r) for _, r in requests]


# --- errors are raised again after a back-off, not in a tight loop ---------------------------------
def test_no_offset_for_partition_is_raised_again_later_not_in_a_loop():
    world, c = World(), consumer("none")
    world.run(c, 0)
    with pytest.raises(NoOffsetForPartitionError):
        c.poll(0)
    world.run(c, 0)
    assert c.poll(0).count() == 0  # not queued again at once
    world.run(c, TIMEOUT - 1)
    assert c.poll(TIMEOUT - 1).count() == 0
    world.run(c, TIMEOUT)
    with pytest.raises(NoOffsetForPartitionError):
        c.poll(TIMEOUT)
    assert c.state_of(TP) == FetchState.INITIALIZING


def truncated_world_and_consumer() -> tuple[World, Consumer]:
    """The consumer read 0..5 (epoch 1) from broker 1; broker 2 leads epoch 2 and has epoch 1 end at 4."""
    world, c = World(), consumer("none")
    world.add_leader(2, [(0, 2), (1, 2), (2, 3)], 2)
    c.seek(TP, 0)
    world.run(c, 0)
    assert c.poll(0).count() == 6
    world.leader, world.epoch = 2, 2
    c.metadata.request_update()
    world.run(c, 1_000)
    return world, c


def test_log_truncation_error_is_raised_again_after_the_backoff_not_in_a_loop():
    world, c = truncated_world_and_consumer()
    with pytest.raises(LogTruncationError) as raised:
        c.poll(1_000)
    assert raised.value.divergent_offsets[TP].offset == 4
    world.run(c, 1_000)
    assert c.poll(1_000).count() == 0
    world.run(c, 1_000 + BACKOFF - 1)
    assert c.poll(1_000 + BACKOFF - 1).count() == 0
    world.run(c, 1_000 + BACKOFF)
    with pytest.raises(LogTruncationError):
        c.poll(1_000 + BACKOFF)
    assert len(c.truncations) == 1  # the event itself is reported once
    assert (c.truncations[0].detected_at_ms, c.truncations[0].resolution) == (1_000, "raised")


# --- ListOffsets answers that no longer apply -------------------------------------------------------
def is_list_offsets(r) -> bool:
    return isinstance(r, ListOffsetsRequest)


def test_a_reset_answer_for_a_partition_no_longer_assigned_is_ignored():
    world, c = World(), consumer("earliest")
    [(node, request, response)] = world.run(c, 0, hold=is_list_offsets)
    c.unassign([TP])
    c.on_response(node, request, response, 0)
    assert c.resets == [] and TP not in c.assignment
    c.assign([TP])
    assert c.state_of(TP) == FetchState.INITIALIZING and c.position(TP) is None


def test_a_reset_answer_after_a_seek_is_ignored():
    world, c = World(), consumer("latest")
    [(node, request, response)] = world.run(c, 0, hold=is_list_offsets)
    c.seek(TP, 3)
    c.on_response(node, request, response, 0)
    assert c.resets == []
    assert (c.state_of(TP), c.position(TP).offset) == (FetchState.FETCHING, 3)


# --- offsets_for_times --------------------------------------------------------------------------------
def test_the_epoch_returned_by_offsets_for_times_raises_the_last_seen_epoch():
    world, c = World(), consumer("earliest")
    world.run(c, 0)
    assert c.metadata.last_seen_leader_epoch(TP) == 1 and not c.metadata.update_requested
    lookup = c.offsets_for_times({TP: 1_000}, 0)
    [(node, request)] = [(n, r) for n, r in c.poll_requests(0) if isinstance(r, ListOffsetsRequest)]
    answer = ListOffsetsResponse((ListOffsetsPartitionResponse(TP.topic, TP.partition, Errors.NONE, 1_100, 3, 7),))
    c.on_response(node, request, answer, 0)
    assert lookup.done and lookup.result[TP] == OffsetAndTimestamp(3, 1_100, 7)
    assert c.metadata.last_seen_leader_epoch(TP) == 7
    assert c.metadata.update_requested  # a newer epoch than the metadata's: refresh


def test_an_offsets_for_times_answer_without_an_epoch_keeps_the_last_seen_epoch():
    world, c = World(), consumer("earliest")
    world.run(c, 0)
    lookup = c.offsets_for_times({TP: 1_000}, 0)
    [(node, request)] = [(n, r) for n, r in c.poll_requests(0) if isinstance(r, ListOffsetsRequest)]
    answer = ListOffsetsResponse((ListOffsetsPartitionResponse(TP.topic, TP.partition, Errors.NONE, 1_100, 3, -1),))
    c.on_response(node, request, answer, 0)
    assert lookup.result[TP].offset == 3
    assert c.metadata.last_seen_leader_epoch(TP) == 1


# --- lost requests ------------------------------------------------------------------------------------
def test_a_lost_offset_fetch_is_retried():
    c = consumer("earliest", group_id="g", coordinator_id=COORD)
    [(node, request)] = [(n, r) for n, r in c.poll_requests(0) if isinstance(r, OffsetFetchRequest)]
    c.on_request_failed(node, request, 0)
    assert OffsetFetchRequest not in kinds(c.poll_requests(BACKOFF - 1))
    assert OffsetFetchRequest in kinds(c.poll_requests(BACKOFF))


def test_an_unanswered_offset_fetch_expires_and_is_retried():
    world, c = World(), consumer("earliest", group_id="g", coordinator_id=COORD)
    assert OffsetFetchRequest in kinds(c.poll_requests(0))
    assert OffsetFetchRequest not in kinds(c.poll_requests(TIMEOUT - 1))
    c.poll_requests(TIMEOUT)  # expires it
    world.run(c, TIMEOUT + BACKOFF)
    assert c.state_of(TP) == FetchState.FETCHING  # nothing committed: reset to earliest
    assert [r.to_offset for r in c.resets] == [0]


def test_a_failed_metadata_request_starts_the_backoff_at_the_failure():
    c = consumer("earliest")
    [(node, request)] = c.poll_requests(0)
    assert isinstance(request, MetadataRequest)
    c.on_request_failed(node, request, 5_000)
    assert MetadataRequest not in kinds(c.poll_requests(5_000 + BACKOFF - 1))
    assert MetadataRequest in kinds(c.poll_requests(5_000 + BACKOFF))


# --- seek over buffered records -----------------------------------------------------------------------
def buffered() -> tuple[World, Consumer]:
    world, c = World(), consumer("earliest")
    world.run(c, 0)  # reset to 0, fetch 0..5 into the buffer (not polled)
    assert c.position(TP).offset == 0
    return world, c


def test_a_seek_to_the_buffered_position_discards_the_buffered_records():
    world, c = buffered()
    c.seek(TP, 0)
    assert c.poll(0).count() == 0
    world.run(c, 0)
    assert [r.offset for r in c.poll(0).records()] == list(range(6))


def test_a_seek_fetches_from_the_new_position_at_once():
    _world, c = buffered()
    c.seek(TP, 3)
    [fetch] = [r for _, r in c.poll_requests(0) if isinstance(r, FetchRequest)]
    assert fetch.partitions[0].fetch_offset == 3


# --- positions set by the application (seek_position, validate_position, seek_to_end) ----------------
def test_seek_position_takes_offset_zero_and_refuses_a_negative_offset():
    c = consumer()
    c.seek_position(TP, FetchPosition(0, None, LeaderAndEpoch(1, 1)))
    assert (c.state_of(TP), c.position(TP)) == (FetchState.FETCHING, FetchPosition(0, None, LeaderAndEpoch(1, 1)))
    with pytest.raises(ValueError, match=r"^seek offset must not be negative: -1$"):
        c.seek_position(TP, FetchPosition(-1, None, LeaderAndEpoch(1, 1)))
    with pytest.raises(ValueError, match="is not assigned"):
        c.seek_position(TopicPartition("other", 0), FetchPosition(0))


@pytest.mark.parametrize(
    "protocol, validate, expected",
    [("kip-320", True, FetchState.AWAIT_VALIDATION), ("kip-320", False, FetchState.FETCHING), ("pre-kip-320", True, FetchState.FETCHING)],
)
def test_seek_position_validates_only_when_asked_and_under_kip_320(protocol, validate, expected):
    c = consumer(protocol=protocol)
    position = FetchPosition(4, 1, LeaderAndEpoch(1, 1))
    c.seek_position(TP, position, validate=validate)
    assert (c.state_of(TP), c.position(TP)) == (expected, position)


def test_seek_position_discards_the_buffered_records():
    _world, c = buffered()
    c.seek_position(TP, FetchPosition(0, None, LeaderAndEpoch(1, 1)))  # the buffered fetch's own position
    assert c.poll(0).count() == 0


def test_validate_position_re_points_at_the_given_leader_and_awaits_validation():
    world, c = World(), consumer("earliest")
    world.run(c, 0)
    c.poll(0)
    assert c.position(TP).offset_epoch == 1
    with pytest.raises(ValueError, match="is not assigned"):
        c.validate_position(TopicPartition("other", 0), LeaderAndEpoch(2, 2))
    assert c.validate_position(TP, LeaderAndEpoch(2, 2)) is True
    assert c.position(TP).current_leader == LeaderAndEpoch(2, 2) and c.awaiting_validation(TP)


def test_validate_position_defaults_to_the_metadata_leader():
    world, c = World(), consumer("earliest")
    world.run(c, 0)
    c.poll(0)
    assert c.validate_position(TP) is False  # the metadata still names the position's own leader
    assert c.state_of(TP) == FetchState.FETCHING


def test_seek_to_end_resets_to_latest_and_discards_the_buffered_records():
    world, c = buffered()
    c.seek_to_end(TP)
    assert c.poll(0).count() == 0 and c.awaiting_reset(TP)
    [(node, request)] = [(n, r) for n, r in c.poll_requests(0) if isinstance(r, ListOffsetsRequest)]
    assert request.partitions[0].timestamp == LATEST_TIMESTAMP
    c.on_response(node, request, world.answer(node, request), 0)
    assert c.position(TP).offset == 6 and [(r.policy, r.reason) for r in c.resets][-1] == ("latest", "no_position")
    # Nothing of the old position is left to hand out, so it fetches from the new one at once.
    [fetch] = [r for _, r in c.poll_requests(0) if isinstance(r, FetchRequest)]
    assert fetch.partitions[0].fetch_offset == 6


def test_update_api_versions_spares_the_handshake():
    c = consumer("earliest")
    c.update_api_versions(1, BROKER_API_VERSIONS)
    world = World()
    sent = []
    for _ in range(4):
        for node, request in c.poll_requests(0):
            sent.append(request)
            c.on_response(node, request, world.answer(node, request), 0)
    assert not any(isinstance(r, ApiVersionsRequest) for r in sent)
    assert any(isinstance(r, FetchRequest) for r in sent)


# --- a lost ListOffsets (reset or offsets_for_times) ---------------------------------------------------
def test_a_lost_reset_list_offsets_is_retried_after_the_backoff_with_a_metadata_refresh():
    world, c = World(), consumer("earliest")
    [(node, request, _)] = world.run(c, 0, hold=is_list_offsets)
    assert not c.metadata.update_requested
    c.on_request_failed(node, request, 50)
    assert c.metadata.update_requested
    assert ListOffsetsRequest not in kinds(c.poll_requests(50 + BACKOFF - 1))
    assert ListOffsetsRequest in kinds(c.poll_requests(50 + BACKOFF))


def test_a_lost_offsets_for_times_request_is_retried_after_the_backoff():
    world, c = World(), consumer("earliest")
    world.run(c, 0)
    lookup = c.offsets_for_times({TP: 1_000}, 0)
    [(node, request)] = [(n, r) for n, r in c.poll_requests(0) if isinstance(r, ListOffsetsRequest)]
    c.on_request_failed(node, request, 50)
    assert not lookup.done and c.metadata.update_requested
    assert ListOffsetsRequest not in kinds(c.poll_requests(50 + BACKOFF - 1))
    [(node, again)] = [(n, r) for n, r in c.poll_requests(50 + BACKOFF) if isinstance(r, ListOffsetsRequest)]
    c.on_response(node, again, world.answer(node, again), 50 + BACKOFF)
    assert lookup.done and lookup.result[TP].offset == 0


@pytest.mark.parametrize("seek", ["seek_to_end", "seek_to_beginning"])
def test_a_seek_to_either_end_never_hands_out_records_buffered_before_it(seek):
    # The end can be the very position the buffer was fetched for (here the leader answers 0: its
    # log lost the records meanwhile): what was buffered must still not be handed out.
    _world, c = buffered()
    getattr(c, seek)(TP)
    [(node, request)] = [(n, r) for n, r in c.poll_requests(0) if isinstance(r, ListOffsetsRequest)]
    answer = ListOffsetsResponse((ListOffsetsPartitionResponse(TP.topic, TP.partition, Errors.NONE, -1, 0, 1),))
    c.on_response(node, request, answer, 0)
    assert c.position(TP).offset == 0
    assert c.poll(0).count() == 0


def lookup_request(c: Consumer, now_ms: int):
    [(node, request)] = [(n, r) for n, r in c.poll_requests(now_ms) if isinstance(r, ListOffsetsRequest)]
    return node, request


def test_offsets_for_times_answers_offset_zero_and_sends_one_request_at_a_time():
    world, c = World(), consumer("earliest")
    world.run(c, 0)
    lookup = c.offsets_for_times({TP: 0}, 0)
    node, request = lookup_request(c, 0)
    assert ListOffsetsRequest not in kinds(c.poll_requests(1_000))  # in flight: not sent again
    c.on_response(node, request, world.answer(node, request), 1_000)
    assert lookup.result[TP] == OffsetAndTimestamp(0, 1_000, 0)


@pytest.mark.parametrize("error, refresh", [(Errors.NOT_LEADER_OR_FOLLOWER, True), (Errors.UNKNOWN_LEADER_EPOCH, False)])
def test_an_offsets_for_times_error_is_retried_after_the_backoff(error, refresh):
    world, c = World(), consumer("earliest")
    world.run(c, 0)
    lookup = c.offsets_for_times({TP: 0}, 0)
    node, request = lookup_request(c, 0)
    c.on_response(node, request, ListOffsetsResponse((ListOffsetsPartitionResponse(TP.topic, TP.partition, error),)), 10)
    assert not lookup.done and c.metadata.update_requested == refresh
    assert ListOffsetsRequest not in kinds(c.poll_requests(10 + BACKOFF - 1))
    node, request = lookup_request(c, 10 + BACKOFF)
    c.on_response(node, request, world.answer(node, request), 10 + BACKOFF)
    assert lookup.result[TP].offset == 0


def test_offsets_for_times_takes_timestamp_zero_and_refuses_a_negative_one():
    c = consumer()
    assert not c.offsets_for_times({TP: 0}, 0).done
    with pytest.raises(ValueError, match=r"^invalid negative timestamp -1 for t-0$"):
        c.offsets_for_times({TP: -1}, 0)


def test_unassigning_a_partition_that_is_not_assigned_is_a_no_op():
    c = consumer()
    c.unassign([TopicPartition("other", 0)])
    assert list(c.assignment) == [TP]


def test_a_seek_forgets_an_out_of_range_answer_even_to_the_same_offset():
    world, c = World(), consumer("none")
    c.seek(TP, 50)  # past the leader's end (6)
    world.run(c, 0)
    with pytest.raises(OffsetOutOfRangeError):
        c.poll(0)
    c.seek(TP, 50)  # the application decides to try again from there
    assert c.poll(0).count() == 0
    [fetch] = [r for _, r in c.poll_requests(0) if isinstance(r, FetchRequest)]
    assert fetch.partitions[0].fetch_offset == 50


def test_seek_refuses_a_negative_offset_by_name():
    with pytest.raises(ValueError, match=r"^seek offset must not be negative: -3$"):
        consumer().seek(TP, -3)


def test_seek_to_beginning_is_reported_as_a_reset_without_a_position():
    world, c = World(), consumer("latest")
    world.run(c, 0)
    c.seek_to_beginning(TP)
    world.run(c, 0)
    assert [(r.policy, r.reason, r.to_offset) for r in c.resets] == [("latest", "no_position", 6), ("earliest", "no_position", 0)]


def test_validate_position_by_default_follows_a_new_leader_in_the_metadata():
    world, c = World(), consumer("earliest")
    world.run(c, 0)
    c.poll(0)
    world.leader, world.epoch = 2, 2
    world.add_leader(2, [(0, 2), (1, 4)], 2)
    c.metadata.update(world.metadata(), 10)  # the metadata moved on; the consumer was not told
    assert c.validate_position(TP) is True
    assert c.position(TP).current_leader == LeaderAndEpoch(2, 2) and c.awaiting_validation(TP)


def test_validate_position_does_not_validate_against_a_leader_without_offset_for_leader_epoch_v3():
    world, c = World(), consumer("earliest")
    world.run(c, 0)
    c.poll(0)
    old = NodeApiVersions([ApiVersionRange(ApiKey.FETCH, 0, 12), ApiVersionRange(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 2)])
    c.update_api_versions(2, old)
    assert c.validate_position(TP, LeaderAndEpoch(2, 2)) is False
    assert c.state_of(TP) == FetchState.FETCHING and c.position(TP).current_leader == LeaderAndEpoch(2, 2)
    c.update_api_versions(3, BROKER_API_VERSIONS)
    assert c.validate_position(TP, LeaderAndEpoch(3, 3)) is True

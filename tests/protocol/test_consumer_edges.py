"""Consumer behaviours pinned through the public API (`Consumer` driven by real sans-IO brokers): errors
raised again only after a back-off, stale ListOffsets answers, the epoch of offsets_for_times, lost
OffsetFetch and Metadata requests, and seeks over buffered records."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from protocol_support import CONTROLLER, TP, recs, state

from epochguard import Consumer, PartitionLog, ReplicaManager
from epochguard.consumer import FetchState
from epochguard.coordinator import GroupCoordinator
from epochguard.errors import Errors, LogTruncationError, NoOffsetForPartitionError
from epochguard.messages import (
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
from epochguard.types import OffsetAndTimestamp

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
    world, c = World(), consumer("earliest", group_id="g", coordinator_id=COORD)
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
    world, c = buffered()
    c.seek(TP, 3)
    [fetch] = [r for _, r in c.poll_requests(0) if isinstance(r, FetchRequest)]
    assert fetch.partitions[0].fetch_offset == 3

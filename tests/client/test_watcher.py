"""The watcher's core, message by message, against a scripted cluster that answers as Kafka's brokers do.

`Cluster` keeps one log per replica (batches with their leader epochs, the epoch cache from `_core`) and
answers the watcher's requests by Kafka's rules (SPEC (b), (c), (g)): fencing on the current leader epoch,
`endOffsetFor` for OffsetsForLeaderEpoch, LATEST = the high watermark with the *current* leader epoch and
OFFSET_NOT_AVAILABLE while the high watermark is below the epoch's start (KIP-207), Fetch up to the high
watermark. Each test turns red under a plausible wrong rule named in its docstring.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from epochguard import _core
from epochguard.client.watcher import GroupAffected, Stage, Truncation, Watcher, WatchWarning, name_matcher
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    Coordinator,
    EpochEndOffset,
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchPartitionResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    Request,
    Response,
)
from epochguard.types import TopicPartition

TP = TopicPartition("events", 0)


@dataclass
class Replica:
    batches: list[tuple[int, int, int]] = field(default_factory=list)  # (base offset, count, epoch)
    cache: _core.LeaderEpochCache = field(default_factory=_core.LeaderEpochCache)

    @property
    def leo(self) -> int:
        return self.batches[-1][0] + self.batches[-1][1] if self.batches else 0

    def append(self, count: int, epoch: int) -> None:
        self.cache.assign(epoch, self.leo)
        self.batches.append((self.leo, count, epoch))

    def truncate(self, offset: int) -> None:
        self.batches = [b for b in self.batches if b[0] < offset]
        assert not self.batches or self.batches[-1][0] + self.batches[-1][1] <= offset, "mid-batch"
        self.cache.truncate_from_end(offset)


@dataclass
class Part:
    replicas: dict[int, Replica]
    leader: int
    epoch: int = 0
    hw: int = 0
    epoch_start: int = 0


class Cluster:
    """Brokers 1-3, one partition each of the topics given; answers requests by Kafka's rules."""

    def __init__(self, topics: dict[str, int] | None = None) -> None:
        self.parts: dict[TopicPartition, Part] = {}
        for topic, n in (topics or {"events": 1}).items():
            for i in range(n):
                reps = {b: Replica() for b in (1, 2, 3)}
                for r in reps.values():
                    r.cache.assign(0, 0)
                self.parts[TopicPartition(topic, i)] = Part(reps, leader=1)
        self.down: set[int] = set()
        self.short_answers = 0  # answer the next OffsetsForLeaderEpoch validations 5 offsets short
        self.committed: dict[str, dict[TopicPartition, tuple[int, int]]] = {}
        self.active: set[str] = set()  # groups with members
        self.requests: list[tuple[int, Request]] = []

    # --- the scenario's moves -------------------------------------------------------------------------
    def produce(self, count: int, tp: TopicPartition = TP, replicate: tuple[int, ...] = (1, 2, 3)) -> None:
        p = self.parts[tp]
        leader = p.replicas[p.leader]
        base = leader.leo
        leader.append(count, p.epoch)
        for b in replicate:
            if b != p.leader:
                r = p.replicas[b]
                assert r.leo == base, "replica behind"
                r.append(count, p.epoch)
        if set(replicate) >= {1, 2, 3} - self.down:
            p.hw = leader.leo

    def elect(self, broker: int, tp: TopicPartition = TP, *, hw: int | None = None) -> None:
        """Leadership to `broker` in the next epoch (`Partition.makeLeader`: the epoch at its log end);
        the high watermark becomes `hw` (default: its log end, as with the ISR shrunk to itself)."""
        p = self.parts[tp]
        p.epoch += 1
        p.leader = broker
        new = p.replicas[broker]
        new.cache.assign(p.epoch, new.leo)
        p.epoch_start = new.leo
        p.hw = new.leo if hw is None else hw
        for b, r in p.replicas.items():  # followers truncate to the new leader (KIP-101)
            if b != broker and b not in self.down:
                point = _core.truncation_offset(r.cache, r.leo, *new.cache.end_offset_for(r.cache.latest_epoch, new.leo))
                if point is not None:
                    r.truncate(min(point[0], r.leo))

    def behind(self, common: int, tail: int) -> None:
        """`common` records on all three, then broker 2 stops and `tail` more are committed on 1 and 3."""
        self.produce(common)
        self.down.add(2)
        self.produce(tail, replicate=(1, 3))

    def unclean_to_2(self) -> None:
        """Brokers 1 and 3 stop; broker 2, behind, is elected unclean."""
        self.down = {1, 3}
        self.elect(2)

    # --- answers ----------------------------------------------------------------------------------------
    def answer(self, node: int, request: Request) -> Response | None:
        self.requests.append((node, request))
        if node in self.down:
            return None
        handler = getattr(self, f"_{type(request).__name__}", None)
        if handler is None:
            raise AssertionError(f"unexpected request {request}")
        response: Response = handler(node, request)
        return response

    def _MetadataRequest(self, node: int, request: MetadataRequest) -> MetadataResponse:
        return MetadataResponse(
            tuple(
                MetadataResponseTopic(topic, tuple(
                    MetadataResponsePartition(tp.partition, p.leader, p.epoch)
                    for tp, p in self.parts.items() if tp.topic == topic
                ))
                for topic in sorted({tp.topic for tp in self.parts})
            ),
            brokers=tuple(MetadataResponseBroker(b) for b in (1, 2, 3) if b not in self.down),
        )

    def _served(self, node: int, request: Any, out: list, refused: Any) -> Iterator[tuple[Any, Part]]:
        """The partitions of a request this broker serves (leader, fencing as SPEC (b)); the others are
        answered with `refused(topic, partition, error)` into `out`."""
        for q in request.partitions:
            p = self.parts[q.tp]
            error = self._check(node, p, q.current_leader_epoch)
            if error != Errors.NONE:
                out.append(refused(q.topic, q.partition_index, error))
            else:
                yield q, p

    def _ListOffsetsRequest(self, node: int, request: ListOffsetsRequest) -> ListOffsetsResponse:
        out: list = []
        for q, p in self._served(node, request, out, ListOffsetsPartitionResponse):
            if p.epoch_start > p.hw:  # KIP-207: the new leader's high watermark lags
                out.append(ListOffsetsPartitionResponse(q.topic, q.partition_index, Errors.OFFSET_NOT_AVAILABLE))
            else:  # LATEST: the high watermark, with the *current* leader epoch
                out.append(ListOffsetsPartitionResponse(q.topic, q.partition_index, offset=p.hw, leader_epoch=p.epoch))
        return ListOffsetsResponse(tuple(out))

    def _OffsetsForLeaderEpochRequest(self, node: int, request: OffsetsForLeaderEpochRequest) -> Response:
        out: list = []
        for q, p in self._served(node, request, out, EpochEndOffset):
            leader = p.replicas[p.leader]
            epoch, end = leader.cache.end_offset_for(q.leader_epoch, leader.leo)
            if self.short_answers:
                self.short_answers -= 1
                end -= 5
            out.append(EpochEndOffset(q.topic, q.partition_index, leader_epoch=epoch, end_offset=end))
        return OffsetsForLeaderEpochResponse(tuple(out))

    def _FetchRequest(self, node: int, request: FetchRequest) -> FetchResponse:
        out: list = []
        for q, p in self._served(node, request, out, FetchPartitionData):
            data = b"".join(
                _core.encode_batch([(None, b"v")] * count, base_offset=base, partition_leader_epoch=epoch)
                for base, count, epoch in p.replicas[p.leader].batches
                if base + count > q.fetch_offset and base < p.hw
            )
            out.append(FetchPartitionData(q.topic, q.partition_index, high_watermark=p.hw, records=data))
        return FetchResponse(tuple(out))

    def _FindCoordinatorRequest(self, node: int, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
        return FindCoordinatorResponse((Coordinator(request.key, 2, "localhost", 9092),))

    def _OffsetCommitRequest(self, node: int, request: OffsetCommitRequest) -> OffsetCommitResponse:
        """An admin commit (generation -1, no member) is taken only from an empty group, as Kafka's
        `ClassicGroup.validateOffsetCommit` does; a group with members answers UNKNOWN_MEMBER_ID."""
        assert request.generation_id_or_member_epoch == -1 and request.member_id == ""
        error = Errors.UNKNOWN_MEMBER_ID if request.group_id in self.active else Errors.NONE
        if error == Errors.NONE:
            for q in request.partitions:
                self.committed.setdefault(request.group_id, {})[q.tp] = (q.committed_offset, q.committed_leader_epoch)
        return OffsetCommitResponse(tuple(
            OffsetCommitPartitionResponse(q.topic, q.partition_index, error) for q in request.partitions))

    def _OffsetFetchRequest(self, node: int, request: OffsetFetchRequest) -> OffsetFetchResponse:
        group = self.committed.get(request.group_id, {})
        return OffsetFetchResponse(tuple(
            OffsetFetchPartitionResponse(tp.topic, tp.partition, *group.get(tp, (-1, -1)))
            for tp in request.partitions or ()
        ))

    def _check(self, node: int, p: Part, current: int) -> Errors:
        if node != p.leader:
            return Errors.NOT_LEADER_OR_FOLLOWER
        if current >= 0 and current < p.epoch:
            return Errors.FENCED_LEADER_EPOCH
        if current > p.epoch:
            return Errors.UNKNOWN_LEADER_EPOCH
        return Errors.NONE


def run_round(w: Watcher, cluster: Cluster) -> list:
    """One whole round, at the time it is due: send everything the watcher asks until it has nothing left
    this round; the events found."""
    start = w.round
    now_ms = w.next_deadline_ms() or 0
    for _ in range(50):
        requests = w.poll(now_ms)
        if not requests and w.round > start and not w._in_flight:
            return w.take_events()
        for node, request in requests:
            response = cluster.answer(node, request)
            if response is None:
                w.on_failure(request, now_ms)
            else:
                w.on_response(node, request, response, now_ms)
        now_ms += 1
    raise AssertionError("the round never ended")


def watching(cluster: Cluster, **kw) -> Watcher:
    w = Watcher(interval_ms=1000, bootstrap_nodes=(1, 2, 3), **kw)
    assert run_round(w, cluster) == []
    return w


def truncations(events: list) -> list[tuple[int, int, int, int]]:
    return [(e.lost_from, e.lost_until, e.old_epoch, e.new_epoch) for e in events if isinstance(e, Truncation)]


# --- positions ----------------------------------------------------------------------------------------
def test_the_position_is_the_high_watermark_and_the_epoch_of_the_record_below_it() -> None:
    """Wrong rule: taking ListOffsets' answer epoch (the *current* leader epoch) as the record's."""
    c = Cluster()
    c.produce(10)
    c.elect(2)  # a clean election: epoch 1 starts at 10, nothing written in it yet
    w = watching(c)
    p = w.partitions[TP]
    assert (p.hw, p.hw_epoch, p.position_epoch, p.stage) == (10, 0, 1, Stage.READY)
    c.produce(5)
    run_round(w, c)
    assert (p.hw, p.hw_epoch) == (15, 1)


def test_an_unclean_election_loses_exactly_the_committed_records_above_the_divergence() -> None:
    """Wrong rules: counting the uncommitted tail (above the high watermark) as lost; reporting the
    loss twice; missing it when the new leader wrote nothing yet."""
    c = Cluster()
    c.behind(10, 20)  # committed [10, 30) on 1 and 3; broker 2 is behind at 10
    c.produce(7, replicate=(1,))  # acks=1 tail [30, 37): never committed
    c.parts[TP].hw = 30
    w = watching(c)
    assert w.partitions[TP].hw == 30
    c.down = {1, 3}
    c.elect(2)  # unclean: broker 2 holds [0, 10)
    events = run_round(w, c)
    assert truncations(events) == [(10, 30, 0, 1)]
    t = events[0]
    assert t.lost_count == 20 and t.replaced_by_epoch == -1  # nothing at 10 on the new leader yet
    assert run_round(w, c) == []  # reported once
    c.produce(4, replicate=(2,))
    assert run_round(w, c) == []
    assert (w.partitions[TP].hw, w.partitions[TP].hw_epoch) == (14, 1)


def test_replacements_written_before_the_watcher_looks_confirm_the_loss() -> None:
    c = Cluster()
    c.behind(10, 20)
    w = watching(c)
    c.unclean_to_2()
    c.produce(8, replicate=(2,))  # replacements [10, 18) in epoch 1
    events = run_round(w, c)
    assert truncations(events) == [(10, 30, 0, 1)]
    assert events[0].replaced_by_epoch == 1


def test_a_clean_leader_change_gives_no_event_and_keeps_the_position() -> None:
    """Wrong rule: a different epoch alone taken for a truncation."""
    c = Cluster()
    c.produce(10)
    w = watching(c)
    c.elect(2)
    c.produce(3)
    assert run_round(w, c) == []
    c.elect(3)  # controlled shutdown / preferred election again
    c.elect(1)
    assert run_round(w, c) == []
    assert (w.partitions[TP].hw, w.partitions[TP].position_epoch) == (13, 3)


def test_a_short_answer_is_not_alarmed_and_is_validated_again() -> None:
    """Wrong rule: alarming on the OffsetsForLeaderEpoch answer alone (the `false-divergence` race)."""
    c = Cluster()
    c.produce(10)
    c.produce(10)
    w = watching(c)
    c.elect(2)
    c.short_answers = 1
    assert run_round(w, c) == []
    confirm = [r for _, r in c.requests if isinstance(r, FetchRequest)]
    assert [q.fetch_offset for r in confirm for q in r.partitions] == [15]  # it looked before it spoke
    assert w.partitions[TP].stage is Stage.VALIDATING
    assert run_round(w, c) == []
    assert w.partitions[TP].stage is Stage.READY and w.partitions[TP].hw == 20


def test_consecutive_unclean_elections_are_two_truncations() -> None:
    """Wrong rule: keeping the position of before the first truncation (the second is then missed or
    mis-sized)."""
    c = Cluster()
    c.behind(10, 10)
    w = watching(c)
    c.down = {1, 2}
    c.elect(3)  # clean for this loss: 3 has [0, 20)
    c.produce(5, replicate=(3,))  # committed on 3 alone: [20, 25)
    assert run_round(w, c) == []
    assert w.partitions[TP].hw == 25
    c.down = {1, 3}
    c.elect(2)  # 2 has [0, 10): loses [10, 25)
    assert truncations(run_round(w, c)) == [(10, 25, 1, 2)]
    c.produce(3, replicate=(2,))
    assert run_round(w, c) == []
    c.down = {2, 3}
    c.parts[TP].replicas[1].truncate(10)
    c.elect(1)  # 1 has [0, 10): loses [10, 13) of epoch 2
    assert truncations(run_round(w, c)) == [(10, 13, 2, 3)]


@pytest.mark.parametrize("restarted", [False, True], ids=["running", "restarted"])
def test_a_second_unclean_leader_that_never_had_the_epoch_is_a_truncation_where_kip_320_sees_none(
        restarted: bool) -> None:
    """Kafka's `consecutive-unclean` (tests/real_kafka/test_watch_kafka.py runs it on Kafka 4.4): broker 3
    holds more of epoch 0 than broker 2; 2 is elected uncleanly and writes [10, 13) in epoch 1; then 3 is
    elected uncleanly. Asked where epoch 1 ends, 3 answers the end of its epoch 0 (20), above the position
    (13): a KIP-320 consumer finds nothing, yet every record of epoch 1 is gone (3 never had that epoch).
    Wrong rules: the consumer's answer alone (the second loss missed); the confirmation's "an epoch above
    the shared one at D" (3's batch at 10 is in epoch 0, the shared epoch: validated again forever)."""
    c = Cluster()
    c.produce(10)
    c.down.add(2)
    c.produce(10, replicate=(1, 3))  # [10, 20) on 1 and 3
    c.down.add(3)
    c.produce(5, replicate=(1,))  # [20, 25) on 1 alone, committed (ISR [1])
    w = watching(c)
    c.down = {1, 3}
    c.elect(2)  # 2 holds [0, 10)
    assert truncations(run_round(w, c)) == [(10, 25, 0, 1)]
    c.produce(3, replicate=(2,))  # [10, 13) in epoch 1
    assert run_round(w, c) == []
    assert (w.partitions[TP].hw, w.partitions[TP].hw_epoch) == (13, 1)
    if restarted:  # a cron job: the state file must say where epoch 1 starts (wrong: only the position)
        saved, w = w.positions(), Watcher(interval_ms=1000, bootstrap_nodes=(3,))
        assert saved["partitions"] == [["events", 0, 13, 1, 1, 10]]  # "lso": the truncated partition is watched
        w.restore(saved)
    c.down = {1, 2}
    c.elect(3)  # 3 holds [0, 20) of epoch 0, never had epoch 1
    events = run_round(w, c)
    assert truncations(events) == [(10, 13, 1, 2)]
    assert (events[0].divergent_epoch, events[0].replaced_by_epoch) == (0, 0)
    assert run_round(w, c) == []  # once
    assert (w.partitions[TP].hw, w.partitions[TP].hw_epoch) == (20, 0)


def test_two_epochs_between_rounds_validate_against_the_newest_leader() -> None:
    c = Cluster()
    c.behind(10, 5)
    w = watching(c)
    c.elect(3)
    c.down = {1, 3}
    c.elect(2)  # epochs 1 and 2 between two rounds; 2 lacks [10, 15)
    assert truncations(run_round(w, c)) == [(10, 15, 0, 2)]


def test_a_leader_that_goes_silent_costs_the_round_not_the_watcher() -> None:
    c = Cluster()
    c.behind(10, 5)
    w = watching(c)
    c.unclean_to_2()
    c.down = {1, 2, 3}  # the new leader (and everything else) is unreachable
    assert run_round(w, c) == []
    c.down = {1, 3}
    assert truncations(run_round(w, c)) == [(10, 15, 0, 1)]


@pytest.mark.parametrize("error", [Errors.NOT_LEADER_OR_FOLLOWER, Errors.FENCED_LEADER_EPOCH, Errors.UNKNOWN_LEADER_EPOCH])
def test_retriable_errors_retry_the_validation_next_round(error: Errors) -> None:
    """Wrong rule: a NOT_LEADER / FENCED / UNKNOWN_LEADER_EPOCH answer taken as the position's verdict."""
    c = Cluster()
    c.behind(10, 5)
    w = watching(c)
    c.unclean_to_2()
    real = c.answer

    def failing(node: int, request: Request) -> Response | None:
        if isinstance(request, OffsetsForLeaderEpochRequest):
            return OffsetsForLeaderEpochResponse(tuple(EpochEndOffset(q.topic, q.partition_index, error) for q in request.partitions))
        return real(node, request)

    c.answer = failing  # type: ignore[method-assign]
    assert run_round(w, c) == []
    assert w.partitions[TP].stage is Stage.VALIDATING and w.partitions[TP].hw == 15
    c.answer = real  # type: ignore[method-assign]
    assert truncations(run_round(w, c)) == [(10, 15, 0, 1)]


def test_stale_metadata_does_not_move_a_position_back() -> None:
    """Wrong rule: accepting a lower leader epoch from a broker behind (KIP-232)."""
    c = Cluster()
    c.produce(10)
    c.elect(2)
    w = watching(c)
    old = c.answer

    def stale(node: int, request: Request) -> Response | None:
        if isinstance(request, MetadataRequest):
            return MetadataResponse((MetadataResponseTopic("events", (MetadataResponsePartition(0, 1, 0),)),))
        return old(node, request)

    c.answer = stale  # type: ignore[method-assign]
    assert run_round(w, c) == []
    assert (w.partitions[TP].leader, w.partitions[TP].leader_epoch) == (2, 1)


def test_a_restarted_watcher_reports_the_loss_from_its_state() -> None:
    """The daemon stopped, the election happened, the next run (cron) still sees the loss, once."""
    c = Cluster()
    c.behind(10, 5)
    saved = watching(c).positions()
    c.unclean_to_2()
    w = Watcher(interval_ms=1000, bootstrap_nodes=(2,))
    w.restore(saved)
    assert truncations(run_round(w, c)) == [(10, 15, 0, 1)]
    w2 = Watcher(interval_ms=1000, bootstrap_nodes=(2,))
    w2.restore(w.positions())
    assert run_round(w2, c) == []


def test_groups_past_the_divergence_are_named_with_phantoms_and_skips() -> None:
    """Wrong rule: a group committed exactly at the divergence point counted as affected."""
    c = Cluster()
    c.behind(10, 10)
    c.committed = {"past": {TP: (17, 0)}, "at": {TP: (10, 0)}, "below": {TP: (4, 0)}}
    w = watching(c, groups=["past", "at", "below"])
    c.unclean_to_2()
    events = run_round(w, c)
    assert truncations(events) == [(10, 20, 0, 1)]
    affected = [e for e in events if isinstance(e, GroupAffected)]
    assert [(e.group, e.committed, e.phantoms, e.skips) for e in affected] == [("past", 17, (10, 17), (10, 17))]


def test_rewind_commits_the_divergence_point_for_an_empty_group_and_names_the_command_for_an_active_one() -> None:
    """Wrong rules: rewinding without being asked; committing the old committed offset's epoch (or none);
    calling an active group rewound."""
    c = Cluster()
    c.behind(10, 10)
    c.committed = {"idle": {TP: (17, 0)}, "busy": {TP: (19, 0)}}
    c.active = {"busy"}
    w = watching(c, groups=["idle", "busy"], rewind_groups=True)
    c.unclean_to_2()
    events = run_round(w, c)
    affected = {e.group: e for e in events if isinstance(e, GroupAffected)}
    assert (affected["idle"].rewound, affected["idle"].note) == (True, "")
    assert c.committed["idle"][TP] == (10, 0)  # D, with the epoch of the record at D - 1
    assert affected["busy"].rewound is False and c.committed["busy"][TP] == (19, 0)
    assert "epochguard watch --rewind-groups --once --group busy" in affected["busy"].note
    assert affected["busy"].phantoms == (10, 19)
    assert [u[:4] for u in w.positions()["unrepaired"]] == [["busy", "events", 0, 19]]  # for a later run
    # Without --rewind-groups the watcher writes nothing.
    c2 = Cluster()
    c2.behind(10, 10)
    c2.committed = {"idle": {TP: (17, 0)}}
    w2 = watching(c2, groups=["idle"])
    c2.unclean_to_2()
    assert [e.rewound for e in run_round(w2, c2) if isinstance(e, GroupAffected)] == [False]
    assert c2.committed["idle"][TP] == (17, 0)
    assert not any(isinstance(r, OffsetCommitRequest) for _, r in c2.requests)


def test_a_later_rewind_run_rewinds_from_the_state_only_groups_that_have_not_moved() -> None:
    """The command an affected group's event names, run later with the state file. Wrong rules: forgetting
    the affected groups between runs (the later run finds nothing to rewind); rewinding a group that resumed
    since (re-delivering what it read after); rewinding groups the run was not asked for; rewinding an
    active group; committing D without the epoch of the record before it."""
    c = Cluster()
    c.behind(10, 10)
    c.committed = {"busy": {TP: (19, 0)}, "moved": {TP: (18, 0)}, "idle": {TP: (17, 0)}}
    c.active = {"busy"}
    w = watching(c, groups=["busy", "moved", "idle"])  # not asked to rewind
    c.unclean_to_2()
    assert sorted(e.group for e in run_round(w, c) if isinstance(e, GroupAffected)) == ["busy", "idle", "moved"]
    assert sorted(u[:4] for u in w.positions()["unrepaired"]) == [
        ["busy", "events", 0, 19], ["idle", "events", 0, 17], ["moved", "events", 0, 18]]
    c.committed["moved"][TP] = (25, 1)  # resumed: it skipped [10, 18) and read on

    w2 = Watcher(interval_ms=1000, bootstrap_nodes=(1, 2, 3), groups=["busy", "mov*"], rewind_groups=True)
    w2.restore(w.positions())
    events = run_round(w2, c)
    assert [(e.group, e.rewound) for e in events if isinstance(e, GroupAffected)] == [("busy", False)]
    warnings = [e.message for e in events if isinstance(e, WatchWarning)]
    assert len(warnings) == 1 and "group moved" in warnings[0] and "committed 25 now" in warnings[0]
    assert c.committed == {"busy": {TP: (19, 0)}, "moved": {TP: (25, 1)}, "idle": {TP: (17, 0)}}
    assert sorted(u[0] for u in w2.positions()["unrepaired"]) == ["busy", "idle"]

    c.active = set()  # the busy group's members stopped
    w3 = Watcher(interval_ms=1000, bootstrap_nodes=(1, 2, 3), groups=None, rewind_groups=True)
    w3.restore(w2.positions())
    events = run_round(w3, c)
    assert sorted((e.group, e.rewound) for e in events if isinstance(e, GroupAffected)) == [
        ("busy", True), ("idle", True)]
    assert c.committed == {"busy": {TP: (10, 0)}, "moved": {TP: (25, 1)}, "idle": {TP: (10, 0)}}
    assert w3.positions().get("unrepaired") is None
    assert run_round(w3, c) == []  # nothing left to do


def test_the_watch_follows_only_the_topics_asked() -> None:
    c = Cluster({"events": 2, "orders-eu": 1, "orders-us": 1})
    w = watching(c, topics=["orders-*"])
    assert sorted(w.partitions) == [TopicPartition("orders-eu", 0), TopicPartition("orders-us", 0)]
    assert name_matcher(None)("x") and not name_matcher(["a"])("ab")


def test_one_request_per_broker_per_round() -> None:
    c = Cluster({"a": 6})
    for i in range(6):
        tp = TopicPartition("a", i)
        c.produce(3, tp)
        c.elect(1 + i % 3, tp)
    w = watching(c)
    c.requests.clear()
    run_round(w, c)
    kinds = [(node, type(r).__name__) for node, r in c.requests]
    assert sorted(kinds) == [(1, "ListOffsetsRequest"), (1, "MetadataRequest"), (2, "ListOffsetsRequest"),
                             (3, "ListOffsetsRequest")]


def test_an_empty_cache_answer_is_a_warning_not_a_loss() -> None:
    c = Cluster()
    c.produce(10)
    w = watching(c)
    c.elect(2)
    old = c.answer

    def undefined(node: int, request: Request) -> Response | None:
        if isinstance(request, OffsetsForLeaderEpochRequest):
            return OffsetsForLeaderEpochResponse(tuple(EpochEndOffset(q.topic, q.partition_index) for q in request.partitions))
        return old(node, request)

    c.answer = undefined  # type: ignore[method-assign]
    events = run_round(w, c)
    assert [type(e) for e in events] == [WatchWarning]

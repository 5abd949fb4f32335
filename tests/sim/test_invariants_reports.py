"""What the invariant checker reports, field by field (who, which partition, the message, the trace, the
timeline event), and the bookkeeping behind its excuses: truncations that cover a redelivery, the
once-per-incident reports, ListOffsets and metadata histories across client restarts."""

from __future__ import annotations

import pytest

from epochguard.sim import events as ev
from epochguard.sim import invariants as inv
from epochguard.sim.cluster import Cluster, ClusterConfig
from epochguard.sim.controller import Election
from epochguard.types import ConsumerRecord, FetchPosition, OffsetResetEvent, TopicPartition, TruncationEvent

from .checker_support import TP, record


def _real(cluster: Cluster, broker: int, offset: int) -> ConsumerRecord:
    epoch, key, value = cluster.log(broker, TP).records_between(offset, offset + 1)[offset]
    return ConsumerRecord(TP.topic, TP.partition, offset, 0, 0, key, value, (), epoch)


def _truncation(divergent: int | None) -> TruncationEvent:
    return TruncationEvent(TP, FetchPosition(divergent or 0, 0), divergent, 0, 1, "rewound", 0)


def _forge(cluster: Cluster, broker: int, offset: int) -> int:
    """Replace broker's log from `offset` (or the start of its batch) on with one record no consumer
    delivered; returns the forged record's offset."""
    log = cluster.log(broker, TP)
    log.truncate_to(offset)
    return log.append_as_leader([(b"k", b"forged")], 0).first_offset


# --- the report itself ------------------------------------------------------------------------------
def test_a_violation_carries_the_time_the_trace_and_a_timeline_event(cluster: Cluster) -> None:
    checker, timeline = cluster.checker, cluster.timeline
    for i in range(inv.TRACE_LENGTH + 5):
        timeline.record("note", "test", f"n{i}")
    checker.on_metadata_accepted("c", TP, 2, 2)
    checker.on_metadata_accepted("c", TP, 1, 1)
    [v] = checker.violations
    assert (v.invariant, v.step, v.time_ms, v.node, v.partition) == (
        inv.METADATA_EPOCH_MONOTONIC, timeline.step, timeline.time_ms, "c", "events-0")
    assert len(v.trace) == inv.TRACE_LENGTH
    events = [e for e in timeline if e.kind not in ("ack", "violation")]
    assert list(v.trace) == [str(e) for e in events[-len(v.trace):]]  # the latest events, acks left out
    event = [e for e in timeline if e.kind == "violation"][-1]
    assert (event.node, event.message) == ("c", f"{inv.METADATA_EPOCH_MONOTONIC}: {v.message}")
    assert event.detail == {"invariant": inv.METADATA_EPOCH_MONOTONIC, "partition": "events-0"}


def test_a_violation_without_a_partition(cluster: Cluster) -> None:
    cluster.checker.report(inv.CONSUMER_PROGRESS, "consumer-0", None, "stuck", key=("consumer-0",))
    [v] = cluster.checker.violations
    assert v.partition is None
    event = [e for e in cluster.timeline if e.kind == "violation"][-1]
    assert event.detail == {"invariant": inv.CONSUMER_PROGRESS, "partition": None}


def test_records_show_their_value_and_epoch_even_when_not_utf8(cluster: Cluster) -> None:
    checker = cluster.checker
    checker.on_consumed("c", record(0, b"\xff\xfe", epoch=3), 1)
    checker.on_consumed("c", record(0, b"", epoch=None), 1)
    [v] = checker.violations
    assert "delivered '' at offset 0 (from broker 1), but it had delivered '\ufffd\ufffd' (epoch 3) there before" in v.message


def test_acknowledged_records_are_kept_with_their_partition_and_step(cluster: Cluster) -> None:
    cluster.timeline.step = 77
    cluster.checker.on_acked(TP, 9, b"k", b"v", 4)
    assert cluster.checker.acked[TP][-1] == inv.AckedRecord(TP, 9, b"k", b"v", 77, 4)


# --- deliveries -------------------------------------------------------------------------------------
def test_a_redelivery_with_other_contents_names_the_consumer_and_both_records(cluster: Cluster) -> None:
    checker = cluster.checker
    checker.on_consumed("c", record(0, b"first"), 1)
    checker.on_consumed("c", record(0, b"second"), 2)
    [v] = checker.violations
    assert (v.invariant, v.node, v.partition) == (inv.CONSUMER_CONTINUITY, "c", "events-0")
    assert v.message == ("delivered 'second' (epoch 0) at offset 0 (from broker 2), but it had delivered "
                         "'first' (epoch 0) there before, and no truncation was reported")


def test_a_skip_names_the_consumer_and_partition(cluster: Cluster) -> None:
    checker = cluster.checker
    checker.on_consumed("c", _real(cluster, 1, 0), 1)
    checker.on_consumed("c", _real(cluster, 1, 2), 1)
    [v] = checker.violations
    assert (v.node, v.partition) == ("c", "events-0") and v.message.startswith("skipped offsets 1..1")


def test_a_truncation_covers_only_what_was_delivered_before_it_from_its_divergent_offset(cluster: Cluster) -> None:
    checker = cluster.checker
    for o in range(5):
        checker.on_consumed("c", record(o, b"old-%d" % o), 1)
    checker.on_truncation("c", _truncation(3))
    checker.on_consumed("c", record(3, b"new-3"), 1)  # covered: at or above the divergent offset
    assert checker.violations == []
    checker.on_consumed("c", record(2, b"new-2"), 1)  # below it: not covered
    [v] = checker.violations
    assert v.message.startswith("delivered 'new-2' (epoch 0) at offset 2")


def test_a_truncation_reported_before_a_delivery_does_not_cover_it(cluster: Cluster) -> None:
    checker = cluster.checker
    checker.on_truncation("d", _truncation(None))
    checker.on_consumed("d", record(0, b"first"), 1)
    checker.on_consumed("d", record(0, b"second"), 1)
    assert [v.invariant for v in checker.violations] == [inv.CONSUMER_CONTINUITY]


# --- what a broker serves after the deliveries --------------------------------------------------------
def test_serving_a_consumer_the_checker_never_saw_checks_nothing(cluster: Cluster) -> None:
    cluster.checker.on_fetch_served("nobody", TP, 1, 5)
    assert cluster.checker.violations == []


def test_every_delivered_offset_below_the_fetch_is_compared_not_only_the_first(cluster: Cluster) -> None:
    checker = cluster.checker
    for o in range(4):
        checker.on_consumed("c", _real(cluster, 2, o), 2)
    forged = _forge(cluster, 2, 3)
    assert forged > 0  # offset 0 still matches: the check must go on to the forged one
    checker.on_fetch_served("c", TP, 2, 4)
    [v] = checker.violations
    assert (v.invariant, v.node, v.partition) == (inv.CONSUMER_CONTINUITY, "c", "events-0")
    delivered = _real(cluster, 1, forged)
    assert v.message == (f"continued at offset 4 on broker 2, whose log has 'forged' (epoch 0) at offset {forged} where the "
                         f"consumer delivered {delivered.value.decode()!r} (epoch {delivered.leader_epoch}); "
                         "no truncation was reported")


def test_a_truncation_excuses_the_offsets_it_covers_and_the_check_goes_on_past_them(cluster: Cluster) -> None:
    checker = cluster.checker
    for o in range(4):
        checker.on_consumed("c", _real(cluster, 2, o), 2)
    checker.on_truncation("c", _truncation(2))
    for o in (4, 5):
        checker.on_consumed("c", _real(cluster, 2, o), 2)
    _forge(cluster, 2, 3)  # 3 is covered by the truncation; 4 and 5 were delivered after it
    checker.on_fetch_served("c", TP, 2, 6)
    [v] = checker.violations
    assert "at offset 4 where the consumer delivered" in v.message


def test_a_divergence_kip320_cannot_see_is_noted_once(cluster: Cluster) -> None:
    checker, timeline = cluster.checker, cluster.timeline
    cluster.controller.elections.append(Election(timeline.step, TP, 2, 8, clean=False))
    checker.on_consumed("c", record(0, b"phantom", epoch=7), 1)
    checker.on_fetch_served("c", TP, 1, 1)
    checker.on_consumed("c", _real(cluster, 2, 1), 2)  # from another broker: broker 1 is checked again
    checker.on_fetch_served("c", TP, 1, 2)
    assert checker.violations == []
    [note] = [e for e in timeline if e.kind == "note"]
    assert note.node == "c" and note.detail == {"partition": "events-0", "offset": 0}
    assert note.message.startswith("events-0: offset 0 diverged from what the consumer read (epoch 7), which KIP-320 ")


# --- ListOffsets and metadata -------------------------------------------------------------------------
def test_list_offsets_going_back_is_reported_once_per_high_point_with_where_it_was_seen(cluster: Cluster) -> None:
    checker, timeline = cluster.checker, cluster.timeline
    timeline.step = 10
    checker.on_list_offsets("c", TP, 5, 0)
    timeline.step = 20
    checker.on_list_offsets("c", TP, 5, 1)  # the same offset later, from the next leader
    checker.on_list_offsets("c", TP, 3, 1)
    [v] = checker.violations
    assert (v.invariant, v.node, v.partition) == (inv.LIST_OFFSETS_MONOTONIC, "c", "events-0")
    assert v.message == ("ListOffsets(latest) went back from 5 (step 20, epoch 1) to 3 (epoch 1) "
                         "with no unclean election in between")
    timeline.step = 30
    checker.on_list_offsets("c", TP, 5, 1)
    checker.on_list_offsets("c", TP, 4, 1)  # back from the same 5 again: already reported
    assert len(checker.violations) == 1


def test_a_restart_forgets_only_that_clients_metadata_epochs(cluster: Cluster) -> None:
    checker = cluster.checker
    checker.on_metadata_accepted("a", TP, 1, 4)
    checker.on_metadata_accepted("b", TP, 1, 4)
    checker.on_client_restart("a")
    checker.on_metadata_accepted("a", TP, 1, 2)  # a new process may start from older metadata
    assert checker.violations == []
    checker.on_metadata_accepted("b", TP, 1, 2)
    assert [v.node for v in checker.violations] == ["b"]


# --- progress at the end of a run -------------------------------------------------------------------------
@pytest.fixture
def consuming() -> Cluster:
    c = Cluster(ClusterConfig(monitor=False), seed=0)
    c.run(300)
    assert c.checker.violations == []
    return c


def test_a_consumer_more_than_50_offsets_behind_the_high_watermark_is_stuck(consuming: Cluster) -> None:
    [tp] = consuming.topic_partitions
    leader = consuming.acting_leader(tp)
    hw = consuming.log(leader, tp).high_watermark
    assert hw > inv.MAX_FINAL_LAG
    machine = consuming.consumers[0].machine
    machine.seek(tp, hw - inv.MAX_FINAL_LAG)
    consuming.checker.check_progress()
    assert consuming.checker.violations == []
    machine.seek(tp, hw - inv.MAX_FINAL_LAG - 1)
    consuming.checker.check_progress()
    [v] = consuming.checker.violations
    assert (v.invariant, v.node, v.partition) == (inv.CONSUMER_PROGRESS, "consumer-0", "events-0")
    assert v.message == f"stuck at offset {hw - 51} (FETCHING) while leader {leader} has high watermark {hw}"


def test_a_consumer_without_a_position_is_stuck(consuming: Cluster) -> None:
    [tp] = consuming.topic_partitions
    leader = consuming.acting_leader(tp)
    consuming.consumers[0].machine.seek_to_end(tp)
    consuming.checker.check_progress()
    [v] = consuming.checker.violations
    hw = consuming.log(leader, tp).high_watermark
    assert v.message == f"stuck at no position (AWAIT_RESET) while leader {leader} has high watermark {hw}"


# --- a restarted consumer: what of the old process's history still counts -----------------------------
def _deliver(cluster: Cluster, consumer: str, offsets: range | tuple[int, ...], step: int, prefix: bytes = b"old") -> None:
    cluster.timeline.step = step
    for o in offsets:
        cluster.checker.on_consumed(consumer, record(o, prefix + b"-%d" % o), 1)


def _at_step(cluster: Cluster, step: int) -> Cluster:
    cluster.timeline.step = step
    return cluster


def test_without_a_known_commit_nothing_of_the_old_history_is_kept(cluster: Cluster) -> None:
    _deliver(cluster, "c", range(4), step=1)
    _at_step(cluster, 2).checker.on_truncation("c", _truncation(1))
    cluster.checker.on_consumer_resumed("c", TP, 2, None)  # no restart recorded either
    _deliver(cluster, "c", (1, 2), step=3, prefix=b"new")
    assert cluster.checker.violations == []


def test_the_kept_history_is_what_was_delivered_before_the_commit_below_the_committed_offset(cluster: Cluster) -> None:
    _deliver(cluster, "c", range(3), step=5)
    _deliver(cluster, "c", (3,), step=6)  # at the commit's own step: after the commit was sent
    checker = _at_step(cluster, 7).checker
    checker.on_client_restart("c")
    checker.on_consumer_resumed("c", TP, 4, 6)
    _deliver(cluster, "c", (3,), step=8, prefix=b"new")  # 3 was not kept: reading it anew is fine
    assert checker.violations == []
    _deliver(cluster, "c", (2,), step=8, prefix=b"new")  # 2 was
    assert [v.message[:29] for v in checker.violations] == ["delivered 'new-2' (epoch 0) a"]


def test_the_kept_history_ends_at_its_last_offset(cluster: Cluster) -> None:
    _deliver(cluster, "c", range(3), step=5)
    checker = _at_step(cluster, 7).checker
    checker.on_client_restart("c")
    checker.on_consumer_resumed("c", TP, 3, 6)
    checker.on_consumed("c", record(5, b"new-5"), 1)
    [v] = checker.violations
    assert v.message.startswith("skipped offsets 3..4")


@pytest.mark.parametrize(("truncated_at", "kept"), [(2, True), (3, False), (4, False), (5, True)])
def test_truncations_kept_are_those_before_the_commit_or_from_the_new_process(cluster: Cluster, truncated_at, kept) -> None:
    """Deliveries at step 1, commit at step 3, restart at step 5: a truncation reported before the
    commit, or by the new process (from the restart on), still covers what it covered."""
    _deliver(cluster, "c", range(6), step=1)
    checker = cluster.checker
    _at_step(cluster, truncated_at)
    if truncated_at >= 5:
        checker.on_client_restart("c")
    checker.on_truncation("c", _truncation(2))
    if truncated_at < 5:
        _at_step(cluster, 5).checker.on_client_restart("c")
    _at_step(cluster, 6).checker.on_consumer_resumed("c", TP, 6, 3)
    _deliver(cluster, "c", (3,), step=7, prefix=b"new")
    assert (checker.violations == []) == kept


def test_a_reset_of_the_old_process_after_its_commit_no_longer_excuses_a_skip(cluster: Cluster) -> None:
    _deliver(cluster, "c", (0,), step=1)
    checker = _at_step(cluster, 4).checker
    checker.on_reset("c", OffsetResetEvent(TP, "latest", "no_position", 0, 9, None, 0))  # after the commit at 3
    _at_step(cluster, 5).checker.on_client_restart("c")
    _at_step(cluster, 6).checker.on_consumer_resumed("c", TP, 1, 3)
    checker.on_consumed("c", _real(cluster, 1, 2), 1)
    [v] = checker.violations
    assert v.message.startswith("skipped offsets 1..1")


def test_an_incident_after_a_resume_is_reported_even_when_it_looks_like_one_before_it(cluster: Cluster) -> None:
    """A skip before any reset, then a reset the resume forgets: the truncation count and the reset
    state are back where they were at the first skip, but the second skip is a new incident."""
    _deliver(cluster, "c", (0,), step=1)
    checker = _at_step(cluster, 2).checker
    checker.on_consumed("c", _real(cluster, 1, 3), 1)  # skips 1..2
    _at_step(cluster, 4).checker.on_reset("c", OffsetResetEvent(TP, "latest", "no_position", 0, 9, None, 0))
    _at_step(cluster, 5).checker.on_client_restart("c")
    _at_step(cluster, 6).checker.on_consumer_resumed("c", TP, 1, 3)  # commit at 3: the reset is forgotten
    checker.on_consumed("c", _real(cluster, 1, 2), 1)  # skips 1..1
    assert [v.message[:22] for v in checker.violations] == ["skipped offsets 1..2: ", "skipped offsets 1..1: "]


def test_every_truncation_reset_and_resume_starts_a_new_incident(cluster: Cluster) -> None:
    """Each of them between two skips: six skips, six reports (a key that came back to an earlier
    value would fold one into another)."""
    checker = cluster.checker
    _deliver(cluster, "c", (0, 2), step=1)  # skip 1
    checker.on_truncation("c", _truncation(2))
    _deliver(cluster, "c", (3, 5), step=2)  # skip 4: the truncation came before 3 was delivered
    checker.on_reset("c", OffsetResetEvent(TP, "latest", "no_position", 0, 9, None, 0))
    _deliver(cluster, "c", (6, 8), step=3)
    checker.on_truncation("c", _truncation(8))
    _deliver(cluster, "c", (9, 11), step=4)
    checker.on_reset("c", OffsetResetEvent(TP, "latest", "no_position", 0, 9, None, 0))
    _deliver(cluster, "c", (12, 14), step=5)
    checker.on_consumer_resumed("c", TP, 15, None)  # no commit known: a fresh history
    _deliver(cluster, "c", (20, 22), step=6)
    assert [v.message.split(":")[0] for v in checker.violations] == [
        f"skipped offsets {n}..{n}" for n in (1, 4, 7, 10, 13, 21)
    ]


def test_a_partition_without_a_leader_is_skipped_and_the_next_one_still_checked() -> None:
    c = Cluster(ClusterConfig(monitor=False, partitions=2), seed=0)
    c.run(300)
    first, second = c.topic_partitions
    assert c.acting_leader(first) == 1 and c.acting_leader(second) != 1
    c.crash(1)  # the first partition has no acting leader now
    c.consumers[0].machine.seek_to_end(second)
    c.checker.check_progress()
    assert [(v.invariant, v.partition) for v in c.checker.violations] == [(inv.CONSUMER_PROGRESS, str(second))]


# --- published events reach the right check with their own fields -------------------------------------
def test_each_published_fact_is_routed_with_its_fields(cluster: Cluster) -> None:
    checker = cluster.checker
    other = TopicPartition("other", 0)  # a partition no broker leads: the ack's epoch is unknown (-1)
    checker.on_event(ev.Acked(other, 7, b"k", b"v", 2))
    assert checker.acked[other][-1].leader_epoch == -1
    checker.on_event(ev.Consumed("rc", record(4, b"gone"), 1, read_committed=True))
    checker.on_event(ev.TxnAborted(TP, (b"gone",)))
    assert [(v.invariant, v.node, v.partition) for v in checker.violations] == [(inv.READ_COMMITTED, "rc", "events-0")]
    checker.on_event(ev.ListOffsetsAnswered("lo", TP, 5, 0))
    checker.on_event(ev.ListOffsetsAnswered("lo", TP, 3, 0))
    assert checker.violations[-1].node == "lo"
    checker.on_event(ev.MetadataAccepted("md", TP, 1, 4))
    checker.on_event(ev.ClientRestarted("md"))
    checker.on_event(ev.MetadataAccepted("md", TP, 1, 2))  # forgotten by the restart: not a violation
    assert len(checker.violations) == 2


def test_fetch_served_truncation_reset_and_resume_events_act_for_their_consumer(cluster: Cluster) -> None:
    checker = cluster.checker
    for o in range(4):
        checker.on_event(ev.Consumed("c", _real(cluster, 2, o), 2))
    forged = _forge(cluster, 2, 3)
    checker.on_event(ev.FetchServed("c", TP, 2, 4))
    [v] = checker.violations
    assert (v.node, v.partition) == ("c", "events-0") and f"at offset {forged} where" in v.message
    checker.on_event(ev.ResetReported("s", OffsetResetEvent(TP, "latest", "no_position", None, 0, None, 0)))
    checker.on_event(ev.Consumed("s", _real(cluster, 1, 0), 1))
    checker.on_event(ev.ResetReported("s", OffsetResetEvent(TP, "latest", "no_position", 0, 2, None, 0)))
    checker.on_event(ev.Consumed("s", _real(cluster, 1, 2), 1))  # a skip the reset explains
    assert len(checker.violations) == 1
    cluster.timeline.step = 50
    checker.on_event(ev.Consumed("r", record(0, b"old-0"), 1))
    cluster.timeline.step = 52
    checker.on_event(ev.ClientRestarted("r"))
    checker.on_event(ev.ConsumerResumed("r", TP, 0, 51))  # nothing committed below offset 0
    checker.on_event(ev.Consumed("r", record(0, b"new-0"), 1))
    assert len(checker.violations) == 1


def test_a_delivery_from_another_broker_makes_the_next_fetch_check_again(cluster: Cluster) -> None:
    checker = cluster.checker
    checker.on_consumed("c", _real(cluster, 1, 0), 1)
    checker.on_fetch_served("c", TP, 1, 1)
    checker.on_consumed("c", record(1, b"only-on-broker-2"), 2)
    checker.on_consumed("c", _real(cluster, 1, 2), 2)  # the same broker again: nothing to reset
    checker.on_fetch_served("c", TP, 1, 3)
    [v] = checker.violations
    assert "at offset 1 where the consumer delivered 'only-on-broker-2'" in v.message


def test_metadata_going_back_is_reported_once_per_high_point(cluster: Cluster) -> None:
    checker = cluster.checker
    for epoch in (5, 3, 4, 2):
        checker.on_metadata_accepted("c", TP, 1, epoch)
    [v] = checker.violations
    assert "epoch 3 after having epoch 5" in v.message


def test_a_skip_message_says_what_was_not_reported(cluster: Cluster) -> None:
    checker = cluster.checker
    checker.on_consumed("c", _real(cluster, 1, 0), 1)
    checker.on_consumed("c", _real(cluster, 1, 3), 1)
    [v] = checker.violations
    assert v.message == "skipped offsets 1..2: delivered 0 then 3 with no truncation or reset reported"


def test_the_trace_leaves_out_acks_and_other_reports(cluster: Cluster) -> None:
    cluster.timeline.record("ack", "producer-0", "acked")
    cluster.checker.on_metadata_accepted("c", TP, 1, 4)
    cluster.checker.on_metadata_accepted("c", TP, 1, 2)
    [v] = cluster.checker.violations
    assert v.trace and not any(line.split()[2:3] == ["ack"] or "acked" in line for line in v.trace)


# --- after every step: every follower in the ISR, every acknowledged record ---------------------------
def test_every_isr_follower_is_compared_with_the_leader(cluster: Cluster) -> None:
    cluster.log(2, TP).truncate_to(0)  # nothing to compare on broker 2
    follower = cluster.log(3, TP)
    follower.truncate_to(0)
    follower.append_as_leader([(b"k", b"forged")], 0)  # broker 3 disagrees at offset 0
    cluster.checker.check_step()
    [v] = cluster.checker.violations
    assert (v.invariant, v.node, v.partition) == (inv.ISR_AGREEMENT, "broker-3", "events-0")
    assert "at offset 0 below the high watermark" in v.message


def test_a_follower_that_agrees_does_not_stop_the_check_of_the_next(cluster: Cluster) -> None:
    leader_log = cluster.log(1, TP)
    hw = leader_log.high_watermark
    same = cluster.log(2, TP)  # rewritten with the leader's own bytes: compared afresh, and agrees
    same.truncate_to(hw - 1)
    same.append_as_follower(leader_log.read(same.log_end_offset))
    follower = cluster.log(3, TP)
    follower.truncate_to(hw - 1)
    follower.append_as_leader([(b"k", b"forged")], 0)
    cluster.checker.check_step()
    assert [v.node for v in cluster.checker.violations] == ["broker-3"]


def test_logs_that_agree_beyond_a_default_fetch_size_are_not_reported(cluster: Cluster) -> None:
    hw = cluster.log(1, TP).high_watermark
    big = [(b"k", b"x" * (1 << 20), (), 1_000)]  # over one default max_bytes
    for b in (1, 2, 3):
        log = cluster.log(b, TP)
        log.truncate_to(hw)
        log.append_as_leader(big, 0, timestamp_ms=1_000)
        log.append_as_leader(big, 0, timestamp_ms=1_000)
    cluster.log(1, TP).update_high_watermark(hw + 2)
    cluster.checker.check_step()
    assert cluster.checker.violations == []


def test_a_lost_acknowledged_record_after_ones_still_there_is_reported_in_full(cluster: Cluster) -> None:
    acked = cluster.checker.acked[TP]
    last = acked[-1]
    log = cluster.log(1, TP)
    log.truncate_to(last.offset)
    log.append_as_leader([(b"k", b"forged-%d" % o) for o in range(log.log_end_offset, last.offset + 1)], 0)
    end = log.log_end_offset
    cluster.checker.check_step()
    assert acked[0].offset < end  # the first ones are still there: the check goes past them
    [v] = [v for v in cluster.checker.violations if f"at offset {last.offset} " in v.message]
    assert (v.invariant, v.node, v.partition) == (inv.ACKED_DURABLE, "broker-1", "events-0")
    assert v.message == (f"acknowledged acks=all record {last.value.decode()!r} at offset {last.offset} (acked at step "
                         f"{last.step} in epoch {last.leader_epoch}) is gone: leader 1 (epoch 0) has 'forged-{last.offset}' (epoch 0) "
                         "there, "
                         f"log end {end}; no unclean election")


def test_a_partition_without_a_leader_does_not_stop_the_step_check_of_the_next() -> None:
    c = Cluster(ClusterConfig(consumers=0, monitor=False, partitions=2), seed=0)
    c.run(60)
    first, second = c.topic_partitions
    leader = c.acting_leader(second)
    assert c.acting_leader(first) == 1 and leader not in (None, 1)
    c.crash(1)
    lost = c.checker.acked[second][0]
    c.log(leader, second).truncate_to(lost.offset)
    c.checker.check_step()
    assert [(v.invariant, v.partition) for v in c.checker.violations][:1] == [(inv.ACKED_DURABLE, str(second))]

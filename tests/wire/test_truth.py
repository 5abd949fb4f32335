"""The ground-truth judge on hand-made delivery logs: each verdict, and the producer's outcome."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from epochguard.wire.drivers.delivery_log import digest
from epochguard.wire.drivers.truth import Divergence, FinalLog, judge_client, judge_handoff, read_epochs

TP = ("events", 0)
# The final log: offsets 0-9 hold "old-i"; 10-19 were truncated in an election and now hold "new-i".
FINAL = FinalLog(
    partitions={TP: {o: digest(f"{'old' if o < 10 else 'new'}-{o}".encode()) for o in range(20)},
                ("input", 0): {0: digest(b"p-0"), 1: digest(b"p-1"), 2: digest(b"p-1")}},
    log_start={TP: 0, ("input", 0): 0},
    high_watermark={TP: 20, ("input", 0): 3},
)


def consumed(t: float, offset: int, value: str) -> dict[str, Any]:
    return {"t": t, "kind": "consumed", "topic": "events", "partition": 0, "offset": offset,
            "leader_epoch": None, "digest": digest(value.encode())}


def history(*tail: dict[str, Any], end_t: float = 100.0) -> list[dict[str, Any]]:
    """Read 0-9, then phantoms at 10-12 (served by the old leader), then `tail`."""
    head = [{"t": 0.0, "kind": "start", "client_id": "epochguard-x", "software": "x"}]
    head += [consumed(1.0 + o / 100, o, f"old-{o}") for o in range(10)]
    head += [consumed(2.0 + o / 100, o, f"zombie-{o}") for o in (10, 11, 12)]
    return [*head, *tail, {"t": end_t, "kind": "stop"}]


def verdict(log: list[dict[str, Any]]) -> str:
    return event(log).verdict


def event(log: list[dict[str, Any]]) -> Divergence:
    truth = judge_client(log, FINAL, stuck_after_s=5.0)
    assert [(d.offset, d.last_phantom, d.phantoms) for d in truth.divergences] == [(10, 12, 3)]
    return truth.divergences[0]


def test_rereading_from_the_divergence_point_is_detected() -> None:
    assert verdict(history(*(consumed(3.0 + o / 100, o, f"new-{o}") for o in range(10, 20)))) == "detected"


def test_a_jump_to_the_log_start_is_a_reset() -> None:
    tail = [consumed(3.0 + o / 100, o, f"old-{o}") for o in range(10)]
    tail += [consumed(4.0 + o / 100, o, f"new-{o}") for o in range(10, 20)]
    assert verdict(history(*tail)) == "reset"


def test_going_on_past_the_phantoms_is_silent() -> None:
    assert verdict(history(*(consumed(3.0 + o / 100, o, f"new-{o}") for o in range(13, 20)))) == "silent"


def test_no_progress_while_the_leader_has_data_is_stuck() -> None:
    assert verdict(history()) == "stuck"
    assert verdict(history(consumed(30.0, 10, "new-10"))) == "stuck"  # came back, but past the bound


def test_a_truncation_raised_and_nothing_consumed_after_is_detected() -> None:
    raised = {"t": 3.0, "kind": "truncation", "source": "poll", "text": "LogTruncationError: events-0"}
    assert verdict(history(raised)) == "detected"


def test_a_run_that_ends_right_after_the_phantoms_is_undecided() -> None:
    assert verdict(history(end_t=3.0)) == "undecided"


def test_a_clean_history_has_no_divergence_and_counts_gaps_and_rereads() -> None:
    log = [consumed(1.0, o, f"old-{o}") for o in (0, 1, 1, 2, 4, 5)]
    truth = judge_client(log, FINAL)
    assert truth.divergences == []
    assert truth.reread == 1 and truth.skipped == 1  # offset 1 twice, offset 3 never


def test_acked_records_missing_or_doubled_in_the_final_log() -> None:
    def produced(value: str, offset: int | None) -> dict[str, Any]:
        return {"t": 1.0, "kind": "produced", "topic": "input", "partition": 0, "offset": offset,
                "digest": digest(value.encode()), "acks": "all", "error": None if offset is not None else "x"}

    truth = judge_client([produced("p-0", 0), produced("p-1", 1), produced("p-2", 2), produced("p-3", None)], FINAL)
    assert truth.produced_acked == 3
    assert truth.lost_acked == [digest(b"p-2")]  # acked, not in the final log; p-3 was never acked
    assert truth.duplicated_produced == [digest(b"p-1")]


@pytest.mark.parametrize("value", ["old-12", "new-12"])
def test_records_compare_by_content_not_offset(value: str) -> None:
    log = [consumed(1.0, 12, value)]
    assert len(judge_client(log, FINAL).divergences) == (value == "old-12")


@pytest.mark.parametrize(("text", "kind"), [
    ("127.0.0.1:40263/1: Disconnected: connection reset by peer (after 0ms in state UP)", "log"),
    ("Resetting offset for partition TopicPartition(topic='events', partition=0) using earliest strategy.", "reset"),
    ("events [0]: offset reset (at offset 25, broker 2) to BEGINNING: Broker: Offset out of range", "reset"),
    ("No epoch found less or equal to 30: broker end offset is -1. Reset using configured policy.", "reset"),
    ("events [0]: Local: Partition log truncation detected", "truncation"),
    ("Truncation detected for TopicPartition(topic='events', partition=0) at position 40", "truncation"),
    ("Fetch for TopicPartition(topic='events', partition=0) diverged at epoch 0 offset 37;", "truncation"),
    # a response repr names the field on every fetch: kafka-python logged 218 of these in one clean run
    ("Received response 3 FetchResponse(version=12, partitions=[PartitionData(diverging_epoch=None, "
     "high_watermark=90)])", "log"),
])
def test_client_text_classification(text: str, kind: str) -> None:
    from epochguard.wire.drivers.delivery_log import classify

    assert classify(text) == kind


def test_client_debug_chatter_is_not_forwarded(tmp_path: Path) -> None:
    """Only INFO and above reach the delivery log: DEBUG lines are request/response reprs."""
    import logging

    from epochguard.wire.drivers.delivery_log import DeliveryLog, LogForwarder, read_log

    log = DeliveryLog(tmp_path / "d.jsonl")
    LogForwarder(log).install("epochguard.test.client")
    client = logging.getLogger("epochguard.test.client")
    client.propagate = False
    client.debug("Received FetchResponse(partitions=[PartitionData(diverging_epoch=None)])")
    client.info("Truncation detected for TopicPartition(topic='events', partition=0) at position 40")
    log.close()
    kinds = [e["kind"] for e in read_log(tmp_path / "d.jsonl")]
    assert kinds == ["truncation", "stop"]


def test_the_silence_before_a_divergence_counts_from_when_the_faults_started() -> None:
    """A client that read its last phantom while the cluster was healthy (at 2 s) idles until the faults
    (at 20 s) make it one: coming back 3 s after them is detection, not a stall (the unclean-election
    --trigger caught-up run where the trigger waited 13 s for the slowest driver to start)."""
    log = history(*(consumed(23.0 + o / 100, o, f"new-{o}") for o in range(10, 20)))
    assert verdict(log) == "stuck"  # without knowing when the faults started: 21 s of silence
    truth = judge_client(log, FINAL, stuck_after_s=5.0, faults_t=20.0)
    assert [d.verdict for d in truth.divergences] == ["detected"]
    late = history(*(consumed(26.0 + o / 100, o, f"new-{o}") for o in range(10, 20)))
    assert [d.verdict for d in judge_client(late, FINAL, stuck_after_s=5.0, faults_t=20.0).divergences] == ["stuck"]
    # faults before the last phantom change nothing
    assert [d.verdict for d in judge_client(log, FINAL, stuck_after_s=5.0, faults_t=1.0).divergences] == ["stuck"]


def test_how_and_what_each_verdict_cost() -> None:
    """detected is rewound (re-read from at or below the first phantom) or raised (told the application and
    consumed nothing more); a reset goes back to the log start and re-delivers what lay below the first
    phantom; a silent client skips the final log's records from the first phantom to where it went on."""
    rewound = event(history(*(consumed(3.0 + o / 100, o, f"new-{o}") for o in range(10, 20))))
    assert (rewound.verdict, rewound.how, rewound.redelivered, rewound.skipped) == ("detected", "rewound", 0, 0)
    below = event(history(*(consumed(3.0 + o / 100, o, f"{'old' if o < 10 else 'new'}-{o}") for o in range(7, 20))))
    assert (below.verdict, below.how, below.redelivered) == ("detected", "rewound", 3)  # 7, 8, 9 again
    raised = event(history({"t": 3.0, "kind": "truncation", "source": "poll", "text": "LogTruncationError: events-0"}))
    assert (raised.verdict, raised.how, raised.redelivered) == ("detected", "raised", 0)
    tail = [consumed(3.0 + o / 100, o, f"old-{o}") for o in range(10)]
    tail += [consumed(4.0 + o / 100, o, f"new-{o}") for o in range(10, 20)]
    reset = event(history(*tail))
    assert (reset.verdict, reset.how, reset.redelivered, reset.skipped) == ("reset", "back", 10, 0)
    silent = event(history(*(consumed(3.0 + o / 100, o, f"new-{o}") for o in range(13, 20))))
    assert (silent.verdict, silent.how, silent.redelivered, silent.skipped) == ("silent", "", 0, 3)  # new-10..12
    stuck = event(history())
    assert (stuck.verdict, stuck.how, stuck.redelivered, stuck.skipped) == ("stuck", "", 0, 0)


def test_going_back_with_no_phantom_is_a_rewind_not_a_divergence() -> None:
    """A false alarm as the delivery log sees it (redpanda#5435): 0-9 read, then 6-9 again though the final
    log holds exactly what was read; a divergence's own re-read is no rewind."""
    log = [consumed(1.0 + o / 100, o, f"old-{o}") for o in (*range(10), *range(6, 10))]
    truth = judge_client(log, FINAL)
    assert truth.divergences == []
    assert truth.rewinds == [("events", 0, 6, 4)] and truth.reread == 4
    detected = judge_client(history(*(consumed(3.0 + o / 100, o, f"new-{o}") for o in range(10, 20))), FINAL)
    assert detected.rewinds == [] and [d.verdict for d in detected.divergences] == ["detected"]


def test_nothing_consumed_for_the_bound_before_the_stop_while_the_log_went_on_is_a_stall() -> None:
    """librdkafka#4425: a partition never consumed again. Read 0-9 (the final log goes to 20), then
    silence until the stop: a stall, with no divergence; stopping within the bound is none."""
    read = [consumed(1.0 + o / 100, o, f"old-{o}") for o in range(10)]
    assert judge_client([*read, {"t": 30.0, "kind": "stop"}], FINAL, stuck_after_s=5.0).stalls == [("events", 0, 9)]
    assert judge_client([*read, {"t": 5.0, "kind": "stop"}], FINAL, stuck_after_s=5.0).stalls == []
    whole = [consumed(1.0 + o / 100, o, f"{'old' if o < 10 else 'new'}-{o}") for o in range(20)]
    assert judge_client([*whole, {"t": 30.0, "kind": "stop"}], FINAL, stuck_after_s=5.0).stalls == []  # at the end


def test_the_consumers_history_ends_where_the_driver_was_told_to_stop() -> None:
    """kafka-go in every compat row: its reader was at the log end (0-9 here, the final log going to 20 as the
    simulated producer went on) when the driver was told to stop, and its async writer then flushed for 5 s
    more (acknowledgements logged until the stop): no stall, so no `unseen`. Silent for the bound before the
    `stopping` line is one still."""
    read = [consumed(1.0 + o / 100, o, f"old-{o}") for o in range(10)]
    flushing = [{"t": 1.2 + i, "kind": "produced", "topic": "input", "partition": 0, "offset": 0,
                 "digest": digest(b"p-0"), "error": None} for i in range(6)]
    told = judge_client([*read, {"t": 1.2, "kind": "stopping"}, *flushing, {"t": 7.5, "kind": "stop"}], FINAL,
                        stuck_after_s=5.0)
    assert told.stalls == [] and [a.name for a in told.anomalies if a.name == "unseen"] == []
    late = judge_client([*read, {"t": 6.5, "kind": "stopping"}, *flushing, {"t": 7.5, "kind": "stop"}], FINAL,
                        stuck_after_s=5.0)
    assert late.stalls == [("events", 0, 9)] and [a.name for a in late.anomalies if a.name == "unseen"] == ["unseen"]


# log-start-jump: DeleteRecords moved the start to 12; 0-11 are gone from the final log, 12-19 retained.
JUMPED = FinalLog(partitions={TP: {o: digest(f"v-{o}".encode()) for o in range(12, 20)}},
                  log_start={TP: 12}, high_watermark={TP: 20})


def jumped(*offsets: int, end_t: float = 30.0) -> list[dict[str, Any]]:
    return [*(consumed(1.0 + i / 100, o, f"v-{o}") for i, o in enumerate(offsets)), {"t": end_t, "kind": "stop"}]


def test_records_below_the_log_start_are_deleted_not_phantoms_and_resuming_there_is_start() -> None:
    truth = judge_client(jumped(*range(5), *range(12, 20)), JUMPED, stuck_after_s=5.0)
    assert truth.divergences == [] and truth.skipped == 0
    assert [(o.offset, o.log_start, o.to, o.how, o.skipped) for o in truth.out_of_range] == [(5, 12, 12, "start", 0)]


def test_going_on_past_the_log_start_is_forward_and_counts_the_retained_records_skipped() -> None:
    truth = judge_client(jumped(*range(5), 17, 18, 19), JUMPED, stuck_after_s=5.0)
    assert [(o.to, o.how, o.skipped) for o in truth.out_of_range] == [(17, "forward", 5)]
    assert truth.skipped == 5  # Jepsen's poll-skip sees the same records


def test_nothing_consumed_after_falling_below_the_log_start_is_stopped_or_undecided() -> None:
    assert [(o.to, o.how) for o in judge_client(jumped(*range(5)), JUMPED, stuck_after_s=5.0).out_of_range] == [
        (None, "stopped")]
    early = judge_client(jumped(*range(5), end_t=2.0), JUMPED, stuck_after_s=5.0)
    assert [o.how for o in early.out_of_range] == [""]


def test_reading_up_to_the_log_start_is_no_out_of_range() -> None:
    assert judge_client(jumped(*range(20)), JUMPED).out_of_range == []
    assert judge_client(jumped(*range(12), *range(12, 20)), JUMPED).out_of_range == []


def test_going_back_to_the_log_start_where_the_divergence_began_is_marked_alike() -> None:
    """An empty new leader (`unclean-empty-leader`): everything read was replaced, from offset 0, the log
    start. A rewind to the divergence point and a reset to the start read the same records again."""
    empty = FinalLog(partitions={TP: {o: digest(f"new-{o}".encode()) for o in range(20)}}, log_start={TP: 0},
                     high_watermark={TP: 20})
    head = [{"t": 0.0, "kind": "start", "client_id": "epochguard-x", "software": "x"}]
    head += [consumed(1.0 + o / 100, o, f"old-{o}") for o in range(10)]
    back = [consumed(3.0 + o / 100, o, f"new-{o}") for o in range(20)]
    (d,) = judge_client([*head, *back, {"t": 100.0, "kind": "stop"}], empty, stuck_after_s=5.0).divergences
    assert (d.offset, d.verdict, d.how, d.at_log_start) == (0, "detected", "rewound", True)
    # a divergence that began above the log start is told apart: a rewind there is no reset
    assert not event(history(*(consumed(3.0 + o / 100, o, f"new-{o}") for o in range(10, 20)))).at_log_start
    # nor is going on from somewhere else than the start (silent) marked
    on = [consumed(3.0 + o / 100, o, f"new-{o}") for o in range(12, 20)]
    (d,) = judge_client([*head, *on, {"t": 100.0, "kind": "stop"}], empty, stuck_after_s=5.0).divergences
    assert (d.verdict, d.at_log_start) == ("silent", False)


def test_a_handoff_is_judged_from_the_committers_phantoms_and_where_the_next_member_started() -> None:
    """handoff-truncation: A read 0-9 and the phantoms 10-12, committed 13 and left; B started from the
    commit. Where B first consumed decides, against A's first phantom (10)."""
    a = [{"t": 0.0, "kind": "start"}, *[consumed(1.0, o, f"old-{o}") for o in range(10)],
         *[consumed(1.1, o, f"zombie-{o}") for o in range(10, 13)]]

    def b(*offsets: int, end_t: float = 30.0) -> list[dict[str, Any]]:
        return [{"t": 20.0, "kind": "start"}, *[consumed(21.0, o, f"new-{o}") for o in offsets],
                {"t": end_t, "kind": "stop"}]

    def verdict(after: list[dict[str, Any]]) -> tuple[str, str, int]:
        (d,) = judge_handoff(a, after, FINAL, stuck_after_s=5.0)
        assert (d.offset, d.last_phantom, d.phantoms) == (10, 12, 3)
        return d.verdict, d.how, d.skipped

    assert verdict(b(13, 14)) == ("silent", "", 3)  # from the commit: the replacements 10-12 skipped
    assert verdict(b(10, 11)) == ("detected", "rewound", 0)  # validated: back to the divergence point
    assert verdict(b(8, 9, 10)) == ("detected", "rewound", 0)  # below it too (an off-by-one `<` would not)
    assert verdict(b(0, 1)) == ("reset", "back", 0)  # the log start
    assert verdict(b()) == ("stuck", "", 0)
    assert verdict(b(end_t=22.0)) == ("undecided", "", 0)
    # no phantom read by A (nothing it committed past was replaced): no event for B
    clean = [{"t": 0.0, "kind": "start"}, *[consumed(1.0, o, f"old-{o}") for o in range(10)]]
    assert judge_handoff(clean, b(10), FINAL) == []


# consecutive-unclean, as a delivery log sees it. The first leader had "a-" records 0-34 in epoch 0; the second
# only 0-17, then wrote "b-" 18-22 in epoch 1; the third, elected last, has the first's 0-29, then its own epoch
# 2 from 30. The client read a-0..34, went back to 18 after the second leader's election (validating epoch 0
# there: 18), read b-18..22, and validating epoch 1 on the third leader was answered 30, above its position 23.
CONSECUTIVE = FinalLog(
    partitions={TP: {o: digest(f"a-{o}".encode()) if o < 30 else digest(f"c-{o}".encode()) for o in range(40)}},
    log_start={TP: 0}, high_watermark={TP: 40},
    epochs={TP: {o: 0 if o < 30 else 2 for o in range(40)}},
)


def consecutive(*tail: dict[str, Any], epochs: bool = True, end_t: float = 100.0) -> list[dict[str, Any]]:
    def read(t: float, offset: int, value: str, epoch: int) -> dict[str, Any]:
        return {**consumed(t, offset, value), "leader_epoch": epoch if epochs else None}

    head = [{"t": 0.0, "kind": "start", "client_id": "epochguard-x", "software": "x"}]
    head += [read(1.0 + o / 100, o, f"a-{o}", 0) for o in range(35)]
    head += [read(2.0 + o / 100, o, f"b-{o}", 1) for o in range(18, 23)]
    return [*head, *[{**e, "leader_epoch": e["leader_epoch"] if epochs else None} for e in tail],
            {"t": end_t, "kind": "stop"}]


def later(offsets: range, t: float = 3.0) -> list[dict[str, Any]]:
    return [{**consumed(t + o / 100, o, f"a-{o}" if o < 30 else f"c-{o}"), "leader_epoch": 0 if o < 30 else 2}
            for o in offsets]


def test_two_replacements_of_one_offset_are_two_divergences_the_second_undetectable() -> None:
    truth = judge_client(consecutive(*later(range(23, 40))), CONSECUTIVE, stuck_after_s=5.0)
    first, second = truth.divergences
    # The first leader's 30-34 are lost (the final log holds its records to 29): it went back, to 18.
    assert (first.offset, first.last_phantom, first.verdict, first.how, first.located) == (30, 34, "detected",
                                                                                           "rewound", 30)
    # The second leader's 18-22, replaced by the third's epoch-0 records: KIP-320 places it at 30, above 23.
    assert (second.offset, second.last_phantom, second.epoch, second.located) == (18, 22, 1, 30)
    assert (second.verdict, second.how, second.skipped, second.redelivered) == ("undetectable", "continued", 5, 0)


@pytest.mark.parametrize("back", [0, 2])
def test_an_undetectable_divergence_read_again_from_its_first_phantom_rewound(back: int) -> None:
    truth = judge_client(consecutive(*later(range(18 - back, 40))), CONSECUTIVE, stuck_after_s=5.0)
    assert [(d.verdict, d.how, d.redelivered) for d in truth.divergences[1:]] == [("undetectable", "rewound", back)]


def test_the_same_phantoms_read_twice_are_one_divergence() -> None:
    """A back-jump onto the records it had read there (a zombie serving them again) continues the run: only
    an offset holding another record than before starts a new one."""
    again = [{**consumed(1.5 + o / 100, o, f"a-{o}"), "leader_epoch": 0} for o in range(30, 35)]
    log = [{"t": 0.0, "kind": "start", "client_id": "epochguard-x", "software": "x"},
           *[{**consumed(1.0 + o / 100, o, f"a-{o}"), "leader_epoch": 0} for o in range(35)], *again,
           *later(range(30, 40)), {"t": 100.0, "kind": "stop"}]
    truth = judge_client(log, CONSECUTIVE, stuck_after_s=5.0)
    assert [(d.offset, d.phantoms, d.verdict, d.how) for d in truth.divergences] == [(30, 10, "detected", "rewound")]


def test_an_undetectable_divergence_then_nothing_stopped() -> None:
    truth = judge_client(consecutive(), CONSECUTIVE, stuck_after_s=5.0)
    assert [(d.verdict, d.how) for d in truth.divergences[1:]] == [("undetectable", "stopped")]
    assert [d.verdict for d in judge_client(consecutive(end_t=4.0), CONSECUTIVE, stuck_after_s=5.0)
            .divergences[1:]] == ["undecided"]


def test_without_epochs_the_log_reads_it_as_silent_unless_the_run_tells() -> None:
    """A client that does not expose leader epochs (kcat, aiokafka, sarama, kafka-go): its own log cannot place
    the divergence; another client of the run that read the same records can (`read_epochs`), and the server's
    `undetectable` stands for the log's silent where none did (`reads_as`, marked † in compat)."""
    blind = consecutive(*later(range(23, 40)), epochs=False)
    alone = judge_client(blind, CONSECUTIVE, stuck_after_s=5.0).divergences[1]
    assert (alone.verdict, alone.epoch, alone.located) == ("silent", None, None)
    assert alone.reads_as({"undetectable/continued"}) == ("undetectable", "continued")
    assert alone.reads_as({"silent"}) == ("silent", "")
    # Where its epoch is known, the log's own verdict stands whatever the server says
    placed = judge_client(consecutive(*later(range(23, 40))), CONSECUTIVE, stuck_after_s=5.0).divergences[0]
    assert placed.epoch == 0 and placed.reads_as({"undetectable/rewound"}) == ("detected", "rewound")
    told = judge_client(blind, CONSECUTIVE, stuck_after_s=5.0, epochs=read_epochs([consecutive()]))
    assert [(d.verdict, d.how, d.epoch) for d in told.divergences] == [("detected", "rewound", 0),
                                                                       ("undetectable", "continued", 1)]


def test_a_final_log_without_epochs_places_nothing() -> None:
    """Read without the records' epochs, the final log cannot say where KIP-320 would place a divergence:
    the verdicts are the log's own."""
    bare = FinalLog(CONSECUTIVE.partitions, CONSECUTIVE.log_start, CONSECUTIVE.high_watermark)
    truth = judge_client(consecutive(*later(range(23, 40))), bare, stuck_after_s=5.0)
    assert [(d.verdict, d.located) for d in truth.divergences] == [("detected", None), ("silent", None)]
    assert CONSECUTIVE.epoch_end(TP, 2) == 40 and CONSECUTIVE.epoch_end(TP, 0) == 30


def test_each_divergence_counts_from_the_faults_that_made_its_phantoms() -> None:
    """Two triggers (consecutive-unclean): the second leader's records were read at t=2, its death and the
    third leader's election came at t=30, the client went on at t=31. Counted from the first trigger (t=1.5)
    it would be `stopped`; from the faults after its last phantom it went on at once."""
    log = consecutive(*later(range(23, 40), t=31.0))
    assert [(d.verdict, d.how) for d in judge_client(log, CONSECUTIVE, stuck_after_s=5.0,
                                                     faults_t=[1.5, 30.0]).divergences] == [
        ("detected", "rewound"), ("undetectable", "continued")]
    assert [(d.verdict, d.how) for d in judge_client(log, CONSECUTIVE, stuck_after_s=5.0,
                                                     faults_t=1.5).divergences][1:] == [("undetectable", "stopped")]

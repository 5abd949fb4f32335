"""The judge's verdicts from scripted clients at the message level: an unclean election replaces
records a client was served; what the client does next decides detected / reset / silent."""

from __future__ import annotations

import pytest

from epochguard.errors import Errors
from epochguard.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    LeaveGroupMember,
    LeaveGroupRequest,
    ListOffsetsPartition,
    ListOffsetsRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetForLeaderPartition,
    OffsetsForLeaderEpochRequest,
)
from epochguard.sim.faults import Crash, Heal, Isolate, Zombie
from epochguard.sim.network import broker_node
from epochguard.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition
from epochguard.wire import codec
from epochguard.wire.engine import WireCluster
from epochguard.wire.judge import SPIN_REQUESTS, STORM_REQUESTS, STORM_STEPS, STUCK_AFTER_STEPS, Judge, batch_spans
from epochguard.wire.scenarios import PauseProducers, ResumeProducers, build

ADDRESSES = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002), 3: ("127.0.0.1", 9003)}
TP = TopicPartition("events", 0)


def run_until(w: WireCluster, predicate, limit: int = 2000) -> None:
    for _ in range(limit):
        if predicate():
            return
        w.step()
        w.drain()
    raise AssertionError("condition never held")


def ask(w: WireCluster, conn, api_key: int, version: int, request, client: str = "scripted"):
    w.submit(conn, codec.RequestHeader(api_key, version, 1, client), request)
    for _ in range(100):
        answers = [r for c, _, r in w.drain() if c is conn]
        if answers:
            return answers[0]
        w.step()
    raise AssertionError("no answer")


def fetch(w: WireCluster, conn, offset: int, epoch: int = -1) -> FetchResponse:
    return ask(w, conn, 1, 12, FetchRequest((FetchPartition("events", 0, offset, epoch),), max_wait_ms=0, version=12))


def judged(scenario: str, steps: int = 0) -> tuple[WireCluster, Judge]:
    """`scenario`'s cluster with a judge observing it, run until every partition is led, then `steps` more."""
    w = WireCluster(build(scenario), 0, ADDRESSES)
    judge = Judge()
    w.observers.append(judge)
    run_until(w, w.ready)
    for _ in range(steps):
        w.step()
    return w, judge


def leader_alone(scenario: str) -> tuple[WireCluster, Judge]:
    """`scenario`'s cluster, judged, once broker 1's followers stopped replicating, the ISR shrank to [1],
    broker 1 alone took acks=1 records, and the simulated producers paused."""
    w, judge = judged(scenario, 50)
    w.fire(Isolate(1))
    run_until(w, lambda: w.cluster.controller.state(TP).isr == (1,))
    for _ in range(20):
        w.step()
    w.fire(PauseProducers())
    for _ in range(10):
        w.step()
    return w, judge


@pytest.fixture
def diverged() -> tuple[WireCluster, Judge, int]:
    """The unclean-election scenario's faults by hand; returns the cluster, its judge, and how far
    the scripted client had been served (epoch 0) when broker 1 died."""
    w, judge = leader_alone("unclean-election")
    conn = w.connect(1)
    response = fetch(w, conn, 0)
    part = response.partitions[0]
    served_to = part.high_watermark
    assert part.records and served_to > w.cluster.log(2, TP).log_end_offset  # broker 2 lacks some of it
    w.fire(Crash(1))
    w.fire(Heal(broker_node(1)))
    w.fire(ResumeProducers())
    run_until(w, lambda: w.cluster.acting_leader(TP) == 2)
    # The new leader takes new records at the offsets of the lost ones, and past them.
    run_until(w, lambda: w.cluster.log(2, TP).high_watermark > served_to)
    return w, judge, served_to


def verdict(judge: Judge) -> dict:
    (client,) = judge.report()
    (event,) = client["divergences"]
    return event


def test_fetching_on_from_the_old_position_is_silent(diverged) -> None:
    w, judge, served_to = diverged
    point = w.cluster.log(2, TP).leader_epoch_cache.end_offset_for(0, w.cluster.log(2, TP).log_end_offset)[1]
    conn = w.connect(2)
    part = fetch(w, conn, served_to).partitions[0]
    assert part.error_code == Errors.NONE  # the new leader's log has grown past it: nothing stops the client
    event = verdict(judge)
    assert (event["offset"], event["served_end"], event["verdict"]) == (point, served_to, "silent")
    # it jumps over the new leader's records from the divergence point to where it went on
    assert (event["how"], event["redelivered"], event["skipped"]) == ("", 0, served_to - point)


def test_validating_then_fetching_from_the_divergence_point_is_detected(diverged) -> None:
    w, judge, _ = diverged
    conn = w.connect(2)
    answer = ask(w, conn, 23, 4, OffsetsForLeaderEpochRequest((OffsetForLeaderPartition("events", 0, 0, 1),)))
    end = answer.partitions[0].end_offset
    fetch(w, conn, end, epoch=1)
    event = verdict(judge)
    assert (event["offset"], event["verdict"], event["how"], event["redelivered"]) == (end, "detected", "rewound", 0)


def test_validating_then_fetching_below_the_divergence_point_counts_what_is_served_again(diverged) -> None:
    w, judge, _ = diverged
    conn = w.connect(2)
    answer = ask(w, conn, 23, 4, OffsetsForLeaderEpochRequest((OffsetForLeaderPartition("events", 0, 0, 1),)))
    end = answer.partitions[0].end_offset
    assert end >= 2
    fetch(w, conn, end - 2, epoch=1)
    event = verdict(judge)
    assert (event["verdict"], event["how"], event["redelivered"], event["skipped"]) == ("detected", "rewound", 2, 0)


def test_validating_then_fetching_no_more_is_detected_raised_at_the_bound(diverged) -> None:
    w, judge, _ = diverged
    conn = w.connect(2)
    ask(w, conn, 23, 4, OffsetsForLeaderEpochRequest((OffsetForLeaderPartition("events", 0, 0, 1),)))
    bound = verdict(judge)["step"] + STUCK_AFTER_STEPS
    while w.step_no < bound - 1:
        w.step()
    assert verdict(judge)["verdict"] == "undecided"
    w.step()
    event = verdict(judge)
    assert (event["verdict"], event["how"], event["redelivered"]) == ("detected", "raised", 0)


def test_no_validation_and_no_fetch_is_stuck_at_the_bound(diverged) -> None:
    w, judge, _ = diverged
    for _ in range(STUCK_AFTER_STEPS + 10):
        w.step()
    event = verdict(judge)
    assert (event["verdict"], event["how"]) == ("stuck", "")


def test_the_stuck_bound_counts_from_the_last_records_a_zombie_served() -> None:
    """A zombie leader keeps serving the client its old epoch after the election: the client makes
    progress from where it stands, so the stuck bound runs from the last records it was served, as the
    delivery log's does from the last phantom consumed (aiokafka in zombie-leader: the server said
    stuck where its own log said silent, when the zombie served it for seconds before it went on)."""
    w, judge = leader_alone("zombie-leader")
    old = w.connect(1)
    end = fetch(w, old, 0).partitions[0].high_watermark
    w.fire(Zombie(1))
    w.fire(ResumeProducers())
    run_until(w, lambda: w.cluster.controller.state(TP).leader == 2)
    opened, at_election = w.step_no, end
    while w.step_no < opened + STUCK_AFTER_STEPS // 2:  # the zombie takes writes in epoch 0 and serves them
        part = fetch(w, old, end).partitions[0]
        end = max(end, part.high_watermark)
        for _ in range(20):
            w.step()
    assert end > at_election  # it went on reading the zombie's records
    last_served = w.step_no
    while w.step_no < opened + STUCK_AFTER_STEPS + 10:  # past the bound from the election, not from the zombie
        w.step()
    assert verdict(judge)["verdict"] == "undecided"
    run_until(w, lambda: w.cluster.log(2, TP).high_watermark > end)
    assert w.step_no < last_served + STUCK_AFTER_STEPS
    fetch(w, w.connect(2), end, epoch=1)
    assert verdict(judge)["verdict"] == "silent"


def zombie_served() -> tuple[WireCluster, Judge, object, int]:
    """zombie-leader by hand: broker 1 cut off from the controller, broker 2 elected, and the scripted
    client served by the zombie in epoch 0 for 1 s; returns its connection to broker 1 and how far it read."""
    w, judge = leader_alone("zombie-leader")
    old = w.connect(1)
    end = fetch(w, old, 0).partitions[0].high_watermark
    w.fire(Zombie(1))
    w.fire(ResumeProducers())
    run_until(w, lambda: w.cluster.controller.state(TP).leader == 2)
    for _ in range(5):  # the zombie goes on serving epoch 0
        end = max(end, fetch(w, old, end).partitions[0].high_watermark)
        for _ in range(20):
            w.step()
    return w, judge, old, end


def test_going_on_at_a_follower_of_the_new_epoch_is_silent() -> None:
    """Fetch v11+ may be served by a follower (KIP-392: Kafka's `fetchOnlyLeader` is false once the
    request carries client metadata). kcat (librdkafka 2.0.2) read the zombie's records, and once broker 1
    had healed, truncated and followed the new leader, went on fetching there from its old position,
    above the divergence point: silent, as its delivery log said (the server had left it undecided)."""
    w, judge, old, end = zombie_served()
    w.fire(Heal(broker_node(1)))
    epoch = w.cluster.controller.state(TP).leader_epoch
    run_until(w, lambda: w.cluster.in_current_epoch(TP, 1) and w.cluster.log(1, TP).high_watermark > end + 5)
    assert w.cluster.acting_leader(TP) == 2 and w.cluster.controller.state(TP).leader_epoch == epoch
    assert verdict(judge)["verdict"] == "undecided"
    part = fetch(w, old, end).partitions[0]
    assert part.error_code == Errors.NONE and part.records  # the follower serves the new epoch's records
    event = verdict(judge)
    assert (event["verdict"], event["skipped"]) == ("silent", end - event["offset"])


def test_a_follower_that_has_not_truncated_yet_decides_nothing() -> None:
    """Just healed, broker 1 knows the new epoch but still holds the zombie's records (it truncates on
    its first exchange with the leader): its answer is the zombie's log, not the leader's. aiokafka got
    an empty answer at its old position there, then OFFSET_OUT_OF_RANGE once broker 1 had truncated, and
    asked broker 1 for offsets from then on: stuck, as its log said; the server had called it silent."""
    w, judge, _old, end = zombie_served()
    w.fire(Heal(broker_node(1)))
    epoch = w.cluster.controller.state(TP).leader_epoch
    follower = w.cluster.brokers[1].manager.partitions[TP]
    run_until(w, lambda: follower.leader_epoch == epoch)
    assert w.cluster.log(1, TP).log_end_offset >= end  # not truncated yet: the zombie's records
    assert not w.cluster.in_current_epoch(TP, 1)  # so what it answers is judged as a zombie's
    run_until(w, lambda: w.cluster.log(1, TP).latest_epoch == epoch)  # truncated, copying the new epoch
    assert w.cluster.in_current_epoch(TP, 1)
    assert verdict(judge)["verdict"] == "undecided"


def test_a_reset_after_a_healed_zombies_out_of_range_is_the_divergences_not_a_false_alarm_too() -> None:
    """kcat (librdkafka 2.0.2) in compat's zombie-leader rows: it read the zombie's records, then broker 1 healed,
    truncated and followed the new leader, and answered kcat's fetch at its old position OFFSET_OUT_OF_RANGE;
    kcat listed the earliest offset on it and re-read from 0. Records it had read were replaced, so that is the
    divergence's reset (its delivery log: a reset to the start after phantoms), not also a false alarm (a reset
    although nothing diverged), as the server had called it. Where it went stays the follower note."""
    w, judge, old, end = zombie_served()
    w.fire(Heal(broker_node(1)))
    run_until(w, lambda: w.cluster.in_current_epoch(TP, 1))
    assert w.cluster.log(1, TP).log_end_offset < end  # truncated below the position the zombie served it to
    assert fetch(w, old, end).partitions[0].error_code == Errors.OFFSET_OUT_OF_RANGE
    ask(w, old, 2, 7, ListOffsetsRequest((ListOffsetsPartition("events", 0, EARLIEST_TIMESTAMP, 1),)))
    assert fetch(w, w.connect(2), 0, epoch=1).partitions[0].error_code == Errors.NONE
    (client,) = judge.report()
    assert [(d["verdict"], d["how"]) for d in client["divergences"]] == [("reset", "back")]
    assert client["false_alarms"] == []
    assert [(f["how"], f["to"]) for f in client["follower_out_of_range"]] == [("reset", 0)]


def test_a_zombie_still_serving_its_old_epoch_decides_nothing() -> None:
    _w, judge, _old, _end = zombie_served()
    assert verdict(judge)["verdict"] == "undecided"


def test_a_listoffsets_reset_then_a_fetch_there_is_reset(diverged) -> None:
    w, judge, _ = diverged
    conn = w.connect(2)
    answer = ask(w, conn, 2, 7, ListOffsetsRequest((ListOffsetsPartition("events", 0, EARLIEST_TIMESTAMP, 1),)))
    fetch(w, conn, answer.partitions[0].offset, epoch=1)
    event = verdict(judge)
    assert (event["verdict"], event["how"]) == ("reset", "back")
    assert event["redelivered"] == event["offset"] - answer.partitions[0].offset > 0  # from the log start again


def test_the_same_fetch_again_means_the_replaced_records_never_reached_the_client(diverged) -> None:
    # The fixture's client was answered the replaced records for its fetch at 0; asking for 0 again
    # (its connection died with the old leader before it applied that answer) reads none of them.
    w, judge, _ = diverged
    fetch(w, w.connect(2), 0, epoch=1)
    (client,) = judge.report()
    assert client["divergences"] == []


def test_a_refetch_from_below_the_divergence_point_without_asking_is_a_reset(diverged) -> None:
    w, judge, _ = diverged
    fetch(w, w.connect(2), 1, epoch=1)  # not the fetch it was answered: a restart from an older position
    event = verdict(judge)
    assert (event["verdict"], event["detail"]) == ("reset", "fetched again from 1 without asking")
    assert (event["how"], event["redelivered"]) == ("back", event["offset"] - 1)


def test_a_commit_past_the_divergence_point_or_without_an_epoch_is_reported(diverged) -> None:
    w, judge, served_to = diverged
    conn = w.connect(2)
    ask(w, conn, 8, 8, OffsetCommitRequest("g", (OffsetCommitPartition("events", 0, served_to, -1),), version=8))
    (client,) = judge.report()
    problems = sorted(c["problem"] for c in client["commits"])
    assert problems[0].startswith("committed beyond the divergence point") and problems[1] == "committed without a leader epoch"


def test_offset_not_available_from_a_lagging_new_leader_and_what_the_client_did_next() -> None:
    from epochguard.sim.faults import LinkDelay
    from epochguard.types import LATEST_TIMESTAMP

    w, judge = judged("lagging-leader", 50)
    w.fire(LinkDelay(broker_node(3), broker_node(2), drop_rate=1.0, duration_ms=4000))
    log2 = w.cluster.log(2, TP)
    run_until(w, lambda: log2.high_watermark < log2.log_end_offset)  # as the scenario's stage waits for
    w.fire(Crash(1))
    run_until(w, lambda: w.cluster.acting_leader(TP) == 2)
    epoch = w.cluster.controller.state(TP).leader_epoch
    conn = w.connect(2)
    latest = ListOffsetsRequest((ListOffsetsPartition("events", 0, LATEST_TIMESTAMP, epoch),), version=7)
    first = ask(w, conn, 2, 7, latest).partitions[0]
    assert first.error_code == Errors.OFFSET_NOT_AVAILABLE  # KIP-207: its HW is behind the old leader's
    answer = first
    for _ in range(100):  # the client retries every 100 ms until broker 3 leaves the ISR and the HW moves
        for _ in range(10):
            w.step()
        answer = ask(w, conn, 2, 7, latest).partitions[0]
        if answer.error_code == Errors.NONE:
            break
    assert answer.error_code == Errors.NONE and answer.offset > 0
    assert w.cluster.controller.state(TP).isr == (2,)
    (client,) = judge.report()
    entries = client["offset_not_available"]
    assert all(e["then"].startswith("asked again") for e in entries)
    assert entries[-1]["then"] == f"asked again and got {answer.offset}"


def test_the_served_trigger_waits_for_every_expected_consumer() -> None:
    """`serve --consumers N`: one consumer served at the log end does not fire the faults while the
    run expects more (a slow starter would first meet the cluster after them)."""
    from epochguard.wire.triggers import ClientTrigger

    w = WireCluster(build("unclean-election"), 0, ADDRESSES)
    run_until(w, w.ready)
    for _ in range(50):
        w.step()
    w.fire(PauseProducers())
    for _ in range(10):
        w.step()
    leader = w.cluster.acting_leader(TP)
    trigger = ClientTrigger("served", TP, min_consumers=2)
    request = FetchRequest((FetchPartition("events", 0, 0),), max_wait_ms=0, version=12)
    conn = w.connect(leader)
    response = fetch(w, conn, 0)
    assert response.partitions[0].records
    trigger.observe("first", request, response)
    assert not trigger.met()
    trigger.observe("second", request, fetch(w, w.connect(leader), 0))
    assert trigger.met()
    assert ClientTrigger("served", TP).met() is False  # nobody fetching yet: never met


def test_a_listoffsets_answer_past_the_divergence_point_then_a_fetch_there_is_silent(diverged) -> None:
    # kafka-go's reader asks for the first and last offsets on every reconnect and then fetches at its
    # own position, which the last offset can equal; a client reset to `latest` fetches there too.
    # Either way it keeps the replaced records it read and skips their replacements, as its delivery
    # log shows (truth.py: a next offset past the divergence point is silent): not a reset.
    w, judge, served_to = diverged
    conn = w.connect(2)
    answer = ask(w, conn, 2, 7, ListOffsetsRequest((ListOffsetsPartition("events", 0, LATEST_TIMESTAMP, 1),)))
    latest = answer.partitions[0].offset
    assert latest > served_to
    fetch(w, conn, latest, epoch=1)
    event = verdict(judge)
    assert (event["verdict"], event["detail"]) == (
        "silent", f"fetched at {latest}, past the divergence point {event['offset']} after a ListOffsets "
                  f"answer of {latest}")


def test_the_verdict_line_says_how_and_what_it_cost() -> None:
    from epochguard.wire.cli import format_table

    base = {"topic": "events", "partition": 0, "offset": 10, "served_end": 13, "served_epoch": 0, "detail": "d"}
    client = {"client_id": "c", "software": "s", "requests": 1, "connections": 1, "epochs_sent": {},
              "metadata_epoch_backwards": [], "commits": [], "acks_lost": [], "offset_not_available": [],
              "divergences": [{**base, "verdict": "detected", "how": "rewound", "redelivered": 3, "skipped": 0},
                              {**base, "verdict": "silent", "how": "", "redelivered": 0, "skipped": 12},
                              {**base, "verdict": "stuck", "how": "", "redelivered": 0, "skipped": 0}]}
    lines = format_table([client])
    assert "): DETECTED (rewound, 3 redelivered) - d" in lines
    assert "): SILENT (12 skipped) - d" in lines
    assert "): STUCK - d" in lines
    client["anomalies"] = [{"anomaly": "lost-ack", "tag": "expected", "topic": "input", "partition": 0, "offset": o,
                            "count": 1} for o in (4, 9)]
    assert "  anomaly lost-ack/expected on input-0: 2 from 4 (2 in all)" in format_table([client]).splitlines()


def test_a_commit_with_an_epoch_older_than_the_served_batch_is_reported(diverged) -> None:
    """KAFKA-19902: the committed epoch must be the one of the record before the committed offset as it
    was served; an older one makes the next owner validate a position the log never had."""
    w, judge, _ = diverged
    conn = w.connect(2)
    end = ask(w, conn, 23, 4, OffsetsForLeaderEpochRequest((OffsetForLeaderPartition("events", 0, 0, 1),)))
    point = end.partitions[0].end_offset
    part = fetch(w, conn, point, epoch=1).partitions[0]
    (base, last, epoch, _crc), *_ = batch_spans(part.records)
    assert epoch == 1 and base == point
    for committed_epoch in (1, 0):  # the batch's own epoch: fine; the old leader's: stale
        ask(w, conn, 8, 8, OffsetCommitRequest("g", (OffsetCommitPartition("events", 0, last + 1, committed_epoch),),
                                                version=8))
    (client,) = judge.report()
    stale = [c for c in client["commits"] if "older than" in c["problem"]]
    assert [(c["offset"], c["problem"]) for c in stale] == [
        (last + 1, f"committed with epoch 0, older than epoch 1 of the batch holding offset {last} as served")]


def storm(w: WireCluster, judge: Judge, asks: int, steps_between: int) -> list[dict]:
    conn = w.connect(2)
    for _ in range(asks):
        ask(w, conn, 23, 4, OffsetsForLeaderEpochRequest((OffsetForLeaderPartition("events", 0, 0, 1),)))
        for _ in range(steps_between):
            w.step()
    (client,) = judge.report()
    return client["storms"]


def test_fifty_validations_within_a_second_are_a_storm(diverged) -> None:
    """librdkafka#4425: a validation retried at RTT speed (400K requests a minute on the brokers)."""
    w, judge, _ = diverged
    (found,) = storm(w, judge, STORM_REQUESTS + 10, 0)  # reported once
    assert (found["api"], found["partition"], found["requests"]) == ("OffsetForLeaderEpoch", 0, STORM_REQUESTS)
    assert found["within_steps"] < STORM_STEPS


def test_one_validation_short_of_the_bound_is_no_storm(diverged) -> None:
    w, judge, _ = diverged
    assert storm(w, judge, STORM_REQUESTS - 1, 0) == []


def test_validations_retried_with_back_off_are_no_storm(diverged) -> None:
    w, judge, _ = diverged
    assert storm(w, judge, STORM_REQUESTS * 2, 3) == []  # 30 ms apart: 33 a second, under the bound


def test_a_stuck_client_that_kept_asking_spins(diverged) -> None:
    """librdkafka#4425's shape: the same request at round-trip speed, answered with an error each time (here
    a fetch with the fenced epoch 0), no progress. Asking every 50 steps (a 500 ms long poll) is no spin."""
    w, judge, served_to = diverged
    conn = w.connect(2)
    bound = verdict(judge)["step"] + STUCK_AFTER_STEPS
    while w.step_no <= bound:
        part = fetch(w, conn, served_to, epoch=0).partitions[0]
        assert part.error_code == Errors.FENCED_LEADER_EPOCH
        w.step()
    event = verdict(judge)
    assert event["verdict"] == "stuck" and event["spin"].startswith("Fetch x")
    assert int(event["spin"].removeprefix("Fetch x")) >= SPIN_REQUESTS


def test_a_stuck_client_long_polling_does_not_spin(diverged) -> None:
    w, judge, served_to = diverged
    conn = w.connect(2)
    bound = verdict(judge)["step"] + STUCK_AFTER_STEPS
    while w.step_no <= bound:
        fetch(w, conn, served_to, epoch=0)
        for _ in range(50):
            w.step()
    event = verdict(judge)
    assert (event["verdict"], event["spin"]) == ("stuck", "")


def served_whole(scenario: str = "false-divergence") -> tuple[WireCluster, Judge, object, int]:
    """A healthy cluster whose producers paused at 20+ records; the client fetched events-0 from 0 to the end."""
    w, judge = judged(scenario)
    run_until(w, lambda: w.cluster.log(1, TP).high_watermark >= 20)
    w.fire(PauseProducers())
    for _ in range(20):
        w.step()
    conn = w.connect(1)
    return w, judge, conn, fetch(w, conn, 0).partitions[0].high_watermark


def lie(whole: bool = False) -> tuple[WireCluster, Judge, object, int, int]:
    """false-divergence by hand: a client read events-0 from leader 1 to its end (epoch 0) in one fetch
    from 0, the leader moved cleanly to broker 2, which answers the client's first validation 5 short (or,
    `whole`, at 0: where that fetch began); returns the cluster, the judge, the client's connection to
    broker 2, the end it was served and the answer it got."""
    from epochguard.sim.faults import PreferredElection
    from epochguard.wire.scenarios import StaleEpochAnswer

    w, judge, _, served_to = served_whole()
    w.fire(StaleEpochAnswer(TP, 2, served_to if whole else 5))
    w.fire(PreferredElection(TP, 2))
    run_until(w, lambda: w.cluster.acting_leader(TP) == 2)
    conn = w.connect(2)
    ask_epoch = OffsetsForLeaderEpochRequest((OffsetForLeaderPartition("events", 0, 0, 1),))
    answer = ask(w, conn, 23, 4, ask_epoch).partitions[0]
    assert (answer.leader_epoch, answer.end_offset) == (0, 0 if whole else served_to - 5)  # the truth: served_to
    assert ask(w, conn, 23, 4, ask_epoch).partitions[0].end_offset == served_to  # one lie per client
    return w, judge, conn, served_to, answer.end_offset


@pytest.fixture
def lied_to() -> tuple[WireCluster, Judge, object, int, int]:
    return lie()


def test_going_back_on_a_stale_validation_answer_is_a_false_alarm_not_a_divergence(lied_to) -> None:
    w, judge, conn, served_to, answer = lied_to
    fetch(w, conn, answer, epoch=1)
    (client,) = judge.report()
    assert client["divergences"] == []
    assert [(a["offset"], a["answer"], a["served_end"], a["redelivered"]) for a in client["false_alarms"]] == [
        (answer, answer, served_to, 5)]


def test_going_on_after_a_stale_validation_answer_is_nothing(lied_to) -> None:
    w, judge, conn, served_to, _ = lied_to
    fetch(w, conn, served_to, epoch=1)
    (client,) = judge.report()
    assert client["divergences"] == [] and client["false_alarms"] == []


def test_going_on_from_below_the_answer_is_nothing(lied_to) -> None:
    """kafka-python in a serve run: served 0-534 in one fetch, its application at 500 when told 530: it went
    on from 500, its own position (it had read none of 500-534 yet), not back."""
    w, judge, conn, _, answer = lied_to
    fetch(w, conn, answer - 3, epoch=1)
    fetch(w, conn, answer, epoch=1)  # and later passing the answer is no reaction to it either
    (client,) = judge.report()
    assert client["divergences"] == [] and client["false_alarms"] == []


def test_going_back_to_the_answer_is_a_false_alarm_even_where_the_last_fetch_began() -> None:
    """The answer can fall where the client's last fetch began (a serve run: fetched at 530, served to 535,
    told 530): going there is acting on the answer, not a lost answer fetched again."""
    w, judge, conn, served_to, answer = lie(whole=True)
    fetch(w, conn, answer, epoch=1)
    (client,) = judge.report()
    assert [(a["offset"], a["redelivered"]) for a in client["false_alarms"]] == [(0, served_to)]


def test_a_client_that_keeps_asking_but_is_served_nothing_new_stalls() -> None:
    """librdkafka#4425 (a partition never consumed again): the client asks on (here fetches fenced with a
    stale epoch, answered with an error) for the bound while the leader's log grows; one that keeps being
    served does not stall, nor one that stopped asking."""
    w, judge = judged("false-divergence")
    run_until(w, lambda: w.cluster.log(1, TP).high_watermark >= 20)
    stuck, healthy, gone = w.connect(1), w.connect(1), w.connect(1)
    header = lambda name: codec.RequestHeader(1, 12, 1, name)  # noqa: E731
    for conn, name in ((stuck, "stuck"), (healthy, "healthy"), (gone, "gone")):
        w.submit(conn, header(name), FetchRequest((FetchPartition("events", 0, 0),), max_wait_ms=0, version=12))
    w.drain()
    position = first_end = w.cluster.log(1, TP).high_watermark
    for i in range(STUCK_AFTER_STEPS + 50):
        w.step()
        if i % 20 == 0:
            w.submit(stuck, header("stuck"), FetchRequest((FetchPartition("events", 0, 5, 7),), max_wait_ms=0,
                                                           version=12))  # epoch 7: not yet, fenced
            w.submit(healthy, header("healthy"), FetchRequest((FetchPartition("events", 0, position),), max_wait_ms=0,
                                                               version=12))
            for _, _, response in w.drain():
                spans = batch_spans(response.partitions[0].records)
                position = spans[-1][1] + 1 if spans else position
    judge.finish()
    report = {c["client_id"]: c for c in judge.report()}
    assert [(s["partition"], s["served_end"]) for s in report["stuck"]["stalls"]] == [(0, first_end)]
    assert report["healthy"]["stalls"] == [] and report["gone"]["stalls"] == []


def jumped(ask_bounds: bool = False) -> tuple[WireCluster, Judge, object, int, int]:
    """log-start-jump by hand: a client read events-0 from leader 1 to its end (epoch 0); the leader moved
    cleanly to broker 2, which read no client request for 1.5 s (`SlowClients`) while the producer wrote to
    it and DeleteRecords moved its log start to its high watermark; then the client's fetch at its position
    is answered OFFSET_OUT_OF_RANGE (`ask_bounds`: it asks ListOffsets(earliest) instead, as kafka-go's
    reader does on a new connection, and is answered the log start). Returns the cluster, the judge, the
    connection to broker 2, the position and the new log start."""
    from epochguard.sim.faults import DeleteRecords, PreferredElection
    from epochguard.wire.scenarios import SlowClients

    w, judge = judged("log-start-jump")
    run_until(w, lambda: w.cluster.log(1, TP).high_watermark >= 20)
    position = fetch(w, w.connect(1), 0).partitions[0].high_watermark
    w.fire(SlowClients(2, 1500))
    slow_from = w.step_no
    w.fire(PreferredElection(TP, 2))
    conn = w.connect(2)
    if ask_bounds:
        held = ListOffsetsRequest((ListOffsetsPartition("events", 0, EARLIEST_TIMESTAMP, 1),))
        w.submit(conn, codec.RequestHeader(2, 7, 1, "scripted"), held)
    else:
        held = FetchRequest((FetchPartition("events", 0, position, 1),), max_wait_ms=0, version=12)
        w.submit(conn, codec.RequestHeader(1, 12, 1, "scripted"), held)
    run_until(w, lambda: w.cluster.log(2, TP).high_watermark >= position + 10)
    w.fire(DeleteRecords(TP))
    start = w.cluster.log(2, TP).log_start_offset
    assert start >= position + 10
    answers: list = []
    while not answers:
        assert w.step_no < 2000
        w.step()
        answered_at = w.step_no
        answers.extend(r for c, _, r in w.drain() if c is conn)
    assert answered_at >= slow_from + 150  # read once the 1.5 s were over, not before
    if ask_bounds:
        assert answers[0].partitions[0].offset == start
    else:
        assert answers[0].partitions[0].error_code == Errors.OFFSET_OUT_OF_RANGE
    assert w.cluster.log(3, TP).log_start_offset == start  # the followers followed meanwhile
    return w, judge, conn, position, start


def test_resuming_at_the_log_start_after_out_of_range_is_start() -> None:
    w, judge, conn, position, start = jumped()
    # Validating the old epoch is no divergence: epoch 0 is below the cache's first, the answer its start.
    answer = ask(w, conn, 23, 4, OffsetsForLeaderEpochRequest((OffsetForLeaderPartition("events", 0, 0, 1),)))
    assert (answer.partitions[0].leader_epoch, answer.partitions[0].end_offset) == (0, start)
    assert fetch(w, conn, start, epoch=1).partitions[0].error_code == Errors.NONE
    (client,) = judge.report()
    assert client["divergences"] == []
    assert [(o["offset"], o["log_start"], o["how"], o["to"], o["skipped"]) for o in client["out_of_range"]] == [
        (position, start, "start", start, 0)]


def test_going_past_the_log_start_after_out_of_range_is_forward_and_counts_what_it_skipped() -> None:
    w, judge, conn, _position, start = jumped()
    end = w.cluster.log(2, TP).high_watermark
    assert end > start
    fetch(w, conn, end, epoch=1)
    (client,) = judge.report()
    assert [(o["how"], o["to"], o["skipped"]) for o in client["out_of_range"]] == [("forward", end, end - start)]


def test_no_fetch_after_out_of_range_is_stopped_after_the_bound() -> None:
    w, judge, conn, position, _start = jumped()
    fetch(w, conn, position, epoch=1)  # out of range again: still one event, undecided
    for _ in range(STUCK_AFTER_STEPS - 1):
        w.step()
    assert [o["how"] for o in judge.report()[0]["out_of_range"]] == [""]
    for _ in range(20):
        w.step()
    assert [o["how"] for o in judge.report()[0]["out_of_range"]] == ["stopped"]


def test_out_of_range_above_the_log_end_is_not_a_log_start_event() -> None:
    w, judge = judged("log-start-jump")
    end = w.cluster.log(1, TP).log_end_offset
    assert fetch(w, w.connect(1), end + 100).partitions[0].error_code == Errors.OFFSET_OUT_OF_RANGE
    assert judge.report()[0]["out_of_range"] == []


def test_going_to_the_log_start_without_an_out_of_range_answer_is_judged_too() -> None:
    """kafka-go's reader asks for the log's bounds on every new connection and goes to the first offset
    when its own is below it: it never fetches out of range, yet it went on at the log start."""
    w, judge, conn, position, start = jumped(ask_bounds=True)
    assert judge.report()[0]["out_of_range"] == []
    fetch(w, conn, start, epoch=1)
    fetch(w, conn, start + 1, epoch=1)  # once only
    (client,) = judge.report()
    assert [(o["offset"], o["how"], o["to"]) for o in client["out_of_range"]] == [(position, "start", start)]


def read_committed(w: WireCluster, conn, offset: int = 0, isolation: int = 1) -> FetchResponse:
    request = FetchRequest((FetchPartition("events", 0, offset, -1),), max_wait_ms=0, isolation_level=isolation,
                           version=12)
    return ask(w, conn, 1, 12, request)


def marker_lost() -> tuple[WireCluster, Judge, list[int]]:
    """marker-truncated by hand: the ABORT marker of a replicated transaction reaches broker 1 alone, broker
    1 dies, broker 2 is elected uncleanly and the producer writes its next transactions there. Returns the
    cluster, the judge, and the offsets of the orphaned (aborted, as the producer was told) records."""
    from epochguard.wire.scenarios import abort_pending

    w = WireCluster(build("marker-truncated"), 0, ADDRESSES)
    judge = Judge()
    w.observers.append(judge)
    producer = w.cluster.producers[0]
    run_until(w, w.ready)
    run_until(w, lambda: abort_pending(TP)(w.cluster))
    w.fire(Isolate(1))
    run_until(w, lambda: producer.pending_marker(TP) is None and w.cluster.controller.state(TP).isr == (1,))
    w.fire(PauseProducers())
    orphan = [b for b in w.cluster.log(2, TP).batch_infos() if b.is_transactional and b.control is None]
    start = w.cluster.log(2, TP).last_stable_offset
    orphaned = [o for b in orphan for o in range(b.base_offset, b.next_offset) if o >= start]
    assert orphaned and w.cluster.log(1, TP).last_stable_offset > max(orphaned)  # aborted on 1, open on 2
    w.fire(Crash(1))
    w.fire(Heal(broker_node(1)))
    w.fire(ResumeProducers())
    run_until(w, lambda: w.cluster.acting_leader(TP) == 2 and w.cluster.log(2, TP).last_stable_offset > max(orphaned))
    return w, judge, orphaned


def test_records_of_an_aborted_transaction_served_to_read_committed_are_aborted_reads() -> None:
    w, judge, orphaned = marker_lost()
    conn = w.connect(2)
    read_committed(w, conn)
    (client,) = judge.report()
    assert [r["offset"] for r in client["aborted_reads"]] == orphaned
    read_committed(w, conn)  # served again: each record once
    assert len(judge.report()[0]["aborted_reads"]) == len(orphaned)


def test_read_uncommitted_and_an_intact_abort_are_no_aborted_reads() -> None:
    w, judge, _ = marker_lost()
    read_committed(w, w.connect(2), isolation=0)  # read_uncommitted: every record is the client's to take
    assert judge.report()[0]["aborted_reads"] == []
    w = WireCluster(build("transactions"), 0, ADDRESSES)  # markers intact: the filter removes the aborted
    judge = Judge()
    w.observers.append(judge)
    run_until(w, lambda: len(w.cluster.producers[0].aborted) >= 20)
    read_committed(w, w.connect(w.cluster.acting_leader(TP)))
    assert judge.report()[0]["aborted_reads"] == []


class _Answers:
    """An observer keeping the answers to one request."""

    def __init__(self, request: object, out: list) -> None:
        self.request, self.out = request, out

    def on_exchange(self, conn, header, request, response, applied_step, step) -> None:
        if request is self.request:
            self.out.append(response)

    def on_fault(self, fault, step) -> None: ...

    def on_step(self, wire) -> None: ...


def handed_over(committed_epoch: int = 0, in_flight: bool = False) -> tuple[WireCluster, Judge, int, int]:
    """handoff-truncation by hand: member A of group g read events-0 to its end from broker 1 (records only
    broker 1 has among them), committed that position with `committed_epoch` and left (`in_flight`: with a
    fetch from 0 still parked on broker 1, answered with records after it left);
    broker 1 died and broker 2 was elected uncleanly and took new records past it. Returns the cluster, the
    judge, A's position and the divergence point."""
    w, judge = leader_alone("handoff-truncation")
    conn = w.connect(1)
    request = FetchRequest((FetchPartition("events", 0, 0, -1),), max_wait_ms=0, version=12)
    served_to = ask(w, conn, 1, 12, request, client="A").partitions[0].high_watermark
    position = served_to
    commit = OffsetCommitRequest("g", (OffsetCommitPartition("events", 0, position, committed_epoch),), version=8)
    ask(w, conn, 8, 8, commit, client="A")
    late: list = []  # answers to A's parked fetch
    if in_flight:  # min_bytes out of reach: parked until max_wait, then answered with what there is
        parked = FetchRequest((FetchPartition("events", 0, 0, -1),), max_wait_ms=300, min_bytes=1 << 30, version=12)
        w.observers.append(_Answers(parked, late))
        w.submit(conn, codec.RequestHeader(1, 12, 2, "A"), parked)
    ask(w, w.connect(3), 13, 4, LeaveGroupRequest("g", (LeaveGroupMember("A-1"),)), client="A")
    if in_flight:
        run_until(w, lambda: late)
        assert late[0].partitions[0].records  # records, answered after it left
    w.fire(Crash(1))
    w.fire(Heal(broker_node(1)))
    w.fire(ResumeProducers())
    run_until(w, lambda: w.cluster.acting_leader(TP) == 2)
    run_until(w, lambda: w.cluster.log(2, TP).high_watermark > served_to)
    point = w.cluster.log(2, TP).leader_epoch_cache.end_offset_for(0, w.cluster.log(2, TP).log_end_offset)[1]
    assert point < position
    return w, judge, position, point


def take_over(w: WireCluster) -> tuple[object, int, int]:
    conn = w.connect(2)
    (p,) = ask(w, conn, 9, 8, OffsetFetchRequest("g", (TP,), version=8), client="B").partitions
    return conn, p.committed_offset, p.committed_leader_epoch


def clients(judge: Judge) -> dict[str, dict]:
    return {c["client_id"]: c for c in judge.report()}


def test_a_member_handed_a_truncated_position_that_fetches_from_it_is_silent() -> None:
    w, judge, position, point = handed_over()
    conn, offset, epoch = take_over(w)
    assert (offset, epoch) == (position, 0)
    assert ask(w, conn, 1, 12, FetchRequest((FetchPartition("events", 0, offset, 1),), max_wait_ms=0, version=12),
               client="B").partitions[0].error_code == Errors.NONE
    seen = clients(judge)
    assert seen["A"]["divergences"] == []  # it left: it fetches no more
    (event,) = seen["B"]["divergences"]
    assert (event["from"], event["offset"], event["served_end"], event["verdict"], event["skipped"]) == (
        "commit", point, position, "silent", position - point)


def test_a_member_that_validates_the_committed_epoch_and_goes_back_detected_it() -> None:
    w, judge, _position, point = handed_over()
    conn, _offset, epoch = take_over(w)
    answer = ask(w, conn, 23, 4, OffsetsForLeaderEpochRequest((OffsetForLeaderPartition("events", 0, epoch, 1),)),
                 client="B").partitions[0]
    assert answer.end_offset == point
    ask(w, conn, 1, 12, FetchRequest((FetchPartition("events", 0, point, 1),), max_wait_ms=0, version=12), client="B")
    (event,) = clients(judge)["B"]["divergences"]
    assert (event["from"], event["verdict"], event["how"]) == ("commit", "detected", "rewound")


def test_a_commit_without_an_epoch_is_placed_by_what_the_committer_was_served() -> None:
    """kafka-python before KIP-320 commits epoch -1: the new member cannot validate, but the position still
    lies past what the log kept: the event is there (from the batch A was served at offset-1)."""
    w, judge, _position, _point = handed_over(committed_epoch=-1)
    conn, offset, epoch = take_over(w)
    assert epoch == -1
    ask(w, conn, 1, 12, FetchRequest((FetchPartition("events", 0, offset, 1),), max_wait_ms=0, version=12), client="B")
    (event,) = clients(judge)["B"]["divergences"]
    assert (event["from"], event["verdict"]) == ("commit", "silent")


def test_a_position_the_log_kept_is_no_event() -> None:
    w, judge, _position, point = handed_over()
    conn, _, _ = take_over(w)
    commit = OffsetCommitRequest("g", (OffsetCommitPartition("events", 0, point, 1),), version=8)
    ask(w, conn, 8, 8, commit, client="B")  # the member that took over commits the divergence point
    ask(w, w.connect(2), 9, 8, OffsetFetchRequest("g", (TP,), version=8), client="C")
    assert clients(judge)["C"]["divergences"] == []


def test_a_fetch_in_flight_when_the_member_left_is_not_judged() -> None:
    w, judge, _position, _point = handed_over(in_flight=True)
    take_over(w)
    for _ in range(STUCK_AFTER_STEPS + 10):
        w.step()
    assert clients(judge)["A"]["divergences"] == []


# --- the per-client anomalies from what the server served and acknowledged ----------------------------
def anomalies(w: WireCluster, judge: Judge, client: str = "scripted") -> list[tuple[str, int, int]]:
    judge.on_step(w)
    judge.finish()
    report = {c["client_id"]: c for c in judge.report()}
    return [(a["anomaly"] + (f"/{a['tag']}" if a["tag"] else ""), a["offset"], a["count"])
            for a in report[client]["anomalies"]]


def test_served_phantoms_are_a_phantom_read_and_the_jump_past_them_no_skip(diverged) -> None:
    w, judge, served_to = diverged
    point = w.cluster.log(2, TP).leader_epoch_cache.end_offset_for(0, w.cluster.log(2, TP).log_end_offset)[1]
    fetch(w, w.connect(2), served_to)
    assert anomalies(w, judge) == [("phantom-read", point, served_to - point)]  # `silent` owns the skip


@pytest.mark.parametrize("back", ["validated", "listed"])
def test_going_back_after_phantoms_is_the_divergences_not_a_rewind(diverged, back: str) -> None:
    w, judge, _ = diverged
    conn = w.connect(2)
    if back == "validated":
        answer = ask(w, conn, 23, 4, OffsetsForLeaderEpochRequest((OffsetForLeaderPartition("events", 0, 0, 1),)))
        to = answer.partitions[0].end_offset
    else:
        ask(w, conn, 2, 4, ListOffsetsRequest((ListOffsetsPartition("events", 0, EARLIEST_TIMESTAMP),)))
        to = 0
    fetch(w, conn, to, epoch=1)
    assert [name for name, _, _ in anomalies(w, judge)] == ["phantom-read"]


def test_an_answer_dropped_for_a_second_validation_of_the_old_epoch_is_no_rewind(diverged) -> None:
    """kafka-python 3.0.12 in compat's idempotent-truncation row: after the election it validated epoch 0
    (answered 935), fetched at 935 and was served the new leader's epoch-1 records, validated epoch 0 again
    (935 again) and fetched at 935 again; its delivery log holds 935 onwards once. A client that had consumed
    any of that answer would have validated epoch 1: the second answer sent it nowhere, it had dropped the
    records, and going back on the cluster's word (a rewind) it was not."""
    w, judge, _ = diverged
    conn = w.connect(2)
    validate = OffsetsForLeaderEpochRequest((OffsetForLeaderPartition("events", 0, 0, 1),))
    point = ask(w, conn, 23, 4, validate).partitions[0].end_offset
    served = fetch(w, conn, point, epoch=1).partitions[0]
    assert served.records and all(epoch >= 1 for _b, _l, epoch, _c in batch_spans(served.records))
    assert ask(w, conn, 23, 4, validate).partitions[0].end_offset == point
    fetch(w, conn, point, epoch=1)
    assert [name for name, _, _ in anomalies(w, judge)] == ["phantom-read"]
    assert (verdict(judge)["verdict"], verdict(judge)["how"]) == ("detected", "rewound")


def test_an_answer_fetched_again_was_never_consumed_and_is_no_rewind() -> None:
    """A fetch at the offset of the last answer (its connection died), or inside it (the client dropped what
    it had buffered, librdkafka on a leader change), says how much of it the client consumed."""
    w, judge, conn, end = served_whole()
    fetch(w, conn, 0)
    fetch(w, conn, 5)
    fetch(w, conn, end)
    assert anomalies(w, judge) == []


def test_going_back_on_the_clusters_word_with_nothing_replaced_is_a_rewind(lied_to) -> None:
    """false-divergence: the stale validation answer sends it back; Jepsen's nonmonotonic-poll, the false
    alarm's record-level face (a refetch at the answer is not a lost answer: it was told to go there)."""
    w, judge, conn, served_to, answer = lied_to
    fetch(w, conn, answer, epoch=1)
    assert anomalies(w, judge) == [("rewind", answer, served_to - answer)]


def test_a_fetch_past_records_the_log_holds_is_a_skip() -> None:
    w, judge, conn, end = served_whole()
    w.fire(ResumeProducers())
    run_until(w, lambda: w.cluster.log(1, TP).high_watermark >= end + 5)
    fetch(w, conn, end + 2)
    assert anomalies(w, judge) == [("skip", end, 2)]  # end and end + 1 never served


def test_a_retry_rebatched_and_written_twice_is_a_duplicate_write() -> None:
    """lagging-leader: librdkafka's and kafka-go's non-idempotent producers sent a record to broker 1, which
    wrote it (and broker 2 copied it) but died before answering; the retry, in a batch of other records, was
    acknowledged by broker 2, which then held the record twice (both delivery logs said duplicate-write). The
    server judges acknowledged records by value, so it names it too; by batch CRC it could not (the retried
    batch is another batch). Here the first send's answer is acks=1, which the judge takes for no ack."""
    from epochguard.protocol.messages import ProducePartition, ProduceRequest
    from epochguard.records import encode_batch

    w, judge, _conn, _end = served_whole()
    inp = TopicPartition("input", 0)
    conn = w.connect(w.cluster.acting_leader(inp))
    for acks, values in ((1, [b"once"]), (-1, [b"once", b"after"])):
        records = encode_batch([(None, v) for v in values], partition_leader_epoch=-1)
        answer = ask(w, conn, 0, 9, ProduceRequest((ProducePartition("input", 0, records),), acks=acks,
                                                   timeout_ms=60000, version=9))
        assert answer.partitions[0].error_code == Errors.NONE
    assert [name for name, _, _ in anomalies(w, judge)] == ["duplicate-write"]


def test_an_acknowledged_batch_an_unclean_election_lost_is_an_expected_lost_ack() -> None:
    from epochguard.protocol.messages import ProducePartition, ProduceRequest
    from epochguard.records import encode_batch

    w, judge = leader_alone("unclean-election")
    inp = TopicPartition("input", 0)
    leader = w.cluster.acting_leader(inp)
    conn = w.connect(leader)
    records = encode_batch([(None, b"lost")], partition_leader_epoch=-1)
    w.submit(conn, codec.RequestHeader(0, 9, 1, "scripted"),
             ProduceRequest((ProducePartition("input", 0, records),), acks=-1, timeout_ms=60000, version=9))
    answers: list = []
    for _ in range(3000):
        answers += [r for c, _, r in w.drain() if c is conn]
        if answers:
            break
        w.step()
    assert answers[0].partitions[0].error_code == Errors.NONE  # once the ISR shrank to the leader alone
    w.fire(Crash(leader))
    run_until(w, lambda: w.cluster.acting_leader(inp) not in (None, leader))
    for _ in range(50):
        w.step()
    assert [name for name, _, _ in anomalies(w, judge)] == ["lost-ack/expected"]


def test_a_batch_a_zombie_acknowledged_after_the_election_is_an_expected_lost_ack() -> None:
    """zombie-leader: broker 1, cut off from the controller, still leads in epoch 0 and acknowledges acks=all
    batches (its ISR is itself) after the controller elected broker 2 uncleanly in epoch 1. The batch is
    lost when broker 1 hears of epoch 1 and truncates: allowed by that election, as its epoch (0, the
    zombie's, not the controller's 1) says."""
    from epochguard.protocol.messages import ProducePartition, ProduceRequest
    from epochguard.records import encode_batch

    w, judge = leader_alone("zombie-leader")
    inp = TopicPartition("input", 0)
    conn = w.connect(1)
    first = encode_batch([(None, b"kept")], partition_leader_epoch=-1)  # followers lag: the ISR shrinks to 1
    ask(w, conn, 0, 9, ProduceRequest((ProducePartition("input", 0, first),), acks=1, timeout_ms=60000, version=9))
    run_until(w, lambda: w.cluster.controller.state(inp).isr == (1,), limit=5000)
    w.fire(Zombie(1))
    run_until(w, lambda: w.cluster.acting_leader(inp) not in (None, 1), limit=5000)
    zombie = w.cluster.log(1, inp)
    assert w.cluster.controller.state(inp).leader_epoch == 1 and zombie.leader_epoch_cache.latest_epoch == 0
    records = encode_batch([(None, b"zombie")], partition_leader_epoch=-1)
    answer = ask(w, conn, 0, 9, ProduceRequest((ProducePartition("input", 0, records),), acks=-1, timeout_ms=60000,
                                               version=9))
    assert answer.partitions[0].error_code == Errors.NONE  # the zombie acknowledged it
    w.fire(Heal(broker_node(1)))
    run_until(w, lambda: zombie.log_end_offset == w.cluster.log(2, inp).log_end_offset, limit=5000)  # truncated
    for _ in range(50):
        w.step()
    assert [name for name, _, _ in anomalies(w, judge)] == ["lost-ack/expected"]
    assert {c["client_id"]: c for c in judge.report()}["scripted"]["acks_lost"] == []  # acked-durable: exempt too


def test_a_zombies_out_of_range_answer_is_no_follower_reset() -> None:
    """zombie-leader: broker 1 still leads in its own eyes after the controller elected broker 2; a client
    that asks it past its log end and then lists offsets on it talks to the leader it was told of, not to
    a preferred read replica (KIP-392's follower-reset is about those)."""
    w, judge = leader_alone("zombie-leader")
    w.fire(Zombie(1))
    run_until(w, lambda: w.cluster.acting_leader(TP) not in (None, 1), limit=5000)
    zombie = w.connect(1)
    assert fetch(w, zombie, w.cluster.log(1, TP).log_end_offset + 5).partitions[0].error_code == \
        Errors.OFFSET_OUT_OF_RANGE
    ask(w, zombie, 2, 7, ListOffsetsRequest((ListOffsetsPartition("events", 0, EARLIEST_TIMESTAMP, 0),)))
    judge.on_step(w)
    judge.finish()
    assert {c["client_id"]: c for c in judge.report()}["scripted"]["follower_out_of_range"] == []

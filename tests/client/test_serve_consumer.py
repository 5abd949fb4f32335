"""`epochguard.client` consumers against `epochguard serve` (the simulated cluster on the real wire): a
clean round trip checked against kafka-python reading the same log, commits with their leader epochs,
and the divergence scenarios, where the server must judge the client `detected` and, under
auto_offset_reset="none", `LogTruncationError` must name the divergence point the server found."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from epochguard.client import AsyncConsumer, KafkaConsumer
from epochguard.errors import ClientClosedError, LogTruncationError
from epochguard.types import OffsetAndMetadata, TopicPartition
from tests.wire.serving import Served

EVENTS_0 = TopicPartition("events", 0)


def _server_entry(result: dict[str, Any], client_id: str) -> dict[str, Any]:
    (entry,) = [c for c in result["clients"] if c["client_id"] == client_id]
    return entry


def test_clean_round_trip_matches_kafka_python_and_commits_carry_the_epoch() -> None:
    kafka = pytest.importorskip("kafka", reason="kafka-python (the dev extra) is the reference reader")
    served = Served("clean")
    try:
        consumer = KafkaConsumer(bootstrap_servers=served.bootstrap, client_id="eg-clean", group_id="g1",
                                 auto_offset_reset="earliest", enable_auto_commit=False)
        partitions = consumer.partitions_for_topic("events")
        assert 0 in partitions
        consumer.assign([EVENTS_0])
        got: list[tuple[int, bytes | None, int | None]] = []
        end = time.monotonic() + 20
        while len(got) < 200 and time.monotonic() < end:
            for r in consumer.poll(timeout_ms=200).get(EVENTS_0, []):
                got.append((r.offset, r.value, r.leader_epoch))
        assert consumer.position(EVENTS_0) == got[-1][0] + 1
        consumer.commit()
        committed = consumer.committed(EVENTS_0)
        assert committed == OffsetAndMetadata(got[-1][0] + 1, "", got[-1][2])
        consumer.close()
        with pytest.raises(ClientClosedError):
            consumer.poll()
        # A new member of the group resumes exactly there.
        again = KafkaConsumer(bootstrap_servers=served.bootstrap, client_id="eg-resume", group_id="g1",
                              enable_auto_commit=False, auto_offset_reset="none")
        again.assign([EVENTS_0])
        assert again.position(EVENTS_0) == got[-1][0] + 1
        again.close()
        # poll_arrow hands out the same records, as Arrow rows.
        arrow = KafkaConsumer(bootstrap_servers=served.bootstrap, client_id="eg-arrow", enable_auto_commit=False)
        arrow.assign([EVENTS_0])
        arrow.seek(EVENTS_0, 0)
        rows: list[tuple[int, bytes | None, int | None]] = []
        end = time.monotonic() + 20
        while len(rows) < len(got) and time.monotonic() < end:
            for tp, batch in arrow.poll_arrow(timeout_ms=200).items():
                assert tp == EVENTS_0
                rows += [(r["offset"], r["value"], r["leader_epoch"]) for r in batch.to_pylist()]
        arrow.close()
        assert rows[:len(got)] == got
        # kafka-python reads the same records from the same log.
        reference = kafka.KafkaConsumer(bootstrap_servers=served.bootstrap, client_id="kp-reference",
                                        enable_auto_commit=False, auto_offset_reset="earliest")
        ktp = kafka.TopicPartition("events", 0)
        assert reference.partitions_for_topic("events") == partitions
        reference.assign([ktp])
        theirs: list[tuple[int, bytes | None, int | None]] = []
        end = time.monotonic() + 20
        while len(theirs) < len(got) and time.monotonic() < end:
            theirs += [(r.offset, r.value, r.leader_epoch) for r in reference.poll(timeout_ms=200).get(ktp, [])]
        reference.close()
    finally:
        result = served.stop()
    assert [o for o, _, _ in got] == list(range(len(got)))  # contiguous from 0, once each
    assert theirs[:len(got)] == got
    entry = _server_entry(result, "eg-clean")
    assert entry["software"].startswith("epochguard")  # ApiVersions v3 names the software
    assert entry["divergences"] == [] and result["violations"] == []


def test_commit_async_takes_the_offsets_at_the_call_and_calls_back() -> None:
    served = Served("clean")
    try:
        seen: list[tuple[dict[TopicPartition, OffsetAndMetadata], Exception | None]] = []
        consumer = KafkaConsumer(bootstrap_servers=served.bootstrap, client_id="eg-async-commit", group_id="g-ac",
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 default_offset_commit_callback=lambda o, e: seen.append((o, e)))
        consumer.assign([EVENTS_0])
        got: list[tuple[int, int | None]] = []
        end = time.monotonic() + 20
        while len(got) < 20 and time.monotonic() < end:
            got += [(r.offset, r.leader_epoch) for r in consumer.poll(timeout_ms=200).get(EVENTS_0, [])]
        at_call = OffsetAndMetadata(got[-1][0] + 1, "", got[-1][1])
        future = consumer.commit_async()
        consumer.poll(timeout_ms=300)  # reading on does not change what that commit carries
        assert future.result(20) is None
        assert seen == [({EVENTS_0: at_call}, None)]
        assert consumer.committed(EVENTS_0) == at_call
        consumer.close()

        async def on_asyncio() -> OffsetAndMetadata | None:
            async with AsyncConsumer(bootstrap_servers=served.bootstrap, client_id="eg-async-commit2",
                                     group_id="g-ac", enable_auto_commit=False) as c:
                await c.commit_async({EVENTS_0: OffsetAndMetadata(3, "x", got[2][1])})
                return await c.committed(EVENTS_0)

        assert asyncio.run(on_asyncio()) == OffsetAndMetadata(3, "x", got[2][1])
    finally:
        served.stop()


def _consume_sync(bootstrap: str, client_id: str, seconds: float, reset: str) -> list[LogTruncationError]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, auto_offset_reset=reset,
                             enable_auto_commit=False)
    tps = [TopicPartition("events", p) for p in sorted(consumer.partitions_for_topic("events"))]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    raised: list[LogTruncationError] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            consumer.poll(timeout_ms=100)
        except LogTruncationError as exc:
            raised.append(exc)
            for tp, divergent in exc.divergent_offsets.items():
                assert divergent is not None
                consumer.seek(tp, divergent)
    consumer.close()
    return raised


async def _consume_async(bootstrap: str, client_id: str, seconds: float) -> int:
    count = 0
    async with AsyncConsumer(bootstrap_servers=bootstrap, client_id=client_id, auto_offset_reset="earliest",
                             enable_auto_commit=False) as consumer:
        tps = [TopicPartition("events", p) for p in sorted(await consumer.partitions_for_topic("events"))]
        await consumer.assign(tps)
        await consumer.seek_to_beginning()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            batch = await consumer.poll(timeout_ms=100)
            count += sum(len(v) for v in batch.values())
    return count


@pytest.mark.parametrize(("scenario", "trigger"), [("unclean-election", "served"), ("zombie-leader", "caught-up")])
def test_sync_and_asyncio_clients_are_judged_detected(scenario: str, trigger: str) -> None:
    served = Served(scenario, "--trigger", trigger, "--timeout-s", "10", "--consumers", "2")
    try:
        async_count: list[int] = []

        def run_async() -> None:
            async_count.append(asyncio.run(_consume_async(served.bootstrap, "eg-async", 11)))

        import threading

        thread = threading.Thread(target=run_async)
        thread.start()
        _consume_sync(served.bootstrap, "eg-sync", 11, "earliest")
        thread.join(30)
    finally:
        result = served.stop()
    assert result["trigger_outcome"] == "met"
    assert async_count and async_count[0] > 0
    for client_id in ("eg-sync", "eg-async"):
        verdicts = [d["verdict"] for d in _server_entry(result, client_id)["divergences"]]
        assert verdicts and set(verdicts) == {"detected"}, (client_id, verdicts)


def test_auto_offset_reset_none_raises_with_the_divergence_point_the_server_found() -> None:
    served = Served("unclean-election", "--trigger", "served", "--timeout-s", "10")
    try:
        raised = _consume_sync(served.bootstrap, "eg-none", 10, "none")
    finally:
        result = served.stop()
    divergences = _server_entry(result, "eg-none")["divergences"]
    assert divergences and {d["verdict"] for d in divergences} == {"detected"}
    assert raised, "no LogTruncationError under auto_offset_reset=none"
    named = {(tp.topic, tp.partition, om.offset) for exc in raised for tp, om in exc.divergent_offsets.items()
             if om is not None}
    found = {(d["topic"], d["partition"], d["offset"]) for d in divergences}
    assert named == found


def test_subscribe_two_members_split_the_partitions_commit_and_hand_over() -> None:
    served = Served("clean")
    try:
        common = dict(bootstrap_servers=served.bootstrap, group_id="eg-group", auto_offset_reset="earliest",
                      partition_assignment_strategy=["roundrobin"], enable_auto_commit=True,
                      heartbeat_interval_ms=200, session_timeout_ms=6_000)
        a = KafkaConsumer(client_id="eg-a", **common)
        b = KafkaConsumer(client_id="eg-b", **common)
        revoked: list[set[TopicPartition]] = []

        class Listener:
            def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
                revoked.append(partitions)

            def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
                pass

        a.subscribe(["events", "input"], listener=Listener())
        b.subscribe(["events", "input"])
        end = time.monotonic() + 20
        while time.monotonic() < end and not (a.assignment() and b.assignment()):
            a.poll(timeout_ms=50)
            b.poll(timeout_ms=50)
        states = [(c._async._group.state, c._async._group.generation, c._async._group.member_id,
                   c._async.last_error) for c in (a, b)]
        assert {len(a.assignment()), len(b.assignment())} == {1}, states
        assert a.assignment() | b.assignment() == {TopicPartition("events", 0), TopicPartition("input", 0)}
        (b_tp,) = b.assignment()
        for _ in range(5):  # b reads what there is (`input` may still be empty), a keeps heartbeating
            b.poll(timeout_ms=100)
            a.poll(timeout_ms=10)
        b_position = b.position(b_tp)
        b.close()  # auto-commit, then LeaveGroup: a takes both partitions
        end = time.monotonic() + 20
        while time.monotonic() < end and len(a.assignment()) < 2:
            a.poll(timeout_ms=50)
        assert a.assignment() == {TopicPartition("events", 0), TopicPartition("input", 0)}
        assert revoked and revoked[-1] and b_tp not in revoked[-1]  # a gave back its own before the rejoin
        assert a.committed(b_tp) is not None and a.committed(b_tp).offset == b_position
        assert a.position(b_tp) == b_position  # resumes where b committed
        a.close()
    finally:
        result = served.stop()
    for cid in ("eg-a", "eg-b"):
        (entry,) = [c for c in result["clients"] if c["client_id"] == cid]
        assert entry["divergences"] == []
        # A position reset but not yet read from has no epoch (Kafka's resetPositionIfNeeded leaves it
        # empty too), so an auto-commit on revoke may commit without one; never past a divergence.
        assert [c for c in entry["commits"] if "divergence" in c["problem"]] == []

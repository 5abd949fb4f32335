"""Real clients' `subscribe()` against `epochguard serve clean`: the classic group protocol on the wire.

Two members of one group split the two topics' partitions between them (round robin), each record is
read by one member only, a commit is fetched back by the next member to join, and the whole run
replays from its trace with byte-identical answers (member ids and generations are deterministic).
"""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from epochguard.wire.drivers.registry import client
from tests.wire.conftest import require
from tests.wire.serving import Served, silences

TOPICS = ["events", "input"]
STALL = Path(__file__).parent / "data" / "kafka-python-stall.trace.jsonl"
BOTH = {("events", 0), ("input", 0)}


def _produce_input(bootstrap: str, n: int) -> None:
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "client.id": "group-feeder"})
    for i in range(n):
        producer.produce("input", value=b"in-%d" % i)
    assert producer.flush(30) == 0


def _poll_until(consumers: list[Any], done: Any, seconds: float, poll: Any, *, fail: bool = True) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for c in consumers:
            poll(c)
        if done():
            return True
    if fail:
        raise AssertionError("timed out")
    return False


def _check_run(served: Served, trace: Path) -> None:
    from epochguard.wire.replay import replay

    result = served.stop()
    assert result["violations"] == []
    assert replay(trace).report() == result["clients"]


def test_confluent_kafka_members_share_the_partitions_and_resume_from_commits(tmp_path: Path) -> None:
    require(client("confluent-kafka"))
    import confluent_kafka

    trace = tmp_path / "run.jsonl"
    served = Served("clean", trace=trace)
    try:
        _produce_input(served.bootstrap, 50)
        conf = {
            "bootstrap.servers": served.bootstrap, "group.id": "ck-group", "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "partition.assignment.strategy": "roundrobin",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
        }
        read: dict[str, dict[tuple[str, int], list[int]]] = {"a": {}, "b": {}}

        def poll(name: str, c: Any) -> None:
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                read[name].setdefault((m.topic(), m.partition()), []).append(m.offset())

        a = confluent_kafka.Consumer({**conf, "client.id": "ck-a"})
        a.subscribe(TOPICS)
        _poll_until([a], lambda: {tp for tp in read["a"]} == BOTH, 30, lambda c: poll("a", c))
        b = confluent_kafka.Consumer({**conf, "client.id": "ck-b"})
        b.subscribe(TOPICS)

        def split() -> bool:
            mine = {(p.topic, p.partition) for p in a.assignment()}
            theirs = {(p.topic, p.partition) for p in b.assignment()}
            return len(mine) == len(theirs) == 1 and mine | theirs == BOTH

        _poll_until([a, b], split, 40, lambda c: poll("a" if c is a else "b", c))
        b_tp = next((p.topic, p.partition) for p in b.assignment())
        _poll_until([a, b], lambda: len(read["b"].get(b_tp, [])) >= 5, 30, lambda c: poll("a" if c is a else "b", c))
        committed_at = read["b"][b_tp][-1] + 1
        b.commit(offsets=[confluent_kafka.TopicPartition(*b_tp, committed_at)], asynchronous=False)
        b.close()  # LeaveGroup: a takes both partitions again
        _poll_until([a], lambda: len(a.assignment()) == 2, 30, lambda c: poll("a", c))
        a.close()
        c = confluent_kafka.Consumer({**conf, "client.id": "ck-c"})
        c.subscribe([b_tp[0]])
        first: list[int] = []

        def poll_c(consumer: Any) -> None:
            m = consumer.poll(0.05)
            if m is not None and m.error() is None and (m.topic(), m.partition()) == b_tp:
                first.append(m.offset())

        _poll_until([c], lambda: bool(first), 30, poll_c)
        c.close()
    except BaseException:
        served.kill()
        raise
    assert first[0] == committed_at  # the committed offset, fetched by the next member
    # b read its partition from where a's generation left it, not from the start again
    a_before = read["a"].get(b_tp, [])
    assert read["b"][b_tp][0] <= (a_before[-1] + 1 if a_before else 0)
    _check_run(served, trace)


# A stalled client is reported in the warnings summary, not turned into an error (pyproject: "error").
@pytest.mark.filterwarnings("default:kafka-python stalled, nothing to judge:UserWarning")
def test_kafka_python_members_share_the_partitions(tmp_path: Path) -> None:
    require(client("kafka-python"))
    require(client("confluent-kafka"))  # feeds `input`
    import kafka
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    trace = tmp_path / "run.jsonl"
    served = Served("clean", trace=trace)
    try:
        _produce_input(served.bootstrap, 50)
        members = [
            kafka.KafkaConsumer(
                *TOPICS, bootstrap_servers=served.bootstrap, group_id="kp-group", client_id=f"kp-{n}",
                auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                heartbeat_interval_ms=300, partition_assignment_strategy=[RoundRobinPartitionAssignor],
            )
            for n in "ab"
        ]
        seen: dict[int, set[tuple[str, int]]] = {0: set(), 1: set()}

        def poll(c: Any) -> None:
            for tp, records in c.poll(timeout_ms=50).items():
                if records:
                    seen[members.index(c)].add((tp.topic, tp.partition))

        def split() -> bool:
            mine, theirs = ({(tp.topic, tp.partition) for tp in m.assignment()} for m in members)
            return len(mine) == len(theirs) == 1 and mine | theirs == BOTH

        shared = _poll_until(members, lambda: split() and all(seen.values()), 60, poll, fail=False)
        for m in members:
            m.close(timeout_ms=5000)  # bounded: a stalled member may not get its LeaveGroup out
    except BaseException:
        served.kill()
        raise
    if not shared:
        _check_run(served, trace)  # serve's side holds all the same: no violation, byte-identical replay
        _judge_a_stalled_member(trace, [f"kp-{n}" for n in "ab"], seen)
        return
    assert seen[0] | seen[1] == BOTH
    _check_run(served, trace)


def _judge_a_stalled_member(trace: Path, client_ids: list[str], seen: dict[int, set[tuple[str, int]]]) -> None:
    """The members did not share the partitions within 60 s. Under load kafka-python 3.0.12 now and then
    stops sending anything after its second SyncGroup (issue 23; the same stall as in
    test_handoff_truncation): its session expires, the other member takes both partitions. That is the
    client's own doing when serve had answered every request it sent before it went silent; reported as
    a warning with the evidence. Anything else fails."""
    stalled = silences(trace, client_ids, quiet_s=30)
    assert stalled, (f"kafka-python members did not share the partitions within 60 s (read {seen}), and "
                     f"neither went silent with every request answered")
    warnings.warn(f"kafka-python stalled, nothing to judge: {'; '.join(stalled.values())}", stacklevel=1)


def test_a_member_silent_after_every_answer_is_named_and_no_other(tmp_path: Path) -> None:
    """serve's trace of a real stall (issue 23 loop, 08:49, load 20-25; the other member's Fetch requests
    after step 700 left out): kp-a's second SyncGroup at step 29, a Metadata at 32, both answered, then no
    request for the rest of the run; kp-b went on fetching, and took both partitions once kp-a's session
    expired."""
    assert silences(STALL, ["kp-a", "kp-b"], quiet_s=30) == {
        "kp-a": "kp-a sent no request for 59 s from step 32, after 13 requests serve all answered"}
    # Had serve left kp-a's last request unanswered, the silence would be the server's to explain.
    records = [json.loads(line) for line in STALL.read_text().splitlines()]
    last = max(i for i, r in enumerate(records) if r["type"] == "response" and r.get("client_id") == "kp-a")
    unanswered = tmp_path / "unanswered.jsonl"
    unanswered.write_text("".join(json.dumps(r) + "\n" for i, r in enumerate(records) if i != last))
    assert silences(unanswered, ["kp-a", "kp-b"], quiet_s=30) == {}


def test_aiokafka_member_commits_and_the_next_one_resumes_there(tmp_path: Path) -> None:
    require(client("aiokafka"))
    import aiokafka

    trace = tmp_path / "run.jsonl"
    served = Served("clean", trace=trace)

    async def run() -> tuple[int, int]:
        def member(name: str) -> Any:
            return aiokafka.AIOKafkaConsumer(
                "events", bootstrap_servers=served.bootstrap, group_id="ak-group", client_id=name,
                auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                heartbeat_interval_ms=300,
            )

        first = member("ak-a")
        await first.start()
        try:
            offsets: list[int] = []
            while len(offsets) < 10:
                batch = await asyncio.wait_for(first.getmany(timeout_ms=200), 30)
                offsets += [r.offset for records in batch.values() for r in records]
            tp = aiokafka.TopicPartition("events", 0)
            await first.commit({tp: offsets[9] + 1})
        finally:
            await first.stop()
        second = member("ak-b")
        await second.start()
        try:
            resumed: list[int] = []
            while not resumed:
                batch = await asyncio.wait_for(second.getmany(timeout_ms=200), 30)
                resumed += [r.offset for records in batch.values() for r in records]
        finally:
            await second.stop()
        return offsets[9] + 1, resumed[0]

    try:
        committed, resumed = asyncio.run(asyncio.wait_for(run(), 90))
    except BaseException:
        served.kill()
        raise
    assert resumed == committed
    _check_run(served, trace)

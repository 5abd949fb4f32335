"""kafka-python's offset and metadata calls on `epochguard.client.KafkaConsumer` (issue 34), differential: kafka-python
3 and epochguard's consumer (blocking and asyncio) asked the same questions of the same Apache Kafka 4.4 cluster
must answer the same.

One topic: partition 0 holds ten records with known timestamps, of which DeleteRecords removed the first four
(its log start is 4); partitions 1 and 2 hold three each, and partition 2 then an open transaction. Compared: `beginning_offsets` (the log start after
DeleteRecords), `end_offsets` (the high watermark; under read_committed the last stable offset, below an open
transaction), `offsets_for_times` (a timestamp between two records, one before the log start, one past the last
record: None), `topics()`, `highwater` (None before a fetch, the high watermark after a poll), `paused()` and
the `metrics()` both report. `bootstrap_connected()` is not compared: kafka-python 3.0.12's answers whether its
bootstrap is still in progress (`KafkaNetClient.bootstrap_connected`: a pending bootstrap future), False once it
has connected; ours answers whether a connection to the cluster is open.
"""

from __future__ import annotations

import asyncio
import json
import math
import time

import pytest

from epochguard.client import AsyncConsumer, KafkaConsumer, KafkaProducer
from epochguard.errors import KafkaTimeoutError
from epochguard.kafka import KafkaCluster
from epochguard.types import TopicPartition

pytestmark = [pytest.mark.kafka, pytest.mark.no_mutants]

kafka = pytest.importorskip("kafka", reason="kafka-python (the dev extra) is the reference client")

TOPIC = "consumer-offsets-diff"
P0, P1, P2 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1), TopicPartition(TOPIC, 2)
BASE_TS = 1_700_000_000_000  # record i of partition 0 has timestamp BASE_TS + 1000 * i


@pytest.fixture(scope="module")
def offsets_topic(kafka_cluster: KafkaCluster) -> KafkaCluster:
    c = kafka_cluster
    # retention.ms -1: the records' timestamps (2023) are older than the default 7 days, so the brokers'
    # retention check (every 5 minutes) would delete them in the middle of a long run (seen in `make test`).
    c.create_topic(TOPIC, {0: [1, 2], 1: [2, 3], 2: [3, 1]}, {"retention.ms": "-1"})  # 2: the transaction's
    producer = KafkaProducer(bootstrap_servers=c.bootstrap, acks="all")
    try:
        for i in range(10):
            producer.send(TOPIC, f"p0-{i}".encode(), partition=0, timestamp_ms=BASE_TS + 1000 * i)
        for i in range(3):
            for p in (1, 2):
                producer.send(TOPIC, f"p{p}-{i}".encode(), partition=p, timestamp_ms=BASE_TS + 1000 * i)
        producer.flush(60)
    finally:
        producer.close()
    c.delete_records(TOPIC, 0, 4)
    return c


def open_transaction(c: KafkaCluster, transactional_id: str, topic: str, partition: int) -> KafkaProducer:
    """A transactional producer with two records of an open transaction on `partition` (abort, then close it)."""
    producer = KafkaProducer(bootstrap_servers=c.bootstrap, transactional_id=transactional_id)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"open-0", partition=partition)
        producer.send(topic, b"open-1", partition=partition)
        producer.flush(60)
    except BaseException:
        producer.close()
        raise
    return producer


def ended(producer: KafkaProducer) -> None:
    try:
        producer.abort_transaction()
    finally:
        producer.close()


def ours(c: KafkaCluster, **kw) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=c.bootstrap, enable_auto_commit=False, **kw)


def theirs(c: KafkaCluster, **kw):
    return kafka.KafkaConsumer(bootstrap_servers=c.bootstrap, enable_auto_commit=False, **kw)


def kp(tp: TopicPartition):
    return kafka.TopicPartition(tp.topic, tp.partition)


def plain(answer: dict) -> dict:
    """{(topic, partition): value as a plain tuple or int}: both clients' answers in one shape."""
    return {(tp.topic, tp.partition): (None if v is None else tuple(v) if isinstance(v, tuple) else v)
            for tp, v in answer.items()}


def test_offsets_and_topics_equal_kafka_python(offsets_topic: KafkaCluster) -> None:
    c = offsets_topic
    mine, ref = ours(c), theirs(c)
    try:
        parts = [P0, P1]
        begin = mine.beginning_offsets(parts)
        assert plain(begin) == plain(ref.beginning_offsets([kp(p) for p in parts])) == {
            (TOPIC, 0): 4, (TOPIC, 1): 0}
        end = mine.end_offsets(parts)
        assert plain(end) == plain(ref.end_offsets([kp(p) for p in parts])) == {(TOPIC, 0): 10, (TOPIC, 1): 3}
        # Between records 6 and 7; before the log start (the first record left); past the last record.
        targets = {P0: BASE_TS + 6_500, P1: BASE_TS + 99_000}
        found = mine.offsets_for_times(targets)
        assert plain(found) == plain(ref.offsets_for_times({kp(tp): ts for tp, ts in targets.items()}))
        assert found[P0] is not None and (found[P0].offset, found[P0].timestamp) == (7, BASE_TS + 7_000)
        assert found[P1] is None
        early = mine.offsets_for_times({P0: BASE_TS})
        assert plain(early) == plain(ref.offsets_for_times({kp(P0): BASE_TS}))
        assert early[P0] is not None and early[P0].offset == 4
        # Nothing here moved a position or assigned a partition.
        assert mine.assignment() == set()
        topics = mine.topics()
        assert TOPIC in topics and "__consumer_offsets" not in topics
        assert topics == ref.topics()
        assert mine.bootstrap_connected()
        with pytest.raises(ValueError, match="cannot be negative"):
            mine.offsets_for_times({P0: -5})
        with pytest.raises(KafkaTimeoutError):
            mine.end_offsets([TopicPartition("no-such-topic", 0)], timeout_ms=500)
    finally:
        mine.close()
        ref.close()


def test_end_offsets_under_read_committed_stop_at_the_open_transaction_as_kafka_pythons(
        offsets_topic: KafkaCluster) -> None:
    c = offsets_topic
    producer = open_transaction(c, "consumer-offsets-diff-txn", TOPIC, 2)
    committed, uncommitted = ours(c, isolation_level="read_committed"), ours(c)
    ref = theirs(c, isolation_level="read_committed")
    try:
        assert uncommitted.end_offsets([P2]) == {P2: 5}  # the high watermark counts the open transaction's records
        assert committed.end_offsets([P2]) == {P2: 3}  # the LSO: its first record
        assert plain(ref.end_offsets([kp(P2)])) == {(TOPIC, 2): 3}
    finally:
        for consumer in (committed, uncommitted, ref):
            consumer.close()
        ended(producer)


def test_highwater_paused_and_metrics_after_a_poll_equal_kafka_python(offsets_topic: KafkaCluster) -> None:
    c = offsets_topic
    mine, ref = ours(c, auto_offset_reset="earliest"), theirs(c, auto_offset_reset="earliest")
    try:
        mine.assign([P0, P1])
        ref.assign([kp(P0), kp(P1)])
        assert mine.highwater(P0) is None and ref.highwater(kp(P0)) is None
        end = mine.end_offsets([P0, P1])
        got: dict[str, int] = {"mine": 0, "ref": 0}
        want = (end[P0] - 4) + end[P1]  # everything left: partition 0 from its log start
        deadline = time.monotonic() + 30
        while (got["mine"] < want or got["ref"] < want) and time.monotonic() < deadline:
            got["mine"] += sum(len(rs) for rs in mine.poll(timeout_ms=200).values())
            got["ref"] += sum(len(rs) for rs in ref.poll(timeout_ms=200).values())
        assert got == {"mine": want, "ref": want}
        for tp in (P0, P1):
            assert mine.highwater(tp) == ref.highwater(kp(tp)) == end[tp]
        mine.pause(P1)
        ref.pause(kp(P1))
        assert {(tp.topic, tp.partition) for tp in mine.paused()} == {
            (tp.topic, tp.partition) for tp in ref.paused()} == {(TOPIC, 1)}
        ours_metrics, ref_metrics = mine.metrics(), ref.metrics()
        # Every metric reported is one of kafka-python's (Java's names), and the gauge both keep agrees.
        for group, values in ours_metrics.items():
            assert set(values) <= set(ref_metrics.get(group, {})), group
        assert ours_metrics["consumer-coordinator-metrics"]["assigned-partitions"] == 2
        assert ours_metrics["consumer-fetch-manager-metrics"]["records-lag-max"] == 0  # read up to the end
        assert ours_metrics["consumer-metrics"]["connection-count"] >= 1
        with pytest.raises(Exception, match="not assigned"):
            mine.highwater(TopicPartition(TOPIC, 7))
    finally:
        mine.close()
        ref.close()


def test_the_asyncio_consumer_answers_as_the_blocking_one(offsets_topic: KafkaCluster) -> None:
    c = offsets_topic

    async def ask() -> tuple:
        async with AsyncConsumer(bootstrap_servers=c.bootstrap, enable_auto_commit=False) as consumer:
            return (await consumer.beginning_offsets([P0, P1]), await consumer.end_offsets([P0]),
                    await consumer.offsets_for_times({P0: BASE_TS + 6_500}), TOPIC in await consumer.topics(),
                    consumer.bootstrap_connected(), consumer.paused())

    begin, end, found, listed, connected, paused = asyncio.run(ask())
    assert begin == {P0: 4, P1: 0} and end == {P0: 10}
    assert found[P0] is not None and found[P0][:2] == (7, BASE_TS + 7_000)
    assert listed and connected and paused == set()


def test_bootstrap_connected_is_false_without_a_broker() -> None:
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:1", enable_auto_commit=False, request_timeout_ms=300)
    try:
        assert not consumer.bootstrap_connected()
        with pytest.raises(KafkaTimeoutError):
            consumer.topics()
        assert not consumer.bootstrap_connected()
        assert math.isnan(consumer.metrics()["consumer-fetch-manager-metrics"]["records-lag-max"])
    finally:
        consumer.close()


def test_watch_finds_a_group_it_was_not_told_about(kafka_cluster: KafkaCluster, tmp_path) -> None:
    """`epochguard watch` with no --group (every group): after an unclean election that loses the committed
    records [10, 20), the group committed at 15 is found with ListGroups and named; the one committed at the
    divergence point is not (its next record is a replacement). Kafka-python commits both, as any client would.
    Then the lso-stuck event on the truncated partition, from a real open transaction."""
    from epochguard.ops.watch import EXIT_CLEAN, EXIT_LOSS, EventLog, watch

    from .test_watch_kafka import commit, produce  # the same steps as the named-group test

    c, topic = kafka_cluster, "consumer-watch-groups"
    state, events = tmp_path / "state.json", tmp_path / "events.jsonl"

    def run_once() -> tuple[int, list]:
        log = EventLog(events)
        try:
            summary = asyncio.run(watch(c.bootstrap, topics=[topic], groups=None, once=True, events=log,
                                        state_path=state, request_timeout_ms=5000, transaction_timeout_ms=1500))
        finally:
            log.close()
        return summary.exit_code, [json.loads(line) for line in events.read_text().splitlines()] if events.exists() \
            else []

    c.create_topic(topic, {0: [1, 2]}, {"min.insync.replicas": "1", "unclean.leader.election.enable": "false"})
    try:
        produce(c, topic, "a", 10)
        assert run_once() == (EXIT_CLEAN, [])
        c.stop_broker(2)
        c.wait_partition(topic, 0, lambda s: s.isr == (1,), "ISR [1]")
        produce(c, topic, "b", 10)
        commit(c, "unnamed-past", topic, 15)
        commit(c, "unnamed-at", topic, 10)
        assert run_once() == (EXIT_CLEAN, [])
        c.stop_broker(1)
        c.wait_partition(topic, 0, lambda s: s.leader == -1, "no leader")
        c.start_broker(2)
        c.elect_leaders(topic, 0, unclean=True)
        c.wait_partition(topic, 0, lambda s: s.leader == 2, "leader 2 (unclean)")
        code, lines = run_once()
        assert code == EXIT_LOSS
        assert [(e["lost_from"], e["lost_until"]) for e in lines if e["event"] == "truncation"] == [(10, 20)]
        groups = [(e["group"], e["committed"], e["phantoms"], e["skips"]) for e in lines
                  if e["event"] == "group-affected"]
        assert groups == [("unnamed-past", 15, [10, 15], [10, 15])]
        # A transaction left open on the truncated partition (as one whose end marker the election dropped):
        # its LSO stands at 10 below the high watermark 12; past the (test's 1.5 s) transaction timeout, one
        # lso-stuck event names the producer DescribeProducers shows.
        txn = open_transaction(c, "consumer-watch-hanging", topic, 0)
        try:
            producer_id = int(txn.metrics()["producer-metrics"]["producer-id"])
            assert run_once()[1] == lines  # first seen: the clock starts
            time.sleep(2)
            _code, after = run_once()
            [stuck] = [e for e in after[len(lines):] if e["event"] == "lso-stuck"]
            assert (stuck["topic"], stuck["partition"], stuck["lso"], stuck["hw"]) == (topic, 0, 10, 12)
            assert [(p["producer_id"], p["current_txn_start_offset"]) for p in stuck["producers"]] == [
                (producer_id, 10)]
            assert run_once()[1] == after  # once per episode
        finally:
            ended(txn)
    finally:
        c.start_broker(1)
        c.wait_partition(topic, 0, lambda s: set(s.isr) == {1, 2}, "ISR [1, 2] again", timeout_s=120)

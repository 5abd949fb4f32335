"""`epochguard watch` against Apache Kafka itself (issue 34): an unclean election that loses committed records
is exactly one truncation event with exactly the lost range, a group committed past the divergence point is
named with its phantoms and skips (and, rewound, its kafka-python consumer reads the replacements), and
clean leader changes (a preferred election, a controlled shutdown, a broker restart) give no event.

The watcher runs as a cron job would (`--once` with a state file, the CLI's own `watch` coroutine) between
the steps: a topic with replicas [1, 2] and min.insync.replicas=1; ten records while both replicas are in
sync; broker 2 stops (ISR [1]); ten more, acknowledged by broker 1 alone (committed: the high watermark is
20); a kafka-python group commits offset 15; broker 1 stops, broker 2 starts and is elected UNCLEAN. Broker
2 holds [0, 10): the committed records [10, 20) are gone.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from epochguard.client import KafkaProducer
from epochguard.kafka import KafkaCluster
from epochguard.ops.watch import EXIT_CLEAN, EXIT_LOSS, EventLog, watch

pytestmark = [pytest.mark.kafka, pytest.mark.no_mutants]

kafka = pytest.importorskip("kafka", reason="kafka-python (the dev extra) is missing")


def run_once(c: KafkaCluster, topic: str, state: Path, events: Path, groups: tuple[str, ...] = (),
             rewind: bool = False) -> tuple[int, list]:
    log = EventLog(events)
    try:
        summary = asyncio.run(watch(c.bootstrap, topics=[topic], groups=groups, rewind_groups=rewind, once=True,
                                    events=log, state_path=state, request_timeout_ms=5000))
    finally:
        log.close()
    lines = [json.loads(line) for line in events.read_text().splitlines()] if events.exists() else []
    return summary.exit_code, lines


def produce(c: KafkaCluster, topic: str, prefix: str, n: int) -> None:
    producer = KafkaProducer(bootstrap_servers=c.bootstrap, acks="all")
    try:
        for i in range(n):
            producer.send(topic, f"{prefix}-{i}".encode(), partition=0).get(60)
    finally:
        producer.close()


def commit(c: KafkaCluster, group: str, topic: str, offset: int) -> None:
    consumer = kafka.KafkaConsumer(bootstrap_servers=c.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.commit({tp: kafka.OffsetAndMetadata(offset, "", -1)})
    finally:
        consumer.close()


def test_an_unclean_election_is_one_truncation_with_the_exact_range_and_the_group_past_it(
    kafka_cluster: KafkaCluster, tmp_path: Path,
) -> None:
    c, topic = kafka_cluster, "watch-unclean"
    state, events = tmp_path / "state.json", tmp_path / "events.jsonl"
    c.create_topic(topic, {0: [1, 2]}, {"min.insync.replicas": "1", "unclean.leader.election.enable": "false"})
    try:
        produce(c, topic, "a", 10)
        assert run_once(c, topic, state, events) == (EXIT_CLEAN, [])
        c.stop_broker(2)
        c.wait_partition(topic, 0, lambda s: s.isr == (1,), "ISR [1]")
        produce(c, topic, "b", 10)
        commit(c, "watch-past", topic, 15)
        commit(c, "watch-at", topic, 10)
        assert run_once(c, topic, state, events) == (EXIT_CLEAN, [])
        assert json.loads(state.read_text())["partitions"] == [[topic, 0, 20, 0, 0]]
        c.stop_broker(1)
        c.wait_partition(topic, 0, lambda s: s.leader == -1, "no leader")
        c.start_broker(2)
        c.elect_leaders(topic, 0, unclean=True)
        c.wait_partition(topic, 0, lambda s: s.leader == 2, "leader 2 (unclean)")
        produce(c, topic, "c", 3)  # the replacements [10, 13), in the new epoch

        code, lines = run_once(c, topic, state, events, groups=("watch-past", "watch-at"), rewind=True)
        assert code == EXIT_LOSS
        truncation = [e for e in lines if e["event"] == "truncation"]
        assert [(e["lost_from"], e["lost_until"], e["lost_count"], e["old_epoch"]) for e in truncation] == [
            (10, 20, 10, 0)]
        assert truncation[0]["new_epoch"] > 0 and truncation[0]["replaced_by_epoch"] == truncation[0]["new_epoch"]
        groups = [e for e in lines if e["event"] == "group-affected"]
        assert [(e["group"], e["committed"], e["phantoms"], e["skips"], e["rewound"]) for e in groups] == [
            ("watch-past", 15, [10, 15], [10, 15], True)]
        # The group's next consumer (kafka-python, which does not validate committed epochs) reads the
        # replacements from the divergence point instead of skipping them.
        reader = kafka.KafkaConsumer(topic, bootstrap_servers=c.bootstrap, group_id="watch-past",
                                     enable_auto_commit=False, consumer_timeout_ms=10_000)
        try:
            got = [(r.offset, r.value) for r in reader]
        finally:
            reader.close()
        assert got == [(10, b"c-0"), (11, b"c-1"), (12, b"c-2")]
        # Reported once: the next run validates against the same leader and stays quiet.
        assert run_once(c, topic, state, events)[0] == EXIT_CLEAN
        assert len(events.read_text().splitlines()) == len(lines)
    finally:
        c.start_broker(1)
        c.wait_partition(topic, 0, lambda s: set(s.isr) == {1, 2}, "ISR [1, 2] again", timeout_s=120)


def test_clean_leader_changes_give_no_event(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    """A preferred election and a controlled shutdown move leadership without losing a committed record."""
    c, topic = kafka_cluster, "watch-clean"
    state, events = tmp_path / "state.json", tmp_path / "events.jsonl"
    c.create_topic(topic, {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
    produce(c, topic, "a", 10)
    assert run_once(c, topic, state, events) == (EXIT_CLEAN, [])
    c.reorder_replicas(topic, 0, [2, 1, 3])
    c.elect_leaders(topic, 0, unclean=False)
    c.wait_partition(topic, 0, lambda s: s.leader == 2, "leader 2 (preferred)")
    produce(c, topic, "b", 5)
    assert run_once(c, topic, state, events) == (EXIT_CLEAN, [])
    try:
        c.stop_broker(2)  # a controlled shutdown: leadership moves to an in-sync replica
        c.wait_partition(topic, 0, lambda s: s.leader in (1, 3), "leader moved off 2")
        assert run_once(c, topic, state, events) == (EXIT_CLEAN, [])
        epochs = json.loads(state.read_text())["partitions"]
        assert [(t, p, hw) for t, p, hw, *_ in epochs] == [(topic, 0, 15)] and epochs[0][4] >= 2
    finally:
        c.start_broker(2)  # a broker restart: it rejoins the ISR as a follower
        c.wait_partition(topic, 0, lambda s: set(s.isr) == {1, 2, 3}, "ISR [1, 2, 3] again", timeout_s=120)
    assert run_once(c, topic, state, events) == (EXIT_CLEAN, [])

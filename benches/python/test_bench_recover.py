"""`epochguard recover` re-publishing lost records to a one-broker Apache Kafka 4.4 (epochguard.kafka; `make
kafka`, skipped without it) against confluent-kafka's `produce()` loop writing the same records, in the
same run, taking turns round by round (`turns.take_turns`; goal: >= 0.8x).

A round of ours is the whole `recover()` of an audit dir listing RECORDS lost records of partition 0 (100-byte
values, a 10-byte key, the original timestamp): reading lost_records.parquet, the dedupe read of the
partition from the divergence point (it holds RECORDS / 10 records the new leader took since, written
untimed by the round's `prepare`, to a topic of its own), the plan, producing with the idempotent producer
(acks=all, the provenance header added), and writing recovered.parquet. A round of confluent-kafka's is
the same records with the same headers (the provenance header included), produced one `produce()` call
each to partition 0 (acks=all, idempotent) and flushed. Both with linger 5 ms and batches of up to
1,000,000 bytes, as the client's producer benchmark.

RECORDS is 1,000,000 (`EPOCHGUARD_BENCH_RECOVER_RECORDS` sets another count), ROUNDS 3
(`EPOCHGUARD_BENCH_RECOVER_ROUNDS`: docs/performance.md's figures are medians of 5).

Run: `pytest benches/python/test_bench_recover.py --benchmark-only --benchmark-group-by=group`.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from turns import take_turns

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (pip install confluent-kafka)")
pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed")
pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is not installed")

RECORDS = int(os.environ.get("EPOCHGUARD_BENCH_RECOVER_RECORDS", 1_000_000))
ROUNDS = int(os.environ.get("EPOCHGUARD_BENCH_RECOVER_ROUNDS", 3))
VALUE = bytes(range(100))
STAMP = 1_700_000_000_000


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    from epochguard.kafka import KafkaCluster, KafkaNotProvisioned, find_java, kafka_jars

    try:
        kafka_jars()
        find_java()
    except KafkaNotProvisioned as e:
        pytest.skip(f"Apache Kafka: {e}")
    base = Path(__file__).parents[2] / "target" / "bench-recover-kafka"
    shutil.rmtree(base, ignore_errors=True)
    with KafkaCluster(base, brokers=1, broker_overrides={"log.segment.bytes": str(1 << 30)}) as c:
        yield c


def _lost(topic: str) -> pa.Table:
    keys = [b"key-%06d" % (i % 1_000_000) for i in range(RECORDS)]
    return pa.table({
        "topic": pa.array([topic] * RECORDS, pa.string()), "partition": pa.array([0] * RECORDS, pa.int32()),
        "broker": pa.array([1] * RECORDS, pa.int32()), "offset": pa.array(range(RECORDS), pa.int64()),
        "leader_epoch": pa.array([3] * RECORDS, pa.int32()),
        "timestamp": pa.array([STAMP + i for i in range(RECORDS)], pa.int64()),
        "timestamp_type": pa.array([0] * RECORDS, pa.int8()), "key": pa.array(keys, pa.binary()),
        "value": pa.array([VALUE] * RECORDS, pa.binary()),
        "headers": pa.array([[]] * RECORDS, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        "is_control": pa.array([False] * RECORDS), "kind": pa.array(["lost"] * RECORDS, pa.string()),
        "uncommitted": pa.array([False] * RECORDS)})


def _fill(bootstrap: str, topic: str, count: int) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(count):
        producer.produce(topic, b"new-%d" % i, partition=0)
        if i % 100_000 == 99_999:
            producer.flush(60)
    assert producer.flush(60) == 0


def test_recover_vs_confluent_kafka_produce_loop(benchmark: Any, cluster: Any, tmp_path: Path) -> None:
    """group recover: `recover()` of RECORDS lost records vs confluent-kafka's produce() of the same."""
    from epochguard.ops.recover import PROVENANCE_HEADER, recover

    benchmark.group = "recover"
    names = (f"recover-{i}" for i in itertools.count())
    state: dict[str, str] = {}
    template = _lost("t")

    def prepare() -> None:  # untimed: a new partition that diverged at 0, the new leader's records since
        topic = next(names)
        cluster.create_topic(topic, {0: [1]})
        _fill(cluster.bootstrap, topic, RECORDS // 10)
        audit = tmp_path / topic
        audit.mkdir()
        pq.write_table(template.set_column(0, "topic", pa.array([topic] * RECORDS, pa.string())),
                       audit / "lost_records.parquet")
        state.update(topic=topic, audit=str(audit))

    def ours() -> None:
        plans = recover(state["audit"], cluster.bootstrap)
        assert sum(p.count("publish") for p in plans.values()) == RECORDS

    cluster.create_topic("baseline", {0: [1]})
    keys = template.column("key").to_pylist()
    stamps = template.column("timestamp").to_pylist()

    def theirs() -> None:
        producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, "acks": "all",
                                "enable.idempotence": True, "batch.size": 1_000_000})
        topic = state["topic"]
        for i in range(RECORDS):
            while True:
                try:
                    producer.produce("baseline", VALUE, keys[i], partition=0, timestamp=stamps[i],
                                     headers=[(PROVENANCE_HEADER, b"%s/0/%d/3/1" % (topic.encode(), i))])
                    break
                except BufferError:  # librdkafka's queue is full: serve it, as a produce loop must
                    producer.poll(0.01)
        assert producer.flush(120) == 0

    state["topic"] = "recover-first"
    times = take_turns(benchmark, ours, theirs, rounds=ROUNDS, baseline="confluent-kafka produce() loop",
                       prepare=prepare)
    benchmark.extra_info["records"] = RECORDS
    benchmark.extra_info["baseline_records_per_s"] = RECORDS / min(times)

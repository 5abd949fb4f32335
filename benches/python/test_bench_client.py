"""epochguard's client against the Python clients, reading the same records from the same broker:
`epochguard serve clean` and a one-broker Apache Kafka 4.4 (epochguard.kafka; `make kafka`, skipped
without it).

Per endpoint, 100-byte records are produced once (untimed) to partition 0 of `input` by confluent-kafka
with acks=all: BACKLOG, more than any consumer reads, and read through once (untimed) to warm the broker's
fetch path. Each consumer is built once per endpoint, starts at
the first of them and reads on, round after round, never seeking: a round is the next RECORDS records,
timed until the last one is in hand (a warm-up round first: connections, metadata, ApiVersions, the
JVM's JIT). That is a consumer streaming a backlog, fetches pipelined however each client does it; no
fetch waits at the log end (fetch.wait.max.ms / fetch_max_wait_ms, 500 ms, a figure of that wait and
not of the client) and no seek strands a fetch in flight. Every consumer runs with its default fetch
sizes (1 MiB a partition a fetch, as Java's, kafka-python's and librdkafka's):

- `poll_arrow` (records as one pyarrow.RecordBatch per partition, decoded in Rust) vs confluent-kafka's
  `consume(num_messages=10000)` (goal: >= 3x records/s), confluent-kafka twice: with its defaults, and
  with `fetch.queue.backoff.ms` 10 ms instead of 1,000. librdkafka stops fetching a partition whose local
  queue holds `queued.min.messages` (100,000) and fetches again only after that back-off, so a consumer
  that drains its queue fast waits up to a second at a fixed place in the stream: users meet it, and
  the second baseline shows the client without it;
- the per-record iterator of `KafkaConsumer` vs kafka-python's (goal: >= 2x).

A consumer's figure is its throughput over the whole timed stream (CONSUME_ROUNDS rounds one after the
other: records / the rounds' summed time, the mean), not the median round: a client that stalls once a
second (librdkafka's back-off above) or fills its queue between rounds is fast in most rounds and slow
in one, and the median would count only the fast ones.

Producing, each round 100-byte values to partition 0 with acks=all (PRODUCE_BATCH_RECORDS for the batch
pair, PRODUCE_RECORDS per-record), timed from the first send until the last is acknowledged (flush), seven
rounds after a warm-up one, the two producers of a pair taking turns round by round (a round of the
baseline, then one of epochguard's: on a shared machine a burst of load falls on both alike; a
produce round starts and ends empty, so one producer's turn leaves nothing for the other's), every
producer with linger 5 ms, its default requests in flight per broker
(epochguard's and kafka-python's 5, as Java's; librdkafka's 1,000,000) and batches of up to
1,000,000 bytes (librdkafka's default batch.size; kafka-python's and Java's 16 KiB default would cut
a 1,000-record batch into seven), warmed up on the endpoint first:

- `send_arrow` of a pyarrow table (value and partition columns, built once, untimed) vs
  confluent-kafka's `produce()` loop (goal: >= 1x);
- `KafkaProducer.send` per record vs kafka-python's `send` (goal: >= 2x).

Kafka's segments are 1 GiB (its default; a fetch reads from one segment).

Run: `pytest benches/python/test_bench_client.py --benchmark-only --benchmark-group-by=group`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from turns import take_turns

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (pip install confluent-kafka)")
kafka = pytest.importorskip("kafka", reason="kafka-python is not installed (pip install kafka-python)")
pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed")

RECORDS = 40_000
CONSUME_ROUNDS = 10
BACKLOG = (CONSUME_ROUNDS + 2) * RECORDS  # the warm-up and timed rounds, and a round's margin for read-ahead
VALUE = bytes(range(100))
TOPIC = "input"
RATES: dict[tuple[str, str], float] = {}
PRODUCE_RECORDS = 20_000  # a round of per-record sends
PRODUCE_BATCH_RECORDS = 40_000  # a round of send_arrow / the confluent-kafka produce() loop
BATCH_BYTES = 1_000_000
PRODUCE_ROUNDS = 7


def _produce(bootstrap: str) -> int:
    """BACKLOG records into input-0; the offset of the first."""
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                            "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000, "log_level": 3})
    for _ in range(BACKLOG):
        try:
            producer.produce(TOPIC, VALUE, partition=0)
        except BufferError:
            producer.poll(0.001)
            producer.produce(TOPIC, VALUE, partition=0)
    assert producer.flush(60) == 0
    watch = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "w", "log_level": 3})
    _low, high = watch.get_watermark_offsets(ck.TopicPartition(TOPIC, 0), timeout=10)
    start = int(high) - BACKLOG
    # The broker's fetch path warmed (the JVM's JIT; serve's caches) on the whole backlog, untimed, before any
    # consumer's warm-up round: a consumer's one warm-up round of a few fetches left the first timed rounds to
    # a cold JVM (1 MiB fetches answered in 18 ms instead of 9, at the same load).
    watch.assign([ck.TopicPartition(TOPIC, 0, start)])
    got, end = 0, time.monotonic() + 60
    while got < BACKLOG and time.monotonic() < end:
        got += sum(m.error() is None for m in watch.consume(num_messages=10_000, timeout=0.5))
    watch.close()
    return start


@contextlib.contextmanager
def _serve() -> Iterator[str]:
    if importlib.util.find_spec("epochguard.wire.cli") is None:
        pytest.skip("`epochguard serve` is not in this build")
    proc = subprocess.Popen([sys.executable, "-m", "epochguard", "serve", "clean"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        assert line.startswith("bootstrap "), f"serve printed {line!r}"
        yield line.split(" ", 1)[1].strip()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


@contextlib.contextmanager
def _kafka() -> Iterator[str]:
    from epochguard.kafka import KafkaCluster, KafkaNotProvisioned, find_java, kafka_jars

    try:
        kafka_jars()
        find_java()
    except KafkaNotProvisioned as e:
        pytest.skip(f"Apache Kafka: {e}")
    base = Path(__file__).parents[2] / "target" / "bench-kafka"
    shutil.rmtree(base, ignore_errors=True)
    with KafkaCluster(base, brokers=1, broker_overrides={"log.segment.bytes": str(1 << 30)}) as cluster:
        cluster.create_topic(TOPIC, {0: [1]})
        yield cluster.bootstrap


@pytest.fixture(scope="module", params=["serve", "kafka"])
def endpoint(request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    with (_serve() if request.param == "serve" else _kafka()) as bootstrap:
        yield bootstrap, _produce(bootstrap)
        _report(request.param)


def _rate(benchmark: Any, name: str, records: int = RECORDS, stat: str = "median") -> None:
    where = benchmark.name.rpartition("[")[2].rstrip("]")
    RATES[where, name] = records / getattr(benchmark.stats.stats, stat)
    benchmark.extra_info["records_per_second"] = round(RATES[where, name])


def _report(where: str) -> None:
    pairs = (("epochguard poll_arrow", "confluent-kafka consume", 3.0),
             ("epochguard poll_arrow", "confluent-kafka consume, back-off 10 ms", 3.0),
             ("epochguard iterator", "kafka-python iterator", 2.0),
             ("epochguard send_arrow", "confluent-kafka produce", 1.0), ("epochguard send", "kafka-python send", 2.0))
    for ours, theirs, goal in pairs:
        a, b = RATES.get((where, ours)), RATES.get((where, theirs))
        if a and b:
            what = "stream means" if "consume" in theirs or "iterator" in theirs else "medians"
            print(f"\n{where}: {ours} {a:,.0f} records/s vs {theirs} {b:,.0f} records/s: {a / b:.2f}x "
                  f"(goal >= {goal}x, {what})")


def _deadline() -> float:
    return time.monotonic() + 60


def _rounds(benchmark: Any, read: Any, name: str) -> None:
    """CONSUME_ROUNDS timed rounds of `read()` (RECORDS records each, on from the last) after a warm-up; the
    rate is the stream's (the mean round)."""
    benchmark.pedantic(read, rounds=CONSUME_ROUNDS, warmup_rounds=1, iterations=1)
    _rate(benchmark, name, stat="mean")


@pytest.mark.benchmark(group="client-consume-batch")
def test_client_poll_arrow(benchmark: Any, endpoint: tuple[str, int]) -> None:
    from epochguard.client import KafkaConsumer, TopicPartition

    bootstrap, start = endpoint
    tp = TopicPartition(TOPIC, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    consumer.assign([tp])
    consumer.seek(tp, start)
    left = [0]  # rows read past the last round's end (poll_arrow hands out whole fetches)

    def read() -> None:
        got, end = left[0], _deadline()
        while got < RECORDS and time.monotonic() < end:
            for batch in consumer.poll_arrow(timeout_ms=500).values():
                got += batch.num_rows
        assert got >= RECORDS
        left[0] = got - RECORDS

    _rounds(benchmark, read, "epochguard poll_arrow")
    consumer.close()


@pytest.mark.benchmark(group="client-consume-batch")
def test_confluent_consume(benchmark: Any, endpoint: tuple[str, int]) -> None:
    _confluent_rounds(benchmark, endpoint, {}, "confluent-kafka consume")


@pytest.mark.benchmark(group="client-consume-batch")
def test_confluent_consume_no_backoff(benchmark: Any, endpoint: tuple[str, int]) -> None:
    _confluent_rounds(benchmark, endpoint, {"fetch.queue.backoff.ms": 10}, "confluent-kafka consume, back-off 10 ms")


def _confluent_rounds(benchmark: Any, endpoint: tuple[str, int], conf: dict[str, Any], name: str) -> None:
    bootstrap, start = endpoint
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                            "log_level": 3, **conf})
    consumer.assign([ck.TopicPartition(TOPIC, 0, start)])
    left = [0]

    def read() -> None:
        got, end = left[0], _deadline()
        while got < RECORDS and time.monotonic() < end:
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                if msg.error() is None:
                    got += 1
        assert got >= RECORDS
        left[0] = got - RECORDS

    _rounds(benchmark, read, name)
    consumer.close()


def _iterator_rounds(benchmark: Any, consumer: Any, name: str) -> None:
    """Rounds of RECORDS records from one iterator, each round on from where the last stopped."""
    records = iter(consumer)

    def read() -> None:
        got = 0
        for record in itertools.islice(records, RECORDS):
            got += len(record.value)
        assert got == RECORDS * len(VALUE)

    _rounds(benchmark, read, name)
    consumer.close()


@pytest.mark.benchmark(group="client-consume-records")
def test_client_iterator(benchmark: Any, endpoint: tuple[str, int]) -> None:
    from epochguard.client import KafkaConsumer, TopicPartition

    bootstrap, start = endpoint
    tp = TopicPartition(TOPIC, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5_000)
    consumer.assign([tp])
    consumer.seek(tp, start)
    _iterator_rounds(benchmark, consumer, "epochguard iterator")


@pytest.mark.benchmark(group="client-consume-records")
def test_kafka_python_iterator(benchmark: Any, endpoint: tuple[str, int]) -> None:
    bootstrap, start = endpoint
    tp = kafka.TopicPartition(TOPIC, 0)
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5_000)
    consumer.assign([tp])
    consumer.seek(tp, start)
    _iterator_rounds(benchmark, consumer, "kafka-python iterator")


def _take_turns(benchmark: Any, ours: Any, theirs: Any, names: tuple[str, str], records: int) -> None:
    """PRODUCE_ROUNDS rounds of `ours` and of `theirs`, taking turns (turns.py); both rates recorded."""
    baseline = take_turns(benchmark, ours, theirs, rounds=PRODUCE_ROUNDS, baseline=names[1])
    _rate(benchmark, names[0], records)
    where = benchmark.name.rpartition("[")[2].rstrip("]")
    RATES[where, names[1]] = records / statistics.median(baseline)


def _confluent_producer(bootstrap: str) -> Any:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                            "batch.size": BATCH_BYTES, "queue.buffering.max.messages": 1_000_000, "log_level": 3})
    producer.produce(TOPIC, VALUE, partition=0)
    assert producer.flush(60) == 0  # connections, metadata
    return producer


@pytest.mark.benchmark(group="client-produce-batch")
def test_client_send_arrow(benchmark: Any, endpoint: tuple[str, int]) -> None:
    """`send_arrow` of a table, taking turns with confluent-kafka's `produce()` loop."""
    from epochguard.client import KafkaProducer

    bootstrap, _ = endpoint
    table = pa.table({"value": pa.array([VALUE] * PRODUCE_BATCH_RECORDS, pa.binary()),
                      "partition": pa.array([0] * PRODUCE_BATCH_RECORDS, pa.int32())})
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, batch_size=BATCH_BYTES)
    producer.send_arrow(TOPIC, table.slice(0, 100)).get(60)  # connections, metadata
    theirs = _confluent_producer(bootstrap)

    def produce() -> None:
        batches = producer.send_arrow(TOPIC, table).get(60)
        assert sum(b.record_count for b in batches) == PRODUCE_BATCH_RECORDS

    def confluent_produce() -> None:
        send = theirs.produce
        for _ in range(PRODUCE_BATCH_RECORDS):
            send(TOPIC, VALUE, partition=0)
        assert theirs.flush(60) == 0

    _take_turns(benchmark, produce, confluent_produce, ("epochguard send_arrow", "confluent-kafka produce"),
                PRODUCE_BATCH_RECORDS)
    producer.close()


def _per_record_round(producer: Any) -> None:
    """PRODUCE_RECORDS `send` calls and a `flush`, for both per-record producers alike."""
    send = producer.send
    for _ in range(PRODUCE_RECORDS - 1):
        send(TOPIC, VALUE, partition=0)
    last = send(TOPIC, VALUE, partition=0)
    producer.flush(60)
    assert last.get(0).offset >= 0


@pytest.mark.benchmark(group="client-produce-records")
def test_client_send(benchmark: Any, endpoint: tuple[str, int]) -> None:
    """`KafkaProducer.send` per record, taking turns with kafka-python's."""
    from epochguard.client import KafkaProducer

    ours = KafkaProducer(bootstrap_servers=endpoint[0], acks="all", linger_ms=5, batch_size=BATCH_BYTES)
    theirs = kafka.KafkaProducer(bootstrap_servers=endpoint[0], acks="all", linger_ms=5, batch_size=BATCH_BYTES)
    for producer in (ours, theirs):
        producer.send(TOPIC, VALUE, partition=0).get(60)  # connections, metadata
    _take_turns(benchmark, lambda: _per_record_round(ours), lambda: _per_record_round(theirs),
                ("epochguard send", "kafka-python send"), PRODUCE_RECORDS)
    ours.close()
    theirs.close()

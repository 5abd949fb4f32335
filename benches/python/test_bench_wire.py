"""confluent-kafka through `epochguard serve clean` vs through librdkafka's built-in mock cluster.

The same client, settings and records in the same run: 100-byte values produced with acks=all to
partition 0, then read back from a warmed-up consumer (assign at the round's first offset, timed until
the round's records are in). The mock (`test.mock.num.brokers` on a producer; the consumer finds its
brokers in that producer's metadata) keeps a bounded log (about 47,000 such records), so each round
is sized to fit. Goals: >= 100,000 records/s each way through serve, >= 0.5x the mock's rate.

serve's rounds take turns with the mock's (turns.py: a round on the mock, then one on serve, seven
times after a warm-up), so a burst of load on the shared machine falls on both alike; the mock's round
times are in serve's benchmark's extra_info. Each figure is the median round.

Run: `pytest benches/python/test_bench_wire.py --benchmark-only --benchmark-group-by=group`.
"""

from __future__ import annotations

import importlib.util
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from turns import take_turns

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (pip install confluent-kafka)")

RECORDS = 40_000  # a round: within the mock's bounded log
VALUE = bytes(range(100))
TOPIC = "input"
RATES: dict[str, float] = {}
PRODUCER = {"acks": "all", "linger.ms": 5, "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
            "log_level": 3}
CONSUMER = {"group.id": "epochguard-bench", "enable.auto.commit": False, "fetch.wait.max.ms": 10, "log_level": 3}


class Cluster:
    """A producer and a warmed-up consumer on one endpoint, partition 0 of TOPIC."""

    def __init__(self, name: str, producer: Any, bootstrap: str) -> None:
        self.name = name
        self.producer = producer
        self.consumer = ck.Consumer({**CONSUMER, "bootstrap.servers": bootstrap})
        self.produce(100)  # warm up: connections, metadata, the partition's leader
        self.consume(self.end() - 100, 100)

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush(10)

    def end(self) -> int:
        return int(self.consumer.get_watermark_offsets(ck.TopicPartition(TOPIC, 0), timeout=10)[1])

    def produce(self, n: int) -> None:
        produce = self.producer.produce
        for _ in range(n):
            try:
                produce(TOPIC, VALUE, partition=0)
            except BufferError:
                self.producer.poll(0.001)
                produce(TOPIC, VALUE, partition=0)
        assert self.producer.flush(60) == 0, f"{self.name}: records left unacknowledged"

    def consume(self, start: int, n: int) -> int:
        self.consumer.assign([ck.TopicPartition(TOPIC, 0, start)])
        got, deadline = 0, time.monotonic() + 60
        while got < n and time.monotonic() < deadline:
            for msg in self.consumer.consume(10_000, 0.5):
                if msg.error() is None:
                    got += 1
        assert got >= n, f"{self.name}: read {got} of {n}"
        return got


@pytest.fixture(scope="module")
def mock() -> Iterator[Cluster]:
    producer = ck.Producer({**PRODUCER, "test.mock.num.brokers": 3, "bootstrap.servers": "unused:9092"})
    brokers = producer.list_topics(TOPIC, timeout=10).brokers.values()
    cluster = Cluster("mock", producer, ",".join(f"{b.host}:{b.port}" for b in brokers))
    yield cluster
    cluster.close()
    _report()


@pytest.fixture(scope="module")
def serve() -> Iterator[Cluster]:
    if importlib.util.find_spec("epochguard.wire.cli") is None:
        pytest.skip("`epochguard serve` is not in this build")
    proc = subprocess.Popen([sys.executable, "-m", "epochguard", "serve", "clean"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("bootstrap "), f"serve printed {line!r}"
    bootstrap = line.split(" ", 1)[1].strip()
    try:
        cluster = Cluster("serve", ck.Producer({**PRODUCER, "bootstrap.servers": bootstrap}), bootstrap)
        yield cluster
        cluster.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


ROUNDS = 7


def _produce(benchmark: Any, serve: Cluster, mock: Cluster) -> None:
    times = take_turns(benchmark, lambda: serve.produce(RECORDS), lambda: mock.produce(RECORDS), rounds=ROUNDS,
                       baseline="mock produce")
    _rates(benchmark, "produce", times)


def _consume(benchmark: Any, serve: Cluster, mock: Cluster) -> None:
    """Each round reads records produced for it (untimed): the mock's log is bounded."""
    start = [0]

    def mock_round() -> None:
        mock.produce(RECORDS)
        began = time.perf_counter()
        mock.consume(mock.end() - RECORDS, RECORDS)
        mock_times.append(time.perf_counter() - began)

    def serve_fresh() -> None:
        serve.produce(RECORDS)
        start[0] = serve.end() - RECORDS

    mock_times: list[float] = []
    take_turns(benchmark, lambda: serve.consume(start[0], RECORDS), mock_round, rounds=ROUNDS,
               baseline="mock consume", prepare=serve_fresh)
    del mock_times[:-ROUNDS]  # the consume rounds alone, without the mock's untimed produce
    benchmark.extra_info["baseline_seconds"] = mock_times
    _rates(benchmark, "consume", mock_times)


def _rates(benchmark: Any, way: str, mock_times: list[float]) -> None:
    RATES[f"serve {way}"] = RECORDS / benchmark.stats.stats.median
    RATES[f"mock {way}"] = RECORDS / statistics.median(mock_times)
    benchmark.extra_info["records_per_second"] = round(RATES[f"serve {way}"])
    benchmark.extra_info["baseline_records_per_second"] = round(RATES[f"mock {way}"])


def _report() -> None:
    for way in ("produce", "consume"):
        s, m = RATES.get(f"serve {way}"), RATES.get(f"mock {way}")
        if s and m:
            print(f"\n{way}: serve {s:,.0f} records/s, mock {m:,.0f} records/s: {s / m:.2f}x "
                  f"(goals >= 100,000/s, >= 0.5x)")


@pytest.mark.benchmark(group="wire-produce")
def test_produce_serve(benchmark: Any, serve: Cluster, mock: Cluster) -> None:
    _produce(benchmark, serve, mock)


@pytest.mark.benchmark(group="wire-consume")
def test_consume_serve(benchmark: Any, serve: Cluster, mock: Cluster) -> None:
    _consume(benchmark, serve, mock)

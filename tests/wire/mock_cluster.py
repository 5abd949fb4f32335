"""librdkafka's built-in mock cluster behind the `epochguard serve clean` stdout contract.

`python tests/wire/mock_cluster.py [--rate N]` prints `bootstrap <addresses>`, then `settled`, and
writes topic `events` (values `mock-<seq>`) at N records/s until SIGTERM. The mock is a real Kafka
protocol endpoint (every client here talks to it) but keeps one log per partition for all its brokers,
so it serves the clean path only. It lives inside the producer that configured `test.mock.num.brokers`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

import confluent_kafka as ck


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=200.0, help="events records per second")
    args = parser.parse_args()
    stopped = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.append(True))
    producer = ck.Producer({
        "test.mock.num.brokers": 3,
        "bootstrap.servers": "unused:9092",
        "log_level": 0,
        "linger.ms": 2,
        "acks": "all",
    })
    brokers = producer.list_topics(timeout=10).brokers.values()
    # the mock creates a topic (4 partitions) when metadata asks for it
    partitions = {t: len(producer.list_topics(t, timeout=10).topics[t].partitions) for t in ("events", "input")}
    print("bootstrap " + ",".join(f"{b.host}:{b.port}" for b in sorted(brokers, key=lambda b: b.id)), flush=True)
    print("settled", flush=True)
    seq, start = 0, time.monotonic()
    while not stopped:
        due = int((time.monotonic() - start) * args.rate)
        while seq < due:
            producer.produce("events", f"mock-{seq:08d}".encode(), partition=seq % partitions["events"])
            seq += 1
        producer.poll(0.005)
    producer.flush(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())

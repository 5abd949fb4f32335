"""Driver for kcat (Debian's kcat 1.7, built on librdkafka 2.0.2): a pre-KIP-320 control.

Two kcat processes: `kcat -C -J` (a simple, assign-style consumer of every partition from the beginning)
and `kcat -P -p 0` fed one line per record. kcat prints no leader epoch and no payload with its delivery
reports, so the producer runs one request in flight to partition 0: its reports arrive in send order and
are matched to the payloads by position. librdkafka's log lines and kcat's errors arrive on stderr.
"""

from __future__ import annotations

import collections
import json
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO

from epochguard.wire.drivers.delivery_log import (
    DeliveryLog,
    DriverConfig,
    Membership,
    ProduceSchedule,
    Stop,
    parse_args,
    payload,
)

CLIENT = "kcat"
_DELIVERED = re.compile(r"Message delivered to partition (\d+) \(offset (-?\d+)\)")
_FAILED = re.compile(r"[Dd]elivery failed[^:]*: (.*)")


def kcat_version() -> str | None:
    """`1.7.1 (librdkafka 2.0.2)`, or None when kcat is not on PATH."""
    exe = shutil.which("kcat")
    if exe is None:
        return None
    out = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"Version (\S+).*?librdkafka (\S+)", out)
    return f"{m.group(1)} (librdkafka {m.group(2)})" if m else out.strip()


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(CLIENT, argv)
    exe = shutil.which("kcat")
    if exe is None:
        print("kcat is not on PATH (Debian: apt-get install kcat)", file=sys.stderr)
        return 2
    log = DeliveryLog(config.log)
    stop = Stop(config.max_seconds, log)
    log.write("start", client=CLIENT, software="kcat", version=kcat_version(),
              client_id=config.client_id, reset=config.reset)
    common = ["-b", config.bootstrap, "-X", f"client.id={config.client_id}", "-E"]
    reset = "error" if config.reset == "none" else config.reset
    options = [a for k, v in config.consumer_options.items() for a in ("-X", f"{k}={v}")]  # client.rack
    # A group member (`--group`): kcat's balanced consumer, committing the offsets it stored (each record
    # it printed) when it closes: on SIGTERM it closes, which commits and leaves the group.
    source = (["-G", config.group, "-X", "enable.auto.commit=true", config.consume_topic] if config.group
              else ["-t", config.consume_topic, "-o", "beginning"])
    consumer = subprocess.Popen(
        [exe, "-C", *common, *source, "-J", "-u", "-X", f"auto.offset.reset={reset}", *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8", errors="surrogateescape",
    )
    producer = subprocess.Popen(
        [exe, "-P", *common, "-t", config.produce_topic, "-p", "0", "-X", "acks=all", "-X", "linger.ms=1",
         "-X", "max.in.flight.requests.per.connection=1", "-v", "-v", "-v"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, encoding="utf-8",
        errors="surrogateescape",
    )
    sent: collections.deque[bytes] = collections.deque()
    member = Membership(config, log)
    readers = [
        threading.Thread(target=_read_consumed, args=(consumer.stdout, log, member), daemon=True),
        threading.Thread(target=_read_stderr, args=(consumer.stderr, log, "kcat-consumer", None), daemon=True),
        threading.Thread(target=_read_stderr, args=(producer.stderr, log, "kcat-producer", (sent, config)),
                         daemon=True),
    ]
    for t in readers:
        t.start()
    schedule = ProduceSchedule(config)
    assert producer.stdin is not None
    while not stop and (member.left or consumer.poll() is None):
        if member.leave_due():
            consumer.terminate()  # kcat closes its consumer: commits, leaves the group
            _wait(consumer)
            member.leaving()
        seq = schedule.due()
        if seq is not None and producer.poll() is None:
            value = payload(config.client_id, seq)
            sent.append(value)
            producer.stdin.write(value.decode() + "\n")
            producer.stdin.flush()
        stop_wait = 0.005 if config.produce_interval else 0.05
        threading.Event().wait(stop_wait)
    producer.stdin.close()  # kcat flushes what it holds, then exits
    _wait(producer)
    consumer.terminate()
    _wait(consumer)
    for t in readers:
        t.join(timeout=5)
    log.close()
    return 0


def _wait(proc: subprocess.Popen[str]) -> None:
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _read_consumed(stream: IO[str] | None, log: DeliveryLog, member: Membership) -> None:
    assert stream is not None
    for line in stream:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            log.surfaced(line.rstrip("\n"), source="kcat-consumer:stdout")
            continue
        value = rec.get("payload")
        raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else None
        log.consumed(rec["topic"], rec["partition"], rec["offset"], None, raw)
        member.consumed()


def _read_stderr(
    stream: IO[str] | None, log: DeliveryLog, source: str,
    producer: tuple[collections.deque[bytes], DriverConfig] | None,
) -> None:
    assert stream is not None
    for line in stream:
        text = line.rstrip("\n")
        if producer is not None:
            sent, config = producer
            topic = config.produce_topic
            if m := _DELIVERED.search(text):
                if sent:
                    log.produced(topic, int(m.group(1)), int(m.group(2)), sent.popleft())
                continue
            if m := _FAILED.search(text):
                if sent:
                    log.produced(topic, None, None, sent.popleft(), error=m.group(1))
                continue
        if text.startswith("% Reached end of topic"):
            continue  # kcat's end-of-partition notice: neither an error nor a reset
        log.surfaced(text, source=source)


if __name__ == "__main__":
    sys.exit(main())

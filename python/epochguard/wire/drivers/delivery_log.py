"""The delivery log every driver writes, and the command line every driver takes.

One JSON object a line, each with `t` (wall-clock seconds) and `kind`:
- `start`: client name, software and version, the settings used;
- `consumed`: topic, partition, offset, leader_epoch (null where the client does not expose it), digest;
- `produced`: topic, partition, offset (null on failure), digest, acks, error;
- `error`, `reset`, `truncation`: what the client surfaced (an exception, an error event, a log line),
  with its text; `log`: any other client log line;
- `assigned`: topic and `partitions` (all when absent): the client's position was set on purpose (a group
  assignment, a seek), so no rewind or skip is counted across it (the drivers assign once, at the start);
- `stopping`: the driver was told to stop (a signal, or its own time bound): it consumes nothing after, though
  its producer may still be flushing, so the consumer's history ends here (`truth` judges stalls up to it);
- `stop`: the driver's counts when it ended.
Lines are flushed as written so a killed driver still leaves a readable log.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import re
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

T = TypeVar("T")

CONSUME_TOPIC = "events"
PRODUCE_TOPIC = "input"

# What a client's free-text log or error says it did. Truncation first: librdkafka's truncation lines
# also mention the reset they lead to. Whole words only: a response's repr names its fields
# (kafka-python's `diverging_epoch=None` in every FetchResponse v12) without reporting anything.
_TRUNCATION = re.compile(r"\btruncat|\bdiverged\b|LOG_TRUNCATION", re.IGNORECASE)
_RESET = re.compile(
    r"offset\b[^.]*\breset|\breset[^.]*\boffset|reset using|OffsetOutOfRange|OFFSET_OUT_OF_RANGE", re.IGNORECASE)


def digest(value: bytes | None) -> str:
    """A short content digest: the delivery log compares records by it, never by offset alone."""
    return hashlib.blake2b(value or b"", digest_size=8).hexdigest()


def payload(client_id: str, seq: int) -> bytes:
    """The value of the driver's `seq`-th produced record: unique per client, so the final log can be
    searched for it."""
    return f"{client_id}-{seq:08d}".encode()


def classify(text: str) -> str:
    """`truncation`, `reset` or `log`: the kind of event a client's log line or error text reports."""
    if _TRUNCATION.search(text):
        return "truncation"
    if _RESET.search(text):
        return "reset"
    return "log"


class DeliveryLog:
    """Append-only JSON-lines writer, safe to call from client callback threads."""

    def __init__(self, path: str | Path) -> None:
        self._file: IO[str] = open(path, "w", encoding="utf-8")
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def write(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"t": time.time(), "kind": kind, **fields}, default=str)
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self._file.write(line + "\n")
            self._file.flush()

    def consumed(self, topic: str, partition: int, offset: int, leader_epoch: int | None, value: bytes | None) -> None:
        epoch = leader_epoch if leader_epoch is not None and leader_epoch >= 0 else None
        self.write("consumed", topic=topic, partition=partition, offset=offset, leader_epoch=epoch,
                   digest=digest(value))

    def produced(
        self, topic: str, partition: int | None, offset: int | None, value: bytes, error: str | None = None
    ) -> None:
        ok = error is None and offset is not None and offset >= 0
        self.write(
            "produced",
            topic=topic,
            partition=partition,
            offset=offset if ok else None,
            digest=digest(value),
            acks="all",
            error=error,
        )

    def surfaced(self, text: str, *, source: str, kind: str | None = None) -> None:
        """An error or log line the client surfaced; `kind` overrides the text classification."""
        self.write(kind or classify(text), source=source, text=text)

    def close(self) -> None:
        self.write("stop", counts=dict(self.counts))
        with self._lock:
            self._file.close()


def read_log(path: str | Path) -> Iterator[dict[str, Any]]:
    """The entries of a delivery log; a torn last line (a killed driver) is ignored."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def explain(path: str | Path, tail: int = 15) -> str:
    """Why a driver delivered what it did, from its own account, for a test's failure message: its counts,
    the last record it consumed per partition, its last errors and log lines, and the end of its stderr."""
    path = Path(path)
    counts: dict[str, int] = {}
    last: dict[tuple[str, int], int] = {}
    said: list[str] = []
    started = None
    try:
        for entry in read_log(path):
            kind = entry.get("kind", "?")
            counts[kind] = counts.get(kind, 0) + 1
            started = entry.get("t") if started is None else started
            if kind == "consumed":
                last[entry["topic"], entry["partition"]] = entry["offset"]
            elif kind not in ("produced", "start", "stop"):
                said.append(f"{entry.get('t', 0) - (started or 0):8.3f}s {kind} ({entry.get('source')}): "
                            f"{entry.get('text')}")
    except FileNotFoundError:
        return f"{path}: no delivery log (the driver never started)"
    out = [f"{path}: {counts}", "  last consumed: " + (", ".join(f"{t}-{p}@{o}" for (t, p), o in sorted(last.items()))
                                                       or "nothing")]
    out += [f"  last {min(tail, len(said))} of {len(said)} errors and log lines:"] + [f"    {s}" for s in said[-tail:]]
    stderr = path.with_suffix(".stderr")
    if stderr.exists():
        lines = stderr.read_text(encoding="utf-8", errors="replace").splitlines()
        out += [f"  end of {stderr.name}:"] + [f"    {line}" for line in lines[-5:]]
    return "\n".join(out)


class LogForwarder(logging.Handler):
    """Forwards a Python client library's log records (kafka-python, aiokafka) into the delivery log.

    INFO and above only: both libraries report resets and truncation at INFO/WARNING, while their DEBUG
    lines are request/response reprs (whole fetched batches) that cost the client's own loop dearly to
    format and say nothing about what the client did."""

    def __init__(self, log: DeliveryLog) -> None:
        super().__init__(logging.INFO)
        self._log = log

    def install(self, logger_name: str) -> None:
        logger = logging.getLogger(logger_name)
        logger.setLevel(logging.INFO)  # never build the DEBUG records in the first place
        logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self._log.surfaced(record.getMessage(), source=f"{record.name}:{record.levelname}")


@dataclass(frozen=True)
class DriverConfig:
    """What every driver takes on its command line."""

    bootstrap: str
    log: Path
    client_id: str
    reset: str
    consume_topic: str
    produce_topic: str
    produce_interval: float
    produce_count: int
    max_seconds: float
    options: dict[str, str]  # `--option KEY=VALUE`; `producer.KEY` ones are the producer's alone
    group: str | None = None  # `--group G`: subscribe as a member of G (commits: see `leave_when_idle`)
    leave_when_idle: float | None = None  # commit the position, leave the group after this long with nothing new

    @property
    def consumer_options(self) -> dict[str, str]:
        return {k: v for k, v in self.options.items() if not k.startswith("producer.")}

    @property
    def producer_options(self) -> dict[str, str]:
        return {k.removeprefix("producer."): v for k, v in self.options.items() if k.startswith("producer.")}


def typed(options: dict[str, str]) -> dict[str, Any]:
    """`--option` values as a Python client's keyword arguments: digits as ints, true/false as bools."""
    bools = {"true": True, "false": False}
    return {k: int(v) if v.isdigit() else bools.get(v.lower(), v) for k, v in options.items()}


def parse_args(client: str, argv: Sequence[str] | None = None) -> DriverConfig:
    parser = argparse.ArgumentParser(
        prog=f"python -m epochguard.wire.drivers.{client.replace('-', '_')}",
        description=f"Drive {client} against a Kafka endpoint and write its delivery log.",
    )
    parser.add_argument("--bootstrap", required=True, help="host:port[,host:port...]")
    parser.add_argument("--log", required=True, type=Path, help="delivery log to write (JSON lines)")
    parser.add_argument("--client-id", default=f"epochguard-{client}")
    parser.add_argument("--reset", choices=("earliest", "latest", "none"), default="earliest",
                        help="auto.offset.reset (default earliest: a reset shows as a jump to the log start)")
    parser.add_argument("--consume-topic", default=CONSUME_TOPIC)
    parser.add_argument("--produce-topic", default=PRODUCE_TOPIC)
    parser.add_argument("--produce-interval-ms", type=float, default=20.0,
                        help="one acks=all record every this many ms (0: do not produce)")
    parser.add_argument("--produce-count", type=int, default=0, help="stop producing after N records (0: no limit)")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="exit by itself after this long")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a client setting, passed through (repeatable); producer.KEY=VALUE: the producer's")
    parser.add_argument("--group", metavar="G", help="subscribe to the topic as a member of group G (no assign)")
    parser.add_argument("--leave-when-idle", type=float, metavar="S",
                        help="with --group: once it consumed something and nothing new came for S seconds, commit "
                             "its position and leave the group (consume no more)")
    ns = parser.parse_args(argv)
    return DriverConfig(
        bootstrap=ns.bootstrap,
        log=ns.log,
        client_id=ns.client_id,
        reset=ns.reset,
        consume_topic=ns.consume_topic,
        produce_topic=ns.produce_topic,
        produce_interval=ns.produce_interval_ms / 1000.0,
        produce_count=ns.produce_count,
        max_seconds=ns.max_seconds,
        options=dict(o.split("=", 1) for o in ns.option),
        group=ns.group,
        leave_when_idle=ns.leave_when_idle,
    )


class Membership:
    """A driver's group membership (`--group`, `--leave-when-idle`): when to commit and leave."""

    def __init__(self, config: DriverConfig, log: DeliveryLog) -> None:
        self.after = config.leave_when_idle
        self.log = log
        self.last: float | None = None  # when it last consumed a record
        self.left = False

    def consumed(self) -> None:
        self.last = time.monotonic()

    def leave_due(self) -> bool:
        return (self.after is not None and not self.left and self.last is not None
                and time.monotonic() - self.last >= self.after)

    def leaving(self) -> None:
        self.left = True
        self.log.write("log", source="driver", text="committed its position and left its group")

    def poll(self, poll: Callable[[], T], leave: Callable[[], object], empty: T) -> T:
        """`poll()`, after `leave()` (commit, close) once leaving is due; `empty` once it left."""
        if self.leave_due():
            leave()
            self.leaving()
        if self.left:
            time.sleep(0.02)
            return empty
        return poll()

    async def apoll(self, poll: Callable[[], Awaitable[T]], leave: Callable[[], Awaitable[object]], empty: T) -> T:
        """`poll` for an asyncio client."""
        if self.leave_due():
            await leave()
            self.leaving()
        if self.left:
            await asyncio.sleep(0.02)
            return empty
        return await poll()

    def close(self, close: Callable[[], object]) -> None:
        """Closes the consumer unless it left (closed) already."""
        if not self.left:
            close()


class Stop:
    """Set by SIGTERM/SIGINT or when the driver's own time bound runs out. The first time the driver sees it
    set, `log` (if given) gets a `stopping` line: the driver consumes no more from then, while its producer
    may go on flushing (kafka-go's async writer for seconds), so the consumer's history ends there."""

    def __init__(self, max_seconds: float, log: DeliveryLog | None = None) -> None:
        self._event = threading.Event()
        self._deadline = time.monotonic() + max_seconds
        self._log = log
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._event.set())  # no log write here: the handler may interrupt one

    def __bool__(self) -> bool:
        stopped = self._event.is_set() or time.monotonic() >= self._deadline
        if stopped and self._log is not None:
            self._log.write("stopping")
            self._log = None
        return stopped

    def set(self) -> None:
        self._event.set()


class ProduceSchedule:
    """Paces the driver's produce loop: which sequence number is due now, if any."""

    def __init__(self, config: DriverConfig) -> None:
        self._interval = config.produce_interval
        self._limit = config.produce_count
        self._next = time.monotonic()
        self.sent = 0

    def due(self) -> int | None:
        now = time.monotonic()
        if self._interval <= 0 or (self._limit and self.sent >= self._limit) or now < self._next:
            return None
        self._next = max(self._next + self._interval, now - self._interval)  # no burst after a stall
        self.sent += 1
        return self.sent - 1

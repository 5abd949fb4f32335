"""`epochguard watch`'s driver: the sans-IO `Watcher` on the client's `NetworkClient`, and its outputs.

The loop sends what the watcher asks (each request its own task, so a slow broker holds up only its own
answers), hands every answer or failure back, and writes what the watcher finds:
- the event log, JSON lines, appended and fsynced before anything else happens (`events`; stdout without);
- a human line per event on stderr (rich), a summary at the end;
- Prometheus metrics (`prometheus_client`, kafka_exporter's naming) when a port is given;
- the state file (`--state`): every position, written atomically after each round, so a restarted
  watcher validates what it saw before and still reports a loss that happened while it was down. Events
  are written before the state that no longer holds their positions: a crash in between finds the loss
  again at the next start, which the event log already holds and does not take twice (never lost, logged
  once; on stdout, without an event log, it is printed again).

Read-only: Metadata, ListOffsets, OffsetsForLeaderEpoch, Fetch (batch headers), ListGroups, FindCoordinator,
OffsetFetch and DescribeProducers; Describe on topics and groups is all the rights it needs. The one write, only with
`rewind_groups`: an admin OffsetCommit of an affected group back to the divergence point, which the group
coordinator accepts only while the group has no member (Read on the group); each is an event.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from epochguard.client.network import NetworkClient
from epochguard.client.security import Security
from epochguard.client.watcher import GroupAffected, LsoStuck, Truncation, Watcher, WatchEvent, WatchWarning
from epochguard.errors import EpochGuardError
from epochguard.protocol.messages import MetadataResponse, Request
from epochguard.storage.logdir import _atomic_write

__all__ = ["EXIT_CLEAN", "EXIT_COULD_NOT_RUN", "EXIT_LOSS", "EventLog", "WatchMetrics", "WatchSummary", "watch"]

EXIT_CLEAN, EXIT_LOSS, EXIT_COULD_NOT_RUN = 0, 1, 2
_STATE_VERSION = 1
_ONCE_MAX_ROUNDS = 10  # --once: rounds until every position is validated (a leader not ready costs a round)
_ONCE_RETRY_MS = 500
_ONCE_METADATA_TRIES = 6  # --once: Metadata attempts (every bootstrap address each) before giving up


def now_ms() -> int:
    return int(time.time() * 1000)


# What makes a loss the same loss when a restarted watcher finds it again (everything but when).
_SAME = {"truncation": ("topic", "partition", "old_epoch", "new_epoch", "lost_from", "lost_until"),
         "group-affected": ("group", "topic", "partition", "committed", "phantoms", "rewound")}


def _identity(event: dict[str, Any]) -> tuple[str, ...] | None:
    names = _SAME.get(event.get("event"))  # type: ignore[arg-type]
    return None if names is None else (str(event["event"]), *(json.dumps(event.get(n)) for n in names))


class EventLog:
    """JSON lines appended to `path` (fsynced per write) or to stdout. A loss already in the file (a watcher
    killed after logging it, before its state was saved, finds it again when restarted) is not written twice."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = None if path is None else Path(path)
        self._file: IO[str] | None = None
        self._logged: set[tuple[str, ...]] = set()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            line = "\n"
            with contextlib.suppress(FileNotFoundError), open(self.path, encoding="utf-8") as f:
                for line in f:
                    with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                        key = _identity(json.loads(line))  # a torn last line (a crash mid-write) is skipped
                        if key is not None:
                            self._logged.add(key)
            self._file = open(self.path, "a", encoding="utf-8")  # held for the whole run
            if not line.endswith("\n"):
                self._file.write("\n")  # ends the torn line: the next event is a line of its own

    def write(self, events: Iterable[dict[str, Any]]) -> None:
        fresh = []
        for e in events:
            key = _identity(e)
            if key is not None and self.path is not None:
                if key in self._logged:
                    continue
                self._logged.add(key)
            fresh.append(e)
        lines = "".join(json.dumps(e, sort_keys=False) + "\n" for e in fresh)
        if not lines:
            return
        if self._file is None:
            sys.stdout.write(lines)
            sys.stdout.flush()
            return
        self._file.write(lines)
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class WatchMetrics:
    """Prometheus metrics in kafka_exporter's style (`kafka_topic_partition_*`, labels topic, partition,
    consumergroup), on a registry of their own."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        labels = ("topic", "partition")
        self.truncations = Counter("epochguard_topic_partition_truncations", "Truncations of committed records "
                                   "found", labels, registry=self.registry)
        self.lost = Counter("epochguard_topic_partition_lost_offsets", "Committed offsets lost in truncations",
                            labels, registry=self.registry)
        self.groups = Counter("epochguard_consumergroup_affected", "Truncations a group had committed past",
                              ("consumergroup", *labels), registry=self.registry)
        self.leader_epoch = Gauge("epochguard_topic_partition_leader_epoch", "Leader epoch", labels,
                                  registry=self.registry)
        self.high_watermark = Gauge("epochguard_topic_partition_high_watermark", "High watermark watched",
                                    labels, registry=self.registry)
        self.poll = Histogram("epochguard_poll_duration_seconds", "Wall time of one watch round",
                              registry=self.registry)
        self.warnings = Counter("epochguard_warnings", "What the watcher could not do or see",
                                registry=self.registry)
        self.lso_stuck = Counter("epochguard_topic_partition_lso_stuck", "Last stable offsets stuck below the high "
                                 "watermark past the transaction timeout on a truncated partition", labels,
                                 registry=self.registry)

    def serve(self, port: int) -> None:
        from prometheus_client import start_http_server

        start_http_server(port, registry=self.registry)

    def on_event(self, event: WatchEvent) -> None:
        if isinstance(event, Truncation):
            self.truncations.labels(event.topic, str(event.partition)).inc()
            self.lost.labels(event.topic, str(event.partition)).inc(event.lost_count)
        elif isinstance(event, GroupAffected):
            self.groups.labels(event.group, event.topic, str(event.partition)).inc()
        elif isinstance(event, LsoStuck):
            self.lso_stuck.labels(event.topic, str(event.partition)).inc()
        else:
            self.warnings.inc()

    def on_round(self, watcher: Watcher, seconds: float) -> None:
        self.poll.observe(seconds)
        for p in watcher.partitions.values():
            labels = (p.tp.topic, str(p.tp.partition))
            self.leader_epoch.labels(*labels).set(p.leader_epoch)
            if p.hw >= 0:
                self.high_watermark.labels(*labels).set(p.hw)


@dataclass
class WatchSummary:
    rounds: int = 0
    partitions: int = 0
    truncations: list[Truncation] = field(default_factory=list)
    groups: list[GroupAffected] = field(default_factory=list)
    lso_stuck: list[LsoStuck] = field(default_factory=list)
    warnings: list[WatchWarning] = field(default_factory=list)
    metadata_answered: bool = False

    def add(self, event: WatchEvent) -> None:
        if isinstance(event, Truncation):
            self.truncations.append(event)
        elif isinstance(event, GroupAffected):
            self.groups.append(event)
        elif isinstance(event, LsoStuck):
            self.lso_stuck.append(event)
        else:
            self.warnings.append(event)

    @property
    def exit_code(self) -> int:
        if self.truncations:
            return EXIT_LOSS
        return EXIT_CLEAN if self.metadata_answered else EXIT_COULD_NOT_RUN


def describe(event: WatchEvent) -> str:
    """The human line for an event (rich markup)."""
    if isinstance(event, Truncation):
        replaced = "nothing written there yet" if event.replaced_by_epoch < 0 else \
            f"replaced from epoch {event.replaced_by_epoch}"
        return (f"[bold red]truncation[/] {event.topic}-{event.partition}: committed offsets "
                f"[{event.lost_from}, {event.lost_until}) lost ({event.lost_count} records), leader epoch "
                f"{event.old_epoch} -> {event.new_epoch}, {replaced}; records above offset {event.lost_until} "
                "(never seen committed by the watcher) are outside its sight: audit the brokers' disks for them")
    if isinstance(event, GroupAffected):
        action = "rewound to the divergence point" if event.rewound else (event.note or (
            f"not rewound; with --state, `--rewind-groups --once --group {event.group}` rewinds it later, once "
            "its consumers are stopped"))
        return (f"[bold yellow]group-affected[/] {event.group} on {event.topic}-{event.partition}: committed "
                f"{event.committed}, read the phantoms [{event.phantoms[0]}, {event.phantoms[1]}) and skips the "
                f"replacements [{event.skips[0]}, {event.skips[1]}) unless its client validates ({action})")
    if isinstance(event, LsoStuck):
        who = event.note if event.producers is None else "open transactions of producer(s) " + (", ".join(
            f"{p['producer_id']} (epoch {p['producer_epoch']}, from offset {p['current_txn_start_offset']})"
            for p in event.producers) or "none the leader lists")
        return (f"[bold red]lso-stuck[/] {event.topic}-{event.partition}: the last stable offset {event.lso} has stood "
                f"below the high watermark {event.hw} longer than the transaction timeout; read_committed consumers "
                f"are stuck there (a transaction's end marker was lost, KAFKA-20716): {who}")
    where = "" if event.topic is None else f" {event.topic}-{event.partition}:"
    return f"[yellow]warning[/]{where} {event.message}"


def load_state(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    state = json.loads(text)
    if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
        raise ValueError(f"{path}: not an epochguard watch state file (version {_STATE_VERSION})")
    return state


def save_state(path: Path, watcher: Watcher) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, json.dumps({"version": _STATE_VERSION, **watcher.positions()}) + "\n")


class _Driver:
    """One run: the watcher, its connections, the requests in flight and the outputs."""

    def __init__(self, watcher: Watcher, net: NetworkClient, events: EventLog, metrics: WatchMetrics | None,
                 human: Callable[[str], None] | None, state_path: Path | None) -> None:
        self.watcher, self.net, self.events, self.metrics = watcher, net, events, metrics
        self.human, self.state_path = human, state_path
        self.summary = WatchSummary()
        self.wake = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()
        self.rounds_seen = 0
        self.daemon = False  # a long run (not --once): freeze the collector's view after the first round

    async def exchange(self, node: int, request: Request) -> None:
        try:
            response = await self.net.send(node, request)
        except (EpochGuardError, OSError):
            self.watcher.on_failure(request, now_ms())
        else:
            if isinstance(response, MetadataResponse):
                self.summary.metadata_answered = True
                self.net.update_brokers({b.node_id: (b.host, b.port) for b in response.brokers})
            self.watcher.on_response(node, request, response, now_ms())
        finally:
            self.wake.set()

    def send(self) -> None:
        for node, request in self.watcher.poll(now_ms()):
            task = asyncio.get_running_loop().create_task(self.exchange(node, request))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def report(self) -> None:
        found = self.watcher.take_events()
        if not found:
            return
        self.events.write(e.to_json() for e in found)  # first: durable before anything else
        for event in found:
            self.summary.add(event)
            if self.metrics is not None:
                self.metrics.on_event(event)
            if self.human is not None:
                self.human(describe(event))

    def round_done(self) -> bool:
        """After each finished round: metrics, the state file. True once a round finished since last asked."""
        if self.watcher.rounds_done == self.rounds_seen:
            return False
        if self.rounds_seen == 0 and self.daemon:
            # The partitions live as long as the run: out of the collector's sight, a round's young objects
            # are collected without walking 10,000 of them each time (docs/performance.md).
            gc.freeze()
        self.rounds_seen = self.summary.rounds = self.watcher.rounds_done
        if self.metrics is not None:
            self.metrics.on_round(self.watcher, (now_ms() - self.watcher.round_started_ms) / 1000)
        if self.state_path is not None:
            save_state(self.state_path, self.watcher)
        return True

    async def wait(self, stop: asyncio.Event | None) -> None:
        """Until an answer arrives, the next round is due, or `stop` is set."""
        deadline = self.watcher.next_deadline_ms()
        if deadline is not None and deadline <= now_ms() and not self.tasks:
            return
        self.wake.clear()
        timeout = None if deadline is None else max(0.0, (deadline - now_ms()) / 1000)
        waiters = [asyncio.ensure_future(self.wake.wait())]
        if stop is not None:
            waiters.append(asyncio.ensure_future(stop.wait()))
        _done, pending = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        for waiter in pending:
            waiter.cancel()

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        for task in list(self.tasks):
            with contextlib.suppress(BaseException):
                await task
        await self.net.close()


async def watch(
    bootstrap_servers: str,
    *,
    topics: Iterable[str] | None = None,
    groups: Iterable[str] | None = (),
    rewind_groups: bool = False,
    interval_ms: int = 5000,
    transaction_timeout_ms: int = 900_000,
    once: bool = False,
    events: EventLog | None = None,
    state_path: Path | None = None,
    metrics: WatchMetrics | None = None,
    security: Security | None = None,
    request_timeout_ms: int = 10_000,
    human: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    max_rounds: int | None = None,
) -> WatchSummary:
    """Run the watcher until `stop` is set (`once`: until every position is validated, or a few rounds).
    Each event is written as it is found; the summary says what was found. `groups`: names or patterns of
    the groups to check after a truncation, None for every consumer group (the command's default), empty
    for none."""
    net = NetworkClient(bootstrap_servers, client_id="epochguard-watch", request_timeout_ms=request_timeout_ms,
                        security=security)
    watcher = Watcher(topics=topics, groups=groups, rewind_groups=rewind_groups,
                      interval_ms=_ONCE_RETRY_MS if once else interval_ms,
                      transaction_timeout_ms=transaction_timeout_ms,
                      bootstrap_nodes=sorted(net.bootstrap, reverse=True), any_node=net.least_loaded_node)
    if state_path is not None:
        state = load_state(state_path)
        if state is not None:
            watcher.restore(state)
    driver = _Driver(watcher, net, events or EventLog(None), metrics, human, state_path)
    driver.daemon = not once and max_rounds is None
    try:
        while stop is None or not stop.is_set():
            driver.send()
            driver.report()
            if driver.round_done():
                if once and (watcher.settled or driver.rounds_seen >= _ONCE_MAX_ROUNDS):
                    break
                if max_rounds is not None and driver.rounds_seen >= max_rounds:
                    break
            elif once and watcher.rounds_done == 0 and watcher.round >= _ONCE_METADATA_TRIES:
                break  # no broker answered Metadata: could not run
            await driver.wait(stop)
    finally:
        await driver.close()
    driver.summary.partitions = len(watcher.partitions)
    return driver.summary

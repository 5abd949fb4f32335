"""`AsyncConsumer` and `KafkaConsumer`: the sans-IO `epochguard.client.consumer.Consumer` on real sockets.

Mirrors the application face of Kafka's `KafkaConsumer` (as kafka-python 3 spells it: same method
and setting names) around its `ConsumerNetworkClient`. Every protocol decision (positions, KIP-320
validation with OffsetsForLeaderEpoch, precise resets, `LogTruncationError`, read_committed, leader
hints, retries) is the state machine's, and group membership (`subscribe()`) is the
`client.coordinator.ConsumerCoordinator`'s; this module only moves their requests to brokers
(`network.NetworkClient`) and their answers back, and tells them the time. The two things it adds
are the group coordinator's address (FindCoordinator, forgotten on NOT_COORDINATOR /
COORDINATOR_NOT_AVAILABLE or a failed exchange, as Kafka's `AbstractCoordinator.markCoordinatorUnknown`)
and the waiting of the blocking calls (`commit`, `committed`, `position`).

`AsyncConsumer` runs on the caller's event loop: a driver task sends whatever the state machine has
due and sleeps until its next deadline or an answer. `KafkaConsumer` runs the same `AsyncConsumer` on a
private event-loop thread and blocks on it; its calls are thread-confined to that loop.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import functools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any

from epochguard.client.consumer import CompletedFetch, FetchState, OffsetsForTimesLookup
from epochguard.client.consumer import Consumer as ConsumerMachine
from epochguard.client.metadata import ClientMetadata
from epochguard.errors import (
    AuthenticationError,
    ClientClosedError,
    CommitFailedError,
    EpochGuardError,
    Errors,
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    UnsupportedVersionError,
)
from epochguard.protocol.messages import (
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    JoinGroupRequest,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from epochguard.types import (
    ConsumerRecord,
    FetchPosition,
    IsolationLevel,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
    epoch_or_none,
)

from .blocking import BlockingClient
from .coordinator import ConsumerCoordinator
from .network import NetworkClient
from .security import SECURITY_DEFAULTS, security_of
from .settings import COMMON_UNSUPPORTED, check_settings

__all__ = ["AsyncConsumer", "KafkaConsumer", "CONSUMER_DEFAULTS", "UNSUPPORTED_SETTINGS", "COORDINATOR_NODE"]

# The state machine's node id for "the group coordinator", resolved here by FindCoordinator.
COORDINATOR_NODE = -(1 << 30)
_COORDINATOR_ERRORS = frozenset({Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE})
_IDLE_S = 1.0  # the driver wakes at least this often (close, clock) even with nothing scheduled
_MIN_ROUND_S = 0.005  # a round that sent nothing sleeps at least this long: no busy loop on a due deadline
# A partition with one completed fetch buffered is fetched on from its end (the state machine's `prefetch`),
# so the next answer travels while the application decodes the last: at most two answers of
# max_partition_fetch_bytes buffered a partition, one in flight a broker.
PREFETCH = 1

# kafka-python's names (= Java's, snake_case) and this client's defaults (Java's where they differ
# from kafka-python's: request_timeout_ms 30 s, reconnect_backoff_max_ms 1 s).
CONSUMER_DEFAULTS: dict[str, Any] = {
    "bootstrap_servers": "localhost:9092",
    "client_id": "epochguard-client",
    "group_id": None,
    "key_deserializer": None,
    "value_deserializer": None,
    "fetch_max_wait_ms": 500,
    "fetch_min_bytes": 1,
    "fetch_max_bytes": 52_428_800,
    "max_partition_fetch_bytes": 1_048_576,
    "request_timeout_ms": 30_000,
    "retry_backoff_ms": 100,
    "reconnect_backoff_ms": 50,
    "reconnect_backoff_max_ms": 1_000,
    "auto_offset_reset": "latest",
    "enable_auto_commit": True,
    "auto_commit_interval_ms": 5_000,
    "metadata_max_age_ms": 300_000,
    "isolation_level": "read_uncommitted",
    "consumer_timeout_ms": math.inf,
    "check_crcs": True,  # always: the Rust decoder checks every batch's CRC
    **SECURITY_DEFAULTS,  # security_protocol, ssl_*, sasl_mechanism, sasl_plain_username/password
    "partition_assignment_strategy": ("range", "roundrobin"),  # names, or kafka-python assignor classes
    "session_timeout_ms": 10_000,
    "heartbeat_interval_ms": 3_000,
    "max_poll_interval_ms": 300_000,  # the rebalance timeout of a JoinGroup
    "max_response_bytes": None,  # beyond kafka-python: the largest answer read (default: fetch_max_bytes + 1 MiB)
    "default_offset_commit_callback": None,  # commit_async's callback when it is given none
    # Beyond kafka-python and Java: Fetch v12+ carries LastFetchedEpoch, the leader answers a divergence
    # (DivergingEpoch) and a seek with an epoch needs no OffsetsForLeaderEpoch (a follower's rule).
    "send_last_fetched_epoch": False,
    "client_rack": "",  # KIP-392: sent in every Fetch; a rack-aware leader may name a follower to read from
}

# kafka-python settings this client refuses when set to anything but None, and why.
UNSUPPORTED_SETTINGS: dict[str, str] = {
    **COMMON_UNSUPPORTED,
    "max_poll_records": "poll() hands out every completed fetch (bounded by max_partition_fetch_bytes)",
    "exclude_internal_topics": "subscribe() takes topic names only (no patterns)",
    "legacy_iterator": "kafka-python's old iterator is not offered",
    "enable_incremental_fetch_sessions": "every Fetch is a full one (no KIP-227 fetch sessions)",
    "group_instance_id": "static group membership (KIP-345) is not offered yet",
    "max_in_flight_requests_per_connection": "a consumer has at most one Fetch in flight a broker, as Java's",
    "receive_message_max_bytes": "the largest answer read is max_response_bytes (default fetch_max_bytes + 1 MiB)",
}


def consumer_config(configs: Mapping[str, Any]) -> dict[str, Any]:
    """The settings with defaults filled in; unknown names are a TypeError, unsupported ones (set) a
    ValueError naming why, as kafka-python refuses unrecognised configs."""
    check_settings(configs, CONSUMER_DEFAULTS, UNSUPPORTED_SETTINGS, "consumer")
    config = {**CONSUMER_DEFAULTS, **{k: v for k, v in configs.items() if k in CONSUMER_DEFAULTS}}
    if config["auto_offset_reset"] not in ("earliest", "latest", "none"):
        raise ValueError(f"auto_offset_reset must be earliest, latest or none: {config['auto_offset_reset']!r}")
    if config["isolation_level"] not in ("read_uncommitted", "read_committed"):
        raise ValueError(f"isolation_level must be read_uncommitted or read_committed: {config['isolation_level']!r}")
    config["security"] = security_of(config)
    for name in ("fetch_max_wait_ms", "fetch_min_bytes", "fetch_max_bytes", "max_partition_fetch_bytes",
                 "request_timeout_ms", "retry_backoff_ms", "reconnect_backoff_ms", "reconnect_backoff_max_ms",
                 "auto_commit_interval_ms", "metadata_max_age_ms", "session_timeout_ms",
                 "heartbeat_interval_ms", "max_poll_interval_ms"):
        if not isinstance(config[name], int) or config[name] < 0:
            raise ValueError(f"{name} must be a non-negative int: {config[name]!r}")
    config["partition_assignment_strategy"] = tuple(
        getattr(a, "name", a) for a in config["partition_assignment_strategy"])  # kafka-python's classes have .name
    if config["max_response_bytes"] is None:
        config["max_response_bytes"] = config["fetch_max_bytes"] + (1 << 20)
    return config


class AsyncConsumer:
    """A consumer on asyncio (`async with AsyncConsumer(...) as c: async for record in c: ...`).

    Settings as kafka-python's `KafkaConsumer` (see `CONSUMER_DEFAULTS`); topics go to `subscribe()`
    (group membership, `client.coordinator`) or partitions to `assign()`, not to the constructor.
    """

    def __init__(self, **configs: Any) -> None:
        self.config = consumer_config(configs)
        c = self.config
        self._network = NetworkClient(
            c["bootstrap_servers"], client_id=c["client_id"], request_timeout_ms=c["request_timeout_ms"],
            reconnect_backoff_ms=c["reconnect_backoff_ms"], reconnect_backoff_max_ms=c["reconnect_backoff_max_ms"],
            max_response_bytes=c["max_response_bytes"], security=c["security"])
        self._group_id: str | None = c["group_id"]
        self._machine = ConsumerMachine(
            bootstrap=sorted(self._network.bootstrap, reverse=True),
            group_id=self._group_id,
            coordinator_id=COORDINATOR_NODE if self._group_id is not None else None,
            reset_policy=c["auto_offset_reset"],
            isolation_level=(IsolationLevel.READ_COMMITTED if c["isolation_level"] == "read_committed"
                             else IsolationLevel.READ_UNCOMMITTED),
            retry_backoff_ms=c["retry_backoff_ms"],
            request_timeout_ms=c["request_timeout_ms"],
            metadata=ClientMetadata(topics=(), refresh_backoff_ms=c["retry_backoff_ms"],
                                    metadata_max_age_ms=c["metadata_max_age_ms"],
                                    least_loaded=self._network.least_loaded_node),
            fetch_max_wait_ms=c["fetch_max_wait_ms"],
            fetch_min_bytes=c["fetch_min_bytes"],
            fetch_max_bytes=c["fetch_max_bytes"],
            max_partition_fetch_bytes=c["max_partition_fetch_bytes"],
            group_generation=self._generation,
            prefetch=PREFETCH,
            send_last_fetched_epoch=bool(c["send_last_fetched_epoch"]),
            client_rack=str(c["client_rack"] or ""),
        )
        self._group: ConsumerCoordinator | None = None
        if self._group_id is not None:
            self._group = ConsumerCoordinator(
                self._group_id, assignors=c["partition_assignment_strategy"],
                session_timeout_ms=c["session_timeout_ms"], rebalance_timeout_ms=c["max_poll_interval_ms"],
                heartbeat_interval_ms=c["heartbeat_interval_ms"], retry_backoff_ms=c["retry_backoff_ms"],
                partitions_for=lambda topic: len(self._machine.metadata.partitions_for(topic)) or None,
                on_partitions_revoked=self._revoked, on_partitions_assigned=self._assigned)
        self._listener: Any = None
        self._coordinator: int | None = None
        self._finding: asyncio.Task[int] | None = None
        self._commit_waiters: list[tuple[dict[TopicPartition, int], asyncio.Future[None]]] = []
        self._sent_commits: dict[int, asyncio.Future[None]] = {}  # id(request) -> waiter
        self._driver: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._closed = False
        self._failure: BaseException | None = None
        self._epoch = time.monotonic()
        self._next_auto_commit = math.inf
        # Whether the driver may send: a new assignment waits for the next poll (or position, commit...),
        # so assign-then-seek never races a reset of the new partitions (Java resolves positions in poll).
        self._armed = False
        self.last_error: EpochGuardError | None = None  # the latest network error (retried): for diagnosis
        # A connection that could not authenticate (TLS, SASL): raised once by the next application call
        # (Java's NetworkClient keeps it per node for `ConsumerNetworkClient.maybeThrowAuthFailure`).
        self._auth_failure: AuthenticationError | None = None
        self._pending: collections.deque[ConsumerRecord] = collections.deque()  # `async for`'s, not handed out
        self._last: ConsumerRecord | None = None

    # --- lifecycle ------------------------------------------------------------------------------
    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the driver task on the running loop (every other call does it when needed)."""
        self._check_open()
        if self._driver is None:
            self._driver = asyncio.get_running_loop().create_task(self._drive(), name="epochguard-consumer")
            if self.config["enable_auto_commit"] and self._group_id is not None:
                self._next_auto_commit = self._now_ms() + self.config["auto_commit_interval_ms"]

    async def close(self, autocommit: bool = True) -> None:
        """Commit (with enable_auto_commit and a group), stop, and close every connection. Idempotent."""
        if self._closed:
            return
        self._unread()
        if autocommit and self._driver is not None and self.config["enable_auto_commit"] and self._group_id:
            try:
                await self.commit()
            except EpochGuardError as exc:
                self.last_error = exc
        if self._driver is not None:
            await self._leave_group()
        self._closed = True
        for task in [self._driver, *self._tasks]:
            if task is not None:
                task.cancel()
        for task in [self._driver, *self._tasks]:
            if task is not None:
                try:
                    await task
                except BaseException:
                    pass
        await self._network.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("this consumer is closed")
        if self._failure is not None:
            raise ClientClosedError(f"the consumer's driver failed: {self._failure!r}") from self._failure

    def _raise_auth_failure(self) -> None:
        failure, self._auth_failure = self._auth_failure, None
        if failure is not None:
            raise failure

    def _now_ms(self) -> int:
        return int((time.monotonic() - self._epoch) * 1000)

    # --- the driver -----------------------------------------------------------------------------
    async def _drive(self) -> None:
        try:
            while not self._closed:
                self._wake.clear()
                now = self._now_ms()
                sent = self._send_due(now)
                deadline = self._machine.next_deadline_ms()
                group_deadline = None if self._group is None else self._group.next_deadline_ms()
                if group_deadline is not None:
                    deadline = group_deadline if deadline is None else min(deadline, group_deadline)
                delay = _IDLE_S if deadline is None else (deadline - self._now_ms()) / 1000
                delay = min(max(delay, 0.0 if sent else _MIN_ROUND_S), _IDLE_S)
                try:
                    await asyncio.wait_for(self._wake.wait(), delay)
                except TimeoutError:
                    pass
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug: every waiting call raises it instead of hanging
            self._failure = exc
            self._changed.set()
            raise

    def _send_due(self, now: int) -> bool:
        """Send whatever the state machines have due (once the application polled); whether anything went."""
        if not self._armed:
            return False
        sent = self._machine.poll_requests(now)
        if self._group is not None:
            sent += [(COORDINATOR_NODE, r) for r in self._group.poll_requests(now)]
        for node, request in sent:
            self._dispatch(node, request)
        return bool(sent)

    def _dispatch(self, node: int, request: Any) -> None:
        if isinstance(request, OffsetCommitRequest):
            offsets = {p.tp: p.committed_offset for p in request.partitions}
            for i, (wanted, future) in enumerate(self._commit_waiters):
                if wanted == offsets:
                    self._sent_commits[id(request)] = future
                    del self._commit_waiters[i]
                    break
        task = asyncio.get_running_loop().create_task(self._exchange(node, request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _exchange(self, node: int, request: Any) -> None:
        try:
            target = await self._find_coordinator() if node == COORDINATOR_NODE else node
            timeout = (self.config["max_poll_interval_ms"] + 5_000 if isinstance(request, JoinGroupRequest)
                       else None)  # a JoinGroup waits for the whole group, up to the rebalance timeout
            response = await self._network.send(target, request, timeout)
        except (EpochGuardError, ValueError, TypeError) as exc:  # no answer: the state machine retries
            self.last_error = exc if isinstance(exc, EpochGuardError) else KafkaConnectionError(repr(exc))
            if isinstance(exc, AuthenticationError):
                self._auth_failure = exc  # the application hears of it; the node backs off meanwhile
            if node == COORDINATOR_NODE:
                self._coordinator = None
            if self._group is not None and self._group.owns(request):
                self._group.on_request_failed(request, self._now_ms())
                return
            self._machine.on_request_failed(node, request, self._now_ms(),
                                            exc if isinstance(exc, EpochGuardError) else None)
            waiter = self._sent_commits.pop(id(request), None)
            if waiter is not None:  # the commit is queued again by the state machine: wait for that one
                self._commit_waiters.insert(0, ({p.tp: p.committed_offset for p in request.partitions}, waiter))
        else:
            self._answered(node, request, response)
        finally:
            self._wake.set()
            self._changed.set()

    def _answered(self, node: int, request: Any, response: Any) -> None:
        """An answer: to the state machine that sent the request, and to whoever waits for it."""
        if node == COORDINATOR_NODE and _coordinator_moved(response):
            self._coordinator = None
        if self._group is not None and self._group.owns(request):
            self._group.on_response(request, response, self._now_ms())
            return
        self._machine.on_response(node, request, response, self._now_ms())
        if isinstance(response, FetchResponse):
            # The next fetch goes out now, not after a round of the driver: on a stream of full
            # fetches the time between an answer and the next request is throughput lost.
            self._send_due(self._now_ms())
        if isinstance(response, MetadataResponse):
            self._network.update_brokers({b.node_id: (b.host, b.port) for b in response.brokers})
        waiter = self._sent_commits.pop(id(request), None)
        if waiter is not None and not waiter.done() and isinstance(response, OffsetCommitResponse):
            errors = {p.tp: p.error_code for p in response.partitions if p.error_code != Errors.NONE}
            if errors:
                waiter.set_exception(CommitFailedError(
                    "commit refused: " + ", ".join(f"{tp} {e.name}" for tp, e in sorted(errors.items())), errors))
            else:
                waiter.set_result(None)

    async def _find_coordinator(self) -> int:
        """The group coordinator's node id, asked of a known broker (FindCoordinator) once until forgotten."""
        if self._coordinator is not None:
            return self._coordinator
        if self._finding is None or self._finding.done():
            self._finding = asyncio.get_running_loop().create_task(self._ask_coordinator())
        return await asyncio.shield(self._finding)

    async def _ask_coordinator(self) -> int:
        assert self._group_id is not None
        node = self._machine.metadata.any_node(self._machine.bootstrap)
        if node is None:
            raise KafkaConnectionError("every broker is in its reconnect back-off")
        response = await self._network.send(node, FindCoordinatorRequest(key=self._group_id,
                                                                                coordinator_keys=(self._group_id,)))
        assert isinstance(response, FindCoordinatorResponse)
        if not response.coordinators:
            raise KafkaConnectionError("FindCoordinator answered no coordinator")
        found = response.coordinators[0]
        if found.error_code != Errors.NONE:
            raise KafkaConnectionError(f"no coordinator for group {self._group_id!r}: {found.error_code.name}")
        self._network.update_brokers({found.node_id: (found.host, found.port)})
        self._coordinator = found.node_id
        return found.node_id

    def _poke(self) -> None:
        self._wake.set()

    def _arm(self) -> None:
        """The application polls (or waits on the state machine): the driver may send."""
        self._armed = True
        self._wake.set()

    async def _wait_for(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Wait until `done()` (re-checked after every answer), or raise KafkaTimeoutError."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        self._arm()
        while True:
            self._check_open()
            self._raise_auth_failure()
            self._changed.clear()
            if done():
                return
            remaining = end - loop.time()
            if remaining <= 0:
                raise KafkaTimeoutError(f"{what} did not complete within {timeout_s * 1000:.0f} ms")
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass

    # --- application API ------------------------------------------------------------------------
    async def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (replacing the assignment, as `KafkaConsumer.assign`)."""
        self._unread()
        self._check_open()
        if self._group is not None and self._group.topics:
            raise ValueError("assign() after subscribe(): unsubscribe() first (kafka-python's IllegalStateError)")
        wanted = [TopicPartition(tp[0], tp[1]) for tp in partitions]
        gone = [tp for tp in self._machine.assignment if tp not in set(wanted)]
        if gone:
            self._machine.unassign(gone)
        self._machine.assign([tp for tp in wanted if tp not in self._machine.assignment])
        self._armed = False  # until the application polls (or asks for a position): see __init__
        await self.start()

    def assignment(self) -> set[TopicPartition]:
        return set(self._machine.assignment)

    async def subscribe(self, topics: Iterable[str], listener: Any = None) -> None:
        """Join the group (`group_id`) for these topics; partitions come and go with rebalances.
        `listener`: kafka-python's `ConsumerRebalanceListener` (`on_partitions_revoked(revoked)` before
        a rejoin, after the auto-commit of their positions; `on_partitions_assigned(assigned)`)."""
        self._check_open()
        if self._group is None:
            raise ValueError("subscribe() needs a group_id")
        if self._machine.assignment and not self._group.topics:
            raise ValueError("subscribe() after assign(): unsubscribe() first (kafka-python's IllegalStateError)")
        names = [topics] if isinstance(topics, str) else list(topics)
        self._listener = listener
        self._machine.metadata.add_topics(names)
        self._group.subscribe(names)
        await self.start()
        self._arm()

    def subscription(self) -> set[str]:
        return set(self._group.topics) if self._group is not None else set()

    async def unsubscribe(self) -> None:
        """Leave the group (LeaveGroup) and drop every partition."""
        self._unread()
        await self._leave_group()
        self._machine.unassign(list(self._machine.assignment))

    async def _leave_group(self) -> None:
        if self._group is None:
            return
        self._group.subscribe(())
        request = self._group.leave()
        if request is None or self._coordinator is None:
            return
        try:
            await self._network.send(self._coordinator, request, 2_000)
        except EpochGuardError as exc:  # best effort: the session timeout removes the member anyway
            self.last_error = exc

    def _generation(self) -> tuple[int, str]:
        return (-1, "") if self._group is None else self._group.generation_and_member

    def _revoked(self, partitions: set[TopicPartition]) -> None:
        if self.config["enable_auto_commit"]:
            offsets = {tp: om for tp, om in self._machine.consumed_offsets().items() if tp in partitions}
            if offsets:
                self._machine.commit(offsets)  # goes out with the old generation, before the JoinGroup's answer
        self._machine.unassign([tp for tp in partitions if tp in self._machine.assignment])
        if self._listener is not None:
            self._listener.on_partitions_revoked(set(partitions))

    def _assigned(self, partitions: set[TopicPartition]) -> None:
        self._machine.assign(sorted(partitions))
        if self._listener is not None:
            self._listener.on_partitions_assigned(set(partitions))
        self._changed.set()

    async def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        """`seek(tp, offset)` fetches from there as is; `seek(tp, OffsetAndMetadata(offset, leader_epoch=e))`
        validates the position against the leader first (KIP-320, as Java's `seek(tp, OffsetAndMetadata)`)."""
        self._unread()
        self._check_open()
        self._machine.seek(TopicPartition(*partition), offset)
        self._poke()

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._unread()
        self._check_open()
        for tp in partitions or tuple(self._machine.assignment):
            self._machine.seek_to_beginning(TopicPartition(*tp))
        self._poke()

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._unread()
        self._check_open()
        for tp in partitions or tuple(self._machine.assignment):
            self._machine.seek_to_end(TopicPartition(*tp))
        self._poke()

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._machine.pause(TopicPartition(*tp))

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._machine.resume(TopicPartition(*tp))
        self._poke()

    def fetch_until(self, partition: TopicPartition, offset: int | None) -> None:
        """Beyond kafka-python: fetch `partition` only below `offset` (None: no limit). A reader of a known
        range asks for nothing past its end: no bytes it drops, no fetch held fetch_max_wait_ms at the
        broker (which, one fetch a broker, would delay the next fetch there). Kept by seeks."""
        self._machine.fetch_until(TopicPartition(*partition), offset)
        self._poke()

    async def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        """The offset of the next record to fetch, once known (committed offset or reset)."""
        self._unread()
        await self.start()
        tp = TopicPartition(*partition)
        self._machine.state_of(tp)  # KeyError-free check: raises if not assigned
        timeout = self.config["request_timeout_ms"] if timeout_ms is None else timeout_ms

        def known() -> bool:
            pos = self._machine.position(tp)
            return pos is not None and self._machine.state_of(tp) != FetchState.AWAIT_RESET

        self._raise_pending()
        await self._wait_for(lambda: self._raise_pending() or known(), timeout / 1000, f"position({tp})")
        pos = self._machine.position(tp)
        assert pos is not None
        return pos.offset

    def _raise_pending(self) -> bool:
        """Raise what the state machines hold for the application (no records are taken)."""
        self._raise_auth_failure()
        if self._group is not None and self._group.errors:
            raise self._group.errors.pop(0)
        self._machine.raise_pending()
        return False

    async def poll(self, timeout_ms: int = 0) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched since the last poll, by partition (empty after `timeout_ms` without any).
        Raises `LogTruncationError` (auto_offset_reset="none", with the divergent offsets),
        `OffsetOutOfRangeError`, `NoOffsetForPartitionError` as the state machine reports them."""
        return self.records_of(await self.poll_fetches(timeout_ms))

    async def poll_arrow(self, timeout_ms: int = 0) -> dict[TopicPartition, Any]:
        """As `poll`, but each partition's records as one `pyarrow.RecordBatch` (offset, timestamp,
        timestamp_type, key, value, headers, leader_epoch) decoded in Rust with the GIL released; the
        deserializers do not apply. Record batches travel as bytes until here."""
        return arrow_of(await self.poll_fetches(timeout_ms))

    async def poll_fetches(self, timeout_ms: int = 0) -> list[CompletedFetch]:
        """The completed fetches holding records (see `_poll_fetches`), after giving back what `async for`
        holds and has not handed out."""
        self._unread()
        return await self._poll_fetches(timeout_ms)

    async def _poll_fetches(self, timeout_ms: int = 0) -> list[CompletedFetch]:
        """The completed fetches holding records, handed over (positions advanced past them), undecoded:
        `records_of` / `arrow_of` decode them, on any thread. The next fetches are sent before this
        returns, so they travel while the caller decodes (Java's `KafkaConsumer.poll` sends its next
        fetches before it hands records over). Empty after `timeout_ms` without any."""
        await self.start()
        self._arm()
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_ms / 1000
        self._maybe_auto_commit()
        while True:
            self._check_open()
            self._changed.clear()
            self._raise_pending()
            fetches = self._machine.poll_fetches(self._now_ms())
            if fetches:
                self._send_due(self._now_ms())  # the buffer drained: the next fetch goes out now
                with_records = [f for f in fetches if f.has_records]
                if with_records:
                    return with_records
            remaining = end - loop.time()
            if remaining <= 0:
                return []
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return []

    def _maybe_auto_commit(self) -> None:
        """enable_auto_commit: every auto_commit_interval_ms, commit the positions after what earlier polls
        handed out, when the application polls again (Java's `maybeAutoCommitOffsetsAsync` in `poll`): the
        records of the last poll count as processed only then, never while the application holds them."""
        now = self._now_ms()
        if now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self.config["auto_commit_interval_ms"]
        offsets = self._machine.consumed_offsets()
        if offsets:
            self._machine.commit(offsets)
            self._wake.set()

    def rewind(self, positions: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """Give back records handed out but not used (the blocking iterator's, before any other call):
        each still assigned partition's position goes back to that offset and epoch, with its current
        leader (those records were read from it: nothing to validate), and is fetched again from there."""
        for tp, om in positions.items():
            position = self._machine.position(tp) if tp in self._machine.assignment else None
            if position is not None:  # as read from the current leader: no validation to wait for
                self._machine.seek_position(tp, FetchPosition(om.offset, om.leader_epoch, position.current_leader),
                                            validate=False)
        self._poke()

    def records_of(self, fetches: Iterable[CompletedFetch]) -> dict[TopicPartition, list[ConsumerRecord]]:
        """The fetches' records by partition, deserialized (pure: any thread)."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for f in fetches:
            records = f.records
            if records:
                out.setdefault(f.tp, []).extend(records)
        return {tp: self._deserialize(records) for tp, records in out.items()}

    def _deserialize(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        kd, vd = self.config["key_deserializer"], self.config["value_deserializer"]
        if kd is None and vd is None:
            return records
        return [dataclasses.replace(r, key=kd(r.key) if kd and r.key is not None else r.key,
                                    value=vd(r.value) if vd and r.value is not None else r.value)
                for r in records]

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """The next record: the consumer is its own async iterator, as `KafkaConsumer` is its own iterator,
        so an `async for` left with `break` and started again goes on with the next record (a generator per
        loop dropped the rest of a poll whose positions had moved past it). StopAsyncIteration after
        `consumer_timeout_ms` without a record."""
        if not self._pending:
            await self._fill()
        record = self._last = self._pending.popleft()
        return record

    async def _fill(self) -> None:
        end = time.monotonic() + self.config["consumer_timeout_ms"] / 1000
        while True:
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise StopAsyncIteration
            batch = await self._poll_fetches(int(min(remaining * 1000, 1000)))
            for records in self.records_of(batch).values():
                self._pending.extend(records)
            if self._pending:
                return

    def _unread(self) -> None:
        """Before any other call: the records `async for` holds but has not handed out are given back (see
        `KafkaConsumer._unread`)."""
        if self._pending:
            positions = unread_positions(self._pending, self._last)
            self._pending.clear()
            self.rewind(positions)

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None) -> None:
        """Commit `offsets` (default: every consumed position, each with its leader epoch) and wait for the
        coordinator's answer; `CommitFailedError` if it refuses any partition."""
        self._unread()
        self._check_open()
        if self._group_id is None:
            raise ValueError("commit needs a group_id")
        await self.start()
        chosen = dict(offsets) if offsets is not None else self._machine.consumed_offsets()
        if not chosen:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._commit_waiters.append(({TopicPartition(*tp): om.offset for tp, om in chosen.items()}, future))
        self._machine.commit(chosen)
        self._arm()
        try:
            await asyncio.wait_for(asyncio.shield(future), self.config["request_timeout_ms"] / 1000)
        except TimeoutError:
            raise KafkaTimeoutError(f"commit did not complete within {self.config['request_timeout_ms']} ms") from None

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
                     callback: Callable[[dict[TopicPartition, OffsetAndMetadata], Exception | None], Any] | None = None,
                     ) -> asyncio.Task[None]:
        """Commit without waiting (kafka-python's / Java's `commitAsync`): the offsets are taken now
        (default: every consumed position, with its epoch), the answer arrives in the background.
        `callback(offsets, exception or None)` (default: the `default_offset_commit_callback` setting)
        runs on the event loop when it does; the returned task completes then too (and raises what failed)."""
        self._unread()
        self._check_open()
        if self._group_id is None:
            raise ValueError("commit needs a group_id")
        chosen = dict(offsets) if offsets is not None else self._machine.consumed_offsets()
        done = callback or self.config["default_offset_commit_callback"]

        async def run() -> None:
            error: Exception | None = None
            try:
                await self.commit(chosen)
            except Exception as exc:
                error = exc
            if done is not None:
                try:
                    done(chosen, error)
                except Exception:
                    logging.getLogger(__name__).exception("commit_async callback failed")
            if error is not None:
                raise error

        task = asyncio.get_running_loop().create_task(run())
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: no "never retrieved" noise
        return task

    async def committed(self, partition: TopicPartition) -> OffsetAndMetadata | None:
        """The group's committed offset for `partition`, with its leader epoch (an OffsetFetch to the
        coordinator), or None if nothing is committed."""
        self._check_open()
        if self._group_id is None:
            raise ValueError("committed() needs a group_id")
        await self.start()
        tp = TopicPartition(*partition)
        deadline = asyncio.get_running_loop().time() + self.config["request_timeout_ms"] / 1000
        while True:
            response = await self._send_retrying(self._find_coordinator, OffsetFetchRequest(self._group_id, (tp,)),
                                                 f"committed({tp})", deadline, self._forget_coordinator)
            assert isinstance(response, OffsetFetchResponse)
            errors = {response.error_code} | {p.error_code for p in response.partitions}
            if errors & _COORDINATOR_ERRORS or Errors.COORDINATOR_LOAD_IN_PROGRESS in errors:
                self._coordinator = None
                await asyncio.sleep(self.config["retry_backoff_ms"] / 1000)
                continue
            for p in response.partitions:
                if p.tp == tp:
                    if p.error_code != Errors.NONE:
                        raise p.error_code.exception(f"committed({tp})") or CommitFailedError(p.error_code.name)
                    if p.committed_offset < 0:
                        return None
                    epoch = epoch_or_none(p.committed_leader_epoch) if response.version >= 5 else None
                    return OffsetAndMetadata(p.committed_offset, p.metadata, epoch)
            return None

    async def partitions_for_topic(self, topic: str, timeout_ms: int | None = None) -> set[int]:
        """The topic's partition ids, from metadata (fetched if needed)."""
        await self.start()
        self._machine.metadata.add_topics([topic])
        self._machine.metadata.request_update()
        self._poke()
        timeout = self.config["request_timeout_ms"] if timeout_ms is None else timeout_ms
        await self._wait_for(lambda: bool(self._machine.metadata.partitions_for(topic)), timeout / 1000,
                             f"partitions_for_topic({topic!r})")
        return {tp.partition for tp in self._machine.metadata.partitions_for(topic)}

    async def topics(self) -> set[str]:
        """Every topic the client may describe, internal ones left out (kafka-python's `topics()`, Java's
        `listTopics()`): always a fresh Metadata request for all topics, to the least loaded broker. The
        consumer's own metadata (its assigned topics) is not touched."""
        self._check_open()
        deadline = asyncio.get_running_loop().time() + self.config["request_timeout_ms"] / 1000

        async def any_broker() -> int:
            node = self._machine.metadata.any_node(self._machine.bootstrap)
            if node is None:
                raise KafkaConnectionError("every broker is in its reconnect back-off")
            return node

        response = await self._send_retrying(any_broker, MetadataRequest(None), "topics()", deadline)
        assert isinstance(response, MetadataResponse)
        self._network.update_brokers({b.node_id: (b.host, b.port) for b in response.brokers})
        return {t.name for t in response.topics if t.error_code == Errors.NONE and not t.is_internal}

    async def _send_retrying(self, node_of: Callable[[], Awaitable[int]], request: Any, what: str, deadline: float,
                             on_failure: Callable[[], None] | None = None) -> Any:
        """`request` to the node `node_of()` names, again after the retry back-off while the exchange fails
        (`on_failure` first: a coordinator to forget), until `deadline` (loop time): then `KafkaTimeoutError`."""
        while True:
            try:
                return await self._network.send(await node_of(), request)
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                self.last_error = exc
                if on_failure is not None:
                    on_failure()
                if asyncio.get_running_loop().time() >= deadline:
                    raise KafkaTimeoutError(f"{what}: {exc}") from exc
                await asyncio.sleep(self.config["retry_backoff_ms"] / 1000)

    def _forget_coordinator(self) -> None:
        self._coordinator = None

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int], timeout_ms: int | None = None,
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition the first offset whose timestamp is at or after the target (ms since the epoch),
        with that record's timestamp and leader epoch, or None if there is none (kafka-python's and Java's
        `offsets_for_times`; the partitions need not be assigned). ValueError for a negative target,
        `UnsupportedVersionError` if the leader serves no ListOffsets version, `KafkaTimeoutError` after
        `timeout_ms` (default `request_timeout_ms`)."""
        targets = {TopicPartition(*tp): int(ts) for tp, ts in timestamps.items()}
        for tp, ts in targets.items():
            if ts < 0:
                raise ValueError(f"The target time for partition {tp} is {ts}. The target time cannot be negative.")
        lookup = await self._run_lookup(lambda now, t: self._machine.offsets_for_times(targets, now, t),
                                        timeout_ms, "offsets_for_times")
        return {tp: lookup.result.get(tp) for tp in targets}

    async def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None,
                                ) -> dict[TopicPartition, int]:
        """Each partition's first offset (its log start: ListOffsets EARLIEST); positions are not changed.
        `UnsupportedVersionError`, `KafkaTimeoutError` as `offsets_for_times`."""
        return await self._offsets_at(self._machine.beginning_offsets, partitions, timeout_ms, "beginning_offsets")

    async def end_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None,
                          ) -> dict[TopicPartition, int]:
        """Each partition's end: the offset the next record written gets, as far as this consumer may read
        (the high watermark; the last stable offset under read_committed), from ListOffsets LATEST;
        positions are not changed. `UnsupportedVersionError`, `KafkaTimeoutError` as `offsets_for_times`."""
        return await self._offsets_at(self._machine.end_offsets, partitions, timeout_ms, "end_offsets")

    async def _offsets_at(self, start: Callable[[list[TopicPartition], int, int], OffsetsForTimesLookup],
                          partitions: Iterable[TopicPartition], timeout_ms: int | None, what: str,
                          ) -> dict[TopicPartition, int]:
        """An EARLIEST / LATEST lookup's offsets (a partition the broker gave none is left out, as Java's)."""
        tps = [TopicPartition(*tp) for tp in partitions]
        lookup = await self._run_lookup(lambda now, t: start(tps, now, t), timeout_ms, what)
        return {tp: lookup.offsets[tp] for tp in tps if lookup.offsets.get(tp, -1) >= 0}

    async def _run_lookup(self, start: Callable[[int, int], OffsetsForTimesLookup], timeout_ms: int | None,
                          what: str) -> OffsetsForTimesLookup:
        """Start a ListOffsets lookup on the state machine and wait for it (or its error)."""
        self._check_open()
        await self.start()
        timeout = self.config["request_timeout_ms"] if timeout_ms is None else timeout_ms
        lookup = start(self._now_ms(), timeout)

        def done() -> bool:
            if lookup.error is not None:
                if isinstance(lookup.error, UnsupportedVersionError):
                    raise lookup.error
                raise KafkaTimeoutError(f"{what} did not complete within {timeout} ms: {lookup.error}")
            return lookup.done

        await self._wait_for(done, timeout / 1000, what)
        return lookup

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark the last fetch of `partition` answered (None before one): the offset the next
        record written gets, for lag against `position` (kafka-python's `highwater`). `IllegalStateError`
        if it is not assigned."""
        tp = TopicPartition(*partition)
        if tp not in self._machine.assignment:
            raise IllegalStateError(f"{tp} is not assigned")
        return self._machine.highwater(tp)

    def paused(self) -> set[TopicPartition]:
        """The partitions paused by `pause()` (and not resumed)."""
        return self._machine.paused()

    def bootstrap_connected(self) -> bool:
        """Whether a connection to a broker of the cluster is open (the client has bootstrapped and holds
        a connection that completed its handshake)."""
        return self._network.connected()

    def metrics(self, raw: bool = False) -> dict[str, dict[str, float]]:
        """A few of Java's consumer metrics under their names, in kafka-python's shape ({group: {name:
        value}}; `raw` gives the same): the assigned partitions, the largest lag now (high watermark minus
        position over the assigned partitions that have both: a current value, not Java's windowed maximum;
        NaN with none) and the open connections."""
        lags = [s.highwater - s.position.offset for _tp, s in self._machine.assignment.items()
                if s.highwater is not None and s.position is not None]
        return {
            "consumer-coordinator-metrics": {"assigned-partitions": float(len(self._machine.assignment))},
            "consumer-fetch-manager-metrics": {"records-lag-max": float(max(lags)) if lags else math.nan},
            "consumer-metrics": {"connection-count": float(self._network.connection_count())},
        }

    @property
    def leader_epochs(self) -> dict[TopicPartition, int | None]:
        """The epoch each assigned partition's position was read at (None before any record)."""
        return {tp: (None if (pos := self._machine.position(tp)) is None else pos.offset_epoch)
                for tp in self._machine.assignment}

    @property
    def truncations(self) -> list[Any]:
        """Every truncation the state machine detected (`TruncationEvent`s), as data."""
        return list(self._machine.truncations)

    @property
    def resets(self) -> list[Any]:
        """Every position reset (`OffsetResetEvent`s), as data."""
        return list(self._machine.resets)


def arrow_of(fetches: Iterable[CompletedFetch]) -> dict[TopicPartition, Any]:
    """The fetches' records, one `pyarrow.RecordBatch` per partition (decoded in Rust; pure: any thread)."""
    out: dict[TopicPartition, Any] = {}
    for f in fetches:
        batch = f.arrow()
        if batch.num_rows:
            out[f.tp] = batch if f.tp not in out else _concat(out[f.tp], batch)
    return out


def _concat(a: Any, b: Any) -> Any:
    import pyarrow as pa

    return pa.Table.from_batches([a, b]).combine_chunks().to_batches()[0]


def unread_positions(pending: Iterable[ConsumerRecord], last: ConsumerRecord | None,
                     ) -> dict[TopicPartition, OffsetAndMetadata]:
    """Where each partition goes back to for records an iterator holds but did not hand out: its first such
    record's offset, with the epoch of the last record handed out there (else the record's own)."""
    first: dict[TopicPartition, OffsetAndMetadata] = {}
    for r in pending:
        tp = TopicPartition(r.topic, r.partition)
        if tp not in first:
            epoch = last.leader_epoch if last is not None and (last.topic, last.partition) == tp else r.leader_epoch
            first[tp] = OffsetAndMetadata(r.offset, "", epoch)
    return first


def _coordinator_moved(response: Any) -> bool:
    if isinstance(response, OffsetFetchResponse) and response.error_code in _COORDINATOR_ERRORS:
        return True
    partitions = getattr(response, "partitions", ())
    return any(getattr(p, "error_code", Errors.NONE) in _COORDINATOR_ERRORS for p in partitions)


class KafkaConsumer(BlockingClient[AsyncConsumer]):
    """The blocking consumer (kafka-python's `KafkaConsumer` API): an `AsyncConsumer` on a private loop thread."""

    _what = "consumer"

    def __init__(self, **configs: Any) -> None:
        consumer_config(configs)  # refuse bad settings here, before a thread exists
        super().__init__(lambda: AsyncConsumer(**configs))
        self.config = self._async.config
        self._pending: collections.deque[ConsumerRecord] = collections.deque()  # the iterator's, not yet handed out
        self._last: ConsumerRecord | None = None

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._unread()
        parts = list(partitions)
        self._call(lambda: self._async.assign(parts))

    def assignment(self) -> set[TopicPartition]:
        return self._async.assignment()

    def subscribe(self, topics: Iterable[str], listener: Any = None) -> None:
        names = [topics] if isinstance(topics, str) else list(topics)
        self._call(lambda: self._async.subscribe(names, listener))

    def subscription(self) -> set[str]:
        return self._async.subscription()

    def unsubscribe(self) -> None:
        self._unread()
        self._call(self._async.unsubscribe)

    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        self._unread()
        self._call(lambda: self._async.seek(partition, offset))

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._unread()
        self._call(lambda: self._async.seek_to_beginning(*partitions))

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._unread()
        self._call(lambda: self._async.seek_to_end(*partitions))

    def pause(self, *partitions: TopicPartition) -> None:
        self._call(lambda: _now(self._async.pause, *partitions))

    def resume(self, *partitions: TopicPartition) -> None:
        self._call(lambda: _now(self._async.resume, *partitions))

    def fetch_until(self, partition: TopicPartition, offset: int | None) -> None:
        self._call(lambda: _now(self._async.fetch_until, partition, offset))

    def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        self._unread()
        return self._call(lambda: self._async.position(partition, timeout_ms))

    def poll(self, timeout_ms: int = 0) -> dict[TopicPartition, list[ConsumerRecord]]:
        self._unread()
        return self._polled(self._async.records_of, timeout_ms)

    def poll_arrow(self, timeout_ms: int = 0) -> dict[TopicPartition, Any]:
        self._unread()
        return self._polled(arrow_of, timeout_ms)

    def _polled(self, decode: Callable[[list[CompletedFetch]], dict[TopicPartition, Any]],
                timeout_ms: int) -> dict[TopicPartition, Any]:
        """Fetches handed over on the loop thread (which sends the next ones), decoded on this one: the
        decoding (Rust, GIL released, for Arrow) overlaps the next fetch's network I/O."""
        end = time.monotonic() + timeout_ms / 1000
        while True:
            remaining = max(0, int((end - time.monotonic()) * 1000))
            out = decode(self._call(functools.partial(self._async.poll_fetches, remaining)))
            if out or remaining <= 0 or time.monotonic() >= end:
                return out

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        """The next record (kafka-python's iterator: the consumer is its own iterator, so a `for` loop
        left with `break` and started again goes on with the next record). StopIteration after
        `consumer_timeout_ms` without one."""
        if not self._pending:
            self._fill()
        record = self._last = self._pending.popleft()
        return record

    def _fill(self) -> None:
        timeout = self.config["consumer_timeout_ms"]
        end = time.monotonic() + timeout / 1000
        while True:
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise StopIteration
            batch = self._call(functools.partial(self._async.poll_fetches, int(min(remaining * 1000, 1000))))
            records = self._async.records_of(batch)
            for rs in records.values():
                self._pending.extend(rs)
            if self._pending:
                return

    def _unread(self) -> None:
        """Before any other call: records the iterator holds but has not handed out are given back (the
        partitions fetch again from the first of them), so a commit, a position or a seek sees exactly
        what the application was handed, as kafka-python's iterator moves the position record by record."""
        if not self._pending:
            return
        first = unread_positions(self._pending, self._last)
        self._pending.clear()
        self._call(lambda: _now(self._async.rewind, first))

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None) -> None:
        self._unread()
        self._call(lambda: self._async.commit(offsets))

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
                     callback: Callable[[dict[TopicPartition, OffsetAndMetadata], Exception | None], Any] | None = None,
                     ) -> concurrent.futures.Future[None]:
        """As `AsyncConsumer.commit_async`; a `concurrent.futures.Future` (the callback runs on the
        client's loop thread, as kafka-python's run in its I/O thread)."""
        self._unread()

        async def start() -> asyncio.Task[None]:
            return self._async.commit_async(offsets, callback)

        task = self._call(start)  # the offsets are taken before any later call of the application
        return asyncio.run_coroutine_threadsafe(_awaited(task), self._loop.loop)

    def committed(self, partition: TopicPartition) -> OffsetAndMetadata | None:
        return self._call(lambda: self._async.committed(partition))

    def partitions_for_topic(self, topic: str) -> set[int]:
        return self._call(lambda: self._async.partitions_for_topic(topic))

    def topics(self) -> set[str]:
        return self._call(self._async.topics)

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int], timeout_ms: int | None = None,
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self._call(lambda: self._async.offsets_for_times(timestamps, timeout_ms))

    def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None,
                          ) -> dict[TopicPartition, int]:
        parts = list(partitions)
        return self._call(lambda: self._async.beginning_offsets(parts, timeout_ms))

    def end_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None,
                    ) -> dict[TopicPartition, int]:
        parts = list(partitions)
        return self._call(lambda: self._async.end_offsets(parts, timeout_ms))

    def highwater(self, partition: TopicPartition) -> int | None:
        return self._async.highwater(partition)

    def paused(self) -> set[TopicPartition]:
        return self._async.paused()

    def bootstrap_connected(self) -> bool:
        return self._async.bootstrap_connected()

    def metrics(self, raw: bool = False) -> dict[str, dict[str, float]]:
        return self._async.metrics(raw)

    @property
    def truncations(self) -> list[Any]:
        return self._async.truncations

    @property
    def resets(self) -> list[Any]:
        return self._async.resets

    @property
    def last_error(self) -> EpochGuardError | None:
        return self._async.last_error

    def close(self, autocommit: bool = True) -> None:
        self._unread()
        self._close(lambda: self._async.close(autocommit))


async def _now(fn: Callable[..., None], *args: Any) -> None:
    fn(*args)


async def _awaited(task: asyncio.Task[None]) -> None:
    await task

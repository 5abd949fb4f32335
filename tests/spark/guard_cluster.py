"""`epochguard serve`'s cluster in-process for the streaming-source tests, driven step by step.

The `WireServer` (the same listeners, endpoint and simulated cluster as `epochguard serve`) runs on its
own event-loop thread with a scenario of no stages, RF 3, unclean election allowed and no simulated
producer; the test produces with epochguard's producer and fires the simulator's faults itself
(`Isolate`, `Crash`, `Heal`, `Restart`), so each cell of the matrix puts the unclean election exactly
where it wants it. `hold_fetches` holds the clients' Fetch requests at or past an offset at the wire (a
task's read, planned on the old leader, waits while the test elects a new one). Ground truth comes from the cluster: the acting leader's log up to its high
watermark, record by record (offset -> (leader epoch, value)).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from epochguard.client import KafkaProducer
from epochguard.sim.faults import Crash, Heal, Isolate, Restart
from epochguard.sim.network import broker_node
from epochguard.types import TopicPartition
from epochguard.wire.scenarios import BASE, INPUT, WireScenario
from epochguard.wire.server import WireServer

T = TypeVar("T")
TOPIC = INPUT


class GuardCluster:
    def __init__(self, partitions: int = 1) -> None:
        cfg = replace(BASE, unclean_leader_election=True, min_insync_replicas=1, producers=(),
                      input_partitions=partitions)
        self.server = WireServer(WireScenario("stream-guard", cfg, (), "driven by the test"), timeout_s=3600)
        self.loop = asyncio.new_event_loop()
        self.bootstrap = self.loop.run_until_complete(self.server.start())
        self._task = self.loop.create_task(self.server.run())
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="guard-cluster")
        self.thread.start()
        self.partitions = [TopicPartition(TOPIC, p) for p in range(partitions)]
        self.topic, self.tp = TOPIC, TopicPartition(TOPIC, 0)
        self.wait(lambda: self.server.endpoint is not None and self.server.endpoint.wire.ready(), "ready")
        self._producers: dict[str, KafkaProducer] = {}
        self.crashed: set[int] = set()
        self.sent = 0
        self.cleanups: list[Callable[[], None]] = []  # run by close(), last first
        self._held: list[tuple[Any, bytes]] | None = None  # Fetch frames held at the wire, when holding
        self.held_at: list[int] = []  # the fetch offsets of the held requests that named the partition

    # --- plumbing -----------------------------------------------------------------------------------
    def call(self, fn: Callable[[], T]) -> T:
        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    @property
    def cluster(self) -> Any:
        assert self.server.endpoint is not None
        return self.server.endpoint.wire.cluster

    def wait(self, predicate: Callable[[], bool], what: str, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.call(predicate):
                return
            time.sleep(0.02)
        raise AssertionError(f"cluster: {what} did not happen within {timeout} s")

    def fire(self, fault: Any) -> None:
        assert self.server.endpoint is not None
        endpoint = self.server.endpoint
        self.call(lambda: endpoint.fire(fault))

    def hold_fetches(self, from_offset: int) -> None:
        """From now on, hold every client Fetch that asks for an offset >= `from_offset` (and the partition-less
        continuations of an incremental fetch session) at the wire, unanswered, until `release_fetches`, and every
later request on the same connection behind it (Kafka answers a connection's requests in order). Only
        clients fetch over the wire (the simulated followers replicate inside the simulator), so this holds a
        task's reads and nothing of the cluster's own."""
        from epochguard.protocol.api_versions import ApiKey
        from epochguard.wire import codec

        assert self.server.endpoint is not None
        endpoint = self.server.endpoint
        receive = type(endpoint).receive

        def gate(conn: Any, frame: bytes) -> None:
            if self._held is not None and any(c is conn for c, _ in self._held):
                self._held.append((conn, frame))  # a connection answers in order: all behind the held Fetch wait
                return
            if self._held is not None and int.from_bytes(frame[:2], "big") == ApiKey.FETCH:
                _, request = codec.decode_request(frame)
                asked = [p.fetch_offset for p in request.partitions]
                if not asked or max(asked) >= from_offset:
                    self._held.append((conn, frame))
                    self.held_at += [o for o in asked if o >= from_offset]
                    return
            receive(endpoint, conn, frame)

        def install() -> None:
            self._held = []
            endpoint.receive = gate  # type: ignore[method-assign]

        self.call(install)

    def record_requests(self) -> list[tuple[str, Any]]:
        """From now on, record every client request reaching the wire as (client id, decoded request), in
        order; returns the list it appends to. (Not with `hold_fetches`: both replace the endpoint's receive.)"""
        from epochguard.wire import codec

        assert self.server.endpoint is not None
        endpoint = self.server.endpoint
        receive = type(endpoint).receive
        seen: list[tuple[str, Any]] = []

        def record(conn: Any, frame: bytes) -> None:
            with contextlib.suppress(Exception):  # a bad frame: the endpoint itself answers it
                header, request = codec.decode_request(frame)
                seen.append((header.client_id or "", request))
            receive(endpoint, conn, frame)

        def install() -> None:
            endpoint.receive = record  # type: ignore[method-assign]

        self.call(install)
        return seen

    def release_fetches(self) -> None:
        """Stop holding: the held requests reach the cluster now (those of connections closed meanwhile, e.g.
        to a broker that crashed, are dropped as the broker drops them)."""
        assert self.server.endpoint is not None
        endpoint = self.server.endpoint

        def release() -> None:
            held, self._held = self._held or [], None
            del endpoint.receive  # the class's method again
            for conn, frame in held:
                endpoint.receive(conn, frame)
            self.server._flush()

        self.call(release)

    def close(self) -> None:
        if self._held is not None:
            self.release_fetches()
        for cleanup in reversed(self.cleanups):
            cleanup()
        for p in self._producers.values():
            p.close(5)
        self.loop.call_soon_threadsafe(self.server.stop)
        asyncio.run_coroutine_threadsafe(asyncio.wait_for(asyncio.shield(self._task), 30), self.loop).result(35)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    # --- what the tests do --------------------------------------------------------------------------
    def state(self, tp: TopicPartition) -> Any:
        return self.call(lambda: self.cluster.controller.state(tp))

    def leader(self, tp: TopicPartition) -> tuple[int | None, int]:
        return self.call(lambda: (self.cluster.acting_leader(tp), self.cluster.controller.state(tp).leader_epoch))

    def produce(self, n: int, acks: Any = "all", partition: int | Sequence[int] = 0, tag: str = "") -> None:
        """`n` records to partition `partition` (to each, sent together, if several), each value unique
        across the run."""
        key = str(acks)
        if key not in self._producers:
            # Only live brokers: epochguard's producer does not get past a first bootstrap broker that is
            # down ("no metadata for topic"), seen here; reported with the issue.
            live = ",".join(f"{h}:{p}" for b, (h, p) in sorted(self.server.addresses.items()) if b not in self.crashed)
            self._producers[key] = KafkaProducer(bootstrap_servers=live, acks=acks, linger_ms=0,
                                                 request_timeout_ms=2_000, delivery_timeout_ms=20_000)
        producer = self._producers[key]
        futures = []
        for p in [partition] if isinstance(partition, int) else partition:
            for _ in range(n):
                self.sent += 1
                futures.append(producer.send(TOPIC, value=f"{tag}{self.sent:06d}".encode(), partition=p))
        for f in futures:
            f.get(timeout=30)

    def truth(self, tp: TopicPartition) -> dict[int, tuple[int, bytes | None]]:
        """offset -> (leader epoch, value) of the acting leader's log below its high watermark."""
        def read() -> dict[int, tuple[int, bytes | None]]:
            leader = self.cluster.acting_leader(tp)
            assert leader is not None, f"{tp} has no leader"
            log = self.cluster.log(leader, tp)
            return {o: (e, v) for o, (e, _, v) in log.records_between(0, log.high_watermark).items()}

        return self.call(read)

    def high_watermark(self, tp: TopicPartition) -> int:
        return self.call(lambda: self.cluster.log(self.cluster.acting_leader(tp), tp).high_watermark)

    def isolate_leader(self, tp: TopicPartition, n: int) -> int:
        """Cut the leader off from its followers, write `n` acks=1 records only it gets, and wait until it
        alone is in sync (its high watermark then covers them: consumers are served them)."""
        leader, _ = self.leader(tp)
        assert leader is not None and n > 0
        self.fire(Isolate(leader))
        self.produce(n, acks=1, partition=tp.partition)
        self.wait(lambda: self.cluster.controller.state(tp).isr == (leader,), f"ISR of {tp} shrinks to [{leader}]")
        log = self.call(lambda: self.cluster.log(leader, tp))
        self.wait(lambda: log.high_watermark == log.log_end_offset, f"the high watermark of {tp} covers its log")
        return leader

    def unclean_election(self, tp: TopicPartition, old_leader: int) -> int:
        """Crash the isolated leader: a lagging replica is elected uncleanly. Returns the new epoch."""
        _, epoch = self.leader(tp)
        self.fire(Crash(old_leader))
        self.crashed.add(old_leader)
        for p in self._producers.values():
            p.close(5)
        self._producers.clear()
        self.fire(Heal(broker_node(old_leader)))
        self.wait(lambda: self.cluster.acting_leader(tp) not in (None, old_leader)
                  and self.cluster.controller.state(tp).leader_epoch > epoch, f"unclean election of {tp}")
        return int(self.state(tp).leader_epoch)

    def restart_crashed(self) -> None:
        for b in sorted(self.crashed):
            self.fire(Restart(b))
        self.crashed.clear()

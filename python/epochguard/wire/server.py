"""`epochguard serve`: the simulated cluster on the Kafka wire, one asyncio listener per broker.

The socket layer only moves bytes: it reads size-prefixed frames into the `Endpoint`, writes the
answers back, and steps the cluster on a wall-clock tick (one step per `tick_ms`, catching up a few
steps at a time if the loop fell behind). Everything runs on one event loop thread, so requests, steps
and faults never interleave. A connection whose queue is full is not read until it drains (TCP
pushes back on a flooding client); a client that stops reading its answers is disconnected once its
unsent output passes `MAX_UNSENT_BYTES`, so neither can stall the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import time
from collections.abc import Callable
from typing import Any

from epochguard.wire import codec
from epochguard.wire.endpoint import Endpoint
from epochguard.wire.engine import MAX_QUEUED_REQUESTS, Connection, WireCluster
from epochguard.wire.judge import Judge
from epochguard.wire.scenarios import WireScenario
from epochguard.wire.trace import TRACE_VERSION, TraceWriter
from epochguard.wire.triggers import StageRunner

__all__ = ["WireServer", "MAX_UNSENT_BYTES"]

MAX_UNSENT_BYTES = 64 << 20
_MAX_CATCH_UP_STEPS = 5


class WireServer:
    def __init__(
        self,
        scenario: WireScenario,
        *,
        seed: int = 0,
        trigger: str = "served",
        trace_path: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        timeout_s: float = 30.0,
        min_consumers: int = 1,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.seed = seed
        self.trigger = trigger
        self.trace_path = trace_path
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self.min_consumers = min_consumers
        self.on_event = on_event or (lambda kind, detail: None)
        self.tick_s = scenario.config.tick_ms / 1000
        self.servers: list[asyncio.base_events.Server] = []
        self.addresses: dict[int, tuple[str, int]] = {}
        self.endpoint: Endpoint | None = None
        self.judge = Judge()
        self.runner: StageRunner | None = None
        self._writers: dict[int, asyncio.StreamWriter] = {}
        self._readable: dict[int, asyncio.Event] = {}
        self._handlers: set[asyncio.Task[Any]] = set()
        self._stop = asyncio.Event()
        self.events: list[dict[str, Any]] = []

    # --- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> str:
        """Bind one listener per broker; returns the bootstrap string."""
        broker_ids = range(1, self.scenario.config.brokers + 1)
        for b in broker_ids:
            port = self.port + b - 1 if self.port else 0
            server = await asyncio.start_server(functools.partial(self._serve, b), self.host, port)
            self.servers.append(server)
            sock = server.sockets[0].getsockname()
            self.addresses[b] = (self.host, sock[1])
        wire = WireCluster(self.scenario, self.seed, self.addresses)
        trace = TraceWriter(self.trace_path) if self.trace_path else None
        self.endpoint = Endpoint(wire, trace)
        if trace is not None:
            trace.write({"type": "config", "trace_version": TRACE_VERSION, "scenario": self.scenario.name,
                         "seed": self.seed, "trigger": self.trigger, "timeout_s": self.timeout_s,
                         "tick_ms": self.scenario.config.tick_ms, "codec": "kafka-protocol",
                         "addresses": {str(b): list(a) for b, a in self.addresses.items()}, "step": 0})
        self.runner = StageRunner(self.scenario, self.trigger, self.endpoint.fire, timeout_s=self.timeout_s,
                                  min_consumers=self.min_consumers, on_event=self._event)
        wire.observers.extend([self.judge, self.runner])  # the runner last: the judge sees each step before faults
        return ",".join(f"{h}:{p}" for h, p in self.addresses.values())

    def _event(self, kind: str, detail: dict[str, Any]) -> None:
        self.events.append({"type": kind, **detail})
        if self.endpoint is not None and self.endpoint.trace is not None:
            self.endpoint.trace.write({"type": kind, **detail})
        self.on_event(kind, detail)

    async def run(self) -> None:
        """Step the cluster until `stop()`."""
        assert self.endpoint is not None
        start = time.monotonic()
        done = 0
        while not self._stop.is_set():
            due = int((time.monotonic() - start) / self.tick_s) - done
            for _ in range(min(max(due, 1), _MAX_CATCH_UP_STEPS)):
                self.endpoint.step()
                done += 1
                self._flush()
            if due > _MAX_CATCH_UP_STEPS * 20:  # far behind (a stalled machine): do not try to catch up
                start, done = time.monotonic(), 0
            next_at = start + (done + 1) * self.tick_s
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), max(0.0, next_at - time.monotonic()))
        for server in self.servers:
            server.close()
        # End every connection handler here, while the trace is still open: left to asyncio.run's
        # final cancellation they would trace their disconnects after `finish()` closed it.
        while self._handlers:
            handlers = list(self._handlers)
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            self._handlers.difference_update(handlers)
        for writer in list(self._writers.values()):
            writer.close()

    def stop(self) -> None:
        self._stop.set()

    def finish(self) -> dict[str, Any]:
        """The run's result (after `run` returned): verdicts per client, faults, seed, config."""
        assert self.endpoint is not None and self.runner is not None
        self.judge.finish()
        wire = self.endpoint.wire
        result = {
            "scenario": self.scenario.name,
            "seed": self.seed,
            "trigger": self.trigger,
            "trigger_outcome": self.runner.trigger_outcome,
            "settled_step": self.runner.settled_step,
            "steps": wire.step_no,
            "clients": self.judge.report(),
            "faults": [{"step": e.step, "fault": e.message} for e in wire.cluster.timeline.events if e.kind == "fault"],
            "elections": [{"step": e.step, "partition": str(e.tp), "leader": e.leader, "leader_epoch": e.leader_epoch,
                           "clean": e.clean} for e in wire.cluster.controller.elections],
            "violations": [v.to_json() for v in wire.cluster.checker.violations],
            "codec": "kafka-protocol",
            "bootstrap": ",".join(f"{h}:{p}" for h, p in self.addresses.values()),
        }
        self.endpoint.close_trace({"settled_step": self.runner.settled_step})
        return result

    # --- connections -----------------------------------------------------------------------------
    async def _serve(self, broker_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        endpoint = self.endpoint
        if endpoint is None:
            writer.close()
            return
        conn = endpoint.connect(broker_id)
        if conn is None:  # the broker process is down: connection refused/reset
            writer.close()
            return
        self._writers[conn.id] = writer
        readable = self._readable[conn.id] = asyncio.Event()
        readable.set()
        task = asyncio.current_task()
        assert task is not None  # each connection runs in its own task
        self._handlers.add(task)
        try:
            while not conn.closed:
                if len(conn.queue) >= MAX_QUEUED_REQUESTS:
                    readable.clear()
                    await readable.wait()
                    continue
                size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
                if size < 0 or size > codec.MAX_FRAME_BYTES:
                    break
                frame = await reader.readexactly(size)
                endpoint.receive(conn, frame)
                self._flush()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client went away, or the server is shutting down
        finally:
            endpoint.disconnect(conn)
            self._flush()
            self._writers.pop(conn.id, None)
            self._readable.pop(conn.id, None)
            self._handlers.discard(task)
            writer.close()

    def _flush(self) -> None:
        assert self.endpoint is not None
        for conn, frame in self.endpoint.outgoing():
            writer = self._writers.get(conn.id)
            if writer is None or writer.is_closing():
                continue
            writer.write(frame)
            if writer.transport.get_write_buffer_size() > MAX_UNSENT_BYTES:
                self.endpoint.disconnect(conn)  # it does not read its answers
        for conn in self.endpoint.closed():
            self._close(conn)
        for cid, event in self._readable.items():
            conn_obj = self.endpoint.wire.connections.get(cid)
            if conn_obj is not None and len(conn_obj.queue) < MAX_QUEUED_REQUESTS:
                event.set()

    def _close(self, conn: Connection) -> None:
        writer = self._writers.pop(conn.id, None)
        if writer is not None:
            writer.close()
        event = self._readable.pop(conn.id, None)
        if event is not None:
            event.set()


async def serve_until_signalled(server: WireServer, on_bootstrap: Callable[[str], None]) -> dict[str, Any]:
    bootstrap = await server.start()
    on_bootstrap(bootstrap)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, server.stop)
    await server.run()
    return server.finish()


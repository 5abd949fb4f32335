"""Start `epochguard serve` as a subprocess for a test: bootstrap, wait for `settled`, stop, result."""

from __future__ import annotations

import base64
import collections
import importlib.util
import itertools
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from epochguard.wire.drivers.registry import CLIENTS, Client, client
from epochguard.wire.drivers.session import RunResult, allows_unclean, run_clients, serve_command
from tests.wire.conftest import require, usable

REPO = Path(__file__).resolve().parents[2]


class Served:
    def __init__(self, scenario: str, *args: str, trace: Path | None = None) -> None:
        cmd = [sys.executable, "-m", "epochguard", "serve", scenario, "--json", *args]
        if trace is not None:
            cmd += ["--trace", str(trace)]
        env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline().strip()
        if not first.startswith("bootstrap "):
            self.proc.kill()
            raise RuntimeError(f"serve did not start: {first!r} {self.proc.stderr.read() if self.proc.stderr else ''}")
        self.bootstrap = first.split(" ", 1)[1]
        self.lines: list[str] = []
        self.settled = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout as stream:  # closed at the child's EOF, on this thread
            for line in stream:
                self.lines.append(line.rstrip("\n"))
                if line.strip() == "settled":
                    self.settled.set()

    def stop(self, timeout: float = 30) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._reader.join(5)
        self.errors = self.proc.stderr.read() if self.proc.stderr else ""
        self._close_stderr()
        assert self.proc.returncode == 0, self.errors
        return json.loads(self.lines[-1])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        self._close_stderr()

    def _close_stderr(self) -> None:
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def read_values(bootstrap: str, tp: Any, isolation: str, want: int, timeout_s: float = 20.0) -> list[bytes]:
    """The values epochguard's consumer reads from `tp` at this isolation level, from the beginning: until it
    has `want` and three polls in a row bring nothing more, or `timeout_s`."""
    from epochguard.client import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        consumer.assign([tp])
        got: list[bytes] = []
        end = time.monotonic() + timeout_s
        quiet = 0
        while time.monotonic() < end and (len(got) < want or quiet < 3):
            records = [r.value for recs in consumer.poll(timeout_ms=200).values() for r in recs]
            got += [v for v in records if v is not None]
            quiet = quiet + 1 if not records and len(got) >= want else 0
        return got
    finally:
        consumer.close()


def wait_for(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def client_requests(trace: Path, client_id: str) -> list[tuple[int, int, int, bool]]:
    """Every request `client_id` sent, from serve's trace: (step, api key, correlation id, answered); a
    request still unanswered when the trace ends 10 s later counts as unanswered (a long-poll Fetch in
    flight when the client closed does not)."""
    from epochguard.errors import UnsupportedVersionError
    from epochguard.wire.codec import decode_request
    from epochguard.wire.trace import read_trace

    sent: dict[tuple[int, int], tuple[int, int]] = {}
    answered: set[tuple[int, int]] = set()
    last, tick_ms = 0, 10
    for r in read_trace(trace):
        last = max(last, r.get("step", 0))
        tick_ms = r.get("tick_ms", tick_ms)
        if r["type"] == "request":
            try:
                header, _ = decode_request(base64.b64decode(r["frame"]))
            except UnsupportedVersionError as exc:  # answered with an error, but sent all the same
                header = exc.header
            if header.client_id == client_id:
                sent[(r["conn"], header.correlation_id)] = (r["step"], header.api_key)
        elif r["type"] == "response" and r.get("client_id") == client_id:
            answered.add((r["conn"], r["correlation_id"]))
    late = last - 10_000 // tick_ms
    return [(step, api, key[1], key in answered or step > late) for key, (step, api) in sent.items()]


def silences(trace: Path, client_ids: Sequence[str], quiet_s: float) -> dict[str, str]:
    """The clients of `client_ids` that sent nothing for `quiet_s` or longer at some point of the run after
    serve had answered every request they had sent (how long, from which step): a client a test keeps
    polling sends at least its heartbeats, so such a silence is the client's own stall, not the server's."""
    from epochguard.wire.trace import read_trace

    tick_ms = next((r.get("tick_ms", 10) for r in read_trace(trace) if r["type"] == "config"), 10)
    last = max((r.get("step", 0) for r in read_trace(trace)), default=0)
    out: dict[str, str] = {}
    for cid in client_ids:
        requests = sorted(client_requests(trace, cid))
        steps = [step for step, *_ in requests] + [last]
        gaps = [(b - a, a) for a, b in itertools.pairwise(steps)]
        if not requests or not gaps:
            continue
        gap, since = max(gaps)
        before = [r for r in requests if r[0] <= since]
        if gap * tick_ms / 1000 >= quiet_s and all(answered for *_, answered in before):
            out[cid] = (f"{cid} sent no request for {gap * tick_ms / 1000:.0f} s from step {since}, after "
                        f"{len(before)} requests serve all answered")
    return out


class ServeRuns:
    """Judged `epochguard serve` runs of real clients, each (scenario, trigger, group) run once, on first
    use, with the clients of that group that can run here; a run that broke fails every test asking."""

    AFTER_SETTLE_S = 12.0  # past the server's stuck bound (10 s) so both sides can call a client stuck
    STUCK_AFTER_S = 10.0

    def __init__(self, root: Path) -> None:
        self._root = root
        self._runs: dict[tuple[str, str, str], RunResult | Exception] = {}

    def run(self, scenario: str, trigger: str, group: str, clients: Sequence[Client],
            driver_args: dict[str, Sequence[str]] | None = None) -> RunResult:
        """The run of `clients`, called `group`, in `scenario --trigger trigger` (`driver_args`: extra
        command-line arguments per client)."""

        key = (scenario, trigger, group)
        if key not in self._runs:
            here = [c for c in clients if usable(c)]
            workdir = self._root / f"{scenario}-{trigger}-{group}"
            try:
                self._runs[key] = run_clients(
                    serve_command(scenario, trigger, trace=workdir / "trace.jsonl", consumers=len(here)), here,
                    workdir, after_settle_s=self.AFTER_SETTLE_S, stuck_after_s=self.STUCK_AFTER_S,
                    driver_args=driver_args, unclean=allows_unclean(scenario),
                )
            except Exception as exc:  # every client's test fails on it; a second run would overwrite its logs
                self._runs[key] = exc
        run = self._runs[key]
        if isinstance(run, Exception):
            raise run
        return run


def assert_clean_run(result: RunResult, name: str) -> None:
    """`name` ran, and neither its delivery log nor the server shows a loss, duplicate, skip or re-read."""
    truth = result.truths[name]
    assert truth.consumed > 100 and truth.produced_acked > 20, f"{name} barely ran: {truth}\n{result.why(name)}"
    assert truth.divergences == [] and truth.reread == 0 and truth.skipped == 0
    assert truth.lost_acked == [] and truth.duplicated_produced == []
    server = result.server_client(f"epochguard-{name}")
    assert server is not None, f"the server never saw {name}"
    assert server["divergences"] == [] and server["acks_lost"] == []


class Exchanges:
    """An observer of a (replayed) serve run keeping, per client id, the last exchanges as one line each: the
    steps the request was applied and answered at, what was asked and what serve answered. For failure
    messages: the server's side of what a client did."""

    def __init__(self, keep: int = 12) -> None:
        self.by_client: dict[str, collections.deque[str]] = collections.defaultdict(lambda: collections.deque(maxlen=keep))
        self.counts: collections.Counter[str] = collections.Counter()

    def on_exchange(self, conn: Any, header: Any, request: Any, response: Any, applied_step: int, step: int) -> None:
        client = header.client_id or conn.client_id
        self.counts[client] += 1
        self.by_client[client].append(f"steps {applied_step}->{step} conn {conn.id} broker {conn.broker_id}: "
                                      f"{_asked(request)} => {_answered(response)}")

    def on_fault(self, fault: Any, step: int) -> None:
        pass

    def on_step(self, wire: Any) -> None:
        pass

    def view(self, client: str) -> str:
        lines = self.by_client.get(client)
        if not lines:
            return f"serve never answered {client!r}"
        return (f"serve answered {client!r} {self.counts[client]} times; the last {len(lines)}:\n    "
                + "\n    ".join(lines))


def _asked(request: Any) -> str:
    from epochguard.protocol.messages import FetchRequest, ListOffsetsRequest, MetadataRequest

    name = type(request).__name__.removesuffix("Request")
    if isinstance(request, FetchRequest):
        return (f"Fetch v{request.version} isolation {int(request.isolation_level)} max_wait {request.max_wait_ms} "
                + ", ".join(f"{p.topic}-{p.partition_index}@{p.fetch_offset}" for p in request.partitions))
    if isinstance(request, ListOffsetsRequest):
        return f"ListOffsets v{request.version} " + ", ".join(
            f"{p.topic}-{p.partition_index} ts {p.timestamp}" for p in request.partitions)
    if isinstance(request, MetadataRequest):
        return f"Metadata v{request.version} {list(request.topics) if request.topics is not None else 'all'}"
    return f"{name} v{getattr(request, 'version', '?')}"


def _answered(response: Any) -> str:
    from epochguard.protocol.messages import FetchResponse, ListOffsetsResponse, MetadataResponse

    if isinstance(response, FetchResponse):
        return f"error {int(response.error_code)} " + ", ".join(
            f"{p.topic}-{p.partition_index} error {int(p.error_code)} hw {p.high_watermark} "
            f"lso {p.last_stable_offset} {len(p.records)} bytes" for p in response.partitions)
    if isinstance(response, ListOffsetsResponse):
        return ", ".join(f"{p.topic}-{p.partition_index} error {int(p.error_code)} offset {p.offset}"
                         for p in response.partitions)
    if isinstance(response, MetadataResponse):
        return "; ".join(f"{t.name} error {int(t.error_code)} " + ", ".join(
            f"p{p.partition_index} leader {p.leader_id} epoch {p.leader_epoch}" for p in t.partitions)
            for t in response.topics) + f" brokers {[b.node_id for b in response.brokers]}"
    code = getattr(response, "error_code", None)
    return type(response).__name__ + ("" if code is None else f" error {int(code)}")


def unanswered(trace: Path) -> dict[str, list[str]]:
    """Per client id, the requests `serve` never answered in a traced run (API key and version, correlation
    id, connection, the step it arrived at), from the trace's request frames and response records."""
    from epochguard.wire.trace import read_trace

    asked: dict[tuple[int, int], tuple[str, str]] = {}
    for rec in read_trace(trace):
        if rec.get("type") == "request":
            frame = base64.b64decode(rec["frame"])
            key, version, corr, size = struct.unpack(">hhih", frame[:10])
            client = frame[10:10 + max(size, 0)].decode(errors="replace")
            asked[rec["conn"], corr] = client, (f"api key {key} v{version} correlation id {corr} on conn "
                                                f"{rec['conn']}, arrived at step {rec['step']}")
        elif rec.get("type") == "response":
            asked.pop((rec["conn"], rec["correlation_id"]), None)
    out: dict[str, list[str]] = collections.defaultdict(list)
    for client, what in asked.values():
        out[client].append(what)
    return dict(out)


# The single-run modules (one serve run with the Python-driven clients): what they share.
NEEDS_SERVE = pytest.mark.skipif(
    importlib.util.find_spec("epochguard.wire.cli") is None, reason="`epochguard serve` is not in this build"
)
PY_CLIENTS = tuple(c for c in CLIENTS if c.toolchain is None)


def undiverged(run: RunResult, name: str) -> tuple[Any, dict[str, Any]]:
    """`name`'s ground truth and server entry in a run where nothing diverged, after what every such run
    asserts: the client ran, the server saw it, neither side gave it a divergence, no acks=all record lost."""
    require(client(name))
    truth = run.truths[name]
    assert truth.consumed > 100, f"{name} barely ran:\n{run.why(name)}"
    server = run.server_client(f"epochguard-{name}")
    assert server is not None, f"the server never saw {name}"
    assert server["divergences"] == [] and truth.divergences == [], (server["divergences"], truth.divergences)
    assert truth.lost_acked == [] and server["acks_lost"] == []
    return truth, server


def python_clients_run(tmp_path_factory: Any, scenario: str, trigger: str) -> RunResult:
    """One serve run of `scenario --trigger trigger` with the Python-driven clients (a module's fixture)."""
    return ServeRuns(tmp_path_factory.mktemp(scenario)).run(scenario, trigger, "python", PY_CLIENTS)

"""One judged run: a cluster process, the real clients' drivers against it, the final log, the verdicts.

The cluster is any process keeping `epochguard serve`'s stdout contract: first line
`bootstrap host:port,...`, optionally a line `trigger` when the scenario's faults start (the ground truth
measures a client's silence after a divergence from then at the earliest), a line `settled` once the
faults have fired and the cluster has healed, after a `trigger` line a line `stuck-bound` once its own stuck
bound has passed (the drivers run until then at least), and,
after SIGTERM, with --json, a last line `{"clients": [...]}`. The drivers start as soon as the bootstrap
line is out (faults fire on what the server sees them do), keep running `after_settle_s` past `settled`,
then stop; the final log is read before the cluster is stopped.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from epochguard.wire.drivers.delivery_log import explain
from epochguard.wire.drivers.registry import Client
from epochguard.wire.drivers.truth import (
    ClientTruth,
    FinalLog,
    judge_client,
    judge_handoff,
    read_epochs,
    read_final_log,
)

SCENARIOS = ("clean", "unclean-election", "unclean-empty-leader", "consecutive-unclean", "zombie-leader",
             "stale-metadata", "lagging-leader", "leader-bounce")
# Nothing diverges, and no client may be given a divergence verdict (compat runs them; tests run each alone):
# the controls, and a log start that jumps past the clients' positions.
CONTROLS = ("false-divergence", "epoch-flap", "log-start-jump", "follower-fetch-lag", "stale-leader-hint")
# Run with each client's rack set (`Client.rack`: KIP-392, fetch from a follower); a client that has none sits out.
RACK_SCENARIOS = {"follower-fetch-lag": "rack-2"}  # epochguard.wire.scenarios.FOLLOWER_RACK
TRIGGERS = ("served", "caught-up")
# Judged on what the clients' producers did (an idempotent producer's outcome after a lost sequence), each
# with the one trigger it has; only clients with an idempotent producer (`Client.idempotent`) take part.
PRODUCER_SCENARIOS = {"idempotent-truncation": "ack"}
# Judged on read_committed consumers (`Client.isolation`; a client whose consumer cannot read committed sits
# out), each with the triggers it has: `transactions` has no fault to trigger, so one run.
TXN_SCENARIOS = {"transactions": ("served",), "marker-truncated": TRIGGERS}
# A partition handed over through a committed offset, each with its trigger: every client runs as two members
# of a group of its own (`Client.group`: its driver can join one): A from the start, which commits and leaves
# once it read everything there is (the trigger waits for its commit), and B once the cluster settled, which
# resumes from A's commit (`run_handoff`). Judged on B: the server's event opened by the OffsetFetch answer,
# the delivery log's by `truth.judge_handoff`.
HANDOFF_SCENARIOS = {"handoff-truncation": "commit"}
LEAVE_WHEN_IDLE_S = 1.5  # A commits and leaves after this long with no new record (the producer is paused)


def allows_unclean(scenario: str) -> bool:
    """Whether `scenario`'s cluster may elect an out-of-sync replica: a lost acknowledged record is expected."""
    from epochguard.wire.scenarios import SCENARIOS as BUILT

    return scenario in BUILT and BUILT[scenario]().config.unclean_leader_election


class RunError(RuntimeError):
    """The cluster process broke its stdout contract (no bootstrap, never settled, died)."""


def serve_command(
    scenario: str, trigger: str, seed: int = 1, trace: Path | None = None, consumers: int = 1
) -> list[str]:
    """`epochguard serve` for a run of `consumers` drivers: its trigger waits for every one of them."""
    cmd = [sys.executable, "-m", "epochguard", "serve", scenario, "--trigger", trigger, "--seed", str(seed),
           "--consumers", str(consumers), "--json"]
    return [*cmd, "--trace", str(trace)] if trace is not None else cmd


@dataclass
class RunResult:
    bootstrap: str
    logs: dict[str, Path]
    final: FinalLog
    truths: dict[str, ClientTruth]
    server_report: dict[str, Any] | None
    server_stdout: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # client name -> why its run broke (a merged result)

    def why(self, name: str) -> str:
        """What `name`'s driver says it did (counts, last positions, last errors): for failure messages."""
        return explain(self.logs[name])

    def server_client(self, client_id: str) -> dict[str, Any] | None:
        """The server's entry for `client_id`, or None."""
        for entry in (self.server_report or {}).get("clients", []):
            if entry.get("client_id") == client_id:
                return dict(entry)
        return None


class _Lines:
    """A child's stdout as a queue of lines, read on a thread so waits can time out."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self.arrived: list[float] = []  # when each of `lines` was read (wall clock, as the delivery logs)
        self._queue: queue.Queue[tuple[str, float] | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        with stream:  # closed at the child's EOF, on this thread (no race with a reader)
            for line in stream:
                self._queue.put((line.rstrip("\n"), time.time()))
        self._queue.put(None)

    def wait_for(self, predicate: Any, timeout_s: float) -> str | None:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                item = self._queue.get(timeout=left)
            except queue.Empty:
                return None
            if item is None:
                return None
            line, at = item
            self.lines.append(line)
            self.arrived.append(at)
            if predicate(line):
                return line
        return None

    def drain(self, timeout_s: float) -> None:
        self.wait_for(lambda _line: False, timeout_s)


def run_clients(
    cluster_cmd: Sequence[str],
    clients: Sequence[Client],
    workdir: Path,
    *,
    settle_timeout_s: float = 60.0,
    after_settle_s: float = 8.0,
    start_timeout_s: float = 60.0,
    stuck_after_s: float = 5.0,
    driver_args: dict[str, Sequence[str]] | None = None,
    unclean: bool = False,
    read_committed: bool = False,
) -> RunResult:
    """`unclean`: the cluster allows unclean elections (the ground truth tags a lost ack `expected`);
    `read_committed`: the drivers' consumers were asked to read committed records only."""
    logs = {c.name: workdir / f"{c.name}.jsonl" for c in clients}
    bootstrap, final, out = _serve(
        cluster_cmd, workdir,
        lambda bootstrap: {c.name: (c.start(bootstrap, logs[c.name], *(driver_args or {}).get(c.name, ())),
                                    logs[c.name]) for c in clients},
        settle_timeout_s=settle_timeout_s, after_settle_s=after_settle_s, start_timeout_s=start_timeout_s)
    report = _report(out)
    faults_t = [at for line, at in zip(out.lines, out.arrived, strict=True) if line.strip() == "trigger"]
    epochs = read_epochs(logs.values())
    truths = {name: judge_client(path, final, stuck_after_s=stuck_after_s, faults_t=faults_t, unclean=unclean,
                                 read_committed=read_committed, epochs=epochs)
              for name, path in logs.items()}
    return RunResult(bootstrap, logs, final, truths, report, out.lines)


def run_handoff(
    cluster_cmd: Sequence[str],
    clients: Sequence[Client],
    workdir: Path,
    *,
    settle_timeout_s: float = 90.0,
    after_settle_s: float = 12.0,
    start_timeout_s: float = 60.0,
    stuck_after_s: float = 5.0,
    unclean: bool = False,
) -> RunResult:
    """A handoff run (`HANDOFF_SCENARIOS`): per client, member A (client id `epochguard-<name>-a`, delivery
    log `<name>-a.jsonl`) from the start, member B (the client's own id and log) once the cluster settled,
    both in the group `epochguard-<name>` and producing nothing. B's truth carries the handoff's divergence;
    A's is kept under `<name>-a`."""
    common = ("--produce-interval-ms", "0")
    a_logs = {f"{c.name}-a": workdir / f"{c.name}-a.jsonl" for c in clients}
    b_logs = {c.name: workdir / f"{c.name}.jsonl" for c in clients}
    bootstrap, final, out = _serve(
        cluster_cmd, workdir,
        lambda bootstrap: {f"{c.name}-a": (c.start(bootstrap, a_logs[f"{c.name}-a"], *common, "--client-id",
                                                   f"{c.client_id}-a", "--group", f"epochguard-{c.name}",
                                                   "--leave-when-idle", str(LEAVE_WHEN_IDLE_S)),
                                           a_logs[f"{c.name}-a"]) for c in clients},
        lambda bootstrap: {c.name: (c.start(bootstrap, b_logs[c.name], *common, "--group", f"epochguard-{c.name}"),
                                    b_logs[c.name]) for c in clients},
        settle_timeout_s=settle_timeout_s, after_settle_s=after_settle_s, start_timeout_s=start_timeout_s)
    report = _report(out)
    truths = {name: judge_client(path, final, stuck_after_s=stuck_after_s, unclean=unclean)
              for name, path in {**a_logs, **b_logs}.items()}
    for c in clients:
        truths[c.name].divergences += judge_handoff(a_logs[f"{c.name}-a"], b_logs[c.name], final,
                                                    stuck_after_s=stuck_after_s)
    return RunResult(bootstrap, {**a_logs, **b_logs}, final, truths, report, out.lines)


Started = dict[str, tuple[subprocess.Popen[bytes], Path]]  # driver name -> (its process, its delivery log)


def _serve(
    cluster_cmd: Sequence[str],
    workdir: Path,
    early: Callable[[str], Started],
    late: Callable[[str], Started] | None = None,
    *,
    settle_timeout_s: float,
    after_settle_s: float,
    start_timeout_s: float,
) -> tuple[str, FinalLog, _Lines]:
    """One serve run: the cluster, the drivers `early(bootstrap)` starts at once and those `late(bootstrap)`
    starts once it settled; `after_settle_s` after the last of them (the late ones, else the early ones) has
    logged `start`, and past the cluster's stuck bound, every driver is stopped and the final log read.
    Returns the bootstrap, the final log and the cluster's stdout (also written to `cluster.stdout`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    stderr = open(workdir / "cluster.stderr", "w")
    cluster = subprocess.Popen(list(cluster_cmd), stdout=subprocess.PIPE, stderr=stderr, text=True)
    assert cluster.stdout is not None
    out = _Lines(cluster.stdout)
    drivers: dict[str, subprocess.Popen[bytes]] = {}
    try:
        first = out.wait_for(lambda line: line.startswith("bootstrap "), 30.0)
        if first is None:
            raise RunError(f"{' '.join(cluster_cmd)}: no bootstrap line (see {workdir / 'cluster.stderr'})")
        bootstrap = first.split(" ", 1)[1].strip()
        started = early(bootstrap)
        drivers.update({name: proc for name, (proc, _log) in started.items()})
        if out.wait_for(lambda line: line.strip() == "settled", settle_timeout_s) is None:
            raise RunError(f"{' '.join(cluster_cmd)}: not settled within {settle_timeout_s}s")
        if late is not None:
            started = late(bootstrap)
            drivers.update({name: proc for name, (proc, _log) in started.items()})
        # A cluster may settle before a driver (importing its client, bootstrapping) is even up: the
        # margin counts from when every driver has logged `start`, so none is stopped before it ran.
        _wait_started({name: proc for name, (proc, _log) in started.items()},
                      {name: log for name, (_proc, log) in started.items()}, start_timeout_s)
        time.sleep(after_settle_s)
        _wait_stuck_bound(out, settle_timeout_s)
        _stop_all(drivers)
        final = read_final_log(bootstrap)
        cluster.send_signal(signal.SIGTERM)
        out.drain(30.0)
        cluster.wait(timeout=30)
    finally:
        _stop_all(drivers)
        if cluster.poll() is None:
            cluster.kill()
            cluster.wait()
        stderr.close()
    (workdir / "cluster.stdout").write_text("\n".join(out.lines) + "\n", encoding="utf-8")
    return bootstrap, final, out


def _report(out: _Lines) -> dict[str, Any] | None:
    """The cluster's last JSON line: its report of every client."""
    return next((json.loads(line) for line in reversed(out.lines) if line.startswith("{")), None)


def _wait_stuck_bound(out: _Lines, timeout_s: float) -> None:
    """Until the cluster's `stuck-bound` line, if it printed `trigger` (serve does; its clock lags the wall
    clock under load, and a run stopped on wall time alone would leave its judge's verdicts undecided)."""
    said = {line.strip() for line in out.lines}
    if "trigger" in said and "stuck-bound" not in said:
        if out.wait_for(lambda line: line.strip() == "stuck-bound", timeout_s) is None:
            raise RunError(f"the cluster passed no stuck bound within {timeout_s}s after settling")


def _wait_started(drivers: dict[str, subprocess.Popen[bytes]], logs: dict[str, Path], timeout_s: float) -> None:
    """Until every driver's delivery log holds its `start` line; RunError naming any that died or
    never started."""
    deadline = time.monotonic() + timeout_s
    waiting = set(drivers)
    while waiting:
        for name in sorted(waiting):
            if _has_start(logs[name]):
                waiting.discard(name)
            elif drivers[name].poll() is not None or time.monotonic() > deadline:
                why = "exited" if drivers[name].poll() is not None else f"did not start within {timeout_s}s"
                raise RunError(f"{name} driver {why} (see {logs[name].with_suffix('.stderr')})")
        if waiting:
            time.sleep(0.05)


def _has_start(log: Path) -> bool:
    try:
        with open(log, encoding="utf-8") as f:
            return any(json.loads(line).get("kind") == "start" for line in f if line.endswith("\n"))
    except (FileNotFoundError, json.JSONDecodeError):
        return False


def _stop_all(drivers: dict[str, subprocess.Popen[bytes]]) -> None:
    for proc in drivers.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in drivers.values():
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

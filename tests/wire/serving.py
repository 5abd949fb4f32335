"""Start `epochguard serve` as a subprocess for a test: bootstrap, wait for `settled`, stop, result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from epochguard.wire.drivers.registry import Client
from epochguard.wire.drivers.session import RunResult, run_clients, serve_command
from tests.wire.conftest import usable

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


def wait_for(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


class ServeRuns:
    """Judged `epochguard serve` runs of real clients, each (scenario, trigger, group) run once, on first
    use, with the clients of that group that can run here; a run that broke fails every test asking."""

    AFTER_SETTLE_S = 12.0  # past the server's stuck bound (10 s) so both sides can call a client stuck
    STUCK_AFTER_S = 10.0

    def __init__(self, root: Path) -> None:
        self._root = root
        self._runs: dict[tuple[str, str, str], RunResult | Exception] = {}

    def run(self, scenario: str, trigger: str, group: str, clients: Sequence[Client]) -> RunResult:
        """The run of `clients`, called `group`, in `scenario --trigger trigger`."""

        key = (scenario, trigger, group)
        if key not in self._runs:
            here = [c for c in clients if usable(c)]
            workdir = self._root / f"{scenario}-{trigger}-{group}"
            try:
                self._runs[key] = run_clients(
                    serve_command(scenario, trigger, trace=workdir / "trace.jsonl", consumers=len(here)), here,
                    workdir, after_settle_s=self.AFTER_SETTLE_S, stuck_after_s=self.STUCK_AFTER_S,
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
    assert truth.consumed > 100 and truth.produced_acked > 20, f"{name} barely ran: {truth}"
    assert truth.divergences == [] and truth.reread == 0 and truth.skipped == 0
    assert truth.lost_acked == [] and truth.duplicated_produced == []
    server = result.server_client(f"epochguard-{name}")
    assert server is not None, f"the server never saw {name}"
    assert server["divergences"] == [] and server["acks_lost"] == []

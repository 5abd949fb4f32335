"""Start `epochguard serve` as a subprocess for a test: bootstrap, wait for `settled`, stop, result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

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
        errors = self.proc.stderr.read() if self.proc.stderr else ""
        self._close_stderr()
        assert self.proc.returncode == 0, errors
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

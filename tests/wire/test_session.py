"""`run_clients` counts its after-settle margin from when every driver is up, not from `settled`.

A cluster can settle before a driver has imported its client (`clean` settles at once; under load a
Python driver takes seconds to start): stopping it then left a log with nothing consumed, or no log at
all (SIGTERM before the driver had opened it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from epochguard.wire.drivers.session import RunError, _Lines, _wait_started, _wait_stuck_bound


def _driver(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


def test_waits_for_a_slow_driver_start_line(tmp_path: Path) -> None:
    log = tmp_path / "slow.jsonl"
    line = json.dumps({"t": 0, "kind": "start"})
    proc = _driver(f"import time; time.sleep(1.0); open({str(log)!r}, 'w').write({line!r} + '\\n'); time.sleep(5)")
    try:
        began = time.monotonic()
        _wait_started({"slow": proc}, {"slow": log}, timeout_s=30)
        assert time.monotonic() - began >= 0.9
    finally:
        proc.kill()
        proc.wait()


def test_a_driver_that_dies_before_starting_is_a_run_error(tmp_path: Path) -> None:
    proc = _driver("import sys; sys.exit(3)")
    with pytest.raises(RunError, match="dead driver exited"):
        _wait_started({"dead": proc}, {"dead": tmp_path / "dead.jsonl"}, timeout_s=30)


def test_a_driver_that_never_starts_times_out(tmp_path: Path) -> None:
    proc = _driver("import time; time.sleep(30)")
    try:
        with pytest.raises(RunError, match=r"did not start within 0\.5s"):
            _wait_started({"mute": proc}, {"mute": tmp_path / "mute.jsonl"}, timeout_s=0.5)
    finally:
        proc.kill()
        proc.wait()


def _lines(script: str) -> tuple[subprocess.Popen[str], _Lines]:
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = _Lines(proc.stdout)
    assert out.wait_for(lambda line: line == "settled", 30) == "settled"
    return proc, out


def test_a_serve_run_lasts_until_its_stuck_bound_in_server_steps(tmp_path: Path) -> None:
    """serve's clock lags the wall clock under load: after `settled`, the run waits for `stuck-bound` (the
    judge's bound passed in server steps), or the server would leave a stuck client undecided."""
    proc, out = _lines("import time; print('trigger'); print('settled', flush=True); time.sleep(1.0); "
                       "print('stuck-bound', flush=True); time.sleep(5)")
    try:
        began = time.monotonic()
        _wait_stuck_bound(out, timeout_s=30)
        assert time.monotonic() - began >= 0.9
        assert out.lines[-1] == "stuck-bound"
    finally:
        proc.kill()
        proc.wait()


def test_a_cluster_without_faults_is_not_waited_for() -> None:
    proc, out = _lines("import time; print('settled', flush=True); time.sleep(5); print('stuck-bound', flush=True)")
    try:
        began = time.monotonic()
        _wait_stuck_bound(out, timeout_s=30)
        assert time.monotonic() - began < 2.0
    finally:
        proc.kill()
        proc.wait()


def test_a_stuck_bound_that_never_comes_is_a_run_error() -> None:
    proc, out = _lines("import time; print('trigger'); print('settled', flush=True); time.sleep(30)")
    try:
        with pytest.raises(RunError, match=r"no stuck bound within 0\.5s"):
            _wait_stuck_bound(out, timeout_s=0.5)
    finally:
        proc.kill()
        proc.wait()


def test_a_member_leaves_its_group_once_idle_after_consuming(tmp_path) -> None:
    """`--group G --leave-when-idle S` (handoff-truncation's member A): nothing is due before it consumed,
    nor within S of its last record; then it commits and closes once, and polls no more."""
    import time as _time

    from epochguard.wire.drivers.delivery_log import DeliveryLog, Membership, parse_args

    config = parse_args("x", ["--bootstrap", "b:1", "--log", str(tmp_path / "x.jsonl"), "--group", "g",
                              "--leave-when-idle", "0.2"])
    assert (config.group, config.leave_when_idle) == ("g", 0.2)
    log = DeliveryLog(tmp_path / "x.jsonl")
    member, calls = Membership(config, log), []

    def poll() -> str:
        calls.append("poll")
        return "records"

    leave = lambda: calls.append("leave")  # noqa: E731
    assert member.poll(poll, leave, "none") == "records"  # never consumed: it stays however long it idles
    _time.sleep(0.25)
    assert member.poll(poll, leave, "none") == "records"
    member.consumed()
    assert member.poll(poll, leave, "none") == "records"  # within the idle bound
    _time.sleep(0.25)
    assert member.poll(poll, leave, "none") == "none" and member.left
    assert member.poll(poll, leave, "none") == "none"
    assert calls == ["poll", "poll", "poll", "leave"]  # left once, polled no more
    plain = parse_args("x", ["--bootstrap", "b:1", "--log", str(tmp_path / "x.jsonl")])
    assert plain.group is None and Membership(plain, log).leave_due() is False  # no group: never leaves
    log.close()

"""A killed audit leaves nothing stale behind (issue 36): its lost records' spool, named by its process
id under the output directory, is removed by the next audit there, which finds the same results as
an audit into a clean directory; a spool of an audit still running is left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd

from epochguard.spark import audit
from epochguard.spark.result import remove_stale

from .test_audit_local import _cluster

LEFT_BEHIND = (".lost_records.", ".tmp-")


def _left(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if any(mark in p.name for mark in LEFT_BEHIND))


def _lost(out: Path) -> pd.DataFrame:
    frame = pd.read_parquet(out / "lost_records.parquet")
    return frame.sort_values(["topic", "partition", "broker", "offset"]).reset_index(drop=True)


def test_a_rerun_removes_the_spool_of_a_killed_audit(spark, tmp_path) -> None:
    dirs = _cluster(tmp_path / "logs")
    out = tmp_path / "out"
    env = {**os.environ, "EPOCHGUARD_AUDIT_HALT_AFTER": "2"}
    command = [sys.executable, "-m", "epochguard", "audit", *dirs, "--out", str(out), "--local-bytes", "2000"]
    killed = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert killed.stderr is not None
        for line in killed.stderr:  # the audit halts after writing two windows' lost records
            if "halted by EPOCHGUARD_AUDIT_HALT_AFTER" in line:
                break
        else:
            raise AssertionError(f"the audit did not halt: exit {killed.wait()}")
        spools = _left(out)
        assert spools == [s for s in spools if s.startswith(f".lost_records.{killed.pid}.")] and len(spools) == 1
        parts = list((out / spools[0] / "lost_records.parquet").iterdir())
        assert parts and parts[0].stat().st_size > 0  # killed mid-write: a part file without its footer
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        if killed.stderr is not None:
            killed.stderr.close()
    again = audit(spark, dirs, out=str(out), html=False, local_bytes=2000)
    assert _left(out) == []
    clean = audit(spark, dirs, out=str(tmp_path / "clean"), html=False, local_bytes=2000)
    assert again.lost_count == clean.lost_count == 105
    pd.testing.assert_frame_equal(_lost(out), _lost(tmp_path / "clean"))


def test_only_the_leftovers_of_finished_processes_are_removed(tmp_path) -> None:
    """A spool or half-written table of a live process (another audit writing into the same
    directory) stays; those of a process gone, and the tables and other files, are not touched."""
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        names = [
            f".lost_records.{live.pid}.a1", f".lost_records.{dead.pid}.b2", f"errors.parquet.tmp-{dead.pid}",
            f"errors.parquet.tmp-{live.pid}", "lost_records.parquet", "report.html", ".lost_records.notes",
        ]
        for name in names:
            (tmp_path / name).mkdir()
        removed = remove_stale(str(tmp_path))
        assert sorted(Path(p).name for p in removed) == sorted(
            [f".lost_records.{dead.pid}.b2", f"errors.parquet.tmp-{dead.pid}"]
        )
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for n in names if str(dead.pid) not in n)
        temp = tmp_path / "temp"  # the temp dir: only the audits' own spools there
        for name in (f"epochguard-audit-{dead.pid}.c3", f"epochguard-audit-{live.pid}.d4", f"x.parquet.tmp-{dead.pid}"):
            (temp / name).mkdir(parents=True)
        assert [Path(p).name for p in remove_stale(str(temp), temp=True)] == [f"epochguard-audit-{dead.pid}.c3"]
        assert len(list(temp.iterdir())) == 2
    finally:
        live.kill()
        live.wait()

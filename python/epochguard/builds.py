"""Built artefacts cached by the hash of their sources: the wire drivers' toolchains
(`epochguard.wire.drivers.toolchain`) and the JVM `kafka-log` reader (`epochguard.spark.jvm`).

A build runs under a file lock in a temporary directory beside its final one and lands by an atomic
rename, so concurrent test runs share one build and a killed build leaves no half-written entry. The
cache is ``$EPOCHGUARD_CACHE`` (default ``~/.cache/epochguard``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

__all__ = ["cache_base", "source_hash", "locked", "run", "build_into"]


def cache_base() -> Path:
    """``$EPOCHGUARD_CACHE``, else ``$XDG_CACHE_HOME/epochguard``, else ``~/.cache/epochguard``."""
    base = os.environ.get("EPOCHGUARD_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "epochguard")
    return Path(base)


def source_hash(files: Sequence[Path]) -> str:
    """16 hex digits of the files' names and contents, in the order given."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold `directory`'s build lock (made if missing) for the block."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run(cmd: Sequence[str], what: str, error: type[Exception], cwd: Path | None = None,
        env: dict[str, str] | None = None) -> None:
    """Run a build step; a failure raises `error` with the command and the tail of its output."""
    proc = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise error(f"{what} failed ({' '.join(cmd)}), exit {proc.returncode}:\n{tail}")


def build_into(final: Path, build: Callable[[Path], None]) -> None:
    """Run `build(tmpdir)` and rename its result to `final` (a directory), unless another build did."""
    if final.exists():
        return
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        build(tmp)
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

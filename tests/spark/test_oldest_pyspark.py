"""``epochguard-kafka`` on the oldest pyspark 4.x the package supports (4.0.0), which has no admission
control: `latestOffset()` takes no arguments, there is no `Trigger.AvailableNow` for Python sources, and
Spark validates a restart through the `setLatestSeenOffset` hook (`partitions(o, o)`).

pyspark 4.0.0 is installed, once, into its own venv in the cache (`$EPOCHGUARD_CACHE/venv-pyspark-4.0.0`,
with the other requirements of pyproject's `spark` extra; about 400 MB and a minute or two the first
time, nothing after), and epochguard is imported from this checkout (`python/`, with the extension
`make setup` built in place). The run is tests/spark/stream_client.py's: a local session (200 ms
triggers) reads records only the isolated leader has, an unclean election and a refill past the
checkpoint follow, the restarted query fails naming the divergence, then rewinds exactly. A venv that
cannot be made skips with the reason, except under CI=true, where the test fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO, spark_home_without_zips
from tests.spark.stream_client import run_client

OLDEST = "4.0.0"


def _spark_extra() -> list[str]:
    """pyproject's `spark` extra with pyspark pinned to OLDEST (which its lower bound must admit)."""
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["spark"]
    [pyspark] = [r for r in extra if r.startswith("pyspark")]
    bound = re.fullmatch(r"pyspark(?:\[\w+\])?>=([\d.]+)", pyspark)
    assert bound and tuple(map(int, bound.group(1).split("."))) <= tuple(map(int, OLDEST.split("."))), pyspark
    return [f"pyspark=={OLDEST}"] + [r for r in extra if not r.startswith("pyspark")]


def oldest_venv() -> Path:
    root = Path(os.environ.get("EPOCHGUARD_CACHE") or Path.home() / ".cache" / "epochguard")
    venv = root / f"venv-pyspark-{OLDEST}"
    if (venv / ".complete").exists():
        return venv
    log = root / f"venv-pyspark-{OLDEST}.log"
    root.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        made = subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], stdout=out, stderr=out)
        if made.returncode == 0:
            made = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *_spark_extra()],
                                  stdout=out, stderr=out, timeout=1800)
    if made.returncode != 0:
        why = f"could not install pyspark {OLDEST} into {venv} (see {log})"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(why)
        pytest.skip(why)
    (venv / ".complete").touch()
    return venv


def test_oldest_pyspark_fails_then_rewinds_without_admission_control(tmp_path: Path) -> None:
    venv = oldest_venv()
    python = str(venv / "bin" / "python")
    pip_home = Path(subprocess.run([python, "-c", "import pyspark, os; print(os.path.dirname(pyspark.__file__))"],
                                   capture_output=True, text=True, check=True).stdout.strip())
    env = {**os.environ, "SPARK_HOME": spark_home_without_zips(pip_home, OLDEST),
           "PYTHONPATH": str(REPO / "python"), "VIRTUAL_ENV": str(venv)}
    module, version = run_client(python, "classic", env, tmp_path)
    assert version == OLDEST and "connect" not in module

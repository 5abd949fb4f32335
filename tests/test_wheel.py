"""The wheel carries what a checkout has beside the package (issue 37): built by `make wheel` and
installed into a fresh venv outside the checkout, it runs the demo, reads ``format("kafka-log")``
through the JVM reader (its jar shipped in the wheel), and runs `epochguard compat` with Apache Kafka's
Java client, whose driver sources it ships and builds into the user's cache on first use."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.no_mutants, pytest.mark.spark]

READ = """
import json, sys
from epochguard.spark import local_session, reader_of
from epochguard.spark.jvm import jar
spark = local_session("local[2]")
df = spark.read.format("kafka-log").load(sys.argv[1:])
print("RESULT " + json.dumps({"reader": reader_of(df), "rows": df.count(), "jar": str(jar())}))
spark.stop()
"""


def _checkout_kafka_cache() -> Path:
    from epochguard.kafka.provision import cache_dir

    return cache_dir()


def _needs(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        why = f"the wheel test needs {', '.join(missing)} on PATH"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(why)
        pytest.skip(why)


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{cmd} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def test_the_wheel_runs_the_demo_the_jvm_reader_and_java_compat_outside_the_checkout(tmp_path: Path) -> None:
    _needs("make", "maturin", "mvn", "javac", "cargo")
    here = dict(os.environ)
    dist = tmp_path / "dist"
    _run(["make", "--no-print-directory", "wheel", f"DIST={dist}", f"VENV={Path(sys.prefix)}"], ROOT, here, 900)
    (wheel,) = dist.glob("epochguard-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, here, 300)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)], tmp_path, here, 300)
    # The third-party dependencies (pyspark is 400 MB) come from this environment's site-packages, added
    # after the venv's own: a path line of a .pth file is not a site dir, so this environment's editable
    # epochguard (its own .pth) is not seen, and `import epochguard` is the wheel's.
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     tmp_path, here, 60).stdout.strip())
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in here.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "EPOCHGUARD_KAFKA_LOG_JAR",
                                                       "EPOCHGUARD_DRIVER_SOURCES", "PYSPARK_PYTHON",
                                                       "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    where = _run([str(python), "-c", "import epochguard; print(epochguard.__file__)"], tmp_path, env, 60)
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout

    demo = _run([str(venv / "bin" / "epochguard"), "demo", "--out", str(tmp_path / "demo")], tmp_path, env, 900)
    assert "lost" in demo.stdout.lower(), demo.stdout[-2000:]

    brokers = sorted(str(p) for p in (tmp_path / "demo" / "logs").glob("broker-*"))
    read = _run([str(python), "-c", READ, *brokers], tmp_path, env, 600)
    result = json.loads(next(line for line in read.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result["reader"] == "jvm" and result["rows"] > 0
    assert Path(result["jar"]).is_relative_to(site)  # the jar the wheel ships, not the checkout's build

    # Kafka's pom ships too: the wheel finds the jars `make kafka` fetched (the same pom, the same cache
    # entry; a user's first `--cluster kafka` fetches them with mvn)
    jars = _run([str(python), "-c", "from epochguard.kafka.provision import POM, cache_dir; print(POM); print(cache_dir())"],
                tmp_path, env, 60).stdout.split()
    assert Path(jars[0]).is_relative_to(site) and jars[1] == str(_checkout_kafka_cache())

    compat = subprocess.run(
        [str(venv / "bin" / "epochguard"), "compat", "--client", "java-classic", "--scenario", "unclean-election",
         "--json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert "are not at" not in compat.stderr, compat.stderr[-2000:]
    runs = json.loads(compat.stdout.strip().splitlines()[-1])["runs"]
    cells = [c for run in runs for c in run.get("clients", [])]
    # one run per trigger; Kafka's Java client (KIP-320) ran in each and got a verdict, not an error
    assert len(runs) == 2 and all("error" not in run for run in runs), runs
    assert [c["client"] for c in cells] == ["java-classic"] * 2 and all("error" not in c and c["cell"] for c in cells), cells

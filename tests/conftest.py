"""The test process's one SparkSession (tests/spark and tests/real_kafka both use it).

Spark keeps one JVM per process and `getOrCreate` returns whichever session started first, ignoring the
static settings of later builders: a second fixture that started a session without `spark.jars` made
Spark's own Kafka source fail with KAFKA_DATA_SOURCE_NOT_ENABLED in the full run (tests/real_kafka runs
before tests/spark). So there is exactly one `spark` fixture, it always carries the connector's jars when
`make spark-kafka` fetched them, and it checks that the session it got is the one it asked for.

The JVM is started with SPARK_HOME pointing at a copy of pip's pyspark directory without `python/lib`:
Spark puts `$SPARK_HOME/python/lib/pyspark.zip` first on every Python worker's path (PythonUtils.
sparkPythonPath), a zip of sources without bytecode, so each worker that is not forked from the daemon
compiled pyspark before it connected back: 1.7 s of CPU instead of 0.46 s. A Python streaming source's
worker is such a worker (PythonStreamingSourceRunner -> PythonWorkerFactory.createSimpleWorker), and Spark
gives it a hard-coded 10 s to connect back (`selector.select(10000)`, no setting in pyspark 4.3); on a
loaded 2-core machine the compile alone missed it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def spark_home_without_zips(pip_home: Path | None = None, version: str | None = None) -> str:
    """A SPARK_HOME of symlinks to pip's pyspark directory, `python/` left out (see the module doc); that
    of this process's pyspark unless `pip_home` (another venv's pyspark directory, of `version`) is given."""
    if pip_home is None:
        import pyspark

        pip_home, version = Path(pyspark.__file__).parent, pyspark.__version__
    home = REPO / "target" / f"spark-home-{version}"
    if not (home / "bin" / "spark-submit").exists():
        tmp = home.with_name(f"{home.name}.{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        for entry in pip_home.iterdir():
            if entry.name not in ("python", "__pycache__"):
                (tmp / entry.name).symlink_to(entry)
        try:
            tmp.rename(home)
        except OSError:  # another process made it first
            pass
    return str(home)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    from epochguard.spark import local_session
    from tests.spark.stream_matrix import spark_kafka_jars

    stray = SparkSession.getActiveSession()
    if stray is not None:  # started outside this fixture: its static settings cannot be changed
        stray.stop()
    os.environ.setdefault("SPARK_HOME", spark_home_without_zips())
    # Spark's own Kafka source on the classpath when `make spark-kafka` fetched it (test_stream_matrix.py).
    jars = spark_kafka_jars()
    session = local_session("local[2]", app_name="epochguard-tests", shuffle_partitions=2,
                            conf={"spark.jars": ",".join(jars)} if jars else None)
    got = session.sparkContext.getConf().get("spark.jars", "")
    assert all(jar in got for jar in jars), f"the session lacks Spark's Kafka source jars: spark.jars={got!r}"
    yield session
    session.stop()

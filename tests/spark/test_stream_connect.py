"""``epochguard-kafka`` over Spark Connect: a streaming query whose Python source runs on the server.

Under Spark Connect the client only describes the query: ``spark.dataSource.register`` pickles the
source class to the server (pyspark's ``connect/datasource.py``), and the server's Python workers run
its driver-side methods and its reads, so epochguard must be importable there. The client is a
separate process (a Connect session and a classic one cannot share a Python process's `getOrCreate`)
with a local Connect server (``remote("local[2]")``, as test_datasource.py's Connect test), reading
`epochguard serve`'s cluster across an unclean election (tests/spark/stream_client.py): the restarted
query fails over Connect with the source's message naming the divergence, then rewinds exactly.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.conftest import spark_home_without_zips
from tests.spark.stream_client import run_client


def test_spark_connect_query_fails_then_rewinds(tmp_path: Path) -> None:
    if os.environ.get("CI", "").lower() in ("true", "1"):
        import grpc  # noqa: F401  (CI never skips: the dev extra installs pyspark[connect])
    pytest.importorskip("grpc", reason="Spark Connect needs pyspark's connect extra (grpcio)")
    env = {**os.environ, "SPARK_HOME": spark_home_without_zips()}
    module, _ = run_client(sys.executable, "connect", env, tmp_path)
    assert "connect" in module

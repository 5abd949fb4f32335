"""A local SparkSession tuned for audits on a laptop: quiet, Arrow on, few shuffle partitions."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from epochguard.spark.datasource import register
from epochguard.spark.logs import local_cores

LOG4J2 = Path(__file__).with_name("log4j2.properties")


def local_session(
    master: str = "local[2]",
    *,
    app_name: str = "epochguard",
    shuffle_partitions: int = 4,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get or create a SparkSession for `master` with the settings the pipeline expects.

    Arrow is required (``mapInArrow`` and pandas UDFs); the UI is off and logging is at ERROR so a
    terminal report stays readable. Workers run this interpreter, so the extension they import is
    the one the driver imported.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "hostname resolves to loopback" warning
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.log.level", "ERROR")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG4J2.as_uri()}")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if master.startswith("local"):
        # One decode task per core: a second wave of Python tasks costs ~0.1 s each on 2 cores.
        builder = builder.config("spark.default.parallelism", str(local_cores(master)))
    if os.name == "posix" and _spark_at_least(4, 1):
        # Python workers talk to the JVM over a Unix socket: no ~40 ms TCP wait per local task.
        builder = builder.config("spark.python.unix.domain.socket.enabled", "true")
        # Let format("kafka-log") skip replicas and segments that a query's filters rule out.
        builder = builder.config("spark.sql.python.filterPushdown.enabled", "true")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def _spark_at_least(major: int, minor: int) -> bool:
    version = tuple(int(p) for p in re.findall(r"\d+", pyspark.__version__)[:2])
    return version >= (major, minor)

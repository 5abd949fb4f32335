"""A local SparkSession tuned for audits on a laptop: quiet, Arrow on, few shuffle partitions."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

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
        .config("spark.default.parallelism", str(max(2, shuffle_partitions)))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.log.level", "ERROR")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG4J2.as_uri()}")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark

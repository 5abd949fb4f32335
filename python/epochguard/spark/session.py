"""A local SparkSession tuned for audits on a laptop: quiet, Arrow on, few shuffle partitions."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyspark
from pyspark.sql import SparkSession

from epochguard.spark.datasource import register
from epochguard.spark.jvm import jar as jvm_jar
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
    the one the driver imported. The JVM ``kafka-log`` reader's jar, when there is one
    (`epochguard.spark.jvm.jar`), is added to ``spark.jars``: a session made elsewhere gets it with
    ``.config("spark.jars", str(epochguard.spark.jvm.jar()))``.
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
    conf = dict(conf or {})
    reader = jvm_jar()
    if reader is not None:  # format("kafka-log") is then the JVM reader (epochguard.spark.jvm)
        conf["spark.jars"] = ",".join(j for j in (conf.get("spark.jars"), str(reader)) if j)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def _spark_at_least(major: int, minor: int) -> bool:
    version = tuple(int(p) for p in re.findall(r"\d+", pyspark.__version__)[:2])
    return version >= (major, minor)


class LazySession:
    """A `local_session` made when first needed: `get()` makes it (or waits for the one `start()`
    began in the background). `epochguard audit` hands one to the audit, which asks for it only
    for what runs in Spark (a consumed table, the record-level method, paths with a scheme, tails
    past the driver's budget): an audit done on the driver never starts the JVM, and one that will
    need Spark starts it while the headers are scanned."""

    def __init__(self, master: str = "local[2]", **options: Any) -> None:
        self.master = master
        self._options = options
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._session: SparkSession | None = None
        self._error: BaseException | None = None
        self.took: float | None = None  # seconds `local_session` took, once made

    @property
    def version(self) -> str:
        """Spark's version without starting it: pyspark's own, which is the JVM's it launches."""
        return pyspark.__version__

    @property
    def ready(self) -> bool:
        """Whether the session is up (never starts it)."""
        return self._session is not None

    def start(self) -> LazySession:
        """Begin making the session in a background thread; `get()` waits for it."""
        with self._lock:
            if self._thread is None and self._session is None:
                self._thread = threading.Thread(target=self._make, name="spark-start", daemon=True)
                self._thread.start()
        return self

    def get(self) -> SparkSession:
        self.start()
        assert self._thread is not None
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._session is not None
        return self._session

    def _make(self) -> None:
        began = time.perf_counter()
        try:
            self._session = local_session(self.master, **self._options)
            self.took = time.perf_counter() - began
        except BaseException as exc:  # handed to the caller of get()
            self._error = exc


def resolve(spark: SparkSession | LazySession) -> SparkSession:
    """The session itself (a `LazySession` is made now)."""
    return spark.get() if isinstance(spark, LazySession) else spark

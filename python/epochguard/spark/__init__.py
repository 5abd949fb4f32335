"""Spark pipeline: read real Kafka log directories and audit them for unclean-election data loss.

Optional extra: ``pip install 'epochguard[spark]'`` (pyspark, pyarrow, pandas, rich).

>>> from epochguard.spark import read_kafka_logs, audit
>>> df = read_kafka_logs(spark, ["/backup/broker-1", "/backup/broker-2"])
>>> result = audit(spark, ["/backup/broker-1", "/backup/broker-2"], out="audit-out")
>>> spark.read.format("kafka-log").load("/backup/broker-1")   # pyspark >= 4, registered on import
"""

from __future__ import annotations

try:
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
    import rich  # noqa: F401
except ImportError as exc:
    raise ImportError(f"epochguard.spark needs {exc.name}: pip install 'epochguard[spark]'") from exc

from epochguard.spark.audit import audit
from epochguard.spark.datasource import register
from epochguard.spark.logs import read_kafka_logs
from epochguard.spark.result import AuditResult
from epochguard.spark.session import local_session
from epochguard.spark.udfs import EpochHistories, decode_batches

__all__ = [
    "AuditResult",
    "EpochHistories",
    "audit",
    "decode_batches",
    "local_session",
    "read_kafka_logs",
    "register",
]


def _register_active() -> None:
    """Make ``format("kafka-log")`` work in a session that already runs when this is imported."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)


_register_active()

"""Spark pipeline: read real Kafka log directories and audit them for unclean-election data loss.

Optional extra: ``pip install 'epochguard[spark]'`` (pyspark, pyarrow, pandas, rich).

>>> from epochguard.spark import read_kafka_logs, audit
>>> df = read_kafka_logs(spark, ["/backup/broker-1", "/backup/broker-2"])
>>> result = audit(spark, ["/backup/broker-1", "/backup/broker-2"], out="audit-out")
>>> spark.read.format("kafka-log").load("/backup/broker-1")   # pyspark >= 4, registered on import
>>> reader_of(df)   # "jvm" where the JVM reader's jar is on the session (epochguard.spark.jvm), else "python"
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import TYPE_CHECKING, Any

for _extra in ("pandas", "pyarrow", "pyspark", "rich"):
    if importlib.util.find_spec(_extra) is None:
        raise ImportError(f"epochguard.spark needs {_extra}: pip install 'epochguard[spark]'", name=_extra)

if TYPE_CHECKING:
    from epochguard.spark.auditing import audit
    from epochguard.spark.datasource import register
    from epochguard.spark.jvm import reader_of
    from epochguard.spark.logs import read_kafka_logs
    from epochguard.spark.result import AuditResult
    from epochguard.spark.session import local_session
    from epochguard.spark.udfs import EpochHistories, decode_batches

# name -> the module that defines it, imported when the name is first asked for: every Python process
# Spark starts for `format("epochguard-kafka")` (the source's planner, the read planner, each executor
# worker) imports `epochguard.spark.stream`, and with it this package; eager imports of the audit here
# (pandas, rich) cost each of them seconds.
_LAZY = {
    "audit": "epochguard.spark.auditing",
    "register": "epochguard.spark.datasource",
    "reader_of": "epochguard.spark.jvm",
    "read_kafka_logs": "epochguard.spark.logs",
    "AuditResult": "epochguard.spark.result",
    "local_session": "epochguard.spark.session",
    "EpochHistories": "epochguard.spark.udfs",
    "decode_batches": "epochguard.spark.udfs",
}

__all__ = [
    "AuditResult",
    "EpochHistories",
    "audit",
    "decode_batches",
    "local_session",
    "read_kafka_logs",
    "reader_of",
    "register",
]


class _Package(types.ModuleType):
    """This package: its public names resolved on first use (`_LAZY`), then kept."""

    def __getattr__(self, name: str) -> Any:
        if name not in _LAZY:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(_LAZY[name]), name)
        setattr(self, name, value)
        return value

    def __dir__(self) -> list[str]:
        return sorted({*vars(self), *__all__})


sys.modules[__name__].__class__ = _Package


def _register_active() -> None:
    """Make ``format("kafka-log")`` work in a session that already runs when this is imported."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        from epochguard.spark.datasource import register

        register(active)


_register_active()

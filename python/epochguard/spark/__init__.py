"""Spark pipeline: read real Kafka log directories and audit them for unclean-election data loss.

Optional extra: ``pip install 'epochguard[spark]'`` (pyspark, pyarrow, pandas, rich).

>>> from epochguard.spark import read_kafka_logs, audit
>>> df = read_kafka_logs(spark, ["/backup/broker-1", "/backup/broker-2"])
>>> result = audit(spark, ["/backup/broker-1", "/backup/broker-2"], out="audit-out")
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

_MISSING = [m for m in ("pyspark", "pyarrow", "pandas", "rich") if importlib.util.find_spec(m) is None]
if _MISSING:
    raise ImportError(f"epochguard.spark needs {', '.join(_MISSING)}: pip install 'epochguard[spark]'")

# Names load on first use, so `epochguard audit --help` does not start importing pyspark.
_EXPORTS = {
    "AuditResult": "epochguard.spark.audit",
    "audit": "epochguard.spark.audit",
    "read_kafka_logs": "epochguard.spark.logs",
    "local_session": "epochguard.spark.session",
    "EpochHistories": "epochguard.spark.udfs",
    "decode_batches": "epochguard.spark.udfs",
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from epochguard.spark.audit import AuditResult, audit
    from epochguard.spark.logs import read_kafka_logs
    from epochguard.spark.session import local_session
    from epochguard.spark.udfs import EpochHistories, decode_batches


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'epochguard.spark' has no attribute {name!r}")

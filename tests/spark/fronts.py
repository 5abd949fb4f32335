"""The fronts that read Kafka log directories into Spark, for tests run on each of them (issue 37: every
kafka-log test on both readers): `read_kafka_logs` (mapInArrow), ``format("kafka-log")`` as the JVM reader
(tools/kafka-log-reader, where its jar is on the session: `make setup` builds it) and the Python data
source (``kafka-log-python``). `read` checks that the reader asked for is the one that ran."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import pytest

from epochguard.spark import read_kafka_logs
from epochguard.spark.jvm import missing, reader_of
from epochguard.spark.logs import DEFAULT_CHUNK_BYTES

MAPINARROW, JVM, PYTHON = "read_kafka_logs", "jvm", "python"
FRONTS = [MAPINARROW, JVM, PYTHON]


def require_jvm(spark: Any) -> None:
    """Skip (fail under CI) unless the JVM reader's jar is on the session."""
    if "kafka-log-reader" in spark.sparkContext.getConf().get("spark.jars", ""):
        return
    why = f"the JVM kafka-log reader is not on the session ({missing() or 'built after the session started'})"
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(why)
    pytest.skip(why)


def read(
    spark: Any,
    front: str,
    paths: Sequence[str],
    *,
    columns: Sequence[str] | None = None,
    with_errors: bool = False,
    chunk_bytes: int | None = None,
) -> Any:
    """The DataFrame `front` reads from `paths`, with `read_kafka_logs`' arguments as the data sources' options."""
    if front == MAPINARROW:
        chunks = DEFAULT_CHUNK_BYTES if chunk_bytes is None else chunk_bytes
        return read_kafka_logs(spark, list(paths), columns=columns, with_errors=with_errors, chunk_bytes=chunks)
    if front == JVM:
        require_jvm(spark)
    reader = spark.read.format("kafka-log" if front == JVM else "kafka-log-python")
    if columns is not None:
        reader = reader.option("columns", ",".join(columns))
    if with_errors:
        reader = reader.option("withErrors", "true")
    if chunk_bytes is not None:
        reader = reader.option("chunkBytes", str(chunk_bytes))
    df = reader.load(list(paths))
    assert reader_of(df) == front, f"asked for the {front} reader, {reader_of(df)} ran"
    return df

"""Spark's own Kafka source in the unclean-election matrix (`stream_matrix`), and the docs' table.

`make test` runs the one cell that tells the two sources apart most cheaply (the log refilled past the
checkpoint before a trigger) for Spark's source; `tools/stream_matrix.py` runs every cell for both and
writes the table, which must be what docs/stream-matrix.json renders to (generated, not typed).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.spark.stream_matrix import spark_kafka_jars, table_in_docs


def test_the_table_in_the_docs_is_the_generated_one() -> None:
    table, rendered = table_in_docs()
    assert table == rendered
    assert "**SILENT**" in table  # Spark's source in the refill cells


def test_sparks_kafka_source_reads_a_refilled_log_silently(spark: Any) -> None:
    """What Spark's source does when the log is truncated and refilled past its checkpoint before a
    trigger: no check fires; the 5 replacement records below the checkpoint are never read and the 5
    records it read before the election stay in the sink (measured: research/streaming-guard.md case B)."""
    if not spark_kafka_jars():
        if os.environ.get("CI") == "true":
            pytest.fail("Spark's Kafka source is not fetched (make spark-kafka)")
        pytest.skip("Spark's Kafka source is not fetched: run `make spark-kafka`")
    from tests.spark.stream_matrix import run_cell

    result = run_cell(spark, "kafka", "refill-above")
    assert (result.verdict, result.lost, result.phantoms, result.named, result.duplicates) == ("SILENT", 5, 5, 0, 0), \
        result
    assert result.emitted == 22

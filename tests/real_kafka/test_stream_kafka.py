"""The streaming matrix on the real Kafka cluster: epochguard-kafka and Spark's own Kafka source in a live
query across an unclean election that Kafka 4.4 itself performed (tests/spark/guard_kafka.py), judged by
the new leader's final log (tests/spark/stream_matrix.py's `judge`).

`make test` runs the cell the two sources disagree on most (the log refilled past the checkpoint before a
trigger) for both; `python tools/stream_matrix.py --cluster kafka` runs every cell and writes the table in
docs/streaming.md.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from epochguard.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.no_mutants, pytest.mark.spark]


def _cell(spark: Any, kafka_cluster: KafkaCluster, source: str, cell: str) -> Any:
    from tests.spark.guard_kafka import KafkaGuardCluster
    from tests.spark.stream_matrix import run_cell

    topic = f"stream-{source.replace('/', '-')}-{cell}"
    return run_cell(spark, source, cell, lambda: KafkaGuardCluster(kafka_cluster, topic), "kafka")


def test_epochguard_kafka_fails_naming_the_divergence_on_kafka(spark: Any, kafka_cluster: KafkaCluster) -> None:
    """The 5 acks=1 records (offsets 10-14, epoch 0) the query read are gone from the new leader's log,
    which was refilled to 22: the next trigger validates (15, epoch 0), Kafka answers epoch 0 ends at 10,
    and the query fails naming it; nothing it emitted before is unaccounted for but those 5."""
    result = _cell(spark, kafka_cluster, "epochguard-kafka/fail", "refill-above")
    assert (result.verdict, result.detail) == ("fails", "fails naming the divergence at offset 10"), result
    assert (result.emitted, result.phantoms, result.duplicates) == (15, 5, 0), result


def test_sparks_kafka_source_reads_a_refilled_log_silently_on_kafka(spark: Any, kafka_cluster: KafkaCluster) -> None:
    """Spark's source on the same real election: no check fires (the offset only moved forward, 15 -> 22),
    the replacement records 10-14 are never read and the 5 phantoms stay in the sink, unnamed."""
    from tests.spark.stream_matrix import spark_kafka_jars

    if not spark_kafka_jars():
        if os.environ.get("CI") == "true":
            pytest.fail("Spark's Kafka source is not fetched (make spark-kafka)")
        pytest.skip("Spark's Kafka source is not fetched: run `make spark-kafka`")
    result = _cell(spark, kafka_cluster, "kafka", "refill-above")
    assert (result.verdict, result.lost, result.phantoms, result.named, result.duplicates) == ("SILENT", 5, 5, 0, 0), \
        result
    assert result.emitted == 22

"""The streaming matrix on the real Kafka cluster: epochguard-kafka and Spark's own Kafka source in a live
query across an unclean election that Kafka 4.4 itself performed (tests/spark/guard_kafka.py), judged by
the new leader's final log (tests/spark/stream_matrix.py's `judge`).

`make test` runs the cell the two sources disagree on most (the log refilled past the checkpoint before a
trigger) for both, and the three cells where the election falls inside a planned batch [15, 20) for Spark's
source and for epochguard-kafka in both modes: the task's Fetch is held at the wire proxy in front of the
brokers (tests/real_kafka/wire_proxy.py) while Kafka elects and the log is refilled; `python
tools/stream_matrix.py --cluster kafka` runs every cell and writes the table in docs/streaming.md.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from epochguard.kafka import KafkaCluster
from tests.real_kafka.wire_proxy import KafkaWireProxy

pytestmark = [pytest.mark.kafka, pytest.mark.no_mutants, pytest.mark.spark]


def _cell(spark: Any, kafka_cluster: KafkaCluster, proxy: KafkaWireProxy, source: str, cell: str) -> Any:
    from tests.spark.guard_kafka import KafkaGuardCluster
    from tests.spark.stream_matrix import run_cell

    topic = f"stream-{source.replace('/', '-')}-{cell}"
    return run_cell(spark, source, cell, lambda: KafkaGuardCluster(kafka_cluster, topic, proxy), "kafka")


def _needs_sparks_source() -> None:
    from tests.spark.stream_matrix import spark_kafka_jars

    if not spark_kafka_jars():
        if os.environ.get("CI") == "true":
            pytest.fail("Spark's Kafka source is not fetched (make spark-kafka)")
        pytest.skip("Spark's Kafka source is not fetched: run `make spark-kafka`")


def test_epochguard_kafka_fails_naming_the_divergence_on_kafka(spark: Any, kafka_cluster: KafkaCluster,
                                                               kafka_proxy: KafkaWireProxy) -> None:
    """The 5 acks=1 records (offsets 10-14, epoch 0) the query read are gone from the new leader's log,
    which was refilled to 22: the next trigger validates (15, epoch 0), Kafka answers epoch 0 ends at 10,
    and the query fails naming it; nothing it emitted before is unaccounted for but those 5."""
    result = _cell(spark, kafka_cluster, kafka_proxy, "epochguard-kafka/fail", "refill-above")
    assert (result.verdict, result.detail) == ("fails", "fails naming the divergence at offset 10"), result
    assert (result.emitted, result.phantoms, result.duplicates) == (15, 5, 0), result


def test_sparks_kafka_source_reads_a_refilled_log_silently_on_kafka(spark: Any, kafka_cluster: KafkaCluster,
                                                                     kafka_proxy: KafkaWireProxy) -> None:
    """Spark's source on the same real election: no check fires (the offset only moved forward, 15 -> 22),
    the replacement records 10-14 are never read and the 5 phantoms stay in the sink, unnamed."""
    _needs_sparks_source()
    result = _cell(spark, kafka_cluster, kafka_proxy, "kafka", "refill-above")
    assert (result.verdict, result.lost, result.phantoms, result.named, result.duplicates) == ("SILENT", 5, 5, 0, 0), \
        result
    assert result.emitted == 22


# The election inside the planned batch [15, 20): its task's Fetch at 15 (plan-then-read, replay) or 16
# (during-task: one record batch a Fetch, record 15 read) waits at the proxy while broker 1 stops, Kafka
# elects broker 2 uncleanly and the log is refilled to 22 (replay: the query is stopped mid-task and restarted
# after the refill, replaying [15, 20)). `phantoms`: the records of epoch 0 the query read that the new log
# does not hold (10-14, and 15 in during-task). A cell costs about 50 s (two broker restarts): `make test`
# runs each timing once for epochguard-kafka (the modes spread over them) and one for Spark's source; the
# others are `slow` (`pytest -m slow`; `tools/stream_matrix.py --cluster kafka` runs them all for the docs).
PHANTOMS = {"plan-then-read": 5, "during-task": 6, "replay": 5}
slow = pytest.mark.slow


@pytest.mark.parametrize("cell", [pytest.param("plan-then-read", marks=slow), "during-task",
                                  pytest.param("replay", marks=slow)])
def test_sparks_kafka_source_in_an_election_inside_a_batch_on_kafka(
        spark: Any, kafka_cluster: KafkaCluster, kafka_proxy: KafkaWireProxy, cell: str) -> None:
    """Spark's executor seeks by offset without an epoch and reads on from the new leader's log at 15 (16)
    as if nothing happened: the replacement records below are never read, the records it read before the
    election stay in the sink unnamed, nothing fails (the same as on serve, test_stream_matrix.py)."""
    _needs_sparks_source()
    result = _cell(spark, kafka_cluster, kafka_proxy, "kafka", cell)
    assert kafka_proxy.held, "no Fetch was held: the cell did not put the election inside the batch"
    n = PHANTOMS[cell]
    assert (result.verdict, result.lost, result.phantoms, result.named, result.duplicates) == \
        ("SILENT", n, n, 0, 0), result
    assert result.emitted == 22, result


@pytest.mark.parametrize(("mode", "cell"), [
    ("fail", "plan-then-read"), pytest.param("rewind", "plan-then-read", marks=slow),
    pytest.param("fail", "during-task", marks=slow), ("rewind", "during-task"),
    pytest.param("fail", "replay", marks=slow), ("rewind", "replay")])
def test_epochguard_kafka_in_an_election_inside_a_batch_on_kafka(
        spark: Any, kafka_cluster: KafkaCluster, kafka_proxy: KafkaWireProxy, mode: str, cell: str) -> None:
    """epochguard-kafka's task fetches with LastFetchedEpoch 0: Kafka's new leader answers a diverging
    epoch (epoch 0 ends at 10), the task stops the partition without emitting a record of the new log, and
    the driver's next validation (or the replay's) finds the divergence at 10: `fail` fails naming it,
    `rewind` reads the new log from 10 and names exactly the phantoms it had emitted."""
    result = _cell(spark, kafka_cluster, kafka_proxy, f"epochguard-kafka/{mode}", cell)
    assert kafka_proxy.held, "no Fetch was held: the cell did not put the election inside the batch"
    n = PHANTOMS[cell]
    if mode == "fail":
        assert (result.verdict, result.detail) == ("fails", "fails naming the divergence at offset 10"), result
        assert (result.emitted, result.phantoms, result.duplicates) == (10 + n, n, 0), result
    else:
        assert (result.verdict, result.lost, result.phantoms, result.named, result.duplicates) == \
            ("exact", 0, n, n, 0), result
        assert result.emitted == 22 + n, result

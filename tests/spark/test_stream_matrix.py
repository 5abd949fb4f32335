"""Spark's own Kafka source in the unclean-election matrix (`stream_matrix`), and the docs' table.

`make test` runs, for Spark's source, the cell that tells the two sources apart most cheaply (the log
refilled past the checkpoint before a trigger) and the cells where the election falls inside a planned
batch (its task's Fetch held at serve's wire); test_stream_guard.py runs epochguard-kafka's cells; `tools/stream_matrix.py` runs every cell for both and
writes the table, which must be what docs/stream-matrix.json renders to (generated, not typed). And the
steady-state cost of both sources, counted at serve's wire (`stream_matrix.steady_state_requests`).
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


def _needs_sparks_source() -> None:
    if not spark_kafka_jars():
        if os.environ.get("CI") == "true":
            pytest.fail("Spark's Kafka source is not fetched (make spark-kafka)")
        pytest.skip("Spark's Kafka source is not fetched: run `make spark-kafka`")


def test_sparks_kafka_source_reads_a_refilled_log_silently(spark: Any) -> None:
    """What Spark's source does when the log is truncated and refilled past its checkpoint before a
    trigger: no check fires; the 5 replacement records below the checkpoint are never read and the 5
    records it read before the election stay in the sink (measured: research/streaming-guard.md case B)."""
    _needs_sparks_source()
    from tests.spark.stream_matrix import run_cell

    result = run_cell(spark, "kafka", "refill-above")
    assert (result.verdict, result.lost, result.phantoms, result.named, result.duplicates) == ("SILENT", 5, 5, 0, 0), \
        result
    assert result.emitted == 22


@pytest.mark.parametrize(("cell", "lost"), [("plan-then-read", 5), ("during-task", 6), ("replay", 5)])
def test_sparks_kafka_source_in_an_election_inside_a_batch(spark: Any, cell: str, lost: int) -> None:
    """The election falls inside the planned batch [15, 20): before its task fetches (plan-then-read),
    after the task read record 15 (during-task), or while the batch waits for its replay after the query
    stopped mid-task (replay). Spark's executor seeks by offset without an epoch, so it reads on from the
    new leader's log at 15 (16) as if nothing happened: the replacement records below are never read, the
    records it read before the election stay in the sink unnamed, and nothing fails (research/streaming-
    guard.md cases C and E: the task fails only when the new log is still shorter than the read offset)."""
    _needs_sparks_source()
    from tests.spark.stream_matrix import run_cell

    result = run_cell(spark, "kafka", cell)
    assert (result.verdict, result.lost, result.phantoms, result.named, result.duplicates) == \
        ("SILENT", lost, lost, 0, 0), result
    assert result.emitted == 22


def test_steady_state_requests_are_no_more_than_sparks_source(spark: Any) -> None:
    """The Speed section's cost half: in steady state (no leader epoch moves), counted at serve's wire over
    the same batches of one record in each of 6 partitions (serve's 3 brokers lead 2 each), epochguard-kafka's
    driver asks no more a trigger and its executors no more a batch than Spark's source's: one Metadata and
    one ListOffsets a leader a trigger (no OffsetsForLeaderEpoch), and one Fetch a leader a batch (the batch
    is one task, which fetches its 6 partitions together; the worker's consumer kept from its earlier tasks,
    nothing fetched past the end). Measured (load 14, one partition): ours 1 Metadata + 1 ListOffsets a
    trigger and 1 Fetch a batch; Spark's 3 Metadata + 1 ListOffsets a trigger (its Admin client) and 2
    Fetch + 2 ListOffsets a batch (its pooled consumer)."""
    _needs_sparks_source()
    from tests.spark.stream_matrix import steady_state_requests

    ours = steady_state_requests(spark, "epochguard-kafka", partitions=6)
    theirs = steady_state_requests(spark, "kafka", partitions=6)
    print(f"\n{ours}\n{theirs}")
    # a trigger may fall between the producer's requests to the 3 leaders: a batch split in two
    assert ours.batches >= 4 and theirs.batches >= 4, (ours, theirs)
    assert ours.leaders == 3, ours
    assert ours.driver == {"Metadata": ours.triggers, "ListOffsets": ours.triggers * ours.leaders}, ours
    # One Fetch a leader a batch, not one a partition; a Python worker's first task also connects
    # (ApiVersions, Metadata): the warm-up batches normally cover both local[2] workers (test_stream_guard
    # asserts a later task's Fetch alone).
    assert ours.executors["Fetch"] <= ours.batches * ours.leaders, ours
    assert set(ours.executors) <= {"Fetch", "ApiVersions", "Metadata"}, ours
    assert ours.per_trigger() <= theirs.per_trigger(), (ours, theirs)
    assert ours.per_batch() <= theirs.per_batch(), (ours, theirs)

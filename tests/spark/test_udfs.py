"""The vectorized epoch lookups give, row for row, what the core's scalar methods give."""

from __future__ import annotations

from epochguard import _core
from epochguard.spark import EpochHistories

HISTORIES = {
    ("orders", 0): ([(0, 0), (2, 100), (5, 250)], 300),
    ("orders", 1): ([(3, 40)], 90),  # older entries truncated from the start (retention)
    ("empty", 0): ([], 0),
}


def test_epoch_for_offset_matches_the_cache(spark) -> None:
    histories = EpochHistories(HISTORIES).broadcast(spark)
    probes = [(t, p, o) for (t, p) in [*HISTORIES, ("missing", 9)] for o in (0, 39, 40, 99, 100, 101, 249, 250, 10_000)]
    df = spark.createDataFrame(probes, "topic string, partition int, offset long").repartition(2)
    got = {
        (r.topic, r.partition, r.offset): r.epoch
        for r in df.withColumn("epoch", histories.epoch_for_offset("topic", "partition", "offset")).collect()
    }
    for t, p, o in probes:
        entries = HISTORIES.get((t, p))
        want = None if entries is None else _core.LeaderEpochCache(entries[0]).epoch_for_offset(o)
        assert got[(t, p, o)] == want, (t, p, o)


def test_end_offset_for_matches_the_cache(spark) -> None:
    histories = EpochHistories(HISTORIES).broadcast(spark)
    probes = [(t, p, e) for (t, p) in HISTORIES for e in (-1, 0, 1, 2, 3, 4, 5, 6)]
    df = spark.createDataFrame(probes, "topic string, partition int, epoch int")
    answers = df.withColumn("answer", histories.end_offset_for("topic", "partition", "epoch")).collect()
    assert len(answers) == len(probes)
    for r in answers:
        entries, leo = HISTORIES[(r.topic, r.partition)]
        assert (r.answer.epoch, r.answer.end_offset) == _core.LeaderEpochCache(entries).end_offset_for(r.epoch, leo), r


def test_batch_epochs_name_the_batch_holding_each_offset(spark) -> None:
    """Sorted batches (base, last, epoch) with a gap between them and a batch of no epoch (-1): an
    offset inside a batch gets its epoch, -1 included; one in a gap, before the first, past the
    last or of another partition gets null."""
    import numpy as np

    from epochguard.spark.udfs import batch_epochs

    batches = {("t", 0): (np.array([0, 5, 20]), np.array([4, 9, 29]), np.array([-1, 3, 7], dtype=np.int32))}
    probes = [("t", 0, o) for o in (0, 4, 5, 9, 10, 19, 20, 29, 30)] + [("t", 1, 0), ("u", 0, 5)]
    df = spark.createDataFrame(probes, "topic string, partition int, offset long").repartition(2)
    got = {
        (r.topic, r.partition, r.offset): r.epoch
        for r in df.withColumn("epoch", batch_epochs(spark, batches)("topic", "partition", "offset")).collect()
    }
    assert got == {
        ("t", 0, 0): -1, ("t", 0, 4): -1, ("t", 0, 5): 3, ("t", 0, 9): 3, ("t", 0, 10): None, ("t", 0, 19): None,
        ("t", 0, 20): 7, ("t", 0, 29): 7, ("t", 0, 30): None, ("t", 1, 0): None, ("u", 0, 5): None,
    }

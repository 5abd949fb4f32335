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

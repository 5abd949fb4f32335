"""``epochguard-kafka`` against `epochguard serve`'s cluster: the unclean-election matrix, judged by ground truth.

Each cell puts an unclean election (the isolated leader alone has records the query already read, then
dies; a lagging replica takes over and the log is refilled) at one point of a query's life, and the
reader's own methods are driven as Spark's micro-batch engine drives them (`MicroBatches`: the offset
log, the commit log, restart = `partitions(o, o)`, replay of a planned but uncommitted batch), so the
matrix runs without a Spark session. The judge (`judge`) holds the run to: the output is the final log
exactly once plus exactly the rows the truncation log names as phantoms (offset in its range, leader
epoch <= its max), or the query fails naming the exact divergence (the first offset where what it read
and the final log differ). Two tests run the same source in a real local Spark session.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochguard.errors import LogTruncationError
from epochguard.spark.offsets import TRUNCATION_PREFIX, EpochOffset, Truncation, check
from epochguard.spark.stream import (
    KafkaGuardStreamReader,
    StreamOptions,
    TruncationWarning,
    append_truncations,
    group_ranges,
    kafka_schema,
    offsets_json,
    parse_offsets,
    read_range,
    read_ranges,
)
from epochguard.types import TopicPartition
from tests.spark.guard_cluster import TOPIC, GuardCluster

Row = tuple[int, int, int, bytes]  # partition, offset, leader epoch, value


# --- the engine's side, as Spark's MicroBatchExecution calls a Python stream reader ---------------------
class MicroBatches:
    def __init__(self, cluster: GuardCluster, mode: str, tmp: Path, **extra: str) -> None:
        self.options = {"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": TOPIC,
                        "startingOffsets": "earliest", "onTruncation": mode,
                        "truncationLog": str(tmp / "truncations.jsonl"), "kafkaConsumer.pollTimeoutMs": "10000",
                        "kafka.request.timeout.ms": "2000", **extra}
        self.truncation_log = tmp / "truncations.jsonl"
        self.cluster = cluster
        self.offset_log: list[dict[str, Any]] = []  # the planned ends, batch by batch
        self.committed = 0  # batches whose output is in the sink
        self.output: list[Row] = []
        self.reader = self._new_reader()
        self.start = self.reader.initialOffset()

    def _new_reader(self) -> KafkaGuardStreamReader:
        reader = KafkaGuardStreamReader(dict(self.options), kafka_schema(self.options.get("includeHeaders") == "true"))
        self.cluster.cleanups.append(reader.stop)
        return reader

    def _read(self, start: dict[str, Any], end: dict[str, Any]) -> list[Row]:
        rows = []
        for part in self.reader.partitions(start, end):
            for batch in self.reader.read(part):
                for r in batch.to_pylist():
                    rows.append((r["partition"], r["offset"], r["leaderEpoch"], r["value"]))
        return rows

    def _start_of(self, batch: int) -> dict[str, Any]:
        return self.start if batch == 0 else self.offset_log[batch - 1]

    def trigger(self) -> bool:
        """One trigger: plan, read, commit. False when there was nothing new."""
        start = self._start_of(len(self.offset_log))
        end = self.reader.latestOffset(start, None)
        if end == start:
            return False
        self.offset_log.append(end)
        self.output += self._read(start, end)
        self.committed += 1
        return True

    def plan_and_fail(self) -> None:
        """A batch planned (in the offset log), its read lost with the process before the commit."""
        start = self._start_of(len(self.offset_log))
        end = self.reader.latestOffset(start, None)
        assert end != start
        self.offset_log.append(end)
        self.stop()

    def stop(self) -> None:
        self.reader.stop()

    def restart(self) -> None:
        """A new driver process on the same checkpoint: the restart hook, then a replay if uncommitted."""
        self.reader = self._new_reader()
        if not self.offset_log:
            return
        last = self.offset_log[-1]
        self.reader.partitions(last, last)  # `setLatestSeenOffset`
        if self.committed < len(self.offset_log):
            n = len(self.offset_log) - 1
            self.output += self._read(self._start_of(n), self.offset_log[n])
            self.committed += 1

    def run_to_end(self, limit: int = 10) -> None:
        for _ in range(limit):
            if not self.trigger():
                return

    def truncations(self) -> list[dict[str, Any]]:
        if not self.truncation_log.exists():
            return []
        return [json.loads(line) for line in self.truncation_log.read_text().splitlines()]


def is_phantom(row: Row, entries: list[dict[str, Any]]) -> bool:
    p, offset, epoch, _ = row
    return any(e["partition"] == p and e["phantoms"]["from"] <= offset < e["phantoms"]["until"]
               and epoch <= e["phantoms"]["max_epoch"] for e in entries)


def judge(output: list[Row], entries: list[dict[str, Any]], truth: dict[int, tuple[int, bytes | None]]) -> tuple[int, int]:
    """Output = final log exactly once + exactly the named phantoms. Returns (#rows, #phantoms)."""
    phantoms = [r for r in output if is_phantom(r, entries)]
    real = sorted(r for r in output if not is_phantom(r, entries))
    expected = sorted((0, o, e, v) for o, (e, v) in truth.items())
    assert real == expected, f"output minus phantoms != final log:\n got {real}\nwant {expected}"
    for _, offset, epoch, value in phantoms:  # a named phantom really is gone from the log
        assert truth.get(offset) != (epoch, value), f"row at {offset} named a phantom but is in the final log"
    return len(output), len(phantoms)


def first_divergence(read: list[Row], truth: dict[int, tuple[int, bytes | None]]) -> int:
    """The first offset whose record the query read differs from (or is missing in) the final log."""
    return min(o for _, o, e, v in read if truth.get(o) != (e, v))


@pytest.fixture
def cluster() -> Iterator[GuardCluster]:
    c = GuardCluster()
    yield c
    c.close()


TP = TopicPartition(TOPIC, 0)


def _read_phantoms(cluster: GuardCluster, run: MicroBatches, committed: int = 10, phantoms: int = 5) -> int:
    """`committed` acks=all records, then `phantoms` only the isolated leader has; the query reads all."""
    cluster.produce(committed)
    assert run.trigger()
    old = cluster.isolate_leader(TP, phantoms)
    assert run.trigger()
    assert [r[1] for r in run.output] == list(range(committed + phantoms))
    return old


# --- the matrix -----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["fail", "rewind"])
@pytest.mark.parametrize("refill", [3, 12], ids=["refill-below", "refill-above"])
def test_unclean_election_before_a_trigger(cluster: GuardCluster, tmp_path: Path, mode: str, refill: int) -> None:
    run = MicroBatches(cluster, mode, tmp_path)
    old = _read_phantoms(cluster, run)
    cluster.unclean_election(TP, old)
    cluster.produce(refill)  # the new leader's log: [0, 10) + refill records at the offsets 10.. had
    truth = cluster.truth(TP)
    assert len(truth) == 10 + refill
    if mode == "fail":
        with pytest.raises(LogTruncationError) as info:
            run.trigger()
        message = str(info.value)
        assert message.startswith(TRUNCATION_PREFIX)
        assert first_divergence(run.output, truth) == 10
        assert "input partition 0: checkpointed offset 15 epoch 0" in message
        assert "diverges at offset 10 (epoch 0); phantom range [10, 15)" in message
        assert info.value.divergent_offsets[TP].offset == 10
        assert not run.truncations()
        return
    with pytest.warns(TruncationWarning, match="diverges at offset 10"):
        run.run_to_end()
    rows, phantoms = judge(run.output, run.truncations(), truth)
    assert (rows, phantoms) == (15 + refill, 5)
    [entry] = run.truncations()
    assert entry["checkpoint"] == {"offset": 15, "epoch": 0} and entry["divergence"] == {"offset": 10, "epoch": 0}
    assert entry["detected_by"] == "trigger"


@pytest.mark.parametrize("mode", ["fail", "rewind"])
def test_unclean_election_while_the_query_is_stopped(cluster: GuardCluster, tmp_path: Path, mode: str) -> None:
    run = MicroBatches(cluster, mode, tmp_path)
    old = _read_phantoms(cluster, run)
    run.stop()
    cluster.unclean_election(TP, old)
    cluster.produce(12)
    truth = cluster.truth(TP)
    if mode == "fail":  # the restart hook validates the whole checkpoint before anything is planned
        with pytest.raises(LogTruncationError, match=r"\(restart\).*diverges at offset 10 \(epoch 0\)"):
            run.restart()
        return
    run.restart()
    assert run.truncations() == []
    with pytest.warns(TruncationWarning):
        run.run_to_end()
    assert judge(run.output, run.truncations(), truth) == (27, 5)
    assert [e["detected_by"] for e in run.truncations()] == ["restart"]


def test_a_restart_without_admission_control_rewinds_from_the_checkpoint(cluster: GuardCluster,
                                                                         tmp_path: Path) -> None:
    """pyspark 4.0/4.1 call `latestOffset()` without a start: after a restart the reader plans from the
    checkpoint the engine's restart hook (`partitions(o, o)`) handed it. It planned from startingOffsets
    (earliest), saw no moved epoch there, and the engine read the refilled log from the checkpoint on
    silently (found on pyspark 4.0.0 by test_oldest_pyspark.py)."""
    run = MicroBatches(cluster, "rewind", tmp_path)
    old = _read_phantoms(cluster, run)
    run.stop()
    cluster.unclean_election(TP, old)
    cluster.produce(12)
    run.reader = run._new_reader()
    last = run.offset_log[-1]
    assert run.reader.partitions(last, last) == []
    with pytest.warns(TruncationWarning, match="diverges at offset 10"):
        end = run.reader.latestOffset()
    ends, starts = parse_offsets(end)
    assert starts[TP].offset == 10 and ends[TP].offset == 22
    assert [e["detected_by"] for e in run.truncations()] == ["restart"]


def test_a_restart_validates_every_partition_without_the_hook(cluster: GuardCluster, tmp_path: Path) -> None:
    """Spark 4.3 gives a source with admission control no `setLatestSeenOffset` (partitions(o, o)): the first
    trigger of a restarted driver validates the whole checkpoint itself, moved epoch or not."""
    run = MicroBatches(cluster, "fail", tmp_path)
    cluster.produce(5)
    assert run.trigger()
    run.stop()
    run.reader = run._new_reader()  # a restart without the hook
    cluster.produce(2)
    assert run.trigger()
    assert run.reader.reader.requests["OffsetsForLeaderEpoch"] == 1
    assert run.trigger() is False
    assert run.reader.reader.requests["OffsetsForLeaderEpoch"] == 1


@pytest.mark.parametrize("mode", ["fail", "rewind"])
def test_unclean_election_between_planning_and_reading(cluster: GuardCluster, tmp_path: Path, mode: str) -> None:
    """The batch [15, 20) is planned on the old leader; the executors read the new one: they stop at the
    truncated start and emit nothing of it; the next trigger finds the divergence."""
    run = MicroBatches(cluster, mode, tmp_path)
    old = _read_phantoms(cluster, run)
    cluster.produce(5, acks=1)  # 15..19, still only on the isolated leader
    start = run.offset_log[-1]
    end = run.reader.latestOffset(start, None)
    assert parse_offsets(end)[0][TP] == EpochOffset(20, 0)
    cluster.unclean_election(TP, old)
    cluster.produce(12)
    truth = cluster.truth(TP)
    run.offset_log.append(end)
    run.output += run._read(start, end)
    run.committed += 1
    assert [r[1] for r in run.output] == list(range(15))  # nothing of [15, 20) was emitted
    if mode == "fail":
        with pytest.raises(LogTruncationError, match=r"checkpointed offset 20 epoch 0.*diverges at offset 10"):
            run.trigger()
        return
    with pytest.warns(TruncationWarning):
        run.run_to_end()
    assert judge(run.output, run.truncations(), truth) == (27, 5)
    [entry] = run.truncations()
    assert entry["phantoms"] == {"from": 10, "until": 20, "max_epoch": 0}


@pytest.mark.parametrize("mode", ["fail", "rewind"])
def test_unclean_election_during_a_task(cluster: GuardCluster, tmp_path: Path, mode: str) -> None:
    """The task planned [15, 20) on the old leader has emitted record 15 (one record batch per Fetch answer)
    when that leader dies and a lagging replica is elected and refilled: the task goes on against the new
    leader, finds its position truncated and ends without failing and without emitting anything of the new
    log; the next trigger finds the divergence below the checkpoint. The task's Fetches past 15 are held at
    the wire until the election is over (the consumer pipelines: it would have had 16.. in hand)."""
    run = MicroBatches(cluster, mode, tmp_path, **{"kafka.max.partition.fetch.bytes": "1"})
    old = _read_phantoms(cluster, run)
    for _ in range(5):  # 15..19, one batch each, only on the isolated leader
        cluster.produce(1, acks=1)
    start = run.offset_log[-1]
    end = run.reader.latestOffset(start, None)
    assert parse_offsets(end)[0][TP] == EpochOffset(20, 0)
    run.offset_log.append(end)
    [part] = run.reader.partitions(start, end)
    cluster.hold_fetches(16)  # the consumer pipelines its fetches: keep the old leader's 16.. from it
    task = run.reader.read(part)
    first = next(task)
    assert first.column("offset").to_pylist() == [15]
    cluster.unclean_election(TP, old)
    cluster.produce(12)
    truth = cluster.truth(TP)
    cluster.release_fetches()
    # The task ends here, successfully, having emitted nothing of the new log.
    emitted = [(r["partition"], r["offset"], r["leaderEpoch"], r["value"]) for b in [first, *task]
               for r in b.to_pylist()]
    assert [(r[1], r[2]) for r in emitted] == [(15, 0)] and truth[15][1] != emitted[0][3]
    run.output += emitted
    run.committed += 1
    if mode == "fail":
        with pytest.raises(LogTruncationError, match=r"checkpointed offset 20 epoch 0.*diverges at offset 10 "):
            run.trigger()
        return
    with pytest.warns(TruncationWarning):
        run.run_to_end()
    assert judge(run.output, run.truncations(), truth) == (28, 6)  # old 0..15, then the new log from 10


def test_executors_fetch_with_the_last_fetched_epoch(cluster: GuardCluster, tmp_path: Path) -> None:
    """A task's Fetches carry LastFetchedEpoch (v12+): the planned start's epoch from the checkpoint first,
    then the epoch of the last batch read, across a leader epoch change inside the range; the task sends
    no OffsetsForLeaderEpoch (the Fetch validates). A task whose planned start the new leader truncated
    gets a DivergingEpoch answer to its first Fetch and ends without failing, having emitted nothing."""
    from epochguard.protocol.messages import FetchRequest, OffsetsForLeaderEpochRequest

    run = MicroBatches(cluster, "rewind", tmp_path, **{"kafka.max.partition.fetch.bytes": "1"})
    old = _read_phantoms(cluster, run)  # 0..14 at epoch 0, 10..14 only on the isolated leader
    epoch = cluster.unclean_election(TP, old)
    for _ in range(6):  # 10..15 at the new epoch, one batch each
        cluster.produce(1)
    truth = cluster.truth(TP)
    assert epoch > 0 and [truth[o][0] for o in (9, 10)] == [0, epoch]
    seen = cluster.record_requests()
    schema = kafka_schema()
    rows = [r for b in read_range(run.reader.options, TP, EpochOffset(5, 0), EpochOffset(16, epoch), schema)
            for r in b.to_pylist()]
    assert [(r["offset"], r["leaderEpoch"]) for r in rows] == [(o, truth[o][0]) for o in range(5, 16)]
    executor = [req for client, req in seen if client == "epochguard-spark-executor"]
    fetched = [(p.fetch_offset, p.last_fetched_epoch) for req in executor if isinstance(req, FetchRequest)
               for p in req.partitions]
    assert fetched and fetched[0] == (5, 0)
    # Every Fetch names the epoch of the record before its offset (the last batch read, or the start's).
    assert all(last == truth[o - 1][0] for o, last in fetched), fetched
    assert (10, 0) in fetched and (11, epoch) in fetched  # across the epoch change (5..9 came in one batch)
    assert not any(isinstance(req, OffsetsForLeaderEpochRequest) for req in executor)

    # The planned start 15 at epoch 0 is gone (the new log has epoch 0 up to 10 only): DivergingEpoch.
    seen.clear()
    assert list(read_range(run.reader.options, TP, EpochOffset(15, 0), EpochOffset(16, epoch), schema)) == []
    executor = [req for client, req in seen if client == "epochguard-spark-executor"]
    fetched = [(p.fetch_offset, p.last_fetched_epoch) for req in executor if isinstance(req, FetchRequest)
               for p in req.partitions]
    assert fetched[0] == (15, 0)
    assert not any(isinstance(req, OffsetsForLeaderEpochRequest) for req in executor)


def test_a_task_after_the_first_asks_for_its_records_only(cluster: GuardCluster, tmp_path: Path) -> None:
    """Executor requests per task, counted at serve's wire: tasks in one Python worker share its consumer
    (pyspark reuses workers), so a task after the first sends no ApiVersions, Metadata or
    OffsetsForLeaderEpoch, only the Fetch of its range; and no task fetches at or past its planned end
    (no prefetch the broker would hold fetch_max_wait_ms for records nobody reads)."""
    from epochguard.protocol.messages import FetchRequest

    run = MicroBatches(cluster, "fail", tmp_path)
    cluster.produce(10)
    assert cluster.high_watermark(TP) == 10
    seen = cluster.record_requests()
    schema = kafka_schema()
    spent = []
    for start, until in ((0, 4), (4, 10), (10, 10)):
        seen.clear()
        rows = [r["offset"] for b in read_range(run.reader.options, TP, EpochOffset(start, 0),
                                                 EpochOffset(until, 0), schema) for r in b.to_pylist()]
        assert rows == list(range(start, until))
        executor = [req for client, req in seen if client == "epochguard-spark-executor"]
        assert all(p.fetch_offset < until for req in executor if isinstance(req, FetchRequest)
                   for p in req.partitions), executor
        spent.append(sorted(type(req).__name__ for req in executor))
    assert {"ApiVersionsRequest", "MetadataRequest", "FetchRequest"} <= set(spent[0])
    assert spent[1:] == [["FetchRequest"], []], spent


@pytest.mark.parametrize("mode", ["fail", "rewind"])
def test_unclean_election_before_the_replay_of_a_failed_batch(cluster: GuardCluster, tmp_path: Path,
                                                              mode: str) -> None:
    run = MicroBatches(cluster, mode, tmp_path)
    old = _read_phantoms(cluster, run)
    cluster.produce(5, acks=1)
    run.plan_and_fail()  # [15, 20) in the offset log, not committed
    cluster.unclean_election(TP, old)
    cluster.produce(12)
    truth = cluster.truth(TP)
    if mode == "fail":
        with pytest.raises(LogTruncationError, match=r"diverges at offset 10"):
            run.restart()
        return
    run.restart()  # the replay reads nothing of the rewritten [15, 20)
    assert [r[1] for r in run.output] == list(range(15))
    with pytest.warns(TruncationWarning):
        run.run_to_end()
    assert judge(run.output, run.truncations(), truth) == (27, 5)


def test_clean_run_and_the_steady_state_cost(cluster: GuardCluster, tmp_path: Path) -> None:
    """No fault: the final log exactly once, and a trigger costs one Metadata and one ListOffsets (Spark's
    Admin listOffsets asks the same two); OffsetsForLeaderEpoch only when the leader epoch moved."""
    run = MicroBatches(cluster, "fail", tmp_path)
    for n in (7, 5, 9):
        cluster.produce(n)
        before = run.reader.reader.requests.copy()
        assert run.trigger()
        spent = run.reader.reader.requests - before
        assert dict(spent) == {"Metadata": 1, "ListOffsets": 1}
    assert not run.trigger()
    assert judge(run.output, run.truncations(), cluster.truth(TP)) == (21, 0)
    assert run.reader.reader.requests["OffsetsForLeaderEpoch"] == 0


def test_max_offsets_per_trigger_spreads_the_batch(cluster: GuardCluster, tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadMaxRows

    run = MicroBatches(cluster, "fail", tmp_path, maxOffsetsPerTrigger="4")
    assert run.reader.getDefaultReadLimit() == ReadMaxRows(4)
    cluster.produce(10)
    ends = []
    start = run.start
    while True:
        end = run.reader.latestOffset(start, ReadMaxRows(4))
        if end == start:
            break
        ends.append(parse_offsets(end)[0][TP].offset)
        run.output += run._read(start, end)
        start = end
    assert ends == [4, 8, 10]
    assert judge(run.output, run.truncations(), cluster.truth(TP)) == (10, 0)



def test_small_ranges_share_a_task_and_each_is_read_once(tmp_path: Path) -> None:
    """A batch of 4 partitions x 5 records (< minOffsetsPerTask) is one task reading the 4 one after the
    other; minOffsetsPerTask=1 gives one task a partition, as Spark's source. Both read every record once."""
    cluster = GuardCluster(partitions=4)
    try:
        for p in range(4):
            cluster.produce(5, partition=p)
        for extra, tasks in (({}, 1), ({"minOffsetsPerTask": "1"}, 4), ({"minOffsetsPerTask": "10"}, 2)):
            run = MicroBatches(cluster, "fail", tmp_path, **extra)
            end = run.reader.latestOffset(run.start, None)
            parts = run.reader.partitions(run.start, end)
            assert len(parts) == tasks
            rows = run._read(run.start, end)
            assert sorted((p, o) for p, o, _, _ in rows) == [(p, o) for p in range(4) for o in range(5)]
    finally:
        cluster.close()



def test_a_task_fetches_its_partitions_together(tmp_path: Path) -> None:
    """A task of several small partitions (minOffsetsPerTask) sends one Fetch a leader for all the
    partitions it leads, not one a partition (counted at serve's wire); each partition stops at its own
    planned end, and a partition whose start was truncated stops alone while the others are read."""
    from epochguard.protocol.messages import FetchRequest

    cluster = GuardCluster(partitions=4)
    try:
        for p in range(4):
            cluster.produce(3 + p, partition=p)
        leaders = {cluster.leader(tp)[0] for tp in cluster.partitions}
        assert len(leaders) < 4  # some broker leads two: one Fetch for both
        run = MicroBatches(cluster, "fail", tmp_path)
        seen = cluster.record_requests()
        schema = kafka_schema()
        ranges = [(tp, EpochOffset(0, 0), EpochOffset(2 + tp.partition, 0)) for tp in cluster.partitions]
        rows = [(r["partition"], r["offset"]) for b in read_ranges(run.reader.options, ranges, schema)
                for r in b.to_pylist()]
        assert sorted(rows) == [(p, o) for p in range(4) for o in range(2 + p)]
        fetches = [req for client, req in seen if client == "epochguard-spark-executor" and
                   isinstance(req, FetchRequest)]
        assert len(fetches) == len(leaders), fetches
        assert sorted(p.partition_index for req in fetches for p in req.partitions) == [0, 1, 2, 3]
        # an unclean election truncates partition 0 (2 records only its isolated leader had, refilled with
        # 3 others): a task planned at (5, epoch 0) stops it, and reads the others whole
        tp0 = cluster.partitions[0]
        old = cluster.isolate_leader(tp0, 2)
        cluster.unclean_election(tp0, old)
        cluster.produce(3, partition=0)
        ranges = [(tp, EpochOffset(0, 0), EpochOffset(3 + tp.partition, 0)) for tp in cluster.partitions[1:]]
        ranges.insert(0, (tp0, EpochOffset(5, 0), EpochOffset(6, 0)))
        rows = [(r["partition"], r["offset"]) for b in read_ranges(run.reader.options, ranges, schema)
                for r in b.to_pylist()]
        assert sorted(rows) == [(p, o) for p in (1, 2, 3) for o in range(3 + p)]
    finally:
        cluster.close()


def test_a_spark_worker_freezes_what_it_holds_after_its_first_range(cluster: GuardCluster, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """pyspark's daemon runs gc.collect() after every task of a reused worker: the first range read in a
    task freezes the worker's objects (gc.freeze) so the later collections skip them; never outside a task."""
    import gc

    import pyspark

    from epochguard.spark import stream

    cluster.produce(3)
    run = MicroBatches(cluster, "fail", tmp_path)
    end = run.reader.latestOffset(run.start, None)
    monkeypatch.setattr(stream, "_FROZEN", False)
    assert gc.get_freeze_count() == 0
    assert len(run._read(run.start, end)) == 3  # no task context: this process is not frozen
    assert gc.get_freeze_count() == 0 and not stream._FROZEN
    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: object()))
    try:
        assert len(run._read(run.start, end)) == 3
        assert gc.get_freeze_count() > 0 and stream._FROZEN
    finally:
        gc.unfreeze()


# --- pure parts -------------------------------------------------------------------------------------
def test_group_ranges() -> None:
    tps = [TopicPartition("t", p) for p in range(8)]
    groups = group_ranges(dict.fromkeys(tps, 1563), 4096)  # the bench's micro-batch: 12,504 offsets
    assert len(groups) == 3 and sorted(tp for g in groups for tp in g) == tps
    assert sorted(len(g) * 1563 for g in groups) == [3126, 4689, 4689]  # largest first, to the lightest
    assert group_ranges(dict.fromkeys(tps, 5000), 4096) == [[tp] for tp in tps]  # big enough: as Spark's
    assert group_ranges(dict.fromkeys(tps, 10), 1) == [[tp] for tp in tps]
    assert group_ranges(dict.fromkeys(tps, 10), 4096) == [tps]  # fewer than one task's worth: one task
    uneven = {tps[0]: 10_000, tps[1]: 10, tps[2]: 10, tps[3]: 3000}
    assert group_ranges(uneven, 4096) == [[tps[0]], [tps[3]], [tps[1], tps[2]]]  # 13,020 // 4096 = 3 tasks
def test_check_is_kafkas_rule() -> None:
    ck = EpochOffset(15, 3)
    assert check(TP, ck, (3, 20)) is None  # the leader still has epoch 3 up to 20
    assert check(TP, ck, (4, 15)) is None  # a different epoch alone is not a truncation
    t = check(TP, ck, (2, 10))
    assert t is not None and t.divergence == EpochOffset(10, 2) and t.phantoms == (10, 15)
    undefined = check(TP, ck, (-1, -1))
    assert undefined is not None and undefined.divergence is None and undefined.phantoms is None


def test_offsets_json_round_trip_and_is_canonical() -> None:
    ends = {TopicPartition("b", 10): EpochOffset(5, 1), TopicPartition("b", 2): EpochOffset(7, None),
            TopicPartition("a", 0): EpochOffset(0, 0)}
    starts = {TopicPartition("b", 2): EpochOffset(3, 0)}
    value = offsets_json(ends, starts)
    assert json.dumps(value) == json.dumps(offsets_json(dict(reversed(list(ends.items()))), starts))
    assert list(value["b"]) == ["2", "10"]
    assert parse_offsets(json.loads(json.dumps(value))) == (ends, starts)


def test_options() -> None:
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "a, b"}
    o = StreamOptions.parse({**base, "kafka.request.timeout.ms": "2000",
                             "startingOffsets": '{"a": {"0": -2, "1": 5, "2": {"offset": 9, "epoch": 4}}}'})
    assert o.topics == ("a", "b") and o.client == {"request_timeout_ms": 2000} and o.min_offsets_per_task == 4096
    assert o.starting == {TopicPartition("a", 0): -2, TopicPartition("a", 1): EpochOffset(5, None),
                          TopicPartition("a", 2): EpochOffset(9, 4)}
    assert StreamOptions.parse({"kafka.bootstrap.servers": "h:1", "assign": '{"t": [1, 0]}'}).assigned == (
        TopicPartition("t", 0), TopicPartition("t", 1))
    for bad, match in [({}, "bootstrap"), ({"assign": '{"t": [0]}'}, "exactly one"),
                       ({"onTruncation": "skip"}, "no skip"), ({"kafka.group.id": "g"}, "source decides"),
                       ({"startingOffsets": "yesterday"}, "startingOffsets"),
                       ({"maxOffsetsPerTrigger": "0"}, "positive"), ({"minOffsetsPerTask": "0"}, "positive"),
                       ({"failOnDataLoss": "false"}, "not supported")]:
        with pytest.raises(ValueError, match=match):
            StreamOptions.parse({**base, **bad} if "bootstrap" != match else {"subscribe": "a"})
    with pytest.raises(TypeError, match="no_such"):
        StreamOptions.parse({**base, "kafka.no.such": "1"})


def test_truncation_log_appends_once_and_survives_a_torn_line(tmp_path: Path) -> None:
    path = str(tmp_path / "sub" / "t.jsonl")
    t1 = Truncation(TP, EpochOffset(15, 0), EpochOffset(10, 0), 1)
    t2 = Truncation(TopicPartition(TOPIC, 1), EpochOffset(9, 2), EpochOffset(4, 1), 3)
    assert len(append_truncations(path, [t1], "trigger")) == 1
    assert append_truncations(path, [t1], "trigger") == []  # the same trigger redone: not logged twice
    with open(path, "a") as f:
        f.write('{"topic": "inp')  # a writer died mid-line
    assert len(append_truncations(path, [t1, t2], "restart")) == 1
    lines = Path(path).read_text().splitlines()
    entries = [json.loads(line) for line in lines if line.endswith("}") and line.startswith('{"check')]
    assert [e["partition"] for e in entries] == [0, 1]
    assert entries[1]["phantoms"] == {"from": 4, "until": 9, "max_epoch": 2}


# --- in a Spark session -----------------------------------------------------------------------------
def _query(spark: Any, cluster: GuardCluster, tmp: Path, mode: str) -> Any:
    reader = (spark.readStream.format("epochguard-kafka")
              .option("kafka.bootstrap.servers", cluster.bootstrap).option("subscribe", TOPIC)
              .option("startingOffsets", "earliest").option("onTruncation", mode)
              .option("truncationLog", str(tmp / "truncations.jsonl")).option("kafka.request.timeout.ms", "2000")
              .load())
    return (reader.writeStream.format("parquet").option("checkpointLocation", str(tmp / "checkpoint"))
            .trigger(availableNow=True).start(str(tmp / "out")))


# Spark gives a Python streaming source's worker a hard-coded 10 s to connect back (PythonWorkerFactory.
# createSimpleWorker); the `spark` fixture (tests/conftest.py) keeps that worker from compiling pyspark first.
def test_spark_query_fails_then_rewinds_across_an_unclean_election(spark: Any, cluster: GuardCluster,
                                                                     tmp_path: Path) -> None:
    """A real query (file sink, Trigger.AvailableNow) reads the acks=1 records; the isolated leader dies, a
    lagging replica is elected and refilled past the checkpoint. Restarted with onTruncation=fail the
    query fails at the restart naming the divergence; restarted with rewind it reads the replacement
    records, and the sink holds the final log once plus the phantoms the truncation log names."""
    from pyspark.errors import StreamingQueryException

    from epochguard.spark.stream import register

    assert register(spark)
    cluster.produce(10)
    old = cluster.isolate_leader(TP, 5)
    _query(spark, cluster, tmp_path, "fail").awaitTermination(120)
    cluster.unclean_election(TP, old)
    cluster.produce(12)
    truth = cluster.truth(TP)
    with pytest.raises(StreamingQueryException, match=r"\[EPOCHGUARD_LOG_TRUNCATION\].*checkpointed offset 15 "
                                                      r"epoch 0.*diverges at offset 10 \(epoch 0\)"):
        _query(spark, cluster, tmp_path, "fail").awaitTermination(120)
    _query(spark, cluster, tmp_path, "rewind").awaitTermination(120)
    rows = spark.read.parquet(str(tmp_path / "out")).select("partition", "offset", "leaderEpoch", "value").collect()
    output = [(r[0], r[1], r[2], bytes(r[3])) for r in rows]
    entries = [json.loads(line) for line in (tmp_path / "truncations.jsonl").read_text().splitlines()]
    assert judge(output, entries, truth) == (27, 5)


def test_rows_have_sparks_kafka_schema_with_headers(cluster: GuardCluster, tmp_path: Path) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    from epochguard.client import KafkaProducer

    with KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all") as producer:
        producer.send(TOPIC, value=b"v", key=b"k", headers=[("h", b"1"), ("n", None)], partition=0,
                      timestamp_ms=1_700_000_000_123).get(30)
    run = MicroBatches(cluster, "fail", tmp_path, includeHeaders="true")
    start = run.start
    end = run.reader.latestOffset(start, None)
    [part] = run.reader.partitions(start, end)
    [batch] = list(run.reader.read(part))
    assert batch.schema == to_arrow_schema(kafka_schema(True), timezone="UTC")
    assert kafka_schema(True).fieldNames() == ["key", "value", "topic", "partition", "offset", "timestamp",
                                               "timestampType", "headers", "leaderEpoch"]
    [row] = batch.to_pylist()
    assert row["key"] == b"k" and row["value"] == b"v" and row["topic"] == TOPIC and row["partition"] == 0
    assert row["headers"] == [{"key": "h", "value": b"1"}, {"key": "n", "value": None}]
    assert row["timestamp"].timestamp() == 1_700_000_000.123 and row["timestampType"] == 0
    assert row["offset"] == 0 and row["leaderEpoch"] == 0

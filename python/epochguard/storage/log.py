"""One replica of one partition: segments of real magic v2 batches, offsets, and the leader-epoch cache.

Mirrors Kafka's `UnifiedLog`, `LocalLog` and `LogSegment` (storage/src/main/java/.../storage/internals/log)
for what the epoch protocol touches: append as leader (stamps the partition leader epoch and assigns
`(epoch, base offset)` in the cache), append as follower (the leader's batches verbatim), `truncateTo`,
full truncation, log start offset and high watermark. Bytes come from and go to the Rust core
(`encode_batch`, `iter_batches`); epoch rules are the core's `LeaderEpochCache`.

Transactions, as far as the epoch protocol meets them (Kafka's `ProducerStateManager` and transaction
index): transactional batches open a producer's transaction, a control batch (COMMIT/ABORT marker,
`append_txn_marker`) closes it; `last_stable_offset` is the HW or, below it, the first offset of the
oldest open transaction; aborted transactions are kept for read_committed fetches
(`collect_aborted_transactions`). All of it is rebuilt from the batches after truncation or recovery
(Kafka reloads a producer-state snapshot and replays the log after it). Idempotent producers' epochs and
sequence numbers are `storage.producer_state`'s: a client append is checked there first, and a retried
batch is answered with the offsets it was written at. Not modelled: transaction timeouts.

A log lives in memory and, when given a directory, writes through to a real Kafka partition directory:
segment files `<20-digit base offset>.log` rolled by size, and `leader-epoch-checkpoint` (written
atomically by the core). `PartitionLog.open(dir)` recovers one from disk the way a restarting broker
does: partial or corrupt tails are cut, the cache is re-truncated to the recovered log.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epochguard._core import LeaderEpochCache, RecordBatch, encode_batch, iter_batches
from epochguard.errors import CorruptRecordError, EpochGuardError, MalformedFileError
from epochguard.records import stamp_batches
from epochguard.storage.logdir_format import segment_base_offset
from epochguard.storage.producer_state import ProducerBatch, ProducerStateManager
from epochguard.types import TopicPartition

__all__ = [
    "DEFAULT_SEGMENT_BYTES",
    "CHECKPOINT_FILE",
    "AbortedTxn",
    "AppendInfo",
    "BatchInfo",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "LogSegment",
    "PartitionLog",
    "UnexpectedAppendOffsetError",
    "segment_file_name",
    "parse_partition_dir_name",
]

DEFAULT_SEGMENT_BYTES = 1 << 30  # segment.bytes
CONTROL_ABORT = 0  # ControlRecordType: the key of a transaction marker's one record
CONTROL_COMMIT = 1
CHECKPOINT_FILE = "leader-epoch-checkpoint"
_LOG_SUFFIX = ".log"


class UnexpectedAppendOffsetError(EpochGuardError, ValueError):
    """A follower append whose first offset is below the log end offset (Kafka's UnexpectedAppendOffsetException).
    (Also a `ValueError`, which it was before 0.2.)

    `first_offset`/`last_offset`: the offending batch's base and last offset.
    """

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{_LOG_SUFFIX}"


def _segment_base_offset(file: Path) -> int:
    """A segment's base offset from its name; like Kafka's LogLoader, a `.log` file named otherwise
    fails the partition (before recovery touches any segment) rather than being skipped."""
    base = segment_base_offset(file.name)
    if base is None:
        raise MalformedFileError(str(file), 0, "a .log file whose name is not a 20-digit base offset")
    return base


def parse_partition_dir_name(name: str) -> TopicPartition:
    """`my-topic-3` -> TopicPartition("my-topic", 3) (topics may contain '-'; the partition is after the last)."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"not a partition directory name: {name!r}")
    return TopicPartition(topic, int(partition))


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """Where one batch sits: its offsets, epoch, max timestamp and byte range within its segment."""

    base_offset: int
    last_offset: int
    partition_leader_epoch: int
    max_timestamp: int
    position: int
    size: int
    magic: int
    producer_id: int = -1
    is_transactional: bool = False
    control: int | None = None  # a transaction marker: CONTROL_COMMIT or CONTROL_ABORT
    is_control: bool = False  # a control batch, marker or not (an empty one: the cleaner removed it)
    producer_epoch: int = -1
    base_sequence: int = -1

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def producer(self) -> ProducerBatch:
        return ProducerBatch(self.producer_id, self.producer_epoch, self.base_sequence, self.base_offset,
                             self.last_offset, self.is_control)

    @staticmethod
    def of(batch: RecordBatch, position: int) -> BatchInfo:
        return BatchInfo(
            base_offset=batch.base_offset,
            last_offset=batch.last_offset,
            partition_leader_epoch=batch.partition_leader_epoch,
            max_timestamp=batch.max_timestamp,
            position=position,
            size=batch.size_in_bytes,
            magic=batch.magic,
            producer_id=batch.producer_id,
            is_transactional=batch.is_transactional,
            control=control_type(batch) if batch.is_control else None,
            is_control=batch.is_control,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
        )


def control_type(batch: RecordBatch) -> int | None:
    """The ControlRecordType of a control batch (ABORT 0, COMMIT 1), None if it has no valid key."""
    records = batch.records()
    key = records[0].key if records else None
    if key is None or len(key) < 4:
        return None
    return struct.unpack_from(">h", key, 2)[0]


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction (Kafka's `AbortedTxn` in the transaction index): a producer's first offset
    in it and the offset of its ABORT marker."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    batches: int


class LogSegment:
    """The bytes of one segment and the index of its batches (Kafka's offset index, kept in memory)."""

    __slots__ = ("base_offset", "batches", "data", "path")

    def __init__(self, base_offset: int, path: Path | None = None) -> None:
        self.base_offset = base_offset
        self.data = bytearray()
        self.batches: list[BatchInfo] = []
        self.path = path

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def next_offset(self) -> int | None:
        return self.batches[-1].next_offset if self.batches else None

    def append(self, raw: bytes | memoryview, infos: Sequence[BatchInfo]) -> None:
        shift = len(self.data)
        self.data += raw
        self.batches.extend(dataclasses.replace(i, position=i.position + shift) for i in infos)
        if self.path is not None:
            with open(self.path, "ab") as f:
                f.write(raw)

    def truncate_to_batch(self, index: int) -> None:
        """Drop batch `index` and everything after it."""
        position = self.batches[index].position if index < len(self.batches) else len(self.data)
        del self.batches[index:]
        del self.data[position:]
        if self.path is not None:
            os.truncate(self.path, position)

    def first_batch_at_or_after(self, offset: int) -> int:
        """Index of the first batch whose last offset is >= `offset` (the batch holding it, if any)."""
        return bisect.bisect_left(self.batches, offset, key=lambda b: b.last_offset)

    def delete_file(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)


class PartitionLog:
    """The log of one partition on one broker (see module docstring)."""

    def __init__(
        self,
        tp: TopicPartition,
        *,
        directory: str | os.PathLike[str] | None = None,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        log_start_offset: int = 0,
    ) -> None:
        if segment_bytes <= 0:
            raise ValueError("segment_bytes must be positive")
        self.tp = tp
        self.dir = Path(directory) if directory is not None else None
        self.segment_bytes = segment_bytes
        self.leader_epoch_cache = LeaderEpochCache()
        self._log_start_offset = log_start_offset
        self._high_watermark = log_start_offset
        self._log_end_offset = log_start_offset
        self._open_txns: dict[int, int] = {}  # producer id -> first offset of its open transaction
        # first offset -> marker offset of a transaction ended by a marker the HW has not passed yet
        self._unreplicated: dict[int, int] = {}
        self._aborted: list[AbortedTxn] = []
        self.producer_state = ProducerStateManager()
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
        self.segments: list[LogSegment] = [self._new_segment(log_start_offset)]
        if self.dir is not None:
            self._write_checkpoint()

    # --- state --------------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch

    # --- transactions (Kafka's ProducerStateManager and transaction index) ----------------------
    @property
    def first_undecided_offset(self) -> int | None:
        """The first offset of the oldest open transaction (no marker yet), None if none is open
        (`ProducerStateManager.firstUndecidedOffset`)."""
        return min(self._open_txns.values(), default=None)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction that is open or whose marker the HW has not passed
        yet, None if there is none (`ProducerStateManager.firstUnstableOffset`: a completed transaction
        stays in `unreplicatedTxns` until the high watermark passes its marker; differential script 5
        saw Kafka's LSO at an aborted transaction's first offset while its marker was unreplicated)."""
        if not self._open_txns and not self._unreplicated:
            return None  # no transaction (every fetch asks: the common case stays cheap)
        hw = self._high_watermark
        for first in [f for f, marker in self._unreplicated.items() if marker < hw]:
            del self._unreplicated[first]
        return min((*self._open_txns.values(), *self._unreplicated), default=None)

    @property
    def last_stable_offset(self) -> int:
        """What read_committed readers may see: the HW, or below it the first open transaction."""
        first = self.first_unstable_offset
        return self._high_watermark if first is None else min(first, self._high_watermark)

    @property
    def aborted_transactions(self) -> list[AbortedTxn]:
        return list(self._aborted)

    def collect_aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper) (`collectAbortedTransactions`): those whose
        marker is at or after `start` and whose first offset is before `upper`."""
        return [t for t in self._aborted if t.last_offset >= start and t.first_offset < upper]

    def _track_transactions(self, infos: Sequence[BatchInfo]) -> None:
        for info in infos:
            if not info.is_transactional or info.producer_id < 0:
                continue
            if not info.is_control:
                self._open_txns.setdefault(info.producer_id, info.base_offset)
                continue
            if info.control is None:
                continue  # no marker in it (Kafka: an empty control batch leaves the producer state alone)
            first = self._open_txns.pop(info.producer_id, None)
            if first is not None:
                self._unreplicated[first] = info.last_offset
            if info.control == CONTROL_ABORT and first is not None:
                self._aborted.append(AbortedTxn(info.producer_id, first, info.last_offset))

    def _rebuild_transactions(self, producers: bool = True) -> None:
        """After truncation, recovery or a new log start: replay the kept batches (Kafka reloads the
        producer state from a snapshot and the log after it, and truncates the transaction index). A new
        log start leaves the producers alone (`onLogStartOffsetIncremented`: they outlive their batches
        until `producer.id.expiration.ms`, not modelled)."""
        self._open_txns, self._unreplicated, self._aborted = {}, {}, []
        infos = list(self.batch_infos())
        self._track_transactions(infos)
        if producers:
            self.producer_state.rebuild(i.producer for i in infos)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to [log start, LEO] (`UnifiedLog.updateHighWatermark`)."""
        self._high_watermark = min(max(offset, self._log_start_offset), self._log_end_offset)
        return self._high_watermark

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Leader: raise the high watermark, never lower it. Returns whether it moved."""
        if offset > self._high_watermark and offset <= self._log_end_offset:
            self._high_watermark = offset
            return True
        return False

    # --- appends ------------------------------------------------------------------------------
    def append_as_leader(
        self,
        records: Sequence[tuple],
        leader_epoch: int,
        *,
        timestamp_ms: int | None = None,
        compression: str = "none",
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> AppendInfo:
        """Encode `records` ((key, value[, headers[, timestamp]]) tuples) as one v2 batch at the LEO,
        stamped with `leader_epoch`, append it and assign (epoch, base offset) in the cache. With a
        `producer_id` and `transactional`, the batch belongs to that producer's open transaction."""
        if not records:
            raise ValueError("no records to append")
        return self._append_new_batch(
            records, leader_epoch, timestamp_ms, compression=compression,
            producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=transactional,
        )

    def _append_new_batch(
        self, records: Sequence[tuple], leader_epoch: int, timestamp_ms: int | None, **header: Any
    ) -> AppendInfo:
        """Encode one v2 batch at the LEO stamped with `leader_epoch` (`header`: encode_batch's other
        fields) and append it."""
        if leader_epoch < 0:
            raise ValueError(f"invalid leader epoch {leader_epoch}")
        raw = encode_batch(
            records, base_offset=self._log_end_offset, partition_leader_epoch=leader_epoch,
            base_timestamp=timestamp_ms, **header
        )
        info = self._append(raw)
        if info is None:  # encode_batch always yields one whole batch
            raise RuntimeError("encoded batch did not decode")
        return info

    def append_txn_marker(
        self, producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int, leader_epoch: int,
        timestamp_ms: int | None = None,
    ) -> AppendInfo:
        """Write a transaction marker (a control batch of one record) at the LEO, closing the producer's
        open transaction (`UnifiedLog.appendAsLeader` with origin COORDINATOR)."""
        key = struct.pack(">hh", 0, CONTROL_COMMIT if commit else CONTROL_ABORT)
        value = struct.pack(">hi", 0, coordinator_epoch)
        return self._append_new_batch(
            [(key, value)], leader_epoch, timestamp_ms,
            producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=True, is_control=True,
        )

    def append_raw_as_leader(self, data: bytes | bytearray | memoryview, leader_epoch: int) -> AppendInfo:
        """A producer's v2 batches as they came off the wire, appended at the LEO: base offsets and the
        partition leader epoch are set in place (CRC-32C covers neither), everything else is kept, as
        Kafka's `LogValidator` does for uncompressed-or-not v2 batches without conversion. Raises
        `CorruptRecordError` for a batch that does not decode (bad length, CRC, magic). An idempotent
        producer's batch is checked against its state first (`ProducerStateManager.check`: raises
        `OutOfOrderSequenceError` or `InvalidProducerEpochError`); a retry of one of its last five
        batches is written no second time and answered with the offsets it was written at."""
        if leader_epoch < 0:
            raise ValueError(f"invalid leader epoch {leader_epoch}")
        stamped, _last, _count, _max_timestamp = stamp_batches(bytes(data), self._log_end_offset, leader_epoch)
        info = self._append(stamped, from_client=True)
        if info is None:
            raise CorruptRecordError("no record batch in produce data")
        return info

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo | None:
        """Append the leader's batches verbatim (whole batches only; a partial last batch is left out,
        as a fetch response may cut one). Returns None when there was no complete batch."""
        return self._append(bytes(records), follower=True)

    def _append(self, raw: bytes, follower: bool = False, from_client: bool = False) -> AppendInfo | None:
        # Only a client's batches have their records decoded (Kafka's `LogValidator` reads each record
        # of one); a follower append checks headers and CRCs alone, as Kafka's `analyzeAndValidateRecords`
        # for a follower, and a batch this log encoded itself needs no check of its records. The header
        # alone gives every `BatchInfo` field (a control batch is decoded whole for its marker).
        batches = iter_batches(raw, allow_partial_tail=follower, headers_only=not from_client)
        infos = [BatchInfo.of(b, b.file_position) for b in batches]
        if not infos:
            return None
        if from_client:
            duplicate = self.producer_state.check(i.producer for i in infos)
            if duplicate is not None:  # written before: nothing new (`batches` 0)
                return AppendInfo(duplicate.first_offset, duplicate.last_offset, -1, 0)
        if batches.partial_tail is not None:
            raw = raw[: batches.partial_tail]
        if infos[0].base_offset < self._log_end_offset:
            raise UnexpectedAppendOffsetError(
                f"{self.tp}: first offset {infos[0].base_offset} is below the log end offset {self._log_end_offset}",
                infos[0].base_offset,
                infos[0].last_offset,
            )
        for prev, cur in itertools.pairwise(infos):
            if cur.base_offset <= prev.last_offset:
                raise UnexpectedAppendOffsetError(
                    f"{self.tp}: batch offsets not increasing at {cur.base_offset}", cur.base_offset, cur.last_offset
                )
        self._roll_if_needed(len(raw), infos[0].base_offset)
        self.segments[-1].append(raw, infos)
        before = self._cache_snapshot()
        for info in infos:
            if info.magic >= 2:
                if info.partition_leader_epoch >= 0:
                    self.leader_epoch_cache.assign(info.partition_leader_epoch, info.base_offset)
            else:
                self.leader_epoch_cache.clear()  # a pre-v2 batch: epochs are no longer known
        self._log_end_offset = infos[-1].next_offset
        self._track_transactions(infos)
        self.producer_state.track(i.producer for i in infos)
        self._checkpoint_if_changed(before)
        return AppendInfo(
            first_offset=infos[0].base_offset,
            last_offset=infos[-1].last_offset,
            max_timestamp=max(i.max_timestamp for i in infos),
            batches=len(infos),
        )

    def assign_epoch_start(self, epoch: int) -> None:
        """A new leader with a higher epoch assigns (epoch, LEO) before writing anything."""
        before = self._cache_snapshot()
        self.leader_epoch_cache.assign(epoch, self._log_end_offset)
        self._checkpoint_if_changed(before)

    def _roll_if_needed(self, incoming: int, base_offset: int) -> None:
        active = self.segments[-1]
        if active.batches and active.size + incoming > self.segment_bytes:
            self.segments.append(self._new_segment(base_offset))
        elif not active.batches and active.base_offset != base_offset:
            # An empty active segment is renamed to the first offset it will hold (offsets can jump).
            active.delete_file()
            self.segments[-1] = self._new_segment(base_offset)

    def _new_segment(self, base_offset: int) -> LogSegment:
        path = None
        if self.dir is not None:
            path = self.dir / segment_file_name(base_offset)
            path.touch()
        return LogSegment(base_offset, path)

    # --- truncation ---------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> bool:
        """Kafka's `truncateTo`: drop everything at and above `offset` (whole batches), then the cache's
        entries from there. At or beyond the LEO only the cache is truncated (an epoch never written
        to is dropped). Returns whether any data was removed."""
        if offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {offset}")
        before = self._cache_snapshot()
        if offset >= self._log_end_offset:
            self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
            self._checkpoint_if_changed(before)
            return False
        if offset < self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        # As Kafka's `LocalLog.truncateTo`: segments based above `offset` go; one based at it stays, emptied,
        # as the active segment.
        while len(self.segments) > 1 and self.segments[-1].base_offset > offset:
            self.segments.pop().delete_file()
        active = self.segments[-1]
        active.truncate_to_batch(active.first_batch_at_or_after(offset))
        # Batch granularity: the new LEO is the end of the last kept batch. Kafka sets it to `offset`;
        # the two agree whenever `offset` is a batch boundary, which every epoch boundary is.
        self._log_end_offset = self._last_next_offset(default=offset)
        self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
        # As Kafka's `logStartOffset = min(targetOffset, logStartOffset)`: a log start inside the
        # dropped batch (DeleteRecords) must not stay above the new end.
        self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
        self._high_watermark = min(self._high_watermark, self._log_end_offset)
        self._rebuild_transactions()
        self._checkpoint_if_changed(before)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log empty at `offset`; clears the epoch cache."""
        for segment in self.segments:
            segment.delete_file()
        self.segments = [self._new_segment(offset)]
        self._log_start_offset = self._log_end_offset = self._high_watermark = offset
        self._open_txns, self._unreplicated, self._aborted = {}, {}, []
        self.producer_state.rebuild(())
        self.leader_epoch_cache.clear()
        self._write_checkpoint()

    def increment_log_start_offset(self, offset: int) -> bool:
        """Retention / DeleteRecords: move the log start up (never past the high watermark), drop whole
        segments below it and the cache's entries before it."""
        offset = min(offset, self._high_watermark)
        if offset <= self._log_start_offset:
            return False
        before = self._cache_snapshot()
        self._log_start_offset = offset
        while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
            self.segments.pop(0).delete_file()
        self.leader_epoch_cache.truncate_from_start(offset)
        self._rebuild_transactions(producers=False)
        self._checkpoint_if_changed(before)
        return True

    # --- reads --------------------------------------------------------------------------------
    def read(self, fetch_offset: int, *, max_bytes: int = 1 << 20, upper_bound: int | None = None) -> bytes:
        """Whole batches from the one holding `fetch_offset`, up to `upper_bound` (exclusive; default
        LEO) and about `max_bytes` (at least one batch). Empty at or beyond the bound. The caller
        checks the range (OFFSET_OUT_OF_RANGE is a protocol decision)."""
        bound = self._log_end_offset if upper_bound is None else min(upper_bound, self._log_end_offset)
        if fetch_offset >= bound:
            return b""
        # A segment's batches are contiguous: each segment's run of batches is one slice, copied once
        # (through a view, released at once: a bytearray with a live view cannot grow).
        runs: list[tuple[LogSegment, int, int]] = []
        size = 0
        for segment, info in self._batches_from(fetch_offset):
            if info.base_offset >= bound or (size and size + info.size > max_bytes):
                break
            if not runs or runs[-1][0] is not segment:
                runs.append((segment, info.position, info.position))
            runs[-1] = (segment, runs[-1][1], info.position + info.size)
            size += info.size
        pieces = []
        for segment, start, end in runs:
            with memoryview(segment.data) as view:
                pieces.append(view[start:end].tobytes())
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def batches(self, start: int | None = None, end: int | None = None) -> Iterator[RecordBatch]:
        """Decoded batches from the one holding `start` (default log start) while base offset < `end`."""
        for segment, info in self._batches_from(self._log_start_offset if start is None else start):
            if end is not None and info.base_offset >= end:
                return
            yield from iter_batches(bytes(segment.data[info.position : info.position + info.size]))

    def batch_infos(self) -> Iterator[BatchInfo]:
        for segment in self.segments:
            yield from segment.batches

    def epoch_for_offset(self, offset: int) -> int | None:
        return self.leader_epoch_cache.epoch_for_offset(offset)

    def offset_for_timestamp(self, target: int, upper_bound: int | None = None) -> tuple[int, int, int] | None:
        """(offset, timestamp, batch leader epoch or -1) of the first record with timestamp >= `target`
        below `upper_bound` (`UnifiedLog.fetchOffsetByTimestamp` for a real timestamp); None if none."""
        bound = self._log_end_offset if upper_bound is None else upper_bound
        for segment, info in self._batches_from(self._log_start_offset):
            if info.base_offset >= bound:
                return None
            if info.max_timestamp < target:
                continue
            for batch in iter_batches(bytes(segment.data[info.position : info.position + info.size])):
                for record in batch.records():
                    if record.offset >= self._log_start_offset and record.timestamp >= target:
                        if record.offset >= bound:
                            return None
                        return (record.offset, record.timestamp, batch.partition_leader_epoch)
        return None

    def offset_of_max_timestamp(self, upper_bound: int | None = None) -> tuple[int, int, int] | None:
        """(offset, timestamp, batch leader epoch) of the record with the largest timestamp (MAX_TIMESTAMP)."""
        bound = self._log_end_offset if upper_bound is None else upper_bound
        best: tuple[int, int, int] | None = None
        for batch in self.batches(end=bound):
            for record in batch.records():
                if self._log_start_offset <= record.offset < bound and (best is None or record.timestamp > best[1]):
                    best = (record.offset, record.timestamp, batch.partition_leader_epoch)
        return best

    def _batches_from(self, offset: int) -> Iterator[tuple[LogSegment, BatchInfo]]:
        start = max(0, bisect.bisect_right(self.segments, offset, key=lambda s: s.base_offset) - 1)
        for i, segment in enumerate(self.segments[start:]):
            first = segment.first_batch_at_or_after(offset) if i == 0 else 0
            for info in segment.batches[first:]:
                yield segment, info

    def _last_next_offset(self, default: int) -> int:
        for segment in reversed(self.segments):
            if segment.next_offset is not None:
                return segment.next_offset
        return default

    # --- persistence --------------------------------------------------------------------------
    @property
    def checkpoint_path(self) -> Path | None:
        return None if self.dir is None else self.dir / CHECKPOINT_FILE

    def _cache_snapshot(self) -> list[tuple[int, int]] | None:
        """The cache entries before a change, when there is a checkpoint file to keep in sync."""
        return None if self.dir is None else self.leader_epoch_cache.entries()

    def _checkpoint_if_changed(self, before: list[tuple[int, int]] | None) -> None:
        if self.dir is not None and self.leader_epoch_cache.entries() != before:
            self._write_checkpoint()

    def _write_checkpoint(self) -> None:
        if self.dir is not None:
            self.leader_epoch_cache.write_checkpoint(self.dir / CHECKPOINT_FILE)

    def write_to(self, directory: str | os.PathLike[str]) -> Path:
        """Write this log as a Kafka partition directory `directory` (segments + checkpoint)."""
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        for stale in target.glob("*" + _LOG_SUFFIX):
            stale.unlink()
        for segment in self.segments:
            (target / segment_file_name(segment.base_offset)).write_bytes(bytes(segment.data))
        self.leader_epoch_cache.write_checkpoint(target / CHECKPOINT_FILE)
        return target

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        log_start_offset: int | None = None,
        high_watermark: int | None = None,
        write_through: bool = True,
    ) -> PartitionLog:
        """Recover a log from a partition directory, as a restarting broker does.

        Segments are read in offset order; a partial or corrupt tail is cut off (and every later
        segment dropped). The cache comes from `leader-epoch-checkpoint` (or, when it is missing, from
        the batches' epochs) and is truncated to the recovered [log start, LEO]. `log_start_offset`
        and `high_watermark` come from the broker's root checkpoints when known (see logdir).
        """
        path = Path(directory)
        tp = parse_partition_dir_name(path.name)
        log = cls.__new__(cls)
        log.tp = tp
        log.dir = path if write_through else None
        log.segment_bytes = segment_bytes
        log.segments = []
        files = sorted((_segment_base_offset(file), file) for file in path.glob("*" + _LOG_SUFFIX))
        cut = False
        for base, file in files:
            if cut:
                if write_through:
                    file.unlink()
                continue
            data = file.read_bytes()
            infos, valid = _recover(data)
            if valid < len(data):
                cut = True
                if write_through:
                    os.truncate(file, valid)
            segment = LogSegment(base, file if write_through else None)
            segment.data = bytearray(data[:valid])
            segment.batches = infos
            log.segments.append(segment)
        first_base = log.segments[0].base_offset if log.segments else 0
        start = first_base if log_start_offset is None else max(log_start_offset, first_base)
        if not log.segments:
            log.segments = [log._new_segment(start)]
        log._log_start_offset = start
        log._log_end_offset = log._last_next_offset(default=log.segments[-1].base_offset)
        checkpoint = path / CHECKPOINT_FILE
        if checkpoint.exists():
            log.leader_epoch_cache = LeaderEpochCache.read_checkpoint(checkpoint)
        else:
            log.leader_epoch_cache = LeaderEpochCache()
            for info in log.batch_infos():
                if info.magic >= 2 and info.partition_leader_epoch >= 0:
                    log.leader_epoch_cache.assign(info.partition_leader_epoch, info.base_offset)
        log.leader_epoch_cache.truncate_from_end(log._log_end_offset)
        log.leader_epoch_cache.truncate_from_start(log._log_start_offset)
        log._high_watermark = log._log_start_offset
        log.update_high_watermark(log._log_start_offset if high_watermark is None else high_watermark)
        log.producer_state = ProducerStateManager()
        log._rebuild_transactions()
        if write_through:
            log._write_checkpoint()
        return log

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.tp}, start={self._log_start_offset}, hw={self._high_watermark}, "
            f"leo={self._log_end_offset}, epochs={self.leader_epoch_cache.entries()})"
        )


def _recover(data: bytes) -> tuple[list[BatchInfo], int]:
    """The batches of a segment file and the byte length that holds only whole, valid batches."""
    infos: list[BatchInfo] = []
    batches = iter_batches(data, allow_partial_tail=True)
    try:
        for batch in batches:
            infos.append(BatchInfo.of(batch, batch.file_position))
    except CorruptRecordError:
        pass  # recovery truncates at the first invalid batch
    valid = infos[-1].position + infos[-1].size if infos else 0
    return infos, valid

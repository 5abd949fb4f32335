"""Fetched data on its way to the application, mirroring Kafka's `CompletedFetch` and `FetchCollector`.

`CompletedFetch.decode` reads one partition's Fetch answer: the position after the last batch read
(control batches advance it too) from the batch headers, and the records, each carrying the leader
epoch of its batch, decoded only when asked for (as objects, or as an Arrow batch decoded in Rust).
The header pass checks every batch's CRC but decodes no data record (`iter_batches(headers_only=True)`),
so the network thread that runs it sends the next fetch sooner; the records are decoded, without a
second CRC pass, on the thread that asks for them (Java's `CompletedFetch` too reads records only in
`fetchRecords`).
`FetchCollector` buffers completed fetches until `collect()` hands them out, advancing positions; a
fetch whose position moved meanwhile (a seek, a reset, a new leader) is dropped, as Kafka drops one
whose fetch offset no longer matches. An out-of-range answer under policy none stays in the buffer and
is raised by every `collect()` that has no records to return, until the position moves (Kafka keeps the
failed fetch at the head of its buffer).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from epochguard._core import RecordBatch, iter_batches
from epochguard.client.consumer.subscription import FetchState, SubscriptionState
from epochguard.errors import OffsetOutOfRangeError
from epochguard.protocol.messages import AbortedTransaction
from epochguard.storage.log import CONTROL_ABORT, control_type
from epochguard.types import (
    ConsumerRecord,
    ConsumerRecords,
    FetchPosition,
    IsolationLevel,
    OffsetAndMetadata,
    TopicPartition,
    epoch_or_none,
)

__all__ = ["CompletedFetch", "FetchCollector"]


class CompletedFetch:
    """One partition's fetched data (`CompletedFetch`): where it leaves the position, and its records.

    Records are decoded only when asked for (`records`, or `arrow()` for an Arrow batch decoded in
    Rust): the batch headers alone say where the position goes and with which epochs.
    """

    __slots__ = (
        "_batches",
        "_records",
        "_skipped",
        "epochs",
        "has_records",
        "last_epoch",
        "next_offset",
        "position",
        "raw",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        position: FetchPosition,
        records: list[ConsumerRecord] | None,
        next_offset: int,
        last_epoch: int | None,
        epochs: list[tuple[int, int]],
        *,
        raw: bytes = b"",
        batches: list[RecordBatch] | None = None,
        skipped: frozenset[int] = frozenset(),
    ) -> None:
        self.tp = tp
        self.position = position  # the position the fetch was sent for (offset and leader)
        self.next_offset = next_offset
        self.last_epoch = last_epoch
        self.epochs = epochs  # (epoch, first offset read) per batch read
        self.raw = raw
        self._batches = batches or []  # the batches holding records to hand out (no control, no aborted)
        self._skipped = skipped  # base offsets of batches in `raw` not handed out (control, aborted)
        self._records = records
        self.has_records = bool(records) if records is not None else any(
            b.records_count > 0 and b.last_offset >= position.offset for b in self._batches)

    @property
    def records(self) -> list[ConsumerRecord]:
        """The records at or after the fetch offset, each with its batch's leader epoch (decoded once;
        the header pass checked the CRCs)."""
        if self._records is None:
            tp, start = self.tp, self.position.offset
            wanted = {b.base_offset for b in self._batches}
            self._records = [
                ConsumerRecord(tp.topic, tp.partition, r.offset, r.timestamp, batch.timestamp_type,
                               r.key, r.value, tuple(r.headers), epoch_or_none(batch.partition_leader_epoch))
                for batch in _decoded(self.raw, self._batches)
                if batch.base_offset in wanted
                for r in batch.records()
                if r.offset >= start
            ]
        return self._records

    def arrow(self) -> Any:
        """The records as one `pyarrow.RecordBatch` (offset, timestamp, timestamp_type, key, value, headers,
        leader_epoch), decoded in Rust with the GIL released; the same rows as `records`. Pure (reads
        nothing the consumer changes): a blocking client decodes on the caller's thread.

        No `pa.table`, `pa.array` or `pyarrow.compute` here: each imports pandas on first use (to ask
        whether an argument is a DataFrame), seconds on a loaded machine, on the first poll_arrow."""
        import numpy as np
        import pyarrow as pa

        from epochguard._core import decode_arrow

        columns = (*_ARROW_COLUMNS, "batch_offset") if self._skipped else _ARROW_COLUMNS
        table = pa.RecordBatchReader.from_stream(  # the CRCs were checked by the header pass
            decode_arrow(self.raw, columns=columns, verify_crc=False, allow_partial_tail=True)).read_all()
        table = table.combine_chunks()
        offsets = _int64s(table, "offset")
        keep = (offsets >= self.position.offset) & (offsets < self.next_offset)
        if self._skipped:
            keep &= ~np.isin(_int64s(table, "batch_offset"), np.fromiter(self._skipped, np.int64))
            table = table.select(list(_ARROW_COLUMNS))
        if not keep.all():
            # The first batch began before the fetch offset (the first fetch after a seek), or batches
            # are skipped: a slice where the rows kept are one run (offsets ascend), else a filter.
            rows = np.flatnonzero(keep)
            if rows.size and rows[-1] - rows[0] + 1 == rows.size:
                table = table.slice(int(rows[0]), int(rows.size))
            else:
                mask = pa.py_buffer(np.packbits(keep, bitorder="little"))
                table = table.filter(pa.Array.from_buffers(pa.bool_(), len(keep), [None, mask]))
        if table.num_rows == 0:
            return pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in table.schema], schema=table.schema)
        return table.combine_chunks().to_batches()[0]

    def __repr__(self) -> str:
        return (f"CompletedFetch({self.tp}, {self.position}, next_offset={self.next_offset}, "
                f"last_epoch={self.last_epoch})")

    @classmethod
    def decode(
        cls,
        tp: TopicPartition,
        position: FetchPosition,
        raw: bytes,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        aborted_transactions: Iterable[AbortedTransaction] | None = None,
    ) -> CompletedFetch:
        """Where the data leaves the position, from the batch headers; its records (at or after the fetch
        offset, each with its batch's leader epoch) decode on first use. Control batches are never
        records. Under read_committed the batches of aborted transactions are skipped too: a producer is
        aborted from its transaction's first offset until its ABORT marker (Kafka's
        `consumeAbortedTransactionsUpTo` / `isBatchAborted`). Raises `CorruptRecordError` on bad bytes, a
        batch whose CRC does not match included (an incomplete last batch is not an error: fetch it again)."""
        batches: list[RecordBatch] = []
        skipped: set[int] = set()
        epochs: list[tuple[int, int]] = []
        next_offset = position.offset
        last_epoch = position.offset_epoch
        read_committed = isolation_level == IsolationLevel.READ_COMMITTED
        pending = sorted(aborted_transactions or (), key=lambda t: t.first_offset)
        aborted_producers: set[int] = set()
        for batch in iter_batches(raw, allow_partial_tail=True, headers_only=True):
            if batch.last_offset < next_offset:
                skipped.add(batch.base_offset)
                continue
            epoch = epoch_or_none(batch.partition_leader_epoch)
            if read_committed and batch.producer_id >= 0:
                while pending and pending[0].first_offset <= batch.last_offset:
                    aborted_producers.add(pending.pop(0).producer_id)
                if batch.is_control:
                    if control_type(batch) == CONTROL_ABORT:
                        aborted_producers.discard(batch.producer_id)
            aborted = batch.is_transactional and batch.producer_id in aborted_producers  # empty unless read_committed
            if not batch.is_control and not aborted:
                batches.append(batch)
            else:
                skipped.add(batch.base_offset)
            if epoch is not None:
                epochs.append((epoch, max(batch.base_offset, next_offset)))
            next_offset = batch.next_offset
            last_epoch = epoch
        return cls(tp, position, None, next_offset, last_epoch, epochs, raw=raw, batches=batches,
                   skipped=frozenset(skipped))


def _decoded(raw: bytes, batches: list[RecordBatch]) -> Iterable[RecordBatch]:
    """The batches of `raw` with their records decoded (CRCs not checked again): `batches` if the header
    pass decoded them all already (control batches and legacy messages), else a decoding pass."""
    if all(b.decoded for b in batches):
        return batches
    return iter_batches(raw, verify_crc=False, allow_partial_tail=True)


_ARROW_COLUMNS = ("offset", "timestamp", "timestamp_type", "key", "value", "headers", "leader_epoch")


def _int64s(table: Any, name: str) -> Any:
    """A non-null int64 column of a one-chunk table as a numpy view (no copy; `to_numpy` imports pandas)."""
    import numpy as np

    if table.num_rows == 0:
        return np.empty(0, np.int64)
    column = table.column(name).chunk(0)
    return np.frombuffer(column.buffers()[1], dtype=np.int64, count=len(column), offset=column.offset * 8)


class FetchCollector:
    """The buffer of completed fetches and what `poll()` returns from it (`FetchCollector`)."""

    def __init__(self, subscriptions: SubscriptionState) -> None:
        self._subscriptions = subscriptions
        self._completed: list[CompletedFetch] = []
        self._out_of_range: dict[TopicPartition, int] = {}  # tp -> fetch offset answered OFFSET_OUT_OF_RANGE

    def add(self, completed: CompletedFetch) -> None:
        self._completed.append(completed)

    def add_out_of_range(self, tp: TopicPartition, fetch_offset: int) -> None:
        self._out_of_range[tp] = fetch_offset

    def drop(self, tp: TopicPartition) -> None:
        """Forget what is buffered for `tp` (its position was set anew)."""
        self._completed = [c for c in self._completed if c.tp != tp]
        self._out_of_range.pop(tp, None)

    def buffered(self) -> set[TopicPartition]:
        """Partitions with something buffered: no new fetch is sent for them (Kafka's `fetchablePartitions`)."""
        return {c.tp for c in self._completed} | set(self._live_out_of_range())

    def buffered_ends(self) -> dict[TopicPartition, tuple[int, FetchPosition | None]]:
        """Per partition with something buffered: how many completed fetches, and the position after the
        last of them if they continue the partition's position one after another (None otherwise, or
        for an out-of-range answer waiting to be raised): where a fetch ahead of the buffer starts."""
        ends: dict[TopicPartition, tuple[int, FetchPosition | None]] = {}
        for c in self._completed:
            count, end = ends.get(c.tp, (0, None))
            if count == 0:
                state = self._subscriptions.get(c.tp)
                end = None if state is None else state.position
            follows = end is not None and c.position == end
            ends[c.tp] = (count + 1, FetchPosition(c.next_offset, c.last_epoch, c.position.current_leader)
                          if follows else None)
        for tp in self._live_out_of_range():
            ends[tp] = (ends.get(tp, (0, None))[0] + 1, None)
        return ends

    def collect(self) -> ConsumerRecords:
        """Hand out every buffered fetch that continues its partition's position, advancing it."""
        records: dict[TopicPartition, list[ConsumerRecord]] = {}
        next_offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for completed in self.collect_fetches():
            if completed.records:
                records.setdefault(completed.tp, []).extend(completed.records)
            next_offsets[completed.tp] = OffsetAndMetadata(completed.next_offset, leader_epoch=completed.last_epoch)
        return ConsumerRecords(records, {tp: next_offsets[tp] for tp in records})

    def collect_fetches(self) -> list[CompletedFetch]:
        """`collect()` without decoding: the fetches handed out (positions advanced), records undecoded."""
        out_of_range = self._live_out_of_range()
        handed: list[CompletedFetch] = []
        for completed in self._completed:
            state = self._subscriptions.get(completed.tp)
            # Only hand out what still continues the current position: same offset and same leader. Data
            # read from a superseded leader may lie past where the new one diverges (validation only
            # checked the position), so it is dropped and fetched again from the current leader.
            if state is None or not state.is_fetchable or state.position != completed.position:
                continue
            state.position = FetchPosition(completed.next_offset, completed.last_epoch, state.position.current_leader)
            state.record_consumed(completed.epochs)
            handed.append(completed)
        self._completed = []
        if not any(c.has_records for c in handed) and out_of_range:
            where = ", ".join(f"{tp} at {offset}" for tp, offset in sorted(out_of_range.items()))
            raise OffsetOutOfRangeError(f"fetch positions out of range: {where}", out_of_range)
        return handed

    def _live_out_of_range(self) -> dict[TopicPartition, int]:
        """The out-of-range answers that still apply (same offset, still fetching); the rest are dropped."""
        for tp, offset in list(self._out_of_range.items()):
            s = self._subscriptions.get(tp)
            if s is None or s.state != FetchState.FETCHING or s.position is None or s.position.offset != offset:
                del self._out_of_range[tp]
        return dict(self._out_of_range)

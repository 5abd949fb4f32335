"""Fetched data on its way to the application, mirroring Kafka's `CompletedFetch` and `FetchCollector`.

`CompletedFetch.decode` turns one partition's Fetch answer into records, each carrying the leader
epoch of its batch, and the position after the last batch read (control batches advance it too).
`FetchCollector` buffers completed fetches until `collect()` hands them out, advancing positions; a
fetch whose position moved meanwhile (a seek, a reset, a new leader) is dropped, as Kafka drops one
whose fetch offset no longer matches. An out-of-range answer under policy none stays in the buffer and
is raised by every `collect()` that has no records to return, until the position moves (Kafka keeps the
failed fetch at the head of its buffer).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from epochguard._core import iter_batches
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


@dataclass(slots=True)
class CompletedFetch:
    """One partition's fetched data, decoded (`CompletedFetch`)."""

    tp: TopicPartition
    position: FetchPosition  # the position the fetch was sent for (offset and leader)
    records: list[ConsumerRecord]
    next_offset: int
    last_epoch: int | None
    epochs: list[tuple[int, int]]  # (epoch, first offset read) per batch read

    @classmethod
    def decode(
        cls,
        tp: TopicPartition,
        position: FetchPosition,
        raw: bytes,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        aborted_transactions: Iterable[AbortedTransaction] | None = None,
    ) -> CompletedFetch:
        """Records at or after the fetch offset, each with its batch's leader epoch; control batches
        are never records. Under read_committed the batches of aborted transactions are skipped too:
        a producer is aborted from its transaction's first offset until its ABORT marker (Kafka's
        `consumeAbortedTransactionsUpTo` / `isBatchAborted`). Raises `CorruptRecordError` on bad bytes
        (an incomplete last batch is not an error: fetch it again)."""
        records: list[ConsumerRecord] = []
        epochs: list[tuple[int, int]] = []
        next_offset = position.offset
        last_epoch = position.offset_epoch
        read_committed = isolation_level == IsolationLevel.READ_COMMITTED
        pending = sorted(aborted_transactions or (), key=lambda t: t.first_offset)
        aborted_producers: set[int] = set()
        for batch in iter_batches(raw, allow_partial_tail=True):
            if batch.last_offset < next_offset:
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
                for r in batch.records():
                    if r.offset >= next_offset:
                        records.append(
                            ConsumerRecord(
                                tp.topic, tp.partition, r.offset, r.timestamp, batch.timestamp_type,
                                r.key, r.value, tuple(r.headers), epoch,
                            )
                        )
            if epoch is not None:
                epochs.append((epoch, max(batch.base_offset, next_offset)))
            next_offset = batch.next_offset
            last_epoch = epoch
        return cls(tp, position, records, next_offset, last_epoch, epochs)


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

    def collect(self) -> ConsumerRecords:
        """Hand out every buffered fetch that continues its partition's position, advancing it."""
        out_of_range = self._live_out_of_range()
        records: dict[TopicPartition, list[ConsumerRecord]] = {}
        next_offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for completed in self._completed:
            state = self._subscriptions.get(completed.tp)
            # Only hand out what still continues the current position: same offset and same leader. Data
            # read from a superseded leader may lie past where the new one diverges (validation only
            # checked the position), so it is dropped and fetched again from the current leader.
            if state is None or not state.is_fetchable or state.position != completed.position:
                continue
            state.position = FetchPosition(completed.next_offset, completed.last_epoch, state.position.current_leader)
            state.record_consumed(completed.epochs)
            if completed.records:
                records.setdefault(completed.tp, []).extend(completed.records)
            next_offsets[completed.tp] = OffsetAndMetadata(completed.next_offset, leader_epoch=completed.last_epoch)
        self._completed = []
        if not records and out_of_range:
            where = ", ".join(f"{tp} at {offset}" for tp, offset in sorted(out_of_range.items()))
            raise OffsetOutOfRangeError(f"fetch positions out of range: {where}", out_of_range)
        return ConsumerRecords(records, {tp: next_offsets[tp] for tp in records})

    def _live_out_of_range(self) -> dict[TopicPartition, int]:
        """The out-of-range answers that still apply (same offset, still fetching); the rest are dropped."""
        for tp, offset in list(self._out_of_range.items()):
            s = self._subscriptions.get(tp)
            if s is None or s.state != FetchState.FETCHING or s.position is None or s.position.offset != offset:
                del self._out_of_range[tp]
        return dict(self._out_of_range)

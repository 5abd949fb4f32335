"""Idempotent producers on one partition replica: their epochs and sequence numbers.

Mirrors Kafka's `ProducerStateManager`, `ProducerStateEntry` and `ProducerAppendInfo`
(storage/src/main/java/org/apache/kafka/storage/internals/log) for data batches: per producer id, its
epoch and the metadata of its last five batches (`NUM_BATCHES_TO_RETAIN`). A client's batch is checked
before it is written (`ProducerAppendInfo.checkProducerEpoch` and `checkSequence`): an older epoch is
INVALID_PRODUCER_EPOCH; in the producer's epoch the first sequence must follow the last one; a new epoch
starts at sequence 0; a producer the replica knows no epoch for may start anywhere (its batches were
removed by retention, DeleteRecords or truncation). A batch equal to one of the last five (same epoch,
same sequence range) is a retry of a batch already written: it is answered with the offsets it got then
and not written again (`ProducerStateEntry.findDuplicateBatch`). Replicated batches update the state
unchecked. After a truncation or a new log start the state is rebuilt from the batches kept (Kafka loads
a snapshot and replays the log after it), so a replica elected uncleanly knows a producer only as far as
its own log went: the producer's next sequence is out of order there (KIP-360; librdkafka#4953).

Transaction state (open transactions, aborted ones, the LSO) stays in `storage.log`; batches without a
producer id or without a sequence (the simulator's transactional producers) are not checked here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from epochguard.errors import InvalidProducerEpochError, OutOfOrderSequenceError

__all__ = ["NUM_BATCHES_TO_RETAIN", "ProducerBatch", "BatchMetadata", "ProducerStateEntry", "ProducerStateManager"]

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
_INT32_MAX = 2**31 - 1


def _increment(sequence: int, by: int) -> int:
    """`DefaultRecordBatch.incrementSequence`: sequences wrap from Integer.MAX_VALUE to 0."""
    return sequence + by if sequence <= _INT32_MAX - by else by - (_INT32_MAX - sequence) - 1


def _in_sequence(last: int, first: int) -> bool:
    return first == last + 1 or (first == 0 and last == _INT32_MAX)


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """What the state needs of one batch: its producer fields and offsets."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    base_offset: int
    last_offset: int
    is_control: bool = False

    @property
    def last_sequence(self) -> int:
        return _increment(self.base_sequence, self.last_offset - self.base_offset)

    @property
    def idempotent(self) -> bool:
        return self.producer_id >= 0 and self.base_sequence != NO_SEQUENCE and not self.is_control


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Kafka's `BatchMetadata`: one written batch's sequence and offset ranges."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerStateEntry:
    """One producer's epoch and its last batches (`ProducerStateEntry`)."""

    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, batch: ProducerBatch) -> BatchMetadata | None:
        if batch.producer_epoch != self.epoch:
            return None
        first, last = batch.base_sequence, batch.last_sequence
        return next((m for m in self.batches if m.first_seq == first and m.last_seq == last), None)

    def update_epoch(self, epoch: int) -> None:
        """A new epoch forgets the old epoch's batches (`maybeUpdateProducerEpoch`)."""
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch

    def add(self, batch: ProducerBatch) -> None:
        self.update_epoch(batch.producer_epoch)
        self.batches.append(BatchMetadata(batch.base_sequence, batch.last_sequence, batch.base_offset,
                                          batch.last_offset))


class ProducerStateManager:
    """Every producer's entry on one replica of one partition."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def check(self, batches: Iterable[ProducerBatch]) -> BatchMetadata | None:
        """A client append, before it is written: the duplicate it repeats (answer with its offsets and
        write nothing), or None when it may be written. Raises `InvalidProducerEpochError` or
        `OutOfOrderSequenceError`; changes nothing either way (`track` does, once written)."""
        staged: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last sequence) after earlier batches
        for batch in batches:
            if not batch.idempotent:
                continue
            pid, epoch, first = batch.producer_id, batch.producer_epoch, batch.base_sequence
            current = self.producers.get(pid) or ProducerStateEntry(pid)
            duplicate = current.find_duplicate(batch)
            if duplicate is not None:
                return duplicate
            updated_epoch, updated_last = staged.get(pid, (current.epoch, NO_SEQUENCE))
            if epoch < updated_epoch:
                raise InvalidProducerEpochError(
                    f"epoch of producer {pid} at offset {batch.base_offset} is {epoch}, older than its last "
                    f"epoch {updated_epoch}")
            if epoch != updated_epoch:
                if first != 0 and updated_epoch != NO_PRODUCER_EPOCH:
                    raise OutOfOrderSequenceError(
                        f"producer {pid}: new epoch {epoch} starts at sequence {first}, not 0 "
                        f"(current epoch {updated_epoch})", producer_id=pid, sequence=first, expected=0)
            else:
                last = updated_last if pid in staged else current.last_seq
                # No epoch known (its batches were removed): any sequence is accepted.
                if current.epoch != NO_PRODUCER_EPOCH and not _in_sequence(last, first):
                    raise OutOfOrderSequenceError(
                        f"producer {pid} at offset {batch.base_offset}: sequence {first}, expected "
                        f"{_increment(last, 1)}", producer_id=pid, sequence=first, expected=_increment(last, 1))
            staged[pid] = (epoch, batch.last_sequence)
        return None

    def track(self, batches: Iterable[ProducerBatch]) -> None:
        """Batches written (by this replica as leader, or replicated): update their producers."""
        for batch in batches:
            if batch.producer_id < 0:
                continue
            if batch.is_control:  # a transaction marker carries the producer's epoch
                entry = self.producers.get(batch.producer_id)
                if entry is not None:
                    entry.update_epoch(batch.producer_epoch)
                continue
            if batch.base_sequence == NO_SEQUENCE:
                continue
            self.producers.setdefault(batch.producer_id, ProducerStateEntry(batch.producer_id)).add(batch)

    def rebuild(self, batches: Iterable[ProducerBatch]) -> None:
        """From the batches the replica keeps (after truncation, recovery or a new log start)."""
        self.producers = {}
        self.track(batches)

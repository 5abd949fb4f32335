"""Transactions of transactional producers, sans-IO: Kafka's `TransactionCoordinator` and
`TransactionStateManager` at the level `epochguard serve` needs (transaction version 1).

One producer id per transactional id, its epoch bumped by every InitProducerId, which fences the older
producer (PRODUCER_FENCED; INVALID_PRODUCER_EPOCH to the versions before KIP-588). An InitProducerId
that finds a transaction open fences it as `prepareFenceProducerEpoch` does: the epoch is bumped, the
transaction aborted with markers of that epoch, and the caller told CONCURRENT_TRANSACTIONS, so its retry
bumps the epoch once more. AddPartitionsToTxn / AddOffsetsToTxn record the transaction's partitions and
groups; EndTxn moves it to PrepareCommit / PrepareAbort and the markers to write come out of
`markers_to_write()` (the caller sends them as WriteTxnMarkers to each partition's leader, so they are
control batches in the logs); once every partition's marker is acknowledged the transaction completes,
the groups' staged offsets are applied or dropped (`on_complete`), and the EndTxn is answered through
`on_delayed_response`. A transaction open longer than its timeout is aborted the same way (`poll`).

Deliberate simplifications: the state lives in memory, not in `__transaction_state` (every simulated
broker shares one coordinator, which never moves or fails); EndTxn is answered once the markers are
written, not after PrepareCommit is logged (so a read_committed consumer sees a committed transaction
as soon as its producer returns).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from epochguard.errors import Errors
from epochguard.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnMarker,
    TxnPartitionResult,
    WriteTxnMarkerResult,
)
from epochguard.types import TopicPartition

__all__ = ["TransactionCoordinator", "TxnState", "TransactionMetadata", "MAX_TRANSACTION_TIMEOUT_MS"]

MAX_TRANSACTION_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms
_MAX_EPOCH = 32_767  # Short.MaxValue: an exhausted epoch rotates the producer id
_MARKER_RETRY_MS = 1_000  # a marker write unanswered this long is sent again (its leader may have died)
# KIP-588: versions below these know INVALID_PRODUCER_EPOCH only (KafkaApis' `finalError`).
_FENCED_SINCE = {InitProducerIdRequest: 4, EndTxnRequest: 2, AddPartitionsToTxnRequest: 2,
                 AddOffsetsToTxnRequest: 2}


class TxnState(enum.Enum):
    """`TransactionState` (the ones a coordinator that never moves goes through)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


@dataclass
class TransactionMetadata:
    """`TransactionMetadata`: one transactional id's producer and its current transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    started_ms: int = -1
    last_epoch: int = -1  # the epoch before the last bump a producer asked for itself (KIP-360), for its retry
    unwritten: set[TopicPartition] = field(default_factory=set)  # markers not acknowledged yet
    sent_ms: dict[TopicPartition, int] = field(default_factory=dict)  # markers in flight, since when
    waiters: list[Any] = field(default_factory=list)  # EndTxn requests answered on completion

    @property
    def preparing(self) -> bool:
        return self.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


class TransactionCoordinator:
    """`handle` answers a transaction request, or returns None for an EndTxn that waits for its markers
    (answered later through `on_delayed_response`). The caller writes `markers_to_write()` and reports
    each answer to `on_markers_written`; `on_complete(producer_id, groups, committed)` applies or drops the
    groups' staged offsets."""

    def __init__(self, allocate_producer_id: Callable[[], int]) -> None:
        self.allocate_producer_id = allocate_producer_id
        self.transactions: dict[str, TransactionMetadata] = {}
        self.on_delayed_response: Callable[[Any, Any], None] | None = None
        self.on_complete: Callable[[int, frozenset[str], bool], None] | None = None
        self.log: list[str] = []  # what the coordinator did, for the timeline and tests

    # --- requests --------------------------------------------------------------------------------
    def handle(self, request: Any, now_ms: int) -> Any:
        if isinstance(request, InitProducerIdRequest):
            return self._init_producer_id(request, now_ms)
        if isinstance(request, AddPartitionsToTxnRequest):
            error = self._add(request, request.partitions, (), now_ms)
            return AddPartitionsToTxnResponse(tuple(TxnPartitionResult(tp.topic, tp.partition, error)
                                                    for tp in request.partitions))
        if isinstance(request, AddOffsetsToTxnRequest):
            return AddOffsetsToTxnResponse(self._add(request, (), (request.group_id,), now_ms))
        if isinstance(request, EndTxnRequest):
            return self._end_txn(request, now_ms)
        raise TypeError(f"a transaction coordinator does not answer {type(request).__name__}")

    def _init_producer_id(self, request: InitProducerIdRequest, now_ms: int) -> InitProducerIdResponse:
        tid = request.transactional_id
        if not tid:
            return InitProducerIdResponse(Errors.INVALID_REQUEST)
        if (request.producer_id < 0) != (request.producer_epoch < 0):  # KafkaApis: both or neither
            return InitProducerIdResponse(Errors.INVALID_REQUEST)
        if not 0 < request.transaction_timeout_ms <= MAX_TRANSACTION_TIMEOUT_MS:
            return InitProducerIdResponse(Errors.INVALID_TRANSACTION_TIMEOUT)
        txn = self.transactions.get(tid)
        if txn is None:
            txn = self.transactions[tid] = TransactionMetadata(tid, self.allocate_producer_id(), -1,
                                                               request.transaction_timeout_ms)
        elif request.producer_id >= 0 and request.producer_id != txn.producer_id:
            # KIP-360: a producer re-initializing names its id and epoch; another id was fenced long ago.
            return self._fenced(request, InitProducerIdResponse)
        if txn.preparing:
            return InitProducerIdResponse(Errors.CONCURRENT_TRANSACTIONS)
        if txn.state is TxnState.ONGOING:
            self._fence_and_abort(txn, now_ms, "a new producer initialized")
            return InitProducerIdResponse(Errors.CONCURRENT_TRANSACTIONS)
        if txn.producer_epoch + 1 >= _MAX_EPOCH:
            txn.producer_id, txn.producer_epoch, txn.last_epoch = self.allocate_producer_id(), 0, -1
        elif request.producer_id < 0:  # a new producer: bump, and no earlier epoch may retry
            txn.producer_epoch, txn.last_epoch = txn.producer_epoch + 1, -1
        elif txn.producer_epoch in (-1, request.producer_epoch):  # KIP-360: the producer bumps its own epoch
            txn.producer_epoch, txn.last_epoch = txn.producer_epoch + 1, txn.producer_epoch
        elif request.producer_epoch != txn.last_epoch:  # (the previous epoch: a retry, answered unbumped)
            return self._fenced(request, InitProducerIdResponse)
        txn.timeout_ms = request.transaction_timeout_ms
        txn.state, txn.partitions, txn.groups = TxnState.EMPTY, set(), set()
        self.log.append(f"{tid}: producer {txn.producer_id} epoch {txn.producer_epoch}")
        return InitProducerIdResponse(producer_id=txn.producer_id, producer_epoch=txn.producer_epoch)

    def _check(self, request: Any) -> tuple[TransactionMetadata | None, Errors]:
        """`TransactionCoordinator`'s checks common to AddPartitionsToTxn, AddOffsetsToTxn and EndTxn."""
        txn = self.transactions.get(request.transactional_id)
        if txn is None or txn.producer_id != request.producer_id:
            return None, Errors.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != request.producer_epoch:
            return None, self._fenced_error(request)
        return txn, Errors.NONE

    def _add(self, request: Any, partitions: Any, groups: Any, now_ms: int) -> Errors:
        txn, error = self._check(request)
        if txn is None:
            return error
        if txn.preparing:
            return Errors.CONCURRENT_TRANSACTIONS
        if txn.state is not TxnState.ONGOING:
            txn.state, txn.partitions, txn.groups, txn.started_ms = TxnState.ONGOING, set(), set(), now_ms
        txn.partitions.update(partitions)
        txn.groups.update(groups)
        return Errors.NONE

    def _end_txn(self, request: EndTxnRequest, now_ms: int) -> EndTxnResponse | None:
        txn, error = self._check(request)
        if txn is None:
            return EndTxnResponse(error)
        commit = request.committed
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if txn.state is done:
            return EndTxnResponse()  # a retry of an EndTxn already completed
        if txn.preparing:
            same = txn.state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
            if not same:
                return EndTxnResponse(Errors.INVALID_TXN_STATE)
            txn.waiters.append(request)
            return None
        if txn.state is not TxnState.ONGOING:
            return EndTxnResponse(Errors.INVALID_TXN_STATE)
        self._prepare(txn, commit, now_ms, "EndTxn")
        if not txn.preparing:  # nothing to mark (only offsets joined): complete already
            return EndTxnResponse()
        txn.waiters.append(request)
        return None

    # --- ending a transaction --------------------------------------------------------------------
    def _fence_and_abort(self, txn: TransactionMetadata, now_ms: int, why: str) -> None:
        """`prepareFenceProducerEpoch` then abort: the open transaction's producer is fenced first."""
        txn.producer_epoch += 1
        self._prepare(txn, False, now_ms, why)

    def _prepare(self, txn: TransactionMetadata, commit: bool, now_ms: int, why: str) -> None:
        txn.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        txn.unwritten, txn.sent_ms = set(txn.partitions), {}
        self.log.append(f"{txn.transactional_id}: {txn.state.value} (producer {txn.producer_id} epoch "
                        f"{txn.producer_epoch}, {len(txn.partitions)} partitions, {why})")
        self._maybe_complete(txn)

    def markers_to_write(self, now_ms: int) -> list[TxnMarker]:
        """The markers to send now: not written yet, not in flight (or in flight too long)."""
        out = []
        for txn in self.transactions.values():
            if not txn.preparing:
                continue
            commit = txn.state is TxnState.PREPARE_COMMIT
            for tp in sorted(txn.unwritten):
                sent = txn.sent_ms.get(tp)
                if sent is not None and now_ms - sent < _MARKER_RETRY_MS:
                    continue
                txn.sent_ms[tp] = now_ms
                out.append(TxnMarker(txn.producer_id, txn.producer_epoch, commit, 0, tp.topic, tp.partition))
        return out

    def on_markers_written(self, results: Iterable[WriteTxnMarkerResult]) -> None:
        """A WriteTxnMarkers answer: written markers done; the others are sent again on the next poll."""
        for r in results:
            txn = next((t for t in self.transactions.values() if t.producer_id == r.producer_id and t.preparing),
                       None)
            if txn is None:
                continue
            txn.sent_ms.pop(r.tp, None)
            if r.error_code == Errors.NONE:
                txn.unwritten.discard(r.tp)
            self._maybe_complete(txn)

    def _maybe_complete(self, txn: TransactionMetadata) -> None:
        if not txn.preparing or txn.unwritten:
            return
        commit = txn.state is TxnState.PREPARE_COMMIT
        txn.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        self.log.append(f"{txn.transactional_id}: {txn.state.value}")
        if txn.groups and self.on_complete is not None:
            self.on_complete(txn.producer_id, frozenset(txn.groups), commit)
        waiters, txn.waiters = txn.waiters, []
        for request in waiters:
            if self.on_delayed_response is not None:
                self.on_delayed_response(request, EndTxnResponse())

    def poll(self, now_ms: int) -> None:
        """`abortTimedOutTransactions`: an open transaction past its timeout is fenced and aborted."""
        for txn in self.transactions.values():
            if txn.state is TxnState.ONGOING and now_ms - txn.started_ms > txn.timeout_ms:
                self._fence_and_abort(txn, now_ms, f"timed out after {txn.timeout_ms} ms")

    # --- errors ----------------------------------------------------------------------------------
    @staticmethod
    def _fenced_error(request: Any) -> Errors:
        if request.version < _FENCED_SINCE.get(type(request), 0):
            return Errors.INVALID_PRODUCER_EPOCH
        return Errors.PRODUCER_FENCED

    def _fenced(self, request: Any, response: type) -> Any:
        return response(self._fenced_error(request))

"""The transactional producer's coordinator side, sans-IO: Kafka's `TransactionManager` (the
transactional half; the idempotent half, sequences and local epoch bumps, is in `client.producer`).

States as Java's (`TransactionManager.State`): UNINITIALIZED -> INITIALIZING (`init_transactions`:
FindCoordinator for the transactional id, then InitProducerId with it: the coordinator bumps the epoch,
fencing any older producer with the same id and aborting its open transaction) -> READY ->
IN_TRANSACTION (`begin_transaction`, local only) -> COMMITTING_TRANSACTION / ABORTING_TRANSACTION (EndTxn)
-> READY. A partition a transaction writes to is added with AddPartitionsToTxn before its first batch
is sent (`may_send`); `send_offsets` adds the group (AddOffsetsToTxn) and commits the offsets through
the group coordinator (TxnOffsetCommit), as part of the transaction. EndTxn goes out only when the
producer has nothing in flight or queued (`idle`), as Java's Sender holds it behind the accumulator.

Errors as Java's handlers treat them: NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE look the coordinator
up again and retry; COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS and a lost answer retry after
`retry_backoff_ms`; PRODUCER_FENCED / INVALID_PRODUCER_EPOCH are fatal (`ProducerFencedError`), as are
INVALID_TXN_STATE, TRANSACTIONAL_ID_AUTHORIZATION_FAILED and anything unexpected: a fatal error fails
every later call. A partition refused (TOPIC_AUTHORIZATION_FAILED, TRANSACTION_ABORTABLE, ...) or a
batch that failed in the transaction makes it abortable (ABORTABLE_ERROR): commit raises the error,
abort works. An abort after a batch whose sequence is unresolved (a lost sequence, an expired batch)
bumps the epoch with InitProducerId(id, epoch) (KIP-360) before the next transaction.

Transaction versions (KIP-890), as Java's `isTransactionV2Enabled`: version 2 where the cluster finalized
the feature `transaction.version` at 2 or more (ApiVersions' finalized features, handed in by the driver
with `update_finalized_features`), decided at `init_transactions` and at each `begin_transaction` and
kept for the whole transaction. Version 1 (every broker without it, and `serve`, whose coordinator is
version 1): AddPartitionsToTxn v0-3 for each partition before its first batch, AddOffsetsToTxn then
TxnOffsetCommit v0-4, EndTxn v0-4, Produce v11 at most (v12 would ask a TV2 broker for an implicit add).
Version 2: no AddPartitionsToTxn (a partition may be written at once: the leader adds it to the
transaction when the Produce v12 arrives), no AddOffsetsToTxn (TxnOffsetCommit v5 adds the offsets
partition), and EndTxn v5, whose answer carries the producer id and epoch the coordinator bumped on
ending the transaction: adopted, so each transaction runs under a new epoch and a late write of the
last one is fenced (its sequences restart at 0). The coordinator bumps on every EndTxn, so an abort
after an unresolved sequence needs no InitProducerId of its own (Java's
`needToTriggerEpochBumpFromClient`); TRANSACTION_ABORTABLE from EndTxn makes the transaction abortable.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from epochguard.errors import (
    EpochGuardError,
    Errors,
    IllegalStateError,
    ProducerFencedError,
    TransactionAbortableError,
)
from epochguard.protocol.api_versions import TRANSACTION_VERSION
from epochguard.protocol.messages import (
    PRODUCE_VERSION,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    OffsetCommitPartition,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from epochguard.types import TopicPartition

__all__ = ["TxnState", "TransactionalResult", "TransactionManager"]

_TRANSACTION, _GROUP = 1, 0  # FindCoordinator key types
_RELOCATE = frozenset({Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE})
_RETRY = frozenset({Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.CONCURRENT_TRANSACTIONS,
                    Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.REQUEST_TIMED_OUT})
_FENCED = frozenset({Errors.PRODUCER_FENCED, Errors.INVALID_PRODUCER_EPOCH})
# A partition the coordinator would not add: the transaction can only be aborted
_ABORTABLE = frozenset({Errors.TOPIC_AUTHORIZATION_FAILED, Errors.TRANSACTION_ABORTABLE,
                        Errors.INVALID_PRODUCER_ID_MAPPING, Errors.UNKNOWN_PRODUCER_ID})


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING_TRANSACTION = "committing"
    ABORTING_TRANSACTION = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


class TransactionalResult:
    """What `init_transactions`, `send_offsets`, `begin_commit` and `begin_abort` return (Java's
    `TransactionalRequestResult`): `done` once the coordinator answered, `error` if it failed."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = False
        self.error: EpochGuardError | None = None

    def _resolve(self, error: EpochGuardError | None = None) -> None:
        if not self.done:
            self.done, self.error = True, error


@dataclass(slots=True)
class _Step:
    """One queued coordinator request (Java's `TxnRequestHandler`)."""

    kind: str  # "init", "add_offsets", "offset_commit", "end"
    result: TransactionalResult
    group_id: str = ""
    offsets: tuple[OffsetCommitPartition, ...] = ()
    group: tuple[int, str, str | None] = (-1, "", None)  # generation, member id, group instance id
    commit: bool = False
    not_before_ms: int = 0


@dataclass(slots=True)
class _InFlight:
    request: Any
    step: _Step | None  # None: a FindCoordinator, or an AddPartitionsToTxn
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)


class TransactionManager:
    """See the module docstring. `any_node` (the driver's least loaded node, None when none may be
    tried) answers where a FindCoordinator goes; times are the caller's milliseconds."""

    def __init__(self, transactional_id: str, *, transaction_timeout_ms: int = 60_000,
                 retry_backoff_ms: int = 100) -> None:
        if not transactional_id:
            raise ValueError("a transactional producer needs a non-empty transactional_id")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.state = TxnState.UNINITIALIZED
        self.producer_id, self.producer_epoch = -1, -1
        self.last_error: EpochGuardError | None = None  # the abortable or fatal error, while in that state
        self.coordinators: dict[tuple[int, str], int] = {}  # (key type, key) -> node id
        self._steps: list[_Step] = []
        self._in_flight: dict[int, _InFlight] = {}  # id(request) -> what it carries: one at a time
        self._new_partitions: set[TopicPartition] = set()  # written to, not yet asked to add
        self._partitions: set[TopicPartition] = set()  # added to the ongoing transaction
        self._started = False  # the coordinator knows of the transaction (a partition or the offsets added)
        self._partition_retry_ms = 0
        self._bump_after_abort = False
        self._find_at_ms = 0
        # KIP-890: the level of `transaction.version` the cluster finalized (from the highest features
        # epoch seen), and whether this transaction uses version 2 (decided when one begins)
        self.offered_transaction_version = 0
        self._features_epoch = -1
        self.transaction_v2 = False

    # --- the application's calls (through the producer) -------------------------------------------
    def init_transactions(self) -> TransactionalResult:
        self._require(TxnState.UNINITIALIZED, "init_transactions")
        self.state = TxnState.INITIALIZING
        self.transaction_v2 = self.offered_transaction_version >= 2
        return self._queue(_Step("init", TransactionalResult()))

    def begin_transaction(self) -> None:
        self._require(TxnState.READY, "begin_transaction")
        self.state = TxnState.IN_TRANSACTION
        self.transaction_v2 = self.offered_transaction_version >= 2  # Java's maybeUpdateTransactionV2Enabled

    def update_finalized_features(self, features: Mapping[str, int], epoch: int) -> None:
        """The finalized features a broker answered ApiVersions with (KIP-584); an older epoch is ignored,
        as Java's `ApiVersions` keeps the newest. Takes effect at the next `begin_transaction`."""
        if epoch > self._features_epoch:
            self._features_epoch = epoch
            self.offered_transaction_version = features.get(TRANSACTION_VERSION, 0)

    @property
    def produce_version(self) -> int:
        """The newest Produce version this transaction's batches may go with: v12 marks a transaction
        version 2 write (the leader adds the partition), so a version 1 transaction stays below it."""
        return 12 if self.transaction_v2 else min(PRODUCE_VERSION, 11)

    def check_send(self) -> None:
        """`send` is allowed in a transaction only (Java's `failIfNotReadyForSend`)."""
        self._fail_if_fatal()
        if self.state == TxnState.ABORTABLE_ERROR:
            raise TransactionAbortableError(f"cannot send: the transaction must be aborted ({self.last_error})")
        if self.state != TxnState.IN_TRANSACTION:
            raise IllegalStateError(f"cannot send outside a transaction (state: {self.state.value}); "
                                    "call begin_transaction() first")

    def add_partition(self, tp: TopicPartition) -> None:
        """A record for `tp` joined a batch in this transaction (Java's `maybeAddPartition`). Version 2:
        in the transaction at once, the Produce adds it on the leader."""
        if self.transaction_v2:
            self._partitions.add(tp)
            self._started = True
        elif tp not in self._partitions:
            self._new_partitions.add(tp)

    def may_send(self, tp: TopicPartition) -> bool:
        """May a batch of `tp` be sent now (Java's `isSendToPartitionAllowed`): added to the transaction."""
        return tp in self._partitions and self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING_TRANSACTION)

    def send_offsets(self, offsets: Mapping[TopicPartition, int | tuple[int, str]], group_id: str, *,
                     generation_id: int = -1, member_id: str = "",
                     group_instance_id: str | None = None) -> TransactionalResult:
        """Commit `offsets` (the next offset to read, per partition) for `group_id` with this transaction."""
        self.check_send()
        if not group_id:
            raise ValueError("send_offsets needs a consumer group id")
        parts = []
        for tp, value in offsets.items():
            offset, metadata = (value, "") if isinstance(value, int) else value
            if offset < 0:
                raise ValueError(f"offset for {tp} must not be negative: {offset}")
            parts.append(OffsetCommitPartition(tp.topic, tp.partition, offset, committed_metadata=metadata))
        if self.transaction_v2:  # no AddOffsetsToTxn: TxnOffsetCommit v5 adds the offsets partition itself
            self._started = True
        return self._queue(_Step("offset_commit" if self.transaction_v2 else "add_offsets", TransactionalResult(),
                                 group_id, tuple(parts), (generation_id, member_id, group_instance_id)))

    def begin_commit(self) -> TransactionalResult:
        self._fail_if_fatal()
        if self.state == TxnState.ABORTABLE_ERROR:
            raise TransactionAbortableError(f"cannot commit: the transaction must be aborted ({self.last_error})")
        self._require(TxnState.IN_TRANSACTION, "commit_transaction")
        self.state = TxnState.COMMITTING_TRANSACTION
        return self._end(commit=True)

    def begin_abort(self) -> TransactionalResult:
        self._fail_if_fatal()
        if self.state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
            self._require(TxnState.IN_TRANSACTION, "abort_transaction")
        self.state = TxnState.ABORTING_TRANSACTION
        self._new_partitions.clear()
        for step in self._steps:  # offsets not sent yet: they go with the aborted transaction
            step.result._resolve(TransactionAbortableError("the transaction was aborted"))
        self._steps.clear()
        return self._end(commit=False)

    @property
    def aborting(self) -> bool:
        return self.state == TxnState.ABORTING_TRANSACTION

    @property
    def committing(self) -> bool:
        return self.state == TxnState.COMMITTING_TRANSACTION

    # --- what the producer reports ----------------------------------------------------------------
    def on_batch_failed(self, err: EpochGuardError, *, sequence_unresolved: bool = False) -> None:
        """A batch of the transaction failed: fenced is fatal, anything else makes it abortable."""
        if isinstance(err, ProducerFencedError) or getattr(err, "code", None) in _FENCED:
            self._fatal(ProducerFencedError(f"fenced while producing: {err}"))
            return
        # version 2: the EndTxn of the abort bumps the epoch itself (`needToTriggerEpochBumpFromClient`)
        self._bump_after_abort |= sequence_unresolved and not self.transaction_v2
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING_TRANSACTION):
            self._abortable(err)

    # --- the driver's side ------------------------------------------------------------------------
    def poll_requests(self, now_ms: int, any_node: Callable[[], int | None], idle: bool) -> list[tuple[int, Any]]:
        """The next coordinator request, if one may go now (one at a time, as Java's)."""
        if self._in_flight or self.state == TxnState.FATAL_ERROR:
            return []
        adding = self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING_TRANSACTION)
        if self._new_partitions and adding and now_ms >= self._partition_retry_ms:
            node = self._coordinator(_TRANSACTION, self.transactional_id)
            if node is None:
                return self._find(_TRANSACTION, self.transactional_id, now_ms, any_node)
            added = frozenset(self._new_partitions)
            request = AddPartitionsToTxnRequest(self.transactional_id, self.producer_id, self.producer_epoch,
                                                tuple(sorted(added)))
            return [self._send(node, request, None, added)]
        if not self._steps:
            return []
        step = self._steps[0]
        if now_ms < step.not_before_ms or (step.kind == "end" and not idle):
            return []
        if self._new_partitions and adding:
            return []  # partitions first (Java's priority order)
        if step.kind == "end" and not self._started:  # the coordinator knows of no transaction: nothing to end
            self._steps.remove(step)
            self._finish_transaction(step.result)
            return []
        key_type, key = (_GROUP, step.group_id) if step.kind == "offset_commit" else (_TRANSACTION,
                                                                                     self.transactional_id)
        node = self._coordinator(key_type, key)
        if node is None:
            return self._find(key_type, key, now_ms, any_node)
        return [self._send(node, self._request(step), step)]

    def next_deadline_ms(self, idle: bool) -> int | None:
        if self._in_flight or self.state == TxnState.FATAL_ERROR:
            return None
        times = []
        if self._new_partitions and self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING_TRANSACTION):
            times.append(max(self._partition_retry_ms, self._find_at_ms))
        if self._steps and (self._steps[0].kind != "end" or idle):
            times.append(max(self._steps[0].not_before_ms, self._find_at_ms))
        return min(times, default=None)

    def owns(self, request: Any) -> bool:
        return id(request) in self._in_flight

    def on_response(self, node_id: int, request: Any, response: Any, now_ms: int) -> None:
        sent = self._in_flight.pop(id(request), None)
        if sent is None:
            return
        if isinstance(response, FindCoordinatorResponse):
            self._on_coordinator(request, response, now_ms)
        elif isinstance(response, AddPartitionsToTxnResponse):
            self._on_add_partitions(sent.partitions, response, now_ms)
        elif sent.step is not None:
            self._on_step(sent.step, response, now_ms)

    def on_request_failed(self, node_id: int, request: Any, now_ms: int) -> None:
        """No answer (the connection failed or timed out): look the coordinator up again, then retry."""
        sent = self._in_flight.pop(id(request), None)
        if sent is None:
            return
        self.coordinators = {k: n for k, n in self.coordinators.items() if n != node_id}
        if sent.step is not None:
            sent.step.not_before_ms = now_ms + self.retry_backoff_ms
        elif isinstance(request, AddPartitionsToTxnRequest):
            self._new_partitions |= sent.partitions
            self._partition_retry_ms = now_ms + self.retry_backoff_ms
        else:
            self._find_at_ms = now_ms + self.retry_backoff_ms

    # --- internals --------------------------------------------------------------------------------
    def _require(self, state: TxnState, call: str) -> None:
        self._fail_if_fatal()
        if self.state != state:
            raise IllegalStateError(f"{call}() is not allowed in state {self.state.value} (needs {state.value})")

    def _fail_if_fatal(self) -> None:
        if self.state == TxnState.FATAL_ERROR:
            assert self.last_error is not None
            raise self.last_error

    def _queue(self, step: _Step) -> TransactionalResult:
        self._steps.append(step)
        return step.result

    def _end(self, *, commit: bool) -> TransactionalResult:
        return self._queue(_Step("end", TransactionalResult(), commit=commit))

    def _finish_transaction(self, result: TransactionalResult) -> None:
        self._partitions.clear()
        self._new_partitions.clear()
        self._started = False
        self.last_error = None
        if self.state == TxnState.ABORTING_TRANSACTION and self._bump_after_abort:
            # KIP-360: a sequence left unresolved: a new epoch before the next transaction
            self._bump_after_abort = False
            self.state = TxnState.INITIALIZING
            init = _Step("init", TransactionalResult())
            init.result = result  # the abort completes when the new epoch is in hand
            self._steps.insert(0, init)
            return
        self.state = TxnState.READY
        result._resolve()

    def _coordinator(self, key_type: int, key: str) -> int | None:
        return self.coordinators.get((key_type, key))

    def _find(self, key_type: int, key: str, now_ms: int,
              any_node: Callable[[], int | None]) -> list[tuple[int, Any]]:
        if now_ms < self._find_at_ms:
            return []
        node = any_node()
        if node is None:
            self._find_at_ms = now_ms + self.retry_backoff_ms
            return []
        return [self._send(node, FindCoordinatorRequest(key=key, key_type=key_type, coordinator_keys=(key,)), None)]

    def _send(self, node: int, request: Any, step: _Step | None,
              partitions: frozenset[TopicPartition] = frozenset()) -> tuple[int, Any]:
        if partitions:
            self._new_partitions -= partitions
        self._in_flight[id(request)] = _InFlight(request, step, partitions)
        return node, request

    def _request(self, step: _Step) -> Any:
        tid, pid, epoch = self.transactional_id, self.producer_id, self.producer_epoch
        if step.kind == "init":
            return InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=self.transaction_timeout_ms,
                                         producer_id=pid, producer_epoch=epoch)
        if step.kind == "add_offsets":
            return AddOffsetsToTxnRequest(tid, pid, epoch, step.group_id)
        if step.kind == "offset_commit":
            generation, member, instance = step.group
            return TxnOffsetCommitRequest(tid, step.group_id, pid, epoch, step.offsets, generation_id=generation,
                                          member_id=member, group_instance_id=instance,
                                          version=5 if self.transaction_v2 else 4)
        return EndTxnRequest(tid, pid, epoch, step.commit, version=5 if self.transaction_v2 else 4)

    def _on_coordinator(self, request: FindCoordinatorRequest, response: FindCoordinatorResponse,
                        now_ms: int) -> None:
        found = next((c for c in response.coordinators if c.key == request.key), None)
        if found is None and len(response.coordinators) == 1:
            found = response.coordinators[0]  # v0-3 answers carry no key
        if found is None or found.error_code in _RETRY | _RELOCATE or found.node_id < 0:
            self._find_at_ms = now_ms + self.retry_backoff_ms
            return
        if found.error_code != Errors.NONE:
            err = found.error_code.exception(f"FindCoordinator for {request.key!r}: {found.error_code.name}")
            self._fatal(err or EpochGuardError(found.error_code.name))
            return
        self.coordinators[(request.key_type, request.key)] = found.node_id

    def _on_add_partitions(self, partitions: frozenset[TopicPartition], response: AddPartitionsToTxnResponse,
                           now_ms: int) -> None:
        retry: set[TopicPartition] = set()
        for result in response.partitions:
            code = result.error_code
            if code == Errors.NONE:
                self._partitions.add(result.tp)
                self._started = True
            elif code in _RELOCATE:
                self.coordinators.pop((_TRANSACTION, self.transactional_id), None)
                retry.add(result.tp)
            elif code in _RETRY or code == Errors.OPERATION_NOT_ATTEMPTED:
                retry.add(result.tp)
            elif code in _FENCED:
                self._fatal(ProducerFencedError(f"AddPartitionsToTxn for {result.tp}: {code.name}"))
                return
            elif code in _ABORTABLE:
                self._abortable(TransactionAbortableError(f"AddPartitionsToTxn for {result.tp}: {code.name}"))
            else:
                err = code.exception(f"AddPartitionsToTxn for {result.tp}: {code.name}")
                self._fatal(err or EpochGuardError(f"AddPartitionsToTxn for {result.tp}: {code.name}"))
                return
        answered = {r.tp for r in response.partitions}
        retry |= partitions - answered
        if retry and self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING_TRANSACTION):
            self._new_partitions |= retry
            # Java retries CONCURRENT_TRANSACTIONS sooner (the previous EndTxn completing): 20 ms
            self._partition_retry_ms = now_ms + min(20, self.retry_backoff_ms)

    def _on_step(self, step: _Step, response: Any, now_ms: int) -> None:
        code = getattr(response, "error_code", Errors.NONE)
        if isinstance(response, TxnOffsetCommitResponse):
            code = next((p.error_code for p in response.partitions if p.error_code != Errors.NONE), Errors.NONE)
        what = {"init": "InitProducerId", "add_offsets": "AddOffsetsToTxn", "offset_commit": "TxnOffsetCommit",
                "end": "EndTxn"}[step.kind]
        if code in _RELOCATE:
            key = (_GROUP, step.group_id) if step.kind == "offset_commit" else (_TRANSACTION, self.transactional_id)
            self.coordinators.pop(key, None)
            return
        if code in _RETRY or (step.kind == "offset_commit" and code in (Errors.UNKNOWN_TOPIC_OR_PARTITION,)):
            step.not_before_ms = now_ms + self.retry_backoff_ms
            return
        self._steps.remove(step)
        if code in _FENCED:
            self._fatal(ProducerFencedError(f"{what} for transactional id {self.transactional_id!r}: {code.name} "
                                            "(another producer with this id initialized since)"))
            step.result._resolve(self.last_error)
            return
        if code != Errors.NONE:
            err = code.exception(f"{what}: {code.name}") or EpochGuardError(f"{what}: {code.name}")
            if step.kind == "end" and code == Errors.TRANSACTION_ABORTABLE and self.committing:
                # version 2: a partition the leader could not add (Java's EndTxnHandler): abort instead
                self._abortable(TransactionAbortableError(f"{what}: {code.name}"))
                step.result._resolve(self.last_error)
                return
            if step.kind in ("add_offsets", "offset_commit"):
                self._abortable(err)
            else:
                self._fatal(err)
            step.result._resolve(err)
            return
        if step.kind == "init":
            assert isinstance(response, InitProducerIdResponse)
            self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
            self.state = TxnState.READY
            step.result._resolve()
        elif step.kind == "add_offsets":
            assert isinstance(response, AddOffsetsToTxnResponse)
            self._started = True
            step.kind = "offset_commit"  # then the offsets themselves, to the group's coordinator
            self._steps.insert(0, step)
        elif step.kind == "offset_commit":
            step.result._resolve()
        else:
            assert isinstance(response, EndTxnResponse)
            if response.producer_id >= 0:
                # EndTxn v5: the coordinator bumped the epoch (past 32767: a new id at epoch 0); the next
                # transaction's batches go under it, their sequences from 0
                self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
            self._finish_transaction(step.result)

    def _abortable(self, err: EpochGuardError) -> None:
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING_TRANSACTION):
            self.state = TxnState.ABORTABLE_ERROR
            self.last_error = err
            for step in [s for s in self._steps if s.kind == "end"]:  # a commit waiting: it fails
                self._steps.remove(step)
                step.result._resolve(TransactionAbortableError(f"the transaction cannot commit: {err}"))

    def _fatal(self, err: EpochGuardError) -> None:
        self.state = TxnState.FATAL_ERROR
        self.last_error = err
        for step in self._steps:
            step.result._resolve(err)
        self._steps.clear()

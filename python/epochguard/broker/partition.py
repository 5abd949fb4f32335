"""Partition leadership on one broker, sans-IO: requests in, responses and controller requests out.

Mirrors Kafka's `kafka.cluster.Partition` (`makeLeader`, `makeFollower`, `fetchRecords`,
`lastOffsetForLeaderEpoch`, `fetchOffsetForTimestamp`, `appendRecordsToLeader`, `deleteRecordsOnLeader`,
`maybeExpandIsr`, `maybeShrinkIsr`, `maybeIncrementLeaderHW`, `isReplicaIsrEligible`) and
`kafka.cluster.Replica` (follower state on the leader). The broker around them (`kafka.server.ReplicaManager`) is
`epochguard.broker.replica_manager`. Every epoch answer comes from the Rust core: `LeaderEpochCache.end_offset_for` for
OffsetsForLeaderEpoch and `find_diverging_epoch` for Fetch.

Transactions: a read_committed consumer fetch reads up to the last stable offset and gets the aborted
transactions within what it read; ListOffsets LATEST answers the LSO under read_committed, the HW
under read_uncommitted, the LEO for replicas (`PartitionTest.testListOffsetIsolationLevels`); markers
are written by `write_txn_marker` (WriteTxnMarkers).

`protocol="pre-kip-320"` is the offsets-only broker: no epoch fencing (current_leader_epoch ignored), no
diverging epochs, no KIP-207 OFFSET_NOT_AVAILABLE, and ISR expansion without the fenced/offline checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from epochguard._core import find_diverging_epoch, iter_batches
from epochguard.errors import CorruptRecordError, Errors, InvalidProducerEpochError, OutOfOrderSequenceError
from epochguard.protocol.messages import (
    AbortedTransaction,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerRegistration,
    DivergingEpoch,
    EpochEndOffset,
    FetchPartition,
    FetchPartitionData,
    LeaderAndIsrPartitionState,
    LeaderIdAndEpoch,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    OffsetForLeaderPartition,
)
from epochguard.storage.log import AppendInfo, PartitionLog
from epochguard.types import (
    CONSUMER_REPLICA_ID,
    DEBUGGING_REPLICA_ID,
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    NO_EPOCH,
    NO_OFFSET,
    EpochProtocol,
    IsolationLevel,
    TopicPartition,
)

__all__ = ["ReplicaState", "Partition", "DEFAULT_REPLICA_LAG_TIME_MAX_MS", "DELETE_TO_HIGH_WATERMARK"]

DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000  # replica.lag.time.max.ms
DEFAULT_ALTER_PARTITION_RETRY_MS = 5_000  # an unanswered AlterPartition is sent again after this
_CONSUMER_FETCH_FROM_FOLLOWER_VERSION = 11  # KIP-392
DELETE_TO_HIGH_WATERMARK = -1  # DeleteRecordsRequest.HIGH_WATERMARK
_OFFSET_NOT_AVAILABLE_VERSION = 5


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower (`kafka.cluster.Replica`)."""

    broker_id: int
    log_end_offset: int = NO_OFFSET  # unknown until its first fetch in this leadership
    log_start_offset: int = NO_OFFSET
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = NO_OFFSET
    last_fetch_time_ms: int = 0
    broker_epoch: int = -1

    def is_caught_up(self, leader_end_offset: int, now_ms: int, lag_max_ms: int) -> bool:
        return leader_end_offset == self.log_end_offset or now_ms - self.last_caught_up_time_ms <= lag_max_ms


@dataclass(slots=True)
class _PendingIsrChange:
    request: AlterPartitionRequest
    sent_ms: int | None = None
    # Answered with an error that leaves it unknown whether the controller applied it: keep the
    # pending (maximal) ISR, send nothing more, wait for the next LeaderAndIsr.
    unresolved: bool = False


class Partition:
    """One partition on one broker, as leader or follower (see module docstring)."""

    def __init__(
        self,
        tp: TopicPartition,
        broker_id: int,
        log: PartitionLog,
        *,
        protocol: EpochProtocol = "kip-320",
        broker_epoch: int = 0,
        brokers: Mapping[int, BrokerRegistration] | None = None,
        replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
        alter_partition_retry_ms: int = DEFAULT_ALTER_PARTITION_RETRY_MS,
        topic_id: str | None = None,
    ) -> None:
        self.tp = tp
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.log = log
        self.protocol: EpochProtocol = protocol
        self.brokers: Mapping[int, BrokerRegistration] = brokers if brokers is not None else {}
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.alter_partition_retry_ms = alter_partition_retry_ms
        self.topic_id = topic_id
        self.leader_id: int | None = None
        self.leader_epoch: int = NO_EPOCH
        self.partition_epoch: int = -1
        self.assignment: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()  # committed by the controller
        self.leader_epoch_start_offset: int | None = None
        self.replicas: dict[int, ReplicaState] = {}
        self._pending_isr: _PendingIsrChange | None = None

    # --- role changes -------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the high watermark must respect: a pending expansion counts, a pending shrink does not."""
        if self._pending_isr is not None and len(self._pending_isr.request.new_isr) > len(self.isr):
            return self._pending_isr.request.new_isr
        return self.isr

    @property
    def isr_change_in_flight(self) -> bool:
        return self._pending_isr is not None

    def make_leader(self, state: LeaderAndIsrPartitionState, now_ms: int) -> bool:
        """Become (or stay) leader. A higher epoch records the epoch start offset (= LEO) and assigns
        (epoch, LEO) in the cache; a same-epoch update keeps both. Returns whether this broker just
        became leader or the epoch changed. Stale states (lower epoch) are ignored."""
        if state.leader_epoch < self.leader_epoch:
            return False
        was_leader = self.is_leader
        new_epoch = state.leader_epoch > self.leader_epoch
        self._update_assignment_and_isr(state)
        if new_epoch:
            leo = self.log.log_end_offset
            self.log.assign_epoch_start(state.leader_epoch)
            self.leader_epoch = state.leader_epoch
            self.leader_epoch_start_offset = leo
            self.replicas = {
                r: ReplicaState(r, last_caught_up_time_ms=now_ms if r in state.isr else 0)
                for r in state.replicas
                if r != self.broker_id
            }
        self.leader_id = self.broker_id
        self.maybe_increment_high_watermark(now_ms)  # the ISR may be down to the leader alone
        return new_epoch or not was_leader

    def make_follower(self, state: LeaderAndIsrPartitionState) -> bool:
        """Become (or stay) follower of `state.leader`. Clears the epoch start offset; does not truncate
        (the fetcher does). Returns whether the leader or epoch changed (the fetcher must restart)."""
        if state.leader_epoch < self.leader_epoch:
            return False
        changed = state.leader != self.leader_id or state.leader_epoch != self.leader_epoch
        self._update_assignment_and_isr(state)
        self.leader_epoch = state.leader_epoch
        self.leader_epoch_start_offset = None
        self.leader_id = state.leader if state.leader >= 0 else None
        self.replicas = {}
        return changed

    def _update_assignment_and_isr(self, state: LeaderAndIsrPartitionState) -> None:
        self.assignment = tuple(state.replicas)
        self.isr = tuple(state.isr)
        self.partition_epoch = state.partition_epoch
        if state.topic_id is not None:
            self.topic_id = state.topic_id
        self._pending_isr = None

    # --- fencing ------------------------------------------------------------------------------
    def _check_epoch(self, current_leader_epoch: int, *, absent: bool) -> Errors:
        """FENCED_LEADER_EPOCH if the requester is behind us, UNKNOWN_LEADER_EPOCH if ahead."""
        if absent or self.protocol == "pre-kip-320":
            return Errors.NONE
        if self.leader_epoch > current_leader_epoch:
            return Errors.FENCED_LEADER_EPOCH
        if self.leader_epoch < current_leader_epoch:
            return Errors.UNKNOWN_LEADER_EPOCH
        return Errors.NONE

    def _leader_hint(self) -> LeaderIdAndEpoch:
        if self.leader_id is None:
            return LeaderIdAndEpoch()
        return LeaderIdAndEpoch(self.leader_id, self.leader_epoch)

    # --- Fetch (SPEC (b)) ---------------------------------------------------------------------
    def fetch(
        self,
        p: FetchPartition,
        *,
        replica_id: int = CONSUMER_REPLICA_ID,
        replica_epoch: int = -1,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        version: int = 17,
        now_ms: int = 0,
    ) -> FetchPartitionData:
        def error(code: Errors) -> FetchPartitionData:
            hint = self._leader_hint() if code.retriable else LeaderIdAndEpoch()
            return FetchPartitionData(p.topic, p.partition_index, code, current_leader=hint)

        code = self._fetch_refusal(p, replica_id, replica_epoch, version)
        if code != Errors.NONE:
            return error(code)
        from_follower = replica_id >= 0
        log = self.log
        leo = log.log_end_offset
        if self.protocol == "kip-320" and p.last_fetched_epoch >= 0:
            diverging = find_diverging_epoch(log.leader_epoch_cache, leo, p.last_fetched_epoch, p.fetch_offset)
            if diverging == (NO_EPOCH, NO_OFFSET) or p.fetch_offset < log.log_start_offset:
                return error(Errors.OFFSET_OUT_OF_RANGE)
            if diverging is not None:
                # No records and no follower progress: the follower truncates and fetches again.
                return self._offsets_answer(p, diverging_epoch=DivergingEpoch(*diverging))
        if p.fetch_offset < log.log_start_offset or p.fetch_offset > leo:
            return error(Errors.OFFSET_OUT_OF_RANGE)
        read_committed = not from_follower and isolation_level == IsolationLevel.READ_COMMITTED
        bound = leo if from_follower else log.last_stable_offset if read_committed else log.high_watermark
        high_watermark, last_stable_offset = log.high_watermark, log.last_stable_offset
        records = log.read(p.fetch_offset, max_bytes=p.partition_max_bytes, upper_bound=bound)
        aborted = self._aborted_within(p.fetch_offset, records) if read_committed else None
        if from_follower:
            self._update_follower_fetch_state(replica_id, p, replica_epoch, leo, now_ms)
        return FetchPartitionData(
            p.topic,
            p.partition_index,
            Errors.NONE,
            high_watermark=high_watermark,
            last_stable_offset=last_stable_offset,
            log_start_offset=log.log_start_offset,
            records=records,
            aborted_transactions=aborted,
        )

    def preferred_read_replica_answer(self, p: FetchPartition, preferred: int) -> FetchPartitionData:
        """The leader's answer when it sends a consumer to `preferred` (KIP-392): no records, its offsets
        (Kafka's `fetchOffsetSnapshot(currentLeaderEpoch, fetchOnlyFromLeader = false)`, so the epoch is
        still checked) and the replica to read from."""
        code = self._check_epoch(p.current_leader_epoch, absent=p.current_leader_epoch < 0)
        if code != Errors.NONE:
            return FetchPartitionData(p.topic, p.partition_index, code, current_leader=self._leader_hint())
        return self._offsets_answer(p, preferred_read_replica=preferred)

    def _offsets_answer(self, p: FetchPartition, *, diverging_epoch: DivergingEpoch | None = None,
                        preferred_read_replica: int = -1) -> FetchPartitionData:
        """No records, the log's offsets: a diverging epoch for a follower, or a preferred read replica."""
        log = self.log
        return FetchPartitionData(
            p.topic,
            p.partition_index,
            Errors.NONE,
            high_watermark=log.high_watermark,
            last_stable_offset=log.last_stable_offset,
            log_start_offset=log.log_start_offset,
            diverging_epoch=diverging_epoch,
            preferred_read_replica=preferred_read_replica,
        )

    def _fetch_refusal(self, p: FetchPartition, replica_id: int, replica_epoch: int, version: int) -> Errors:
        """The error a Fetch gets before any offset is looked at (NONE: go on): the current leader
        epoch, leadership (a consumer may fetch from a follower from v11), and a follower's membership
        and broker epoch."""
        code = self._check_epoch(p.current_leader_epoch, absent=p.current_leader_epoch < 0)
        if code != Errors.NONE:
            return code
        from_follower = replica_id >= 0
        if (from_follower or version < _CONSUMER_FETCH_FROM_FOLLOWER_VERSION) and not self.is_leader:
            return Errors.NOT_LEADER_OR_FOLLOWER
        if from_follower and replica_id not in self.assignment:
            return Errors.UNKNOWN_LEADER_EPOCH if p.current_leader_epoch >= 0 else Errors.NOT_LEADER_OR_FOLLOWER
        if from_follower and self._stale_broker_epoch(replica_id, replica_epoch):
            return Errors.NOT_LEADER_OR_FOLLOWER
        return Errors.NONE

    def _aborted_within(self, fetch_offset: int, records: bytes) -> tuple[AbortedTransaction, ...]:
        """The aborted transactions within what is returned (`collectAbortedTransactions`)."""
        if not self.log.collect_aborted_transactions(fetch_offset, self.log.log_end_offset):
            return ()  # none from here on: no need to find where the answer's data ends
        upper = fetch_offset
        for batch in iter_batches(records, verify_crc=False):  # headers only: where the data ends
            upper = batch.next_offset
        return tuple(
            AbortedTransaction(t.producer_id, t.first_offset)
            for t in self.log.collect_aborted_transactions(fetch_offset, upper)
        )

    def _stale_broker_epoch(self, replica_id: int, replica_epoch: int) -> bool:
        if self.protocol == "pre-kip-320" or replica_epoch < 0:
            return False
        registration = self.brokers.get(replica_id)
        return registration is not None and replica_epoch < registration.broker_epoch

    def _update_follower_fetch_state(
        self, replica_id: int, p: FetchPartition, replica_epoch: int, leader_end_offset: int, now_ms: int
    ) -> None:
        state = self.replicas.setdefault(replica_id, ReplicaState(replica_id))
        if p.fetch_offset >= leader_end_offset:
            state.last_caught_up_time_ms = max(state.last_caught_up_time_ms, now_ms)
        elif p.fetch_offset >= state.last_fetch_leader_log_end_offset:
            state.last_caught_up_time_ms = max(state.last_caught_up_time_ms, state.last_fetch_time_ms)
        state.log_end_offset = p.fetch_offset
        state.log_start_offset = p.log_start_offset
        state.last_fetch_leader_log_end_offset = leader_end_offset
        state.last_fetch_time_ms = now_ms
        state.broker_epoch = replica_epoch
        self.maybe_expand_isr(replica_id, now_ms)
        self.maybe_increment_high_watermark(now_ms)

    # --- ISR (SPEC (d)) -----------------------------------------------------------------------
    def is_follower_in_sync(self, replica_id: int) -> bool:
        """Follower LEO >= HW and >= the epoch start offset (so the HW can never go backwards)."""
        state = self.replicas.get(replica_id)
        if state is None or self.leader_epoch_start_offset is None:
            return False
        return state.log_end_offset >= max(self.log.high_watermark, self.leader_epoch_start_offset)

    def is_replica_isr_eligible(self, replica_id: int) -> bool:
        """KRaft: not fenced, not shutting down, fetching with the registered broker epoch (or -1)."""
        if self.protocol == "pre-kip-320":
            return True
        registration = self.brokers.get(replica_id)
        if registration is None:
            return True  # no registration known: nothing to hold against it
        if registration.fenced or registration.in_controlled_shutdown:
            return False
        state = self.replicas.get(replica_id)
        fetch_epoch = state.broker_epoch if state is not None else -1
        return fetch_epoch == -1 or fetch_epoch == registration.broker_epoch

    def maybe_expand_isr(self, replica_id: int, now_ms: int) -> AlterPartitionRequest | None:
        if not self.is_leader or self._pending_isr is not None or replica_id in self.isr:
            return None
        if not self.is_follower_in_sync(replica_id) or not self.is_replica_isr_eligible(replica_id):
            return None
        return self._propose_isr(tuple(sorted((*self.isr, replica_id))))

    def maybe_shrink_isr(self, now_ms: int) -> AlterPartitionRequest | None:
        """Drop followers that have not caught up within replica.lag.time.max.ms."""
        if not self.is_leader or self._pending_isr is not None:
            return None
        leo = self.log.log_end_offset
        out_of_sync = {
            r
            for r in self.isr
            if r != self.broker_id
            and not (r in self.replicas and self.replicas[r].is_caught_up(leo, now_ms, self.replica_lag_time_max_ms))
        }
        if not out_of_sync:
            return None
        return self._propose_isr(tuple(r for r in self.isr if r not in out_of_sync))

    def _propose_isr(self, new_isr: tuple[int, ...]) -> AlterPartitionRequest:
        request = AlterPartitionRequest(
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            topic=self.tp.topic,
            partition_index=self.tp.partition,
            leader_epoch=self.leader_epoch,
            new_isr=new_isr,
            partition_epoch=self.partition_epoch,
        )
        self._pending_isr = _PendingIsrChange(request)
        return request

    def poll_isr_change(self, now_ms: int) -> AlterPartitionRequest | None:
        """The AlterPartition request to send now, if any: a new shrink, or a pending change not yet
        sent or unanswered for `alter_partition_retry_ms` (resent: the controller may have lost it)."""
        if self._pending_isr is None:
            self.maybe_shrink_isr(now_ms)
        pending = self._pending_isr
        if pending is None or pending.unresolved:
            return None
        if pending.sent_ms is None or now_ms - pending.sent_ms >= self.alter_partition_retry_ms:
            pending.sent_ms = now_ms
            return pending.request
        return None

    def on_alter_partition_response(self, response: AlterPartitionResponse, now_ms: int) -> bool:
        """Commit the ISR the controller accepted. Returns whether the ISR changed.

        Errors follow Kafka's `Partition.handleAlterPartitionError`: only OPERATION_NOT_ATTEMPTED and
        INELIGIBLE_REPLICA say the change was not applied, so only they revert to the committed ISR.
        Any other error (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, ...) may follow a change that
        was applied but whose answer was lost: reverting would let the high watermark rise over an ISR
        the controller no longer has, so the pending (maximal) ISR stays until the next LeaderAndIsr.
        """
        pending = self._pending_isr
        if pending is None:
            return False
        if response.error_code in (Errors.OPERATION_NOT_ATTEMPTED, Errors.INELIGIBLE_REPLICA):
            self._pending_isr = None
            return False
        if response.error_code != Errors.NONE:
            pending.unresolved = True
            return False
        self._pending_isr = None
        if response.leader_epoch != self.leader_epoch or response.partition_epoch < self.partition_epoch:
            return False
        self.isr = tuple(response.isr)
        self.partition_epoch = response.partition_epoch
        self.maybe_increment_high_watermark(now_ms)
        return True

    def maybe_increment_high_watermark(self, now_ms: int) -> bool:
        """HW := min LEO over the leader and the (maximal) ISR; it only moves up."""
        if not self.is_leader:
            return False
        new_hw = self.log.log_end_offset
        for r in self.maximal_isr:
            if r == self.broker_id:
                continue
            state = self.replicas.get(r)
            leo = state.log_end_offset if state is not None else NO_OFFSET
            new_hw = min(new_hw, leo)
        return self.log.maybe_increment_high_watermark(new_hw)  # an unknown follower end (-1) moves nothing

    # --- Produce -----------------------------------------------------------------------------
    def append_records_to_leader(
        self,
        records: Iterable[tuple] | bytes,
        *,
        acks: int,
        min_insync_replicas: int,
        now_ms: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> tuple[Errors, AppendInfo | None]:
        """`records` are record tuples (encoded here) or a producer's raw v2 batches (kept as they are,
        base offset and epoch stamped in place); a corrupt batch is CORRUPT_MESSAGE, an idempotent
        producer's batch out of sequence OUT_OF_ORDER_SEQUENCE_NUMBER and one of an older producer epoch
        INVALID_PRODUCER_EPOCH, and a retry of a batch already written gets that batch's offsets."""
        if not self.is_leader:
            return Errors.NOT_LEADER_OR_FOLLOWER, None
        if acks == -1 and len(self.isr) < min_insync_replicas:
            return Errors.NOT_ENOUGH_REPLICAS, None
        if isinstance(records, (bytes, bytearray, memoryview)):
            try:
                info = self.log.append_raw_as_leader(records, self.leader_epoch)
            except CorruptRecordError:
                return Errors.CORRUPT_MESSAGE, None
            except (OutOfOrderSequenceError, InvalidProducerEpochError) as e:
                return e.code, None
            self.maybe_increment_high_watermark(now_ms)
            return Errors.NONE, info
        batch = list(records)
        if not batch:
            return Errors.NONE, None  # nothing to append (Kafka answers NONE with base offset -1)
        info = self.log.append_as_leader(
            batch, self.leader_epoch, timestamp_ms=now_ms,
            producer_id=producer_id, producer_epoch=producer_epoch, transactional=transactional,
        )
        self.maybe_increment_high_watermark(now_ms)
        return Errors.NONE, info

    def write_txn_marker(
        self, producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int, now_ms: int = 0
    ) -> tuple[Errors, AppendInfo | None]:
        """A WriteTxnMarkers entry for this partition: the leader appends the COMMIT/ABORT marker."""
        if not self.is_leader:
            return Errors.NOT_LEADER_OR_FOLLOWER, None
        info = self.log.append_txn_marker(
            producer_id, producer_epoch, commit=commit, coordinator_epoch=coordinator_epoch,
            leader_epoch=self.leader_epoch, timestamp_ms=now_ms,
        )
        self.maybe_increment_high_watermark(now_ms)
        return Errors.NONE, info

    def delete_records_on_leader(self, offset: int) -> tuple[Errors, int]:
        """DeleteRecords (KIP-107) on the leader: move the log start up to `offset` (-1: the high
        watermark), as Kafka's `deleteRecordsOnLeader`; followers follow the leader's log start from its
        fetch answers. Returns (error, low watermark); past the high watermark is OFFSET_OUT_OF_RANGE, as
        `UnifiedLog.maybeIncrementLogStartOffset` throws. The low watermark here is the leader's log start
        (Kafka's `lowWatermarkIfLeader` also waits for the followers' starts: the fault needs no wait)."""
        if not self.is_leader:
            return Errors.NOT_LEADER_OR_FOLLOWER, NO_OFFSET
        converted = self.log.high_watermark if offset == DELETE_TO_HIGH_WATERMARK else offset
        if converted < 0 or converted > self.log.high_watermark:
            return Errors.OFFSET_OUT_OF_RANGE, NO_OFFSET
        self.log.increment_log_start_offset(converted)
        return Errors.NONE, self.log.log_start_offset

    def check_enough_replicas_reach_offset(self, required_offset: int, min_insync_replicas: int) -> Errors | None:
        """For a pending acks=all produce: None while waiting, else its final error code. The ISR
        counted is the maximal one, as the HW's (Kafka's `checkEnoughReplicasReachOffset`)."""
        if not self.is_leader:
            return Errors.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark >= required_offset:
            enough = len(self.maximal_isr) >= min_insync_replicas
            return Errors.NONE if enough else Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return None

    # --- OffsetsForLeaderEpoch (SPEC (c)) -----------------------------------------------------
    def last_offset_for_leader_epoch(self, p: OffsetForLeaderPartition) -> EpochEndOffset:
        code = self._check_epoch(p.current_leader_epoch, absent=p.current_leader_epoch == NO_EPOCH)
        if code == Errors.NONE and not self.is_leader:
            code = Errors.NOT_LEADER_OR_FOLLOWER
        if code != Errors.NONE:
            return EpochEndOffset(p.topic, p.partition_index, code)
        epoch, end_offset = self.log.leader_epoch_cache.end_offset_for(p.leader_epoch, self.log.log_end_offset)
        return EpochEndOffset(p.topic, p.partition_index, Errors.NONE, epoch, end_offset)

    # --- ListOffsets (SPEC (g), KIP-207) ------------------------------------------------------
    def fetch_offset_for_timestamp(
        self,
        p: ListOffsetsPartition,
        *,
        replica_id: int = CONSUMER_REPLICA_ID,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        version: int = 9,
    ) -> ListOffsetsPartitionResponse:
        def error(code: Errors) -> ListOffsetsPartitionResponse:
            if code == Errors.OFFSET_NOT_AVAILABLE and version < _OFFSET_NOT_AVAILABLE_VERSION:
                code = Errors.LEADER_NOT_AVAILABLE
            return ListOffsetsPartitionResponse(p.topic, p.partition_index, code)

        code = self._check_epoch(p.current_leader_epoch, absent=p.current_leader_epoch == NO_EPOCH)
        if code == Errors.NONE and replica_id != DEBUGGING_REPLICA_ID and not self.is_leader:
            code = Errors.NOT_LEADER_OR_FOLLOWER
        if code != Errors.NONE:
            return error(code)
        log = self.log
        is_client = replica_id == CONSUMER_REPLICA_ID
        last_fetchable = self._last_fetchable(is_client, isolation_level)
        lagging = is_client and self._high_watermark_lagging()

        def answer(offset: int, timestamp: int, epoch: int) -> ListOffsetsPartitionResponse:
            return ListOffsetsPartitionResponse(p.topic, p.partition_index, Errors.NONE, timestamp, offset, epoch)

        if p.timestamp == LATEST_TIMESTAMP:
            if lagging:
                return error(Errors.OFFSET_NOT_AVAILABLE)
            return answer(last_fetchable, -1, self.leader_epoch)
        if p.timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            earliest = log.leader_epoch_cache.earliest_entry
            epoch = earliest[0] if earliest is not None and earliest[1] <= log.log_start_offset else NO_EPOCH
            return answer(log.log_start_offset, -1, epoch)
        if p.timestamp == MAX_TIMESTAMP:
            found = log.offset_of_max_timestamp()
        else:
            found = log.offset_for_timestamp(p.timestamp)
        if found is not None and found[0] < last_fetchable:
            return answer(*found)  # (offset, timestamp, the batch's epoch: -1 for none)
        if lagging:
            return error(Errors.OFFSET_NOT_AVAILABLE)
        return ListOffsetsPartitionResponse(p.topic, p.partition_index)  # no error, no offset

    def _last_fetchable(self, is_client: bool, isolation_level: IsolationLevel) -> int:
        """Replicas (and debug requests) read up to the LEO; clients up to the LSO (read_committed) or
        the HW."""
        if not is_client:
            return self.log.log_end_offset
        if isolation_level == IsolationLevel.READ_COMMITTED:
            return self.log.last_stable_offset
        return self.log.high_watermark

    def _high_watermark_lagging(self) -> bool:
        """KIP-207: a new leader whose HW has not reached the start of its own epoch yet."""
        return (
            self.protocol == "kip-320"
            and self.leader_epoch_start_offset is not None
            and self.leader_epoch_start_offset > self.log.high_watermark
        )

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        return (
            f"Partition({self.tp} on {self.broker_id}, {role}, epoch={self.leader_epoch}, isr={self.isr}, "
            f"{self.log!r})"
        )


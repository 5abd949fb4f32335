"""All partitions of one broker, sans-IO: the request entry point of a broker.

Mirrors Kafka's `kafka.server.ReplicaManager`: hosting errors, the Produce / Fetch /
OffsetsForLeaderEpoch / ListOffsets request paths over `epochguard.broker.partition.Partition`, delayed
(acks=all) produce, becoming leader or follower on the controller's decisions, the follower side
through `epochguard.broker.fetcher.ReplicaFetcher`, and the broker's ApiVersions answer
(`epochguard.protocol.api_versions.answer_api_versions` over its served table, the one the wire server uses),
and KIP-392's preferred read replica (`find_preferred_read_replica`, with the `replica_selector` Kafka's
`replica.selector.class` names; none by default, as Kafka).
The leader (`partition.py`) and follower (`fetcher.py`) modules do not import this one: the fetcher gets
only the broker id and a getter for the broker epoch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from epochguard.broker.fetcher import ReplicaFetcher
from epochguard.broker.partition import DEFAULT_ALTER_PARTITION_RETRY_MS, DEFAULT_REPLICA_LAG_TIME_MAX_MS, Partition
from epochguard.broker.replica_selector import ReplicaSelector, ReplicaView
from epochguard.errors import Errors
from epochguard.protocol.api_versions import (
    BROKER_API_VERSIONS,
    ApiVersionsRequest,
    ApiVersionsResponse,
    NodeApiVersions,
    answer_api_versions,
)
from epochguard.protocol.messages import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerRegistration,
    EpochEndOffset,
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    LeaderAndIsrPartitionState,
    LeaderIdAndEpoch,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    ProducePartition,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    WriteTxnMarkerResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from epochguard.storage.log import DEFAULT_SEGMENT_BYTES, PartitionLog
from epochguard.types import EpochProtocol, TopicPartition

__all__ = ["ReplicaManager"]

_CONSUMER_FETCH_FROM_FOLLOWER_VERSION = 11  # KIP-392: Fetch v11 added rack_id and preferred_read_replica


@dataclass(slots=True)
class _DelayedProduce:
    """An acks=all produce, or transaction markers (written with acks=all as Kafka's coordinator does),
    waiting for the ISR to reach each partition's appended offsets."""

    node_id: int
    request: ProduceRequest | WriteTxnMarkersRequest
    deadline_ms: int
    results: dict[TopicPartition, ProducePartitionResponse | WriteTxnMarkerResult]
    waiting: dict[TopicPartition, int] = field(default_factory=dict)  # tp -> required offset (last + 1)


class ReplicaManager:
    """All partitions of one broker: the request entry point of a sans-IO broker.

    `handle(node_id, request, now_ms)` answers Produce/Fetch/OffsetsForLeaderEpoch/ListOffsets (None for
    an acks=all produce that waits for replication: collect it from `poll_responses`).
    `apply_partition_state` applies the controller's decisions (become leader / follower; the follower
    side is driven by `self.fetcher`, an `epochguard.broker.fetcher.ReplicaFetcher`). `poll_requests` returns
    what this broker sends: follower fetches, OffsetsForLeaderEpoch, ListOffsets and AlterPartition
    (addressed to `controller_id`); `on_response` takes their answers.
    """

    def __init__(
        self,
        broker_id: int,
        *,
        protocol: EpochProtocol = "kip-320",
        broker_epoch: int = 0,
        log_dir: str | os.PathLike[str] | None = None,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
        min_insync_replicas: int = 1,
        controller_id: int = -1,
        truncate_on_fetch: bool = True,
        fetch_backoff_ms: int = 1_000,
        request_timeout_ms: int = 30_000,
        alter_partition_retry_ms: int = DEFAULT_ALTER_PARTITION_RETRY_MS,
        logs: Mapping[TopicPartition, PartitionLog] | None = None,
        api_versions: NodeApiVersions = BROKER_API_VERSIONS,
        peer_api_versions: Callable[[int], NodeApiVersions | None] | None = None,
        replica_selector: ReplicaSelector | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.replica_selector = replica_selector  # replica.selector.class (KIP-392); None: consumers read the leader
        self._broker_epoch = broker_epoch
        self.api_versions = api_versions  # what this broker serves (its ApiVersions answer)
        self.request_timeout_ms = request_timeout_ms
        self.protocol: EpochProtocol = protocol
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.segment_bytes = segment_bytes
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas
        self.controller_id = controller_id
        self.alter_partition_retry_ms = alter_partition_retry_ms
        self.brokers: dict[int, BrokerRegistration] = {}
        self.partitions: dict[TopicPartition, Partition] = {}
        self.known_topics: set[str] = set()
        self.log_dir_offline = False
        self._recovered_logs: dict[TopicPartition, PartitionLog] = dict(logs or {})
        self._delayed: list[_DelayedProduce] = []
        self.fetcher = ReplicaFetcher(
            broker_id,
            lambda: self.broker_epoch,
            protocol=protocol,
            truncate_on_fetch=truncate_on_fetch,
            fetch_backoff_ms=fetch_backoff_ms,
            request_timeout_ms=request_timeout_ms,
            leader_api_versions=peer_api_versions,
        )
        if self.log_dir is not None and not (self.log_dir / "meta.properties").exists():
            from epochguard.storage.logdir import write_meta_properties

            write_meta_properties(self.log_dir, broker_id)

    @classmethod
    def recover(cls, root: str | os.PathLike[str], **kwargs: object) -> ReplicaManager:
        """A restarted broker: every partition log recovered from its log dir (`logdir.read_log_dir`:
        torn tails cut, epoch caches re-truncated, high watermarks from the last `checkpoint()`)."""
        from epochguard.storage.logdir import read_log_dir

        loaded = read_log_dir(root, write_through=True)
        return cls(loaded.node_id, log_dir=root, logs=loaded.logs, **kwargs)  # type: ignore[arg-type]

    def checkpoint(self) -> None:
        """Write the root checkpoints (high watermarks, log start offsets), as Kafka does periodically."""
        if self.log_dir is None:
            return
        from epochguard.storage.logdir import write_root_checkpoints

        write_root_checkpoints(self.log_dir, [p.log for p in self.partitions.values()])

    @property
    def broker_epoch(self) -> int:
        """This broker's registration epoch (KRaft); sent in follower fetches and AlterPartition."""
        return self._broker_epoch

    @broker_epoch.setter
    def broker_epoch(self, epoch: int) -> None:
        self._broker_epoch = epoch
        for partition in self.partitions.values():
            partition.broker_epoch = epoch

    # --- controller -> broker -----------------------------------------------------------------
    def update_brokers(self, registrations: Iterable[BrokerRegistration]) -> None:
        for r in registrations:
            self.brokers[r.broker_id] = r

    def get_or_create_partition(self, tp: TopicPartition, topic_id: str | None = None) -> Partition:
        partition = self.partitions.get(tp)
        if partition is None:
            log = self._recovered_logs.pop(tp, None)
            if log is None:
                directory = None if self.log_dir is None else self.log_dir / str(tp)
                log = PartitionLog(tp, directory=directory, segment_bytes=self.segment_bytes)
            partition = Partition(
                tp,
                self.broker_id,
                log,
                protocol=self.protocol,
                broker_epoch=self.broker_epoch,
                brokers=self.brokers,
                replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                alter_partition_retry_ms=self.alter_partition_retry_ms,
                topic_id=topic_id,
            )
            self.partitions[tp] = partition
        return partition

    def apply_partition_state(self, state: LeaderAndIsrPartitionState, now_ms: int) -> None:
        """Become leader or follower of one partition as the controller decided (LeaderAndIsr / a
        KRaft partition change); a replica no longer in the assignment is stopped."""
        tp = state.tp
        self.known_topics.add(tp.topic)
        if self.broker_id not in state.replicas:
            self.stop_replica(tp)
            return
        partition = self.get_or_create_partition(tp, state.topic_id)
        if state.leader == self.broker_id:
            if partition.make_leader(state, now_ms):
                self.fetcher.remove_partition(tp)
        elif partition.make_follower(state):
            self.fetcher.add_partition(partition, now_ms)

    def stop_replica(self, tp: TopicPartition) -> None:
        self.fetcher.remove_partition(tp)
        self.partitions.pop(tp, None)

    def set_log_dir_offline(self) -> None:
        """The disk failed: every partition answers KAFKA_STORAGE_ERROR."""
        self.log_dir_offline = True

    def _hosting_error(self, tp: TopicPartition) -> Errors | None:
        if self.log_dir_offline:
            return Errors.KAFKA_STORAGE_ERROR
        if tp not in self.partitions:
            return Errors.NOT_LEADER_OR_FOLLOWER if tp.topic in self.known_topics else Errors.UNKNOWN_TOPIC_OR_PARTITION
        return None

    # --- requests in --------------------------------------------------------------------------
    def handle(
        self, node_id: int, request: Request | ApiVersionsRequest, now_ms: int
    ) -> Response | ApiVersionsResponse | None:
        if isinstance(request, ApiVersionsRequest):
            return answer_api_versions(request, self.api_versions)
        if isinstance(request, FetchRequest):
            return self._handle_fetch(request, now_ms)
        if isinstance(request, OffsetsForLeaderEpochRequest):
            return self._handle_offsets_for_leader_epoch(request)
        if isinstance(request, ListOffsetsRequest):
            return self._handle_list_offsets(request)
        if isinstance(request, ProduceRequest):
            return self._handle_produce(node_id, request, now_ms)
        if isinstance(request, WriteTxnMarkersRequest):
            return self._handle_write_txn_markers(node_id, request, now_ms)
        raise TypeError(f"a broker does not answer {type(request).__name__}")

    def _handle_fetch(self, request: FetchRequest, now_ms: int) -> FetchResponse:
        out = []
        for p in request.partitions:
            code = self._hosting_error(p.tp)
            if code is not None:
                out.append(FetchPartitionData(p.topic, p.partition_index, code))
                continue
            partition = self.partitions[p.tp]
            preferred = self.find_preferred_read_replica(partition, request, p.fetch_offset, now_ms)
            if preferred is not None:  # no read: the consumer is sent to the replica (KIP-392)
                out.append(partition.preferred_read_replica_answer(p, preferred))
                continue
            out.append(
                partition.fetch(
                    p,
                    replica_id=request.replica_id,
                    replica_epoch=request.replica_epoch,
                    isolation_level=request.isolation_level,
                    version=request.version,
                    now_ms=now_ms,
                )
            )
        self._complete_delayed(now_ms)  # follower progress may have advanced a high watermark
        return FetchResponse(tuple(out))

    def find_preferred_read_replica(
        self, partition: Partition, request: FetchRequest, fetch_offset: int, now_ms: int
    ) -> int | None:
        """The replica the leader names to a consumer (Kafka's `ReplicaManager.findPreferredReadReplica`), or
        None (read here). Only a leader with a selector names one, only to consumers that can follow it (Fetch
        v11+, Kafka's `ClientMetadata`), and only among the followers in the committed ISR whose log, as their
        last fetch told the leader, holds `fetch_offset` (KAFKA-14372: an out-of-sync follower could keep a
        consumer behind forever); a replica the metadata has no endpoint for (unknown or fenced, as
        `MetadataCache.getPartitionReplicaEndpoints`) is never named, nor is the leader itself."""
        if self.replica_selector is None or not partition.is_leader or request.replica_id >= 0:
            return None
        if request.version < _CONSUMER_FETCH_FROM_FOLLOWER_VERSION:
            return None
        candidates = []
        for broker_id, state in partition.replicas.items():
            if broker_id in partition.isr and state.log_start_offset <= fetch_offset <= state.log_end_offset:
                candidates.append(self._replica_view(broker_id, state.log_end_offset,
                                                     now_ms - state.last_caught_up_time_ms))
        leader = self._replica_view(self.broker_id, partition.log.log_end_offset, 0)
        selected = self.replica_selector.select(request.rack_id, (*candidates, leader), leader)
        if selected is None or not selected.known or selected == leader:
            return None
        return selected.broker_id

    def _replica_view(self, broker_id: int, log_end_offset: int, since_caught_up_ms: int) -> ReplicaView:
        registration = self.brokers.get(broker_id)
        known = registration is not None and not registration.fenced
        rack = registration.rack if registration is not None and known else None
        return ReplicaView(broker_id, log_end_offset, since_caught_up_ms, rack, known)

    def _handle_offsets_for_leader_epoch(self, request: OffsetsForLeaderEpochRequest) -> OffsetsForLeaderEpochResponse:
        out = []
        for p in request.partitions:
            code = self._hosting_error(p.tp)
            out.append(
                EpochEndOffset(p.topic, p.partition_index, code)
                if code is not None
                else self.partitions[p.tp].last_offset_for_leader_epoch(p)
            )
        return OffsetsForLeaderEpochResponse(tuple(out))

    def _handle_list_offsets(self, request: ListOffsetsRequest) -> ListOffsetsResponse:
        out = []
        for p in request.partitions:
            code = self._hosting_error(p.tp)
            if code is not None:
                out.append(ListOffsetsPartitionResponse(p.topic, p.partition_index, code))
                continue
            out.append(
                self.partitions[p.tp].fetch_offset_for_timestamp(
                    p, replica_id=request.replica_id, isolation_level=request.isolation_level, version=request.version
                )
            )
        return ListOffsetsResponse(tuple(out))

    def _handle_write_txn_markers(
        self, node_id: int, request: WriteTxnMarkersRequest, now_ms: int
    ) -> WriteTxnMarkersResponse | None:
        """Each marker is appended by the partition's leader with acks=all (`ReplicaManager.appendRecords`
        from `KafkaApis.handleWriteTxnMarkersRequest`): answered once the ISR has it (None until then:
        collect it from `poll_responses`)."""
        delayed = _DelayedProduce(node_id, request, now_ms + self.request_timeout_ms, {})
        for m in request.markers:
            code = self._hosting_error(m.tp)
            info = None
            if code is None:
                code, info = self.partitions[m.tp].write_txn_marker(
                    m.producer_id, m.producer_epoch, commit=m.committed, coordinator_epoch=m.coordinator_epoch,
                    now_ms=now_ms,
                )
            delayed.results[m.tp] = WriteTxnMarkerResult(m.producer_id, m.topic, m.partition_index, code)
            if info is not None:
                delayed.waiting[m.tp] = info.last_offset + 1
        self._delayed.append(delayed)
        self._complete_delayed(now_ms)
        if delayed.waiting:
            return None
        self._delayed.remove(delayed)
        return WriteTxnMarkersResponse(tuple(delayed.results[m.tp] for m in request.markers))  # type: ignore[misc]

    def _handle_produce(self, node_id: int, request: ProduceRequest, now_ms: int) -> ProduceResponse | None:
        delayed = _DelayedProduce(node_id, request, now_ms + request.timeout_ms, {})
        for p in request.partitions:
            delayed.results[p.tp] = self._append(p, request.acks, now_ms, delayed)
        if request.acks == -1 and delayed.waiting:
            self._delayed.append(delayed)
            self._complete_delayed(now_ms)
            return None
        return ProduceResponse(tuple(delayed.results[p.tp] for p in request.partitions))  # type: ignore[misc]

    def _append(
        self, p: ProducePartition, acks: int, now_ms: int, delayed: _DelayedProduce
    ) -> ProducePartitionResponse:
        code = self._hosting_error(p.tp)
        if code is not None:
            return ProducePartitionResponse(p.topic, p.partition_index, code)
        partition = self.partitions[p.tp]
        code, info = partition.append_records_to_leader(
            p.records, acks=acks, min_insync_replicas=self.min_insync_replicas, now_ms=now_ms,
            producer_id=p.producer_id, producer_epoch=p.producer_epoch, transactional=p.transactional,
        )
        if info is None:
            hint = partition._leader_hint() if code.retriable else LeaderIdAndEpoch()
            return ProducePartitionResponse(p.topic, p.partition_index, code, current_leader=hint)
        delayed.waiting[p.tp] = info.last_offset + 1
        return ProducePartitionResponse(
            p.topic, p.partition_index, Errors.NONE, info.first_offset, -1, partition.log.log_start_offset
        )

    def _complete_delayed(self, now_ms: int) -> None:
        for delayed in self._delayed:
            for tp, required in list(delayed.waiting.items()):
                partition = self.partitions.get(tp)
                code = (
                    Errors.NOT_LEADER_OR_FOLLOWER
                    if partition is None
                    else partition.check_enough_replicas_reach_offset(required, self.min_insync_replicas)
                )
                if code is None and now_ms >= delayed.deadline_ms:
                    code = Errors.REQUEST_TIMED_OUT
                if code is not None:
                    del delayed.waiting[tp]
                    if code != Errors.NONE:
                        r = delayed.results[tp]
                        if isinstance(r, ProducePartitionResponse):
                            delayed.results[tp] = ProducePartitionResponse(
                                r.topic, r.partition_index, code, r.base_offset
                            )
                        else:
                            delayed.results[tp] = WriteTxnMarkerResult(r.producer_id, r.topic, r.partition_index, code)

    def poll_responses(
        self, now_ms: int
    ) -> list[tuple[int, ProduceRequest | WriteTxnMarkersRequest, ProduceResponse | WriteTxnMarkersResponse]]:
        """Completed acks=all produces and marker writes: (client node, request, response), in arrival order."""
        self._complete_delayed(now_ms)
        done = [d for d in self._delayed if not d.waiting]
        self._delayed = [d for d in self._delayed if d.waiting]
        out: list[tuple[int, ProduceRequest | WriteTxnMarkersRequest, ProduceResponse | WriteTxnMarkersResponse]] = []
        for d in done:
            if isinstance(d.request, ProduceRequest):
                parts = tuple(d.results[p.tp] for p in d.request.partitions)
                out.append((d.node_id, d.request, ProduceResponse(parts)))  # type: ignore[arg-type]
            else:
                markers = tuple(d.results[m.tp] for m in d.request.markers)
                out.append((d.node_id, d.request, WriteTxnMarkersResponse(markers)))  # type: ignore[arg-type]
        return out

    # --- requests out -------------------------------------------------------------------------
    def poll_requests(self, now_ms: int) -> list[tuple[int, Request]]:
        out: list[tuple[int, Request]] = list(self.fetcher.poll_requests(now_ms))
        for partition in self.partitions.values():
            request = partition.poll_isr_change(now_ms)
            if request is not None:
                out.append((self.controller_id, request))
        self._complete_delayed(now_ms)
        return out

    def on_response(self, node_id: int, request: Request, response: Response, now_ms: int) -> None:
        if isinstance(response, AlterPartitionResponse):
            partition = self.partitions.get(response.tp)
            if partition is not None:
                partition.on_alter_partition_response(response, now_ms)
                self._complete_delayed(now_ms)
            return
        self.fetcher.on_response(node_id, request, response, now_ms)

    def on_request_failed(self, node_id: int, request: Request, now_ms: int) -> None:
        """A request this broker sent got no answer (disconnect, timeout)."""
        if isinstance(request, AlterPartitionRequest):
            return  # resent by poll_isr_change after its retry interval
        self.fetcher.on_request_failed(node_id, request, now_ms)

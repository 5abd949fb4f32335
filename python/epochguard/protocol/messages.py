"""Requests and responses of the leader-epoch flows, as plain immutable dataclasses.

Mirrors the generated message classes of `clients/src/main/resources/common/message/*.json`:
`FetchRequest/Response`, `OffsetForLeaderEpochRequest/Response`, `ListOffsetsRequest/Response`,
`MetadataRequest/Response`, `OffsetCommitRequest/Response`, `OffsetFetchRequest/Response`,
`AlterPartitionRequest/Response`, `WriteTxnMarkersRequest/Response`, plus the controller's
`LeaderAndIsrRequest` partition state and KRaft `BrokerRegistration`; the client's
`SaslHandshakeRequest/Response` and `SaslAuthenticateRequest/Response` (encoded only by the client's half
of the codec: `serve` has no SASL), and the transactional producer's `AddPartitionsToTxn`, `AddOffsetsToTxn`,
`TxnOffsetCommit` and `EndTxn` (both halves: `serve` is a transaction coordinator); and for the
wire server,
`InitProducerIdRequest/Response`, `FindCoordinatorRequest/Response` and the classic group protocol
(`JoinGroup`, `SyncGroup`, `Heartbeat`, `LeaveGroup`). `epochguard._core.decode_request` /
`encode_response` convert these to and from Kafka frames. Field names are the snake_case of the wire
names. Two deliberate simplifications keep the sans-IO layer readable: per-partition entries are
flattened (each carries `topic` next to its partition field instead of nesting partitions under
topics, except Metadata whose topic level holds errors and topic ids), and a tagged/absent field is
`None` where the wire uses a default object (Fetch `diverging_epoch`). Sentinels (-1 epochs/offsets)
stay as on the wire; the public types in `epochguard.types` use None instead. `version` is the API
version the sender used, because behaviour depends on it (SPEC (i)).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from epochguard.errors import Errors
from epochguard.protocol.api_versions import ApiVersionsRequest, ApiVersionsResponse
from epochguard.types import (
    CONSUMER_REPLICA_ID,
    NO_EPOCH,
    NO_OFFSET,
    IsolationLevel,
    TopicPartition,
)

__all__ = [
    "SaslHandshakeRequest",
    "SaslHandshakeResponse",
    "SaslAuthenticateRequest",
    "SaslAuthenticateResponse",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "FETCH_VERSION",
    "LIST_OFFSETS_VERSION",
    "OFFSET_FOR_LEADER_EPOCH_VERSION",
    "METADATA_VERSION",
    "OFFSET_COMMIT_VERSION",
    "OFFSET_FETCH_VERSION",
    "PRODUCE_VERSION",
    "ProduceRecord",
    "ProducePartition",
    "ProduceRequest",
    "ProducePartitionResponse",
    "ProduceResponse",
    "FetchPartition",
    "FetchRequest",
    "DivergingEpoch",
    "LeaderIdAndEpoch",
    "NodeEndpoint",
    "AbortedTransaction",
    "FetchPartitionData",
    "FetchResponse",
    "OffsetForLeaderPartition",
    "OffsetsForLeaderEpochRequest",
    "EpochEndOffset",
    "OffsetsForLeaderEpochResponse",
    "ListOffsetsPartition",
    "ListOffsetsRequest",
    "ListOffsetsPartitionResponse",
    "ListOffsetsResponse",
    "MetadataRequest",
    "MetadataResponseBroker",
    "MetadataResponsePartition",
    "MetadataResponseTopic",
    "MetadataResponse",
    "OffsetCommitPartition",
    "OffsetCommitRequest",
    "OffsetCommitPartitionResponse",
    "OffsetCommitResponse",
    "OffsetFetchRequest",
    "OffsetFetchPartitionResponse",
    "OffsetFetchResponse",
    "AlterPartitionRequest",
    "AlterPartitionResponse",
    "LeaderAndIsrPartitionState",
    "BrokerRegistration",
    "TxnMarker",
    "WriteTxnMarkersRequest",
    "WriteTxnMarkerResult",
    "WriteTxnMarkersResponse",
    "AddPartitionsToTxnRequest",
    "AddPartitionsToTxnResponse",
    "AddOffsetsToTxnRequest",
    "AddOffsetsToTxnResponse",
    "TxnOffsetCommitRequest",
    "TxnOffsetCommitResponse",
    "TxnPartitionResult",
    "EndTxnRequest",
    "EndTxnResponse",
    "ListGroupsRequest",
    "ListedGroup",
    "ListGroupsResponse",
    "DescribeGroupsRequest",
    "DescribedGroup",
    "DescribeGroupsResponse",
    "DescribeProducersRequest",
    "ProducerState",
    "DescribeProducersPartition",
    "DescribeProducersResponse",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
    "FindCoordinatorRequest",
    "Coordinator",
    "FindCoordinatorResponse",
    "JoinGroupProtocol",
    "JoinGroupRequest",
    "JoinGroupMember",
    "JoinGroupResponse",
    "SyncGroupAssignment",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "LeaveGroupMember",
    "LeaveGroupRequest",
    "LeaveGroupMemberResponse",
    "LeaveGroupResponse",
    "Request",
    "Response",
]

# Latest versions in Kafka trunk (late 2024); every epoch field exists from these on.
FETCH_VERSION = 17
PRODUCE_VERSION = 11
LIST_OFFSETS_VERSION = 9
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
METADATA_VERSION = 12
OFFSET_COMMIT_VERSION = 9
OFFSET_FETCH_VERSION = 9


@dataclass(frozen=True, slots=True)
class LeaderIdAndEpoch:
    """Produce/Fetch response tagged field (KIP-951 leader hint); -1/-1 = absent."""

    leader_id: int = -1
    leader_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    """Produce v10+ / Fetch v16+ response tagged field (KIP-951): where a hinted leader listens, so the
    client can reach it before its next Metadata answer."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


# --- Produce -------------------------------------------------------------------------------------
ProduceRecord = (
    tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]
)
"""(key, value) or (key, value, headers); the leader stamps offsets, epoch and timestamp."""


@dataclass(frozen=True, slots=True)
class ProducePartition:
    """One partition's records: on the wire the encoded v2 batches (`bytes`, as the client sent them;
    the leader stamps base offset and partition leader epoch in place, `stamp_batches`), in the
    simulator a tuple of records the leader encodes (`encode_batch`), same result."""

    topic: str
    partition_index: int
    records: tuple[ProduceRecord, ...] | bytes  # record tuples (the simulator) or a client's raw v2 batches
    # With record tuples, the batch header fields a producer would write (the leader encodes the batch);
    # raw batches carry their own.
    producer_id: int = -1
    producer_epoch: int = -1
    transactional: bool = False

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    partitions: tuple[ProducePartition, ...]
    acks: int = -1  # -1 all ISR, 1 leader only, 0 none
    timeout_ms: int = 30_000
    version: int = PRODUCE_VERSION
    transactional_id: str | None = None  # v3


@dataclass(frozen=True, slots=True)
class ProducePartitionResponse:
    topic: str
    partition_index: int
    error_code: Errors = Errors.NONE
    base_offset: int = NO_OFFSET
    log_append_time_ms: int = -1
    log_start_offset: int = NO_OFFSET
    current_leader: LeaderIdAndEpoch = field(default_factory=LeaderIdAndEpoch)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class ProduceResponse:
    partitions: tuple[ProducePartitionResponse, ...]
    throttle_time_ms: int = 0
    node_endpoints: tuple[NodeEndpoint, ...] = ()  # v10: the hinted leaders' listeners


# --- Fetch ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FetchPartition:
    topic: str
    partition_index: int
    fetch_offset: int
    current_leader_epoch: int = NO_EPOCH  # v9; -1 = skip fencing
    last_fetched_epoch: int = NO_EPOCH  # v12; followers only (consumers never send it)
    log_start_offset: int = NO_OFFSET  # followers report theirs
    partition_max_bytes: int = 1 << 20
    # v13+ (KIP-516): the topic's id as the client sent it (Kafka's base64); `topic` is "" until the
    # broker's request layer resolves it (`epochguard.wire.engine`), UNKNOWN_TOPIC_ID if it cannot.
    topic_id: str | None = None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class FetchRequest:
    partitions: tuple[FetchPartition, ...]
    replica_id: int = CONSUMER_REPLICA_ID  # ReplicaState.ReplicaId from v15; >= 0 = follower
    replica_epoch: int = -1  # ReplicaState.ReplicaEpoch: the follower's broker epoch (-1 = unknown)
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    max_wait_ms: int = 0
    min_bytes: int = 1
    max_bytes: int = 50 << 20
    rack_id: str = ""
    version: int = FETCH_VERSION
    session_id: int = 0  # v7 (KIP-227); 0 = no session
    session_epoch: int = -1  # v7; -1 = FINAL_EPOCH: a full, sessionless fetch
    forgotten_topics: tuple[TopicPartition, ...] = ()  # v7: partitions an incremental fetch drops (v13+: topic ids)

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0


@dataclass(frozen=True, slots=True)
class DivergingEpoch:
    """Fetch response tagged field 0 (`FetchResponseData.EpochEndOffset`): present iff epoch >= 0."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """Fetch response (v4+): a transaction aborted within the data returned, for read_committed."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class FetchPartitionData:
    topic: str
    partition_index: int
    error_code: Errors = Errors.NONE
    high_watermark: int = NO_OFFSET
    last_stable_offset: int = NO_OFFSET
    log_start_offset: int = NO_OFFSET
    diverging_epoch: DivergingEpoch | None = None
    current_leader: LeaderIdAndEpoch = field(default_factory=LeaderIdAndEpoch)
    preferred_read_replica: int = -1
    records: bytes = b""  # concatenated v2 batches, verbatim from the leader's log
    aborted_transactions: tuple[AbortedTransaction, ...] | None = None  # None (null) unless read_committed
    topic_id: str | None = None  # v13+: the topic's id, which the answer names the topic by

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class FetchResponse:
    partitions: tuple[FetchPartitionData, ...]
    error_code: Errors = Errors.NONE
    throttle_time_ms: int = 0
    session_id: int = 0  # v7; 0 = no session
    node_endpoints: tuple[NodeEndpoint, ...] = ()  # v16: the hinted leaders' listeners


# --- OffsetForLeaderEpoch ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OffsetForLeaderPartition:
    topic: str
    partition_index: int
    leader_epoch: int  # the epoch whose end offset is asked for
    current_leader_epoch: int = NO_EPOCH  # v2; -1 = skip fencing

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class OffsetsForLeaderEpochRequest:
    partitions: tuple[OffsetForLeaderPartition, ...]
    replica_id: int = CONSUMER_REPLICA_ID  # v3; consumer -1, follower its broker id, < v3 means -2
    version: int = OFFSET_FOR_LEADER_EPOCH_VERSION


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """One partition's answer: the largest epoch <= the requested one and where it ends. Errors carry -1/-1."""

    topic: str
    partition_index: int
    error_code: Errors = Errors.NONE
    leader_epoch: int = NO_EPOCH
    end_offset: int = NO_OFFSET

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class OffsetsForLeaderEpochResponse:
    partitions: tuple[EpochEndOffset, ...]
    throttle_time_ms: int = 0


# --- ListOffsets ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ListOffsetsPartition:
    topic: str
    partition_index: int
    timestamp: int  # or LATEST_TIMESTAMP / EARLIEST_TIMESTAMP / MAX_TIMESTAMP / EARLIEST_LOCAL_TIMESTAMP
    current_leader_epoch: int = NO_EPOCH  # v4; exactly -1 = skip fencing

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    partitions: tuple[ListOffsetsPartition, ...]
    replica_id: int = CONSUMER_REPLICA_ID  # -1 client, -2 debugging, >= 0 follower
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    version: int = LIST_OFFSETS_VERSION


@dataclass(frozen=True, slots=True)
class ListOffsetsPartitionResponse:
    topic: str
    partition_index: int
    error_code: Errors = Errors.NONE
    timestamp: int = -1
    offset: int = NO_OFFSET
    leader_epoch: int = NO_EPOCH  # v4: the epoch of the record at `offset`

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse:
    partitions: tuple[ListOffsetsPartitionResponse, ...]
    throttle_time_ms: int = 0


# --- Metadata ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MetadataRequest:
    topics: tuple[str, ...] | None = None  # None = all topics
    allow_auto_topic_creation: bool = False
    version: int = METADATA_VERSION


@dataclass(frozen=True, slots=True)
class MetadataResponseBroker:
    node_id: int
    host: str = "localhost"
    port: int = 9092
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class MetadataResponsePartition:
    partition_index: int
    leader_id: int  # -1 = no leader
    leader_epoch: int = NO_EPOCH  # v7; trusted from v9
    replica_nodes: tuple[int, ...] = ()
    isr_nodes: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error_code: Errors = Errors.NONE


@dataclass(frozen=True, slots=True)
class MetadataResponseTopic:
    name: str
    partitions: tuple[MetadataResponsePartition, ...] = ()
    topic_id: str | None = None  # a UUID string; None = zero UUID (unknown)
    error_code: Errors = Errors.NONE
    is_internal: bool = False


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    topics: tuple[MetadataResponseTopic, ...]
    brokers: tuple[MetadataResponseBroker, ...] = ()
    cluster_id: str | None = None
    controller_id: int = -1
    version: int = METADATA_VERSION  # the response version: leader epochs are usable from 9 on
    throttle_time_ms: int = 0


# --- OffsetCommit / OffsetFetch ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OffsetCommitPartition:
    topic: str
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int = NO_EPOCH  # v6
    committed_metadata: str = ""

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    partitions: tuple[OffsetCommitPartition, ...]
    generation_id_or_member_epoch: int = -1
    member_id: str = ""
    version: int = OFFSET_COMMIT_VERSION
    group_instance_id: str | None = None  # v7 (KIP-345 static membership)


@dataclass(frozen=True, slots=True)
class OffsetCommitPartitionResponse:
    topic: str
    partition_index: int
    error_code: Errors = Errors.NONE

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    partitions: tuple[OffsetCommitPartitionResponse, ...]
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    group_id: str
    partitions: tuple[TopicPartition, ...] | None = None  # None = all committed partitions
    require_stable: bool = False
    version: int = OFFSET_FETCH_VERSION


@dataclass(frozen=True, slots=True)
class OffsetFetchPartitionResponse:
    topic: str
    partition_index: int
    committed_offset: int = NO_OFFSET  # -1 = nothing committed
    committed_leader_epoch: int = NO_EPOCH  # response v5
    metadata: str = ""
    error_code: Errors = Errors.NONE

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    partitions: tuple[OffsetFetchPartitionResponse, ...]
    error_code: Errors = Errors.NONE
    version: int = OFFSET_FETCH_VERSION
    throttle_time_ms: int = 0
    group_id: str = ""  # v8 answers per group (KIP-709): the request's group


# --- Controller <-> partition leader -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """The leader asks the controller to change the ISR (KIP-497); one partition per request here."""

    broker_id: int
    broker_epoch: int
    topic: str
    partition_index: int
    leader_epoch: int
    new_isr: tuple[int, ...]
    partition_epoch: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    topic: str
    partition_index: int
    error_code: Errors = Errors.NONE  # INELIGIBLE_REPLICA, FENCED_LEADER_EPOCH, ...
    leader_id: int = -1
    leader_epoch: int = NO_EPOCH
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class LeaderAndIsrPartitionState:
    """The controller's decision for one partition (LeaderAndIsr / KRaft PartitionChangeRecord)."""

    topic: str
    partition_index: int
    leader: int  # -1 = no leader
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int = 0
    topic_id: str | None = None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A broker as the KRaft metadata image shows it; feeds ISR eligibility (SPEC (d))."""

    broker_id: int
    broker_epoch: int = -1
    fenced: bool = False
    in_controlled_shutdown: bool = False
    rack: str | None = None  # broker.rack: KIP-392's rack-aware replica selector reads it

# --- Producer id, coordinator and the classic group protocol (the wire server's own requests) -----
@dataclass(frozen=True, slots=True)
class InitProducerIdRequest:
    """`InitProducerIdRequest`: an idempotent (transactional_id None) or transactional producer asks
    for its producer id and epoch; producer_id/epoch (v3) are an existing producer's, to bump."""

    transactional_id: str | None = None
    transaction_timeout_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    version: int = 4


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    error_code: Errors = Errors.NONE
    producer_id: int = -1
    producer_epoch: int = -1
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest:
    """`FindCoordinatorRequest`. Up to v3 one `key`; v4 (KIP-699) a batch in `coordinator_keys`. The
    codec fills both ways: decoding v0-3 gives `coordinator_keys == (key,)`, v4 gives `key == ""`."""

    key: str = ""
    key_type: int = 0  # 0 group, 1 transaction
    coordinator_keys: tuple[str, ...] = ()
    version: int = 4


@dataclass(frozen=True, slots=True)
class Coordinator:
    """One coordinator answer (`FindCoordinatorResponseData.Coordinator`)."""

    key: str
    node_id: int
    host: str
    port: int
    error_code: Errors = Errors.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class FindCoordinatorResponse:
    """Up to v3 the first coordinator is encoded as the top-level fields; v4 encodes them all."""

    coordinators: tuple[Coordinator, ...]
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class JoinGroupProtocol:
    name: str
    metadata: bytes = b""


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    """`JoinGroupRequest` of the classic group protocol."""

    group_id: str
    session_timeout_ms: int
    member_id: str = ""
    protocol_type: str = "consumer"
    protocols: tuple[JoinGroupProtocol, ...] = ()
    rebalance_timeout_ms: int = -1  # v1; v0 uses the session timeout
    group_instance_id: str | None = None  # v5
    reason: str | None = None  # v8
    version: int = 7


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    metadata: bytes = b""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error_code: Errors = Errors.NONE
    generation_id: int = -1
    protocol_type: str | None = None  # v7
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[JoinGroupMember, ...] = ()
    skip_assignment: bool = False  # v9
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class SyncGroupAssignment:
    member_id: str
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    assignments: tuple[SyncGroupAssignment, ...] = ()
    group_instance_id: str | None = None  # v3
    protocol_type: str | None = None  # v5
    protocol_name: str | None = None  # v5
    version: int = 5


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error_code: Errors = Errors.NONE
    assignment: bytes = b""
    protocol_type: str | None = None  # v5
    protocol_name: str | None = None  # v5
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None  # v3
    version: int = 4


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error_code: Errors = Errors.NONE
    throttle_time_ms: int = 0


# --- SASL (the client authenticating; KIP-43 handshake, KIP-152 framed tokens) ------------------------
@dataclass(frozen=True, slots=True)
class SaslHandshakeRequest:
    mechanism: str
    version: int = 1  # v1: the tokens follow in SaslAuthenticate requests (v0: raw frames, not sent)


@dataclass(frozen=True, slots=True)
class SaslHandshakeResponse:
    error_code: Errors = Errors.NONE
    mechanisms: tuple[str, ...] = ()  # what the broker's listener enables


@dataclass(frozen=True, slots=True)
class SaslAuthenticateRequest:
    auth_bytes: bytes
    version: int = 2

    def __repr__(self) -> str:  # a PLAIN token holds the password: never in a log or a traceback
        return f"SaslAuthenticateRequest(auth_bytes=<{len(self.auth_bytes)} bytes>, version={self.version})"


@dataclass(frozen=True, slots=True)
class SaslAuthenticateResponse:
    error_code: Errors = Errors.NONE
    error_message: str | None = None
    auth_bytes: bytes = b""
    session_lifetime_ms: int = 0  # v1 (KIP-368: re-authentication, not done by this client)


@dataclass(frozen=True, slots=True)
class LeaveGroupMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None  # v5


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    """Up to v2 one member leaves (`member_id`); v3 (KIP-345) a batch. Decoding v0-2 gives one member."""

    group_id: str
    members: tuple[LeaveGroupMember, ...]
    version: int = 4


@dataclass(frozen=True, slots=True)
class LeaveGroupMemberResponse:
    member_id: str
    group_instance_id: str | None = None
    error_code: Errors = Errors.NONE


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    error_code: Errors = Errors.NONE
    members: tuple[LeaveGroupMemberResponse, ...] = ()  # v3
    throttle_time_ms: int = 0


# --- WriteTxnMarkers (transaction coordinator -> partition leaders) ---------------------------------
@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One marker to write: end `producer_id`'s transaction on one partition (flattened per partition)."""

    producer_id: int
    producer_epoch: int
    committed: bool  # TransactionResult: COMMIT (True) or ABORT
    coordinator_epoch: int
    topic: str
    partition_index: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class WriteTxnMarkersRequest:
    markers: tuple[TxnMarker, ...]
    version: int = 1


@dataclass(frozen=True, slots=True)
class WriteTxnMarkerResult:
    producer_id: int
    topic: str
    partition_index: int
    error_code: Errors = Errors.NONE

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class WriteTxnMarkersResponse:
    partitions: tuple[WriteTxnMarkerResult, ...]


# --- The transactional producer and serve's transaction coordinator --------------------------------------
@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnRequest:
    """`AddPartitionsToTxnRequest` v0-3 (the client's form): partitions the transaction writes to."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]
    version: int = 3


@dataclass(frozen=True, slots=True)
class TxnPartitionResult:
    """One partition's error in an AddPartitionsToTxn or TxnOffsetCommit answer."""

    topic: str
    partition_index: int
    error_code: Errors = Errors.NONE

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnResponse:
    partitions: tuple[TxnPartitionResult, ...]
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxnRequest:
    """`AddOffsetsToTxnRequest`: the group whose offsets the transaction will commit."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    version: int = 4


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxnResponse:
    error_code: Errors = Errors.NONE
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    """`TxnOffsetCommitRequest`, to the group coordinator; partitions as OffsetCommit's (flattened)."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[OffsetCommitPartition, ...]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    version: int = 4


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitResponse:
    partitions: tuple[TxnPartitionResult, ...]
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class EndTxnRequest:
    """`EndTxnRequest`: commit (True) or abort the producer's ongoing transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    version: int = 4


@dataclass(frozen=True, slots=True)
class EndTxnResponse:
    error_code: Errors = Errors.NONE
    throttle_time_ms: int = 0
    # v5 (KIP-890 transaction version 2): the producer id and epoch after the coordinator's bump; -1 before
    producer_id: int = -1
    producer_epoch: int = -1


# --- ListGroups / DescribeGroups / DescribeProducers (the client's half only: `epochguard watch`) ---------
@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    """`ListGroupsRequest`: every group the broker coordinates (ask each broker for all of them);
    `states_filter` (v4+) and `types_filter` (v5+) narrow it, empty: no filter."""

    states_filter: tuple[str, ...] = ()
    types_filter: tuple[str, ...] = ()
    version: int = 5


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str = ""  # "consumer" for consumer groups (classic); "" for a KIP-848 group before v5
    group_state: str = ""  # v4+: Stable, Empty, PreparingRebalance, ... ("" before)
    group_type: str = ""  # v5+: classic, consumer, share, streams ("" before)


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    groups: tuple[ListedGroup, ...] = ()
    error_code: Errors = Errors.NONE
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    """`DescribeGroupsRequest` to the groups' coordinator: each group's state and members."""

    groups: tuple[str, ...]
    version: int = 6


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error_code: Errors = Errors.NONE
    group_state: str = ""  # Empty, Stable, PreparingRebalance, CompletingRebalance, Dead
    protocol_type: str = ""
    members: tuple[str, ...] = ()  # member ids


@dataclass(frozen=True, slots=True)
class DescribeGroupsResponse:
    groups: tuple[DescribedGroup, ...] = ()
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class DescribeProducersRequest:
    """`DescribeProducersRequest` to partitions' leader (KIP-664): the producers it holds state for."""

    partitions: tuple[TopicPartition, ...]
    version: int = 0


@dataclass(frozen=True, slots=True)
class ProducerState:
    """One active producer of a partition (`DescribeProducersResponseData.ProducerState`):
    `current_txn_start_offset` the first offset of its open transaction, -1 if none."""

    producer_id: int
    producer_epoch: int
    last_sequence: int = -1
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class DescribeProducersPartition:
    topic: str
    partition_index: int
    error_code: Errors = Errors.NONE
    error_message: str | None = None
    active_producers: tuple[ProducerState, ...] = ()

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition_index)


@dataclass(frozen=True, slots=True)
class DescribeProducersResponse:
    partitions: tuple[DescribeProducersPartition, ...] = ()
    throttle_time_ms: int = 0


Request = (
    ApiVersionsRequest
    | ProduceRequest
    | FetchRequest
    | OffsetsForLeaderEpochRequest
    | ListOffsetsRequest
    | MetadataRequest
    | OffsetCommitRequest
    | OffsetFetchRequest
    | AlterPartitionRequest
    | WriteTxnMarkersRequest
    | InitProducerIdRequest
    | FindCoordinatorRequest
    | JoinGroupRequest
    | SyncGroupRequest
    | HeartbeatRequest
    | LeaveGroupRequest
    | AddPartitionsToTxnRequest
    | AddOffsetsToTxnRequest
    | TxnOffsetCommitRequest
    | EndTxnRequest
    | ListGroupsRequest
    | DescribeGroupsRequest
    | DescribeProducersRequest
)
Response = (
    ApiVersionsResponse
    | ProduceResponse
    | FetchResponse
    | OffsetsForLeaderEpochResponse
    | ListOffsetsResponse
    | MetadataResponse
    | OffsetCommitResponse
    | OffsetFetchResponse
    | AlterPartitionResponse
    | WriteTxnMarkersResponse
    | InitProducerIdResponse
    | FindCoordinatorResponse
    | JoinGroupResponse
    | SyncGroupResponse
    | HeartbeatResponse
    | LeaveGroupResponse
    | AddPartitionsToTxnResponse
    | AddOffsetsToTxnResponse
    | TxnOffsetCommitResponse
    | EndTxnResponse
    | ListGroupsResponse
    | DescribeGroupsResponse
    | DescribeProducersResponse
)

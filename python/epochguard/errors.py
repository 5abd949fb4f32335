"""The one exception hierarchy users import, and Kafka's error codes. Everything derives from `EpochGuardError`.

Mirrors `org.apache.kafka.common.protocol.Errors` (codes by their real numbers), the `ApiException`s in
`org.apache.kafka.common.errors` (`RetriableException` -> the `retriable` attribute), and the client-side
`OffsetOutOfRangeException`, `LogTruncationException`, `NoOffsetForPartitionException`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import ClassVar

from epochguard._core import CheckpointError, CorruptFrameError, CorruptRecordError, EpochGuardError, RequestHeader
from epochguard.types import OffsetAndMetadata, TopicPartition

__all__ = [
    "EpochGuardError",
    "BufferExhaustedError",
    "RecordTooLargeError",
    "CorruptRecordError",
    "CheckpointError",
    "CorruptFrameError",
    "MalformedFileError",
    "ArrowSchemaError",
    "KafkaConnectionError",
    "FrameTooLargeError",
    "KafkaTimeoutError",
    "ClientClosedError",
    "CommitFailedError",
    "IllegalStateError",
    "ProducerFencedError",
    "InvalidTxnStateError",
    "TransactionalIdAuthorizationFailedError",
    "TransactionAbortableError",
    "Errors",
    "ApiError",
    "UnknownServerError",
    "OffsetOutOfRangeError",
    "LogTruncationError",
    "NoOffsetForPartitionError",
    "UnknownTopicOrPartitionError",
    "LeaderNotAvailableError",
    "NotLeaderOrFollowerError",
    "RequestTimedOutError",
    "UnknownTopicIdError",
    "InconsistentTopicIdError",
    "ReplicaNotAvailableError",
    "NotEnoughReplicasError",
    "NotEnoughReplicasAfterAppendError",
    "TopicAuthorizationFailedError",
    "KafkaStorageError",
    "FencedLeaderEpochError",
    "UnknownLeaderEpochError",
    "OffsetNotAvailableError",
    "IneligibleReplicaError",
    "OutOfOrderSequenceError",
    "InvalidProducerEpochError",
    "UnsupportedVersionError",
    "AuthenticationError",
    "SslAuthenticationError",
    "SaslAuthenticationError",
    "UnsupportedSaslMechanismError",
    "IllegalSaslStateError",
]


class MalformedFileError(EpochGuardError, ValueError):
    """A Kafka log-dir file that does not parse (meta.properties, an offset checkpoint,
    partition.metadata, a leader-epoch-checkpoint, a segment name): `path`, the 1-based `line` (0 for
    the file as a whole) and the `reason`. A `ValueError` too, as the file's content is the bad value."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}" + (f" line {line}" if line else "") + f": {reason}")
        self.path, self.line, self.reason = str(path), line, reason


class ArrowSchemaError(EpochGuardError, TypeError):
    """An Arrow input whose columns have the wrong types (or lack one that is needed), e.g. the table
    given to `KafkaProducer.send_arrow`: `column` names it, `reason` says what was expected."""

    def __init__(self, message: str, column: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.column, self.reason = column, reason


class ApiError(EpochGuardError):
    """An error a broker answers with (Kafka's `ApiException`). `retriable` as in `RetriableException`."""

    code: ClassVar[Errors]
    retriable: ClassVar[bool] = False


class UnknownServerError(ApiError):
    retriable = False


class OffsetOutOfRangeError(ApiError):
    """The fetch offset is outside the log, and the reset policy is `none` (or the broker said so).

    `offset_out_of_range_partitions`: the offset that was out of range, per partition.
    """

    retriable = False

    def __init__(self, message: str = "", offset_out_of_range_partitions: Mapping[TopicPartition, int] | None = None):
        super().__init__(message or "offset out of range")
        self.offset_out_of_range_partitions: dict[TopicPartition, int] = dict(offset_out_of_range_partitions or {})


class LogTruncationError(OffsetOutOfRangeError):
    """The log was truncated below the consumer's position (detected by KIP-320 validation, policy `none`).

    `offset_out_of_range_partitions`: the position offset of every truncated partition.
    `divergent_offsets`: per truncated partition whose divergence point is known, the first offset (and
    its epoch) the consumer's log and the leader's no longer share. A partition whose leader could not
    say (its answer was undefined) is in `offset_out_of_range_partitions` only, as in Kafka.
    """

    def __init__(
        self,
        message: str = "",
        offset_out_of_range_partitions: Mapping[TopicPartition, int] | None = None,
        divergent_offsets: Mapping[TopicPartition, OffsetAndMetadata | None] | None = None,
    ):
        divergent = dict(divergent_offsets or {})
        if not message:
            message = "log truncation detected: " + ", ".join(
                f"{tp} at {off} (divergent {divergent.get(tp)})"
                for tp, off in sorted((offset_out_of_range_partitions or {}).items())
            )
        super().__init__(message, offset_out_of_range_partitions)
        self.divergent_offsets: dict[TopicPartition, OffsetAndMetadata | None] = divergent


class NoOffsetForPartitionError(EpochGuardError):
    """No position and no committed offset, and the reset policy is `none`."""

    retriable: ClassVar[bool] = False

    def __init__(self, partitions: set[TopicPartition]):
        super().__init__(f"undefined offset with no reset policy for partitions: {sorted(partitions)}")
        self.partitions = set(partitions)


class UnknownTopicOrPartitionError(ApiError):
    retriable = True


class LeaderNotAvailableError(ApiError):
    retriable = True


class NotLeaderOrFollowerError(ApiError):
    retriable = True


class RequestTimedOutError(ApiError):
    retriable = True


class UnknownTopicIdError(ApiError):
    """A Fetch v13+ named a topic id the broker's metadata does not know (Kafka's `UnknownTopicIdException`,
    an `InvalidMetadataException`: refresh metadata and retry)."""

    retriable = True


class InconsistentTopicIdError(ApiError):
    """The topic id in a request differs from the one in the partition's log (`InconsistentTopicIdException`,
    an `InvalidMetadataException`)."""

    retriable = True


class ReplicaNotAvailableError(ApiError):
    retriable = True


class NotEnoughReplicasError(ApiError):
    """acks=all and the ISR is smaller than min.insync.replicas: nothing was appended."""

    retriable = True


class NotEnoughReplicasAfterAppendError(ApiError):
    """acks=all: appended, but the ISR shrank below min.insync.replicas before it was replicated."""

    retriable = True


class TopicAuthorizationFailedError(ApiError):
    retriable = False


class KafkaStorageError(ApiError):
    retriable = True


class FencedLeaderEpochError(ApiError):
    """The request's leader epoch is older than the broker's: the sender's metadata is stale."""

    retriable = True


class UnknownLeaderEpochError(ApiError):
    """The request's leader epoch is newer than the broker's: the broker has not caught up yet."""

    retriable = True


class OffsetNotAvailableError(ApiError):
    """KIP-207: the new leader's high watermark has not caught up with its epoch start offset yet."""

    retriable = True


class IneligibleReplicaError(ApiError):
    """The controller refused an ISR expansion (the replica is fenced, shutting down, or stale)."""

    retriable = False


class OutOfOrderSequenceError(ApiError):
    """An idempotent producer's batch does not follow its last sequence on the leader (Kafka's
    `OutOfOrderSequenceException`): a batch before it was lost, or the leader lost the producer's
    state (an unclean election). `producer_id`, `sequence` (the batch's first) and `expected`."""

    retriable = False

    def __init__(self, message: str, producer_id: int = -1, sequence: int = -1, expected: int = -1) -> None:
        super().__init__(message)
        self.producer_id, self.sequence, self.expected = producer_id, sequence, expected


class InvalidProducerEpochError(ApiError):
    """A producer's batch carries an epoch older than the leader's last for that producer (Kafka's
    `InvalidProducerEpochException`): a zombie instance of a producer whose epoch was bumped."""

    retriable = False


class ProducerFencedError(ApiError):
    """Another producer with the same transactional id has initialized since (Kafka's
    `ProducerFencedException`, PRODUCER_FENCED; INVALID_PRODUCER_EPOCH from a transaction coordinator
    too): this producer can do nothing more but close."""

    retriable = False


class InvalidTxnStateError(ApiError):
    """The transaction coordinator refused a step out of order (INVALID_TXN_STATE)."""

    retriable = False


class TransactionalIdAuthorizationFailedError(ApiError):
    """The producer may not use its transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""

    retriable = False


class TransactionAbortableError(ApiError):
    """The transaction cannot commit and must be aborted (Kafka's `TransactionAbortableException`,
    TRANSACTION_ABORTABLE; raised too, with the cause's text, for any error that left the ongoing
    transaction abortable: a failed batch, a refused partition)."""

    retriable = False


class UnsupportedVersionError(ApiError):
    """No API version both sides support (Kafka's `UnsupportedVersionException`): a broker answers a
    request version it does not serve with this code, and a client finds no usable version.

    `header`: raised by the wire codec for a request frame it does not decode (an unknown API key or
    version), the frame's parsed `RequestHeader`, so the server can answer (ApiVersions) or close.
    """

    retriable = False
    header: RequestHeader | None = None


class AuthenticationError(EpochGuardError):
    """A connection could not authenticate (Kafka's `AuthenticationException`): not retried in a loop;
    the consumer's `poll` (and `commit`, `position`...) and the producer's `send`/`flush` raise it, and
    the broker is tried again only after its reconnect back-off, when the application calls again."""

    retriable: ClassVar[bool] = False


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake failed: the broker's certificate is not trusted or does not name the host, the
    broker does not speak TLS there, or it refused ours (Kafka's `SslAuthenticationException`)."""


class KafkaConnectionError(EpochGuardError, ConnectionError):
    """A broker connection failed or was closed (refused, reset, closed mid-frame, an answer that does
    not parse, a size prefix above the client's bound): its in-flight requests fail and are retried by
    whoever sent them after the back-off (Kafka's `DisconnectException`)."""

    retriable = True


class FrameTooLargeError(KafkaConnectionError):
    """A response's size prefix is negative or above the client's bound: the connection is closed
    before anything of that size is allocated (Kafka's `InvalidReceiveException`)."""


class KafkaTimeoutError(EpochGuardError, TimeoutError):
    """No answer within `request_timeout_ms` (the connection is closed, as Kafka's `NetworkClient`
    does), or an application call that could not complete in its time limit."""

    retriable = True


class BufferExhaustedError(KafkaTimeoutError):
    """A producer's `send` waited `max_block_ms` for room in its `buffer_memory` (records sent and not
    yet answered) and found none (Java's `BufferExhaustedException`, a `TimeoutException`)."""


class RecordTooLargeError(EpochGuardError, ValueError):
    """A record larger than the producer's `buffer_memory` could never be buffered (Java's
    `RecordTooLargeException` from `KafkaProducer.ensureValidRecordSize`)."""

    retriable = False


class ClientClosedError(EpochGuardError, RuntimeError):
    """A call on a consumer or producer after `close()` (Kafka's `IllegalStateException`)."""


class IllegalStateError(EpochGuardError, RuntimeError):
    """A call the producer's transaction state does not allow (Kafka's `IllegalStateException`):
    `send` outside a transaction, `commit_transaction` before `begin_transaction`, ..."""


class CommitFailedError(EpochGuardError):
    """A synchronous commit the coordinator refused (`CommitFailedException` and the per-partition
    errors of OffsetCommit), with the error of each partition in `errors`."""

    def __init__(self, message: str, errors: Mapping[TopicPartition, Errors] | None = None) -> None:
        super().__init__(message)
        self.errors = dict(errors or {})


class Errors(enum.IntEnum):
    """Kafka error codes (`org.apache.kafka.common.protocol.Errors`), the ones these flows use."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    REPLICA_NOT_AVAILABLE = 9
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PRODUCER_FENCED = 90
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_TOPIC_ID = 103
    INELIGIBLE_REPLICA = 107
    INVALID_UPDATE_VERSION = 108
    TRANSACTION_ABORTABLE = 120

    @property
    def exception_class(self) -> type[ApiError] | None:
        return _EXCEPTIONS.get(self)

    @property
    def retriable(self) -> bool:
        cls = _EXCEPTIONS.get(self)
        return cls is not None and cls.retriable

    def exception(self, message: str = "") -> ApiError | None:
        """The exception for this code (None for NONE)."""
        cls = _EXCEPTIONS.get(self)
        return None if cls is None else cls(message or self.name)

    @classmethod
    def for_code(cls, code: int) -> Errors:
        """The member for a wire code; unknown codes map to UNKNOWN_SERVER_ERROR, as Kafka's `Errors.forCode`."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN_SERVER_ERROR


class SaslAuthenticationError(ApiError, AuthenticationError):
    """SASL authentication failed (SASL_AUTHENTICATION_FAILED, Kafka's `SaslAuthenticationException`):
    the broker refused the credentials (its message is in the text, after the mechanism), or the
    broker's own SCRAM messages did not check out (wrong nonce, server signature, iteration count)."""

    retriable = False

    def __init__(self, message: str, mechanism: str = "") -> None:
        super().__init__(message)
        self.mechanism = mechanism


class UnsupportedSaslMechanismError(ApiError, AuthenticationError):
    """The broker's listener does not enable the mechanism asked for (UNSUPPORTED_SASL_MECHANISM);
    `enabled_mechanisms` is what it offers (Kafka's `UnsupportedSaslMechanismException`)."""

    retriable = False

    def __init__(self, message: str, mechanism: str = "", enabled_mechanisms: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.mechanism = mechanism
        self.enabled_mechanisms = tuple(enabled_mechanisms)


class IllegalSaslStateError(ApiError, AuthenticationError):
    """A SASL request out of order (ILLEGAL_SASL_STATE, Kafka's `IllegalSaslStateException`)."""

    retriable = False


_EXCEPTIONS: dict[Errors, type[ApiError]] = {
    Errors.UNKNOWN_SERVER_ERROR: UnknownServerError,
    Errors.OFFSET_OUT_OF_RANGE: OffsetOutOfRangeError,
    Errors.UNKNOWN_TOPIC_OR_PARTITION: UnknownTopicOrPartitionError,
    Errors.LEADER_NOT_AVAILABLE: LeaderNotAvailableError,
    Errors.NOT_LEADER_OR_FOLLOWER: NotLeaderOrFollowerError,
    Errors.REQUEST_TIMED_OUT: RequestTimedOutError,
    Errors.UNKNOWN_TOPIC_ID: UnknownTopicIdError,
    Errors.INCONSISTENT_TOPIC_ID: InconsistentTopicIdError,
    Errors.REPLICA_NOT_AVAILABLE: ReplicaNotAvailableError,
    Errors.NOT_ENOUGH_REPLICAS: NotEnoughReplicasError,
    Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND: NotEnoughReplicasAfterAppendError,
    Errors.TOPIC_AUTHORIZATION_FAILED: TopicAuthorizationFailedError,
    Errors.KAFKA_STORAGE_ERROR: KafkaStorageError,
    Errors.FENCED_LEADER_EPOCH: FencedLeaderEpochError,
    Errors.UNKNOWN_LEADER_EPOCH: UnknownLeaderEpochError,
    Errors.OFFSET_NOT_AVAILABLE: OffsetNotAvailableError,
    Errors.INELIGIBLE_REPLICA: IneligibleReplicaError,
    Errors.OUT_OF_ORDER_SEQUENCE_NUMBER: OutOfOrderSequenceError,
    Errors.INVALID_PRODUCER_EPOCH: InvalidProducerEpochError,
    Errors.UNSUPPORTED_VERSION: UnsupportedVersionError,
    Errors.PRODUCER_FENCED: ProducerFencedError,
    Errors.INVALID_TXN_STATE: InvalidTxnStateError,
    Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: TransactionalIdAuthorizationFailedError,
    Errors.TRANSACTION_ABORTABLE: TransactionAbortableError,
    Errors.UNSUPPORTED_SASL_MECHANISM: UnsupportedSaslMechanismError,
    Errors.ILLEGAL_SASL_STATE: IllegalSaslStateError,
    Errors.SASL_AUTHENTICATION_FAILED: SaslAuthenticationError,
}
for _code, _cls in _EXCEPTIONS.items():
    _cls.code = _code
del _code, _cls

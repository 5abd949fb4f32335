"""epochguard: Kafka's leader-epoch protocol (KIP-101, KIP-320, KIP-232, KIP-207) for Python and Spark.

The curated API: each function has one name, here and in its module. Subsystems have their own
modules: `epochguard.records` (the rest of the codec),
`epochguard.protocol.messages` (request/response dataclasses), `epochguard.sim` (cluster simulator) and
`epochguard.spark` (the truncation audit; needs the `spark` extra).
"""

from epochguard._core import (
    LeaderEpochCache,
    __version__,
    batch_index,
    divergence_point,
    divergence_points,
    encode_batch,
    find_diverging_epoch,
    iter_batches,
    truncation_offset,
)
from epochguard.broker.fetcher import ReplicaFetcher
from epochguard.broker.partition import Partition
from epochguard.broker.replica_manager import ReplicaManager
from epochguard.client.consumer import Consumer
from epochguard.client.metadata import ClientMetadata
from epochguard.errors import (
    CheckpointError,
    CorruptRecordError,
    EpochGuardError,
    Errors,
    FencedLeaderEpochError,
    LogTruncationError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from epochguard.records import decode_to_arrow
from epochguard.storage.log import PartitionLog
from epochguard.types import (
    ConsumerRecord,
    ConsumerRecords,
    FetchPosition,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)

__all__ = [
    "__version__",
    # core: epochs, divergence, bytes
    "LeaderEpochCache",
    "find_diverging_epoch",
    "truncation_offset",
    "divergence_point",
    "divergence_points",
    "iter_batches",
    "batch_index",
    "encode_batch",
    "decode_to_arrow",
    # public types
    "TopicPartition",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "ConsumerRecord",
    "ConsumerRecords",
    "FetchPosition",
    # sans-IO state machines
    "PartitionLog",
    "Partition",
    "ReplicaManager",
    "ReplicaFetcher",
    "Consumer",
    "ClientMetadata",
    # errors
    "EpochGuardError",
    "CorruptRecordError",
    "CheckpointError",
    "Errors",
    "OffsetOutOfRangeError",
    "LogTruncationError",
    "FencedLeaderEpochError",
    "UnknownLeaderEpochError",
    "OffsetNotAvailableError",
    "NotLeaderOrFollowerError",
]

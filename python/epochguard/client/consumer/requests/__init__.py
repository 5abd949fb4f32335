"""The consumer's request managers, one per concern, each owning its in-flight requests and handlers:
`ApiVersionsManager`, `MetadataManager`, `CommitManager` (OffsetFetch, OffsetCommit), `OffsetsManager`
(ListOffsets resets and lookups), `ValidationManager` (OffsetsForLeaderEpoch), `FetchManager`."""

from epochguard.client.consumer.requests.api_versions import ApiVersionsManager
from epochguard.client.consumer.requests.base import (
    ClientRequest,
    ClientResponse,
    ConsumerContext,
    RequestManager,
)
from epochguard.client.consumer.requests.commits import CommitManager
from epochguard.client.consumer.requests.fetch import FetchManager
from epochguard.client.consumer.requests.metadata import MetadataManager
from epochguard.client.consumer.requests.offsets import OffsetsForTimesLookup, OffsetsManager
from epochguard.client.consumer.requests.validation import ValidationManager

__all__ = [
    "ApiVersionsManager",
    "ClientRequest",
    "ClientResponse",
    "CommitManager",
    "ConsumerContext",
    "FetchManager",
    "MetadataManager",
    "OffsetsForTimesLookup",
    "OffsetsManager",
    "RequestManager",
    "ValidationManager",
]

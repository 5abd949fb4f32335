"""Which API versions a broker serves, from both sides of the wire: the one model of it.

Mirrors `org.apache.kafka.common.protocol.ApiKeys` (the keys, by their real numbers),
`org.apache.kafka.clients.NodeApiVersions` (what a client learned from one broker's ApiVersions
answer, and the latest version both sides can use) and the broker's `ApiVersionsResponse` (the table
the broker answers with). The simulated brokers answer ApiVersions from `BROKER_API_VERSIONS`, on
the wire and in the simulator alike, and clients decide what to send from the `NodeApiVersions` they
hold for that broker: for example a consumer validates positions only against brokers whose
OffsetForLeaderEpoch reaches v3 (`has_usable_offset_for_leader_epoch_version`, SPEC (e)).

An ApiVersions answer (v3+) also carries the cluster's finalized feature levels (KIP-584), kept with
the ranges as Java's `ApiVersions.FinalizedFeaturesInfo`: a producer uses KIP-890's transaction
version 2 only where `transaction.version` is finalized at 2 or more (`TRANSACTION_VERSION`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from epochguard.errors import Errors, UnsupportedVersionError

__all__ = [
    "ApiKey",
    "ApiVersionRange",
    "NodeApiVersions",
    "BROKER_API_VERSIONS",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "answer_api_versions",
    "has_usable_offset_for_leader_epoch_version",
    "TRANSACTION_VERSION",
]

TRANSACTION_VERSION = "transaction.version"  # the feature KIP-890's transaction version 2 is finalized by


class ApiKey(enum.IntEnum):
    """The request kinds these flows use, numbered as on the wire (`ApiKeys`)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    SASL_AUTHENTICATE = 36
    ALTER_PARTITION = 56
    DESCRIBE_PRODUCERS = 61


@dataclass(frozen=True, slots=True)
class ApiVersionRange:
    """One entry of an ApiVersions answer (`ApiVersionsResponseData.ApiVersion`); versions inclusive."""

    api_key: int
    min_version: int
    max_version: int

    def __post_init__(self) -> None:
        if not 0 <= self.min_version <= self.max_version:
            raise ValueError(f"bad version range [{self.min_version}, {self.max_version}] for api key {self.api_key}")

    def intersect(self, oldest: int, latest: int) -> ApiVersionRange | None:
        """The versions in both ranges, or None (`ApiVersionsResponse.intersect`)."""
        low, high = max(self.min_version, oldest), min(self.max_version, latest)
        return ApiVersionRange(self.api_key, low, high) if low <= high else None


class NodeApiVersions:
    """The API versions one broker supports, as a client learned them (`NodeApiVersions`).

    Keys the client does not know are kept (an ApiVersions answer lists every key the broker has) but
    never chosen. `finalized_features` (feature name -> finalized max level) and its epoch as the broker
    answered them (v3+; empty and -1 before). Immutable; equality is on the set of ranges.
    """

    __slots__ = ("_ranges", "finalized_features", "finalized_features_epoch")

    def __init__(self, ranges: Iterable[ApiVersionRange], finalized_features: Mapping[str, int] | None = None,
                 finalized_features_epoch: int = -1) -> None:
        table: dict[int, ApiVersionRange] = {}
        for r in ranges:
            if r.api_key in table:
                raise ValueError(f"api key {r.api_key} listed twice")
            table[r.api_key] = r
        self._ranges = table
        self.finalized_features: Mapping[str, int] = dict(finalized_features or {})
        self.finalized_features_epoch = finalized_features_epoch

    def feature_level(self, name: str) -> int:
        """The finalized level of feature `name`, 0 if the broker finalized none (Kafka's default)."""
        return self.finalized_features.get(name, 0)

    def version_range(self, api_key: int) -> ApiVersionRange | None:
        """The broker's range for `api_key`, or None if it does not serve that API."""
        return self._ranges.get(api_key)

    def supports(self, api_key: int, version: int) -> bool:
        r = self._ranges.get(api_key)
        return r is not None and r.min_version <= version <= r.max_version

    def latest_usable_version(self, api_key: int, oldest: int = 0, latest: int = 0x7FFF) -> int:
        """The newest version in both the broker's range and [oldest, latest].

        Raises `UnsupportedVersionError` when the broker lacks the API or the ranges do not meet,
        with the broker's range in the message (as Kafka's `latestUsableVersion`).
        """
        r = self._ranges.get(api_key)
        if r is None:
            raise UnsupportedVersionError(f"the broker does not support {_name(api_key)}")
        both = r.intersect(oldest, latest)
        if both is None:
            raise UnsupportedVersionError(
                f"the broker does not support {_name(api_key)} with version in range [{oldest},{latest}]; "
                f"the supported range is [{r.min_version},{r.max_version}]"
            )
        return both.max_version

    def with_range(self, api_key: int, min_version: int, max_version: int) -> NodeApiVersions:
        """A copy with `api_key` served at [min_version, max_version] (e.g. an older broker)."""
        return NodeApiVersions([*(r for k, r in self._ranges.items() if k != api_key),
                                ApiVersionRange(api_key, min_version, max_version)],
                               self.finalized_features, self.finalized_features_epoch)

    def without(self, api_key: int) -> NodeApiVersions:
        """A copy that does not serve `api_key` at all."""
        return NodeApiVersions((r for k, r in self._ranges.items() if k != api_key), self.finalized_features,
                               self.finalized_features_epoch)

    def with_features(self, features: Mapping[str, int], epoch: int = 0) -> NodeApiVersions:
        """A copy whose broker finalized `features` (name -> level) at `epoch`."""
        return NodeApiVersions(self, features, epoch)

    def __iter__(self) -> Iterator[ApiVersionRange]:
        return iter(sorted(self._ranges.values(), key=lambda r: r.api_key))

    def __len__(self) -> int:
        return len(self._ranges)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NodeApiVersions) and self._ranges == other._ranges

    def __hash__(self) -> int:
        return hash(frozenset(self._ranges.values()))

    def __repr__(self) -> str:
        body = ", ".join(f"{_name(r.api_key)}({r.api_key}): {r.min_version} to {r.max_version}" for r in self)
        return f"NodeApiVersions({body})"


def _name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api key {api_key}"


def has_usable_offset_for_leader_epoch_version(versions: NodeApiVersions) -> bool:
    """OffsetForLeaderEpoch v3 or newer (`ConsumerUtils.hasUsableOffsetForLeaderEpochVersion`).

    v2 and older carry no ReplicaId, so Kafka's consumer marks a position fetchable without
    validating it against such a broker; a broker without the API cannot validate either.
    """
    r = versions.version_range(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    return r is not None and r.max_version >= 3


# What the simulated broker serves: the versions the real clients we test send (librdkafka 2.x,
# kafka-python 3, aiokafka, kcat), each range starting at the oldest version they fall back to.
# Metadata reaches 12 because librdkafka and kafka-python ignore leader epochs below v9. Fetch reaches
# 16 and Produce 10 as Kafka 4.x brokers' do (Fetch 4-17, Produce 3-12): the versions that carry KIP-951's
# leader hints (CurrentLeader and NodeEndpoints), which Java 4.x, franz-go and librdkafka 2.4+ act on;
# Fetch v13+ names topics by id (KIP-516, from Metadata v10+).
BROKER_API_VERSIONS = NodeApiVersions([
    ApiVersionRange(ApiKey.PRODUCE, 3, 10),
    ApiVersionRange(ApiKey.FETCH, 4, 16),
    ApiVersionRange(ApiKey.LIST_OFFSETS, 1, 7),
    ApiVersionRange(ApiKey.METADATA, 0, 12),
    ApiVersionRange(ApiKey.OFFSET_COMMIT, 2, 8),
    ApiVersionRange(ApiKey.OFFSET_FETCH, 1, 8),
    ApiVersionRange(ApiKey.FIND_COORDINATOR, 0, 4),
    ApiVersionRange(ApiKey.JOIN_GROUP, 0, 7),
    ApiVersionRange(ApiKey.HEARTBEAT, 0, 4),
    ApiVersionRange(ApiKey.LEAVE_GROUP, 0, 4),
    ApiVersionRange(ApiKey.SYNC_GROUP, 0, 5),
    ApiVersionRange(ApiKey.API_VERSIONS, 0, 3),
    ApiVersionRange(ApiKey.INIT_PRODUCER_ID, 0, 4),
    ApiVersionRange(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4),
    ApiVersionRange(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 3),
    ApiVersionRange(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4),
    ApiVersionRange(ApiKey.END_TXN, 0, 4),
    ApiVersionRange(ApiKey.TXN_OFFSET_COMMIT, 0, 4),
])


@dataclass(frozen=True, slots=True)
class ApiVersionsRequest:
    """`ApiVersionsRequest`; the client software name and version are sent from v3 on."""

    client_software_name: str = ""
    client_software_version: str = ""
    version: int = 3


@dataclass(frozen=True, slots=True)
class ApiVersionsResponse:
    """`ApiVersionsResponse`: every API the broker serves, with its version range."""

    api_keys: tuple[ApiVersionRange, ...]
    error_code: Errors = Errors.NONE
    throttle_time_ms: int = 0
    version: int = 3
    finalized_features: tuple[tuple[str, int], ...] = ()  # v3+: (name, max version level)
    finalized_features_epoch: int = -1

    @property
    def node_api_versions(self) -> NodeApiVersions:
        return NodeApiVersions(self.api_keys, dict(self.finalized_features), self.finalized_features_epoch)


def answer_api_versions(
    request: ApiVersionsRequest, served: NodeApiVersions = BROKER_API_VERSIONS
) -> ApiVersionsResponse:
    """The broker's answer (`KafkaApis.handleApiVersionsRequest`).

    A request version the broker does not serve is answered at v0 with UNSUPPORTED_VERSION and only
    the ApiVersions range, so the client can retry at a version both sides know
    (`ApiVersionsRequest.getErrorResponse`).
    """
    own = served.version_range(ApiKey.API_VERSIONS)
    if own is None:
        raise ValueError("a broker's API table must include ApiVersions")
    if not served.supports(ApiKey.API_VERSIONS, request.version):
        return ApiVersionsResponse((own,), Errors.UNSUPPORTED_VERSION, version=0)
    return ApiVersionsResponse(tuple(served), version=request.version)

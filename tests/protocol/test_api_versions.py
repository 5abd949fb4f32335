"""The broker API-version model, after Kafka's `NodeApiVersionsTest` and `ApiVersionsRequestTest`."""

from __future__ import annotations

import pytest

from epochguard.errors import EpochGuardError, Errors, UnsupportedVersionError
from epochguard.protocol.api_versions import (
    BROKER_API_VERSIONS,
    ApiKey,
    ApiVersionRange,
    ApiVersionsRequest,
    NodeApiVersions,
    answer_api_versions,
    has_usable_offset_for_leader_epoch_version,
)

FETCH_1_TO_5 = NodeApiVersions([ApiVersionRange(ApiKey.FETCH, 1, 5), ApiVersionRange(ApiKey.API_VERSIONS, 0, 3)])


def test_latest_usable_version_is_the_top_of_the_intersection() -> None:
    assert FETCH_1_TO_5.latest_usable_version(ApiKey.FETCH) == 5
    assert FETCH_1_TO_5.latest_usable_version(ApiKey.FETCH, 0, 3) == 3
    assert FETCH_1_TO_5.latest_usable_version(ApiKey.FETCH, 5, 12) == 5  # touching at one version
    assert FETCH_1_TO_5.latest_usable_version(ApiKey.FETCH, 0, 1) == 1


@pytest.mark.parametrize(("oldest", "latest"), [(6, 12), (0, 0)])
def test_ranges_that_do_not_meet_are_unsupported_with_the_broker_range(oldest: int, latest: int) -> None:
    with pytest.raises(UnsupportedVersionError, match=r"supported range is \[1,5\]"):
        FETCH_1_TO_5.latest_usable_version(ApiKey.FETCH, oldest, latest)


def test_an_api_the_broker_lacks_is_unsupported() -> None:
    with pytest.raises(UnsupportedVersionError, match="OFFSET_FOR_LEADER_EPOCH"):
        FETCH_1_TO_5.latest_usable_version(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    assert FETCH_1_TO_5.version_range(ApiKey.OFFSET_FOR_LEADER_EPOCH) is None
    # typed, in the one hierarchy, with Kafka's code
    assert issubclass(UnsupportedVersionError, EpochGuardError)
    assert Errors.UNSUPPORTED_VERSION == 35 and Errors(35).exception_class is UnsupportedVersionError


def test_supports_is_inclusive_at_both_ends() -> None:
    assert [v for v in range(8) if FETCH_1_TO_5.supports(ApiKey.FETCH, v)] == [1, 2, 3, 4, 5]
    assert not FETCH_1_TO_5.supports(ApiKey.PRODUCE, 3)


def test_bad_tables_are_refused() -> None:
    with pytest.raises(ValueError, match="bad version range"):
        ApiVersionRange(ApiKey.FETCH, 5, 4)
    with pytest.raises(ValueError, match="listed twice"):
        NodeApiVersions([ApiVersionRange(ApiKey.FETCH, 0, 1), ApiVersionRange(ApiKey.FETCH, 2, 3)])


def test_copies_change_one_api_only() -> None:
    old = BROKER_API_VERSIONS.with_range(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 2)
    assert old.version_range(ApiKey.OFFSET_FOR_LEADER_EPOCH) == ApiVersionRange(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 2)
    assert old.version_range(ApiKey.FETCH) == BROKER_API_VERSIONS.version_range(ApiKey.FETCH)
    assert old != BROKER_API_VERSIONS and len(old) == len(BROKER_API_VERSIONS)
    assert BROKER_API_VERSIONS.without(ApiKey.FETCH).version_range(ApiKey.FETCH) is None
    assert NodeApiVersions(list(BROKER_API_VERSIONS)) == BROKER_API_VERSIONS


@pytest.mark.parametrize(("max_version", "usable"), [(4, True), (3, True), (2, False), (0, False)])
def test_validation_needs_offset_for_leader_epoch_v3(max_version: int, usable: bool) -> None:
    """`ConsumerUtils.hasUsableOffsetForLeaderEpochVersion`: v3 is the first with ReplicaId."""
    versions = BROKER_API_VERSIONS.with_range(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, max_version)
    assert has_usable_offset_for_leader_epoch_version(versions) is usable
    assert not has_usable_offset_for_leader_epoch_version(BROKER_API_VERSIONS.without(ApiKey.OFFSET_FOR_LEADER_EPOCH))


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_broker_answers_its_table_at_the_request_version(version: int) -> None:
    answer = answer_api_versions(ApiVersionsRequest("librdkafka", "2.16.0", version=version))
    assert answer.error_code == Errors.NONE and answer.version == version
    assert answer.node_api_versions == BROKER_API_VERSIONS


def test_broker_answers_an_unknown_version_at_v0_with_its_own_range() -> None:
    """Clients send their newest ApiVersions first and fall back on UNSUPPORTED_VERSION (KIP-511)."""
    answer = answer_api_versions(ApiVersionsRequest(version=4))
    assert (answer.error_code, answer.version) == (Errors.UNSUPPORTED_VERSION, 0)
    assert answer.api_keys == (ApiVersionRange(ApiKey.API_VERSIONS, 0, 3),)


def test_the_served_table_covers_what_the_real_clients_send() -> None:
    """The wire issue's list: Metadata up to 12 (epochs trusted from 9), Fetch 4-16 and Produce 3-10 (KIP-951's
    leader hints; Fetch v13+ by topic id), ListOffsets 1-7 (OFFSET_NOT_AVAILABLE from 5), OffsetForLeaderEpoch
    2-4 (librdkafka sends only v2); the transaction coordinator's APIs at transaction version 1."""
    expected = {ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (0, 12), ApiKey.PRODUCE: (3, 10), ApiKey.FETCH: (4, 16),
                ApiKey.LIST_OFFSETS: (1, 7), ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4), ApiKey.INIT_PRODUCER_ID: (0, 4),
                ApiKey.FIND_COORDINATOR: (0, 4), ApiKey.OFFSET_COMMIT: (2, 8), ApiKey.OFFSET_FETCH: (1, 8),
                ApiKey.JOIN_GROUP: (0, 7), ApiKey.SYNC_GROUP: (0, 5), ApiKey.HEARTBEAT: (0, 4), ApiKey.LEAVE_GROUP: (0, 4),
                ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3), ApiKey.ADD_OFFSETS_TO_TXN: (0, 4), ApiKey.END_TXN: (0, 4),
                ApiKey.TXN_OFFSET_COMMIT: (0, 4)}
    assert {ApiKey(r.api_key): (r.min_version, r.max_version) for r in BROKER_API_VERSIONS} == expected

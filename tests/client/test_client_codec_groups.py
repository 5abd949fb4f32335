"""The client-only APIs of `epochguard watch` (ListGroups, DescribeGroups, DescribeProducers) in the client's half
of the codec, against kafka-python's classes generated from Kafka's JSON schemas: every request we encode parses
with kafka-python's request class field for field, and every answer kafka-python encodes reads back, at every
version the schemas list (ListGroups 0-5, DescribeGroups 0-6, DescribeProducers 0); a field reads back only from
the version that has it."""

from __future__ import annotations

import struct

import pytest

from epochguard import _core
from epochguard.errors import Errors
from epochguard.protocol.api_versions import ApiKey
from epochguard.protocol.messages import (
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeProducersPartition,
    DescribeProducersRequest,
    DescribeProducersResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    ProducerState,
)
from epochguard.types import TopicPartition

pytest.importorskip("kafka.protocol.api_message", reason="kafka-python (the dev extra) is missing")
from kafka.protocol.admin.groups import DescribeGroupsRequest as KDescribeGroupsRequest
from kafka.protocol.admin.groups import DescribeGroupsResponse as KDescribeGroupsResponse
from kafka.protocol.admin.groups import ListGroupsRequest as KListGroupsRequest
from kafka.protocol.admin.groups import ListGroupsResponse as KListGroupsResponse
from kafka.protocol.admin.transactions import DescribeProducersRequest as KDescribeProducersRequest
from kafka.protocol.admin.transactions import DescribeProducersResponse as KDescribeProducersResponse

CODEC = {k: (lo, hi) for k, lo, hi in _core.CLIENT_API_VERSIONS}


def schema_versions(key: ApiKey, kafka_class) -> list[int]:
    """Every version Kafka's schema lists; the codec must speak exactly those."""
    assert CODEC[key] == (0, kafka_class.max_version)
    return list(range(0, kafka_class.max_version + 1))


def encode(key: ApiKey, version: int, request: object, kafka_class):
    frame = _core.encode_request(_core.RequestHeader(key, version, 4242, "watch-test"), request)
    (size,) = struct.unpack(">i", frame[:4])
    assert size == len(frame) - 4
    parsed = kafka_class.decode(bytes(frame[4:]), version=version, header=True)
    assert (parsed.header.request_api_key, parsed.header.request_api_version, parsed.header.correlation_id) == (
        key, version, 4242)
    return parsed


def decode(key: ApiKey, version: int, kafka_response) -> object:
    kafka_response.API_VERSION = version  # before the header (kafka-python's setter would write it there)
    kafka_response.with_header(correlation_id=77)
    frame = bytes(kafka_response.encode(header=True))
    correlation, response = _core.decode_response(key, version, frame)
    assert correlation == 77
    return response


@pytest.mark.parametrize("version", schema_versions(ApiKey.LIST_GROUPS, KListGroupsRequest))
def test_list_groups(version: int) -> None:
    request = ListGroupsRequest(("Empty", "Stable"), ("classic",), version=version)
    parsed = encode(ApiKey.LIST_GROUPS, version, request, KListGroupsRequest)
    assert list(parsed.states_filter or []) == (["Empty", "Stable"] if version >= 4 else [])
    assert list(parsed.types_filter or []) == (["classic"] if version >= 5 else [])
    groups = [KListGroupsResponse.ListedGroup(group_id=g, protocol_type=p, group_state=s, group_type=t)
              for g, p, s, t in (("orders", "consumer", "Empty", "classic"), ("billing", "consumer", "Stable",
                                                                               "consumer"))]
    got = decode(ApiKey.LIST_GROUPS, version,
                 KListGroupsResponse(throttle_time_ms=5, error_code=Errors.COORDINATOR_LOAD_IN_PROGRESS, groups=groups))
    assert got == ListGroupsResponse(
        (ListedGroup("orders", "consumer", "Empty" if version >= 4 else "", "classic" if version >= 5 else ""),
         ListedGroup("billing", "consumer", "Stable" if version >= 4 else "", "consumer" if version >= 5 else "")),
        Errors.COORDINATOR_LOAD_IN_PROGRESS, 5 if version >= 1 else 0)


@pytest.mark.parametrize("version", schema_versions(ApiKey.DESCRIBE_GROUPS, KDescribeGroupsRequest))
def test_describe_groups(version: int) -> None:
    parsed = encode(ApiKey.DESCRIBE_GROUPS, version, DescribeGroupsRequest(("orders", "billing"), version=version),
                    KDescribeGroupsRequest)
    assert list(parsed.groups) == ["orders", "billing"]
    member = KDescribeGroupsResponse.DescribedGroup.DescribedGroupMember(
        member_id="m-1", client_id="c", client_host="/127.0.0.1", member_metadata=b"", member_assignment=b"")
    groups = [
        KDescribeGroupsResponse.DescribedGroup(error_code=0, group_id="orders", group_state="Stable",
                                               protocol_type="consumer", protocol_data="range", members=[member]),
        KDescribeGroupsResponse.DescribedGroup(error_code=Errors.GROUP_AUTHORIZATION_FAILED, group_id="billing",
                                               group_state="", protocol_type="", protocol_data="", members=[]),
    ]
    got = decode(ApiKey.DESCRIBE_GROUPS, version, KDescribeGroupsResponse(throttle_time_ms=2, groups=groups))
    assert got == DescribeGroupsResponse(
        (DescribedGroup("orders", Errors.NONE, "Stable", "consumer", ("m-1",)),
         DescribedGroup("billing", Errors.GROUP_AUTHORIZATION_FAILED)), 2 if version >= 1 else 0)


@pytest.mark.parametrize("version", schema_versions(ApiKey.DESCRIBE_PRODUCERS, KDescribeProducersRequest))
def test_describe_producers(version: int) -> None:
    request = DescribeProducersRequest((TopicPartition("t", 0), TopicPartition("u", 3), TopicPartition("t", 2)))
    parsed = encode(ApiKey.DESCRIBE_PRODUCERS, version, request, KDescribeProducersRequest)
    assert [(t.name, list(t.partition_indexes)) for t in parsed.topics] == [("t", [0, 2]), ("u", [3])]
    state = KDescribeProducersResponse.TopicResponse.PartitionResponse.ProducerState(
        producer_id=4000, producer_epoch=3, last_sequence=9, last_timestamp=1_700_000_000_000, coordinator_epoch=1,
        current_txn_start_offset=42)
    partitions = [
        KDescribeProducersResponse.TopicResponse.PartitionResponse(
            partition_index=0, error_code=0, error_message=None, active_producers=[state]),
        KDescribeProducersResponse.TopicResponse.PartitionResponse(
            partition_index=2, error_code=Errors.NOT_LEADER_OR_FOLLOWER, error_message="not the leader",
            active_producers=[]),
    ]
    got = decode(ApiKey.DESCRIBE_PRODUCERS, version, KDescribeProducersResponse(
        throttle_time_ms=1, topics=[KDescribeProducersResponse.TopicResponse(name="t", partitions=partitions)]))
    assert got == DescribeProducersResponse((
        DescribeProducersPartition("t", 0, Errors.NONE, None,
                                   (ProducerState(4000, 3, 9, 1_700_000_000_000, 1, 42),)),
        DescribeProducersPartition("t", 2, Errors.NOT_LEADER_OR_FOLLOWER, "not the leader"),
    ), 1)
    assert got.partitions[0].tp == TopicPartition("t", 0)

"""The wire codec for the offset, producer-id, coordinator and classic group APIs, against
kafka-python's `kafka.protocol` classes (independent software generated from Kafka's JSON schemas):
requests it encodes decode to the right `epochguard.protocol.messages`, our responses parse field for field."""

from __future__ import annotations

import struct

import pytest

from epochguard import _core
from epochguard.errors import CorruptFrameError, Errors
from epochguard.protocol.api_versions import BROKER_API_VERSIONS, ApiKey
from epochguard.protocol.messages import (
    Coordinator,
    EpochEndOffset,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    JoinGroupMember,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMember,
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitPartition,
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchPartitionResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderPartition,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)
from epochguard.types import IsolationLevel, TopicPartition

pytest.importorskip("kafka.protocol.api_message", reason="kafka-python (the dev extra) is missing")
from kafka.protocol.consumer import group as kg
from kafka.protocol.consumer import offsets as ko
from kafka.protocol.metadata import find_coordinator as kf
from kafka.protocol.producer import transaction as kt

CORRELATION = 77


def versions(key: ApiKey) -> list[int]:
    r = BROKER_API_VERSIONS.version_range(key)
    assert r is not None
    return list(range(r.min_version, r.max_version + 1))


def decode(request, key: ApiKey, version: int):
    request.with_header(correlation_id=CORRELATION, client_id="kp")
    header, message = _core.decode_request(bytes(request.encode(version=version, header=True)))
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (key, version, CORRELATION, "kp")
    assert message.version == version
    return message


def encode_parse(response_class, key: ApiKey, version: int, response):
    frame = _core.encode_response(_core.RequestHeader(key, version, CORRELATION, "kp"), response)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    parsed = response_class.decode(frame, version=version, header=True, framed=True)
    assert parsed.header.correlation_id == CORRELATION
    return parsed


# --- ListOffsets ---------------------------------------------------------------------------------
@pytest.mark.parametrize("version", versions(ApiKey.LIST_OFFSETS))
def test_list_offsets_request(version: int) -> None:
    R = ko.ListOffsetsRequest
    P = R.ListOffsetsTopic.ListOffsetsPartition
    request = R(replica_id=-1, isolation_level=1, topics=[
        R.ListOffsetsTopic(name="events", partitions=[P(partition_index=0, current_leader_epoch=5, timestamp=-1),
                                                      P(partition_index=3, current_leader_epoch=-1, timestamp=1234)]),
    ])
    got = decode(request, ApiKey.LIST_OFFSETS, version)
    assert got == ListOffsetsRequest(
        (ListOffsetsPartition("events", 0, -1, 5 if version >= 4 else -1), ListOffsetsPartition("events", 3, 1234)),
        replica_id=-1,
        isolation_level=IsolationLevel.READ_COMMITTED if version >= 2 else IsolationLevel.READ_UNCOMMITTED,
        version=version,
    )


@pytest.mark.parametrize("version", versions(ApiKey.LIST_OFFSETS))
def test_list_offsets_response(version: int) -> None:
    response = ListOffsetsResponse((
        ListOffsetsPartitionResponse("events", 0, timestamp=-1, offset=120, leader_epoch=5),
        ListOffsetsPartitionResponse("input", 1, Errors.OFFSET_NOT_AVAILABLE),
        ListOffsetsPartitionResponse("events", 3, timestamp=1234, offset=40, leader_epoch=2),
    ), throttle_time_ms=2)
    parsed = encode_parse(ko.ListOffsetsResponse, ApiKey.LIST_OFFSETS, version, response)
    got = [(t.name, p.partition_index, p.error_code, p.timestamp, p.offset, p.leader_epoch if version >= 4 else None)
           for t in parsed.topics for p in t.partitions]
    e = (lambda x: x) if version >= 4 else (lambda x: None)
    assert got == [("events", 0, 0, -1, 120, e(5)), ("events", 3, 0, 1234, 40, e(2)),
                   ("input", 1, Errors.OFFSET_NOT_AVAILABLE, -1, -1, e(-1))]
    if version >= 2:
        assert parsed.throttle_time_ms == 2


# --- OffsetForLeaderEpoch ------------------------------------------------------------------------
@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_FOR_LEADER_EPOCH))
def test_offset_for_leader_epoch_request(version: int) -> None:
    R = ko.OffsetForLeaderEpochRequest
    P = R.OffsetForLeaderTopic.OffsetForLeaderPartition
    request = R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic="events", partitions=[
        P(partition=1, current_leader_epoch=6, leader_epoch=4)])])
    got = decode(request, ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    # Before v3 there is no replica id on the wire: Kafka's default -2 (a debugging/consumer request).
    assert got == OffsetsForLeaderEpochRequest((OffsetForLeaderPartition("events", 1, 4, 6),),
                                               replica_id=-1 if version >= 3 else -2, version=version)


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_FOR_LEADER_EPOCH))
def test_offset_for_leader_epoch_response(version: int) -> None:
    response = OffsetsForLeaderEpochResponse((EpochEndOffset("events", 1, leader_epoch=3, end_offset=90),
                                              EpochEndOffset("events", 2, Errors.FENCED_LEADER_EPOCH)), throttle_time_ms=1)
    parsed = encode_parse(ko.OffsetForLeaderEpochResponse, ApiKey.OFFSET_FOR_LEADER_EPOCH, version, response)
    assert [(t.topic, p.partition, p.error_code, p.leader_epoch, p.end_offset) for t in parsed.topics for p in t.partitions] == [
        ("events", 1, 0, 3, 90), ("events", 2, Errors.FENCED_LEADER_EPOCH, -1, -1)]
    assert parsed.throttle_time_ms == 1


# --- InitProducerId ------------------------------------------------------------------------------
@pytest.mark.parametrize("version", versions(ApiKey.INIT_PRODUCER_ID))
def test_init_producer_id(version: int) -> None:
    got = decode(kt.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                          producer_epoch=-1), ApiKey.INIT_PRODUCER_ID, version)
    assert got == InitProducerIdRequest(None, 60000, version=version)
    parsed = encode_parse(kt.InitProducerIdResponse, ApiKey.INIT_PRODUCER_ID, version,
                          InitProducerIdResponse(producer_id=1000, producer_epoch=0, throttle_time_ms=3))
    assert (parsed.error_code, parsed.producer_id, parsed.producer_epoch, parsed.throttle_time_ms) == (0, 1000, 0, 3)


# --- FindCoordinator -----------------------------------------------------------------------------
@pytest.mark.parametrize("version", versions(ApiKey.FIND_COORDINATOR))
def test_find_coordinator(version: int) -> None:
    fields = {"coordinator_keys": ["g1"]} if version >= 4 else {"key": "g1"}
    got = decode(kf.FindCoordinatorRequest(key_type=0, **fields), ApiKey.FIND_COORDINATOR, version)
    assert got == FindCoordinatorRequest("" if version >= 4 else "g1", 0, ("g1",), version=version)
    response = FindCoordinatorResponse((Coordinator("g1", 2, "127.0.0.1", 40002),), throttle_time_ms=4)
    parsed = encode_parse(kf.FindCoordinatorResponse, ApiKey.FIND_COORDINATOR, version, response)
    if version >= 4:
        assert [(c.key, c.node_id, c.host, c.port, c.error_code) for c in parsed.coordinators] == [("g1", 2, "127.0.0.1", 40002, 0)]
    else:
        assert (parsed.error_code, parsed.node_id, parsed.host, parsed.port) == (0, 2, "127.0.0.1", 40002)


# --- OffsetCommit / OffsetFetch ------------------------------------------------------------------
@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_COMMIT))
def test_offset_commit(version: int) -> None:
    R = kg.OffsetCommitRequest
    P = R.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    request = R(group_id="g1", generation_id_or_member_epoch=3, member_id="m-1", group_instance_id=None,
                retention_time_ms=-1, topics=[R.OffsetCommitRequestTopic(name="events", partitions=[
                    P(partition_index=0, committed_offset=55, committed_leader_epoch=4, committed_metadata="meta")])])
    got = decode(request, ApiKey.OFFSET_COMMIT, version)
    assert got == OffsetCommitRequest("g1", (OffsetCommitPartition("events", 0, 55, 4 if version >= 6 else -1, "meta"),),
                                      generation_id_or_member_epoch=3, member_id="m-1", version=version)
    response = OffsetCommitResponse((OffsetCommitPartitionResponse("events", 0),
                                     OffsetCommitPartitionResponse("events", 1, Errors.UNKNOWN_TOPIC_OR_PARTITION)), throttle_time_ms=2)
    parsed = encode_parse(kg.OffsetCommitResponse, ApiKey.OFFSET_COMMIT, version, response)
    assert [(t.name, p.partition_index, p.error_code) for t in parsed.topics for p in t.partitions] == [
        ("events", 0, 0), ("events", 1, Errors.UNKNOWN_TOPIC_OR_PARTITION)]


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_FETCH))
def test_offset_fetch(version: int) -> None:
    R = kg.OffsetFetchRequest
    if version >= 8:
        G = R.OffsetFetchRequestGroup
        request = R(groups=[G(group_id="g1", topics=[G.OffsetFetchRequestTopics(name="events", partition_indexes=[0, 2])])],
                    require_stable=True)
    else:
        request = R(group_id="g1", topics=[R.OffsetFetchRequestTopic(name="events", partition_indexes=[0, 2])], require_stable=True)
    got = decode(request, ApiKey.OFFSET_FETCH, version)
    assert got == OffsetFetchRequest("g1", (TopicPartition("events", 0), TopicPartition("events", 2)),
                                     require_stable=version >= 7, version=version)
    response = OffsetFetchResponse((OffsetFetchPartitionResponse("events", 0, 55, 4, "meta"),
                                    OffsetFetchPartitionResponse("events", 2)), group_id="g1", throttle_time_ms=1)
    parsed = encode_parse(kg.OffsetFetchResponse, ApiKey.OFFSET_FETCH, version, response)
    topics = parsed.groups[0].topics if version >= 8 else parsed.topics
    if version >= 8:
        assert parsed.groups[0].group_id == "g1"
    epoch = (lambda e: e) if version >= 5 else (lambda e: -1)
    assert [(t.name, p.partition_index, p.committed_offset, epoch(p.committed_leader_epoch) if version >= 5 else -1, p.metadata, p.error_code)
            for t in topics for p in t.partitions] == [("events", 0, 55, epoch(4), "meta", 0), ("events", 2, -1, -1, "", 0)]


def test_offset_fetch_v8_all_partitions_and_two_groups() -> None:
    R = kg.OffsetFetchRequest
    G = R.OffsetFetchRequestGroup
    assert decode(R(groups=[G(group_id="g1", topics=None)], require_stable=False), ApiKey.OFFSET_FETCH, 8).partitions is None
    two = R(groups=[G(group_id="a", topics=None), G(group_id="b", topics=None)], require_stable=False)
    two.with_header(correlation_id=1, client_id="kp")
    with pytest.raises(CorruptFrameError, match="2 groups"):
        _core.decode_request(bytes(two.encode(version=8, header=True)))


# --- the classic group protocol ------------------------------------------------------------------
@pytest.mark.parametrize("version", versions(ApiKey.JOIN_GROUP))
def test_join_group(version: int) -> None:
    R = kg.JoinGroupRequest
    request = R(group_id="g1", session_timeout_ms=10000, rebalance_timeout_ms=30000, member_id="", group_instance_id=None,
                protocol_type="consumer", protocols=[R.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01sub")])
    got = decode(request, ApiKey.JOIN_GROUP, version)
    assert got == JoinGroupRequest("g1", 10000, "", "consumer", (JoinGroupProtocol("range", b"\x00\x01sub"),),
                                   rebalance_timeout_ms=30000 if version >= 1 else 10000, version=version)
    response = JoinGroupResponse(generation_id=1, protocol_type="consumer", protocol_name="range", leader="m-1",
                                 member_id="m-1", members=(JoinGroupMember("m-1", b"\x00\x01sub"),), throttle_time_ms=2)
    parsed = encode_parse(kg.JoinGroupResponse, ApiKey.JOIN_GROUP, version, response)
    assert (parsed.error_code, parsed.generation_id, parsed.protocol_name, parsed.leader, parsed.member_id) == (0, 1, "range", "m-1", "m-1")
    assert [(m.member_id, bytes(m.metadata)) for m in parsed.members] == [("m-1", b"\x00\x01sub")]
    if version >= 7:
        assert parsed.protocol_type == "consumer"


@pytest.mark.parametrize("version", versions(ApiKey.SYNC_GROUP))
def test_sync_group(version: int) -> None:
    R = kg.SyncGroupRequest
    request = R(group_id="g1", generation_id=1, member_id="m-1", group_instance_id=None, protocol_type="consumer",
                protocol_name="range", assignments=[R.SyncGroupRequestAssignment(member_id="m-1", assignment=b"assign")])
    got = decode(request, ApiKey.SYNC_GROUP, version)
    assert got == SyncGroupRequest("g1", 1, "m-1", (SyncGroupAssignment("m-1", b"assign"),),
                                   protocol_type="consumer" if version >= 5 else None,
                                   protocol_name="range" if version >= 5 else None, version=version)
    parsed = encode_parse(kg.SyncGroupResponse, ApiKey.SYNC_GROUP, version,
                          SyncGroupResponse(assignment=b"assign", protocol_type="consumer", protocol_name="range"))
    assert (parsed.error_code, bytes(parsed.assignment)) == (0, b"assign")


@pytest.mark.parametrize("version", versions(ApiKey.HEARTBEAT))
def test_heartbeat(version: int) -> None:
    got = decode(kg.HeartbeatRequest(group_id="g1", generation_id=2, member_id="m-1", group_instance_id=None),
                 ApiKey.HEARTBEAT, version)
    assert got == HeartbeatRequest("g1", 2, "m-1", version=version)
    parsed = encode_parse(kg.HeartbeatResponse, ApiKey.HEARTBEAT, version, HeartbeatResponse(Errors.UNKNOWN_SERVER_ERROR))
    assert parsed.error_code == -1


@pytest.mark.parametrize("version", versions(ApiKey.LEAVE_GROUP))
def test_leave_group(version: int) -> None:
    R = kg.LeaveGroupRequest
    if version >= 3:
        request = R(group_id="g1", members=[R.MemberIdentity(member_id="m-1", group_instance_id=None)])
    else:
        request = R(group_id="g1", member_id="m-1")
    assert decode(request, ApiKey.LEAVE_GROUP, version) == LeaveGroupRequest("g1", (LeaveGroupMember("m-1"),), version=version)
    parsed = encode_parse(kg.LeaveGroupResponse, ApiKey.LEAVE_GROUP, version,
                          LeaveGroupResponse(members=(LeaveGroupMemberResponse("m-1"),)))
    assert parsed.error_code == 0
    if version >= 3:
        assert [(m.member_id, m.error_code) for m in parsed.members] == [("m-1", 0)]

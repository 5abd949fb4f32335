"""The client's half of the wire codec (`_core.encode_request` / `decode_response`) against the server's
half (`decode_request` / `encode_response`, itself checked against kafka-python's generated classes in
tests/wire/test_codec.py): every request the client sends decodes to what it was, and every answer the
server encodes reads back to what it was, at every version both serve, field for field where the
version has the field. Hostile answers are typed errors."""

from __future__ import annotations

import struct

import pytest

from epochguard import _core
from epochguard.errors import CorruptFrameError, Errors, UnsupportedVersionError
from epochguard.protocol.api_versions import ApiKey, ApiVersionRange, ApiVersionsRequest, ApiVersionsResponse
from epochguard.protocol.messages import (
    Coordinator,
    DivergingEpoch,
    EndTxnRequest,
    EndTxnResponse,
    EpochEndOffset,
    FetchPartition,
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    LeaderIdAndEpoch,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
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
    ProducePartition,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
)
from epochguard.types import IsolationLevel, TopicPartition

CODEC = {k: (lo, hi) for k, lo, hi in _core.CLIENT_API_VERSIONS}  # what the client half speaks
SERVED = {k: (lo, hi) for k, lo, hi in _core.WIRE_API_VERSIONS}  # what the server half (`serve`) speaks


def versions(key: ApiKey) -> list[int]:
    """The versions both halves speak (round trips); the client's versions beyond `serve`'s (KIP-890's
    transaction version 2) are checked on their own below."""
    lo, hi = CODEC[key]
    return list(range(lo, min(hi, SERVED.get(key, (lo, hi))[1]) + 1))


def request_round_trip(key: ApiKey, version: int, request: object) -> object:
    header = _core.RequestHeader(key, version, 4242, "client-test")
    frame = _core.encode_request(header, request)
    (size,) = struct.unpack(">i", frame[:4])
    assert size == len(frame) - 4
    got_header, decoded = _core.decode_request(frame[4:])
    assert got_header == header
    return decoded


def response_round_trip(key: ApiKey, version: int, response: object) -> object:
    header = _core.RequestHeader(key, version, 99, "client-test")
    frame = _core.encode_response(header, response)
    correlation, decoded = _core.decode_response(key, version, frame[4:])
    assert correlation == 99
    return decoded


def batch() -> bytes:
    return bytes(_core.encode_batch([(b"k", b"v", [])], base_offset=0, partition_leader_epoch=3))


# --- requests ----------------------------------------------------------------------------------
@pytest.mark.parametrize("version", versions(ApiKey.FETCH))
def test_fetch_request(version: int) -> None:
    parts = (
        FetchPartition("t", 0, 17, current_leader_epoch=5 if version >= 9 else -1,
                       log_start_offset=3 if version >= 5 else -1, partition_max_bytes=1234),
        FetchPartition("u", 2, 9, current_leader_epoch=6 if version >= 9 else -1, partition_max_bytes=99),
        FetchPartition("t", 1, 0, partition_max_bytes=1),
    )
    request = FetchRequest(parts, isolation_level=IsolationLevel.READ_COMMITTED, max_wait_ms=500, min_bytes=7,
                           max_bytes=1 << 20, version=version,
                           session_id=0, session_epoch=-1,
                           forgotten_topics=(TopicPartition("gone", 4),) if version >= 7 else (),
                           rack_id="r1" if version >= 11 else "")
    got = request_round_trip(ApiKey.FETCH, version, request)
    # Partitions come back grouped by topic in first-seen order.
    assert got == FetchRequest((parts[0], parts[2], parts[1]), **{
        f: getattr(request, f) for f in ("isolation_level", "max_wait_ms", "min_bytes", "max_bytes", "version",
                                          "session_id", "session_epoch", "forgotten_topics", "rack_id")})


@pytest.mark.parametrize("version", versions(ApiKey.LIST_OFFSETS))
def test_list_offsets_request(version: int) -> None:
    parts = (ListOffsetsPartition("t", 0, -2, current_leader_epoch=4 if version >= 4 else -1),
             ListOffsetsPartition("t", 1, 1_700_000_000_000))
    level = IsolationLevel.READ_COMMITTED if version >= 2 else IsolationLevel.READ_UNCOMMITTED
    request = ListOffsetsRequest(parts, isolation_level=level, version=version)
    assert request_round_trip(ApiKey.LIST_OFFSETS, version, request) == request


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_FOR_LEADER_EPOCH))
def test_offsets_for_leader_epoch_request(version: int) -> None:
    parts = (OffsetForLeaderPartition("t", 0, 3, current_leader_epoch=5), OffsetForLeaderPartition("v", 9, 0, 1))
    request = OffsetsForLeaderEpochRequest(parts, version=version)
    got = request_round_trip(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, request)
    # Below v3 there is no replica id: the broker reads a debugging consumer (-2).
    assert got == OffsetsForLeaderEpochRequest(parts, replica_id=-1 if version >= 3 else -2, version=version)


@pytest.mark.parametrize("version", versions(ApiKey.METADATA))
def test_metadata_request(version: int) -> None:
    for topics in (("a", "b"), None) if version >= 1 else (("a",), None):
        auto = version < 4  # the field is there from v4 only; before, brokers auto-create (true)
        request = MetadataRequest(topics, allow_auto_topic_creation=auto, version=version)
        assert request_round_trip(ApiKey.METADATA, version, request) == request


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_COMMIT))
def test_offset_commit_request(version: int) -> None:
    parts = (OffsetCommitPartition("t", 0, 100, committed_leader_epoch=7 if version >= 6 else -1, committed_metadata="m"),
             OffsetCommitPartition("t", 3, 5))
    request = OffsetCommitRequest("g", parts, generation_id_or_member_epoch=3, member_id="m-1", version=version,
                                  group_instance_id="i" if version >= 7 else None)
    assert request_round_trip(ApiKey.OFFSET_COMMIT, version, request) == request


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_FETCH))
def test_offset_fetch_request(version: int) -> None:
    for partitions in ((TopicPartition("t", 0), TopicPartition("t", 2), TopicPartition("u", 1)), None):
        if partitions is None and version < 2:
            with pytest.raises(ValueError, match="null topics from v2"):
                _core.encode_request(_core.RequestHeader(ApiKey.OFFSET_FETCH, version, 1, None),
                                     OffsetFetchRequest("g", None, version=version))
            continue
        request = OffsetFetchRequest("g", partitions, require_stable=version >= 7, version=version)
        assert request_round_trip(ApiKey.OFFSET_FETCH, version, request) == request


@pytest.mark.parametrize("version", versions(ApiKey.FIND_COORDINATOR))
def test_find_coordinator_request(version: int) -> None:
    request = FindCoordinatorRequest(key="g", coordinator_keys=("g",), key_type=1 if version >= 1 else 0,
                                     version=version)
    got = request_round_trip(ApiKey.FIND_COORDINATOR, version, request)
    assert got.coordinator_keys == ("g",) and got.key_type == request.key_type


@pytest.mark.parametrize("version", versions(ApiKey.API_VERSIONS))
def test_api_versions_request(version: int) -> None:
    request = ApiVersionsRequest("epochguard", "1.2.3", version=version)
    got = request_round_trip(ApiKey.API_VERSIONS, version, request)
    assert got == (request if version >= 3 else ApiVersionsRequest(version=version))


@pytest.mark.parametrize("version", versions(ApiKey.PRODUCE))
def test_produce_request_carries_batches_verbatim(version: int) -> None:
    records = batch()
    request = ProduceRequest((ProducePartition("t", 1, records),), acks=-1, timeout_ms=1500, version=version,
                             transactional_id="tx")
    assert request_round_trip(ApiKey.PRODUCE, version, request) == request


@pytest.mark.parametrize("version", versions(ApiKey.INIT_PRODUCER_ID))
def test_init_producer_id_request(version: int) -> None:
    request = InitProducerIdRequest(None, 60_000, version=version)
    assert request_round_trip(ApiKey.INIT_PRODUCER_ID, version, request) == request


def test_a_version_outside_the_codec_is_refused_before_anything_is_written() -> None:
    with pytest.raises(UnsupportedVersionError):
        _core.encode_request(_core.RequestHeader(ApiKey.FETCH, 13, 1, None), FetchRequest(()))
    with pytest.raises(UnsupportedVersionError):
        _core.decode_response(ApiKey.FETCH, 3, b"\x00\x00\x00\x01")


# --- responses ---------------------------------------------------------------------------------
@pytest.mark.parametrize("version", versions(ApiKey.FETCH))
def test_fetch_response(version: int) -> None:
    data = FetchPartitionData(
        "t", 0, Errors.NONE, high_watermark=10, last_stable_offset=9 if version >= 4 else -1,
        log_start_offset=2 if version >= 5 else -1,
        diverging_epoch=DivergingEpoch(2, 7) if version >= 12 else None,
        current_leader=LeaderIdAndEpoch(3, 4) if version >= 12 else LeaderIdAndEpoch(),
        preferred_read_replica=2 if version >= 11 else -1, records=batch(), aborted_transactions=None)
    fenced = FetchPartitionData("u", 1, Errors.FENCED_LEADER_EPOCH, 0, 0 if version >= 4 else -1,
                                0 if version >= 5 else -1)
    response = FetchResponse((data, fenced), throttle_time_ms=5, session_id=0)
    assert response_round_trip(ApiKey.FETCH, version, response) == response


@pytest.mark.parametrize("version", versions(ApiKey.LIST_OFFSETS))
def test_list_offsets_response(version: int) -> None:
    response = ListOffsetsResponse((
        ListOffsetsPartitionResponse("t", 0, Errors.NONE, 123, 45, leader_epoch=6 if version >= 4 else -1),
        ListOffsetsPartitionResponse("t", 1, Errors.OFFSET_NOT_AVAILABLE, -1, -1),
    ), throttle_time_ms=1 if version >= 2 else 0)
    assert response_round_trip(ApiKey.LIST_OFFSETS, version, response) == response


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_FOR_LEADER_EPOCH))
def test_offsets_for_leader_epoch_response(version: int) -> None:
    response = OffsetsForLeaderEpochResponse((
        EpochEndOffset("t", 0, Errors.NONE, 3, 120), EpochEndOffset("t", 1, Errors.FENCED_LEADER_EPOCH, -1, -1)),
        throttle_time_ms=2)
    assert response_round_trip(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, response) == response


@pytest.mark.parametrize("version", versions(ApiKey.METADATA))
def test_metadata_response(version: int) -> None:
    topic = MetadataResponseTopic(
        "t", (MetadataResponsePartition(0, 2, leader_epoch=5 if version >= 7 else -1, replica_nodes=(1, 2, 3),
                                        isr_nodes=(2, 3), offline_replicas=(1,) if version >= 5 else ()),
              MetadataResponsePartition(1, -1, error_code=Errors.LEADER_NOT_AVAILABLE)),
        topic_id="0b5e4f3a-1c2d-4e5f-8a9b-0c1d2e3f4a5b" if version >= 10 else None,
        is_internal=version >= 1)
    response = MetadataResponse(
        (topic,), brokers=(MetadataResponseBroker(1, "h1", 9092, rack="r" if version >= 1 else None),
                           MetadataResponseBroker(2, "h2", 9093)),
        cluster_id="c" if version >= 2 else None, controller_id=1 if version >= 1 else -1, version=version,
        throttle_time_ms=3 if version >= 3 else 0)
    assert response_round_trip(ApiKey.METADATA, version, response) == response


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_COMMIT))
def test_offset_commit_response(version: int) -> None:
    response = OffsetCommitResponse((OffsetCommitPartitionResponse("t", 0),
                                     OffsetCommitPartitionResponse("t", 1, Errors.NOT_COORDINATOR)),
                                    throttle_time_ms=4 if version >= 3 else 0)
    assert response_round_trip(ApiKey.OFFSET_COMMIT, version, response) == response


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_FETCH))
def test_offset_fetch_response(version: int) -> None:
    response = OffsetFetchResponse((
        OffsetFetchPartitionResponse("t", 0, 77, committed_leader_epoch=4 if version >= 5 else -1, metadata="m"),
        OffsetFetchPartitionResponse("t", 1, -1, -1, "", Errors.UNKNOWN_TOPIC_OR_PARTITION)),
        error_code=Errors.NONE, version=version, throttle_time_ms=1 if version >= 3 else 0,
        group_id="g" if version >= 8 else "")
    assert response_round_trip(ApiKey.OFFSET_FETCH, version, response) == response


@pytest.mark.parametrize("version", versions(ApiKey.FIND_COORDINATOR))
def test_find_coordinator_response(version: int) -> None:
    response = FindCoordinatorResponse(
        (Coordinator("g" if version >= 4 else "", 2, "h", 9093, Errors.NONE, None),),
        throttle_time_ms=3 if version >= 1 else 0)
    got = response_round_trip(ApiKey.FIND_COORDINATOR, version, response)
    # v0 has no error message: Kafka's generated default for a string field is "" (not null).
    assert got == (response if version >= 1 else FindCoordinatorResponse(
        (Coordinator("", 2, "h", 9093, Errors.NONE, ""),)))


@pytest.mark.parametrize("version", versions(ApiKey.API_VERSIONS))
def test_api_versions_response(version: int) -> None:
    response = ApiVersionsResponse((ApiVersionRange(1, 4, 12), ApiVersionRange(18, 0, 3)), Errors.NONE,
                                   throttle_time_ms=7 if version >= 1 else 0, version=version)
    assert response_round_trip(ApiKey.API_VERSIONS, version, response) == response


@pytest.mark.parametrize("version", versions(ApiKey.PRODUCE))
def test_produce_response(version: int) -> None:
    response = ProduceResponse((ProducePartitionResponse(
        "t", 0, Errors.NONE, 40, log_append_time_ms=-1, log_start_offset=0 if version >= 5 else -1),),
        throttle_time_ms=2)
    assert response_round_trip(ApiKey.PRODUCE, version, response) == response


@pytest.mark.parametrize("version", versions(ApiKey.INIT_PRODUCER_ID))
def test_init_producer_id_response(version: int) -> None:
    response = InitProducerIdResponse(Errors.NONE, 1000, 2, throttle_time_ms=1)
    assert response_round_trip(ApiKey.INIT_PRODUCER_ID, version, response) == response


def test_unknown_error_codes_read_as_unknown_server_error() -> None:
    frame = _core.encode_response(_core.RequestHeader(ApiKey.OFFSET_COMMIT, 8, 1, None),
                                  OffsetCommitResponse((OffsetCommitPartitionResponse("t", 0),)))
    # Patch the partition's error code (the frame's last 2 bytes before the tagged fields) to 12345.
    body = bytearray(frame[4:])
    idx = len(body) - 5  # error_code (2), partition tags (1), topic tags (1), response tags (1)
    assert body[idx:idx + 2] == b"\x00\x00"
    body[idx:idx + 2] = (12345).to_bytes(2, "big")
    _, got = _core.decode_response(ApiKey.OFFSET_COMMIT, 8, bytes(body))
    assert got.partitions[0].error_code == Errors.UNKNOWN_SERVER_ERROR


@pytest.mark.parametrize("frame", [
    b"",  # no correlation id
    b"\x00\x00\x00\x01",  # correlation id, then nothing of the body
    b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x7f\xff\xff\xff",  # Metadata v12 claiming 2^31 brokers
    b"\x00\x00\x00\x01\x85",  # a tagged-field count cut short
])
def test_hostile_answers_are_corrupt_frame_errors(frame: bytes) -> None:
    with pytest.raises(CorruptFrameError):
        _core.decode_response(ApiKey.METADATA, 12, frame)


# --- the classic group protocol --------------------------------------------------------------------
@pytest.mark.parametrize("version", versions(ApiKey.JOIN_GROUP))
def test_join_group_round_trips(version: int) -> None:
    from epochguard.protocol.messages import JoinGroupMember, JoinGroupProtocol, JoinGroupRequest, JoinGroupResponse

    request = JoinGroupRequest("g", 10_000, member_id="m-1" if version >= 1 else "",
                               protocols=(JoinGroupProtocol("range", b"\x00\x01"), JoinGroupProtocol("roundrobin")),
                               rebalance_timeout_ms=30_000 if version >= 1 else 10_000,
                               group_instance_id="i" if version >= 5 else None, version=version)
    assert request_round_trip(ApiKey.JOIN_GROUP, version, request) == request
    response = JoinGroupResponse(
        Errors.NONE, 3, protocol_type="consumer" if version >= 7 else None, protocol_name="range", leader="m-1",
        member_id="m-2", members=(JoinGroupMember("m-1", b"md", "i" if version >= 5 else None), JoinGroupMember("m-2")),
        throttle_time_ms=5 if version >= 2 else 0)
    assert response_round_trip(ApiKey.JOIN_GROUP, version, response) == response


@pytest.mark.parametrize("version", versions(ApiKey.SYNC_GROUP))
def test_sync_group_round_trips(version: int) -> None:
    from epochguard.protocol.messages import SyncGroupAssignment, SyncGroupRequest, SyncGroupResponse

    request = SyncGroupRequest("g", 3, "m-1", (SyncGroupAssignment("m-1", b"a1"), SyncGroupAssignment("m-2", b"")),
                               group_instance_id="i" if version >= 3 else None,
                               protocol_type="consumer" if version >= 5 else None,
                               protocol_name="range" if version >= 5 else None, version=version)
    assert request_round_trip(ApiKey.SYNC_GROUP, version, request) == request
    response = SyncGroupResponse(Errors.REBALANCE_IN_PROGRESS, b"assigned",
                                 protocol_type="consumer" if version >= 5 else None,
                                 protocol_name="range" if version >= 5 else None,
                                 throttle_time_ms=2 if version >= 1 else 0)
    assert response_round_trip(ApiKey.SYNC_GROUP, version, response) == response


@pytest.mark.parametrize("version", versions(ApiKey.HEARTBEAT))
def test_heartbeat_round_trips(version: int) -> None:
    from epochguard.protocol.messages import HeartbeatRequest, HeartbeatResponse

    request = HeartbeatRequest("g", 3, "m-1", group_instance_id="i" if version >= 3 else None, version=version)
    assert request_round_trip(ApiKey.HEARTBEAT, version, request) == request
    response = HeartbeatResponse(Errors.ILLEGAL_GENERATION, throttle_time_ms=1 if version >= 1 else 0)
    assert response_round_trip(ApiKey.HEARTBEAT, version, response) == response


@pytest.mark.parametrize("version", versions(ApiKey.LEAVE_GROUP))
def test_leave_group_round_trips(version: int) -> None:
    from epochguard.protocol.messages import (
        LeaveGroupMember,
        LeaveGroupMemberResponse,
        LeaveGroupRequest,
        LeaveGroupResponse,
    )

    members = ((LeaveGroupMember("m-1", "i"), LeaveGroupMember("m-2")) if version >= 3
               else (LeaveGroupMember("m-1"),))
    request = LeaveGroupRequest("g", members, version=version)
    assert request_round_trip(ApiKey.LEAVE_GROUP, version, request) == request
    response = LeaveGroupResponse(Errors.NONE, members=(LeaveGroupMemberResponse("m-1", "i", Errors.UNKNOWN_MEMBER_ID),)
                                  if version >= 3 else (), throttle_time_ms=1 if version >= 1 else 0)
    assert response_round_trip(ApiKey.LEAVE_GROUP, version, response) == response
    if version < 3:
        with pytest.raises(ValueError, match="leaves one member"):
            _core.encode_request(_core.RequestHeader(ApiKey.LEAVE_GROUP, version, 1, None),
                                 LeaveGroupRequest("g", (LeaveGroupMember("a"), LeaveGroupMember("b")), version=version))


# --- beyond serve: KIP-890's transaction version 2 (the client's half only) ----------------------------
def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _compact_str(s: str) -> bytes:
    return _uvarint(len(s) + 1) + s.encode()


def _tagged(tag: int, data: bytes) -> bytes:
    return _uvarint(tag) + _uvarint(len(data)) + data


def test_the_client_speaks_the_transaction_version_2_requests_beyond_serve() -> None:
    assert CODEC[ApiKey.PRODUCE][1] >= 12 and CODEC[ApiKey.END_TXN][1] >= 5 and CODEC[ApiKey.TXN_OFFSET_COMMIT][1] >= 5
    assert (SERVED[ApiKey.PRODUCE][1], SERVED[ApiKey.END_TXN][1]) == (10, 4)  # serve's coordinator is version 1
    # Produce v11/v12 and EndTxn v5 requests have v10's and v4's fields: only the header's version differs
    for key, old, new, request in [
        (ApiKey.PRODUCE, 10, 12, ProduceRequest((ProducePartition("t", 1, batch()),), transactional_id="tx")),
        (ApiKey.END_TXN, 4, 5, EndTxnRequest("tx", 7, 3, True)),
    ]:
        before = _core.encode_request(_core.RequestHeader(key, old, 5, "c"), request)
        after = _core.encode_request(_core.RequestHeader(key, new, 5, "c"), request)
        assert struct.unpack(">hh", after[4:8]) == (key, new)
        assert before[8:] == after[8:]


def test_an_end_txn_v5_answer_carries_the_bumped_producer_id_and_epoch() -> None:
    body = struct.pack(">ihqh", 3, 0, 7, 4) + _uvarint(0)  # throttle, error, producer id, epoch, no tags
    frame = struct.pack(">i", 41) + _uvarint(0) + body  # response header v1 (EndTxn v5 is flexible)
    correlation, got = _core.decode_response(ApiKey.END_TXN, 5, frame)
    assert correlation == 41 and got == EndTxnResponse(Errors.NONE, 3, producer_id=7, producer_epoch=4)
    old = struct.pack(">i", 41) + _uvarint(0) + struct.pack(">ih", 3, 0) + _uvarint(0)
    assert _core.decode_response(ApiKey.END_TXN, 4, old)[1] == EndTxnResponse(Errors.NONE, 3)  # -1, -1


def api_versions_v3(correlation: int, ranges: list[tuple[int, int, int]], features: dict[str, int],
                    epoch: int) -> bytes:
    """An ApiVersions v3 answer as Kafka 4 writes it (finalized features in tagged fields 1 and 2), unframed;
    `_core.encode_response` (the server's half) writes no features."""
    keys = _uvarint(len(ranges) + 1) + b"".join(struct.pack(">hhh", *r) + _uvarint(0) for r in ranges)
    finalized = _uvarint(len(features) + 1) + b"".join(
        _compact_str(name) + struct.pack(">hh", level, level) + _uvarint(0) for name, level in features.items())
    tags = _uvarint(2) + _tagged(1, struct.pack(">q", epoch)) + _tagged(2, finalized)
    return struct.pack(">ih", correlation, 0) + keys + struct.pack(">i", 0) + tags  # header v0 always


def test_an_api_versions_answer_carries_the_finalized_features() -> None:
    frame = api_versions_v3(9, [(0, 3, 12)], {"transaction.version": 2, "metadata.version": 27}, 88)
    correlation, got = _core.decode_response(ApiKey.API_VERSIONS, 3, frame)
    assert correlation == 9 and got.finalized_features_epoch == 88
    versions = got.node_api_versions
    assert versions.feature_level("transaction.version") == 2 and versions.feature_level("group.version") == 0
    assert versions.finalized_features_epoch == 88
    assert versions.with_range(ApiKey.PRODUCE, 3, 11).feature_level("transaction.version") == 2

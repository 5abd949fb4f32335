"""The Kafka wire codec (`epochguard._core.decode_request` / `encode_response`) against independent
software: request frames that kafka-python's `kafka.protocol` (its own generator over Kafka's JSON
schemas) encodes decode to the right `epochguard.protocol.messages`, and the response frames we encode parse
with kafka-python's response classes field for field, for every API x version the codec serves.
Hostile frames give the typed errors."""

from __future__ import annotations

import base64
import struct
import uuid
from dataclasses import replace

import pytest

from epochguard import _core
from epochguard.errors import CorruptFrameError, EpochGuardError, Errors, UnsupportedVersionError
from epochguard.protocol.api_versions import BROKER_API_VERSIONS, ApiKey, ApiVersionsRequest, ApiVersionsResponse
from epochguard.protocol.messages import (
    AbortedTransaction,
    DivergingEpoch,
    FetchPartition,
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    LeaderIdAndEpoch,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    NodeEndpoint,
    ProducePartition,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
)
from epochguard.types import IsolationLevel, TopicPartition

kp = pytest.importorskip("kafka.protocol.api_message", reason="kafka-python (the dev extra) is missing")
from kafka.protocol.consumer.fetch import FetchRequest as KFetchRequest  # noqa: E402
from kafka.protocol.consumer.fetch import FetchResponse as KFetchResponse  # noqa: E402
from kafka.protocol.metadata.api_versions import ApiVersionsRequest as KApiVersionsRequest  # noqa: E402
from kafka.protocol.metadata.api_versions import ApiVersionsResponse as KApiVersionsResponse  # noqa: E402
from kafka.protocol.metadata.metadata import MetadataRequest as KMetadataRequest  # noqa: E402
from kafka.protocol.metadata.metadata import MetadataResponse as KMetadataResponse  # noqa: E402
from kafka.protocol.producer.produce import ProduceRequest as KProduceRequest  # noqa: E402
from kafka.protocol.producer.produce import ProduceResponse as KProduceResponse  # noqa: E402

CORRELATION = 0x01020304


def versions(key: ApiKey) -> list[int]:
    r = BROKER_API_VERSIONS.version_range(key)
    assert r is not None
    return list(range(r.min_version, r.max_version + 1))


def kp_frame(request, version: int, client_id: str | None = "kp-test") -> bytes:
    """A request frame (after the size prefix) as kafka-python writes it."""
    request.with_header(correlation_id=CORRELATION, client_id=client_id)
    return bytes(request.encode(version=version, header=True))


def decode(frame: bytes, key: ApiKey, version: int, client_id: str | None = "kp-test"):
    header, message = _core.decode_request(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        key,
        version,
        CORRELATION,
        client_id,
    )
    assert message.version == version
    return message


def kp_parse(response_class, frame: bytes, version: int):
    """Parse our response frame with kafka-python; check the size prefix and correlation id."""
    (size,) = struct.unpack(">i", frame[:4])
    assert size == len(frame) - 4
    parsed = response_class.decode(frame, version=version, header=True, framed=True)
    assert parsed.header.correlation_id == CORRELATION
    return parsed


def header(key: ApiKey, version: int) -> _core.RequestHeader:
    return _core.RequestHeader(key, version, CORRELATION, "kp-test")


def test_codec_table_is_what_the_broker_serves() -> None:
    served = {(r.api_key, r.min_version, r.max_version) for r in BROKER_API_VERSIONS}
    assert set(_core.WIRE_API_VERSIONS) == served


# --- ApiVersions ---------------------------------------------------------------------------------
@pytest.mark.parametrize("version", versions(ApiKey.API_VERSIONS))
def test_api_versions_request(version: int) -> None:
    frame = kp_frame(KApiVersionsRequest(client_software_name="kafka-python", client_software_version="3.0"), version)
    got = decode(frame, ApiKey.API_VERSIONS, version)
    named = version >= 3
    assert got == ApiVersionsRequest("kafka-python" if named else "", "3.0" if named else "", version=version)


@pytest.mark.parametrize("version", versions(ApiKey.API_VERSIONS))
def test_api_versions_response(version: int) -> None:
    response = ApiVersionsResponse(tuple(BROKER_API_VERSIONS), throttle_time_ms=5, version=version)
    parsed = kp_parse(KApiVersionsResponse, _core.encode_response(header(ApiKey.API_VERSIONS, version), response), version)
    assert parsed.error_code == 0
    assert [(k.api_key, k.min_version, k.max_version) for k in parsed.api_keys] == [
        (r.api_key, r.min_version, r.max_version) for r in BROKER_API_VERSIONS
    ]
    assert parsed.throttle_time_ms == (5 if version >= 1 else 0)


def test_unknown_api_versions_version_is_refused_with_header_and_answered_at_v0() -> None:
    frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 9, CORRELATION, 3) + b"cli" + b"\x00\x00\x00"
    with pytest.raises(UnsupportedVersionError) as info:
        _core.decode_request(frame)
    h = info.value.header
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (ApiKey.API_VERSIONS, 9, CORRELATION, "cli")
    assert isinstance(info.value, EpochGuardError)
    own = BROKER_API_VERSIONS.version_range(ApiKey.API_VERSIONS)
    answer = ApiVersionsResponse((own,), Errors.UNSUPPORTED_VERSION, version=0)
    parsed = kp_parse(KApiVersionsResponse, _core.encode_response(h, answer), 0)
    assert parsed.error_code == Errors.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in parsed.api_keys] == [(18, 0, 3)]


# --- Metadata ------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", versions(ApiKey.METADATA))
def test_metadata_request(version: int) -> None:
    topics = [KMetadataRequest.MetadataRequestTopic(name=n) for n in ("events", "input")]
    frame = kp_frame(KMetadataRequest(topics=topics, allow_auto_topic_creation=False), version)
    got = decode(frame, ApiKey.METADATA, version)
    # Before v4 there is no flag and the broker auto-creates (MetadataRequest v0-3).
    assert got == MetadataRequest(("events", "input"), allow_auto_topic_creation=version < 4, version=version)


@pytest.mark.parametrize("version", versions(ApiKey.METADATA))
def test_metadata_request_all_topics(version: int) -> None:
    # v0 has no null: the empty list means every topic; from v1, null means every topic, [] none.
    frame = kp_frame(KMetadataRequest(topics=[] if version == 0 else None), version)
    assert decode(frame, ApiKey.METADATA, version).topics is None
    if version >= 1:
        assert decode(kp_frame(KMetadataRequest(topics=[]), version), ApiKey.METADATA, version).topics == ()


@pytest.mark.parametrize("version", versions(ApiKey.METADATA))
def test_metadata_response(version: int) -> None:
    topic_id = "5b0c1a3e-1d2f-4e5a-9b8c-7d6e5f4a3b2c"
    response = MetadataResponse(
        topics=(
            MetadataResponseTopic(
                "events",
                (
                    MetadataResponsePartition(0, leader_id=2, leader_epoch=7, replica_nodes=(1, 2, 3), isr_nodes=(2, 3), offline_replicas=(1,)),
                    MetadataResponsePartition(1, leader_id=-1, error_code=Errors.LEADER_NOT_AVAILABLE),
                ),
                topic_id=topic_id,
            ),
            MetadataResponseTopic("gone", error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION),
        ),
        brokers=(MetadataResponseBroker(1, "127.0.0.1", 40001), MetadataResponseBroker(2, "127.0.0.1", 40002, rack="r2")),
        cluster_id="sim-cluster",
        controller_id=1,
        throttle_time_ms=3,
        version=version,
    )
    parsed = kp_parse(KMetadataResponse, _core.encode_response(header(ApiKey.METADATA, version), response), version)
    assert [(b.node_id, b.host, b.port, b.rack if version >= 1 else None) for b in parsed.brokers] == [
        (1, "127.0.0.1", 40001, None),
        (2, "127.0.0.1", 40002, "r2" if version >= 1 else None),
    ]
    assert parsed.cluster_id == ("sim-cluster" if version >= 2 else None)
    if version >= 1:
        assert parsed.controller_id == 1
    assert [(t.name, t.error_code) for t in parsed.topics] == [("events", 0), ("gone", 3)]
    if version >= 10:
        assert parsed.topics[0].topic_id == uuid.UUID(topic_id)
        # Kafka's own text form (`Uuid.toString()`: unpadded URL-safe base64), as the simulator uses.
        b64 = base64.urlsafe_b64encode(uuid.UUID(topic_id).bytes).rstrip(b"=").decode()
        kafka_form = replace(response, topics=(replace(response.topics[0], topic_id=b64),))
        again = kp_parse(KMetadataResponse, _core.encode_response(header(ApiKey.METADATA, version), kafka_form), version)
        assert again.topics[0].topic_id == uuid.UUID(topic_id)
    p0, p1 = parsed.topics[0].partitions
    assert (p0.partition_index, p0.leader_id, p0.replica_nodes, p0.isr_nodes) == (0, 2, [1, 2, 3], [2, 3])
    assert p0.leader_epoch == (7 if version >= 7 else -1)
    if version >= 5:
        assert p0.offline_replicas == [1]
    assert (p1.partition_index, p1.leader_id, p1.error_code) == (1, -1, Errors.LEADER_NOT_AVAILABLE)


def kafka_id(u: uuid.UUID) -> str:
    """Kafka's printed form of a topic id (`Uuid.toString()`), as `epochguard.sim.controller.topic_id`."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode()


EVENTS_ID, INPUT_ID = uuid.UUID("5b0c1a3e-1d2f-4e5a-9b8c-7d6e5f4a3b2c"), uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")


# --- Produce -------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", versions(ApiKey.PRODUCE))
def test_produce_request(version: int) -> None:
    R = KProduceRequest
    batch_a, batch_b = b"\x00" * 70, bytes(range(90))  # opaque to the codec: passed through as bytes
    request = R(
        transactional_id="tx-1",
        acks=-1,
        timeout_ms=1500,
        topic_data=[
            R.TopicProduceData(name="input", partition_data=[
                R.TopicProduceData.PartitionProduceData(index=0, records=batch_a),
                R.TopicProduceData.PartitionProduceData(index=2, records=batch_b),
            ]),
            R.TopicProduceData(name="events", partition_data=[R.TopicProduceData.PartitionProduceData(index=1, records=b"")]),
        ],
    )
    got = decode(kp_frame(request, version), ApiKey.PRODUCE, version)
    assert got == ProduceRequest(
        (ProducePartition("input", 0, batch_a), ProducePartition("input", 2, batch_b), ProducePartition("events", 1, b"")),
        acks=-1,
        timeout_ms=1500,
        version=version,
        transactional_id="tx-1",
    )


@pytest.mark.parametrize("version", versions(ApiKey.PRODUCE))
def test_produce_response(version: int) -> None:
    response = ProduceResponse(
        (
            ProducePartitionResponse("input", 0, base_offset=40, log_append_time_ms=-1, log_start_offset=3),
            ProducePartitionResponse("events", 1, Errors.NOT_LEADER_OR_FOLLOWER, current_leader=LeaderIdAndEpoch(3, 9)),
            ProducePartitionResponse("input", 2, base_offset=7, log_start_offset=0),
        ),
        throttle_time_ms=4,
        node_endpoints=(NodeEndpoint(3, "127.0.0.1", 40003, "rack-3"),),
    )
    parsed = kp_parse(KProduceResponse, _core.encode_response(header(ApiKey.PRODUCE, version), response), version)
    got = [
        (t.name, p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset if version >= 5 else None)
        for t in parsed.responses
        for p in t.partition_responses
    ]
    assert got == [
        ("input", 0, 0, 40, -1, 3 if version >= 5 else None),
        ("input", 2, 0, 7, -1, 0 if version >= 5 else None),
        ("events", 1, Errors.NOT_LEADER_OR_FOLLOWER, -1, -1, -1 if version >= 5 else None),
    ]
    assert parsed.throttle_time_ms == 4
    if version >= 10:  # KIP-951: the hint and the hinted leader's listener (tagged fields)
        hinted = parsed.responses[1].partition_responses[0].current_leader
        assert (hinted.leader_id, hinted.leader_epoch) == (3, 9)
        assert [(n.node_id, n.host, n.port, n.rack) for n in parsed.node_endpoints] == [(3, "127.0.0.1", 40003, "rack-3")]


# --- Fetch ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", versions(ApiKey.FETCH))
def test_fetch_request(version: int) -> None:
    R = KFetchRequest
    P = R.FetchTopic.FetchPartition
    request = R(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52428800,
        isolation_level=1,
        session_id=12,
        session_epoch=3,
        topics=[
            R.FetchTopic(topic="events", topic_id=EVENTS_ID, partitions=[
                P(partition=0, fetch_offset=100, current_leader_epoch=4, last_fetched_epoch=3, log_start_offset=-1, partition_max_bytes=1048576),
                P(partition=2, fetch_offset=7, current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=65536),
            ]),
        ],
        forgotten_topics_data=[R.ForgottenTopic(topic="input", topic_id=INPUT_ID, partitions=[5, 6])],
        rack_id="rack-a",
    )
    got = decode(kp_frame(request, version), ApiKey.FETCH, version)
    sessions = version >= 7
    # v13+ (KIP-516): topics by id only; the name is left for the broker to resolve.
    by_id = version >= 13
    events, forgotten = ("", kafka_id(EVENTS_ID)) if by_id else ("events", None), kafka_id(INPUT_ID) if by_id else "input"
    assert got == FetchRequest(
        (
            FetchPartition(events[0], 0, 100, current_leader_epoch=4 if version >= 9 else -1,
                           last_fetched_epoch=3 if version >= 12 else -1, log_start_offset=-1, partition_max_bytes=1048576,
                           topic_id=events[1]),
            FetchPartition(events[0], 2, 7, log_start_offset=-1, partition_max_bytes=65536, topic_id=events[1]),
        ),
        replica_id=-1,
        isolation_level=IsolationLevel.READ_COMMITTED,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52428800,
        rack_id="rack-a" if version >= 11 else "",
        version=version,
        session_id=12 if sessions else 0,
        session_epoch=3 if sessions else -1,
        forgotten_topics=(TopicPartition(forgotten, 5), TopicPartition(forgotten, 6)) if sessions else (),
    )


@pytest.mark.parametrize("version", [15, 16])
def test_fetch_request_replica_state_from_v15(version: int) -> None:
    """v15 moved ReplicaId into the tagged ReplicaState, with the follower's broker epoch (KIP-903)."""
    R = KFetchRequest
    request = R(replica_state=R.ReplicaState(replica_id=2, replica_epoch=77), max_wait_ms=0, min_bytes=1,
                max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, topics=[], forgotten_topics_data=[],
                rack_id="")
    got = decode(kp_frame(request, version), ApiKey.FETCH, version)
    assert (got.replica_id, got.replica_epoch) == (2, 77)


def fetch_response_message(records: bytes) -> FetchResponse:
    return FetchResponse(
        (
            FetchPartitionData("events", 0, high_watermark=120, last_stable_offset=110, log_start_offset=0,
                               diverging_epoch=DivergingEpoch(3, 90), current_leader=LeaderIdAndEpoch(2, 5),
                               preferred_read_replica=-1, records=records,
                               aborted_transactions=(AbortedTransaction(1001, 40), AbortedTransaction(1002, 97)),
                               topic_id=kafka_id(EVENTS_ID)),
            FetchPartitionData("events", 2, Errors.FENCED_LEADER_EPOCH, aborted_transactions=(),
                               topic_id=kafka_id(EVENTS_ID)),
            FetchPartitionData("input", 1, high_watermark=0, last_stable_offset=0, log_start_offset=0,
                               topic_id=kafka_id(INPUT_ID)),
        ),
        throttle_time_ms=1,
        session_id=0,
        node_endpoints=(NodeEndpoint(2, "127.0.0.1", 40002, None),),
    )


@pytest.mark.parametrize("version", versions(ApiKey.FETCH))
def test_fetch_response(version: int) -> None:
    records = bytes(range(256)) * 5
    frame = _core.encode_response(header(ApiKey.FETCH, version), fetch_response_message(records))
    parsed = kp_parse(KFetchResponse, frame, version)
    assert parsed.throttle_time_ms == 1
    # v13+ names each topic by its id only (KIP-516).
    names = {EVENTS_ID: "events", INPUT_ID: "input"}
    got = {(names[t.topic_id] if version >= 13 else t.topic, p.partition_index): p
           for t in parsed.responses for p in t.partitions}
    assert list(got) == [("events", 0), ("events", 2), ("input", 1)]
    if version >= 13:
        assert {t.topic for t in parsed.responses} <= {"", None}
    if version >= 16:
        assert [(n.node_id, n.host, n.port, n.rack) for n in parsed.node_endpoints] == [(2, "127.0.0.1", 40002, None)]
    p0 = got["events", 0]
    assert (p0.error_code, p0.high_watermark, p0.last_stable_offset) == (0, 120, 110)
    # read_committed: the aborted transactions in the range; read_uncommitted: null, as Kafka sends.
    assert [(a.producer_id, a.first_offset) for a in p0.aborted_transactions] == [(1001, 40), (1002, 97)]
    assert got["events", 2].aborted_transactions == [] and got["input", 1].aborted_transactions is None
    assert p0.log_start_offset == (0 if version >= 5 else -1)
    assert bytes(p0.records) == records
    if version >= 12:
        assert (p0.diverging_epoch.epoch, p0.diverging_epoch.end_offset) == (3, 90)
        assert (p0.current_leader.leader_id, p0.current_leader.leader_epoch) == (2, 5)
        # Absent tagged fields stay absent: -1/-1 defaults.
        assert got["events", 2].diverging_epoch is None
    assert got["events", 2].error_code == Errors.FENCED_LEADER_EPOCH
    # Empty records are zero-length, not null.
    assert got["input", 1].records is not None and bytes(got["input", 1].records) == b""


def test_fetch_response_from_v13_needs_topic_ids_and_keeps_unknown_ids_apart() -> None:
    """An UNKNOWN_TOPIC_ID answer has no name: two unknown ids stay two topics; no id is an error."""
    unknown_a, unknown_b = uuid.uuid4(), uuid.uuid4()
    response = FetchResponse((
        FetchPartitionData("", 0, Errors.UNKNOWN_TOPIC_ID, topic_id=kafka_id(unknown_a)),
        FetchPartitionData("", 0, Errors.UNKNOWN_TOPIC_ID, topic_id=str(unknown_b)),
    ))
    parsed = kp_parse(KFetchResponse, _core.encode_response(header(ApiKey.FETCH, 13), response), 13)
    assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in parsed.responses] == [
        (unknown_a, [Errors.UNKNOWN_TOPIC_ID]), (unknown_b, [Errors.UNKNOWN_TOPIC_ID])]
    with pytest.raises(ValueError, match="topic id is required"):
        _core.encode_response(header(ApiKey.FETCH, 13), FetchResponse((FetchPartitionData("events", 0),)))


# --- hostile frames ------------------------------------------------------------------------------
def _fetch_frame(version: int = 12) -> bytes:
    R = KFetchRequest
    request = R(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, topics=[R.FetchTopic(topic="events", partitions=[R.FetchTopic.FetchPartition(
                    partition=0, fetch_offset=1, current_leader_epoch=1, last_fetched_epoch=-1, log_start_offset=-1,
                    partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
    return kp_frame(request, version)


@pytest.mark.parametrize("version", [4, 12])
def test_truncated_at_every_byte_is_a_corrupt_frame(version: int) -> None:
    frame = _fetch_frame(version)
    for cut in range(len(frame)):
        with pytest.raises(CorruptFrameError) as info:
            _core.decode_request(frame[:cut])
        assert 0 <= info.value.position <= cut, cut


def test_trailing_bytes_are_ignored_as_kafka_does() -> None:
    # librdkafka 2.16's Metadata v12 request as captured from confluent-kafka: 3 bytes past the schema.
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    header, request = _core.decode_request(frame)
    assert (header.api_key, header.api_version, header.client_id) == (ApiKey.METADATA, 12, "rdkafka")
    assert request == MetadataRequest(None, allow_auto_topic_creation=False, version=12)
    assert _core.decode_request(_fetch_frame() + b"\x00") == _core.decode_request(_fetch_frame())


@pytest.mark.parametrize("key,version", [(ApiKey.FETCH, 3), (ApiKey.FETCH, 17), (ApiKey.PRODUCE, 2), (ApiKey.PRODUCE, 11), (ApiKey.ALTER_PARTITION, 0), (77, 0), (-5, 1)])
def test_unknown_key_or_version(key: int, version: int) -> None:
    frame = struct.pack(">hhih", key, version, 42, -1) + b"\x01\x02"
    with pytest.raises(UnsupportedVersionError) as info:
        _core.decode_request(frame)
    h = info.value.header
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (key, version, 42, None)


def test_huge_array_counts_are_corrupt_frames_not_allocations() -> None:
    head = struct.pack(">hhih", ApiKey.METADATA, 0, 1, 1) + b"x"
    for count in (2**31 - 1, 1 << 24, 1000):
        with pytest.raises(CorruptFrameError, match="exceeds"):
            _core.decode_request(head + struct.pack(">i", count))
    # Fetch v4 claiming 2^31-1 partitions in its one topic.
    fetch = struct.pack(">hhih", ApiKey.FETCH, 4, 1, 1) + b"x" + struct.pack(">iiiibih", -1, 0, 1, 1, 0, 1, 1) + b"t"
    with pytest.raises(CorruptFrameError, match="exceeds"):
        _core.decode_request(fetch + struct.pack(">i", 2**31 - 1))


def test_bad_strings_and_negative_lengths() -> None:
    bad_utf8 = struct.pack(">hhih", ApiKey.METADATA, 1, 1, -1) + struct.pack(">i", 1) + struct.pack(">h", 2) + b"\xff\xfe"
    with pytest.raises(CorruptFrameError):
        _core.decode_request(bad_utf8)
    negative = struct.pack(">hhih", ApiKey.METADATA, 1, 1, -7)
    with pytest.raises(CorruptFrameError, match="negative"):
        _core.decode_request(negative)


def test_max_frame_bytes() -> None:
    assert _core.MAX_FRAME_BYTES == 100 * 1024 * 1024


def test_accepts_bytearray_and_memoryview() -> None:
    frame = _fetch_frame()
    expected = _core.decode_request(frame)
    assert _core.decode_request(bytearray(frame)) == expected
    assert _core.decode_request(memoryview(frame)) == expected


def test_request_header_is_a_value() -> None:
    h = _core.RequestHeader(1, 12, 5, "c")
    assert h == _core.RequestHeader(1, 12, 5, "c") and hash(h) == hash(_core.RequestHeader(1, 12, 5, "c"))
    with pytest.raises(AttributeError):
        h.api_version = 3  # type: ignore[misc]


def test_encoding_a_response_for_an_unserved_version_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        _core.encode_response(header(ApiKey.FETCH, 17), fetch_response_message(b""))

"""Request frames -> `epochguard.messages`, response messages -> frames.

The codec of record is the Rust one (`epochguard._core.decode_request` / `encode_response`, the
`kafka-protocol` crate behind the `wire` cargo feature). Until an extension with it is installed, this
module falls back to kafka-python's classes generated from Kafka's JSON schemas (kafka-python is in
the dev extra): same interface, same messages, slower. `decode_request` takes a frame without its
4-byte size prefix; `encode_response` returns one with it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from epochguard import _core
from epochguard.api_versions import (
    BROKER_API_VERSIONS,
    ApiKey,
    ApiVersionRange,
    ApiVersionsRequest,
    ApiVersionsResponse,
)
from epochguard.errors import EpochGuardError, Errors, UnsupportedVersionError
from epochguard.messages import (
    DivergingEpoch,
    EpochEndOffset,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderPartition,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
)
from epochguard.types import IsolationLevel, TopicPartition
from epochguard.wire.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)

__all__ = ["RequestHeader", "decode_request", "encode_response", "UnsupportedVersionError", "CorruptFrameError",
           "MAX_FRAME_BYTES", "RUST_CODEC", "WIRE_API_VERSIONS"]

RUST_CODEC = hasattr(_core, "decode_request")
MAX_FRAME_BYTES = getattr(_core, "MAX_FRAME_BYTES", 100 * 1024 * 1024)  # Kafka's socket.request.max.bytes

if RUST_CODEC:  # pragma: no cover - exercised once the Rust codec lands
    from epochguard._core import (  # type: ignore[attr-defined]
        WIRE_API_VERSIONS,
        CorruptFrameError,
        RequestHeader,
        decode_request,
        encode_response,
    )
else:
    WIRE_API_VERSIONS = [(r.api_key, r.min_version, r.max_version) for r in BROKER_API_VERSIONS]

    class CorruptFrameError(EpochGuardError):  # type: ignore[no-redef]
        """A request frame that does not decode (truncated, bad lengths, absurd counts)."""

    @dataclass(frozen=True, slots=True)
    class RequestHeader:  # type: ignore[no-redef]
        api_key: int
        api_version: int
        correlation_id: int
        client_id: str | None

    def decode_request(frame: bytes) -> tuple[RequestHeader, Any]:  # type: ignore[misc]
        return _decode(bytes(frame))

    def encode_response(header: RequestHeader, response: Any) -> bytes:  # type: ignore[misc]
        return _encode(header, response)


# --- the kafka-python fallback --------------------------------------------------------------------
def _classes() -> dict[int, tuple[Any, Any]]:
    try:
        from kafka.protocol.consumer import (
            FetchRequest as KFetchRequest,
        )
        from kafka.protocol.consumer import (
            FetchResponse as KFetchResponse,
        )
        from kafka.protocol.consumer import (
            ListOffsetsRequest as KListOffsetsRequest,
        )
        from kafka.protocol.consumer import (
            ListOffsetsResponse as KListOffsetsResponse,
        )
        from kafka.protocol.consumer import (
            OffsetCommitRequest as KOffsetCommitRequest,
        )
        from kafka.protocol.consumer import (
            OffsetCommitResponse as KOffsetCommitResponse,
        )
        from kafka.protocol.consumer import (
            OffsetFetchRequest as KOffsetFetchRequest,
        )
        from kafka.protocol.consumer import (
            OffsetFetchResponse as KOffsetFetchResponse,
        )
        from kafka.protocol.consumer import (
            OffsetForLeaderEpochRequest as KOffsetForLeaderEpochRequest,
        )
        from kafka.protocol.consumer import (
            OffsetForLeaderEpochResponse as KOffsetForLeaderEpochResponse,
        )
        from kafka.protocol.metadata import (
            ApiVersionsRequest as KApiVersionsRequest,
        )
        from kafka.protocol.metadata import (
            ApiVersionsResponse as KApiVersionsResponse,
        )
        from kafka.protocol.metadata import (
            FindCoordinatorRequest as KFindCoordinatorRequest,
        )
        from kafka.protocol.metadata import (
            FindCoordinatorResponse as KFindCoordinatorResponse,
        )
        from kafka.protocol.metadata import (
            MetadataRequest as KMetadataRequest,
        )
        from kafka.protocol.metadata import (
            MetadataResponse as KMetadataResponse,
        )
        from kafka.protocol.producer import (
            InitProducerIdRequest as KInitProducerIdRequest,
        )
        from kafka.protocol.producer import (
            InitProducerIdResponse as KInitProducerIdResponse,
        )
        from kafka.protocol.producer import (
            ProduceRequest as KProduceRequest,
        )
        from kafka.protocol.producer import (
            ProduceResponse as KProduceResponse,
        )
    except ImportError as exc:  # pragma: no cover
        raise RuntimeError("the wire codec needs the Rust extension built with the `wire` feature, or kafka-python "
                           "(pip install epochguard[dev])") from exc
    return {
        ApiKey.PRODUCE: (KProduceRequest, KProduceResponse),
        ApiKey.FETCH: (KFetchRequest, KFetchResponse),
        ApiKey.LIST_OFFSETS: (KListOffsetsRequest, KListOffsetsResponse),
        ApiKey.METADATA: (KMetadataRequest, KMetadataResponse),
        ApiKey.OFFSET_COMMIT: (KOffsetCommitRequest, KOffsetCommitResponse),
        ApiKey.OFFSET_FETCH: (KOffsetFetchRequest, KOffsetFetchResponse),
        ApiKey.FIND_COORDINATOR: (KFindCoordinatorRequest, KFindCoordinatorResponse),
        ApiKey.API_VERSIONS: (KApiVersionsRequest, KApiVersionsResponse),
        ApiKey.INIT_PRODUCER_ID: (KInitProducerIdRequest, KInitProducerIdResponse),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: (KOffsetForLeaderEpochRequest, KOffsetForLeaderEpochResponse),
    }


_CLASSES: dict[int, tuple[Any, Any]] | None = None


def _kp() -> dict[int, tuple[Any, Any]]:
    global _CLASSES
    if _CLASSES is None:
        _CLASSES = _classes()
    return _CLASSES


def _header(frame: bytes) -> RequestHeader:
    if len(frame) < 10:
        raise CorruptFrameError(f"request frame of {len(frame)} bytes is shorter than a header")
    api_key, api_version, correlation_id, n = struct.unpack_from(">hhih", frame, 0)
    if n > len(frame) - 10:
        raise CorruptFrameError("client id runs past the frame")
    client_id = None if n < 0 else frame[10:10 + n].decode("utf-8", "replace")
    return RequestHeader(api_key, api_version, correlation_id, client_id)


def _decode(frame: bytes) -> tuple[RequestHeader, Any]:
    header = _header(frame)
    if not BROKER_API_VERSIONS.supports(header.api_key, header.api_version) or header.api_key not in _kp():
        raise _unsupported(f"api key {header.api_key} version {header.api_version} is not served", header)
    kreq = _kp()[header.api_key][0]
    try:
        obj = kreq.decode(frame, version=header.api_version, header=True)
    except Exception as exc:  # kafka-python raises assorted errors on bad bytes
        raise CorruptFrameError(f"cannot decode {ApiKey(header.api_key).name} v{header.api_version}: {exc}") from exc
    return header, _to_message(header, obj)


def _unsupported(message: str, header: RequestHeader) -> UnsupportedVersionError:
    exc = UnsupportedVersionError(message)
    exc.header = header  # type: ignore[attr-defined]
    return exc


def _to_message(h: RequestHeader, o: Any) -> Any:
    v = h.api_version
    key = h.api_key
    if key == ApiKey.API_VERSIONS:
        return ApiVersionsRequest(getattr(o, "client_software_name", "") or "",
                                  getattr(o, "client_software_version", "") or "", version=v)
    if key == ApiKey.METADATA:
        topics = None if o.topics is None else tuple(t.name for t in o.topics)
        if v == 0 and topics == ():
            topics = None  # v0: an empty list means all topics
        return MetadataRequest(topics, bool(getattr(o, "allow_auto_topic_creation", False)), version=v)
    if key == ApiKey.PRODUCE:
        produce = tuple(ProducePartition(t.name, p.index, bytes(p.records or b""))
                      for t in o.topic_data for p in t.partition_data)
        return ProduceRequest(produce, acks=o.acks, timeout_ms=o.timeout_ms, version=v)
    if key == ApiKey.FETCH:
        fetch = tuple(FetchPartition(t.topic, p.partition, p.fetch_offset, getattr(p, "current_leader_epoch", -1),
                                     getattr(p, "last_fetched_epoch", -1), getattr(p, "log_start_offset", -1),
                                     p.partition_max_bytes)
                      for t in o.topics for p in t.partitions)
        return FetchRequest(fetch, replica_id=getattr(o, "replica_id", -1),
                            isolation_level=IsolationLevel(getattr(o, "isolation_level", 0)), max_wait_ms=o.max_wait_ms,
                            min_bytes=o.min_bytes, max_bytes=getattr(o, "max_bytes", 0x7FFFFFFF), version=v)
    if key == ApiKey.LIST_OFFSETS:
        lo = tuple(ListOffsetsPartition(t.name, p.partition_index, p.timestamp, getattr(p, "current_leader_epoch", -1))
                      for t in o.topics for p in t.partitions)
        return ListOffsetsRequest(lo, replica_id=o.replica_id,
                                  isolation_level=IsolationLevel(getattr(o, "isolation_level", 0)), version=v)
    if key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
        ofl = tuple(OffsetForLeaderPartition(t.topic, p.partition, p.leader_epoch, p.current_leader_epoch)
                      for t in o.topics for p in t.partitions)
        return OffsetsForLeaderEpochRequest(ofl, replica_id=getattr(o, "replica_id", -2), version=v)
    if key == ApiKey.OFFSET_COMMIT:
        oc = tuple(OffsetCommitPartition(t.name, p.partition_index, p.committed_offset,
                                            getattr(p, "committed_leader_epoch", -1), p.committed_metadata or "")
                      for t in o.topics for p in t.partitions)
        return OffsetCommitRequest(o.group_id, oc, getattr(o, "generation_id_or_member_epoch", -1),
                                   getattr(o, "member_id", "") or "", version=v)
    if key == ApiKey.OFFSET_FETCH:
        wanted = None if o.topics is None else tuple(
            TopicPartition(t.name, p) for t in o.topics for p in t.partition_indexes)
        return OffsetFetchRequest(o.group_id, wanted, bool(getattr(o, "require_stable", False)), version=v)
    if key == ApiKey.FIND_COORDINATOR:
        keys = tuple(getattr(o, "coordinator_keys", None) or ()) if v >= 4 else (o.key,)
        return FindCoordinatorRequest("" if v >= 4 else o.key, getattr(o, "key_type", 0), keys, version=v)
    if key == ApiKey.INIT_PRODUCER_ID:
        return InitProducerIdRequest(o.transactional_id, o.transaction_timeout_ms,
                                     getattr(o, "producer_id", -1), getattr(o, "producer_epoch", -1), version=v)
    raise _unsupported(f"api key {key} is not served", h)


def _encode(h: RequestHeader, r: Any) -> bytes:
    kresp = _kp()[h.api_key][1]
    v = h.api_version
    obj = _to_kafka(kresp, v, r)
    obj.with_header(correlation_id=h.correlation_id)
    return bytes(obj.encode(header=True, framed=True))


def _group(items: Any, key: Any) -> dict[Any, list[Any]]:
    out: dict[Any, list[Any]] = {}
    for item in items:
        out.setdefault(key(item), []).append(item)
    return out


def _to_kafka(K: Any, v: int, r: Any) -> Any:
    if isinstance(r, ApiVersionsResponse):
        keys = [K.ApiVersion(api_key=a.api_key, min_version=a.min_version, max_version=a.max_version) for a in r.api_keys]
        return K(error_code=int(r.error_code), api_keys=keys, throttle_time_ms=0, version=r.version)
    if isinstance(r, MetadataResponse):
        T = K.MetadataResponseTopic
        P = T.MetadataResponsePartition
        brokers = [K.MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack) for b in r.brokers]
        topics = [T(error_code=int(t.error_code), name=t.name, topic_id=_uuid(t.topic_id), is_internal=t.is_internal,
                    partitions=[P(error_code=int(p.error_code), partition_index=p.partition_index, leader_id=p.leader_id,
                                  leader_epoch=p.leader_epoch, replica_nodes=list(p.replica_nodes),
                                  isr_nodes=list(p.isr_nodes), offline_replicas=list(p.offline_replicas))
                                for p in t.partitions])
                  for t in r.topics]
        return K(throttle_time_ms=0, brokers=brokers, cluster_id=r.cluster_id, controller_id=r.controller_id,
                 topics=topics, version=v)
    if isinstance(r, ProduceResponse):
        T = K.TopicProduceResponse
        P = T.PartitionProduceResponse
        topics = [T(name=name, partition_responses=[
            P(index=p.partition_index, error_code=int(p.error_code), base_offset=p.base_offset,
              log_append_time_ms=p.log_append_time_ms, log_start_offset=p.log_start_offset, record_errors=[],
              error_message=None) for p in ps]) for name, ps in _group(r.partitions, lambda p: p.topic).items()]
        return K(responses=topics, throttle_time_ms=0, version=v)
    if isinstance(r, FetchResponse):
        T = K.FetchableTopicResponse
        P = T.PartitionData
        topics = []
        for name, ps in _group(r.partitions, lambda p: p.topic).items():
            parts = []
            for p in ps:
                fields: dict[str, Any] = dict(
                    partition_index=p.partition_index, error_code=int(p.error_code), high_watermark=p.high_watermark,
                    last_stable_offset=p.last_stable_offset, log_start_offset=p.log_start_offset,
                    aborted_transactions=[], preferred_read_replica=p.preferred_read_replica, records=p.records)
                if p.diverging_epoch is not None and v >= 12:
                    fields["diverging_epoch"] = P.EpochEndOffset(epoch=p.diverging_epoch.epoch,
                                                                 end_offset=p.diverging_epoch.end_offset)
                parts.append(P(**fields))
            topics.append(T(topic=name, partitions=parts))
        return K(throttle_time_ms=0, error_code=int(r.error_code), session_id=0, responses=topics, version=v)
    if isinstance(r, ListOffsetsResponse):
        T = K.ListOffsetsTopicResponse
        P = T.ListOffsetsPartitionResponse
        topics = [T(name=name, partitions=[P(partition_index=p.partition_index, error_code=int(p.error_code),
                                             timestamp=p.timestamp, offset=p.offset, leader_epoch=p.leader_epoch)
                                           for p in ps])
                  for name, ps in _group(r.partitions, lambda p: p.topic).items()]
        return K(throttle_time_ms=0, topics=topics, version=v)
    if isinstance(r, OffsetsForLeaderEpochResponse):
        T = K.OffsetForLeaderTopicResult
        P = T.EpochEndOffset
        topics = [T(topic=name, partitions=[P(error_code=int(p.error_code), partition=p.partition_index,
                                              leader_epoch=p.leader_epoch, end_offset=p.end_offset) for p in ps])
                  for name, ps in _group(r.partitions, lambda p: p.topic).items()]
        return K(throttle_time_ms=0, topics=topics, version=v)
    if isinstance(r, OffsetCommitResponse):
        T = K.OffsetCommitResponseTopic
        P = T.OffsetCommitResponsePartition
        topics = [T(name=name, partitions=[P(partition_index=p.partition_index, error_code=int(p.error_code))
                                           for p in ps])
                  for name, ps in _group(r.partitions, lambda p: p.topic).items()]
        return K(throttle_time_ms=0, topics=topics, version=v)
    if isinstance(r, OffsetFetchResponse):
        T = K.OffsetFetchResponseTopic
        P = T.OffsetFetchResponsePartition
        topics = [T(name=name, partitions=[P(partition_index=p.partition_index, committed_offset=p.committed_offset,
                                             committed_leader_epoch=p.committed_leader_epoch, metadata=p.metadata,
                                             error_code=int(p.error_code)) for p in ps])
                  for name, ps in _group(r.partitions, lambda p: p.topic).items()]
        return K(throttle_time_ms=0, topics=topics, error_code=int(r.error_code), groups=[], version=v)
    if isinstance(r, FindCoordinatorResponse):
        if v >= 4:
            coords = [K.Coordinator(key=c.key, node_id=c.node_id, host=c.host, port=c.port, error_code=int(c.error_code),
                                    error_message=c.error_message) for c in r.coordinators]
            return K(throttle_time_ms=0, coordinators=coords, version=v)
        c = r.coordinators[0]
        return K(throttle_time_ms=0, error_code=int(c.error_code), error_message=c.error_message, node_id=c.node_id,
                 host=c.host, port=c.port, version=v)
    if isinstance(r, InitProducerIdResponse):
        return K(throttle_time_ms=0, error_code=int(r.error_code), producer_id=r.producer_id,
                 producer_epoch=r.producer_epoch, version=v)
    raise TypeError(f"cannot encode {type(r).__name__}")


def _uuid(topic_id: str | None) -> Any:
    import uuid

    if topic_id is None:
        return uuid.UUID(int=0)
    import base64

    raw = base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4))
    return uuid.UUID(bytes=raw)


_ = (DivergingEpoch, EpochEndOffset, ApiVersionRange, Errors)

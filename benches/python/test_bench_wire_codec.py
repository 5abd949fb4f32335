"""The wire codec on a Fetch with 1 MiB of records (10,000 records of 100 bytes in 10 batches):
batches pass through as bytes, so encoding the response costs about one copy of the records, not
work per record. Same run, baselines: a bare 1 MiB `bytes` copy (the floor) and kafka-python's
generated `FetchResponse.encode` of the same response (independent software doing the same job).
Also: decoding the Produce request that carries the same 1 MiB, and `stamp_batches` on it.

Run: `pytest benches/python/test_bench_wire_codec.py --benchmark-only --benchmark-group-by=group`.
"""

from __future__ import annotations

import pytest
from kafka.protocol.consumer.fetch import FetchResponse as KFetchResponse
from kafka.protocol.producer.produce import ProduceRequest as KProduceRequest

from epochguard import _core
from epochguard.protocol.api_versions import ApiKey
from epochguard.protocol.messages import FetchPartitionData, FetchResponse
from epochguard.records import encode_batch

VERSION = 12


@pytest.fixture(scope="module")
def records() -> bytes:
    batches = [
        encode_batch([(None, bytes([i % 251]) * 100) for i in range(1000)], base_offset=b * 1000, partition_leader_epoch=3)
        for b in range(10)
    ]
    data = b"".join(batches)
    assert 1_000_000 < len(data) < 1_200_000
    return data


def fetch_response(records: bytes) -> FetchResponse:
    return FetchResponse((FetchPartitionData("events", 0, high_watermark=10_000, last_stable_offset=10_000,
                                             log_start_offset=0, records=records),))


@pytest.mark.benchmark(group="wire: Fetch response with 1 MiB of records")
def test_encode_fetch_response(benchmark, records: bytes) -> None:
    header = _core.RequestHeader(ApiKey.FETCH, VERSION, 1, "bench")
    response = fetch_response(records)
    frame = benchmark(_core.encode_response, header, response)
    assert frame.endswith(records[-1000:]) or records in frame


@pytest.mark.benchmark(group="wire: Fetch response with 1 MiB of records")
def test_baseline_copy_1mib(benchmark, records: bytes) -> None:
    benchmark(lambda: bytes(bytearray(records)))


@pytest.mark.benchmark(group="wire: Fetch response with 1 MiB of records")
def test_baseline_kafka_python_encode(benchmark, records: bytes) -> None:
    R = KFetchResponse
    response = R(throttle_time_ms=0, error_code=0, session_id=0, responses=[R.FetchableTopicResponse(topic="events", partitions=[
        R.FetchableTopicResponse.PartitionData(partition_index=0, error_code=0, high_watermark=10_000,
                                               last_stable_offset=10_000, log_start_offset=0, records=records)])],
        version=VERSION)
    response.with_header(correlation_id=1)
    frame = benchmark(lambda: response.encode(header=True, framed=True))
    assert len(frame) > len(records)


@pytest.mark.benchmark(group="wire: Produce request with 1 MiB of records")
def test_decode_produce_request(benchmark, records: bytes) -> None:
    R = KProduceRequest
    request = R(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[R.TopicProduceData(name="input", partition_data=[
        R.TopicProduceData.PartitionProduceData(index=0, records=records)])])
    request.with_header(correlation_id=1, client_id="bench")
    frame = bytes(request.encode(version=9, header=True))
    _, decoded = benchmark(_core.decode_request, frame)
    assert decoded.partitions[0].records == records


@pytest.mark.benchmark(group="wire: Produce request with 1 MiB of records")
def test_stamp_batches(benchmark, records: bytes) -> None:
    stamped, last, count, _ = benchmark(_core.stamp_batches, records, 500, 7)
    assert (last, count, len(stamped)) == (10_499, 10_000, len(records))


@pytest.mark.benchmark(group="wire: Produce request with 1 MiB of records")
def test_baseline_copy_1mib_produce(benchmark, records: bytes) -> None:
    benchmark(lambda: bytes(bytearray(records)))

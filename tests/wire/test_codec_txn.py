"""The wire codec's server half for the transaction coordinator's APIs (AddPartitionsToTxn v0-3,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn), against kafka-python's `kafka.protocol` classes (independent
software generated from Kafka's JSON schemas): requests it encodes decode to the right
`epochguard.protocol.messages`, our responses parse field for field; ApiVersions advertises them."""

from __future__ import annotations

import pytest

from epochguard import _core
from epochguard.errors import Errors, UnsupportedVersionError
from epochguard.protocol.api_versions import ApiKey
from epochguard.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    OffsetCommitPartition,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnPartitionResult,
)
from epochguard.types import TopicPartition
from tests.wire.test_codec_groups import decode, encode_parse, versions

pytest.importorskip("kafka.protocol.api_message", reason="kafka-python (the dev extra) is missing")
from kafka.protocol.producer import transaction as kt


def test_served_transaction_versions() -> None:
    """The server half decodes what it advertises, and no more: AddPartitionsToTxn v4+ is KIP-890's
    broker-to-coordinator batch, EndTxn/TxnOffsetCommit v5 transaction version 2."""
    served = {k: (lo, hi) for k, lo, hi in _core.WIRE_API_VERSIONS}
    assert served[ApiKey.ADD_PARTITIONS_TO_TXN] == (0, 3)
    assert served[ApiKey.ADD_OFFSETS_TO_TXN] == (0, 4)
    assert served[ApiKey.END_TXN] == (0, 4)
    assert served[ApiKey.TXN_OFFSET_COMMIT] == (0, 4)
    request = kt.AddPartitionsToTxnRequest(transactions=[], v3_and_below_transactional_id="t",
                                           v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
                                           v3_and_below_topics=[])
    request.with_header(correlation_id=1, client_id="kp")
    with pytest.raises(UnsupportedVersionError):
        _core.decode_request(bytes(request.encode(version=4, header=True)))


@pytest.mark.parametrize("version", versions(ApiKey.ADD_PARTITIONS_TO_TXN))
def test_add_partitions_to_txn(version: int) -> None:
    R = kt.AddPartitionsToTxnRequest
    request = R(transactions=[], v3_and_below_transactional_id="txn-a", v3_and_below_producer_id=1001,
                v3_and_below_producer_epoch=3, v3_and_below_topics=[
                    R.AddPartitionsToTxnTopic(name="events", partitions=[0, 2]),
                    R.AddPartitionsToTxnTopic(name="input", partitions=[1])])
    got = decode(request, ApiKey.ADD_PARTITIONS_TO_TXN, version)
    assert got == AddPartitionsToTxnRequest("txn-a", 1001, 3, (TopicPartition("events", 0), TopicPartition("events", 2),
                                                               TopicPartition("input", 1)), version=version)
    response = AddPartitionsToTxnResponse((TxnPartitionResult("events", 0), TxnPartitionResult("input", 1, Errors.PRODUCER_FENCED),
                                           TxnPartitionResult("events", 2, Errors.CONCURRENT_TRANSACTIONS)),
                                          throttle_time_ms=5)
    parsed = encode_parse(kt.AddPartitionsToTxnResponse, ApiKey.ADD_PARTITIONS_TO_TXN, version, response)
    assert parsed.throttle_time_ms == 5
    # Grouped by topic in first-seen order, as the messages are flat.
    assert [(t.name, p.partition_index, p.partition_error_code) for t in parsed.results_by_topic_v3_and_below
            for p in t.results_by_partition] == [("events", 0, 0), ("events", 2, Errors.CONCURRENT_TRANSACTIONS),
                                                 ("input", 1, Errors.PRODUCER_FENCED)]


@pytest.mark.parametrize("version", versions(ApiKey.ADD_OFFSETS_TO_TXN))
def test_add_offsets_to_txn(version: int) -> None:
    got = decode(kt.AddOffsetsToTxnRequest(transactional_id="txn-a", producer_id=1001, producer_epoch=2,
                                           group_id="g1"), ApiKey.ADD_OFFSETS_TO_TXN, version)
    assert got == AddOffsetsToTxnRequest("txn-a", 1001, 2, "g1", version=version)
    parsed = encode_parse(kt.AddOffsetsToTxnResponse, ApiKey.ADD_OFFSETS_TO_TXN, version,
                          AddOffsetsToTxnResponse(Errors.INVALID_PRODUCER_EPOCH, throttle_time_ms=7))
    assert (parsed.error_code, parsed.throttle_time_ms) == (Errors.INVALID_PRODUCER_EPOCH, 7)


@pytest.mark.parametrize("version", versions(ApiKey.TXN_OFFSET_COMMIT))
def test_txn_offset_commit(version: int) -> None:
    R = kt.TxnOffsetCommitRequest
    P = R.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition
    request = R(transactional_id="txn-a", group_id="g1", producer_id=1001, producer_epoch=2, generation_id=4,
                member_id="m-1", group_instance_id=None, topics=[R.TxnOffsetCommitRequestTopic(name="input", partitions=[
                    P(partition_index=0, committed_offset=42, committed_leader_epoch=3, committed_metadata="meta")])])
    got = decode(request, ApiKey.TXN_OFFSET_COMMIT, version)
    member = ({"generation_id": 4, "member_id": "m-1"} if version >= 3 else {})  # v3: KIP-447's member fields
    assert got == TxnOffsetCommitRequest("txn-a", "g1", 1001, 2, (
        OffsetCommitPartition("input", 0, 42, 3 if version >= 2 else -1, "meta"),), version=version, **member)
    response = TxnOffsetCommitResponse((TxnPartitionResult("input", 0), TxnPartitionResult("input", 1, Errors.UNKNOWN_MEMBER_ID)),
                                       throttle_time_ms=1)
    parsed = encode_parse(kt.TxnOffsetCommitResponse, ApiKey.TXN_OFFSET_COMMIT, version, response)
    assert [(t.name, p.partition_index, p.error_code) for t in parsed.topics for p in t.partitions] == [
        ("input", 0, 0), ("input", 1, Errors.UNKNOWN_MEMBER_ID)]


@pytest.mark.parametrize("version", versions(ApiKey.END_TXN))
@pytest.mark.parametrize("committed", [True, False])
def test_end_txn(version: int, committed: bool) -> None:
    got = decode(kt.EndTxnRequest(transactional_id="txn-a", producer_id=1001, producer_epoch=9, committed=committed),
                 ApiKey.END_TXN, version)
    assert got == EndTxnRequest("txn-a", 1001, 9, committed, version=version)
    parsed = encode_parse(kt.EndTxnResponse, ApiKey.END_TXN, version, EndTxnResponse(Errors.PRODUCER_FENCED, 2))
    assert (parsed.error_code, parsed.throttle_time_ms) == (Errors.PRODUCER_FENCED, 2)


def test_client_half_still_speaks_the_transaction_apis() -> None:
    """Moving them from the client-only table to the served one keeps the client's versions; EndTxn and
    TxnOffsetCommit reach v5 on the client's side only (KIP-890's transaction version 2: `serve` is version 1),
    and AddPartitionsToTxn stays below v4 (the brokers' batched form)."""
    client = {k: (lo, hi) for k, lo, hi in _core.CLIENT_API_VERSIONS}
    for key, high in ((ApiKey.ADD_PARTITIONS_TO_TXN, 3), (ApiKey.ADD_OFFSETS_TO_TXN, 4), (ApiKey.END_TXN, 5),
                      (ApiKey.TXN_OFFSET_COMMIT, 5)):
        assert client[key] == (0, high)

"""ReplicaManager's own work, pinned field by field: its defaults, what it hands each partition (its
settings, the request's fields), and the exact answers it builds itself (hosting errors, produce
results, timed-out acks=all writes). Mirrors `kafka.server.ReplicaManager`."""

from __future__ import annotations

import pytest
from protocol_support import CONTROLLER, TP, kafka_python_batch, recs, state

from epochguard import ReplicaManager, iter_batches
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    AlterPartitionRequest,
    BrokerRegistration,
    FetchPartition,
    FetchPartitionData,
    FetchRequest,
    LeaderIdAndEpoch,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    OffsetCommitRequest,
    ProducePartition,
    ProducePartitionResponse,
    ProduceRequest,
    TxnMarker,
    WriteTxnMarkerResult,
    WriteTxnMarkersRequest,
)
from epochguard.types import LATEST_TIMESTAMP, IsolationLevel, TopicPartition

OTHER = TopicPartition("t", 1)


def leader(**kw) -> ReplicaManager:
    """Broker 1 leads t-0 at epoch 3 with broker 2 in the ISR (so acks=all waits for it)."""
    rm = ReplicaManager(1, controller_id=CONTROLLER, **kw)
    rm.apply_partition_state(state(1, 3, isr=(1, 2), replicas=(1, 2)), 0)
    return rm


def test_defaults():
    rm = ReplicaManager(1)
    assert rm.broker_epoch == 0 and rm.request_timeout_ms == 30_000 and rm.alter_partition_retry_ms == 5_000
    assert rm.fetcher.fetch_backoff_ms == 1_000  # replica.fetch.backoff.ms
    assert rm.log_dir_offline is False and rm.brokers == {} and rm.partitions == {}


def test_an_existing_meta_properties_is_kept(tmp_path):
    (tmp_path / "meta.properties").write_text("node.id=1\ncluster.id=someone-elses\n")
    ReplicaManager(1, log_dir=tmp_path)
    assert (tmp_path / "meta.properties").read_text() == "node.id=1\ncluster.id=someone-elses\n"
    fresh = tmp_path / "fresh"
    ReplicaManager(4, log_dir=fresh)
    assert "node.id=4" in (fresh / "meta.properties").read_text()


def test_partitions_get_the_brokers_settings(tmp_path):
    rm = ReplicaManager(1, log_dir=tmp_path, segment_bytes=200, broker_epoch=7, controller_id=CONTROLLER)
    p = rm.get_or_create_partition(TP, "topic-id-1")
    assert p.topic_id == "topic-id-1" and p.broker_epoch == 7
    rm.apply_partition_state(state(1, 3, isr=(1, 2), replicas=(1, 2)), 0)
    for _ in range(4):
        p.append_records_to_leader(recs(3), acks=1, min_insync_replicas=1, now_ms=0)
    assert len(list((tmp_path / "t-0").glob("*.log"))) > 1  # rolled at 200 bytes
    [(dst, shrink)] = rm.poll_requests(60_000)  # broker 2 never fetched: the ISR shrinks
    assert dst == CONTROLLER and isinstance(shrink, AlterPartitionRequest) and shrink.broker_epoch == 7


def test_broker_registrations_reach_the_partitions_already_hosted():
    rm = leader()
    registration = BrokerRegistration(2, broker_epoch=5)
    rm.update_brokers([registration])
    assert rm.brokers == {2: registration}
    stale = FetchRequest((FetchPartition(TP.topic, 0, 0, 3),), replica_id=2, replica_epoch=4)
    assert rm.handle(2, stale, 0).partitions[0].error_code == Errors.NOT_LEADER_OR_FOLLOWER  # an older broker epoch
    current = FetchRequest((FetchPartition(TP.topic, 0, 0, 3),), replica_id=2, replica_epoch=5)
    assert rm.handle(2, current, 0).partitions[0].error_code == Errors.NONE


def test_becoming_a_follower_truncates_at_the_time_given():
    rm = ReplicaManager(2, protocol="pre-kip-320", controller_id=CONTROLLER)
    rm.apply_partition_state(state(2, 1, isr=(1, 2), replicas=(1, 2)), 0)
    rm.partitions[TP].append_records_to_leader(recs(3), acks=1, min_insync_replicas=1, now_ms=0)  # HW stays 0
    rm.apply_partition_state(state(1, 2, isr=(1, 2), replicas=(1, 2)), 7_000)
    [truncation] = rm.fetcher.truncations
    assert (truncation.from_offset, truncation.to_offset, truncation.reason, truncation.at_ms) == (3, 0, "high_watermark", 7_000)


def test_a_request_a_broker_does_not_serve_is_a_type_error():
    with pytest.raises(TypeError, match="a broker does not answer OffsetCommitRequest"):
        ReplicaManager(1).handle(9, OffsetCommitRequest("group", ()), 0)


# --- Fetch / ListOffsets: each partition answered, the request's fields passed on ------------------
def test_fetch_answers_every_partition_with_its_own_hosting_error():
    rm = leader()
    rm.partitions[TP].append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0)
    request = FetchRequest((FetchPartition(OTHER.topic, 1, 0), FetchPartition(TP.topic, 0, 0), FetchPartition("x", 4, 0)))
    first, second, third = rm.handle(9, request, 0).partitions
    assert first == FetchPartitionData(OTHER.topic, 1, Errors.NOT_LEADER_OR_FOLLOWER)
    assert second.tp == TP and second.error_code == Errors.NONE
    assert third == FetchPartitionData("x", 4, Errors.UNKNOWN_TOPIC_OR_PARTITION)


def test_a_consumer_fetch_from_a_follower_needs_fetch_v11():
    rm = ReplicaManager(2, controller_id=CONTROLLER)
    rm.apply_partition_state(state(1, 3, isr=(1, 2), replicas=(1, 2)), 0)
    old = rm.handle(9, FetchRequest((FetchPartition(TP.topic, 0, 0),), version=10), 0).partitions[0]
    assert old.error_code == Errors.NOT_LEADER_OR_FOLLOWER  # KIP-392 is v11
    new = rm.handle(9, FetchRequest((FetchPartition(TP.topic, 0, 0),), version=11), 0).partitions[0]
    assert new.error_code == Errors.NONE


def test_list_offsets_answers_every_partition_with_its_own_hosting_error():
    rm = leader()
    request = ListOffsetsRequest((ListOffsetsPartition(OTHER.topic, 1, LATEST_TIMESTAMP), ListOffsetsPartition(TP.topic, 0, LATEST_TIMESTAMP)))
    first, second = rm.handle(9, request, 0).partitions
    assert first == ListOffsetsPartitionResponse(OTHER.topic, 1, Errors.NOT_LEADER_OR_FOLLOWER)
    assert second.tp == TP and second.error_code == Errors.NONE


def test_list_offsets_passes_the_replica_id_isolation_level_and_version_on():
    rm = leader()
    p = rm.partitions[TP]
    p.append_records_to_leader(recs(2), acks=1, min_insync_replicas=1, now_ms=0, producer_id=4, producer_epoch=0,
                               transactional=True)  # LEO 2, HW 0 (broker 2 has not fetched)
    rm.handle(2, FetchRequest((FetchPartition(TP.topic, 0, 2, 3),), replica_id=2), 0)  # HW 2, the transaction open

    def latest(**kw) -> int:
        return rm.handle(9, ListOffsetsRequest((ListOffsetsPartition(TP.topic, 0, LATEST_TIMESTAMP),), **kw), 0).partitions[0].offset

    assert latest() == 2  # the high watermark
    assert latest(isolation_level=IsolationLevel.READ_COMMITTED) == 0  # the last stable offset
    p.append_records_to_leader(recs(1), acks=1, min_insync_replicas=1, now_ms=0)  # LEO 3, HW 2
    assert latest(replica_id=2) == 3  # a replica reads up to the log end
    # A new leader whose high watermark is behind its epoch start: OFFSET_NOT_AVAILABLE from v5.
    rm.apply_partition_state(state(1, 4, isr=(1, 2), replicas=(1, 2)), 0)
    answer = rm.handle(9, ListOffsetsRequest((ListOffsetsPartition(TP.topic, 0, LATEST_TIMESTAMP),), version=5), 0)
    assert answer.partitions[0].error_code == Errors.OFFSET_NOT_AVAILABLE
    answer = rm.handle(9, ListOffsetsRequest((ListOffsetsPartition(TP.topic, 0, LATEST_TIMESTAMP),), version=4), 0)
    assert answer.partitions[0].error_code == Errors.LEADER_NOT_AVAILABLE


# --- Produce --------------------------------------------------------------------------------------
def test_produce_answers_with_the_base_offset_and_log_start_and_stamps_the_batch():
    rm = leader()
    produce = ProduceRequest((ProducePartition(TP.topic, 0, tuple(recs(2)), producer_id=4, producer_epoch=6),), acks=1)
    [answer] = rm.handle(7, produce, 1_234).partitions
    assert answer == ProducePartitionResponse(TP.topic, 0, Errors.NONE, 0, -1, 0)
    [batch] = iter_batches(rm.partitions[TP].log.read(0))
    assert (batch.max_timestamp, batch.producer_id, batch.producer_epoch) == (1_234, 4, 6)
    [again] = rm.handle(7, produce, 2_000).partitions
    assert again == ProducePartitionResponse(TP.topic, 0, Errors.NONE, 2, -1, 0)


def test_produce_errors_name_their_partition_and_a_retriable_one_carries_the_leader():
    rm = leader()
    request = ProduceRequest(
        (
            ProducePartition(OTHER.topic, 1, tuple(recs(1))),  # a known topic, not hosted
            ProducePartition(TP.topic, 0, kafka_python_batch(0, -1, [b"a"])[:-1]),  # corrupt: not retriable
        ),
        acks=1,
    )
    not_hosted, corrupt = rm.handle(7, request, 0).partitions
    assert not_hosted == ProducePartitionResponse(OTHER.topic, 1, Errors.NOT_LEADER_OR_FOLLOWER)
    assert corrupt == ProducePartitionResponse(TP.topic, 0, Errors.CORRUPT_MESSAGE, current_leader=LeaderIdAndEpoch())
    short = ReplicaManager(1, min_insync_replicas=3)
    short.apply_partition_state(state(1, 3, isr=(1, 2), replicas=(1, 2, 3)), 0)
    [answer] = short.handle(7, ProduceRequest((ProducePartition(TP.topic, 0, tuple(recs(1))),), acks=-1), 0).partitions
    assert answer == ProducePartitionResponse(TP.topic, 0, Errors.NOT_ENOUGH_REPLICAS, current_leader=LeaderIdAndEpoch(1, 3))


def test_a_produce_waiting_for_the_isr_times_out_with_its_base_offset():
    rm = leader()
    produce = ProduceRequest((ProducePartition(TP.topic, 0, tuple(recs(2))),), acks=-1, timeout_ms=500)
    rm.handle(7, ProduceRequest((ProducePartition(TP.topic, 0, tuple(recs(3))),), acks=1), 0)  # base offset 3 next
    assert rm.handle(7, produce, 0) is None
    assert rm.poll_responses(499) == []
    [(node, sent, response)] = rm.poll_responses(500)
    assert (node, sent) == (7, produce)
    assert response.partitions == (ProducePartitionResponse(TP.topic, 0, Errors.REQUEST_TIMED_OUT, 3),)


def test_a_produce_waiting_for_a_partition_that_is_stopped_fails_not_leader():
    rm = leader()
    produce = ProduceRequest((ProducePartition(TP.topic, 0, tuple(recs(2))),), acks=-1)
    assert rm.handle(7, produce, 0) is None
    rm.stop_replica(TP)
    [(_, _, response)] = rm.poll_responses(10)
    assert response.partitions == (ProducePartitionResponse(TP.topic, 0, Errors.NOT_LEADER_OR_FOLLOWER, 0),)


def test_a_marker_waiting_for_the_isr_times_out_naming_its_producer_and_partition():
    rm = leader(request_timeout_ms=800)
    rm.partitions[TP].append_records_to_leader(recs(1), acks=1, min_insync_replicas=1, now_ms=0, producer_id=4,
                                               producer_epoch=1, transactional=True)
    request = WriteTxnMarkersRequest((TxnMarker(4, 1, True, 0, TP.topic, 0),))
    assert rm.handle(-1, request, 0) is None
    assert rm.poll_responses(799) == []
    [(_, _, response)] = rm.poll_responses(800)
    assert response.partitions == (WriteTxnMarkerResult(4, TP.topic, 0, Errors.REQUEST_TIMED_OUT),)


def test_follower_reads_the_broker_epoch_through_its_getter():
    rm = ReplicaManager(2, broker_epoch=7)
    rm.apply_partition_state(state(1, 1, isr=(1, 2), replicas=(1, 2), tp=TP), 0)
    rm.broker_epoch = 9  # re-registered: the next fetch carries the new epoch
    [fetch] = [r for _, r in rm.poll_requests(0) if isinstance(r, FetchRequest)]
    assert fetch.replica_id == 2 and fetch.replica_epoch == 9

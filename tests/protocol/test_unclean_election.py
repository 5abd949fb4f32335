"""End to end through the sans-IO pieces: an unclean election loses acknowledged records; the
followers truncate to the new leader and a KIP-320 consumer detects, reports and rewinds."""

from __future__ import annotations

from protocol_support import TP, Network, brokers, recs, state

from epochguard.client.consumer import Consumer
from epochguard.protocol.messages import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)


def metadata(leader: int, epoch: int) -> MetadataResponse:
    part = MetadataResponsePartition(0, leader, epoch, (1, 2, 3), (leader,))
    return MetadataResponse((MetadataResponseTopic("t", (part,), "topic-id"),), tuple(MetadataResponseBroker(b) for b in (1, 2, 3)))


def drive(consumer: Consumer, rms, announced: tuple[int, int], now_ms: int, rounds: int = 5) -> list:
    got = []
    for _ in range(rounds):
        for node, request in consumer.poll_requests(now_ms):
            response = metadata(*announced) if isinstance(request, MetadataRequest) else rms[node].handle(-1, request, now_ms)
            consumer.on_response(node, request, response, now_ms)
        got.extend(consumer.poll(now_ms).records())
    return got


def elect(rms, leader: int, epoch: int, isr: tuple[int, ...], now_ms: int, down: set[int] = frozenset()) -> None:
    for broker_id, rm in rms.items():
        if broker_id not in down:
            rm.apply_partition_state(state(leader, epoch, isr=isr), now_ms)


def test_unclean_election_is_detected_reported_and_repaired():
    rms = brokers(3)
    net = Network(rms)
    elect(rms, 1, 1, (1, 2, 3), 0)
    leader1 = rms[1].partitions[TP]
    leader1.append_records_to_leader(recs(4, "a-"), acks=-1, min_insync_replicas=1, now_ms=0)
    net.pump(now_ms=0, rounds=4)
    assert {rm.partitions[TP].log.high_watermark for rm in rms.values()} == {4}

    # Brokers 2 and 3 fall out of the ISR; broker 1 alone acknowledges and exposes 4-7.
    elect(rms, 1, 1, (1,), 100)
    leader1.append_records_to_leader(recs(4, "lost-"), acks=-1, min_insync_replicas=1, now_ms=100)
    assert leader1.log.high_watermark == 8
    consumer = Consumer(bootstrap=(1,), reset_policy="earliest")
    consumer.assign([TP])
    read = drive(consumer, rms, (1, 1), 100)
    assert [r.offset for r in read] == list(range(8)) and {r.leader_epoch for r in read} == {1}

    # Broker 1 dies; broker 2 (LEO 4) is elected uncleanly at epoch 2 and takes new writes.
    net.down.add(1)
    elect(rms, 2, 2, (2,), 200, down={1})
    rms[2].partitions[TP].append_records_to_leader(recs(2, "new-"), acks=1, min_insync_replicas=1, now_ms=200)
    net.pump(now_ms=200, rounds=4)
    assert rms[3].partitions[TP].log.read(0) == rms[2].partitions[TP].log.read(0)

    consumer.metadata.request_update()
    read = drive(consumer, rms, (2, 2), 400)
    [event] = consumer.truncations
    assert (event.divergent_offset, event.divergent_epoch, event.offsets_affected, event.resolution) == (4, 1, 4, "rewound")
    assert [(r.offset, r.value, r.leader_epoch) for r in read] == [(4, b"new-0", 2), (5, b"new-1", 2)]

    # Broker 1 comes back as a follower: its four lost records are truncated away.
    net.down.discard(1)
    elect(rms, 2, 2, (2, 3), 500)
    net.pump(now_ms=500, rounds=6)
    assert rms[1].partitions[TP].log.read(0) == rms[2].partitions[TP].log.read(0)
    [t] = rms[1].fetcher.truncations
    assert (t.from_offset, t.to_offset, t.reason) == (8, 4, "diverging_epoch")


def test_the_same_history_goes_unnoticed_before_kip_320():
    rms = brokers(3, protocol="pre-kip-320")
    net = Network(rms)
    elect(rms, 1, 1, (1, 2, 3), 0)
    leader1 = rms[1].partitions[TP]
    leader1.append_records_to_leader(recs(4, "a-"), acks=-1, min_insync_replicas=1, now_ms=0)
    net.pump(now_ms=0, rounds=4)
    elect(rms, 1, 1, (1,), 100)
    leader1.append_records_to_leader(recs(4, "lost-"), acks=-1, min_insync_replicas=1, now_ms=100)
    consumer = Consumer(bootstrap=(1,), reset_policy="earliest", protocol="pre-kip-320")
    consumer.assign([TP])
    assert len(drive(consumer, rms, (1, 1), 100)) == 8
    net.down.add(1)
    elect(rms, 2, 2, (2,), 200, down={1})
    rms[2].partitions[TP].append_records_to_leader(recs(6, "new-"), acks=1, min_insync_replicas=1, now_ms=200)
    consumer.metadata.request_update()
    read = drive(consumer, rms, (2, 2), 400)
    assert consumer.truncations == [] and consumer.resets[1:] == []
    assert [r.offset for r in read] == [8, 9]  # offsets 4-7 now hold other records: skipped silently

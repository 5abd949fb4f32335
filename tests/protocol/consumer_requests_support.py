"""Shared by the consumer request-manager tests (test_consumer_fetching, test_consumer_committed_offsets,
test_consumer_broker_requests): a `Consumer` whose metadata and broker versions are known up front, and
hand-made broker answers, so each test controls exactly what the consumer is told."""

from __future__ import annotations

from collections.abc import Iterable

from protocol_support import kafka_python_batch

from epochguard import Consumer
from epochguard.client.metadata import ClientMetadata
from epochguard.errors import Errors
from epochguard.protocol.api_versions import BROKER_API_VERSIONS
from epochguard.protocol.messages import (
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from epochguard.types import EpochProtocol, TopicPartition

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
BACKOFF = 100
TIMEOUT = 30_000
EPOCH = 5
BROKERS = (0, 1, 2, 3)


def cluster(leaders: dict[TopicPartition, int], epoch: int = EPOCH, brokers: Iterable[int] = BROKERS) -> MetadataResponse:
    """Metadata naming each partition's leader (-1: none) at `epoch`."""
    parts = tuple(
        MetadataResponsePartition(tp.partition, leader, epoch, (leader,), (leader,)) for tp, leader in leaders.items()
    )
    nodes = tuple(MetadataResponseBroker(b) for b in brokers)
    return MetadataResponse((MetadataResponseTopic("t", parts, "topic-t"),), nodes, version=12)


def known_consumer(
    partitions: Iterable[TopicPartition],
    leaders: dict[TopicPartition, int] | None = None,
    *,
    policy: str = "earliest",
    protocol: EpochProtocol = "kip-320",
    **kw,
) -> Consumer:
    """A consumer assigned `partitions` that already knows the metadata (default: broker 1 leads every
    partition at EPOCH, learned a back-off ago) and every broker's API versions."""
    partitions = list(partitions)
    metadata = ClientMetadata(protocol=protocol, topics=("t",), refresh_backoff_ms=BACKOFF)
    metadata.update(cluster(leaders or dict.fromkeys(partitions, 1)), -BACKOFF)
    c = Consumer(
        bootstrap=(1,), reset_policy=policy, protocol=protocol, retry_backoff_ms=BACKOFF, request_timeout_ms=TIMEOUT,
        metadata=metadata, api_versions=dict.fromkeys(BROKERS, BROKER_API_VERSIONS), **kw,
    )
    c.assign(partitions)
    return c


def fetches(c: Consumer, now_ms: int) -> dict[int, tuple[FetchRequest, list[tuple[TopicPartition, int]]]]:
    """The Fetch requests `poll_requests` sends now: node -> (request, [(partition, fetch offset)])."""
    return {
        node: (r, [(p.tp, p.fetch_offset) for p in r.partitions])
        for node, r in c.poll_requests(now_ms)
        if isinstance(r, FetchRequest)
    }


def one_fetch(c: Consumer, now_ms: int) -> FetchRequest:
    """The one Fetch request `poll_requests` sends now."""
    [(request, _)] = fetches(c, now_ms).values()
    return request


def answer_fetch(c: Consumer, node: int, request: FetchRequest, *parts: FetchPartitionData, now_ms: int = 0) -> None:
    c.on_response(node, request, FetchResponse(parts), now_ms)


def fetched(tp: TopicPartition, records: bytes = b"", error: Errors = Errors.NONE, **kw) -> FetchPartitionData:
    """One partition's Fetch answer."""
    return FetchPartitionData(tp.topic, tp.partition, error, high_watermark=100, records=records, **kw)


def batch(base_offset: int, n: int, epoch: int = EPOCH) -> bytes:
    """`n` records from `base_offset` in one v2 batch of leader epoch `epoch` (kafka-python's builder)."""
    return kafka_python_batch(base_offset, epoch, [f"v{base_offset + i}".encode() for i in range(n)])


def offsets(records) -> list[int]:
    return [r.offset for r in records.records()]

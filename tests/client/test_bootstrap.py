"""Bootstrap with a broker down: the client asks the next bootstrap node, as Kafka's
`NetworkClient.leastLoadedNode` does (a node with a connection and the fewest requests in flight, else one
connecting, else the one not in its reconnect back-off whose last attempt is oldest), never the first
address over and over. A producer whose first bootstrap address refused connections never got its
metadata (every Metadata request went to node -1); the consumer's group lookup asked the first node too."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest

from epochguard.client import AsyncConsumer, AsyncProducer, KafkaConsumer, KafkaProducer
from epochguard.client.network import NetworkClient
from epochguard.errors import KafkaConnectionError
from epochguard.types import OffsetAndMetadata, TopicPartition
from tests.client.test_network import METADATA, answer, handshake, read_request, run, with_server
from tests.wire.serving import Served

INPUT_0 = TopicPartition("input", 0)


async def serve_metadata(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await handshake(reader, writer)
    while True:
        header, _ = await read_request(reader)
        await answer(writer, header, METADATA)


@pytest.fixture
def dead_first(served: Served) -> Iterator[str]:
    """A bootstrap list whose first address refuses connections (bound, never listening)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]},{served.bootstrap}"
    finally:
        sock.close()


def test_least_loaded_node_skips_nodes_in_back_off_then_the_oldest_attempt_and_prefers_a_connection() -> None:
    refusing = [socket.socket() for _ in range(3)]
    for sock in refusing:
        sock.bind(("127.0.0.1", 0))

    async def body(live: str) -> None:
        dead = ",".join(f"127.0.0.1:{s.getsockname()[1]}" for s in refusing)
        net = NetworkClient(f"{dead},{live}", client_id="t", reconnect_backoff_ms=300, reconnect_backoff_max_ms=300)
        nodes = [-1, -2, -3]
        assert net.least_loaded_node(nodes) in nodes  # nothing tried yet: any of them
        tried: set[int] = set()
        for _ in nodes:  # a refused node backs off: the next pick is one not tried yet
            chosen = net.least_loaded_node(nodes)
            assert chosen is not None and chosen not in tried
            with pytest.raises(KafkaConnectionError):
                await net.connection(chosen)
            tried.add(chosen)
        assert net.least_loaded_node(nodes) is None  # every one in its back-off: none, the caller waits
        await asyncio.sleep(0.4)
        first_tried = min(nodes, key=lambda n: net._last_attempt[n])
        assert net.least_loaded_node(nodes) == first_tried  # out of back-off: the oldest attempt first
        await net.connection(-4)
        assert net.least_loaded_node([*nodes, -4]) == -4  # a node with a connection before any to connect
        await net.close()

    try:
        run(with_server(serve_metadata, body))
    finally:
        for sock in refusing:
            sock.close()


def test_sync_producer_and_consumer_get_metadata_past_a_dead_first_bootstrap(dead_first: str) -> None:
    producer = KafkaProducer(bootstrap_servers=dead_first, acks="all", client_id="eg-boot-p",
                             request_timeout_ms=5_000)
    try:
        metadata = producer.send("input", value=b"v", key=b"k", partition=0).get(timeout=15)
    finally:
        producer.close(timeout=5)
    assert metadata.partition == 0 and metadata.offset >= 0
    consumer = KafkaConsumer(bootstrap_servers=dead_first, client_id="eg-boot-c", group_id="g-boot",
                             enable_auto_commit=False, request_timeout_ms=5_000)
    try:
        # FindCoordinator before any metadata: it must not wait on the dead first address either.
        consumer.commit({INPUT_0: OffsetAndMetadata(metadata.offset, "", None)})
        assert consumer.committed(INPUT_0).offset == metadata.offset
        assert 0 in consumer.partitions_for_topic("input")
    finally:
        consumer.close()


def test_asyncio_producer_and_consumer_get_metadata_past_a_dead_first_bootstrap(dead_first: str) -> None:
    async def body() -> None:
        async with AsyncProducer(bootstrap_servers=dead_first, acks="all", client_id="eg-boot-ap",
                                 request_timeout_ms=5_000) as producer:
            delivery = await producer.send("input", value=b"v", key=b"k", partition=0)
            await producer.wait_for(lambda: delivery.done, 15)
        assert delivery.error is None and delivery.metadata is not None
        async with AsyncConsumer(bootstrap_servers=dead_first, client_id="eg-boot-ac", group_id="g-boot-a",
                                 enable_auto_commit=False, request_timeout_ms=5_000) as consumer:
            await consumer.commit({INPUT_0: OffsetAndMetadata(delivery.metadata.offset, "", None)})
            committed = await consumer.committed(INPUT_0)
            assert committed is not None and committed.offset == delivery.metadata.offset

    started = time.monotonic()
    asyncio.run(asyncio.wait_for(body(), 40))
    assert time.monotonic() - started < 40

"""Request latency of `epochguard serve` on loopback: Fetch round trips (p50/p99) against `serve clean`.

One connection sends a Fetch (v12, partition `input`-0 from offset 0, 64 KiB of 100-byte records
there, so the answer is immediate) and waits for its answer, again and again. Baselines in the same
run: an ApiVersions round trip on the same server (its request path without a log read), and a bare
asyncio echo of the same answer size on loopback (the socket floor). p50/p99 are in `extra_info`.

Run: pytest benches/python/test_bench_wire_latency.py --benchmark-only --benchmark-group-by=group
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import threading
import time
from collections.abc import Iterator

import pytest

kafka = pytest.importorskip("kafka", reason="kafka-python (the dev extra) builds the request frames")

ROUNDS = 2000
WARMUP = 200


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    from tests.wire.serving import Served

    served = Served("clean")
    try:
        producer = kafka.KafkaProducer(bootstrap_servers=served.bootstrap, acks="all", linger_ms=5)
        for i in range(2000):
            producer.send("input", value=b"%0100d" % i)
        producer.flush(30)
        producer.close()
        yield served.bootstrap
    finally:
        served.stop()


def _leader(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.split(",")[0].split(":")  # broker 1 leads input-0 in `clean`
    return host, int(port)


def _fetch_frame() -> bytes:
    from kafka.protocol.consumer import FetchRequest

    T = FetchRequest.FetchTopic
    req = FetchRequest[12](replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                           session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                           topics=[T(topic="input", partitions=[T.FetchPartition(
                               partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                               log_start_offset=-1, partition_max_bytes=64 << 10)])])
    req.with_header(correlation_id=1, client_id="bench")
    return bytes(req.encode(header=True, framed=True))


def _api_versions_frame() -> bytes:
    from kafka.protocol.metadata import ApiVersionsRequest

    req = ApiVersionsRequest[3](client_software_name="bench", client_software_version="1")
    req.with_header(correlation_id=1, client_id="bench")
    return bytes(req.encode(header=True, framed=True))


def _round_trips(address: tuple[str, int], frame: bytes, rounds: int) -> list[float]:
    with socket.create_connection(address) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            sock.sendall(frame)
            size = int.from_bytes(_read(sock, 4), "big")
            _read(sock, size)
            times.append(time.perf_counter() - start)
        return times


def _read(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def _report(benchmark, times: list[float]) -> None:
    ordered = sorted(times)
    p50 = ordered[len(ordered) // 2]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    benchmark.extra_info.update(p50_us=round(p50 * 1e6, 1), p99_us=round(p99 * 1e6, 1),
                                mean_us=round(statistics.fmean(times) * 1e6, 1), rounds=len(times))
    print(f"\n{benchmark.name}: p50 {p50 * 1e6:.0f} us, p99 {p99 * 1e6:.0f} us over {len(times)} round trips")


def _measure(benchmark, address: tuple[str, int], frame: bytes) -> None:
    _round_trips(address, frame, WARMUP)
    times: list[float] = []
    benchmark.pedantic(lambda: times.extend(_round_trips(address, frame, ROUNDS)), rounds=1, iterations=1)
    _report(benchmark, times)


@pytest.mark.benchmark(group="wire round trip on loopback")
def test_fetch_round_trip(benchmark, server: str) -> None:
    frame = _fetch_frame()
    with socket.create_connection(_leader(server)) as sock:  # the answer carries records
        sock.sendall(frame)
        size = int.from_bytes(_read(sock, 4), "big")
        assert size > 60_000
    _measure(benchmark, _leader(server), frame)


@pytest.mark.benchmark(group="wire round trip on loopback")
def test_api_versions_round_trip(benchmark, server: str) -> None:
    _measure(benchmark, _leader(server), _api_versions_frame())


@pytest.mark.benchmark(group="wire round trip on loopback")
def test_echo_round_trip_same_size(benchmark) -> None:
    """The floor: an asyncio server answering each 4-byte-prefixed frame with 64 KiB."""
    answer = (64 << 10).to_bytes(4, "big") + b"x" * (64 << 10)
    ready = threading.Event()
    port: list[int] = []
    loop = asyncio.new_event_loop()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                await reader.readexactly(size)
                writer.write(answer)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def start() -> None:
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        port.append(srv.sockets[0].getsockname()[1])
        ready.set()

    def run() -> None:
        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(5)
    _measure(benchmark, ("127.0.0.1", port[0]), _fetch_frame())
    loop.call_soon_threadsafe(loop.stop)

"""The watcher's core (issue 34): CPU time of one round over 10,000 partitions on 3 brokers, fed parsed answers.

- `no change`: Metadata, then one ListOffsets per broker, nothing moved (goal: 20 ms);
- `1,000 epoch changes`: 1,000 of them led by a new leader in a new epoch, each validated with
  OffsetsForLeaderEpoch (clean changes), then learned and read again (goal: 200 ms).

The named baseline, same run: the codec alone for the same round, encoding the ListOffsets requests and
decoding the Metadata and ListOffsets answers (`_core.encode_request` / `decode_response`), what any
driver pays on the wire for that round whatever decides. The issue's goals are absolute (ms of CPU); the
ratio says how much the core adds to the codec's own cost.

    nice .venv/bin/python -m pytest benches/python/test_bench_watch.py --benchmark-only --benchmark-group-by=group
"""

from __future__ import annotations

import pytest

from epochguard import _core
from epochguard.client.watcher import Stage, Watcher
from epochguard.protocol.api_versions import ApiKey
from epochguard.protocol.messages import (
    EpochEndOffset,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    Request,
    Response,
)

TOPICS, PER_TOPIC = 100, 100  # 10,000 partitions
BROKERS = (1, 2, 3)
CHANGED = 1000


def metadata(epoch_of: dict[tuple[str, int], int], leader_of: dict[tuple[str, int], int]) -> MetadataResponse:
    return MetadataResponse(
        tuple(
            MetadataResponseTopic(f"t{t}", tuple(
                MetadataResponsePartition(p, leader_of[f"t{t}", p], epoch_of[f"t{t}", p]) for p in range(PER_TOPIC)
            ))
            for t in range(TOPICS)
        ),
        brokers=tuple(MetadataResponseBroker(b) for b in BROKERS),
    )


class Broker:
    """Answers the round's requests from fixed logs: every partition's high watermark 1000, epoch e started
    at offset 500 * e (so a move from e to e + 1 is clean: the new leader's epoch e ends at 1000)."""

    def __init__(self) -> None:
        self.epoch: dict[tuple[str, int], int] = {}
        self.leader: dict[tuple[str, int], int] = {}
        for t in range(TOPICS):
            for p in range(PER_TOPIC):
                self.epoch[f"t{t}", p], self.leader[f"t{t}", p] = 1, BROKERS[(t * PER_TOPIC + p) % 3]
        self.meta = metadata(self.epoch, self.leader)
        self._answers: dict[tuple[str, int, int], Response] = {}

    def change(self, n: int) -> None:
        for key in list(self.epoch)[:n]:
            self.epoch[key] += 1
            self.leader[key] = BROKERS[(BROKERS.index(self.leader[key]) + 1) % 3]
        self.meta = metadata(self.epoch, self.leader)
        self._answers.clear()

    def answer(self, node: int, request: Request) -> Response:
        """Built once per (kind, broker, partitions) outside the clock: the core matches answers to its
        requests by partition, so the same answer serves every round."""
        key = (type(request).__name__, node, len(getattr(request, "partitions", ())))
        cached = self._answers.get(key)
        if cached is None:
            cached = self._answers[key] = self._build(request)
        return cached

    def _build(self, request: Request) -> Response:
        if isinstance(request, ListOffsetsRequest):
            return ListOffsetsResponse(tuple(
                ListOffsetsPartitionResponse(q.topic, q.partition_index, offset=1000, leader_epoch=q.current_leader_epoch)
                for q in request.partitions
            ))
        if isinstance(request, OffsetsForLeaderEpochRequest):
            return OffsetsForLeaderEpochResponse(tuple(
                EpochEndOffset(q.topic, q.partition_index, leader_epoch=q.leader_epoch, end_offset=1000)
                for q in request.partitions
            ))
        return self.meta


def one_round(w: Watcher, broker: Broker, log: list[tuple[Request, Response]] | None = None) -> int:
    """One round, answered by `broker`; `log` collects what was sent and answered."""
    sent = 0
    now = w.next_deadline_ms() or 0
    while True:
        requests = w.poll(now)
        if not requests:
            return sent
        for node, request in requests:
            sent += 1
            answer = broker.answer(node, request)
            if log is not None:
                log.append((request, answer))
            w.on_response(node, request, answer, now)


def watching(broker: Broker) -> Watcher:
    w = Watcher(interval_ms=1000, bootstrap_nodes=BROKERS)
    one_round(w, broker)
    assert len(w.partitions) == TOPICS * PER_TOPIC
    assert all(p.stage is Stage.READY and p.hw == 1000 for p in w.partitions.values())
    return w


@pytest.mark.benchmark(group="watch round, 10,000 partitions, no change")
def test_watch_core_round_no_change(benchmark) -> None:
    broker = Broker()
    w = watching(broker)
    one_round(w, broker)  # the answers are built (outside the clock)
    assert benchmark.pedantic(one_round, args=(w, broker), rounds=20, iterations=1, warmup_rounds=1) == 4
    assert w.take_events() == []


@pytest.mark.benchmark(group="watch round, 10,000 partitions, no change")
def test_codec_alone_same_round(benchmark) -> None:
    """Baseline: encode the same round's three ListOffsets requests, decode its Metadata and ListOffsets
    answers, with the Rust codec alone."""
    broker = Broker()
    w = watching(broker)
    log: list[tuple[Request, Response]] = []
    one_round(w, broker, log)
    lo = _core.RequestHeader(ApiKey.LIST_OFFSETS, 7, 1, "bench")
    md = _core.RequestHeader(ApiKey.METADATA, 12, 1, "bench")
    requests = [r for r, _ in log if isinstance(r, ListOffsetsRequest)]
    assert len(requests) == 3 and sum(len(r.partitions) for r in requests) == TOPICS * PER_TOPIC
    frames = [(_core.encode_response(lo if isinstance(r, ListOffsetsRequest) else md, a)[4:],
               ApiKey.LIST_OFFSETS if isinstance(r, ListOffsetsRequest) else ApiKey.METADATA,
               7 if isinstance(r, ListOffsetsRequest) else 12) for r, a in log]

    def codec() -> None:
        for r in requests:
            _core.encode_request(lo, r)
        for frame, key, version in frames:
            _core.decode_response(key, version, frame)

    benchmark.pedantic(codec, rounds=20, iterations=1, warmup_rounds=1)


@pytest.mark.benchmark(group="watch round, 10,000 partitions, 1,000 epoch changes")
def test_watch_core_round_with_1000_epoch_changes(benchmark) -> None:
    broker = Broker()
    state: dict[str, Watcher] = {}

    def setup() -> tuple[tuple[Watcher, Broker], dict]:
        broker.__init__()  # type: ignore[misc]
        state["w"] = w = watching(broker)
        warm = watching(broker)
        broker.change(CHANGED)
        one_round(warm, broker)  # the answers are built outside the clock
        return (w, broker), {}

    benchmark.pedantic(one_round, setup=setup, rounds=5, iterations=1)
    w = state["w"]
    assert w.take_events() == []
    moved = [p for p in w.partitions.values() if p.position_epoch == 2]
    assert len(moved) == CHANGED and all(p.stage is Stage.READY and p.hw == 1000 for p in moved)

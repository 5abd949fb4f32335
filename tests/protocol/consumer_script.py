"""A scripted cluster for driving one `Consumer` through its public API: real sans-IO brokers
(`ReplicaManager`s with a log per partition), the metadata the test announces, and per request type an
optional override that answers in the broker's place. (A plain module, like protocol_support.)"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from protocol_support import CONTROLLER, recs, state

from epochguard import Consumer, PartitionLog, ReplicaManager
from epochguard.protocol.api_versions import (
    BROKER_API_VERSIONS,
    ApiVersionsRequest,
    ApiVersionsResponse,
    NodeApiVersions,
)
from epochguard.protocol.messages import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from epochguard.types import TopicPartition

BACKOFF = 100
TIMEOUT = 5_000

Answer = Callable[[int, object], object]


class Cluster:
    """Brokers leading partitions at epochs, the metadata naming them, and optional overrides."""

    def __init__(self) -> None:
        self.brokers: dict[int, ReplicaManager] = {}
        self.leaders: dict[TopicPartition, tuple[int, int]] = {}  # tp -> (leader, epoch) announced
        self.versions: dict[int, NodeApiVersions] = {}  # a broker's ApiVersions (default: BROKER_API_VERSIONS)
        self.overrides: dict[type, Answer] = {}
        self.sent: list[tuple[int, object]] = []
        self._logs: dict[int, dict[TopicPartition, tuple[PartitionLog, int]]] = {}

    def lead(self, tp: TopicPartition, broker_id: int, epoch: int, batches: Iterable[tuple[int, int]] = ()) -> None:
        """`broker_id` leads `tp` at `epoch` with a log of (epoch, record count) batches, and the
        metadata says so (the broker is rebuilt with every partition it leads)."""
        log = PartitionLog(tp)
        for e, n in batches:
            log.append_as_leader(recs(n, f"b{broker_id}-e{e}-"), e, timestamp_ms=1000 + 100 * e)
        log.update_high_watermark(log.log_end_offset)
        self._logs.setdefault(broker_id, {})[tp] = (log, epoch)
        rm = ReplicaManager(broker_id, controller_id=CONTROLLER, logs={t: lg for t, (lg, _) in self._logs[broker_id].items()})
        for t, (_, e) in self._logs[broker_id].items():
            rm.apply_partition_state(state(broker_id, e, isr=(broker_id,), replicas=(broker_id,), tp=t), 0)
        self.brokers[broker_id] = rm
        self.leaders[tp] = (broker_id, epoch)

    def metadata(self) -> MetadataResponse:
        topics: dict[str, list[MetadataResponsePartition]] = {}
        for tp, (leader, epoch) in sorted(self.leaders.items()):
            topics.setdefault(tp.topic, []).append(
                MetadataResponsePartition(tp.partition, leader, epoch, (leader,), (leader,))
            )
        return MetadataResponse(
            tuple(MetadataResponseTopic(t, tuple(ps), f"id-{t}") for t, ps in sorted(topics.items())),
            tuple(MetadataResponseBroker(b) for b in sorted(self.brokers)),
            version=12,
        )

    def answer(self, node: int, request: object) -> object:
        override = self.overrides.get(type(request))
        if override is not None:
            return override(node, request)
        if isinstance(request, MetadataRequest):
            return self.metadata()
        if isinstance(request, ApiVersionsRequest):
            return ApiVersionsResponse(tuple(self.versions.get(node, BROKER_API_VERSIONS)))
        return self.brokers[node].handle(-1, request, 0)

    def run(self, c: Consumer, now_ms: int = 0, rounds: int = 6, hold: Callable[[object], bool] = lambda r: False) -> list:
        """Answer every request the consumer sends for `rounds` rounds; `hold` keeps some answers back."""
        held = []
        for _ in range(rounds):
            for node, request in c.poll_requests(now_ms):
                self.sent.append((node, request))
                response = self.answer(node, request)
                if hold(request):
                    held.append((node, request, response))
                else:
                    c.on_response(node, request, response, now_ms)
        return held

    def requests(self, kind: type) -> list:
        return [r for _, r in self.sent if isinstance(r, kind)]


def consumer(*tps: TopicPartition, policy: str = "earliest", **kw) -> Consumer:
    c = Consumer(bootstrap=(1,), reset_policy=policy, retry_backoff_ms=BACKOFF, request_timeout_ms=TIMEOUT, **kw)
    c.assign(tps)
    return c


def sent_now(c: Consumer, now_ms: int, kind: type) -> list[tuple[int, object]]:
    """The requests of one kind in one `poll_requests` round (the others are dropped unanswered)."""
    return [(n, r) for n, r in c.poll_requests(now_ms) if isinstance(r, kind)]

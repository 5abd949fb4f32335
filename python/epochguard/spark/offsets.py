"""The driver side of ``epochguard-kafka``: partitions, ListOffsets and OffsetsForLeaderEpoch, blocking.

Mirrors Spark's `KafkaOffsetReaderAdmin` (connector/kafka-0-10-sql), which asks the Admin client for
each partition's latest offset and drops the leader epoch the answer carries. This reader keeps it:
every offset it plans is an `EpochOffset` (offset, leader epoch of the same ListOffsets answer), and
`end_offsets` asks the leaders where the log of an epoch ends (OffsetsForLeaderEpoch v3+, the request
Kafka's consumer validates positions with, KIP-320). `check` applies the consumer's own validator
(`client.consumer.validator.validate_position`, Kafka's `maybeCompleteValidation` under policy none) to
an answer: a checkpoint is either confirmed, or truncated at an exact divergence point, or the leader
cannot place it (undefined), which is never resolved by guessing.

Requests go through epochguard's `NetworkClient` on a private event loop (`LoopThread`), one request
per leader, retried on the errors Kafka's clients retry (stale leader, epoch, KIP-207's
OFFSET_NOT_AVAILABLE) after a metadata refresh, until `timeout_ms`. `requests` counts what was sent by
API, so a test can check the steady-state cost per trigger.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from epochguard.client.blocking import LoopThread
from epochguard.client.consumer.validator import Resume, Truncated, validate_position
from epochguard.client.network import NetworkClient
from epochguard.errors import EpochGuardError, Errors, KafkaTimeoutError, LogTruncationError
from epochguard.protocol.messages import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetForLeaderPartition,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
)
from epochguard.types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchPosition,
    LeaderAndEpoch,
    OffsetAndMetadata,
    TopicPartition,
    epoch_or_none,
    epoch_or_sentinel,
)

__all__ = ["EpochOffset", "OffsetReader", "Truncation", "TRUNCATION_PREFIX", "check", "truncation_error"]

TRUNCATION_PREFIX = "[EPOCHGUARD_LOG_TRUNCATION]"
RETRIABLE = frozenset({
    Errors.NOT_LEADER_OR_FOLLOWER, Errors.LEADER_NOT_AVAILABLE, Errors.REPLICA_NOT_AVAILABLE,
    Errors.KAFKA_STORAGE_ERROR, Errors.FENCED_LEADER_EPOCH, Errors.UNKNOWN_LEADER_EPOCH,
    Errors.OFFSET_NOT_AVAILABLE, Errors.UNKNOWN_TOPIC_OR_PARTITION,
})


@dataclass(frozen=True, slots=True)
class EpochOffset:
    """A position in a partition's log with the leader epoch it was planned at (None: unknown)."""

    offset: int
    epoch: int | None

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "epoch": self.epoch}


@dataclass(frozen=True, slots=True)
class Truncation:
    """A checkpoint the leader's log no longer holds: records from `divergence` on differ (or, with
    `divergence` None, the leader could not say where: the undefined answer)."""

    tp: TopicPartition
    checkpoint: EpochOffset
    divergence: EpochOffset | None
    leader_epoch: int | None

    @property
    def phantoms(self) -> tuple[int, int] | None:
        """[from, until) of the offsets whose records, read at epochs <= the checkpoint's, are gone."""
        if self.divergence is None:
            return None
        return self.divergence.offset, self.checkpoint.offset

    def describe(self) -> str:
        ck = self.checkpoint
        where = f"{self.tp.topic} partition {self.tp.partition}: checkpointed offset {ck.offset} epoch {ck.epoch}"
        if self.divergence is None:
            return (f"{where}: the leader (epoch {self.leader_epoch}) cannot place it (OffsetsForLeaderEpoch "
                    f"answered an undefined epoch/offset), so where the logs diverge is unknown")
        d = self.divergence
        return (f"{where}: the leader's log (epoch {self.leader_epoch}) diverges at offset {d.offset} "
                f"(epoch {d.epoch}); phantom range [{d.offset}, {ck.offset}) (records at epoch <= {ck.epoch})")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "topic": self.tp.topic, "partition": self.tp.partition,
            "checkpoint": self.checkpoint.to_json(),
            "divergence": None if self.divergence is None else self.divergence.to_json(),
            "leader_epoch": self.leader_epoch,
        }
        if self.phantoms is not None:
            out["phantoms"] = {"from": self.phantoms[0], "until": self.phantoms[1], "max_epoch": self.checkpoint.epoch}
        return out


def truncation_error(truncations: Iterable[Truncation], *, what: str = "") -> LogTruncationError:
    """One `LogTruncationError` for all of them, its message starting with `TRUNCATION_PREFIX`."""
    found = sorted(truncations, key=lambda t: t.tp)
    head = f"{TRUNCATION_PREFIX} log truncated below the checkpoint{' ' + what if what else ''}: "
    return LogTruncationError(
        head + "; ".join(t.describe() for t in found),
        offset_out_of_range_partitions={t.tp: t.checkpoint.offset for t in found},
        divergent_offsets={t.tp: OffsetAndMetadata(t.divergence.offset, leader_epoch=t.divergence.epoch)
                           for t in found if t.divergence is not None},
    )


def check(tp: TopicPartition, checkpoint: EpochOffset, answer: tuple[int, int]) -> Truncation | None:
    """The consumer's validator (policy none) on an OffsetsForLeaderEpoch answer (epoch, end offset) for
    `checkpoint`: None if the leader's log holds it, else the truncation."""
    epoch, end = answer
    outcome = validate_position(FetchPosition(checkpoint.offset, checkpoint.epoch, LeaderAndEpoch(None, None)),
                                "none", epoch, end)
    if isinstance(outcome, Resume):
        return None
    assert isinstance(outcome, Truncated)
    div = outcome.divergent
    return Truncation(tp, checkpoint, None if div is None else EpochOffset(div.offset, div.leader_epoch), None)


class OffsetReader:
    """Blocking ListOffsets / OffsetsForLeaderEpoch / Metadata for the driver (see module docstring)."""

    def __init__(self, bootstrap_servers: str, *, client_id: str = "epochguard-spark-driver",
                 request_timeout_ms: int = 30_000, retry_backoff_ms: int = 100, timeout_ms: int = 60_000) -> None:
        self._loop = LoopThread()
        self._network = self._loop.run(lambda: _made(lambda: NetworkClient(
            bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms)))
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.timeout_s = timeout_ms / 1000
        self.leaders: dict[TopicPartition, tuple[int, int | None]] = {}  # tp -> (leader id, leader epoch)
        self.topic_partitions: dict[str, list[int]] = {}
        self.requests: collections.Counter[str] = collections.Counter()

    def close(self) -> None:
        if not self._loop.loop.is_closed():
            try:
                self._loop.run(self._network.close)
            finally:
                self._loop.stop()

    def _send(self, node: int, request: Any) -> Any:
        self.requests[type(request).__name__.removesuffix("Request")] += 1
        return self._loop.run(lambda: self._network.send(node, request))

    def _any_node(self) -> int:
        known = sorted({leader for leader, _ in self.leaders.values()} | set(self._network.addresses))
        return known[0]

    # --- metadata ---------------------------------------------------------------------------------
    def refresh(self, topics: Iterable[str]) -> None:
        """Metadata for `topics`: each partition's leader and leader epoch, the brokers' addresses."""
        names = tuple(sorted(set(topics)))
        last: Exception | None = None
        for node in [self._any_node(), *sorted(self._network.bootstrap)]:
            try:
                response = self._send(node, MetadataRequest(names))
            except EpochGuardError as exc:
                last = exc
                continue
            assert isinstance(response, MetadataResponse)
            self._network.update_brokers({b.node_id: (b.host, b.port) for b in response.brokers})
            for topic in response.topics:
                if topic.error_code != Errors.NONE:
                    continue
                self.topic_partitions[topic.name] = sorted(p.partition_index for p in topic.partitions)
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition_index)
                    epoch = epoch_or_none(p.leader_epoch) if response.version >= 9 else None
                    self.leaders[tp] = (p.leader_id, epoch)
            return
        raise KafkaTimeoutError(f"no broker answered Metadata for {list(names)}: {last!r}")

    def partitions_of(self, topics: Iterable[str]) -> list[TopicPartition]:
        """Every partition of `topics` (a topic that does not exist has none)."""
        names = sorted(set(topics))
        self.refresh(names)
        return [TopicPartition(t, p) for t in names for p in self.topic_partitions.get(t, [])]

    # --- per-leader requests with retries ---------------------------------------------------------
    def _by_leader(self, tps: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
        out: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            leader = self.leaders.get(tp, (-1, None))[0]
            out.setdefault(leader, []).append(tp)
        return out

    def _each_leader(self, tps: Iterable[TopicPartition], ask: Any, what: str) -> dict[TopicPartition, Any]:
        """`ask(leader, tps)` -> {tp: answer or None (retry)} per leader until every tp has an answer."""
        wanted = set(tps)
        got: dict[TopicPartition, Any] = {}
        deadline = time.monotonic() + self.timeout_s
        if any(tp not in self.leaders for tp in wanted):
            self.refresh(tp.topic for tp in wanted)
        while True:
            missing = wanted - set(got)
            if not missing:
                return got
            retry = False
            for leader, group in sorted(self._by_leader(missing).items()):
                if leader < 0:
                    retry = True
                    continue
                try:
                    answers = ask(leader, group)
                except EpochGuardError:
                    retry = True
                    continue
                for tp in group:
                    if answers.get(tp) is None:
                        retry = True
                    else:
                        got[tp] = answers[tp]
            if retry and set(got) != wanted:
                if time.monotonic() >= deadline:
                    raise KafkaTimeoutError(f"{what} for {sorted(wanted - set(got))} did not complete within "
                                            f"{self.timeout_s * 1000:.0f} ms")
                time.sleep(self.retry_backoff_s)
                self.refresh(tp.topic for tp in wanted)

    def list_offsets(self, tps: Iterable[TopicPartition], latest: bool = True) -> dict[TopicPartition, EpochOffset]:
        """Each partition's latest (high watermark) or earliest offset, with the answer's leader epoch."""
        ts = LATEST_TIMESTAMP if latest else EARLIEST_TIMESTAMP

        def ask(leader: int, group: list[TopicPartition]) -> dict[TopicPartition, EpochOffset | None]:
            request = ListOffsetsRequest(tuple(
                ListOffsetsPartition(tp.topic, tp.partition, ts, epoch_or_sentinel(self.leaders[tp][1]))
                for tp in group))
            response = self._send(leader, request)
            assert isinstance(response, ListOffsetsResponse)
            out: dict[TopicPartition, EpochOffset | None] = {}
            for p in response.partitions:
                if p.error_code == Errors.NONE and p.offset >= 0:
                    out[p.tp] = EpochOffset(p.offset, epoch_or_none(p.leader_epoch))
                elif p.error_code in RETRIABLE or p.error_code == Errors.NONE:
                    out[p.tp] = None
                else:
                    raise _fatal(p.error_code, f"ListOffsets {p.tp}")
            return out

        return self._each_leader(tps, ask, "ListOffsets")

    def end_offsets(self, positions: Mapping[TopicPartition, EpochOffset]) -> dict[TopicPartition, tuple[int, int]]:
        """OffsetsForLeaderEpoch: per partition, the leader's (largest epoch <= the position's epoch, the
        end offset of that epoch); (-1, -1) when it has no such epoch (undefined)."""

        def ask(leader: int, group: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int] | None]:
            request = OffsetsForLeaderEpochRequest(tuple(
                OffsetForLeaderPartition(tp.topic, tp.partition, epoch_or_sentinel(positions[tp].epoch),
                                         epoch_or_sentinel(self.leaders[tp][1]))
                for tp in group))
            response = self._send(leader, request)
            assert isinstance(response, OffsetsForLeaderEpochResponse)
            out: dict[TopicPartition, tuple[int, int] | None] = {}
            for p in response.partitions:
                if p.error_code == Errors.NONE:
                    out[p.tp] = (p.leader_epoch, p.end_offset)
                elif p.error_code in RETRIABLE:
                    out[p.tp] = None
                else:
                    raise _fatal(p.error_code, f"OffsetsForLeaderEpoch {p.tp}")
            return out

        return self._each_leader([tp for tp, pos in positions.items() if pos.epoch is not None], ask,
                                 "OffsetsForLeaderEpoch")

    def validate(self, positions: Mapping[TopicPartition, EpochOffset]) -> list[Truncation]:
        """The truncations among `positions` (those without an epoch cannot be validated, as in Kafka)."""
        answers = self.end_offsets(positions)
        found = []
        for tp, answer in sorted(answers.items()):
            t = check(tp, positions[tp], answer)
            if t is not None:
                found.append(Truncation(t.tp, t.checkpoint, t.divergence, self.leaders.get(tp, (-1, None))[1]))
        return found


def _fatal(code: Errors, what: str) -> EpochGuardError:
    return code.exception(f"{what}: {code.name}") or EpochGuardError(f"{what}: {code.name}")


async def _made(factory: Any) -> Any:
    return factory()


"""Shared helpers for the protocol tests: independent batch builders (kafka-python), partition
states, and a tiny in-memory network that pumps requests between sans-IO brokers. (A plain module,
not conftest.py: several test folders have a conftest and `from conftest import` would be ambiguous.)"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

from epochguard.broker.replica_manager import ReplicaManager
from epochguard.errors import Errors
from epochguard.protocol.messages import AlterPartitionRequest, AlterPartitionResponse, LeaderAndIsrPartitionState
from epochguard.types import TopicPartition

TP = TopicPartition("t", 0)
CONTROLLER = 1000


def kafka_python_batch(
    base_offset: int, partition_leader_epoch: int, values: Sequence[bytes], *, timestamp: int = 1_000, compression: int = 0
) -> bytes:
    """A v2 batch built by kafka-python's DefaultRecordBatchBuilder, base offset and partition leader
    epoch patched in place the way a Kafka leader does (neither is covered by the CRC)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, compression, False, -1, -1, -1, 1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp + i, None, value, [])
    raw = bytearray(builder.build())
    struct.pack_into(">q", raw, 0, base_offset)
    struct.pack_into(">i", raw, 12, partition_leader_epoch)
    return bytes(raw)


def kafka_python_legacy_batch(base_offset: int, values: Sequence[bytes], magic: int = 1) -> bytes:
    """A magic 0/1 message set built by kafka-python's LegacyRecordBatchBuilder (no epochs)."""
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic, 0, 1 << 20)
    for i, value in enumerate(values):
        builder.append(base_offset + i, 1_000 + i if magic else None, None, value)
    return bytes(builder.build())


def recs(n: int, prefix: str = "v") -> list[tuple[bytes | None, bytes]]:
    return [(None, f"{prefix}{i}".encode()) for i in range(n)]


def state(leader: int, epoch: int, isr: Sequence[int] = (1, 2, 3), replicas: Sequence[int] = (1, 2, 3), partition_epoch: int = 0, tp: TopicPartition = TP) -> LeaderAndIsrPartitionState:
    return LeaderAndIsrPartitionState(tp.topic, tp.partition, leader, epoch, tuple(isr), tuple(replicas), partition_epoch)


class Controller:
    """Accepts every AlterPartition (optionally refusing some replicas as INELIGIBLE_REPLICA)."""

    def __init__(self) -> None:
        self.ineligible: set[int] = set()
        self.requests: list[AlterPartitionRequest] = []

    def handle(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        self.requests.append(request)
        if set(request.new_isr) & self.ineligible:
            return AlterPartitionResponse(request.topic, request.partition_index, Errors.INELIGIBLE_REPLICA)
        return AlterPartitionResponse(
            request.topic,
            request.partition_index,
            Errors.NONE,
            request.broker_id,
            request.leader_epoch,
            request.new_isr,
            request.partition_epoch + 1,
        )


class Network:
    """Delivers every request between brokers (and to the controller) until nothing moves."""

    def __init__(self, brokers: dict[int, ReplicaManager], controller: Controller | None = None) -> None:
        self.brokers = brokers
        self.controller = controller or Controller()
        self.down: set[int] = set()
        self.log: list[tuple[int, int, object, object]] = []

    def pump(self, now_ms: int = 0, rounds: int = 50, drop: Callable[[int, int, object], bool] | None = None) -> int:
        moved = 0
        for _ in range(rounds):
            batch = 0
            for src, broker in self.brokers.items():
                if src in self.down:
                    continue
                for dst, request in broker.poll_requests(now_ms):
                    batch += 1
                    if dst == CONTROLLER:
                        response = self.controller.handle(request)  # type: ignore[arg-type]
                    elif dst in self.down or (drop is not None and drop(src, dst, request)):
                        broker.on_request_failed(dst, request, now_ms)
                        continue
                    else:
                        response = self.brokers[dst].handle(src, request, now_ms)
                    self.log.append((src, dst, request, response))
                    broker.on_response(dst, request, response, now_ms)
            moved += batch
            if batch == 0:
                break
        return moved


def brokers(n: int = 3, protocol: str = "kip-320", **kw) -> dict[int, ReplicaManager]:
    return {i: ReplicaManager(i, protocol=protocol, controller_id=CONTROLLER, **kw) for i in range(1, n + 1)}

"""Build real Kafka log directories for tests, with an independent writer (kafka-python's
DefaultRecordBatchBuilder) or the core's encoder, plus hand-written checkpoint files.

A replica is described as a list of batches ``(epoch, [(key, value), ...])`` appended in order from
``start_offset``; offsets are assigned as a broker does (base offset and partition leader epoch are
patched into the header, outside the CRC, exactly where the broker writes them).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

Batch = tuple[int, Sequence[tuple[bytes | None, bytes | None]]]  # (leader epoch, records)
BASE_TIMESTAMP = 1_700_000_000_000


def kafka_python_batch(
    records: Sequence[tuple[bytes | None, bytes | None]], base_offset: int, epoch: int, compression: int = 0
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for delta, (key, value) in enumerate(records):
        headers = [("n", str(base_offset + delta).encode())]
        builder.append(delta, timestamp=BASE_TIMESTAMP + base_offset + delta, key=key, value=value, headers=headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)  # BaseOffset, set by the broker
    struct.pack_into(">i", data, 12, epoch)  # PartitionLeaderEpoch, set by the broker
    return bytes(data)


def core_batch(
    records: Sequence[tuple[bytes | None, bytes | None]], base_offset: int, epoch: int, compression: str = "none"
) -> bytes:
    from epochguard import _core

    rows = [(k, v, [("n", str(base_offset + i).encode())]) for i, (k, v) in enumerate(records)]
    return _core.encode_batch(
        rows,
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        compression=compression,
        base_timestamp=BASE_TIMESTAMP + base_offset,
    )


@dataclass
class Replica:
    """One broker's copy of a partition; `records` keeps (offset, epoch, key, value) for assertions."""

    topic: str
    partition: int
    batches: list[Batch]
    start_offset: int = 0
    epochs: list[tuple[int, int]] | None = None  # None: derived from the batches; []: empty file
    write_checkpoint: bool = True
    topic_id: str | None = None
    segment_records: int | None = None  # roll a new segment every N records
    records: list[tuple[int, int, bytes | None, bytes | None]] = field(default_factory=list)


def write_log_dir(
    root: Path,
    broker: int,
    replicas: Sequence[Replica],
    *,
    writer: str = "kafka-python",
    meta: str | None = "broker.id",
    high_watermarks: dict[tuple[str, int], int] | None = None,
) -> Path:
    """Write `replicas` as broker `broker`'s log dir ``root/broker-<id>``; returns its path."""
    log_dir = root / f"broker-{broker}"
    log_dir.mkdir(parents=True, exist_ok=True)
    if meta:
        # As Kafka writes them: version 0 (ZooKeeper era) names the broker by broker.id, version 1
        # (KRaft) by node.id and needs cluster.id.
        version = "version=0" if meta == "broker.id" else "version=1\ncluster.id=test-cluster"
        (log_dir / "meta.properties").write_text(f"#Written by tests\n{version}\n{meta}={broker}\n")
    if high_watermarks is not None:
        lines = ["0", str(len(high_watermarks))] + [f"{t} {p} {o}" for (t, p), o in high_watermarks.items()]
        (log_dir / "replication-offset-checkpoint").write_text("\n".join(lines) + "\n")
    build = kafka_python_batch if writer == "kafka-python" else core_batch
    for replica in replicas:
        part = log_dir / f"{replica.topic}-{replica.partition}"
        part.mkdir()
        offset, segment_base, segment_count = replica.start_offset, replica.start_offset, 0
        segments: dict[int, bytearray] = {segment_base: bytearray()}
        derived: list[tuple[int, int]] = []
        for epoch, records in replica.batches:
            if replica.segment_records and segment_count >= replica.segment_records:
                segment_base, segment_count = offset, 0
                segments[segment_base] = bytearray()
            segments[segment_base] += build(records, offset, epoch)
            if not derived or derived[-1][0] != epoch:
                derived.append((epoch, offset))
            for key, value in records:
                replica.records.append((offset, epoch, key, value))
                offset += 1
            segment_count += len(records)
        for base, data in segments.items():
            (part / f"{base:020d}.log").write_bytes(bytes(data))
        if replica.write_checkpoint:
            epochs = derived if replica.epochs is None else replica.epochs
            lines = ["0", str(len(epochs))] + [f"{e} {s}" for e, s in epochs]
            (part / "leader-epoch-checkpoint").write_text("\n".join(lines) + "\n")
        if replica.topic_id:
            (part / "partition.metadata").write_text(f"version: 0\ntopic_id: {replica.topic_id}\n")
    return log_dir


def records(prefix: str, first: int, count: int) -> list[tuple[bytes, bytes]]:
    """`count` distinct (key, value) pairs, tagged by `prefix` so replicas' records differ."""
    return [(f"k{i}".encode(), f"{prefix}-{i}".encode()) for i in range(first, first + count)]

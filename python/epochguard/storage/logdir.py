"""A broker's whole log directory: partition dirs plus the root files Kafka keeps next to them.

Mirrors the on-disk layout of Kafka's `LogManager`: `meta.properties` (`MetaProperties`, version 1 with
`node.id`; `broker.id` is written too for ZooKeeper-era tools), the root offset checkpoints
(`OffsetCheckpointFile`: `replication-offset-checkpoint` = high watermarks, `log-start-offset-checkpoint`,
`recovery-point-offset-checkpoint`) and per partition `partition.metadata` (`PartitionMetadataFile`,
the topic id). Partition dirs themselves are `epochguard.storage.log.PartitionLog`. Reading goes through the
pure parsers of `epochguard.storage.logdir_format` (shared with the Spark listing); this module does the I/O.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from epochguard.errors import MalformedFileError
from epochguard.storage.log import DEFAULT_SEGMENT_BYTES, PartitionLog, parse_partition_dir_name
from epochguard.storage.logdir_format import (
    META_PROPERTIES,
    PARTITION_METADATA,
    parse_meta_properties,
    parse_offset_checkpoint,
    parse_partition_metadata,
    parse_properties,
)
from epochguard.types import TopicPartition

__all__ = [
    "META_PROPERTIES",
    "REPLICATION_OFFSET_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "RECOVERY_POINT_OFFSET_CHECKPOINT",
    "PARTITION_METADATA",
    "BrokerLogDir",
    "kafka_uuid",
    "write_meta_properties",
    "read_meta_properties",
    "write_offset_checkpoint",
    "read_offset_checkpoint",
    "write_partition_metadata",
    "read_partition_metadata",
    "write_log_dir",
    "write_root_checkpoints",
    "read_log_dir",
]

REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
RECOVERY_POINT_OFFSET_CHECKPOINT = "recovery-point-offset-checkpoint"


def kafka_uuid(value: str | uuid.UUID) -> str:
    """A UUID in Kafka's string form (URL-safe base64 of the 16 bytes, no padding); Kafka-form input passes through."""
    if isinstance(value, str) and len(value) == 22:
        base64.urlsafe_b64decode(value + "==")  # validates
        return value
    u = value if isinstance(value, uuid.UUID) else uuid.UUID(value)
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode("ascii")


DEFAULT_CLUSTER_ID = kafka_uuid(uuid.uuid5(uuid.NAMESPACE_URL, "https://epochguard/cluster"))


def _atomic_write(path: Path, text: str) -> None:
    """Write, fsync, rename over the target, fsync the directory (Kafka's CheckpointFile discipline)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_meta_properties(root: str | os.PathLike[str], node_id: int, cluster_id: str = DEFAULT_CLUSTER_ID) -> Path:
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    path = root / META_PROPERTIES
    directory_id = kafka_uuid(uuid.uuid5(uuid.NAMESPACE_URL, f"https://epochguard/{cluster_id}/{node_id}/{root.name}"))
    _atomic_write(
        path,
        "#\n#Written by epochguard\n"
        f"broker.id={node_id}\ncluster.id={cluster_id}\ndirectory.id={directory_id}\nnode.id={node_id}\nversion=1\n",
    )
    return path


def read_meta_properties(root: str | os.PathLike[str]) -> dict[str, str]:
    """The key=value pairs of `meta.properties` (comments skipped)."""
    path = Path(root) / META_PROPERTIES
    return {key: value for key, (value, _) in parse_properties(path.read_bytes(), str(path)).items()}


def write_offset_checkpoint(path: str | os.PathLike[str], offsets: Mapping[TopicPartition, int]) -> None:
    """`0`, count, then `<topic> <partition> <offset>` lines, written atomically."""
    lines = [f"{tp.topic} {tp.partition} {off}\n" for tp, off in sorted(offsets.items())]
    _atomic_write(Path(path), f"0\n{len(lines)}\n" + "".join(lines))


def read_offset_checkpoint(path: str | os.PathLike[str]) -> dict[TopicPartition, int]:
    """Parse an offset checkpoint; a missing file is empty. Malformed content raises
    `MalformedFileError` (a `ValueError`) naming the file and line."""
    path = Path(path)
    if not path.exists():
        return {}
    return parse_offset_checkpoint(path.read_bytes(), str(path))


def write_partition_metadata(partition_dir: str | os.PathLike[str], topic_id: str | uuid.UUID) -> None:
    _atomic_write(Path(partition_dir) / PARTITION_METADATA, f"version: 0\ntopic_id: {kafka_uuid(topic_id)}\n")


def read_partition_metadata(partition_dir: str | os.PathLike[str]) -> str | None:
    path = Path(partition_dir) / PARTITION_METADATA
    if not path.exists():
        return None
    return parse_partition_metadata(path.read_bytes(), str(path))


@dataclass
class BrokerLogDir:
    """A broker's log directory read back: its node id and every partition log in it."""

    root: Path
    node_id: int
    cluster_id: str | None
    logs: dict[TopicPartition, PartitionLog] = field(default_factory=dict)
    topic_ids: dict[str, str] = field(default_factory=dict)


def write_log_dir(
    root: str | os.PathLike[str],
    node_id: int,
    logs: Iterable[PartitionLog],
    *,
    cluster_id: str = DEFAULT_CLUSTER_ID,
    topic_ids: Mapping[str, str | uuid.UUID] | None = None,
) -> Path:
    """Write a broker log dir: meta.properties, one partition dir per log, and the root checkpoints."""
    root = Path(root)
    write_meta_properties(root, node_id, cluster_id)
    logs = list(logs)
    for log in logs:
        partition_dir = root / str(log.tp)
        if log.dir is None or log.dir.resolve() != partition_dir.resolve():
            log.write_to(partition_dir)
        if topic_ids and log.tp.topic in topic_ids:
            write_partition_metadata(partition_dir, topic_ids[log.tp.topic])
    write_root_checkpoints(root, logs)
    return root


def write_root_checkpoints(root: str | os.PathLike[str], logs: Iterable[PartitionLog]) -> None:
    """High watermarks, log start offsets and recovery points of `logs`, at the log dir root."""
    root = Path(root)
    logs = list(logs)
    write_offset_checkpoint(root / REPLICATION_OFFSET_CHECKPOINT, {log.tp: log.high_watermark for log in logs})
    write_offset_checkpoint(root / LOG_START_OFFSET_CHECKPOINT, {log.tp: log.log_start_offset for log in logs})
    write_offset_checkpoint(root / RECOVERY_POINT_OFFSET_CHECKPOINT, {log.tp: log.log_end_offset for log in logs})


def read_log_dir(
    root: str | os.PathLike[str], *, write_through: bool = False, segment_bytes: int = DEFAULT_SEGMENT_BYTES
) -> BrokerLogDir:
    """Read a broker log dir back: every `<topic>-<partition>` dir as a recovered `PartitionLog`, with
    high watermarks and log start offsets from the root checkpoints. Needs `meta.properties`."""
    root = Path(root)
    meta_path = root / META_PROPERTIES
    meta = parse_meta_properties(meta_path.read_bytes(), str(meta_path))
    if meta.node_id is None:
        raise MalformedFileError(str(meta_path), 0, "a version 0 file without broker.id")
    hws = read_offset_checkpoint(root / REPLICATION_OFFSET_CHECKPOINT)
    starts = read_offset_checkpoint(root / LOG_START_OFFSET_CHECKPOINT)
    result = BrokerLogDir(root=root, node_id=meta.node_id, cluster_id=meta.cluster_id)
    for child in sorted(root.iterdir()):
        if not child.is_dir():
            continue
        try:
            tp = parse_partition_dir_name(child.name)
        except ValueError:
            continue  # e.g. a `-delete` or `-future` dir, or something that is not a partition
        result.logs[tp] = PartitionLog.open(
            child,
            segment_bytes=segment_bytes,
            log_start_offset=starts.get(tp),
            high_watermark=hws.get(tp),
            write_through=write_through,
        )
        topic_id = read_partition_metadata(child)
        if topic_id is not None:
            result.topic_ids[tp.topic] = topic_id
    return result

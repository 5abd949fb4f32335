"""Kafka's small log-dir files, parsed from bytes: one set of rules for every reader of a log dir
(`epochguard.storage.logdir` locally, `epochguard.spark.listing` on any filesystem).

Mirrors Kafka's own readers: `MetaProperties.Builder(Properties)` (meta.properties: version 0 names
the broker by ``broker.id``, version 1 by ``node.id`` and needs ``cluster.id``), `CheckpointFile`
with `OffsetCheckpointFile` (the root replication-offset, log-start-offset and recovery-point
checkpoints), `PartitionMetadataFile` (partition.metadata), `LogFileUtils` (segment file names) and
`LeaderEpochCheckpointFile` (parsed by the core: `_core.parse_leader_epoch_checkpoint`). Pure: bytes in,
values out, no I/O; a malformed file raises `MalformedFileError` naming the file and the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from epochguard import _core
from epochguard.errors import CheckpointError, MalformedFileError
from epochguard.types import TopicPartition

__all__ = [
    "META_PROPERTIES",
    "PARTITION_METADATA",
    "LEADER_EPOCH_CHECKPOINT",
    "MetaProperties",
    "parse_properties",
    "parse_meta_properties",
    "parse_offset_checkpoint",
    "parse_partition_metadata",
    "parse_leader_epoch_checkpoint",
    "segment_base_offset",
]

META_PROPERTIES = "meta.properties"
PARTITION_METADATA = "partition.metadata"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
# `LogFileUtils.LOG_FILE_SUFFIX` with the 20-digit zero-padded base offset Kafka names segments by.
SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")


@dataclass(frozen=True)
class MetaProperties:
    version: int
    node_id: int | None  # None only for a version 0 file without broker.id (Kafka allows it)
    cluster_id: str | None
    directory_id: str | None


def _lines(data: bytes, path: str) -> list[str]:
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise MalformedFileError(path, line, "not UTF-8 text") from exc


def _int(text: str, path: str, line: int, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise MalformedFileError(path, line, f"{what} {text.strip()!r} is not an integer") from None


def parse_properties(data: bytes, path: str) -> dict[str, tuple[str, int]]:
    """`java.util.Properties` lines: ``key=value`` or ``key:value``, ``#``/``!`` comments. Each key
    maps to (value, line number); a later line wins, as in Java."""
    props: dict[str, tuple[str, int]] = {}
    for number, raw in enumerate(_lines(data, path), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            raise MalformedFileError(path, number, f"expected key=value, got {line!r}")
        props[line[:cut].strip()] = (line[cut + 1 :].strip(), number)
    return props


def parse_meta_properties(data: bytes, path: str = META_PROPERTIES) -> MetaProperties:
    """Kafka's rules: ``version`` defaults to 0; version 0 takes the id from ``broker.id`` (optional),
    version 1 from ``node.id`` (required, with ``cluster.id``); the other key is ignored."""
    props = parse_properties(data, path)
    text, number = props.get("version", ("0", 0))
    version = _int(text, path, number, "version")
    if version not in (0, 1):
        raise MalformedFileError(path, number, f"unknown meta.properties version {version} (0 or 1)")
    key = "broker.id" if version == 0 else "node.id"
    node_id = None
    if key in props:
        node_id = _int(props[key][0], path, props[key][1], key)
    elif version == 1:
        raise MalformedFileError(path, 0, "version 1 needs node.id")
    cluster = props.get("cluster.id", (None, 0))[0]
    if version == 1 and cluster is None:
        raise MalformedFileError(path, 0, "version 1 needs cluster.id")
    return MetaProperties(version, node_id, cluster, props.get("directory.id", (None, 0))[0])


def parse_offset_checkpoint(data: bytes, path: str) -> dict[TopicPartition, int]:
    """An `OffsetCheckpointFile`: ``0``, the entry count, then ``<topic> <partition> <offset>`` lines.
    An empty file is empty (as Kafka reads it); a count that does not match the entries is an error."""
    lines = _lines(data, path)
    if not lines:
        return {}
    if lines[0].strip() != "0":
        raise MalformedFileError(path, 1, f"unrecognized checkpoint version {lines[0].strip()!r} (0)")
    if len(lines) < 2:
        raise MalformedFileError(path, 2, "missing the entry count")
    count = _int(lines[1], path, 2, "entry count")
    out: dict[TopicPartition, int] = {}
    for number, line in enumerate(lines[2:], start=3):
        parts = line.split()
        if len(parts) != 3:
            raise MalformedFileError(path, number, f"expected '<topic> <partition> <offset>', got {line!r}")
        tp = TopicPartition(parts[0], _int(parts[1], path, number, "partition"))
        out[tp] = _int(parts[2], path, number, "offset")
    if len(lines) - 2 != count:
        raise MalformedFileError(path, 2, f"expected {count} entries, found {len(lines) - 2}")
    return out


def parse_partition_metadata(data: bytes, path: str = PARTITION_METADATA) -> str:
    """`PartitionMetadataFile`: ``version: 0`` then ``topic_id: <base64 uuid>``; returns the topic id."""
    lines = _lines(data, path)
    fields = []
    for number, key in ((1, "version"), (2, "topic_id")):
        line = lines[number - 1] if len(lines) >= number else ""
        name, sep, value = line.partition(":")
        if not sep or name.strip() != key or not value.strip():
            raise MalformedFileError(path, number, f"expected '{key}: <value>', got {line!r}")
        fields.append(value.strip())
    if fields[0] != "0":
        raise MalformedFileError(path, 1, f"unrecognized partition.metadata version {fields[0]!r} (0)")
    return fields[1]


def parse_leader_epoch_checkpoint(data: bytes, path: str = LEADER_EPOCH_CHECKPOINT) -> list[tuple[int, int]]:
    """The (epoch, start offset) entries of a leader-epoch-checkpoint, by the core's parser (strict,
    bounded) replayed through the epoch cache's `assign` as Kafka loads it."""
    try:
        return _core.parse_leader_epoch_checkpoint(data)
    except CheckpointError as exc:
        raise MalformedFileError(path, exc.line, exc.reason) from exc


def segment_base_offset(name: str) -> int | None:
    """The base offset a segment file is named by, None for any other file name."""
    match = SEGMENT_NAME.match(name)
    return None if match is None else int(match.group(1))

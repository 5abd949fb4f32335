"""Find the partitions, segments and small metadata files of Kafka log directories (driver side).

Kafka's layout: one folder per broker log dir, holding ``meta.properties``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint``, ``recovery-point-offset-checkpoint``
and one ``<topic>-<partition>/`` folder per replica with segment files ``<20-digit base offset>.log``
(plus ``.index``/``.timeindex``), ``leader-epoch-checkpoint`` and ``partition.metadata`` (the topic
id). Folders being deleted or moved (``*-delete``, ``*-future``, ``*-stray``) are not partitions and
are skipped, as Kafka does. The files are parsed by `epochguard.storage.logdir_format` (the same
parsers `epochguard.storage.logdir` uses).

Plain paths are listed with ``os``; paths with a scheme (``hdfs://``, ``s3a://``, ``file:/``) through
the JVM's Hadoop FileSystem of the active Spark session.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from epochguard.errors import MalformedFileError
from epochguard.storage.log import parse_partition_dir_name
from epochguard.storage.logdir_format import (
    LEADER_EPOCH_CHECKPOINT,
    META_PROPERTIES,
    PARTITION_METADATA,
    parse_leader_epoch_checkpoint,
    parse_meta_properties,
    parse_offset_checkpoint,
    parse_partition_metadata,
    segment_base_offset,
)
from epochguard.types import TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TRAILING_ID = re.compile(r"(\d+)$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# Small metadata files are read whole on the driver, up to the core's cap on a leader-epoch
# checkpoint (one byte more, so the parser sees that a bigger file is too big).
MAX_METADATA_BYTES = 64 << 20
KRAFT_METADATA_TOPIC = "__cluster_metadata"  # KRaft's metadata log: a partition dir, replicated by Raft
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_OFFSET_CHECKPOINT = "recovery-point-offset-checkpoint"
T = TypeVar("T")


@dataclass(frozen=True)
class Segment:
    path: str
    base_offset: int
    size: int


@dataclass
class PartitionReplica:
    """One broker's copy of one partition, as found on disk."""

    broker: int
    topic: str
    partition: int
    path: str
    segments: list[Segment]
    # Epoch history from leader-epoch-checkpoint: None when the file is missing or unreadable.
    epochs: list[tuple[int, int]] | None
    topic_id: str | None
    log_start_offset: int | None  # from the log dir's log-start-offset-checkpoint, if listed there
    high_watermark: int | None  # from replication-offset-checkpoint, if listed there
    # From recovery-point-offset-checkpoint, if listed there: the offset up to which the broker had
    # flushed the log (Kafka's `LogLoader` CRC-checks what lies past it when the broker restarts).
    recovery_point: int | None = None


@dataclass(frozen=True)
class ListingError:
    broker: int | None
    topic: str | None
    partition: int | None
    path: str
    reason: str


@dataclass
class Listing:
    replicas: list[PartitionReplica] = field(default_factory=list)
    errors: list[ListingError] = field(default_factory=list)

    @property
    def segments(self) -> Iterable[tuple[PartitionReplica, Segment]]:
        for replica in self.replicas:
            for segment in replica.segments:
                yield replica, segment

    def only(self, keep: Callable[[str], bool]) -> Listing:
        """The replicas (and their errors) of the topics `keep` accepts; errors of no topic stay."""
        return Listing([r for r in self.replicas if keep(r.topic)],
                       [e for e in self.errors if e.topic is None or keep(e.topic)])


class FileSystem(Protocol):
    def list(self, path: str) -> list[tuple[str, str, bool, int]]:
        """Entries of a directory as (name, full path, is_dir, size)."""
        ...

    def read(self, path: str) -> bytes | None:
        """Whole content of a small file, None if it does not exist."""
        ...


class LocalFileSystem:
    def list(self, path: str) -> list[tuple[str, str, bool, int]]:
        with os.scandir(path) as entries:
            return [(e.name, e.path, e.is_dir(), e.stat().st_size if e.is_file() else 0) for e in entries]

    def read(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as f:
                return f.read(MAX_METADATA_BYTES + 1)
        except FileNotFoundError:
            return None


class HadoopFileSystem:
    """Lists and reads through the JVM Hadoop FileSystem (any scheme the cluster is configured for)."""

    def __init__(self, spark: SparkSession) -> None:
        jvm = spark.sparkContext._jvm
        if jvm is None:
            raise RuntimeError("Hadoop paths need a classic (non-Connect) SparkSession")
        self._jvm = jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _fs(self, path: str):
        jpath = self._jvm.org.apache.hadoop.fs.Path(path)
        return jpath, jpath.getFileSystem(self._conf)

    def list(self, path: str) -> list[tuple[str, str, bool, int]]:
        jpath, fs = self._fs(path)
        return [
            (s.getPath().getName(), s.getPath().toString(), s.isDirectory(), s.getLen()) for s in fs.listStatus(jpath)
        ]

    def read(self, path: str) -> bytes | None:
        jpath, fs = self._fs(path)
        if not fs.exists(jpath):
            return None
        size = min(fs.getFileStatus(jpath).getLen(), MAX_METADATA_BYTES + 1)
        stream = fs.open(jpath)
        try:  # the byte[] must be filled on the JVM side: py4j hands Python a copy
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream, size))
        finally:
            stream.close()


def is_local(path: str) -> bool:
    """Plain filesystem paths are read by the Rust core directly; others go through Hadoop."""
    return not SCHEME.match(path) or (len(path) > 1 and path[1] == ":")  # a Windows drive letter is local


def filesystem_for(path: str, spark: SparkSession | None) -> FileSystem:
    if is_local(path):
        return LocalFileSystem()
    if spark is None:
        raise ValueError(f"{path!r} has a scheme; listing it needs a SparkSession (Hadoop FileSystem)")
    return HadoopFileSystem(spark)


def broker_id(log_dir: str, meta_properties: bytes | None, path: str = "meta.properties") -> int:
    """The id Kafka's own rules read from meta.properties (version 0: ``broker.id``; version 1:
    ``node.id``), else the folder name's trailing number (``broker-3``, ``kafka-logs-3``). A
    malformed meta.properties raises `MalformedFileError`."""
    if meta_properties is not None:
        node_id = parse_meta_properties(meta_properties, path).node_id
        if node_id is not None:
            return node_id
    name = os.path.basename(log_dir.rstrip("/\\"))
    match = TRAILING_ID.search(name)
    if match is None:
        raise ValueError(f"cannot tell the broker id of {log_dir!r}: no meta.properties and no number in its name")
    return int(match.group(1))


def _parsed(
    fs: FileSystem,
    path: str,
    parse: Callable[[bytes, str], T],
    default: T,
    errors: list[ListingError],
    where: tuple[int, str | None, int | None],
) -> T:
    """`parse` of the file at `path`; `default` when it is missing or, reported in `errors`, malformed."""
    try:
        data = fs.read(path)
        return default if data is None else parse(data, path)
    except (MalformedFileError, OSError) as exc:
        errors.append(ListingError(*where, path, str(exc)))
        return default


def list_log_dirs(paths: Sequence[str], spark: SparkSession | None = None) -> Listing:
    """Walk every broker log dir in `paths`. A malformed or unreadable file becomes a `ListingError`
    naming the file and line (the audit writes it to errors.parquet) and the audit goes on with what
    the segments hold; only a log dir whose broker cannot be told at all raises."""
    listing = Listing()
    brokers: dict[int, str] = {}
    for root in paths:
        fs = filesystem_for(root, spark)
        join = (lambda a, b: a.rstrip("/") + "/" + b) if not is_local(root) else os.path.join
        meta_path = join(root, META_PROPERTIES)
        try:
            broker = broker_id(root, fs.read(meta_path), meta_path)
        except MalformedFileError as exc:
            try:
                broker = broker_id(root, None)
            except ValueError:
                raise exc from None
            listing.errors.append(ListingError(broker, None, None, exc.path, f"{exc}; broker id from the folder name"))
        if broker in brokers:
            raise ValueError(f"log dirs {brokers[broker]!r} and {root!r} both belong to broker {broker}")
        brokers[broker] = root

        at_root = (broker, None, None)
        no_offsets: dict[TopicPartition, int] = {}
        log_starts = _parsed(
            fs, join(root, LOG_START_OFFSET_CHECKPOINT), parse_offset_checkpoint, no_offsets, listing.errors, at_root
        )
        high_watermarks = _parsed(
            fs, join(root, REPLICATION_OFFSET_CHECKPOINT), parse_offset_checkpoint, no_offsets, listing.errors, at_root
        )
        recovery_points = _parsed(
            fs, join(root, RECOVERY_POINT_OFFSET_CHECKPOINT), parse_offset_checkpoint, no_offsets, listing.errors,
            at_root,
        )
        for name, path, is_dir, _ in sorted(fs.list(root)):
            if not is_dir:
                continue
            try:
                tp = parse_partition_dir_name(name)
            except ValueError:
                continue  # not a partition, or one Kafka is deleting or moving (`-delete`, `-future`)
            where = (broker, tp.topic, tp.partition)
            try:
                entries = fs.list(path)
            except OSError as exc:
                listing.errors.append(ListingError(*where, path, f"cannot list partition dir: {exc}"))
                continue
            segments = []
            for n, p, d, size in entries:
                if d or not n.endswith(".log"):
                    continue
                base = segment_base_offset(n)
                if base is None:
                    reason = "a .log file whose name is not a 20-digit base offset: not a segment, not read"
                    listing.errors.append(ListingError(*where, p, reason))
                    continue
                segments.append(Segment(p, base, size))
            segments.sort(key=lambda s: s.base_offset)
            epochs = _parsed(
                fs, join(path, LEADER_EPOCH_CHECKPOINT), parse_leader_epoch_checkpoint, None, listing.errors, where
            )
            topic_id = _parsed(
                fs, join(path, PARTITION_METADATA), parse_partition_metadata, None, listing.errors, where
            )
            listing.replicas.append(
                PartitionReplica(
                    broker=broker,
                    topic=tp.topic,
                    partition=tp.partition,
                    path=path,
                    segments=segments,
                    epochs=epochs,
                    topic_id=topic_id,
                    log_start_offset=log_starts.get(tp),
                    high_watermark=high_watermarks.get(tp),
                    recovery_point=recovery_points.get(tp),
                )
            )
    return listing

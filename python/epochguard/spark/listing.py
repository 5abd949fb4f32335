"""Find the partitions, segments and small metadata files of Kafka log directories (driver side).

Kafka's layout: one folder per broker log dir, holding ``meta.properties``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint`` and one ``<topic>-<partition>/``
folder per replica with segment files ``<20-digit base offset>.log`` (plus ``.index``/``.timeindex``),
``leader-epoch-checkpoint`` and ``partition.metadata`` (the topic id). Folders being deleted or moved
(``*-delete``, ``*-future``, ``*-stray``) are not partitions and are skipped, as Kafka does.

Plain paths are listed with ``os``; paths with a scheme (``hdfs://``, ``s3a://``, ``file:/``) through
the JVM's Hadoop FileSystem of the active Spark session.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from epochguard import _core
from epochguard.errors import CheckpointError
from epochguard.log import parse_partition_dir_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SEGMENT_FILE = re.compile(r"^(?P<base>\d{20})\.log$")
TRAILING_ID = re.compile(r"(\d+)$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# Small metadata files are read whole on the driver; anything bigger is not a Kafka metadata file.
MAX_METADATA_BYTES = 1 << 20


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
                return f.read(MAX_METADATA_BYTES)
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
        size = min(fs.getFileStatus(jpath).getLen(), MAX_METADATA_BYTES)
        stream = fs.open(jpath)
        try:  # the byte[] must be filled on the JVM side: py4j hands Python a copy
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream, size))
        finally:
            stream.close()


def is_local(path: str) -> bool:
    """Plain filesystem paths are read by the Rust core directly (mmap); others go through Hadoop."""
    return not SCHEME.match(path) or (len(path) > 1 and path[1] == ":")  # a Windows drive letter is local


def filesystem_for(path: str, spark: SparkSession | None) -> FileSystem:
    if is_local(path):
        return LocalFileSystem()
    if spark is None:
        raise ValueError(f"{path!r} has a scheme; listing it needs a SparkSession (Hadoop FileSystem)")
    return HadoopFileSystem(spark)


def broker_id(log_dir: str, meta_properties: bytes | None) -> int:
    """`broker.id` (ZooKeeper mode) or `node.id` (KRaft) from meta.properties, else the folder name's
    trailing number (``broker-3``, ``kafka-logs-3``)."""
    if meta_properties is not None:
        props = parse_properties(meta_properties.decode("utf-8", errors="replace"))
        for key in ("broker.id", "node.id"):
            if key in props:
                return int(props[key])
    name = os.path.basename(log_dir.rstrip("/\\"))
    match = TRAILING_ID.search(name)
    if match is None:
        raise ValueError(f"cannot tell the broker id of {log_dir!r}: no meta.properties and no number in its name")
    return int(match.group(1))


def parse_properties(text: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props


def parse_offset_checkpoint(data: bytes) -> dict[tuple[str, int], int]:
    """Kafka's per-log-dir offset checkpoints (log-start-offset, replication-offset): version 0, a
    count, then ``<topic> <partition> <offset>`` lines. Unreadable files yield nothing (the audit then
    falls back to what the segments hold)."""
    lines = data.decode("utf-8", errors="replace").splitlines()
    if len(lines) < 2 or lines[0].strip() != "0":
        return {}
    out: dict[tuple[str, int], int] = {}
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit():
            try:
                out[(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                continue
    return out


def parse_topic_id(data: bytes | None) -> str | None:
    """The topic id in partition.metadata (``version: 0`` / ``topic_id: <base64 uuid>``)."""
    if data is None:
        return None
    for line in data.decode("utf-8", errors="replace").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "topic_id":
            return value.strip() or None
    return None


def read_epochs(fs: FileSystem, path: str) -> list[tuple[int, int]] | None:
    """The epoch history in a leader-epoch-checkpoint, parsed by the core (one parser for the format)."""
    if isinstance(fs, LocalFileSystem):
        if not os.path.exists(path):
            return None
        return _core.LeaderEpochCache.read_checkpoint(path).entries()
    data = fs.read(path)
    if data is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        local = os.path.join(tmp, "leader-epoch-checkpoint")
        with open(local, "wb") as f:
            f.write(data)
        return _core.LeaderEpochCache.read_checkpoint(local).entries()


def list_log_dirs(paths: Sequence[str], spark: SparkSession | None = None) -> Listing:
    """Walk every broker log dir in `paths`. Problems that leave a replica unreadable (a broken
    checkpoint, an unlistable folder) become `ListingError`s, not exceptions: the audit goes on."""
    listing = Listing()
    brokers: dict[int, str] = {}
    for root in paths:
        fs = filesystem_for(root, spark)
        sep = "/" if not is_local(root) else os.sep
        join = (lambda a, b: a.rstrip("/") + "/" + b) if sep == "/" else os.path.join
        broker = broker_id(root, fs.read(join(root, "meta.properties")))
        if broker in brokers:
            raise ValueError(f"log dirs {brokers[broker]!r} and {root!r} both belong to broker {broker}")
        brokers[broker] = root
        log_starts = parse_offset_checkpoint(fs.read(join(root, "log-start-offset-checkpoint")) or b"")
        high_watermarks = parse_offset_checkpoint(fs.read(join(root, "replication-offset-checkpoint")) or b"")
        for name, path, is_dir, _ in sorted(fs.list(root)):
            if not is_dir:
                continue
            try:
                tp = parse_partition_dir_name(name)
            except ValueError:
                continue  # not a partition, or one Kafka is deleting or moving (`-delete`, `-future`)
            topic, partition = tp.topic, tp.partition
            try:
                entries = fs.list(path)
            except OSError as exc:
                listing.errors.append(ListingError(broker, topic, partition, path, f"cannot list partition dir: {exc}"))
                continue
            segments = sorted(
                (
                    Segment(p, int(m.group("base")), size)
                    for n, p, d, size in entries
                    if not d and (m := SEGMENT_FILE.match(n))
                ),
                key=lambda s: s.base_offset,
            )
            epochs: list[tuple[int, int]] | None = None
            try:
                epochs = read_epochs(fs, join(path, "leader-epoch-checkpoint"))
            except CheckpointError as exc:
                where = join(path, "leader-epoch-checkpoint")
                reason = f"leader-epoch-checkpoint line {exc.line}: {exc.reason}; epochs rebuilt from the records"
                listing.errors.append(ListingError(broker, topic, partition, where, reason))
            listing.replicas.append(
                PartitionReplica(
                    broker=broker,
                    topic=topic,
                    partition=partition,
                    path=path,
                    segments=segments,
                    epochs=epochs,
                    topic_id=parse_topic_id(fs.read(join(path, "partition.metadata"))),
                    log_start_offset=log_starts.get((topic, partition)),
                    high_watermark=high_watermarks.get((topic, partition)),
                )
            )
    return listing

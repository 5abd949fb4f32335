"""``spark.read.format("kafka-log")``: Kafka log directories as a Spark Python data source (pyspark >= 4).

>>> epochguard.spark.register(spark)          # done on import of epochguard.spark for the active session
>>> spark.read.format("kafka-log").load(["/backup/broker-1", "/backup/broker-2"])
>>> spark.read.format("kafka-log").schema("topic string, offset long, value_length int").load(path)
>>> spark.read.format("kafka-log").option("columns", "offset,leader_epoch,record_digest").load(path)

Where the JVM reader's jar is on the session (`epochguard.spark.jvm`), ``kafka-log`` is that reader
and this source is ``kafka-log-python``; elsewhere it is both. The same listing and decode path as
`read_kafka_logs` (one task per core, batch-aligned chunks, the core's projected Arrow decode): a narrow
schema given with ``.schema(...)``, or ``option("columns", ...)``, is the projection, and nothing else
is decoded. With
``spark.sql.python.filterPushdown.enabled`` (Spark >= 4.1), comparisons of ``broker``, ``topic``
and ``partition`` skip whole replicas and those of ``offset`` skip whole segments before any byte
is read. Paths must be local to the machines (the data source's planner has no Hadoop FileSystem);
use `read_kafka_logs` for ``hdfs://`` and friends. Options: ``columns``, ``tasks`` (default: the
driver's cores), ``chunkBytes``, ``verifyCrc``, ``withErrors``.
"""

from __future__ import annotations

import json
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from epochguard.spark.listing import PartitionReplica, Segment, is_local, list_log_dirs
from epochguard.spark.logs import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_MAX_DECOMPRESSED,
    ERROR_FIELDS,
    TASK_BYTES,
    Chunk,
    decode_chunks,
    pack_tasks,
    plan_chunks,
    projection_schema,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

try:  # pyspark >= 4
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        EqualTo,
        Filter,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        InputPartition,
        LessThan,
        LessThanOrEqual,
    )
except ImportError:  # pyspark 3.5: no Python data sources; read_kafka_logs is the front there
    DataSource = DataSourceReader = InputPartition = None  # type: ignore[assignment,misc]

NAME = "kafka-log"
# The Python source's own name, registered beside `kafka-log` always: where the JVM reader's jar is on
# the classpath, `kafka-log` is the JVM reader and this one names the Python source.
PYTHON_NAME = "kafka-log-python"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
PRUNABLE = ("broker", "topic", "partition", "offset")
COMPARE: dict[type, Callable[[Any, Any], bool]] = {}
if DataSource is not None:
    COMPARE = {
        EqualTo: operator.eq,
        GreaterThan: operator.gt,
        GreaterThanOrEqual: operator.ge,
        LessThan: operator.lt,
        LessThanOrEqual: operator.le,
        In: lambda value, values: value in values,
    }


def register(spark: SparkSession) -> bool:
    """Register the ``kafka-log`` format (and the ``epochguard-kafka`` streaming source) on `spark`;
    False when this pyspark has no Python data sources (3.5). Works on classic and Spark Connect sessions.

    Spark refuses a reader that implements filter pushdown while
    ``spark.sql.python.filterPushdown.enabled`` is off, so the reader registered follows the conf
    as it is now: register again after changing it."""
    if DataSource is None:
        return False
    pushdown = (spark.conf.get(PUSHDOWN_CONF, "false") or "false").lower() == "true"
    spark.dataSource.register(FilteringPythonKafkaLogDataSource if pushdown else PythonKafkaLogDataSource)
    try:
        spark.dataSource.register(FilteringKafkaLogDataSource if pushdown else KafkaLogDataSource)
    except Exception as exc:
        # The JVM reader's jar is on the classpath: Spark's own sources (found through
        # META-INF/services) refuse a Python one of the same name, and `kafka-log` is the JVM's.
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
            raise
    from epochguard.spark.stream import register as register_stream

    register_stream(spark)  # ``spark.readStream.format("epochguard-kafka")``
    return True


def _paths(options: Mapping[str, str]) -> list[str]:
    """``load(path)`` gives ``path``; ``load([p1, p2])`` gives ``paths`` as a JSON array."""
    if "paths" in options:
        raw = options["paths"]
        paths = json.loads(raw) if raw.lstrip().startswith("[") else raw.split(",")
    elif "path" in options:
        paths = [options["path"]]
    else:
        raise ValueError("kafka-log needs one or more log directories: .load(path) or .load([path, ...])")
    remote = [p for p in paths if not is_local(p)]
    if remote:
        raise ValueError(f"kafka-log reads local log directories only; use read_kafka_logs for {remote}")
    return [str(p) for p in paths]


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    return options.get(name, str(default)).strip().lower() in ("true", "1", "yes")


if DataSource is not None:

    class KafkaLogDataSource(DataSource):
        """The ``kafka-log`` format (see the module docstring)."""

        @classmethod
        def name(cls) -> str:
            return NAME

        def schema(self) -> StructType:
            columns = self.options.get("columns")
            names = None if columns is None else [c.strip() for c in columns.split(",") if c.strip()]
            return projection_schema(names, _flag(self.options, "withErrors", False))

        def reader(self, schema: StructType) -> KafkaLogReader:
            return KafkaLogReader(dict(self.options), schema)

    class KafkaLogReader(DataSourceReader):
        def __init__(self, options: dict[str, str], schema: StructType) -> None:
            self.paths = _paths(options)
            errors = {f.name for f in ERROR_FIELDS}
            self.with_errors = bool(errors & set(schema.fieldNames()))
            # The schema Spark asks for is the projection (a user's narrow .schema(...) included).
            self.columns = [f.name for f in schema.fields if f.name not in errors]
            self.spark_schema = projection_schema(self.columns, self.with_errors)
            if [f.name for f in self.spark_schema.fields] != schema.fieldNames():
                raise ValueError(
                    f"kafka-log: error columns {sorted(errors)} go last, all three or none; got {schema.fieldNames()}"
                )
            self.spark_schema = schema  # the caller's types; Arrow columns are cast to them
            self.tasks = int(options.get("tasks", 0)) or os.cpu_count() or 1
            self.chunk_bytes = int(options.get("chunkBytes", DEFAULT_CHUNK_BYTES))
            self.verify_crc = _flag(options, "verifyCrc", True)
            self.filters: list[Any] = []  # the pushed comparisons (EqualTo, In, ...)

        def _keep_replica(self, replica: PartitionReplica) -> bool:
            for f in self.filters:
                column = f.attribute[0]
                if column != "offset" and not _holds(COMPARE[type(f)], getattr(replica, column), f.value):
                    return False
            return True

        def _keep_segment(self, first: int, end: int | None) -> bool:
            """Whether offsets [first, end) (end None: unbounded) can satisfy every offset filter."""
            for f in self.filters:
                if f.attribute[0] != "offset":
                    continue
                values = f.value if isinstance(f, In) else (f.value,)
                if not any(_range_may_hold(type(f), first, end, v) for v in values):
                    return False
            return True

        def _segments(self) -> list[tuple[PartitionReplica, Segment]]:
            listing = list_log_dirs(self.paths)
            kept = []
            for replica in listing.replicas:
                if not self._keep_replica(replica):
                    continue
                bases = [s.base_offset for s in replica.segments]
                for i, segment in enumerate(replica.segments):
                    end = bases[i + 1] if i + 1 < len(bases) else None
                    if self._keep_segment(segment.base_offset, end):
                        kept.append((replica, segment))
            return kept

        def partitions(self) -> Sequence[InputPartition]:
            chunks = plan_chunks(self._segments(), self.chunk_bytes)
            return [ChunkGroup(group) for group in pack_tasks(chunks, TASK_BYTES, self.tasks)] or [ChunkGroup([])]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            options = {
                "schema": to_arrow_schema(self.spark_schema),
                "columns": [c for c in self.columns if c not in ("broker", "topic", "partition", "segment")],
                "with_errors": self.with_errors,
                "verify_crc": self.verify_crc,
                "max_decompressed_size": DEFAULT_MAX_DECOMPRESSED,
            }
            yield from decode_chunks(getattr(partition, "chunks", []), **options)

    class FilteringKafkaLogReader(KafkaLogReader):
        def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
            """Comparisons of broker, topic and partition prune whole replicas and are not evaluated
            again; those of offset prune whole segments and are returned for Spark to apply per row."""
            for f in filters:
                column = getattr(f, "attribute", None)
                if type(f) in COMPARE and column is not None and len(column) == 1 and column[0] in PRUNABLE:
                    self.filters.append(f)
                    if column[0] == "offset":
                        yield f
                else:
                    yield f

    class FilteringKafkaLogDataSource(KafkaLogDataSource):
        """``kafka-log`` with filter pushdown (registered when the session enables it)."""

        def reader(self, schema: StructType) -> KafkaLogReader:
            return FilteringKafkaLogReader(dict(self.options), schema)

    class PythonKafkaLogDataSource(KafkaLogDataSource):
        """The Python source by a name of its own (`PYTHON_NAME`), wherever the JVM reader is present."""

        @classmethod
        def name(cls) -> str:
            return PYTHON_NAME

    class FilteringPythonKafkaLogDataSource(FilteringKafkaLogDataSource):
        @classmethod
        def name(cls) -> str:
            return PYTHON_NAME

    class ChunkGroup(InputPartition):
        """One Spark task: batch-aligned byte ranges of segments."""

        def __init__(self, chunks: list[Chunk]) -> None:
            super().__init__(len(chunks))
            self.chunks = chunks


def _holds(compare: Callable[[Any, Any], bool], actual: Any, value: Any) -> bool:
    try:
        return bool(compare(actual, value))
    except TypeError:  # a comparison Spark pushed with an odd literal type: keep, Spark re-checks
        return True


def _range_may_hold(kind: type, first: int, end: int | None, value: Any) -> bool:
    """Whether some offset in [first, end) satisfies `offset <kind> value`."""
    last = None if end is None else end - 1
    if kind in (EqualTo, In):
        return first <= value and (last is None or value <= last)
    if kind is GreaterThan:
        return last is None or last > value
    if kind is GreaterThanOrEqual:
        return last is None or last >= value
    if kind is LessThan:
        return first < value
    if kind is LessThanOrEqual:
        return first <= value
    return True

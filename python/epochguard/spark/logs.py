"""`read_kafka_logs`: Kafka log directories -> a DataFrame of records, decoded by the Rust core.

The driver lists the log dirs and cuts large segments into batch-aligned byte ranges (from the
core's `batch_index`), so one segment is never one task. Executors decode each range inside
``mapInArrow``: the core reads the file and streams Arrow batches with the GIL released; no segment
ever becomes a Python object. Paths with a scheme (HDFS, S3, ...) are read whole through Spark's
``binaryFile`` source and decoded from those bytes instead.
"""

from __future__ import annotations

import functools
import heapq
import os
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from epochguard import _core
from epochguard.errors import EpochGuardError
from epochguard.records import COMPUTED_COLUMNS, RECORD_COLUMNS
from epochguard.spark.listing import Listing, PartitionReplica, Segment, is_local, list_log_dirs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEFAULT_CHUNK_BYTES = 64 << 20
DEFAULT_MAX_DECOMPRESSED = 64 << 20
# A Python task costs tens of milliseconds before it decodes anything, so tasks are few and large
# (one per core unless there is more than this much to read); chunks bound the memory of one decode.
TASK_BYTES = 1 << 30

LOCATION = StructType(
    [
        StructField("broker", IntegerType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("segment", LongType()),  # the segment's base offset (its file name)
    ]
)
ERROR_FIELDS = [
    StructField("path", StringType()),
    StructField("error_position", LongType()),
    StructField("error_reason", StringType()),
]


@functools.cache
def _record_schema(columns: tuple[str, ...] | None) -> StructType:
    names = None if columns is None else list(columns)
    arrow = pa.RecordBatchReader.from_stream(_core.decode_arrow(b"", columns=names)).schema
    return StructType([StructField(f.name, f.dataType, True) for f in from_arrow_schema(arrow)])


def record_schema(columns: Sequence[str] | None = None) -> StructType:
    """Spark schema of the core's record columns: all of a full decode (offset, timestamp, key,
    value, ...), or the projection `columns` (record and computed columns, see `decode_to_arrow`)."""
    return _record_schema(None if columns is None else tuple(columns))


def output_schema(carry: StructType, with_errors: bool, columns: Sequence[str] | None = None) -> StructType:
    fields = list(carry.fields) + list(record_schema(columns).fields)
    return StructType(fields + ERROR_FIELDS if with_errors else fields)


def split_columns(columns: Sequence[str] | None) -> tuple[StructType, list[str] | None]:
    """The location columns and the record columns (None: all of a full decode) of a projection."""
    if columns is None:
        return LOCATION, None
    known = set(LOCATION.fieldNames()) | set(RECORD_COLUMNS) | set(COMPUTED_COLUMNS)
    unknown = [c for c in columns if c not in known]
    if unknown or len(set(columns)) != len(columns):
        raise ValueError(
            f"columns must be distinct names among {sorted(known)}; got {list(columns)}"
            + (f" (unknown: {unknown})" if unknown else "")
        )
    carry = StructType([LOCATION[c] for c in columns if c in LOCATION.fieldNames()])
    return carry, [c for c in columns if c not in LOCATION.fieldNames()]


class Chunk(NamedTuple):
    """A batch-aligned byte range of one segment: the unit of decoding work."""

    broker: int
    topic: str
    partition: int
    segment: int
    path: str
    position: int
    length: int


def read_kafka_logs(
    spark: SparkSession,
    paths: str | Sequence[str],
    columns: Sequence[str] | None = None,
    *,
    with_errors: bool = False,
    verify_crc: bool = True,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED,
) -> DataFrame:
    """Read broker log directories (one path per broker) into one DataFrame of records.

    Columns: ``broker, topic, partition, segment`` then the core's record columns. `columns`
    projects: any of those and the computed ones (``key_length``, ``value_length``,
    ``headers_count``, ``record_digest``, ``batch_position``, ``batch_size``), in the order given;
    a column not named is never decoded nor handed to Spark (``mapInArrow`` output cannot be
    pruned by Spark afterwards, so ask for what the query needs). By default a
    corrupt batch fails the job with its byte position; with ``with_errors=True`` the records before
    it are kept and the problem becomes a row with ``path, error_position, error_reason`` set and
    null record columns (an incomplete last batch is reported the same way).
    """
    paths = [paths] if isinstance(paths, str) else list(paths)
    listing = list_log_dirs(paths, spark)
    return decode_listing(
        spark,
        listing,
        columns=columns,
        with_errors=with_errors,
        verify_crc=verify_crc,
        chunk_bytes=chunk_bytes,
        max_decompressed_size=max_decompressed_size,
    )


def decode_listing(
    spark: SparkSession,
    listing: Listing,
    *,
    with_errors: bool,
    columns: Sequence[str] | None = None,
    verify_crc: bool = True,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED,
) -> DataFrame:
    schema = projection_schema(columns, with_errors)
    record_columns = split_columns(columns)[1]
    options = {
        "schema": to_arrow_schema(schema),
        "columns": record_columns,
        "with_errors": with_errors,
        "verify_crc": verify_crc,
        "max_decompressed_size": max_decompressed_size,
    }
    local = [(r, s) for r, s in listing.segments if is_local(s.path)]
    remote = [(r, s) for r, s in listing.segments if not is_local(s.path)]
    frames = []
    if local or not remote:
        chunks = plan_chunks(local, chunk_bytes)
        groups = pack_tasks(chunks, TASK_BYTES, task_slots(spark))
        # One row per task, one task per partition, and the chunk list travels with the function:
        # no Python RDD and no shuffle before the decode.
        tasks = spark.range(0, len(groups), 1, max(1, len(groups)))
        frames.append(tasks.mapInArrow(functools.partial(decode_task_groups, groups=groups, **options), schema))
    if remote:
        where = {s.path: (r.broker, r.topic, r.partition, s.base_offset) for r, s in remote}
        files = spark.read.format("binaryFile").load([s.path for _, s in remote])
        locate = functools.partial(_locate_files, where=where)
        located_schema = StructType([*LOCATION.fields, StructField("path", StringType()), files.schema["content"]])
        located = files.select("path", "content").mapInArrow(locate, located_schema)
        carry = [c for c in LOCATION.fieldNames() if c in schema.fieldNames()]
        decode = functools.partial(decode_arrow_batches, carry=carry, source="content", **options)
        frames.append(located.mapInArrow(decode, schema))
    return functools.reduce(lambda a, b: a.unionByName(b), frames)


def projection_schema(columns: Sequence[str] | None, with_errors: bool) -> StructType:
    """The Spark schema of a read projected to `columns` (None: location then all record columns),
    in the order asked for; with `with_errors` the error columns come last."""
    carry, record_columns = split_columns(columns)
    schema = output_schema(carry, with_errors, record_columns)
    if columns is None:
        return schema
    return StructType([schema[c] for c in columns] + [f for f in schema.fields if f.name not in columns])


def task_slots(spark: SparkSession) -> int:
    """How many tasks run at once: one decode task per slot (a second wave costs ~0.1 s a task on a
    small machine). Read from the conf so a Spark Connect session (no sparkContext) answers too."""
    try:
        return max(1, spark.sparkContext.defaultParallelism)  # classic: the cluster's cores
    except Exception:
        pass
    configured = spark.conf.get("spark.default.parallelism", None)
    if configured:
        return max(1, int(configured))
    return local_cores(spark.conf.get("spark.master", None) or "")


def local_cores(master: str) -> int:
    """Cores of a ``local[N]`` / ``local[*]`` master (this machine's for anything else)."""
    match = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if match and match.group(1) and match.group(1) != "*":
        return max(1, int(match.group(1)))
    return 1 if match and not match.group(1) else os.cpu_count() or 1


def plan_chunks(segments: Sequence[tuple[PartitionReplica, Segment]], chunk_bytes: int) -> list[Chunk]:
    """Cut each segment into batch-aligned ranges of at most `chunk_bytes` (a single larger batch
    gets its own range). Bytes past the last batch the index could walk (a partial or corrupt tail)
    form a last range of their own so the decoder reports them."""
    chunks: list[Chunk] = []
    for replica, segment in segments:
        location = (replica.broker, replica.topic, replica.partition, segment.base_offset, segment.path)
        if segment.size <= chunk_bytes:
            chunks.append(Chunk(*location, 0, segment.size))
            continue
        try:
            index = _core.batch_index(segment.path, allow_partial_tail=True)
        except EpochGuardError:
            chunks.append(Chunk(*location, 0, segment.size))  # the decoder will report where it breaks
            continue
        start = end = 0
        for position, size, _, _ in index:
            if position + size - start > chunk_bytes and end > start:
                chunks.append(Chunk(*location, start, end - start))
                start = position
            end = position + size
        if end > start:
            chunks.append(Chunk(*location, start, end - start))
        if end < segment.size:
            chunks.append(Chunk(*location, end, segment.size - end))
    return chunks


def pack_tasks(chunks: list[Chunk], target_bytes: int, min_tasks: int) -> list[list[Chunk]]:
    """Group chunks into Spark tasks of at most about `target_bytes` (largest first onto the lightest
    task), at least `min_tasks` of them when there are that many chunks: a large segment's chunks
    spread over the cores, small segments share a task."""
    if not chunks:
        return []
    total = sum(c.length for c in chunks)
    count = min(len(chunks), max(min_tasks, -(-total // max(1, target_bytes))))
    heap = [(0, i) for i in range(count)]
    groups: list[list[Chunk]] = [[] for _ in range(count)]
    for chunk in sorted(chunks, key=lambda c: -c.length):
        load, i = heapq.heappop(heap)
        groups[i].append(chunk)
        heapq.heappush(heap, (load + chunk.length, i))
    return [g for g in groups if g]


def _locate_files(batches: Iterator[pa.RecordBatch], *, where: dict[str, tuple]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        paths = batch.column("path").to_pylist()
        cols: list[tuple] = list(zip(*(where[p] for p in paths), strict=True)) if paths else [(), (), (), ()]
        arrays = [pa.array(cols[0], pa.int32()), pa.array(cols[1], pa.string()), pa.array(cols[2], pa.int32())]
        arrays += [pa.array(cols[3], pa.int64()), batch.column("path"), batch.column("content")]
        yield pa.RecordBatch.from_arrays(arrays, names=[*LOCATION.fieldNames(), "path", "content"])


def decode_task_groups(
    batches: Iterator[pa.RecordBatch], *, groups: list[list[Chunk]], **options: Any
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body for local files: each input row is a task id naming the chunks to
    decode; the core reads only the chunk's byte range of each file."""
    for batch in batches:
        for task in batch.column("id").to_pylist():
            yield from decode_chunks(groups[task], **options)


def decode_chunks(chunks: Sequence[Chunk], **options: Any) -> Iterator[pa.RecordBatch]:
    """Decode local chunks in order (the body of a `read_kafka_logs` task and of a ``kafka-log`` data
    source partition): the core reads each chunk's byte range; location columns are constants."""
    names = options["schema"].names
    for c in chunks:
        carried = {"broker": c.broker, "topic": c.topic, "partition": c.partition, "segment": c.segment}
        carried = {k: v for k, v in carried.items() if k in names}
        yield from _decode_one(c.path, c.position, c.length, carried, c.path, **options)


def decode_arrow_batches(
    batches: Iterator[pa.RecordBatch],
    *,
    carry: list[str],
    schema: pa.Schema,
    with_errors: bool,
    verify_crc: bool,
    max_decompressed_size: int,
    source: str,
    columns: Sequence[str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body for bytes in a binary column `source` (whole segment files, or any
    record-batch bytes): output rows are the input row's `carry` columns, then one row per record.
    Error rows name the input's ``path`` column when there is one."""
    options = {
        "schema": schema,
        "columns": columns,
        "with_errors": with_errors,
        "verify_crc": verify_crc,
        "max_decompressed_size": max_decompressed_size,
    }
    for batch in batches:
        names = batch.schema.names
        for i in range(batch.num_rows):
            row = batch.slice(i, 1)
            carried = {name: row.column(name)[0].as_py() for name in carry if name in schema.names}
            path = row.column("path")[0].as_py() if "path" in names else None
            cell = row.column(source)[0]
            if cell.is_valid:
                data = memoryview(cell.as_buffer())
                yield from _decode_one(data, 0, len(data), carried, path, **options)


def decode_ranges(
    batches: Iterator[pa.RecordBatch],
    *,
    schema: pa.Schema,
    columns: Sequence[str],
    verify_crc: bool,
    with_errors: bool = False,
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body that decodes named byte ranges: each input row gives a ``path``, a
    ``batch_position`` and ``batch_size`` and, for a file not readable locally, its ``content``;
    the other input columns named in `schema` are carried onto every record of the range. With
    `with_errors`, a batch that does not decode is an error row (`schema` has the error columns)."""
    for batch in batches:
        rows = batch.select([n for n in batch.schema.names if n != "content"]).to_pylist()
        contents = batch.column("content")
        for row, content in zip(rows, contents, strict=True):
            # The range's own position and size are not the records' (a range may span batches).
            carried = {n: row[n] for n in schema.names if n in row and n not in ("batch_position", "batch_size")}
            source = row["path"] if not content.is_valid else memoryview(content.as_buffer())
            yield from _decode_one(
                source,
                row["batch_position"],
                row["batch_size"],
                carried,
                row["path"],
                schema=schema,
                columns=columns,
                with_errors=with_errors,
                verify_crc=verify_crc,
                max_decompressed_size=DEFAULT_MAX_DECOMPRESSED,
            )


def _decode_one(
    source: str | memoryview,
    start: int,
    length: int,
    carried: dict[str, object],
    path: str | None,
    *,
    schema: pa.Schema,
    columns: Sequence[str] | None,
    with_errors: bool,
    verify_crc: bool,
    max_decompressed_size: int,
) -> Iterator[pa.RecordBatch]:
    """Decode bytes ``[start, start + length)`` of a file or buffer. With `with_errors`, the problems
    (a corrupt batch, an incomplete last one, a file gone or shorter than listed) are error rows among
    the records, by the core's rules (rust/reporting.rs: the JVM reader's too)."""
    decode = _core.decode_arrow_reporting if with_errors else _core.decode_arrow
    got = decode(
        source,
        columns=None if columns is None else list(columns),
        verify_crc=verify_crc,
        max_decompressed_size=max_decompressed_size,
        offset=start,
        length=length,
    )
    for piece in got if isinstance(got, list) else [got]:
        if isinstance(piece, tuple):
            yield _error_row(carried, path, piece[0], piece[1], schema)
        else:
            for batch in pa.RecordBatchReader.from_stream(piece):
                yield _with_columns(batch, carried, schema)


def _with_columns(batch: pa.RecordBatch, carried: dict[str, object], schema: pa.Schema) -> pa.RecordBatch:
    n = batch.num_rows
    arrays = []
    for field in schema:
        if field.name in carried:
            arrays.append(_constant(carried[field.name], field.type, n))
        elif field.name in batch.schema.names:
            column = batch.column(field.name)
            arrays.append(column if column.type == field.type else column.cast(field.type))
        else:
            arrays.append(pa.nulls(n, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _constant(value: object, type_: pa.DataType, n: int) -> pa.Array:
    """`value` repeated `n` times (pa.repeat is slow for strings: build those from buffers)."""
    if isinstance(value, str) and pa.types.is_string(type_):
        data = value.encode()
        offsets = np.arange(n + 1, dtype=np.int32) * len(data)
        return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data * n))
    return pa.repeat(pa.scalar(value, type_), n)


def _error_row(
    carried: dict[str, object], path: str | None, position: int, reason: str, schema: pa.Schema
) -> pa.RecordBatch:
    row = dict(carried, path=path, error_position=position, error_reason=reason)
    return pa.RecordBatch.from_pylist([row], schema=schema)

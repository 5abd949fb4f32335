"""Kafka record batches: decode log segments, fetch responses and message sets; encode v2 batches
(one by one, or a pyarrow table's rows partitioned as Java's default partitioner does, for a producer).

Decoding is done by the Rust core (GIL released). `iter_batches` yields one `RecordBatch` at a
time; `decode_to_arrow` returns every record as one row of a `pyarrow.Table` (pyarrow is imported
only when that function is called).

A path `source` must be a regular file; it is read with bounded positioned reads (8 MiB, or one
larger batch), never mapped, so a live segment that shrinks or is deleted while it is read (retention,
truncation on a broker) ends the input where the file now ends: a `CorruptRecordError` saying so, or
a partial tail with ``allow_partial_tail=True``; never a signal. Bytes appended after the file was
opened are not read.
"""

from __future__ import annotations

from collections.abc import Sequence
from os import PathLike
from typing import TYPE_CHECKING, Any

from epochguard._core import (
    ArrowRecords,
    BatchIterator,
    Record,
    RecordBatch,
    batch_index,
    decode_arrow,
    decode_arrow_reporting,
    encode_arrow_batches,
    encode_batch,
    iter_batches,
    murmur2,
    partition_for_key,
    record_columns,
    scan_headers,
    stamp_batches,
    with_producer_state,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "ArrowRecords",
    "BatchIterator",
    "COMPUTED_COLUMNS",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "PARTIAL_TAIL_METADATA_KEY",
    "RECORD_COLUMNS",
    "Record",
    "RecordBatch",
    "batch_headers",
    "batch_index",
    "decode_arrow",
    "decode_arrow_reporting",
    "decode_to_arrow",
    "encode_arrow_batches",
    "encode_batch",
    "iter_batches",
    "murmur2",
    "partition_for_key",
    "record_columns",
    "scan_headers",
    "stamp_batches",
    "with_producer_state",
]

DEFAULT_MAX_DECOMPRESSED_SIZE = 64 * 1024 * 1024
#: Schema metadata key holding the byte position of a tolerated partial last batch.
PARTIAL_TAIL_METADATA_KEY = b"epochguard.partial_tail"
#: The columns of a full decode, in order, and the computed ones `columns=` may also name.
RECORD_COLUMNS, COMPUTED_COLUMNS = (tuple(names) for names in record_columns())


def batch_headers(
    source: bytes | bytearray | memoryview | str | PathLike[str] | Any,
    *,
    verify_crc: bool = False,
    allow_partial_tail: bool = False,
    offset: int = 0,
    length: int | None = None,
) -> pa.Table:
    """The header of every batch of `source` as a `pyarrow.Table`, one row per batch, without
    reading its records: each batch's first 61 bytes (a legacy magic 0/1 message: its message
    header) are read, then the reader seeks to the next batch. Columns: batch_position, batch_size,
    base_offset, last_offset, partition_leader_epoch, magic, crc (the stored one, unsigned),
    attributes, compression, is_transactional, is_control, records_count, producer_id,
    max_timestamp. A legacy wrapper's base_offset is its own (last inner) offset and its
    records_count 1: what it holds is known only by decoding it.

    With `verify_crc` every batch is read whole to check its stored CRC (never decompressed): a
    batch whose bytes no longer match is a `CorruptRecordError` at its position. An incomplete
    last batch, and a file that shrinks under the reader, are reported as `decode_to_arrow` reports
    them (the partial tail's position under `PARTIAL_TAIL_METADATA_KEY`).
    """

    headers = scan_headers(
        source, verify_crc=verify_crc, allow_partial_tail=allow_partial_tail, offset=offset, length=length
    )
    return _table(headers)


def decode_to_arrow(
    source: bytes | bytearray | memoryview | str | PathLike[str] | Any,
    *,
    columns: Sequence[str] | None = None,
    verify_crc: bool = True,
    allow_partial_tail: bool = False,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    offset: int = 0,
    length: int | None = None,
    threads: int = 1,
    binary_view: bool = False,
) -> pa.Table:
    """Decode every record of `source` into a `pyarrow.Table`, one row per record.

    `source` is bytes-like (any C-contiguous buffer, e.g. a `pyarrow.Buffer`; read without copying)
    or a segment file path (read in bounded positioned reads). `offset`/`length` select a batch-aligned byte range;
    positions (errors, `partial_tail`) stay absolute. Columns: offset, timestamp, timestamp_type,
    key, value, headers, leader_epoch, batch_offset, producer_id, producer_epoch, sequence,
    is_transactional, is_control, magic (`RECORD_COLUMNS`).

    `columns` projects: any of `RECORD_COLUMNS` and the computed `COMPUTED_COLUMNS`, in the order
    given. ``key_length``/``value_length`` (null for a null key/value), ``headers_count``,
    ``record_digest`` (64-bit XXH3 of key, value and headers in the v2 record encoding, nulls
    distinguished from empty; as signed int64) and ``batch_position``/``batch_size`` (the byte range
    of the record's batch). A column not named is never built: ``columns=["offset", "value_length"]``
    copies no value byte. Every projection validates the same bytes as the full decode. With
    `allow_partial_tail=True` an incomplete last batch is skipped and its byte position stored in the
    schema metadata under `PARTIAL_TAIL_METADATA_KEY`.

    `threads` > 1 splits a bytes-like source's batches across that many threads (the same rows, in
    order, and the same first error; a file path is decoded on one thread). Keep the default 1 where
    the caller already runs one decode per core (Spark tasks).

    `binary_view=True` gives `key` and `value` as `binary_view` (16-byte views, Arrow's `BinaryView`)
    instead of `binary`, pointing at the bytes where they already are: a read-only bytes-like
    `source`'s own memory for uncompressed batches (the table keeps it alive; a writable one is
    copied once first), one decompression buffer per chunk for compressed ones. No value byte is
    copied; values of a file `source`'s uncompressed batches, and of legacy messages, are. Header
    values stay `binary`. The rows and the errors are those of the default layout.

    Raises `epochguard.errors.CorruptRecordError` for malformed input.
    """

    records = decode_arrow(
        source,
        columns=columns,
        verify_crc=verify_crc,
        allow_partial_tail=allow_partial_tail,
        max_decompressed_size=max_decompressed_size,
        offset=offset,
        length=length,
        threads=threads,
        binary_view=binary_view,
    )
    return _table(records)


def _table(stream: ArrowRecords) -> pa.Table:
    """The stream as a table, an incomplete last batch's position in its schema metadata."""
    import pyarrow as pa

    table = pa.table(stream)
    if stream.partial_tail is not None:
        metadata = dict(table.schema.metadata or {})
        metadata[PARTIAL_TAIL_METADATA_KEY] = str(stream.partial_tail).encode()
        table = table.replace_schema_metadata(metadata)
    return table

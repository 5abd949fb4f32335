# Type stubs for the Rust extension `epochguard._core`. This file is the contract between the Rust
# core and the Python package: every name here exists in the extension (checked by stubtest).
import sys
from collections.abc import Iterable, Iterator, Sequence
from os import PathLike
from typing import Any, Protocol, SupportsIndex, TypeAlias, final

import numpy as np
from numpy.typing import NDArray

if sys.version_info >= (3, 12):
    from collections.abc import Buffer
else:
    from typing_extensions import Buffer

class _ArrowArray(Protocol):
    """Anything exporting one Arrow array through the PyCapsule interface (pyarrow, polars, nanoarrow)."""
    def __arrow_c_array__(self, requested_schema: object | None = None, /) -> tuple[object, object]: ...

# Bytes in: any C-contiguous buffer (bytes, bytearray, memoryview, numpy, mmap, pyarrow.Buffer), read
# in place, or a segment file path (memory-mapped).
_Source: TypeAlias = Buffer | str | PathLike[str]
# Integers in, for the batched calls: a 1-D buffer of the exact width (numpy array, array.array,
# memoryview; read in place), a null-free Arrow array of that type (imported without copying), or a
# sequence of Python ints (list, tuple, range; copied).
_Ints: TypeAlias = Buffer | NDArray[np.integer] | _ArrowArray | Sequence[SupportsIndex]
# An `(epoch, start_offset)` pair: a tuple, a list (e.g. read back from JSON), a row of an N x 2 array.
_Pair: TypeAlias = tuple[int, int] | Sequence[SupportsIndex] | NDArray[np.integer]

__version__: str
__all__ = [
    "ArrowRecords",
    "BatchIterator",
    "CheckpointError",
    "CorruptFrameError",
    "CorruptRecordError",
    "EpochGuardError",
    "LeaderEpochCache",
    "MAX_FRAME_BYTES",
    "Record",
    "RecordBatch",
    "RequestHeader",
    "WIRE_API_VERSIONS",
    "CLIENT_API_VERSIONS",
    "__version__",
    "batch_index",
    "decode_arrow",
    "decode_arrow_reporting",
    "decode_request",
    "decode_response",
    "divergence_point",
    "divergence_points",
    "encode_arrow_batches",
    "encode_batch",
    "encode_request",
    "encode_response",
    "find_diverging_epoch",
    "iter_batches",
    "murmur2",
    "parse_leader_epoch_checkpoint",
    "partition_for_key",
    "record_columns",
    "scan_headers",
    "stamp_batches",
    "truncation_offset",
    "with_producer_state",
]

# --- errors --------------------------------------------------------------------------------------
class EpochGuardError(Exception): ...

class CorruptRecordError(EpochGuardError):
    position: int  # absolute byte offset in the input where decoding failed
    reason: str

class CorruptFrameError(EpochGuardError):
    position: int  # byte offset in the request frame (after its size prefix)
    reason: str

class CheckpointError(EpochGuardError):
    line: int  # 1-based; 0 = the file as a whole
    reason: str

# --- leader-epoch cache (section (a) of SPEC.md) -------------------------------------------------
@final
class LeaderEpochCache:
    def __new__(cls, entries: Iterable[_Pair] | NDArray[np.integer] = ()) -> LeaderEpochCache: ...
    def __reduce__(self) -> tuple[type[LeaderEpochCache], tuple[list[tuple[int, int]]]]: ...
    def __iter__(self) -> Iterator[tuple[int, int]]: ...
    def assign(self, epoch: int, start_offset: int) -> None: ...
    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]: ...
    def epoch_for_offset(self, offset: int) -> int | None: ...
    def truncate_from_end(self, end_offset: int) -> None: ...
    def truncate_from_start(self, start_offset: int) -> None: ...
    def entries(self) -> list[tuple[int, int]]: ...
    @property
    def latest_epoch(self) -> int | None: ...
    @property
    def previous_epoch(self) -> int | None: ...
    def previous_epoch_of(self, epoch: int) -> int | None: ...
    def next_epoch(self, epoch: int) -> int | None: ...
    @property
    def earliest_entry(self) -> tuple[int, int] | None: ...
    def copy(self) -> LeaderEpochCache: ...
    def clear(self) -> None: ...
    def __len__(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __copy__(self) -> LeaderEpochCache: ...
    def __deepcopy__(self, _memo: object, /) -> LeaderEpochCache: ...
    @staticmethod
    def read_checkpoint(path: str | PathLike[str]) -> LeaderEpochCache: ...
    def write_checkpoint(self, path: str | PathLike[str]) -> None: ...
    # Batched, GIL released. Input (`_Ints`): int32 epochs / int64 offsets. Output: read-only numpy
    # arrays over Rust-owned memory (zero-copy).
    def end_offsets_for(self, epochs: _Ints, log_end_offset: int) -> tuple[NDArray[np.int32], NDArray[np.int64]]: ...
    def epochs_for_offsets(self, offsets: _Ints) -> NDArray[np.int32]: ...  # -1 where no epoch

# --- divergence search ---------------------------------------------------------------------------
# find_diverging_epoch: (-1, -1) = the leader cannot answer; callers map it to OFFSET_OUT_OF_RANGE.
# truncation_offset: None = leader offset undefined; truncate to the initial fetch offset (HW).
# divergence_point: smallest o in [max(earliest starts), max(log ends)) where the histories assign
# different epochs (each last epoch extends to infinity); None if none or either cache is empty.
# divergence_points: CSR batches, bounds int64 (n + 1), epochs int32, starts/log_ends int64.
def find_diverging_epoch(
    leader_cache: LeaderEpochCache, leader_log_end_offset: int, last_fetched_epoch: int, fetch_offset: int
) -> tuple[int, int] | None: ...
def truncation_offset(
    local_cache: LeaderEpochCache, local_log_end_offset: int, leader_epoch: int, leader_end_offset: int
) -> tuple[int, bool] | None: ...
def divergence_point(
    cache_a: LeaderEpochCache, log_end_a: int, cache_b: LeaderEpochCache, log_end_b: int
) -> int | None: ...
def divergence_points(
    a_bounds: _Ints, a_epochs: _Ints, a_starts: _Ints, a_log_ends: _Ints,
    b_bounds: _Ints, b_epochs: _Ints, b_starts: _Ints, b_log_ends: _Ints,
) -> NDArray[np.int64]: ...  # per partition, -1 = no divergence

# --- record batches ------------------------------------------------------------------------------
# `source`: bytes-like (any C-contiguous buffer, read in place) or a segment file path (bounded
# positioned reads, never mapped). A path must be a regular file (a directory: IsADirectoryError; a
# FIFO or device: ValueError). A file that shrinks while it is read ends the input where it now ends:
# CorruptRecordError, or a partial tail with allow_partial_tail=True; never SIGBUS.
# `offset`/`length`: decode only that byte range (batch-aligned); positions stay absolute.
# Legacy magic 0/1 entries are batches too: base_offset is the message's own offset (for a compressed
# wrapper, its last inner offset), partition_leader_epoch/producer fields are -1, timestamp_type -1
# for magic 0; their records' offset_delta is the index inside the wrapper.
@final
class Record:
    offset: int
    timestamp: int  # effective: batch max timestamp under log-append time, -1 for magic 0
    attributes: int
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]

@final
class RecordBatch:
    file_position: int
    size_in_bytes: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int  # -1 for legacy magic 0/1
    magic: int
    crc: int
    attributes: int
    compression: str  # "none" | "gzip" | "snappy" | "lz4" | "zstd"
    timestamp_type: int  # 0 create time, 1 log append time, -1 magic 0 (none)
    is_transactional: bool
    is_control: bool
    has_delete_horizon: bool
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    @property
    def last_offset(self) -> int: ...
    @property
    def next_offset(self) -> int: ...
    decoded: bool  # False for a data batch read with headers_only=True (records() then raises)
    def records(self) -> list[Record]: ...
    def __len__(self) -> int: ...

@final
class BatchIterator(Iterator[RecordBatch]):
    # After exhaustion with allow_partial_tail=True: byte position of an incomplete last batch, else None.
    partial_tail: int | None
    def __iter__(self) -> BatchIterator: ...
    def __next__(self) -> RecordBatch: ...

def iter_batches(
    source: _Source,
    *,
    verify_crc: bool = True,
    allow_partial_tail: bool = False,
    max_decompressed_size: int = 64 * 1024 * 1024,
    offset: int = 0,
    length: int | None = None,
    headers_only: bool = False,
) -> BatchIterator: ...

@final
class ArrowRecords:
    """Decoded records; an Arrow C stream exporter (PyCapsule interface): wrap with pyarrow.table()."""
    partial_tail: int | None
    @property
    def num_rows(self) -> int: ...
    def __len__(self) -> int: ...
    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...

# leader-epoch-checkpoint bytes -> (epoch, start_offset) entries, as read_checkpoint reads a file
def parse_leader_epoch_checkpoint(data: bytes) -> list[tuple[int, int]]: ...

# (record columns of a full decode, in order; computed columns) accepted by decode_arrow(columns=...)
def record_columns() -> tuple[list[str], list[str]]: ...
def decode_arrow(
    source: _Source,
    *,
    columns: Sequence[str] | None = None,
    verify_crc: bool = True,
    allow_partial_tail: bool = False,
    max_decompressed_size: int = 64 * 1024 * 1024,
    offset: int = 0,
    length: int | None = None,
    threads: int = 1,
    binary_view: bool = False,
) -> ArrowRecords: ...

# with_errors' decode (rust/reporting.rs, also the JVM reader's): the range's records and the problems
# between them, in order: an ArrowRecords of one batch, or (byte position, reason). A path that is gone
# or shorter than offset + length is a problem too.
def decode_arrow_reporting(
    source: _Source,
    *,
    columns: Sequence[str] | None = None,
    verify_crc: bool = True,
    max_decompressed_size: int = 64 * 1024 * 1024,
    offset: int = 0,
    length: int | None = None,
) -> list[ArrowRecords | tuple[int, str]]: ...

# Header-only scan (no CRC check, no decompression): (file_position, size_in_bytes, base_offset,
# last_offset) per batch, for cutting a file into batch-aligned ranges. An incomplete last batch is
# left out with allow_partial_tail=True, an error otherwise.
def batch_index(
    source: _Source,
    *,
    allow_partial_tail: bool = False,
    offset: int = 0,
    length: int | None = None,
) -> list[tuple[int, int, int, int]]: ...

# Header-only pass: one Arrow row per batch (batch_position, batch_size, base_offset, last_offset,
# partition_leader_epoch, magic, crc, attributes, compression, is_transactional, is_control,
# records_count, producer_id, max_timestamp); records are seeked past, read only with verify_crc.
def scan_headers(
    source: _Source,
    *,
    verify_crc: bool = False,
    allow_partial_tail: bool = False,
    offset: int = 0,
    length: int | None = None,
) -> ArrowRecords: ...

# Records are (key, value[, headers[, timestamp]]); offsets are base_offset + index. A record without
# a timestamp gets base_timestamp; base_timestamp None = the first explicit timestamp, else -1.
def encode_batch(
    records: Sequence[tuple[bytes | None, bytes | None]
                      | tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]
                      | tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int | None]],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    compression: str = "none",
    timestamp_type: int = 0,
    base_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes: ...

# The producer's side (rust/records/produce.rs): Java's default partitioner, send_arrow's encoder, and the
# idempotent producer's fields written into an encoded batch. Wrong column types: ArrowSchemaError.
def murmur2(key: bytes) -> int: ...
def partition_for_key(key: bytes, partitions: int) -> int: ...
def encode_arrow_batches(
    data: object,
    *,
    partitions: int,
    sticky_partition: int,
    default_timestamp: int,
    batch_size: int,
    compression: str = "none",
) -> list[tuple[int, bytes, bytes]]: ...
def with_producer_state(
    batch: bytes, producer_id: int, producer_epoch: int, base_sequence: int, *, is_transactional: bool = False
) -> bytes: ...

# --- Kafka wire codec (cargo feature "wire") -----------------------------------------------------
MAX_FRAME_BYTES: int  # the largest request frame the server reads (checked on the size prefix)
WIRE_API_VERSIONS: list[tuple[int, int, int]]  # (api_key, min_version, max_version) the codec serves
CLIENT_API_VERSIONS: list[tuple[int, int, int]]  # the client's half: WIRE_API_VERSIONS plus SASL (17, 36)

@final
class RequestHeader:
    def __new__(
        cls, api_key: int, api_version: int, correlation_id: int, client_id: str | None = None
    ) -> RequestHeader: ...
    @property
    def api_key(self) -> int: ...
    @property
    def api_version(self) -> int: ...
    @property
    def correlation_id(self) -> int: ...
    @property
    def client_id(self) -> str | None: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

# `frame`: the bytes after the 4-byte size prefix. The request is an `epochguard.protocol.messages` dataclass
# whose `version` is the header's api_version. Raises epochguard.errors.UnsupportedVersionError (with
# `.header`) for an API key or version outside WIRE_API_VERSIONS, CorruptFrameError for the rest.
def decode_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, Any]: ...
# The whole response frame, size prefix included, at header.api_version (ApiVersions for a version
# outside the table: v0, Kafka's error answer).
def encode_response(header: RequestHeader, response: Any) -> bytes: ...
# The client's half. A request frame, size prefix included, for an `epochguard.messages` request at
# header.api_version (fields the version lacks are not written). Raises UnsupportedVersionError outside
# WIRE_API_VERSIONS, ValueError for a request that version cannot carry.
def encode_request(header: RequestHeader, request: Any) -> bytes: ...
# `frame`: a response's bytes after its size prefix, to a request sent at api_key/api_version:
# (correlation id, `epochguard.messages` response). CorruptFrameError for anything malformed.
def decode_response(api_key: int, api_version: int, frame: bytes | bytearray | memoryview) -> tuple[int, Any]: ...
# Produced v2 batches with base offsets (consecutive from base_offset) and the partition leader epoch
# written in place: (stamped bytes, last offset, record count, max timestamp).
def stamp_batches(data: bytes, base_offset: int, partition_leader_epoch: int) -> tuple[bytes, int, int, int]: ...

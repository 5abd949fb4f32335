"""`decode_to_arrow(threads=N)`: a source's batches split across threads give the table one thread
gives (rows in input order, every codec, projections, partial tails) and the same first error."""

from __future__ import annotations

import pyarrow as pa
import pytest

from epochguard.errors import CorruptRecordError
from epochguard.records import PARTIAL_TAIL_METADATA_KEY, decode_to_arrow, encode_batch

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def log(batches: int = 24) -> bytes:
    """Batches of uneven sizes and every codec, so the byte-balanced split cuts them unevenly."""
    parts, offset = [], 0
    for i in range(batches):
        n = 1 + (i * 7) % 13
        records = [(b"k%d" % (offset + j), b"v" * ((offset + j) % 300), [("h", b"%d" % j)]) for j in range(n)]
        parts.append(encode_batch(records, base_offset=offset, partition_leader_epoch=i // 5,
                                  compression=CODECS[i % len(CODECS)]))
        offset += n
    return b"".join(parts)


LOG = log()


@pytest.mark.parametrize("threads", [2, 3, 7, 100])
def test_threads_give_the_single_thread_table(threads: int) -> None:
    one = decode_to_arrow(LOG)
    many = decode_to_arrow(LOG, threads=threads)
    assert many.schema == one.schema
    assert many.num_rows == one.num_rows == sum(1 + (i * 7) % 13 for i in range(24))
    assert many.equals(one)
    assert many.column("offset").to_pylist() == list(range(many.num_rows))  # in input order


def test_threads_with_a_projection_a_range_and_a_partial_tail() -> None:
    cut = LOG + LOG[: 40]  # an incomplete batch header at the end
    one = decode_to_arrow(cut, columns=["value_length", "offset", "batch_position"], allow_partial_tail=True,
                          offset=0)
    many = decode_to_arrow(cut, columns=["value_length", "offset", "batch_position"], allow_partial_tail=True,
                           threads=4)
    assert many.equals(one)
    assert many.schema.metadata == one.schema.metadata
    assert one.schema.metadata[PARTIAL_TAIL_METADATA_KEY] == str(len(LOG)).encode()


def test_threads_report_the_first_error_as_one_thread_does() -> None:
    data = bytearray(LOG)
    data[len(LOG) // 2] ^= 0xFF  # a CRC failure (or framing error) in the middle
    data[-3] ^= 0xFF  # and another in the last batch
    with pytest.raises(CorruptRecordError) as one:
        decode_to_arrow(bytes(data))
    with pytest.raises(CorruptRecordError) as many:
        decode_to_arrow(bytes(data), threads=4)
    assert (many.value.position, many.value.reason) == (one.value.position, one.value.reason)


def test_threads_over_empty_input_and_zero_threads() -> None:
    assert decode_to_arrow(b"", threads=4).num_rows == 0
    assert decode_to_arrow(b"", threads=4).schema == decode_to_arrow(b"").schema
    with pytest.raises(ValueError, match="threads"):
        decode_to_arrow(LOG, threads=0)


def test_arrow_type_is_unchanged_by_threads() -> None:
    assert decode_to_arrow(LOG, threads=2).schema.field("value").type == pa.binary()

"""The Python surface of the record codec: sources, laziness, the Arrow schema, byte ranges."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from epochguard.errors import CorruptRecordError
from epochguard.records import (
    PARTIAL_TAIL_METADATA_KEY,
    ArrowRecords,
    batch_index,
    decode_arrow,
    decode_to_arrow,
    encode_batch,
    iter_batches,
)

B1 = encode_batch([(b"a", b"1"), (b"b", b"2")], base_offset=0, partition_leader_epoch=1)
B2 = encode_batch([(None, b"3", [("h", None)])], base_offset=2, partition_leader_epoch=2, compression="gzip")
B3 = encode_batch([(b"c", None)], base_offset=3, partition_leader_epoch=2, compression="lz4")
LOG = B1 + B2 + B3

SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("timestamp_type", pa.int8(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])), nullable=False),
        pa.field("leader_epoch", pa.int32(), nullable=False),
        pa.field("batch_offset", pa.int64(), nullable=False),
        pa.field("producer_id", pa.int64(), nullable=False),
        pa.field("producer_epoch", pa.int16(), nullable=False),
        pa.field("sequence", pa.int32(), nullable=False),
        pa.field("is_transactional", pa.bool_(), nullable=False),
        pa.field("is_control", pa.bool_(), nullable=False),
        pa.field("magic", pa.int8(), nullable=False),
    ]
)


def test_schema_is_exactly_the_contract() -> None:
    table = decode_to_arrow(LOG)
    assert table.schema.equals(SCHEMA)
    assert decode_to_arrow(b"").schema.equals(SCHEMA) and decode_to_arrow(b"").num_rows == 0
    assert table.column("offset").to_pylist() == [0, 1, 2, 3]
    assert table.column("leader_epoch").to_pylist() == [1, 1, 2, 2]
    assert table.column("batch_offset").to_pylist() == [0, 0, 2, 3]
    assert table.column("headers").to_pylist() == [[], [], [{"key": "h", "value": None}], []]


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview, pa.py_buffer], ids=["bytes", "bytearray", "memoryview", "pyarrow"])
def test_buffer_sources(wrap) -> None:
    assert [b.base_offset for b in iter_batches(wrap(LOG))] == [0, 2, 3]
    assert decode_to_arrow(wrap(LOG)).num_rows == 4


def test_path_sources(tmp_path: Path) -> None:
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(LOG)
    for src in (seg, str(seg)):
        assert [b.base_offset for b in iter_batches(src)] == [0, 2, 3]
        assert decode_to_arrow(src).equals(decode_to_arrow(LOG))
        assert batch_index(src) == batch_index(LOG)
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert list(iter_batches(empty)) == [] and decode_to_arrow(empty).num_rows == 0
    with pytest.raises(FileNotFoundError):
        iter_batches(tmp_path / "missing.log")


def test_bad_sources() -> None:
    with pytest.raises(BufferError):
        iter_batches(memoryview(LOG)[::2])
    with pytest.raises(TypeError):
        iter_batches(12345)
    with pytest.raises(ValueError, match="past the end"):
        decode_arrow(LOG, offset=len(LOG) + 1)
    with pytest.raises(ValueError, match="past the end"):
        decode_arrow(LOG, offset=10, length=len(LOG))


def test_iteration_is_lazy_and_stops_after_an_error() -> None:
    broken = bytearray(LOG)
    broken[len(B1) + 30] ^= 0xFF  # inside B2's CRC-covered bytes
    it = iter_batches(bytes(broken))
    first = next(it)
    assert first.base_offset == 0 and [r.value for r in first.records()] == [b"1", b"2"]
    with pytest.raises(CorruptRecordError) as info:
        next(it)
    assert info.value.position == len(B1)
    with pytest.raises(StopIteration):
        next(it)


def test_batch_index_and_ranges_report_absolute_positions() -> None:
    index = batch_index(LOG)
    assert index == [(0, len(B1), 0, 1), (len(B1), len(B2), 2, 2), (len(B1) + len(B2), len(B3), 3, 3)]
    pos, size, *_ = index[1]
    (batch,) = list(iter_batches(LOG, offset=pos, length=size))
    assert batch.file_position == pos and batch.base_offset == 2
    table = decode_to_arrow(LOG, offset=pos)
    assert table.column("offset").to_pylist() == [2, 3]
    # A range that ends inside a batch: partial tail at its absolute position.
    it = iter_batches(LOG, offset=pos, length=size + 10, allow_partial_tail=True)
    assert len(list(it)) == 1 and it.partial_tail == pos + size
    table = decode_to_arrow(LOG, offset=pos, length=size + 10, allow_partial_tail=True)
    assert table.schema.metadata[PARTIAL_TAIL_METADATA_KEY] == str(pos + size).encode()
    with pytest.raises(CorruptRecordError) as info:
        decode_to_arrow(LOG, offset=pos, length=size + 10)
    assert info.value.position == pos + size


def test_arrow_records_exports_repeatably() -> None:
    records = decode_arrow(LOG)
    assert isinstance(records, ArrowRecords) and records.num_rows == len(records) == 4
    assert records.partial_tail is None
    first, second = pa.table(records), pa.RecordBatchReader.from_stream(records).read_all()
    assert first.equals(second) and first.num_rows == 4


def test_record_and_batch_objects() -> None:
    (b1, b2, b3) = iter_batches(LOG)
    assert (b2.compression, b3.compression, b1.compression) == ("gzip", "lz4", "none")
    assert b1.records_count == len(b1) == 2 and b1.last_offset == 1 and b1.next_offset == 2
    assert "base_offset=2" in repr(b2)
    rec = b2.records()[0]
    assert (rec.key, rec.value, rec.headers, rec.offset) == (None, b"3", [("h", None)], 2)
    assert "offset=2" in repr(rec)


def test_headers_only_checks_crcs_and_leaves_data_records_undecoded() -> None:
    """The consumer's header pass: every batch's header and CRC, no data record decoded (a control batch
    is, for its type); `records()` of an undecoded batch raises instead of answering empty."""
    control = encode_batch([(b"\x00\x00\x00\x01", b"")], base_offset=4, producer_id=7, is_transactional=True,
                           is_control=True)
    b1, b2, b3, c = iter_batches(LOG + control, headers_only=True)
    assert [(b.base_offset, b.last_offset, b.records_count, b.partition_leader_epoch) for b in (b1, b2, b3)] == [
        (0, 1, 2, 1), (2, 2, 1, 2), (3, 3, 1, 2)]
    assert not (b1.decoded or b2.decoded or b3.decoded)
    with pytest.raises(ValueError, match="headers_only"):
        b2.records()
    with pytest.raises(ValueError, match="headers_only"):
        len(b1)
    assert c.decoded and c.is_control and c.records()[0].key == b"\x00\x00\x00\x01"
    broken = bytearray(LOG)
    broken[len(B1) + 30] ^= 0xFF  # inside B2's CRC-covered bytes
    it = iter_batches(bytes(broken), headers_only=True)
    assert next(it).base_offset == 0
    with pytest.raises(CorruptRecordError) as info:
        next(it)
    assert info.value.position == len(B1)
    assert [b.base_offset for b in iter_batches(bytes(broken), headers_only=True, verify_crc=False)] == [0, 2, 3]
    it = iter_batches(LOG[:-3], headers_only=True, allow_partial_tail=True)
    assert len(list(it)) == 2 and it.partial_tail == len(B1) + len(B2)


def test_empty_batch_left_by_compaction() -> None:
    """Kafka keeps empty batches (count 0) for producer state; they decode to no records."""
    import struct

    from kafka_batches import fix_v2_crc

    header = struct.pack(">qiibIhiqqqhii", 40, 49, 3, 2, 0, 0x13, 4, 1, 1, 77, 1, 10, 0)  # lz4 bits, transactional
    empty = fix_v2_crc(header)
    (batch,) = list(iter_batches(empty + B1))[:1]
    assert (batch.records_count, len(batch), batch.last_offset, batch.producer_id) == (0, 0, 44, 77)
    assert decode_to_arrow(empty + B1).num_rows == 2
    assert batch_index(empty) == [(0, 61, 40, 44)]


def test_large_input_is_chunked_without_losing_rows() -> None:
    value = bytes(range(256)) * 16  # 4 KiB
    log = b"".join(
        encode_batch([(b"%d" % (i * 1000 + j), value) for j in range(1000)], base_offset=i * 1000, compression=codec)
        for i, codec in enumerate(["none", "lz4", "none", "zstd"])
    )
    table = decode_to_arrow(log)
    assert table.num_rows == 4000 and table.column("offset").num_chunks > 1  # 16 MiB of values: chunked
    assert table.column("offset").to_pylist() == list(range(4000))
    assert table.column("key").to_pylist() == [b"%d" % i for i in range(4000)]
    assert set(table.column("value").to_pylist()) == {value}

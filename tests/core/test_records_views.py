"""`decode_to_arrow(binary_view=True)`: keys and values as Arrow `binary_view` pointing at the bytes
where they already are (the caller's read-only buffer for uncompressed batches, one decompression
buffer per chunk for compressed ones), never outside those buffers; the rows and the errors of the
default `binary` layout."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from kafka_batches import Rec, kafka_python_legacy

from epochguard.errors import CorruptRecordError
from epochguard.records import decode_to_arrow, encode_batch

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CORPUS = sorted((Path(__file__).parents[1] / "data" / "fuzz").glob("*.bin"))


def log(codec: str, batches: int = 6) -> bytes:
    """Values of every size around the 12-byte inline limit, null keys and values, headers."""
    parts, offset = [], 0
    for b in range(batches):
        records = [
            (None if i % 5 == 0 else b"key-%d" % (offset + i) * (i % 3),
             None if i % 7 == 3 else bytes([65 + i % 26]) * ((offset + i) * 5 % 200),
             [("h", b"x" * (i % 20))])
            for i in range(20 + b)
        ]
        parts.append(encode_batch(records, base_offset=offset, compression=codec))
        offset += len(records)
    return b"".join(parts)


def as_binary(table: pa.Table) -> pa.Table:
    """The table with view columns cast to plain binary."""
    schema = pa.schema([f.with_type(pa.binary()) if f.type == pa.binary_view() else f for f in table.schema])
    return table.cast(schema)


def value_chunks(table: pa.Table, column: str = "value") -> list[pa.Array]:
    return [c for c in table.column(column).chunks if len(c)]


def check_valid(table: pa.Table) -> None:
    for name in ("key", "value"):
        for chunk in table.column(name).chunks:
            chunk.validate(full=True)  # every view inside its buffers, prefixes matching


@pytest.mark.parametrize("codec", CODECS)
def test_views_hold_the_binary_rows(codec: str) -> None:
    data = log(codec)
    plain = decode_to_arrow(data)
    views = decode_to_arrow(data, binary_view=True)
    assert views.schema.field("key").type == pa.binary_view()
    assert views.schema.field("value").type == pa.binary_view()
    assert views.schema.field("headers").type == plain.schema.field("headers").type  # headers stay binary
    check_valid(views)
    assert as_binary(views).equals(plain)
    assert as_binary(decode_to_arrow(data, binary_view=True, threads=3)).equals(plain)
    projected = decode_to_arrow(data, columns=["value", "offset"], binary_view=True)
    assert as_binary(projected).equals(plain.select(["value", "offset"]))


def test_uncompressed_values_point_into_the_callers_buffer() -> None:
    data = log("none")
    source = pa.py_buffer(data)
    table = decode_to_arrow(data, binary_view=True)
    for chunk in value_chunks(table) + value_chunks(table, "key"):
        _, _, input_buffer, decompressed, copied = chunk.buffers()
        assert (input_buffer.address, input_buffer.size) == (source.address, source.size)
        assert decompressed.size == 0 and copied.size == 0  # nothing decompressed, nothing copied
    del data, source
    assert as_binary(table).equals(decode_to_arrow(log("none")))  # the table keeps the bytes alive


@pytest.mark.parametrize("codec", ["lz4", "zstd", "gzip", "snappy"])
def test_compressed_values_point_into_the_decompression_buffer(codec: str) -> None:
    data = log(codec)
    table = decode_to_arrow(data, binary_view=True)
    for chunk in value_chunks(table):
        _, _, _, decompressed, copied = chunk.buffers()
        long_values = [v for v in chunk.to_pylist() if v is not None and len(v) > 12]
        # The chunk's batches, decompressed once: at least the long values' bytes, nothing copied.
        assert decompressed.size >= sum(map(len, long_values)) > 0
        assert copied.size == 0
        assert decompressed.to_pybytes().count(long_values[-1]) >= 1


def test_a_writable_buffer_is_copied_once_not_aliased() -> None:
    data = bytearray(log("none"))
    table = decode_to_arrow(data, binary_view=True)
    before = table.column("value").to_pylist()
    data[:] = bytes(len(data))  # the caller reuses its buffer
    assert table.column("value").to_pylist() == before
    check_valid(table)


def test_a_file_source_and_legacy_messages_copy_what_they_cannot_point_at(tmp_path: Path) -> None:
    legacy = kafka_python_legacy(1, [Rec(b"k" * 20, b"legacy value " * 3)] * 3, compression="gzip")
    data = log("none") + log("lz4")
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    from_file = decode_to_arrow(path, binary_view=True)
    check_valid(from_file)
    assert as_binary(from_file).equals(decode_to_arrow(data))
    table = decode_to_arrow(legacy, binary_view=True)
    check_valid(table)
    assert as_binary(table).equals(decode_to_arrow(legacy))
    (chunk,) = value_chunks(table)
    # Inside a legacy wrapper: decompressed into scratch space, so copied.
    assert chunk.buffers()[4].size == 3 * len(b"legacy value " * 3)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_hostile_batches_give_the_binary_layouts_error(path: Path) -> None:
    """Every corpus file (every magic and codec) with bytes flipped and cut: as views the same rows,
    or the same typed error at the same position, as the default layout."""
    data = path.read_bytes()
    step = max(1, len(data) // 40)
    for i in range(0, len(data), step):
        mutated = bytearray(data)
        mutated[i] ^= 0x5A
        for candidate in (bytes(mutated), data[:i]):
            try:
                plain = decode_to_arrow(candidate, verify_crc=False)
            except CorruptRecordError as e:
                with pytest.raises(CorruptRecordError) as views_error:
                    decode_to_arrow(candidate, verify_crc=False, binary_view=True)
                # A codec's own message may differ with the room its output had: up to the first colon.
                got = (views_error.value.position, views_error.value.reason.split(":")[0])
                assert got == (e.position, e.reason.split(":")[0])
                continue
            views = decode_to_arrow(candidate, verify_crc=False, binary_view=True)
            check_valid(views)
            assert as_binary(views).equals(plain)

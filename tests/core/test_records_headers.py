"""The header-only pass (`batch_headers`, `_core.scan_headers`): every header field of every batch of
the real Kafka files in shared/kafka-segments against their independent decodes (expected/*.json),
the same batches, errors and partial tails as the decoder, and records never parsed."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from test_records_segments import EXPECTED, SEGMENTS, load

from epochguard import _core
from epochguard.errors import CorruptRecordError
from epochguard.records import PARTIAL_TAIL_METADATA_KEY, batch_headers, batch_index, encode_batch, iter_batches


def log() -> bytes:
    """Three v2 batches: plain, zstd (epoch 1), gzip transactional control-free (epoch 4)."""
    value = b"v" * 100
    return (
        encode_batch([(None, value)] * 3, base_offset=0, partition_leader_epoch=0)
        + encode_batch([(b"k", value)] * 5, base_offset=3, partition_leader_epoch=1, compression="zstd")
        + encode_batch([(None, value)], base_offset=8, partition_leader_epoch=4, compression="gzip", producer_id=7,
                       producer_epoch=0, base_sequence=0, is_transactional=True)
    )


@pytest.mark.skipif(not EXPECTED, reason="shared/kafka-segments not present")
@pytest.mark.parametrize("path", EXPECTED, ids=lambda p: p.stem)
def test_every_header_field_of_real_broker_files(path: Path) -> None:
    exp, data_file = load(path)
    crc_ok = all(b["crc_valid"] for b in exp["batches"])
    table = batch_headers(data_file, verify_crc=False, allow_partial_tail=True)
    rows = table.to_pylist()
    assert len(rows) == exp["batch_count"]
    for row, b in zip(rows, exp["batches"], strict=True):
        assert (row["batch_position"], row["batch_size"], row["magic"]) == (b["file_position"], b["size_in_bytes"], b["magic"])
        assert (row["crc"], row["attributes"], row["compression"]) == (b["crc"], b["attributes"], b["compression"])
        if b["magic"] == 2:
            assert row["base_offset"] == b["base_offset"]
            assert row["last_offset"] == b["base_offset"] + b["last_offset_delta"]
            assert row["partition_leader_epoch"] == b["partition_leader_epoch"]
            assert row["records_count"] == b["records_count"] == len(b["records"])
            assert (row["producer_id"], row["max_timestamp"]) == (b["producer_id"], b["max_timestamp"])
            assert (row["is_transactional"], row["is_control"]) == (b["transactional"], b["control"])
        else:
            # A legacy message or wrapper is reported as framed: its own offset, one "record", no epoch.
            assert row["base_offset"] == row["last_offset"] == b["base_offset"]
            assert (row["partition_leader_epoch"], row["records_count"], row["producer_id"]) == (-1, 1, -1)
    if crc_ok:
        assert batch_headers(data_file, verify_crc=True).equals(table)
    else:
        bad = next(b for b in exp["batches"] if not b["crc_valid"])
        with pytest.raises(CorruptRecordError) as info:
            batch_headers(data_file, verify_crc=True)
        assert info.value.position == bad["file_position"] and "CRC" in info.value.reason


@pytest.mark.skipif(not EXPECTED, reason="shared/kafka-segments not present")
def test_real_files_cover_v2_and_legacy() -> None:
    """The files above exercise both branches: v2 batches and legacy (0.8/0.9-era) message sets."""
    magics = {b["magic"] for p in EXPECTED for b in json.loads(p.read_text())["batches"]}
    assert {0, 2} <= magics, (magics, SEGMENTS)


def test_the_same_batches_as_the_decoder_from_bytes_and_from_a_file(tmp_path: Path) -> None:
    data = log()
    path = tmp_path / "seg.log"
    path.write_bytes(data)
    decoded = list(iter_batches(data))
    for source in (data, str(path), memoryview(data)):
        rows = batch_headers(source).to_pylist()
        assert [(r["batch_position"], r["batch_size"]) for r in rows] == [
            (b.file_position, b.size_in_bytes) for b in decoded
        ]
        assert [(r["base_offset"], r["last_offset"], r["partition_leader_epoch"], r["records_count"]) for r in rows] == [
            (0, 2, 0, 3), (3, 7, 1, 5), (8, 8, 4, 1)
        ]
        assert [r["compression"] for r in rows] == ["none", "zstd", "gzip"]
        assert [r["crc"] for r in rows] == [b.crc for b in decoded]
        assert [(r["is_transactional"], r["producer_id"]) for r in rows] == [(False, -1), (False, -1), (True, 7)]
    # A byte range: positions stay absolute.
    second = decoded[1]
    rows = batch_headers(str(path), offset=second.file_position, length=len(data) - second.file_position).to_pylist()
    assert [r["batch_position"] for r in rows] == [second.file_position, decoded[2].file_position]


def test_records_are_never_parsed_without_crc(tmp_path: Path) -> None:
    """Garbage inside a batch's records (its framing intact): the header pass walks past it, the
    decoder fails on it, and verify_crc finds it at the batch's position."""
    data = bytearray(log())
    second = int.from_bytes(data[8:12], "big") + 12
    data[second + 61 : second + 70] = b"\xff" * 9  # the zstd frame of the second batch
    assert batch_headers(bytes(data)).num_rows == 3
    with pytest.raises(CorruptRecordError):
        list(iter_batches(bytes(data), verify_crc=False))
    with pytest.raises(CorruptRecordError) as info:
        batch_headers(bytes(data), verify_crc=True)
    assert info.value.position == second and "CRC" in info.value.reason


def test_a_torn_tail_is_a_partial_tail_or_an_error_as_for_the_decoder(tmp_path: Path) -> None:
    data = log()
    index = batch_index(data)
    for cut in (1, 11, 30, 60, 70):
        torn = data[: index[2][0] + cut]
        path = tmp_path / f"torn{cut}.log"
        path.write_bytes(torn)
        for source in (torn, str(path)):
            table = batch_headers(source, allow_partial_tail=True)
            assert table.num_rows == 2
            assert table.schema.metadata[PARTIAL_TAIL_METADATA_KEY] == str(index[2][0]).encode()
            with pytest.raises(CorruptRecordError) as info:
                batch_headers(source)
            assert info.value.position == index[2][0] and "partial batch" in info.value.reason
    assert PARTIAL_TAIL_METADATA_KEY not in (batch_headers(data).schema.metadata or {})


@pytest.mark.parametrize(
    ("patch", "position", "reason"),
    [
        (lambda d: struct.pack_into(">i", d, 8, 5), 0, "smaller than the smallest batch"),
        (lambda d: d.__setitem__(16, 7), 16, "unknown magic 7"),
        (lambda d: struct.pack_into(">h", d, 21, 6), 21, "unknown compression codec id 6"),
        (lambda d: struct.pack_into(">i", d, 57, -1), 57, "negative record count"),
        (lambda d: struct.pack_into(">q", d, 0, 2**63 - 2), 0, "i64 overflow"),
    ],
)
def test_a_corrupt_header_is_a_typed_error_at_its_position(patch, position: int, reason: str, tmp_path: Path) -> None:
    data = bytearray(log())
    patch(data)
    path = tmp_path / "bad.log"
    path.write_bytes(bytes(data))
    for source in (bytes(data), str(path)):
        for verify in (False, True):
            with pytest.raises(CorruptRecordError) as info:
                batch_headers(source, verify_crc=verify, allow_partial_tail=True)
            assert info.value.position == position and reason in info.value.reason, info.value.reason


def test_legacy_messages_are_reported_with_their_magic() -> None:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=1, compression_type=1, batch_size=1 << 20)  # gzip wrapper
    for i in range(4):
        builder.append(i, timestamp=1000 + i, key=None, value=b"x%d" % i)
    wrapper = bytearray(builder.build())
    struct.pack_into(">q", wrapper, 0, 3)  # the broker sets the wrapper's offset to its last inner offset
    plain = LegacyRecordBatchBuilder(magic=0, compression_type=0, batch_size=1 << 20)
    plain.append(0, timestamp=None, key=b"k", value=b"v")
    message = bytearray(plain.build())
    struct.pack_into(">q", message, 0, 4)
    data = bytes(wrapper) + bytes(message)
    rows = batch_headers(data, verify_crc=True).to_pylist()
    assert [(r["magic"], r["base_offset"], r["records_count"], r["compression"]) for r in rows] == [
        (1, 3, 1, "gzip"), (0, 4, 1, "none")
    ]
    assert sum(len(b) for b in iter_batches(data)) == 5  # what only decoding tells


def test_an_empty_input_is_an_empty_table_with_the_schema() -> None:
    table = batch_headers(b"")
    assert table.num_rows == 0
    assert table.column_names[:5] == ["batch_position", "batch_size", "base_offset", "last_offset", "partition_leader_epoch"]
    assert len(_core.scan_headers(b"")) == 0

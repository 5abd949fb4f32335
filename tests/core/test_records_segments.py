"""Decode every real Kafka file in shared/kafka-segments and compare every field with the
independent decodes in expected/*.json (kafka-python, cross-checked)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
from pathlib import Path

import pyarrow as pa
import pytest

from epochguard.errors import CorruptRecordError
from epochguard.records import PARTIAL_TAIL_METADATA_KEY, batch_index, decode_to_arrow, iter_batches


def find_segments() -> Path:
    """shared/kafka-segments: $EPOCHGUARD_KAFKA_SEGMENTS, beside or inside the checkout, or /work/shared."""
    repo = Path(__file__).resolve().parents[2]
    candidates = [os.environ.get("EPOCHGUARD_KAFKA_SEGMENTS", ""), repo.parent / "shared", repo / "shared", "/work/shared"]
    for c in candidates:
        if c and (Path(c) / "kafka-segments" / "expected").is_dir():
            return Path(c) / "kafka-segments"
        if c and (Path(c) / "expected").is_dir():
            return Path(c)
    return Path("/work/shared/kafka-segments")


SEGMENTS = find_segments()
EXPECTED = sorted((SEGMENTS / "expected").glob("*.json")) if SEGMENTS.exists() else []
TIMESTAMP_TYPES = {"create_time": 0, "log_append_time": 1, None: -1}

pytestmark = pytest.mark.skipif(not EXPECTED, reason="shared/kafka-segments not present")


def load(path: Path) -> tuple[dict, Path]:
    expected = json.loads(path.read_text())
    return expected, SEGMENTS / expected["description"]


def bytes_field(record: dict, name: str) -> bytes | None:
    """The expected bytes (or None), checked against the recorded length and digest."""
    length = record[f"{name}_len"]
    if length < 0:
        return None
    if record.get(f"{name}_omitted"):
        return None  # compared by digest only
    data = base64.b64decode(record[name])
    assert len(data) == length
    return data


def assert_bytes_match(actual: bytes | None, record: dict, name: str) -> None:
    length = record[f"{name}_len"]
    if length < 0:
        assert actual is None
        return
    assert actual is not None and len(actual) == length
    if f"{name}_sha256" in record:
        assert hashlib.sha256(actual).hexdigest() == record[f"{name}_sha256"]
    expected = bytes_field(record, name)
    if expected is not None:
        assert actual == expected


def assert_batch_matches(batch, exp: dict) -> None:
    assert batch.file_position == exp["file_position"]
    assert batch.size_in_bytes == exp["size_in_bytes"]
    assert batch.base_offset == exp["base_offset"]
    assert batch.magic == exp["magic"]
    assert batch.crc == exp["crc"]
    assert batch.attributes == exp["attributes"]
    assert batch.compression == exp["compression"]
    assert batch.timestamp_type == TIMESTAMP_TYPES[exp["timestamp_type"]]
    records = batch.records()
    assert len(records) == len(exp["records"]) == batch.records_count == len(batch)
    if exp["magic"] == 2:
        for name in (
            "batch_length", "partition_leader_epoch", "last_offset_delta", "base_timestamp", "max_timestamp",
            "producer_id", "producer_epoch", "base_sequence", "records_count", "has_delete_horizon",
        ):
            assert getattr(batch, name) == exp[name], name
        assert batch.is_transactional == exp["transactional"]
        assert batch.is_control == exp["control"]
    else:
        assert batch.partition_leader_epoch == -1
        assert batch.producer_id == -1 and batch.producer_epoch == -1 and batch.base_sequence == -1
        assert batch.batch_length == exp["size_in_bytes"] - 12
        ts = exp["timestamp"]
        assert batch.base_timestamp == batch.max_timestamp == (-1 if ts is None else ts)
        assert not batch.is_transactional and not batch.is_control
    for rec, er in zip(records, exp["records"], strict=True):
        assert rec.offset == er["offset"]
        assert rec.timestamp == (-1 if er["timestamp"] is None else er["timestamp"])
        assert_bytes_match(rec.key, er, "key")
        assert_bytes_match(rec.value, er, "value")
        expected_headers = [(k, None if v is None else base64.b64decode(v)) for k, v in er["headers"]]
        assert rec.headers == expected_headers
        if "control" in er:
            assert rec.key is not None
            assert struct.unpack(">hh", rec.key[:4]) == (er["control"]["version"], er["control"]["type"])


def expected_rows(exp: dict) -> list[tuple]:
    rows = []
    for b in exp["batches"]:
        for r in b["records"]:
            rows.append(
                (
                    r["offset"],
                    -1 if r["timestamp"] is None else r["timestamp"],
                    TIMESTAMP_TYPES[b["timestamp_type"]],
                    b.get("partition_leader_epoch", -1),
                    b["base_offset"],
                    b.get("producer_id", -1),
                    b.get("producer_epoch", -1),
                    b.get("control", False),
                    b.get("transactional", False),
                    b["magic"],
                )
            )
    return rows


@pytest.mark.parametrize("path", EXPECTED, ids=lambda p: p.stem)
def test_iter_batches_matches_expected(path: Path) -> None:
    exp, data_file = load(path)
    crc_ok = all(b["crc_valid"] and all(r.get("crc_valid", True) for r in b["records"]) for b in exp["batches"])
    if not crc_ok:
        with pytest.raises(CorruptRecordError) as info:
            list(iter_batches(data_file))
        bad = next(b for b in exp["batches"] if not b["crc_valid"])
        assert info.value.position == bad["file_position"]
        assert "CRC" in info.value.reason
    batches = list(iter_batches(data_file, verify_crc=crc_ok))
    assert len(batches) == exp["batch_count"]
    assert sum(len(b) for b in batches) == exp["record_count"]
    for batch, eb in zip(batches, exp["batches"], strict=True):
        assert_batch_matches(batch, eb)


@pytest.mark.parametrize("path", EXPECTED, ids=lambda p: p.stem)
def test_decode_to_arrow_matches_expected(path: Path) -> None:
    exp, data_file = load(path)
    crc_ok = all(b["crc_valid"] for b in exp["batches"])
    table = decode_to_arrow(data_file, verify_crc=crc_ok)
    assert table.num_rows == exp["record_count"]
    cols = table.to_pydict()
    actual = list(
        zip(
            cols["offset"], cols["timestamp"], cols["timestamp_type"], cols["leader_epoch"], cols["batch_offset"],
            cols["producer_id"], cols["producer_epoch"], cols["is_control"], cols["is_transactional"], cols["magic"],
            strict=True,
        )
    )
    assert actual == expected_rows(exp)
    records = [r for b in exp["batches"] for r in b["records"]]
    for key, value, headers, er in zip(cols["key"], cols["value"], cols["headers"], records, strict=True):
        assert_bytes_match(key, er, "key")
        assert_bytes_match(value, er, "value")
        assert [(h["key"], h["value"]) for h in headers] == [
            (k, None if v is None else base64.b64decode(v)) for k, v in er["headers"]
        ]
    # Same bytes through the buffer protocol (pyarrow.Buffer) and from a file range.
    raw = data_file.read_bytes()
    assert decode_to_arrow(pa.py_buffer(raw), verify_crc=crc_ok).equals(table)
    assert decode_to_arrow(memoryview(raw), verify_crc=crc_ok).equals(table)


@pytest.mark.parametrize("path", EXPECTED, ids=lambda p: p.stem)
def test_batch_index_and_ranges(path: Path) -> None:
    exp, data_file = load(path)
    index = batch_index(data_file)
    assert [(p, s, o) for p, s, o, _ in index] == [
        (b["file_position"], b["size_in_bytes"], b["base_offset"]) for b in exp["batches"]
    ]
    for (_, _, base, last), b in zip(index, exp["batches"], strict=True):
        assert last == base + b.get("last_offset_delta", 0)
    if len(index) < 2:
        return
    # Decode the second half as a byte range: positions and offsets come out absolute.
    start = index[len(index) // 2][0]
    crc_ok = all(b["crc_valid"] for b in exp["batches"])
    tail = list(iter_batches(data_file, offset=start, verify_crc=crc_ok))
    assert [b.file_position for b in tail] == [p for p, *_ in index[len(index) // 2 :]]
    whole = decode_to_arrow(data_file, verify_crc=crc_ok)
    part = decode_to_arrow(data_file, offset=start, length=exp["size"] - start, verify_crc=crc_ok)
    assert part.column("offset").to_pylist() == whole.column("offset").to_pylist()[whole.num_rows - part.num_rows :]


def test_active_segment_tail_is_reported_not_fatal(tmp_path: Path) -> None:
    _, data_file = load(SEGMENTS / "expected" / "kafka-starter-windows_test-0_00000000000000000000.log.json")
    raw = data_file.read_bytes()
    index = batch_index(raw)
    cut = index[-1][0] + 30  # in the middle of the last batch's header
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(raw[:cut])
    with pytest.raises(CorruptRecordError) as info:
        list(iter_batches(segment))
    assert info.value.position == index[-1][0]
    it = iter_batches(segment, allow_partial_tail=True)
    assert len(list(it)) == len(index) - 1
    assert it.partial_tail == index[-1][0]
    table = decode_to_arrow(segment, allow_partial_tail=True)
    assert table.schema.metadata[PARTIAL_TAIL_METADATA_KEY] == str(index[-1][0]).encode()
    assert decode_to_arrow(raw).num_rows - table.num_rows == index[-1][3] - index[-1][2] + 1

"""Cross-checks against kafka-python's record code: batches its builders write decode to exactly
what was put in (every codec, magic 0/1/2), and batches we encode decode with its reader."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords
from kafka_batches import Rec, fix_v2_crc, kafka_python_legacy, kafka_python_v2, xxh32

from epochguard.records import decode_to_arrow, encode_batch, iter_batches

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

# Repetitive values so that kafka-python keeps the compressed form (it falls back to none otherwise).
SAMPLE = [
    Rec(b"key-0", b"value " * 40, [("trace", b"abc"), ("trace", None), ("empty", b"")], 1_700_000_000_000),
    Rec(None, b"value " * 41, [], 1_700_000_000_005),
    Rec(b"", None, [("h", b"x" * 300)], 1_699_999_999_990),
    Rec(b"key-3", b"", [], 1_700_000_000_001),
] + [Rec(f"k{i}".encode(), b"payload " * 20 + bytes([i]), [], 1_700_000_000_100 + i) for i in range(60)]


@pytest.mark.parametrize("codec", CODECS)
def test_v2_from_kafka_python_every_field(codec: str) -> None:
    data = kafka_python_v2(
        SAMPLE,
        compression=codec,
        base_offset=1000,
        partition_leader_epoch=7,
        producer_id=4242,
        producer_epoch=3,
        base_sequence=2_147_483_640,  # wraps past i32::MAX inside the batch
        is_transactional=True,
    )
    (batch,) = list(iter_batches(data))
    assert batch.compression == codec and batch.attributes & 0x07 == CODECS.index(codec)
    assert batch.base_offset == 1000 and batch.last_offset == 1000 + len(SAMPLE) - 1
    assert batch.next_offset == 1000 + len(SAMPLE)
    assert batch.partition_leader_epoch == 7 and batch.magic == 2
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 3, 2_147_483_640)
    assert batch.is_transactional and not batch.is_control and batch.timestamp_type == 0
    assert batch.base_timestamp == SAMPLE[0].timestamp
    assert batch.max_timestamp == max(r.timestamp for r in SAMPLE)
    assert batch.records_count == len(SAMPLE) and batch.last_offset_delta == len(SAMPLE) - 1
    assert batch.size_in_bytes == len(data) == batch.batch_length + 12

    # kafka-python's own reader agrees on the header.
    kp = MemoryRecords(data).next_batch()
    assert kp.crc == batch.crc and kp.validate_crc()
    assert (kp.producer_id, kp.producer_epoch, kp.base_sequence) == (4242, 3, 2_147_483_640)

    records = batch.records()
    for i, (rec, want) in enumerate(zip(records, SAMPLE, strict=True)):
        assert rec.offset == 1000 + i and rec.offset_delta == i
        assert rec.timestamp == want.timestamp
        assert rec.timestamp_delta == want.timestamp - SAMPLE[0].timestamp
        assert (rec.key, rec.value) == (want.key, want.value)
        assert rec.headers == want.headers
        assert rec.attributes == 0

    table = decode_to_arrow(data)
    cols = table.to_pydict()
    assert cols["offset"] == list(range(1000, 1000 + len(SAMPLE)))
    assert cols["key"] == [r.key for r in SAMPLE] and cols["value"] == [r.value for r in SAMPLE]
    assert cols["timestamp"] == [r.timestamp for r in SAMPLE]
    assert [[(h["key"], h["value"]) for h in hs] for hs in cols["headers"]] == [r.headers for r in SAMPLE]
    expected_seq = [(2_147_483_640 + i) if 2_147_483_640 + i <= 2**31 - 1 else i - 8 for i in range(len(SAMPLE))]
    assert cols["sequence"] == expected_seq
    assert set(cols["leader_epoch"]) == {7} and set(cols["batch_offset"]) == {1000}
    assert set(cols["producer_id"]) == {4242} and set(cols["producer_epoch"]) == {3}
    assert set(cols["is_transactional"]) == {True} and set(cols["is_control"]) == {False}
    assert set(cols["magic"]) == {2} and set(cols["timestamp_type"]) == {0}


def test_log_append_time_uses_batch_max_timestamp() -> None:
    data = bytearray(kafka_python_v2(SAMPLE[:3], base_offset=5))
    attributes = struct.unpack_from(">h", data, 21)[0] | 0x08
    struct.pack_into(">h", data, 21, attributes)
    struct.pack_into(">q", data, 35, 1_800_000_000_000)  # broker-set log append time
    data = fix_v2_crc(data)
    (batch,) = list(iter_batches(data))
    assert batch.timestamp_type == 1
    assert [r.timestamp for r in batch.records()] == [1_800_000_000_000] * 3
    table = decode_to_arrow(data)
    assert table.column("timestamp").to_pylist() == [1_800_000_000_000] * 3
    assert table.column("timestamp_type").to_pylist() == [1] * 3


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_legacy_from_kafka_python_every_field(magic: int, codec: str) -> None:
    recs = [Rec(r.key, r.value, [], r.timestamp) for r in SAMPLE[:20]]
    data = kafka_python_legacy(magic, recs, compression=codec, first_offset=500)
    batches = list(iter_batches(data))
    if codec == "none":
        assert len(batches) == len(recs)
    else:
        assert len(batches) == 1
        (wrapper,) = batches
        assert wrapper.compression == codec and wrapper.base_offset == 500 + len(recs) - 1
        assert wrapper.records_count == len(recs) and wrapper.last_offset == 500 + len(recs) - 1
    records = [r for b in batches for r in b.records()]
    assert [r.offset for r in records] == list(range(500, 500 + len(recs)))
    assert [(r.key, r.value) for r in records] == [(r.key, r.value) for r in recs]
    if magic == 0:
        assert all(r.timestamp == -1 for r in records)
        assert all(b.timestamp_type == -1 for b in batches)
    else:
        assert [r.timestamp for r in records] == [r.timestamp for r in recs]
        assert all(b.timestamp_type == 0 for b in batches)
    assert all(b.magic == magic and b.partition_leader_epoch == -1 for b in batches)
    assert all(r.headers == [] for r in records)

    # kafka-python reads the same offsets (its own decoder, independent of ours).
    mr = MemoryRecords(data)
    kp_offsets = []
    while (kb := mr.next_batch()) is not None:
        kp_offsets.extend(r.offset for r in kb)
    assert kp_offsets == [r.offset for r in records]

    table = decode_to_arrow(data)
    assert table.column("offset").to_pylist() == list(range(500, 500 + len(recs)))
    assert table.column("leader_epoch").to_pylist() == [-1] * len(recs)
    assert table.column("magic").to_pylist() == [magic] * len(recs)
    assert table.column("value").to_pylist() == [r.value for r in recs]


def test_legacy_magic0_lz4_has_kafka_08_header_checksum() -> None:
    """kafka-python writes magic-0 LZ4 with Kafka 0.8's wrong descriptor checksum; we must accept it."""
    data = kafka_python_legacy(0, SAMPLE[:10], compression="lz4")
    value_at = 12 + 4 + 1 + 1 + 4 + 4  # offset+size, crc, magic, attributes, key len (-1), value len
    frame = data[value_at:]
    assert frame[:4] == b"\x04\x22\x4d\x18"
    assert frame[6] == (xxh32(frame[:6]) >> 8) & 0xFF  # hashed over the magic too: the 0.8 bug
    assert frame[6] != (xxh32(frame[4:6]) >> 8) & 0xFF
    (batch,) = list(iter_batches(data))
    assert [r.value for r in batch.records()] == [r.value for r in SAMPLE[:10]]


def kafka_python_decode(data: bytes) -> list[dict]:
    out = []
    mr = MemoryRecords(data)
    while (batch := mr.next_batch()) is not None:
        assert batch.validate_crc()
        for r in batch:
            out.append(
                {
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "key": r.key,
                    "value": r.value,
                    "headers": list(r.headers),
                    "epoch": batch.leader_epoch,
                    "producer": (batch.producer_id, batch.producer_epoch, batch.base_sequence),
                    "flags": (batch.is_transactional, batch.is_control_batch, batch.timestamp_type),
                }
            )
    return out


header_values = st.one_of(st.none(), st.binary(max_size=20))
records_strategy = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=40)),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.lists(st.tuples(st.text(max_size=8), header_values), max_size=4),
        st.one_of(st.none(), st.integers(0, 2**41)),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=records_strategy,
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 2**40),
    epoch=st.integers(-1, 2**31 - 1),
    producer=st.one_of(
        st.just((-1, -1, -1)), st.tuples(st.integers(0, 2**40), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1))
    ),
    transactional=st.booleans(),
    control=st.booleans(),
    log_append=st.booleans(),
    base_timestamp=st.one_of(st.none(), st.integers(0, 2**41)),
)
def test_encode_round_trips_and_kafka_python_agrees(
    records, codec, base_offset, epoch, producer, transactional, control, log_append, base_timestamp
) -> None:
    pid, pepoch, seq = producer
    if control:  # control records need a (version, type) key for kafka-python to read them
        records = [(struct.pack(">hh", 0, i % 2), v, h, ts) for i, (_, v, h, ts) in enumerate(records)]
    data = encode_batch(
        records,
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        compression=codec,
        timestamp_type=int(log_append),
        base_timestamp=base_timestamp,
        producer_id=pid,
        producer_epoch=pepoch,
        base_sequence=seq,
        is_transactional=transactional,
        is_control=control,
    )
    base_ts = base_timestamp if base_timestamp is not None else next((r[3] for r in records if r[3] is not None), -1)
    timestamps = [r[3] if r[3] is not None else base_ts for r in records]
    effective = [max(timestamps)] * len(records) if log_append else timestamps

    (batch,) = list(iter_batches(data))
    assert batch.compression == codec and batch.partition_leader_epoch == epoch
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == producer
    assert (batch.is_transactional, batch.is_control, batch.timestamp_type) == (transactional, control, int(log_append))
    assert batch.base_timestamp == base_ts and batch.max_timestamp == max(timestamps)
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()]
    want = [
        (base_offset + i, ts, k, v, list(h)) for i, ((k, v, h, _), ts) in enumerate(zip(records, effective, strict=True))
    ]
    assert got == want

    theirs = kafka_python_decode(data)
    assert [(r["offset"], r["timestamp"], r["key"], r["value"], r["headers"]) for r in theirs] == want
    assert {r["epoch"] for r in theirs} == {epoch}
    assert {r["producer"] for r in theirs} == {producer}
    assert {r["flags"] for r in theirs} == {(transactional, control, int(log_append))}

    cols = decode_to_arrow(data).to_pydict()
    assert cols["offset"] == [w[0] for w in want] and cols["value"] == [w[3] for w in want]
    assert [[(h["key"], h["value"]) for h in hs] for hs in cols["headers"]] == [w[4] for w in want]


def test_encode_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch([])
    with pytest.raises(ValueError, match="compression"):
        encode_batch([(None, b"x")], compression="brotli")
    with pytest.raises(ValueError, match="timestamp_type"):
        encode_batch([(None, b"x")], timestamp_type=2)
    with pytest.raises(ValueError):
        encode_batch([(None,)])
    with pytest.raises(TypeError):
        encode_batch([(None, "not bytes")])

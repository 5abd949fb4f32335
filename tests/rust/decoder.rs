//! The record-batch decoder field by field, against Kafka's formats: zigzag varints (Kafka's
//! ByteUtilsTest vectors), the v2 `DefaultRecordBatch` header and `DefaultRecord` framing, and the
//! legacy magic 0/1 messages and compressed wrappers (`AbstractLegacyRecordBatch`). Batches are
//! built here byte by byte, not with the crate's encoder, so each test pins the layout itself and
//! the exact position and reason of every rejection.

// Tests and fixtures are trusted input: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use _core::records::batch::{verify_crc, BatchCursor, BatchHeader};
use _core::records::compression::compress;
use _core::records::varint::{
    read_varint, read_varlong, varint_size, write_varint, write_varlong, VarintError,
};
use _core::records::{
    decode_batches, Compression, DecodeOptions, DecodedBatch, Decoder, OwnedRecord, RecordSink,
    RecordView,
};
use _core::Error;

// ---- builders ----------------------------------------------------------------------------------

/// A v2 batch's header fields and records payload, written in `DefaultRecordBatch`'s layout.
#[derive(Clone)]
struct V2 {
    base_offset: i64,
    leader_epoch: i32,
    attributes: i16,
    last_offset_delta: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    count: i32,
    records: Vec<u8>,
}

impl V2 {
    fn new(records: &[Vec<u8>]) -> Self {
        V2 {
            base_offset: 100,
            leader_epoch: 7,
            attributes: 0,
            last_offset_delta: records.len() as i32 - 1,
            base_timestamp: 1_000,
            max_timestamp: 1_005,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            count: records.len() as i32,
            records: records.concat(),
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&self.base_offset.to_be_bytes());
        b.extend_from_slice(&(49 + self.records.len() as i32).to_be_bytes());
        b.extend_from_slice(&self.leader_epoch.to_be_bytes());
        b.push(2);
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&self.attributes.to_be_bytes());
        b.extend_from_slice(&self.last_offset_delta.to_be_bytes());
        b.extend_from_slice(&self.base_timestamp.to_be_bytes());
        b.extend_from_slice(&self.max_timestamp.to_be_bytes());
        b.extend_from_slice(&self.producer_id.to_be_bytes());
        b.extend_from_slice(&self.producer_epoch.to_be_bytes());
        b.extend_from_slice(&self.base_sequence.to_be_bytes());
        b.extend_from_slice(&self.count.to_be_bytes());
        b.extend_from_slice(&self.records);
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }
}

fn varint(v: i32) -> Vec<u8> {
    let mut out = Vec::new();
    write_varint(&mut out, v);
    out
}

fn sized(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => write_varint(out, -1),
        Some(b) => {
            write_varint(out, b.len() as i32);
            out.extend_from_slice(b);
        }
    }
}

type RawHeader<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// The body of a v2 record after its length (`DefaultRecord.writeTo`).
fn record_body(
    attributes: u8,
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[RawHeader<'_>],
) -> Vec<u8> {
    let mut body = vec![attributes];
    write_varlong(&mut body, timestamp_delta);
    write_varint(&mut body, offset_delta);
    sized(&mut body, key);
    sized(&mut body, value);
    write_varint(&mut body, headers.len() as i32);
    for &(k, v) in headers {
        sized(&mut body, k);
        sized(&mut body, v);
    }
    body
}

/// A body with its varint length in front.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = varint(body.len() as i32);
    out.extend_from_slice(body);
    out
}

fn plain(offset_delta: i32, value: &[u8]) -> Vec<u8> {
    framed(&record_body(0, 0, offset_delta, None, Some(value), &[]))
}

/// One legacy message: `[offset][size][crc][magic][attributes][timestamp (magic 1)][key][value]`,
/// CRC-32 from the magic byte on.
fn legacy(
    offset: i64,
    magic: u8,
    attributes: u8,
    timestamp: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Vec<u8> {
    let mut body = vec![magic, attributes];
    if magic == 1 {
        body.extend_from_slice(&timestamp.to_be_bytes());
    }
    for field in [key, value] {
        match field {
            None => body.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(b) => {
                body.extend_from_slice(&(b.len() as i32).to_be_bytes());
                body.extend_from_slice(b);
            }
        }
    }
    let mut out = offset.to_be_bytes().to_vec();
    out.extend_from_slice(&(4 + body.len() as i32).to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Recompute a hand-edited legacy message's CRC.
fn recrc(message: &mut [u8]) {
    let crc = crc32fast::hash(&message[16..]);
    message[12..16].copy_from_slice(&crc.to_be_bytes());
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// A gzip wrapper message (attributes codec 1, plus `extra` attribute bits) around `inner`.
fn gzip_wrapper(offset: i64, magic: u8, extra: u8, timestamp: i64, inner: &[Vec<u8>]) -> Vec<u8> {
    legacy(
        offset,
        magic,
        1 | extra,
        timestamp,
        None,
        Some(&gzip(&inner.concat())),
    )
}

fn header_at(data: &[u8], base_position: u64) -> BatchHeader {
    BatchCursor::new(data, base_position, false)
        .next()
        .unwrap()
        .unwrap()
        .header
}

fn decode(data: &[u8]) -> Vec<DecodedBatch> {
    decode_batches(data, 0, DecodeOptions::default()).unwrap().0
}

fn records(data: &[u8]) -> Vec<OwnedRecord> {
    decode(data).into_iter().flat_map(|b| b.records).collect()
}

/// The (position, reason) of a `Corrupt` error.
fn corrupt<T: std::fmt::Debug>(result: _core::Result<T>) -> (u64, String) {
    match result {
        Err(Error::Corrupt { position, reason }) => (position, reason),
        other => panic!("expected a Corrupt error, got {other:?}"),
    }
}

fn decode_err(data: &[u8], base_position: u64) -> (u64, String) {
    corrupt(decode_batches(
        data,
        base_position,
        DecodeOptions::default(),
    ))
}

fn assert_rejected(data: &[u8], position: u64, reason: &str) {
    let (at, why) = decode_err(data, 0);
    assert!(why.contains(reason), "{why:?} does not say {reason:?}");
    assert_eq!(at, position, "{why}");
}

// ---- varints -----------------------------------------------------------------------------------

const VARINTS: &[(i32, &[u8])] = &[
    (0, &[0x00]),
    (-1, &[0x01]),
    (1, &[0x02]),
    (63, &[0x7e]),
    (-64, &[0x7f]),
    (64, &[0x80, 0x01]),
    (-65, &[0x81, 0x01]),
    (8191, &[0xfe, 0x7f]),
    (-8192, &[0xff, 0x7f]),
    (8192, &[0x80, 0x80, 0x01]),
    (-8193, &[0x81, 0x80, 0x01]),
    (1048575, &[0xfe, 0xff, 0x7f]),
    (1048576, &[0x80, 0x80, 0x80, 0x01]),
    (134217727, &[0xfe, 0xff, 0xff, 0x7f]),
    (134217728, &[0x80, 0x80, 0x80, 0x80, 0x01]),
    (-134217729, &[0x81, 0x80, 0x80, 0x80, 0x01]),
    (i32::MAX, &[0xfe, 0xff, 0xff, 0xff, 0x0f]),
    (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
];

const VARLONGS: &[(i64, &[u8])] = &[
    (0, &[0x00]),
    (-1, &[0x01]),
    (64, &[0x80, 0x01]),
    (17179869184, &[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),
    (-17179869185, &[0x81, 0x80, 0x80, 0x80, 0x80, 0x01]),
    (
        36028797018963968,
        &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
    ),
    (
        i64::MAX,
        &[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
    ),
    (
        i64::MIN,
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
    ),
];

#[test]
fn varints_are_kafkas_zigzag_encoding() {
    for &(value, bytes) in VARINTS {
        assert_eq!(varint(value), bytes, "write {value}");
        assert_eq!(varint_size(value), bytes.len(), "size of {value}");
        // Reading stops at the varint's last byte and leaves what follows.
        let input = [bytes, &[0x2a]].concat();
        let mut rest = input.as_slice();
        assert_eq!(read_varint(&mut rest), Ok(value), "read {bytes:x?}");
        assert_eq!(rest, [0x2a]);
    }
    for &(value, bytes) in VARLONGS {
        let mut out = Vec::new();
        write_varlong(&mut out, value);
        assert_eq!(out, bytes, "write {value}");
        let input = [bytes, &[0x2a]].concat();
        let mut rest = input.as_slice();
        assert_eq!(read_varlong(&mut rest), Ok(value), "read {bytes:x?}");
        assert_eq!(rest, [0x2a]);
    }
}

#[test]
fn varint_with_too_many_continuation_bytes_is_too_long_not_truncated() {
    let read = |bytes: &[u8]| read_varint(&mut { bytes });
    let read_long = |bytes: &[u8]| read_varlong(&mut { bytes });
    // Kafka's testInvalidVarint/testInvalidVarlong: one byte more than the type allows.
    assert_eq!(
        read(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
        Err(VarintError::TooLong)
    );
    assert_eq!(read_long(&[0xff; 11]), Err(VarintError::TooLong));
    // Input ending after the allowed number of continuation bytes is too long, not truncated.
    assert_eq!(read(&[0x80; 5]), Err(VarintError::TooLong));
    assert_eq!(read(&[0x80; 4]), Err(VarintError::Truncated));
    assert_eq!(read_long(&[0x80; 10]), Err(VarintError::TooLong));
    assert_eq!(read_long(&[0x80; 9]), Err(VarintError::Truncated));
    assert_eq!(read(&[]), Err(VarintError::Truncated));
    assert_eq!(read_long(&[]), Err(VarintError::Truncated));
    // Like Java's readVarint, bits past 32 in the fifth byte are dropped.
    assert_eq!(read(&[0xfe, 0xff, 0xff, 0xff, 0x7f]), Ok(i32::MAX));
    assert_eq!(
        VarintError::Truncated.reason("key"),
        "key: input ends inside a varint"
    );
    assert_eq!(
        VarintError::TooLong.reason("key"),
        "key: varint is longer than allowed"
    );
}

// ---- v2 batch header ---------------------------------------------------------------------------

fn distinct_v2() -> V2 {
    V2 {
        base_offset: 0x0102_0304_0506_0708,
        leader_epoch: 0x0a0b_0c0d,
        attributes: 0x0010,
        last_offset_delta: 0,
        base_timestamp: 0x1112_1314_1516_1718,
        max_timestamp: 0x2122_2324_2526_2728,
        producer_id: 0x3132_3334_3536_3738,
        producer_epoch: 0x4142,
        base_sequence: 0x5152_5354,
        ..V2::new(&[plain(0, b"v")])
    }
}

#[test]
fn v2_header_fields_are_read_from_kafkas_offsets() {
    let v2 = distinct_v2();
    let bytes = v2.bytes();
    let h = header_at(&bytes, 1_000);
    let crc = u32::from_be_bytes(bytes[17..21].try_into().unwrap());
    assert_eq!(
        h,
        BatchHeader {
            file_position: 1_000,
            size_in_bytes: bytes.len() as u32,
            base_offset: v2.base_offset,
            batch_length: bytes.len() as i32 - 12,
            partition_leader_epoch: v2.leader_epoch,
            magic: 2,
            crc,
            attributes: 0x0010,
            last_offset_delta: 0,
            base_timestamp: v2.base_timestamp,
            max_timestamp: v2.max_timestamp,
            producer_id: v2.producer_id,
            producer_epoch: v2.producer_epoch,
            base_sequence: v2.base_sequence,
            records_count: 1,
        }
    );
    assert_eq!(h.last_offset(), v2.base_offset);
    assert_eq!(h.next_offset(), v2.base_offset + 1);
}

#[test]
fn attribute_bits_are_kafkas_and_v2_only() {
    let with = |attributes: i16| {
        header_at(
            &V2 {
                attributes,
                ..V2::new(&[plain(0, b"v")])
            }
            .bytes(),
            0,
        )
    };
    let flags = |h: BatchHeader| {
        (
            h.timestamp_type(),
            h.is_transactional(),
            h.is_control(),
            h.has_delete_horizon(),
        )
    };
    assert_eq!(flags(with(0)), (0, false, false, false));
    assert_eq!(flags(with(0x08)), (1, false, false, false));
    assert_eq!(flags(with(0x10)), (0, true, false, false));
    assert_eq!(flags(with(0x20)), (0, false, true, false));
    assert_eq!(flags(with(0x40)), (0, false, false, true));
    assert_eq!(flags(with(0x7f & !0x07)), (1, true, true, true));
    // Legacy messages: the timestamp type bit exists from magic 1 on, the rest only in v2.
    let m1 = legacy(5, 1, 0x78, 9, None, Some(b"v"));
    assert_eq!(flags(header_at(&m1, 0)), (1, false, false, false));
    let m1 = legacy(5, 1, 0x00, 9, None, Some(b"v"));
    assert_eq!(flags(header_at(&m1, 0)), (0, false, false, false));
    let m0 = legacy(5, 0, 0x78, -1, None, Some(b"v"));
    assert_eq!(flags(header_at(&m0, 0)), (-1, false, false, false));
}

#[test]
fn sequence_numbers_wrap_at_i32_max_like_kafka() {
    let with = |base_sequence: i32| BatchHeader {
        base_sequence,
        ..header_at(&V2::new(&[plain(0, b"v")]).bytes(), 0)
    };
    // Kafka's buildDefaultRecordBatchWithSequenceWrapAround: MAX - 1, MAX, then 0.
    let h = with(i32::MAX - 1);
    assert_eq!(
        [h.sequence_at(0), h.sequence_at(1), h.sequence_at(2)],
        [i32::MAX - 1, i32::MAX, 0]
    );
    assert_eq!(with(i32::MAX).sequence_at(3), 2);
    assert_eq!(with(983).sequence_at(1), 984);
    assert_eq!(with(0).sequence_at(0), 0);
    assert_eq!(with(-1).sequence_at(4), -1);
}

#[test]
fn cursor_cuts_batches_and_reports_absolute_positions() {
    let a = V2::new(&[plain(0, b"a")]).bytes();
    let b = legacy(9, 1, 0, 5, None, Some(b"bb"));
    let data = [a.clone(), b.clone()].concat();
    let mut cursor = BatchCursor::new(&data, 500, false);
    assert_eq!(cursor.position(), 500);
    let first = cursor.next().unwrap().unwrap();
    assert_eq!(
        (first.header.file_position, first.bytes),
        (500, a.as_slice())
    );
    assert_eq!(cursor.position(), 500 + a.len() as u64);
    let second = cursor.next().unwrap().unwrap();
    assert_eq!(second.header.file_position, 500 + a.len() as u64);
    assert_eq!(second.header.size_in_bytes, b.len() as u32);
    assert!(cursor.next().unwrap().is_none());
    assert_eq!(cursor.partial_tail(), None);
    assert_eq!(cursor.position(), 500 + data.len() as u64);
}

#[test]
fn incomplete_last_batch_is_a_partial_tail_or_an_error_at_its_start() {
    let a = V2::new(&[plain(0, b"a")]).bytes();
    // Cut inside the second batch's LOG_OVERHEAD, and inside its body.
    for cut in [5, a.len() - 1] {
        let data = [a.as_slice(), &a[..cut]].concat();
        let tail = 40 + a.len() as u64;
        let mut cursor = BatchCursor::new(&data, 40, true);
        assert!(cursor.next().unwrap().is_some());
        assert!(cursor.next().unwrap().is_none());
        assert_eq!(cursor.partial_tail(), Some(tail));
        assert_eq!(cursor.position(), 40 + data.len() as u64);
        let (at, why) = corrupt(BatchCursor::new(&data, 40, false).nth_batch(1));
        assert_eq!(at, tail, "{why}");
        assert!(why.contains("partial batch at the end"), "{why}");
    }
}

/// `nth_batch(n)`: the n-th batch's outcome (earlier ones must succeed).
trait NthBatch {
    fn nth_batch(&mut self, n: usize) -> _core::Result<Option<BatchHeader>>;
}

impl NthBatch for BatchCursor<'_> {
    fn nth_batch(&mut self, n: usize) -> _core::Result<Option<BatchHeader>> {
        for _ in 0..n {
            self.next().unwrap();
        }
        self.next().map(|f| f.map(|f| f.header))
    }
}

#[test]
fn batch_lengths_below_the_smallest_message_are_rejected() {
    // 14 bytes after the length is the smallest magic 0 message: one byte less is corrupt.
    let m0 = legacy(3, 0, 0, -1, None, None);
    assert_eq!(m0.len(), 12 + 14);
    assert_eq!(records(&m0).len(), 1);
    let mut short = m0.clone();
    short[8..12].copy_from_slice(&13i32.to_be_bytes());
    assert_rejected(&short, 0, "smaller than the smallest batch (14)");
    // Magic 1 needs 22 (its timestamp): a magic 1 message claiming 21 bytes is corrupt.
    let mut m1 = m0.clone();
    m1[16] = 1;
    m1[8..12].copy_from_slice(&21i32.to_be_bytes());
    m1.resize(12 + 21, 0);
    assert_rejected(
        &m1,
        0,
        "magic 1 message size 21 is smaller than the minimum (22)",
    );
    // A v2 batch needs its 49 header bytes after the length.
    let mut v2 = V2::new(&[]).bytes();
    assert_eq!(decode(&v2)[0].records, []);
    v2[8..12].copy_from_slice(&48i32.to_be_bytes());
    v2.pop();
    assert_rejected(
        &v2,
        0,
        "v2 batch length 48 is smaller than the v2 header (49)",
    );
}

#[test]
fn unknown_magic_and_codec_are_rejected_where_they_are_written() {
    let ok = V2::new(&[plain(0, b"v")]).bytes();
    let mut magic = ok.clone();
    magic[16] = 3;
    let (at, why) = decode_err(&[ok.clone(), magic].concat(), 10);
    assert_eq!(at, 10 + ok.len() as u64 + 16, "{why}");
    assert!(why.contains("unknown magic 3"), "{why}");
    for codec in [5i16, 6, 7] {
        let v2 = V2 {
            attributes: codec,
            ..V2::new(&[plain(0, b"v")])
        };
        assert_rejected(
            &v2.bytes(),
            21,
            &format!("unknown compression codec id {codec}"),
        );
        let m1 = legacy(0, 1, codec as u8, 0, None, Some(b"v"));
        assert_rejected(&m1, 17, &format!("unknown compression codec id {codec}"));
    }
    let negative = V2 {
        count: -1,
        ..V2::new(&[])
    };
    assert_rejected(&negative.bytes(), 57, "negative record count -1");
}

#[test]
fn v2_crc_covers_attributes_onwards_but_not_the_leader_epoch() {
    let bytes = V2::new(&[plain(0, b"v")]).bytes();
    let frame_of = |data: &[u8]| {
        let f = BatchCursor::new(data, 0, false).next().unwrap().unwrap();
        verify_crc(&f).map(|()| f.header.crc)
    };
    assert!(frame_of(&bytes).is_ok());
    // KIP-101: the leader stamps partitionLeaderEpoch without touching the CRC.
    let mut stamped = bytes.clone();
    stamped[12..16].copy_from_slice(&99i32.to_be_bytes());
    assert!(frame_of(&stamped).is_ok());
    assert_eq!(decode(&stamped)[0].header.partition_leader_epoch, 99);
    // The attributes (first byte covered) and the value "v" (second to last byte).
    for at in [21, bytes.len() - 2] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x01;
        let (pos, why) = corrupt(frame_of(&bad));
        assert_eq!(pos, 0);
        assert!(why.starts_with("CRC mismatch: stored 0x"), "{why}");
        let (pos, _) = decode_err(&[bytes.clone(), bad.clone()].concat(), 3);
        assert_eq!(pos, 3 + bytes.len() as u64);
        // Without verification the same bytes decode.
        let no_crc = DecodeOptions {
            verify_crc: false,
            ..DecodeOptions::default()
        };
        assert!(decode_batches(&bad, 0, no_crc).is_ok());
    }
}

#[test]
fn legacy_crc_is_crc32_from_the_magic_byte_on() {
    let m1 = legacy(77, 1, 0, 5, Some(b"k"), Some(b"v"));
    let verify =
        |data: &[u8]| verify_crc(&BatchCursor::new(data, 0, false).next().unwrap().unwrap());
    assert!(verify(&m1).is_ok());
    let mut offset_changed = m1.clone();
    offset_changed[..8].copy_from_slice(&78i64.to_be_bytes());
    assert!(verify(&offset_changed).is_ok());
    // The attributes right after the magic, and the value's last byte.
    for at in [17, m1.len() - 1] {
        let mut bad = m1.clone();
        bad[at] ^= 0x08;
        assert!(matches!(
            verify(&bad),
            Err(Error::Corrupt { position: 0, .. })
        ));
    }
}

// ---- v2 records --------------------------------------------------------------------------------

/// Keeps what `OwnedRecord` drops: each record's key/value/headers bytes as written.
#[derive(Default)]
struct Raw(Vec<Vec<u8>>);

impl RecordSink for Raw {
    fn record(&mut self, _h: &BatchHeader, r: &RecordView<'_, '_>) -> _core::Result<()> {
        self.0
            .push(r.key_value_headers.unwrap_or_default().to_vec());
        Ok(())
    }
}

#[test]
fn v2_records_carry_offsets_timestamps_keys_values_and_headers_as_written() {
    let hdrs: [RawHeader<'_>; 3] = [
        (Some(b"h"), Some(b"1")),
        (Some(b"h"), None),
        (Some(b""), Some(b"")),
    ];
    let bodies = [
        record_body(0, 0, 0, Some(b"k"), Some(b"v"), &[]),
        record_body(0x35, 7, 2, None, Some(b""), &hdrs),
        record_body(0, -3, 5, Some(b""), None, &[]),
    ];
    let v2 = V2 {
        last_offset_delta: 5,
        ..V2::new(&bodies.iter().map(|b| framed(b)).collect::<Vec<_>>())
    };
    let recs = records(&v2.bytes());
    let owned = |h: &[RawHeader<'_>]| -> Vec<(String, Option<Vec<u8>>)> {
        h.iter()
            .map(|(k, v)| {
                (
                    String::from_utf8(k.unwrap().to_vec()).unwrap(),
                    v.map(<[u8]>::to_vec),
                )
            })
            .collect()
    };
    assert_eq!(
        recs,
        [
            OwnedRecord {
                offset: 100,
                timestamp: 1_000,
                attributes: 0,
                timestamp_delta: 0,
                offset_delta: 0,
                key: Some(b"k".to_vec()),
                value: Some(b"v".to_vec()),
                headers: vec![],
            },
            OwnedRecord {
                offset: 102,
                timestamp: 1_007,
                attributes: 0x35,
                timestamp_delta: 7,
                offset_delta: 2,
                key: None,
                value: Some(vec![]),
                headers: owned(&hdrs),
            },
            OwnedRecord {
                offset: 105,
                timestamp: 997,
                attributes: 0,
                timestamp_delta: -3,
                offset_delta: 5,
                key: Some(vec![]),
                value: None,
                headers: vec![],
            },
        ]
    );
    // The key/value/headers slice is the record from its key length to its end.
    let bytes = v2.bytes();
    let frame = BatchCursor::new(&bytes, 0, false).next().unwrap().unwrap();
    let mut raw = Raw::default();
    Decoder::new(DecodeOptions::default())
        .decode(&frame, &mut raw)
        .unwrap();
    let expected: Vec<Vec<u8>> = bodies.iter().map(|b| b[3..].to_vec()).collect();
    assert_eq!(raw.0, expected);
}

#[test]
fn log_append_time_gives_every_record_the_batch_max_timestamp() {
    let recs = [
        framed(&record_body(0, 3, 0, None, None, &[])),
        plain(1, b"v"),
    ];
    let v2 = V2 {
        attributes: 0x08,
        ..V2::new(&recs)
    };
    let ts: Vec<i64> = records(&v2.bytes()).iter().map(|r| r.timestamp).collect();
    assert_eq!(ts, [1_005, 1_005]);
    let v2 = V2::new(&recs);
    let ts: Vec<i64> = records(&v2.bytes()).iter().map(|r| r.timestamp).collect();
    assert_eq!(ts, [1_003, 1_000]);
}

#[test]
fn smallest_records_fill_the_payload_exactly() {
    // Seven bytes each (length, attributes, deltas, null key and value, no headers): the count
    // bound (7 bytes per record) admits exactly as many as the payload holds.
    let tiny: Vec<Vec<u8>> = (0..4)
        .map(|i| framed(&record_body(0, 0, i, None, None, &[])))
        .collect();
    assert!(tiny.iter().all(|r| r.len() == 7));
    let v2 = V2::new(&tiny);
    assert_eq!(records(&v2.bytes()).len(), 4);
    // One more claimed than fits in 28 bytes: rejected before decoding, at the records' start.
    let over = V2 {
        count: 5,
        ..v2.clone()
    };
    assert_rejected(
        &over.bytes(),
        61,
        "record count 5 cannot fit in 28 bytes of records",
    );
    // Kafka's testInvalidRecordCountTooLittle: fewer claimed than present leaves bytes over.
    let under = V2 { count: 3, ..v2 };
    assert_rejected(
        &under.bytes(),
        61 + 21,
        "7 bytes left after the last of 3 records",
    );
}

/// A v2 batch holding `good` then a record whose framed bytes are `bad`; the error must be at the
/// bad record's first byte (batch at 0, header 61 bytes).
fn assert_bad_record(bad: Vec<u8>, reason: &str) {
    // Long enough that the record-count bound never decides.
    let good = plain(0, &[b'o'; 20]);
    let at = 61 + good.len() as u64;
    let v2 = V2::new(&[good, bad]);
    assert_rejected(&v2.bytes(), at, reason);
}

#[test]
fn malformed_records_are_rejected_at_their_first_byte() {
    let body = record_body(0, 0, 1, None, Some(b"v"), &[]);
    assert_bad_record(varint(-2), "record 1: negative length -2");
    assert_bad_record(
        [varint(body.len() as i32 + 1), body.clone()].concat(),
        "record 1: length 8 runs past the end of the batch",
    );
    assert_bad_record(varint(0), "record 1: empty record body");
    assert_bad_record(
        framed(&[0, 0x80]),
        "record 1: timestamp delta: input ends inside a varint",
    );
    assert_bad_record(
        framed(&[0, 0, 0x80]),
        "record 1: offset delta: input ends inside a varint",
    );
    assert_bad_record(
        framed(&[0, 0, 2, 0x80]),
        "record 1: key length: input ends inside a varint",
    );
    assert_bad_record(
        framed(&[0, 0, 2, 1, 0x80]),
        "record 1: value length: input ends inside a varint",
    );
    assert_bad_record(
        framed(&[0, 0, 2, 4, b'k']),
        "record 1: key length 2 runs past the end of the record",
    );
    assert_bad_record(
        framed(&[0, 0, 2, 1, 1, 0x80]),
        "record 1: header count: input ends inside a varint",
    );
    assert_bad_record(
        framed(&[0, 0, 2, 1, 1, 3]),
        "record 1: negative header count -2",
    );
    let trailing = [body.clone(), vec![9, 9]].concat();
    assert_bad_record(
        framed(&trailing),
        "record 1: 2 bytes left in the record after its headers (length 9)",
    );
}

#[test]
fn record_headers_are_bounded_and_their_keys_checked() {
    let with_headers = |count: i32, rest: &[u8]| {
        let mut body = vec![0, 0, 2, 1, 1];
        body.extend_from_slice(&varint(count));
        body.extend_from_slice(rest);
        framed(&body)
    };
    // Two bytes per header at least: two headers in four bytes fit exactly ("" => null, twice).
    let v2 = V2::new(&[plain(0, &[b'o'; 20]), with_headers(2, &[0, 1, 0, 1])]);
    let recs = records(&v2.bytes());
    assert_eq!(
        recs[1].headers,
        [(String::new(), None), (String::new(), None)]
    );
    assert_bad_record(
        with_headers(3, &[0, 1, 0, 1, 0]),
        "record 1: 3 headers cannot fit in the record",
    );
    assert_bad_record(with_headers(1, &[1, 1]), "record 1: null header key");
    assert_bad_record(
        with_headers(1, &[2, 0xff, 1]),
        "record 1: header key is not valid UTF-8",
    );
    assert_bad_record(
        with_headers(1, &[6, b'k', 1]),
        "record 1: header key length 3 runs past the end of the record",
    );
    assert_bad_record(
        with_headers(1, &[2, b'k', 4, b'v']),
        "record 1: header value length 2 runs past the end of the record",
    );
}

#[test]
fn record_offset_past_i64_max_is_rejected() {
    // The header's last delta (0) fits; the record's own delta 5 does not.
    let v2 = V2 {
        base_offset: i64::MAX - 1,
        last_offset_delta: 0,
        ..V2::new(&[plain(5, b"v")])
    };
    assert_rejected(
        &v2.bytes(),
        61,
        "record 0: offset delta 5 overflows the base offset",
    );
}

#[test]
fn errors_inside_compressed_records_name_the_batch_and_the_payload_byte() {
    let good = plain(0, &[b'o'; 20]);
    let payload = [good.clone(), varint(-2)].concat();
    let v2 = V2 {
        attributes: 1,
        records: gzip(&payload),
        count: 2,
        ..V2::new(std::slice::from_ref(&good))
    };
    let (at, why) = decode_err(&v2.bytes(), 4_000);
    assert_eq!(at, 4_000, "{why}");
    assert_eq!(
        why,
        format!(
            "record 1: negative length -2 (at byte {} of the decompressed records)",
            good.len()
        )
    );
}

// ---- legacy messages ---------------------------------------------------------------------------

#[test]
fn legacy_header_fields_fill_v2_only_ones_with_none() {
    let m1 = legacy(42, 1, 0x08, 1_234, Some(b"k"), Some(b"v"));
    let crc = u32::from_be_bytes(m1[12..16].try_into().unwrap());
    assert_eq!(
        header_at(&m1, 9),
        BatchHeader {
            file_position: 9,
            size_in_bytes: m1.len() as u32,
            base_offset: 42,
            batch_length: m1.len() as i32 - 12,
            partition_leader_epoch: -1,
            magic: 1,
            crc,
            attributes: 0x08,
            last_offset_delta: 0,
            base_timestamp: 1_234,
            max_timestamp: 1_234,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records_count: 1,
        }
    );
    let m0 = legacy(43, 0, 0, -1, None, Some(b"v"));
    let h = header_at(&m0, 0);
    assert_eq!((h.magic, h.base_timestamp, h.max_timestamp), (0, -1, -1));
}

#[test]
fn plain_legacy_messages_are_one_record_each() {
    let data = [
        legacy(10, 0, 0, -1, Some(b"k0"), None),
        legacy(11, 1, 0, 555, None, Some(b"")),
        legacy(12, 1, 0x08, 556, Some(b""), Some(b"v")),
    ]
    .concat();
    let batches = decode(&data);
    assert!(batches.iter().all(|b| b.header.records_count == 1));
    let got: Vec<_> = batches
        .into_iter()
        .flat_map(|b| b.records)
        .map(|r| {
            (
                r.offset,
                r.timestamp,
                r.attributes,
                r.offset_delta,
                r.key,
                r.value,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (10, -1, 0, 0, Some(b"k0".to_vec()), None),
            (11, 555, 0, 0, None, Some(vec![])),
            (12, 556, 0x08, 0, Some(vec![]), Some(b"v".to_vec())),
        ]
    );
}

#[test]
fn magic1_wrapper_inner_offsets_are_relative_to_the_last() {
    // Kafka's AbstractLegacyRecordBatch: the wrapper carries the absolute offset of the last inner
    // message; magic 1 inner offsets are 0..n-1 relative to it.
    let inner: Vec<Vec<u8>> = (0..3)
        .map(|i| legacy(i, 1, 0, 100 + i, None, Some(&[b'a' + i as u8])))
        .collect();
    let wrapper = gzip_wrapper(52, 1, 0, 999, &inner);
    let batches = decode(&wrapper);
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].header.records_count, 3);
    let got: Vec<_> = batches[0]
        .records
        .iter()
        .map(|r| (r.offset, r.offset_delta, r.timestamp, r.value.clone()))
        .collect();
    assert_eq!(
        got,
        [
            (50, 0, 100, Some(b"a".to_vec())),
            (51, 1, 101, Some(b"b".to_vec())),
            (52, 2, 102, Some(b"c".to_vec())),
        ]
    );
    // Log-append time on the wrapper: every inner record takes the wrapper's timestamp.
    let wrapper = gzip_wrapper(52, 1, 0x08, 999, &inner);
    let ts: Vec<i64> = records(&wrapper).iter().map(|r| r.timestamp).collect();
    assert_eq!(ts, [999, 999, 999]);
}

#[test]
fn magic0_wrapper_inner_offsets_are_absolute() {
    let inner: Vec<Vec<u8>> = [30, 31]
        .iter()
        .map(|&o| legacy(o, 0, 0, -1, None, Some(b"x")))
        .collect();
    let wrapper = gzip_wrapper(31, 0, 0, -1, &inner);
    let got: Vec<_> = records(&wrapper)
        .iter()
        .map(|r| (r.offset, r.timestamp))
        .collect();
    assert_eq!(got, [(30, -1), (31, -1)]);
}

#[test]
fn malformed_wrappers_are_rejected() {
    let one = |magic: u8| legacy(0, magic, 0, 5, None, Some(b"x"));
    let inner = |what: &str| format!("{what} (at byte 0 of the decompressed records)");
    let at = 3; // wrappers are decoded at absolute position 3
    let check = |data: Vec<u8>, reason: &str| {
        let (pos, why) = decode_err(&data, at);
        assert_eq!(pos, at, "{why}");
        assert!(why.contains(reason), "{why:?} does not say {reason:?}");
    };
    check(
        legacy(0, 1, 1, 5, None, None),
        "compressed wrapper message has a null value",
    );
    check(
        gzip_wrapper(0, 1, 0, 5, &[]),
        "compressed wrapper message holds no inner messages",
    );
    check(
        gzip_wrapper(0, 1, 0, 5, &[one(0)]),
        &inner("inner message magic 0 differs from the wrapper's 1"),
    );
    let mut two = one(1);
    two[16] = 2;
    check(
        gzip_wrapper(0, 1, 0, 5, &[two]),
        &inner("inner message: inner message magic 2 (expected 0 or 1)"),
    );
    check(
        gzip_wrapper(0, 1, 0, 5, &[legacy(0, 1, 1, 5, None, Some(b"x"))]),
        &inner("inner message is compressed again"),
    );
    check(
        gzip_wrapper(0, 1, 0, 5, &[vec![0; 11]]),
        &inner("inner message header truncated"),
    );
    let mut long = one(1);
    long[8..12].copy_from_slice(&100i32.to_be_bytes());
    check(
        gzip_wrapper(0, 1, 0, 5, &[long]),
        &inner("inner message size 100 runs past the end of the payload"),
    );
    let mut negative = one(1);
    negative[8..12].copy_from_slice(&(-1i32).to_be_bytes());
    check(
        gzip_wrapper(0, 1, 0, 5, &[negative]),
        &inner("inner message size -1 runs past the end of the payload"),
    );
    // The inner message's own size is 20 (less than magic 1's 22): shorter than its header.
    let mut short = one(1);
    short.truncate(12 + 20);
    short[8..12].copy_from_slice(&20i32.to_be_bytes());
    check(
        gzip_wrapper(0, 1, 0, 5, &[short]),
        &inner("inner message: message shorter than its header"),
    );
    let mut bad_crc = one(1);
    *bad_crc.last_mut().unwrap() ^= 1;
    check(
        gzip_wrapper(0, 1, 0, 5, &[bad_crc.clone()]),
        "inner message: CRC mismatch: stored 0x",
    );
    let no_crc = DecodeOptions {
        verify_crc: false,
        ..DecodeOptions::default()
    };
    let (batches, _) = decode_batches(&gzip_wrapper(0, 1, 0, 5, &[bad_crc]), 0, no_crc).unwrap();
    assert_eq!(batches[0].records[0].value.as_deref(), Some(&b"y"[..]));
    // Key and value lengths must land exactly on the message's end.
    let mut key_past = legacy(0, 1, 0, 5, Some(b"kk"), None);
    key_past[26..30].copy_from_slice(&9i32.to_be_bytes());
    recrc(&mut key_past);
    check(
        gzip_wrapper(0, 1, 0, 5, &[key_past]),
        "inner message: key length 9 runs past the end of the message",
    );
    let mut value_past = legacy(0, 1, 0, 5, None, Some(b"vv"));
    value_past[30..34].copy_from_slice(&9i32.to_be_bytes());
    recrc(&mut value_past);
    check(
        gzip_wrapper(0, 1, 0, 5, &[value_past]),
        "inner message: value length 9 runs past the end of the message",
    );
    let mut spare = one(1);
    spare.push(0);
    let size = spare.len() as i32 - 12;
    spare[8..12].copy_from_slice(&size.to_be_bytes());
    recrc(&mut spare);
    check(
        gzip_wrapper(0, 1, 0, 5, &[spare]),
        "inner message: 1 bytes left in the message after its value",
    );
}

#[test]
fn wrapper_offsets_past_i64_are_rejected() {
    let at = |offset: i64| legacy(offset, 1, 0, 5, None, Some(b"x"));
    // Relative base: wrapper offset minus the last inner offset must not overflow.
    let (_, why) = decode_err(&gzip_wrapper(-5, 1, 0, 5, &[at(i64::MAX)]), 0);
    assert_eq!(why, "inner message offsets overflow i64");
    // Nor may base + an earlier inner offset.
    let (_, why) = decode_err(&gzip_wrapper(i64::MAX - 1, 1, 0, 5, &[at(5), at(0)]), 0);
    assert_eq!(why, "inner message offsets overflow i64");
}

#[test]
fn lz4_wrapper_header_checksum_is_waived_only_for_magic_0() {
    // KAFKA-3160: Kafka 0.8 (magic 0) hashed the LZ4 frame's magic number into the frame-descriptor
    // checksum; Kafka ignores that checksum for magic 0 wrappers and checks it from magic 1 on.
    let lz4_wrapper = |magic: u8, broken_checksum: bool| {
        let inner = legacy(0, magic, 0, 5, None, Some(b"x"));
        let mut packed = compress(Compression::Lz4, &inner).unwrap();
        if broken_checksum {
            packed[6] = (twox_hash::XxHash32::oneshot(0, &packed[..6]) >> 8) as u8;
        }
        legacy(0, magic, Compression::Lz4 as u8, 5, None, Some(&packed))
    };
    for magic in [0, 1] {
        assert_eq!(records(&lz4_wrapper(magic, false)).len(), 1);
    }
    assert_eq!(
        records(&lz4_wrapper(0, true))[0].value.as_deref(),
        Some(&b"x"[..])
    );
    let (at, why) = decode_err(&lz4_wrapper(1, true), 0);
    assert_eq!(at, 0);
    assert!(why.contains("LZ4 frame header checksum mismatch"), "{why}");
}

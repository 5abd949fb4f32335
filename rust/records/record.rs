//! Magic v2 records inside a batch: zigzag-varint framed, parsed in place (no copies).

use super::batch::BatchHeader;
use super::varint::{read_varint, read_varlong, VarintError};
use crate::{Error, Result};

/// Smallest possible v2 record: length, attributes, timestamp delta, offset delta, key length,
/// value length and header count, one byte each. Bounds record counts before any allocation.
pub const MIN_RECORD_SIZE: usize = 7;

/// One record header: keys are UTF-8 strings, values may be null; duplicate keys are kept in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    pub key: &'a str,
    pub value: Option<&'a [u8]>,
}

/// A decoded record, borrowing its bytes from the batch (or its decompressed payload).
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a, 'h> {
    /// Absolute offset: the batch's base offset plus the offset delta.
    pub offset: i64,
    /// Effective timestamp: the batch max timestamp under log-append time, -1 for magic 0.
    pub timestamp: i64,
    pub attributes: i8,
    pub timestamp_delta: i64,
    /// v2: as written; legacy: the record's index inside its wrapper (0 for a plain message).
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'h [Header<'a>],
    /// v2: the record's bytes from the key length to the end of its headers, as written (what
    /// [`super::digest`] hashes without copying); `None` for legacy messages.
    pub key_value_headers: Option<&'a [u8]>,
}

/// One record of a parsed v2 batch: its [`RecordView`] (whose `headers` stay empty here) and its
/// headers as a range of the batch's header list ([`Records::headers`]), so a run of records is
/// parsed before a sink sees it.
#[derive(Debug, Clone, Copy)]
pub struct Slot<'a> {
    pub record: RecordView<'a, 'a>,
    /// `Records::headers[headers.0..headers.1]`.
    pub headers: (u32, u32),
}

/// A batch's records, all parsed and validated: what [`RecordSink::records`] fills columns from,
/// a column at a time.
#[derive(Debug, Clone, Copy)]
pub struct Records<'r, 'a> {
    pub slots: &'r [Slot<'a>],
    pub headers: &'r [Header<'a>],
}

impl<'r, 'a> Records<'r, 'a> {
    /// The headers of `slot`.
    #[inline]
    pub fn headers_of(&self, slot: &Slot<'a>) -> &'r [Header<'a>] {
        self.headers
            .get(slot.headers.0 as usize..slot.headers.1 as usize)
            .unwrap_or_default()
    }

    /// `slot` as a [`RecordView`].
    #[inline]
    pub fn view(&self, slot: &Slot<'a>) -> RecordView<'a, 'r> {
        RecordView {
            headers: self.headers_of(slot),
            ..slot.record
        }
    }
}

impl<'a> Slot<'a> {
    /// The slot of a record whose headers are all of its [`Records::headers`] (one record).
    pub fn of(r: &RecordView<'a, '_>) -> Self {
        Slot {
            record: RecordView { headers: &[], ..*r },
            headers: (0, u32::try_from(r.headers.len()).unwrap_or(u32::MAX)),
        }
    }
}

/// Receives a batch's records as they are decoded.
pub trait RecordSink {
    /// Called before the first record with the (validated) number of records to come and the size
    /// of the records payload they are cut from (an upper bound on their key and value bytes).
    fn begin_batch(
        &mut self,
        _header: &BatchHeader,
        _records: usize,
        _payload_len: usize,
    ) -> Result<()> {
        Ok(())
    }
    fn record(&mut self, header: &BatchHeader, record: &RecordView<'_, '_>) -> Result<()>;
    /// A whole v2 batch's records at once, after every one of them parsed without error (a sink
    /// that fills columns loops over them a column at a time). By default one `record` each.
    fn records(&mut self, header: &BatchHeader, records: &Records<'_, '_>) -> Result<()> {
        for slot in records.slots {
            self.record(header, &records.view(slot))?;
        }
        Ok(())
    }
    /// Called before each batch: `Some(whole)` when its records are cut from `whole`, the output a
    /// [`super::Decoder::decode_appending`] keeps (their bytes stay there, at their offset from its
    /// start); `None` otherwise (the input, or a scratch buffer reused by the next batch).
    fn payload_region(&mut self, _whole: Option<&[u8]>) {}
}

/// The parse buffers of [`decode_v2`], kept across batches (their capacity: no allocation a batch
/// once they have grown to the largest batch). Empty between calls.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    slots: Vec<Slot<'static>>,
    headers: Vec<Header<'static>>,
}

/// `v` emptied and retyped to another lifetime of the same type, keeping its allocation (the
/// standard library collects a `vec::IntoIter` into a vector of a same-layout type in place).
fn recycle<T, U>(v: Vec<T>) -> Vec<U> {
    v.into_iter().filter_map(|_| None).collect()
}

/// Where errors in a records payload are reported: exact positions for uncompressed records, the
/// batch position (and the payload offset in the reason) for decompressed ones.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PayloadPos {
    pub batch: u64,
    pub start: Option<u64>,
}

impl PayloadPos {
    pub fn error(self, at: usize, reason: impl Into<String>) -> Error {
        match self.start {
            Some(start) => Error::corrupt(start + at as u64, reason),
            None => Error::corrupt(
                self.batch,
                format!(
                    "{} (at byte {at} of the decompressed records)",
                    reason.into()
                ),
            ),
        }
    }
}

/// Decode the `records_count` records of a v2 batch from `payload` into `sink`.
pub(crate) fn decode_v2<S: RecordSink>(
    h: &BatchHeader,
    payload: &[u8],
    pos: PayloadPos,
    sink: &mut S,
    scratch: &mut Scratch,
) -> Result<()> {
    let mut slots: Vec<Slot<'_>> = recycle(std::mem::take(&mut scratch.slots));
    let mut headers: Vec<Header<'_>> = recycle(std::mem::take(&mut scratch.headers));
    let result = parse_v2(h, payload, pos, sink, &mut slots, &mut headers);
    scratch.slots = recycle(slots);
    scratch.headers = recycle(headers);
    result
}

/// Records parsed before a sink receives them: a column loop's worth (its slots stay in L2 cache),
/// and what bounds the parse buffers whatever a batch's record count.
const RECORDS_AT_ONCE: usize = 1024;

/// Hand the parsed `slots` (and their `headers`) to `sink`, emptying both.
fn flush<'a, S: RecordSink>(
    h: &BatchHeader,
    sink: &mut S,
    slots: &mut Vec<Slot<'a>>,
    headers: &mut Vec<Header<'a>>,
) -> Result<()> {
    let records = Records { slots, headers };
    let result = sink.records(h, &records);
    slots.clear();
    headers.clear();
    result
}

fn parse_v2<'a, S: RecordSink>(
    h: &BatchHeader,
    payload: &'a [u8],
    pos: PayloadPos,
    sink: &mut S,
    slots: &mut Vec<Slot<'a>>,
    headers: &mut Vec<Header<'a>>,
) -> Result<()> {
    let count = h.records_count as usize;
    if count > payload.len() / MIN_RECORD_SIZE {
        return Err(pos.error(
            0,
            format!(
                "record count {count} cannot fit in {} bytes of records",
                payload.len()
            ),
        ));
    }
    sink.begin_batch(h, count, payload.len())?;
    let log_append_time = h.timestamp_type() == 1;
    slots.reserve(count.min(RECORDS_AT_ONCE));
    // The loop keeps its state in registers: errors are built by cold functions taking values
    // (a closure capturing `at` or `index` by reference would pin them to the stack).
    let mut cur = payload;
    for index in 0..count {
        if slots.len() == RECORDS_AT_ONCE {
            flush(h, sink, slots, headers)?;
        }
        let at = payload.len() - cur.len();
        // Record `index`'s error (at byte `at`), built out of line.
        macro_rules! fail {
            ($($reason:tt)*) => {
                return Err(record_error(pos, at, index, format_args!($($reason)*)))
            };
        }
        let length =
            read_varint(&mut cur).map_err(|e| varint_error(pos, at, index, e, "length"))?;
        let Ok(body_len) = usize::try_from(length) else {
            fail!("negative length {length}");
        };
        let (Some(mut body), Some(rest)) = (cur.get(..body_len), cur.get(body_len..)) else {
            fail!("length {length} runs past the end of the batch");
        };
        cur = rest;

        let Some((&attributes, tail)) = body.split_first() else {
            fail!("empty record body");
        };
        body = tail;
        let timestamp_delta = read_varlong(&mut body)
            .map_err(|e| varint_error(pos, at, index, e, "timestamp delta"))?;
        let offset_delta =
            read_varint(&mut body).map_err(|e| varint_error(pos, at, index, e, "offset delta"))?;
        let key_value_headers = body;
        let key = read_bytes(&mut body)
            .map_err(|r| record_error(pos, at, index, format_args!("key {r}")))?;
        let value = read_bytes(&mut body)
            .map_err(|r| record_error(pos, at, index, format_args!("value {r}")))?;
        let header_count =
            read_varint(&mut body).map_err(|e| varint_error(pos, at, index, e, "header count"))?;
        let Ok(header_count) = usize::try_from(header_count) else {
            fail!("negative header count {header_count}");
        };
        let first_header = headers.len();
        if header_count > 0 {
            // Each header takes at least two bytes (two one-byte lengths).
            if header_count > body.len() / 2 {
                fail!("{header_count} headers cannot fit in the record");
            }
            headers.reserve(header_count);
            for _ in 0..header_count {
                let key = match read_bytes(&mut body) {
                    Ok(Some(k)) => match std::str::from_utf8(k) {
                        Ok(k) => k,
                        Err(_) => fail!("header key is not valid UTF-8"),
                    },
                    Ok(None) => fail!("null header key"),
                    Err(r) => fail!("header key {r}"),
                };
                let value = read_bytes(&mut body)
                    .map_err(|r| record_error(pos, at, index, format_args!("header value {r}")))?;
                headers.push(Header { key, value });
            }
        }
        if !body.is_empty() {
            let left = body.len();
            fail!("{left} bytes left in the record after its headers (length {length})");
        }
        let timestamp = if log_append_time {
            h.max_timestamp
        } else {
            h.base_timestamp.wrapping_add(timestamp_delta)
        };
        let Some(offset) = h.base_offset.checked_add(i64::from(offset_delta)) else {
            fail!("offset delta {offset_delta} overflows the base offset");
        };
        slots.push(Slot {
            record: RecordView {
                offset,
                timestamp,
                attributes: attributes as i8,
                timestamp_delta,
                offset_delta,
                key,
                value,
                headers: &[],
                key_value_headers: Some(key_value_headers),
            },
            // Bounded by the payload's size (each header takes two bytes or more): fits in u32.
            headers: (first_header as u32, headers.len() as u32),
        });
    }
    if !cur.is_empty() {
        return Err(pos.error(
            payload.len() - cur.len(),
            format!("{} bytes left after the last of {count} records", cur.len()),
        ));
    }
    flush(h, sink, slots, headers)
}

#[cold]
#[inline(never)]
fn varint_error(pos: PayloadPos, at: usize, index: usize, e: VarintError, what: &str) -> Error {
    pos.error(at, e.reason(&format!("record {index}: {what}")))
}

#[cold]
#[inline(never)]
fn record_error(
    pos: PayloadPos,
    at: usize,
    index: usize,
    reason: std::fmt::Arguments<'_>,
) -> Error {
    pos.error(at, format!("record {index}: {reason}"))
}

/// Why a length-prefixed byte string could not be read (the text built only on the error path).
#[derive(Debug, Clone, Copy)]
enum BytesError {
    Length(VarintError),
    Overrun(usize),
}

impl std::fmt::Display for BytesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BytesError::Length(e) => f.write_str(&e.reason("length")),
            BytesError::Overrun(len) => write!(f, "length {len} runs past the end of the record"),
        }
    }
}

/// A varint-length-prefixed byte string; a negative length is null (as in Java's `DefaultRecord`).
#[inline(always)]
fn read_bytes<'a>(buf: &mut &'a [u8]) -> std::result::Result<Option<&'a [u8]>, BytesError> {
    let len = read_varint(buf).map_err(BytesError::Length)?;
    if len < 0 {
        return Ok(None);
    }
    let len = len as usize;
    let (Some(bytes), Some(rest)) = (buf.get(..len), buf.get(len..)) else {
        return Err(BytesError::Overrun(len));
    };
    *buf = rest;
    Ok(Some(bytes))
}

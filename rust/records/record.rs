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
    /// Called before each batch: `Some(whole)` when its records are cut from `whole`, the output a
    /// [`super::Decoder::decode_appending`] keeps (their bytes stay there, at their offset from its
    /// start); `None` otherwise (the input, or a scratch buffer reused by the next batch).
    fn payload_region(&mut self, _whole: Option<&[u8]>) {}
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
    let mut headers: Vec<Header<'_>> = Vec::new();
    let mut cur = payload;
    for index in 0..count {
        let at = payload.len() - cur.len();
        let varint = |e: VarintError, what: &str| {
            pos.error(at, e.reason(&format!("record {index}: {what}")))
        };
        let length = read_varint(&mut cur).map_err(|e| varint(e, "length"))?;
        let body_len = usize::try_from(length)
            .map_err(|_| pos.error(at, format!("record {index}: negative length {length}")))?;
        let (Some(mut body), Some(rest)) = (cur.get(..body_len), cur.get(body_len..)) else {
            return Err(pos.error(
                at,
                format!("record {index}: length {length} runs past the end of the batch"),
            ));
        };
        cur = rest;

        let Some((&attributes, tail)) = body.split_first() else {
            return Err(pos.error(at, format!("record {index}: empty record body")));
        };
        body = tail;
        let timestamp_delta = read_varlong(&mut body).map_err(|e| varint(e, "timestamp delta"))?;
        let offset_delta = read_varint(&mut body).map_err(|e| varint(e, "offset delta"))?;
        let key_value_headers = body;
        let key =
            read_bytes(&mut body).map_err(|r| pos.error(at, format!("record {index}: key {r}")))?;
        let value = read_bytes(&mut body)
            .map_err(|r| pos.error(at, format!("record {index}: value {r}")))?;
        let header_count = read_varint(&mut body).map_err(|e| varint(e, "header count"))?;
        let header_count = usize::try_from(header_count).map_err(|_| {
            pos.error(
                at,
                format!("record {index}: negative header count {header_count}"),
            )
        })?;
        headers.clear();
        if header_count > 0 {
            // Each header takes at least two bytes (two one-byte lengths).
            if header_count > body.len() / 2 {
                return Err(pos.error(
                    at,
                    format!("record {index}: {header_count} headers cannot fit in the record"),
                ));
            }
            headers.reserve(header_count);
            for _ in 0..header_count {
                let key = match read_bytes(&mut body) {
                    Ok(Some(k)) => std::str::from_utf8(k).map_err(|_| {
                        pos.error(at, format!("record {index}: header key is not valid UTF-8"))
                    })?,
                    Ok(None) => {
                        return Err(pos.error(at, format!("record {index}: null header key")))
                    }
                    Err(r) => return Err(pos.error(at, format!("record {index}: header key {r}"))),
                };
                let value = read_bytes(&mut body)
                    .map_err(|r| pos.error(at, format!("record {index}: header value {r}")))?;
                headers.push(Header { key, value });
            }
        }
        if !body.is_empty() {
            return Err(pos.error(
                at,
                format!("record {index}: {} bytes left in the record after its headers (length {length})", body.len()),
            ));
        }
        let timestamp = if log_append_time {
            h.max_timestamp
        } else {
            h.base_timestamp.wrapping_add(timestamp_delta)
        };
        let offset = h
            .base_offset
            .checked_add(i64::from(offset_delta))
            .ok_or_else(|| {
                pos.error(
                    at,
                    format!(
                        "record {index}: offset delta {offset_delta} overflows the base offset"
                    ),
                )
            })?;
        let record = RecordView {
            offset,
            timestamp,
            attributes: attributes as i8,
            timestamp_delta,
            offset_delta,
            key,
            value,
            headers: &headers,
            key_value_headers: Some(key_value_headers),
        };
        sink.record(h, &record)?;
    }
    if !cur.is_empty() {
        return Err(pos.error(
            payload.len() - cur.len(),
            format!("{} bytes left after the last of {count} records", cur.len()),
        ));
    }
    Ok(())
}

/// A varint-length-prefixed byte string; a negative length is null (as in Java's `DefaultRecord`).
#[inline]
fn read_bytes<'a>(buf: &mut &'a [u8]) -> std::result::Result<Option<&'a [u8]>, String> {
    let len = read_varint(buf).map_err(|e| e.reason("length"))?;
    if len < 0 {
        return Ok(None);
    }
    let len = len as usize;
    let (Some(bytes), Some(rest)) = (buf.get(..len), buf.get(len..)) else {
        return Err(format!("length {len} runs past the end of the record"));
    };
    *buf = rest;
    Ok(Some(bytes))
}

//! Batch framing and headers: the magic v2 `RecordBatch` header (61 bytes, CRC-32C) and the legacy
//! magic 0/1 message header, and a cursor that cuts an input into batches without decompressing.

use super::compression::Compression;
use crate::{Error, Result};

/// Bytes before every batch's body: base offset (8) and length (4) (Kafka's `LOG_OVERHEAD`).
pub const LOG_OVERHEAD: usize = 12;
/// Size of the magic v2 header, up to the first record.
pub const V2_HEADER_SIZE: usize = 61;
/// Where the CRC-32C of a v2 batch starts (the attributes field).
pub const V2_CRC_START: usize = 21;
/// Smallest legacy message: crc, magic, attributes, key and value lengths (+8 timestamp for magic 1).
pub const LEGACY_MIN_MESSAGE: [usize; 2] = [14, 22];

/// Timestamp type bit of the attributes (magic 1 and 2).
pub const TIMESTAMP_TYPE_BIT: i16 = 0x08;
pub const TRANSACTIONAL_BIT: i16 = 0x10;
pub const CONTROL_BIT: i16 = 0x20;
pub const DELETE_HORIZON_BIT: i16 = 0x40;

/// Every header field of one batch. Legacy messages fill the v2-only fields with Kafka's "none"
/// values (-1), and `base_offset` is the message's own offset (for a compressed wrapper: its last
/// inner offset, as written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Absolute byte position of the batch in the input.
    pub file_position: u64,
    /// Bytes the batch occupies, `LOG_OVERHEAD` included.
    pub size_in_bytes: u32,
    pub base_offset: i64,
    /// The length field: bytes after it (v2 batch length, legacy message size).
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    /// v2: the header's count. Legacy: 1 for a plain message, the inner count once decoded.
    pub records_count: i32,
}

impl BatchHeader {
    pub fn compression(&self) -> Option<Compression> {
        Compression::from_attributes(self.attributes)
    }
    /// 0 create time, 1 log-append time, -1 for magic 0 (no timestamps).
    pub fn timestamp_type(&self) -> i8 {
        if self.magic == 0 {
            -1
        } else {
            i8::from(self.attributes & TIMESTAMP_TYPE_BIT != 0)
        }
    }
    pub fn is_transactional(&self) -> bool {
        self.magic >= 2 && self.attributes & TRANSACTIONAL_BIT != 0
    }
    pub fn is_control(&self) -> bool {
        self.magic >= 2 && self.attributes & CONTROL_BIT != 0
    }
    pub fn has_delete_horizon(&self) -> bool {
        self.magic >= 2 && self.attributes & DELETE_HORIZON_BIT != 0
    }
    /// Never wraps for a header read by [`BatchCursor`] (it rejects batches whose offsets overflow).
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .wrapping_add(i64::from(self.last_offset_delta))
    }
    pub fn next_offset(&self) -> i64 {
        self.last_offset().wrapping_add(1)
    }
    /// Sequence number of the record at `offset_delta` (Kafka's `DefaultRecordBatch.incrementSequence`,
    /// wrapping at `i32::MAX`); -1 when the batch has none.
    pub fn sequence_at(&self, offset_delta: i32) -> i32 {
        if self.base_sequence < 0 {
            return -1;
        }
        if self.base_sequence > i32::MAX - offset_delta.max(0) {
            offset_delta - (i32::MAX - self.base_sequence) - 1
        } else {
            self.base_sequence + offset_delta
        }
    }
}

/// One batch cut out of the input: its header and all of its bytes (`LOG_OVERHEAD` included).
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    pub header: BatchHeader,
    pub bytes: &'a [u8],
}

/// Big-endian reads at fixed offsets; callers have checked the length, `None` is a bug guard only.
pub(crate) fn be<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at + N)?.first_chunk::<N>().copied()
}
pub(crate) fn i64_at(b: &[u8], at: usize) -> Option<i64> {
    be::<8>(b, at).map(i64::from_be_bytes)
}
pub(crate) fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    be::<4>(b, at).map(i32::from_be_bytes)
}
pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    be::<4>(b, at).map(u32::from_be_bytes)
}
pub(crate) fn i16_at(b: &[u8], at: usize) -> Option<i16> {
    be::<2>(b, at).map(i16::from_be_bytes)
}

/// Cuts an input into batches (header-only: no CRC check, no decompression).
///
/// Stops at the first incomplete batch: with `allow_partial_tail` its position is kept in
/// `partial_tail` and iteration ends; otherwise it is a `Corrupt` error.
#[derive(Debug, Clone)]
pub struct BatchCursor<'a> {
    data: &'a [u8],
    base_position: u64,
    pos: usize,
    allow_partial_tail: bool,
    partial_tail: Option<u64>,
    crc_first: bool,
}

impl<'a> BatchCursor<'a> {
    /// `base_position`: absolute position of `data[0]` (for a byte range cut out of a file).
    pub fn new(data: &'a [u8], base_position: u64, allow_partial_tail: bool) -> Self {
        BatchCursor {
            data,
            base_position,
            pos: 0,
            allow_partial_tail,
            partial_tail: None,
            crc_first: false,
        }
    }

    /// For a decoder that verifies CRCs: a batch whose header fields are invalid (a negative record
    /// count, an unknown codec) but whose stored CRC does not match its bytes is reported as the
    /// CRC mismatch, as Kafka's `DefaultRecordBatch.ensureValid` checks the CRC before anything the
    /// CRC covers. (A header-only scan keeps reporting the field itself.)
    pub fn crc_first(mut self, verify_crc: bool) -> Self {
        self.crc_first = verify_crc;
        self
    }

    /// Absolute position of an incomplete last batch, once iteration has reached it.
    pub fn partial_tail(&self) -> Option<u64> {
        self.partial_tail
    }

    /// Absolute position of the next unread byte.
    pub fn position(&self) -> u64 {
        self.base_position + self.pos as u64
    }

    fn incomplete(&mut self, what: &str) -> Result<Option<Frame<'a>>> {
        let at = self.position();
        if self.allow_partial_tail {
            self.partial_tail = Some(at);
            self.pos = self.data.len();
            Ok(None)
        } else {
            Err(Error::corrupt(
                at,
                format!("{what} (a partial batch at the end of the input)"),
            ))
        }
    }

    /// The next batch, `None` at the end of the input (or at a tolerated partial tail).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Frame<'a>>> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        if rest.is_empty() {
            return Ok(None);
        }
        let head = rest
            .get(..rest.len().min(V2_HEADER_SIZE))
            .unwrap_or_default();
        let header = match parse_header(head, self.position(), rest.len() as u64) {
            Ok(Parsed::Header(header)) => header,
            Ok(Parsed::Incomplete(what)) => return self.incomplete(&what),
            Err(e) if self.crc_first => {
                return Err(crc_mismatch(rest, self.position()).unwrap_or(e))
            }
            Err(e) => return Err(e),
        };
        let size = header.size_in_bytes as usize;
        let bytes = rest.get(..size).unwrap_or_default();
        self.pos += size;
        Ok(Some(Frame { header, bytes }))
    }
}

/// What the first bytes of a batch say: its header, or why the input ends inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Header(BatchHeader),
    /// The input ends inside the batch (the reason, for an error when no partial tail is allowed).
    Incomplete(String),
}

/// Parse the header of the batch at absolute position `at` from `head`, its first
/// `min(available, V2_HEADER_SIZE)` bytes, where `available` is how many bytes the input has from
/// `at` on. The header alone decides where the batch ends, so a reader can seek past its records
/// ([`super::reader::scan_headers_file`]); [`BatchCursor`] cuts its input with the same function.
pub fn parse_header(head: &[u8], at: u64, available: u64) -> Result<Parsed> {
    let (Some(base_offset), Some(length)) = (i64_at(head, 0), i32_at(head, 8)) else {
        return Ok(Parsed::Incomplete(format!(
            "only {available} bytes left, a batch needs {LOG_OVERHEAD} to start"
        )));
    };
    // Legacy messages and v2 batches both put the magic byte right after offset, length and 4 bytes.
    let min_length = LEGACY_MIN_MESSAGE[0] as i32;
    if length < min_length {
        return Err(Error::corrupt(
            at,
            format!("batch length {length} is smaller than the smallest batch ({min_length})"),
        ));
    }
    let size = LOG_OVERHEAD + length as usize;
    if (size as u64) > available {
        return Ok(Parsed::Incomplete(format!(
            "batch of {size} bytes but only {available} left"
        )));
    }
    let head = head.get(..size.min(head.len())).unwrap_or_default();
    let magic = head.get(16).copied().unwrap_or_default() as i8;
    let header = match magic {
        2 => v2_header(head, size, at, base_offset, length)?,
        0 | 1 => legacy_header(head, size, at, base_offset, length, magic)?,
        _ => {
            return Err(Error::corrupt(
                at + 16,
                format!("unknown magic {magic} (expected 0, 1 or 2)"),
            ))
        }
    };
    // Kafka's offsets are non-wrapping: a batch must leave room for the offset after it (its
    // `next_offset`), or offsets derived from it would silently wrap to negative.
    if header
        .base_offset
        .checked_add(i64::from(header.last_offset_delta))
        .and_then(|last| last.checked_add(1))
        .is_none()
    {
        return Err(Error::corrupt(
            at,
            format!(
                "base offset {} + last offset delta {} leaves no next offset (i64 overflow)",
                header.base_offset, header.last_offset_delta
            ),
        ));
    }
    Ok(Parsed::Header(header))
}

/// `b`: the batch's first bytes (at least the header when `size` allows), `size`: all of its bytes.
fn v2_header(b: &[u8], size: usize, at: u64, base_offset: i64, length: i32) -> Result<BatchHeader> {
    if size < V2_HEADER_SIZE {
        return Err(Error::corrupt(
            at,
            format!(
                "v2 batch length {length} is smaller than the v2 header ({})",
                V2_HEADER_SIZE - LOG_OVERHEAD
            ),
        ));
    }
    let field = || Error::corrupt(at, "v2 header shorter than expected");
    let h = BatchHeader {
        file_position: at,
        size_in_bytes: size as u32,
        base_offset,
        batch_length: length,
        partition_leader_epoch: i32_at(b, 12).ok_or_else(field)?,
        magic: 2,
        crc: u32_at(b, 17).ok_or_else(field)?,
        attributes: i16_at(b, 21).ok_or_else(field)?,
        last_offset_delta: i32_at(b, 23).ok_or_else(field)?,
        base_timestamp: i64_at(b, 27).ok_or_else(field)?,
        max_timestamp: i64_at(b, 35).ok_or_else(field)?,
        producer_id: i64_at(b, 43).ok_or_else(field)?,
        producer_epoch: i16_at(b, 51).ok_or_else(field)?,
        base_sequence: i32_at(b, 53).ok_or_else(field)?,
        records_count: i32_at(b, 57).ok_or_else(field)?,
    };
    if h.compression().is_none() {
        return Err(Error::corrupt(
            at + 21,
            format!("unknown compression codec id {}", h.attributes & 0x07),
        ));
    }
    if h.records_count < 0 {
        return Err(Error::corrupt(
            at + 57,
            format!("negative record count {}", h.records_count),
        ));
    }
    Ok(h)
}

fn legacy_header(
    b: &[u8],
    size: usize,
    at: u64,
    offset: i64,
    length: i32,
    magic: i8,
) -> Result<BatchHeader> {
    let min = LEGACY_MIN_MESSAGE[magic as usize];
    if (length as usize) < min {
        return Err(Error::corrupt(
            at,
            format!("magic {magic} message size {length} is smaller than the minimum ({min})"),
        ));
    }
    let field = || Error::corrupt(at, "legacy header shorter than expected");
    let attributes = i16::from(b.get(17).copied().ok_or_else(field)? as i8);
    let timestamp = if magic == 1 {
        i64_at(b, 18).ok_or_else(field)?
    } else {
        -1
    };
    let h = BatchHeader {
        file_position: at,
        size_in_bytes: size as u32,
        base_offset: offset,
        batch_length: length,
        partition_leader_epoch: -1,
        magic,
        crc: u32_at(b, 12).ok_or_else(field)?,
        attributes,
        last_offset_delta: 0,
        base_timestamp: timestamp,
        max_timestamp: timestamp,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        records_count: 1,
    };
    if h.compression().is_none() {
        return Err(Error::corrupt(
            at + 17,
            format!("unknown compression codec id {}", attributes & 0x07),
        ));
    }
    Ok(h)
}

/// Check the batch's stored CRC (v2: CRC-32C from the attributes on; legacy: CRC-32 from the magic on).
pub fn verify_crc(frame: &Frame<'_>) -> Result<()> {
    let h = &frame.header;
    check_crc(frame.bytes, h.magic, h.crc, h.file_position)
}

fn check_crc(bytes: &[u8], magic: i8, stored: u32, at: u64) -> Result<()> {
    let computed = if magic >= 2 {
        crc32c::crc32c(bytes.get(V2_CRC_START..).unwrap_or_default())
    } else {
        crc32fast::hash(bytes.get(16..).unwrap_or_default())
    };
    if computed != stored {
        return Err(Error::corrupt(
            at,
            format!("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}"),
        ));
    }
    Ok(())
}

/// The CRC error of the batch at the start of `rest` (at absolute `at`) whose header was rejected,
/// when it is framed well enough to have a CRC to check (known magic, whole in `rest`) and that
/// CRC does not match.
fn crc_mismatch(rest: &[u8], at: u64) -> Option<Error> {
    let length = usize::try_from(i32_at(rest, 8)?).ok()?;
    let bytes = rest.get(..LOG_OVERHEAD.checked_add(length)?)?;
    let magic = *bytes.get(16)? as i8;
    let stored = match magic {
        2 if bytes.len() >= V2_HEADER_SIZE => u32_at(bytes, 17)?,
        0 | 1
            if LEGACY_MIN_MESSAGE
                .get(magic as usize)
                .is_some_and(|&min| length >= min) =>
        {
            u32_at(bytes, 12)?
        }
        _ => return None,
    };
    check_crc(bytes, magic, stored, at).err()
}

//! Legacy message sets (magic 0 and 1): one message per "batch", or a compressed wrapper message
//! whose value is a message set of inner messages (Kafka's `AbstractLegacyRecordBatch`).

use super::batch::{i32_at, i64_at, u32_at, BatchHeader, Frame, LEGACY_MIN_MESSAGE, LOG_OVERHEAD};
use super::compression::{Compression, Decompressor};
use super::record::{PayloadPos, RecordSink, RecordView};
use super::DecodeOptions;
use crate::{Error, Result};

/// The fields of one legacy message after `LOG_OVERHEAD`.
struct Message<'a> {
    offset: i64,
    magic: i8,
    attributes: i8,
    timestamp: i64,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
}

/// Parse `[offset][size][crc][magic][attributes][timestamp?][key][value]`; `bytes` is the whole entry.
fn parse_message<'a>(
    bytes: &'a [u8],
    verify_crc: bool,
) -> std::result::Result<Message<'a>, String> {
    let field = || "message shorter than its header".to_string();
    let offset = i64_at(bytes, 0).ok_or_else(field)?;
    let magic = *bytes.get(16).ok_or_else(field)? as i8;
    if !(0..=1).contains(&magic) {
        return Err(format!("inner message magic {magic} (expected 0 or 1)"));
    }
    if bytes.len() < LOG_OVERHEAD + LEGACY_MIN_MESSAGE[magic as usize] {
        return Err(field());
    }
    if verify_crc {
        let stored = u32_at(bytes, 12).ok_or_else(field)?;
        let computed = crc32fast::hash(bytes.get(16..).unwrap_or_default());
        if stored != computed {
            return Err(format!(
                "CRC mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ));
        }
    }
    let attributes = *bytes.get(17).ok_or_else(field)? as i8;
    let (timestamp, mut at) = if magic == 1 {
        (i64_at(bytes, 18).ok_or_else(field)?, 26)
    } else {
        (-1, 18)
    };
    let mut sized = |what: &str| -> std::result::Result<Option<&'a [u8]>, String> {
        let len = i32_at(bytes, at)
            .ok_or_else(|| format!("{what} length past the end of the message"))?;
        at += 4;
        if len < 0 {
            return Ok(None);
        }
        let data = bytes
            .get(at..at + len as usize)
            .ok_or_else(|| format!("{what} length {len} runs past the end of the message"))?;
        at += len as usize;
        Ok(Some(data))
    };
    let key = sized("key")?;
    let value = sized("value")?;
    if at != bytes.len() {
        return Err(format!(
            "{} bytes left in the message after its value",
            bytes.len() - at
        ));
    }
    Ok(Message {
        offset,
        magic,
        attributes,
        timestamp,
        key,
        value,
    })
}

/// Decode one legacy entry into `sink`; returns the header with `records_count` set.
pub(crate) fn decode_legacy<S: RecordSink>(
    frame: &Frame<'_>,
    opts: &DecodeOptions,
    decompressor: &mut Decompressor,
    sink: &mut S,
) -> Result<BatchHeader> {
    let mut h = frame.header;
    let at = h.file_position;
    // The wrapper's CRC was checked with the frame; its own fields need no second check.
    let wrapper = parse_message(frame.bytes, false).map_err(|r| Error::corrupt(at, r))?;
    let codec = h.compression().unwrap_or(Compression::None);
    if codec == Compression::None {
        sink.begin_batch(&h, 1, frame.bytes.len())?;
        let record = RecordView {
            offset: wrapper.offset,
            timestamp: wrapper.timestamp,
            attributes: wrapper.attributes,
            timestamp_delta: 0,
            offset_delta: 0,
            key: wrapper.key,
            value: wrapper.value,
            headers: &[],
            key_value_headers: None,
        };
        sink.record(&h, &record)?;
        return Ok(h);
    }

    let compressed = wrapper
        .value
        .ok_or_else(|| Error::corrupt(at, "compressed wrapper message has a null value"))?;
    let payload = decompressor
        .decompress(
            codec,
            compressed,
            opts.max_decompressed_size,
            wrapper.magic == 0,
        )
        .map_err(|e| Error::corrupt(at, e.reason(codec)))?;
    let pos = PayloadPos {
        batch: at,
        start: None,
    };

    let mut inner = Vec::new();
    let mut rest = payload;
    while !rest.is_empty() {
        let here = payload.len() - rest.len();
        let size =
            i32_at(rest, 8).ok_or_else(|| pos.error(here, "inner message header truncated"))?;
        let entry = usize::try_from(size)
            .ok()
            .and_then(|s| rest.get(..LOG_OVERHEAD + s))
            .ok_or_else(|| {
                pos.error(
                    here,
                    format!("inner message size {size} runs past the end of the payload"),
                )
            })?;
        let m = parse_message(entry, opts.verify_crc)
            .map_err(|r| pos.error(here, format!("inner message: {r}")))?;
        if m.magic != wrapper.magic {
            return Err(pos.error(
                here,
                format!(
                    "inner message magic {} differs from the wrapper's {}",
                    m.magic, wrapper.magic
                ),
            ));
        }
        if m.attributes & 0x07 != 0 {
            return Err(pos.error(here, "inner message is compressed again"));
        }
        inner.push(m);
        rest = rest.get(entry.len()..).unwrap_or_default();
    }
    let Some(last) = inner.last() else {
        return Err(Error::corrupt(
            at,
            "compressed wrapper message holds no inner messages",
        ));
    };
    // Magic 1 inner offsets are relative; the wrapper carries the absolute offset of the last one.
    let offset_base = if wrapper.magic >= 1 {
        wrapper.offset.checked_sub(last.offset)
    } else {
        Some(0)
    };
    let overflow = || Error::corrupt(at, "inner message offsets overflow i64");
    let offset_base = offset_base.ok_or_else(overflow)?;
    let log_append_time = h.timestamp_type() == 1;
    h.records_count = i32::try_from(inner.len()).unwrap_or(i32::MAX);
    sink.begin_batch(&h, inner.len(), payload.len())?;
    for (index, m) in inner.iter().enumerate() {
        let record = RecordView {
            offset: offset_base.checked_add(m.offset).ok_or_else(overflow)?,
            timestamp: if log_append_time {
                wrapper.timestamp
            } else {
                m.timestamp
            },
            attributes: m.attributes,
            timestamp_delta: 0,
            offset_delta: index as i32,
            key: m.key,
            value: m.value,
            headers: &[],
            key_value_headers: None,
        };
        sink.record(&h, &record)?;
    }
    Ok(h)
}

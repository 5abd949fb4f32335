//! Writing magic v2 record batches (Kafka's `MemoryRecordsBuilder` + `DefaultRecord.writeTo`).

use super::batch::{
    CONTROL_BIT, LOG_OVERHEAD, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT, V2_CRC_START, V2_HEADER_SIZE,
};
use super::compression::{compress, Compression};
use super::record::Header;
use super::varint::{write_varint, write_varlong};
use crate::{Error, Result};

/// Batch-level fields of a batch to write. `Default` is a plain non-idempotent producer batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSpec {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    pub compression: Compression,
    /// 0 create time, 1 log-append time.
    pub timestamp_type: i8,
    /// Timestamp of records that carry none, and the base of the deltas. `None`: the first
    /// explicit record timestamp, else -1 (Kafka's NO_TIMESTAMP), so output is deterministic.
    pub base_timestamp: Option<i64>,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub is_transactional: bool,
    pub is_control: bool,
}

impl Default for BatchSpec {
    fn default() -> Self {
        BatchSpec {
            base_offset: 0,
            partition_leader_epoch: -1,
            compression: Compression::None,
            timestamp_type: 0,
            base_timestamp: None,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            is_transactional: false,
            is_control: false,
        }
    }
}

/// A record to write; offsets are assigned in order from the batch's base offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewRecord<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<Header<'a>>,
    pub timestamp: Option<i64>,
}

fn write_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) -> Result<()> {
    match bytes {
        None => write_varint(out, -1),
        Some(b) => {
            let len = i32::try_from(b.len())
                .map_err(|_| Error::invalid("a key, value or header is larger than 2 GiB"))?;
            write_varint(out, len);
            out.extend_from_slice(b);
        }
    }
    Ok(())
}

/// A v2 record's key, value and headers as written (`DefaultRecord.writeTo` from the key length on):
/// varint-prefixed bytes with -1 for null, then the header count and each header.
pub fn write_key_value_headers(
    out: &mut Vec<u8>,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header<'_>],
) -> Result<()> {
    write_bytes(out, key)?;
    write_bytes(out, value)?;
    let header_count =
        i32::try_from(headers.len()).map_err(|_| Error::invalid("too many headers"))?;
    write_varint(out, header_count);
    for h in headers {
        write_bytes(out, Some(h.key.as_bytes()))?;
        write_bytes(out, h.value)?;
    }
    Ok(())
}

/// Encode one magic v2 batch holding `records` (at least one).
pub fn encode_batch(spec: &BatchSpec, records: &[NewRecord<'_>]) -> Result<Vec<u8>> {
    let Some(last_index) = records.len().checked_sub(1) else {
        return Err(Error::invalid("a record batch needs at least one record"));
    };
    let last_offset_delta =
        i32::try_from(last_index).map_err(|_| Error::invalid("too many records for one batch"))?;
    // The decoder's rule too: the batch's offsets, and the one after it, must fit in an i64.
    if spec
        .base_offset
        .checked_add(i64::from(last_offset_delta))
        .and_then(|last| last.checked_add(1))
        .is_none()
    {
        return Err(Error::invalid(format!(
            "base_offset {} + {} records overflows the offset range",
            spec.base_offset,
            records.len()
        )));
    }
    if !(0..=1).contains(&spec.timestamp_type) {
        return Err(Error::invalid(format!(
            "timestamp_type must be 0 or 1, not {}",
            spec.timestamp_type
        )));
    }
    let base_timestamp = spec
        .base_timestamp
        .or_else(|| records.iter().find_map(|r| r.timestamp))
        .unwrap_or(-1);

    let mut payload = Vec::new();
    let mut body = Vec::new();
    let mut max_timestamp = i64::MIN;
    for (delta, r) in (0i32..).zip(records) {
        let timestamp = r.timestamp.unwrap_or(base_timestamp);
        max_timestamp = max_timestamp.max(timestamp);
        body.clear();
        body.push(0); // record attributes: unused
        write_varlong(&mut body, timestamp.wrapping_sub(base_timestamp));
        write_varint(&mut body, delta);
        write_key_value_headers(&mut body, r.key, r.value, &r.headers)?;
        let len =
            i32::try_from(body.len()).map_err(|_| Error::invalid("record larger than 2 GiB"))?;
        write_varint(&mut payload, len);
        payload.extend_from_slice(&body);
    }
    let records_bytes = compress(spec.compression, &payload)?;

    let batch_length = i32::try_from(V2_HEADER_SIZE - LOG_OVERHEAD + records_bytes.len())
        .map_err(|_| Error::invalid("batch larger than 2 GiB"))?;
    let mut attributes = spec.compression as i16;
    if spec.timestamp_type == 1 {
        attributes |= TIMESTAMP_TYPE_BIT;
    }
    if spec.is_transactional {
        attributes |= TRANSACTIONAL_BIT;
    }
    if spec.is_control {
        attributes |= CONTROL_BIT;
    }
    let mut out = Vec::with_capacity(V2_HEADER_SIZE + records_bytes.len());
    out.extend_from_slice(&spec.base_offset.to_be_bytes());
    out.extend_from_slice(&batch_length.to_be_bytes());
    out.extend_from_slice(&spec.partition_leader_epoch.to_be_bytes());
    out.push(2);
    out.extend_from_slice(&[0; 4]); // CRC, filled in below
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&last_offset_delta.to_be_bytes());
    out.extend_from_slice(&base_timestamp.to_be_bytes());
    out.extend_from_slice(&max_timestamp.to_be_bytes());
    out.extend_from_slice(&spec.producer_id.to_be_bytes());
    out.extend_from_slice(&spec.producer_epoch.to_be_bytes());
    out.extend_from_slice(&spec.base_sequence.to_be_bytes());
    out.extend_from_slice(&(last_offset_delta + 1).to_be_bytes());
    out.extend_from_slice(&records_bytes);
    let crc = crc32c::crc32c(out.get(V2_CRC_START..).unwrap_or_default());
    if let Some(slot) = out.get_mut(17..21) {
        slot.copy_from_slice(&crc.to_be_bytes());
    }
    Ok(out)
}

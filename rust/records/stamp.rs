//! The leader's in-place stamping of produced batches (Kafka's `LogValidator` for magic v2 batches
//! that need no conversion, and `MemoryRecords` `setLastOffset` / `setPartitionLeaderEpoch`): each
//! batch gets its base offset and the leader's epoch written into its header. The CRC-32C starts at
//! the attributes, after both fields, so it stays valid and the records are not touched.

use super::batch::{verify_crc, BatchCursor};
use crate::{Error, Result};

/// What the stamped batches hold: the append's last offset, how many records, the largest timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamped {
    pub last_offset: i64,
    pub record_count: i64,
    pub max_timestamp: i64,
}

/// Check `data` is whole, CRC-valid magic v2 batches (at least one), then stamp them in place with
/// consecutive offsets from `base_offset` and `partition_leader_epoch`. Nothing is written unless
/// every batch is valid.
pub fn stamp_batches(
    data: &mut [u8],
    base_offset: i64,
    partition_leader_epoch: i32,
) -> Result<Stamped> {
    if base_offset < 0 {
        return Err(Error::invalid(format!(
            "negative base offset {base_offset}"
        )));
    }
    let mut spans = Vec::new();
    let mut next = base_offset;
    let mut record_count: i64 = 0;
    let mut max_timestamp = -1;
    let mut cursor = BatchCursor::new(data, 0, false);
    while let Some(frame) = cursor.next()? {
        let h = frame.header;
        if h.magic != 2 {
            return Err(Error::corrupt(
                h.file_position,
                format!(
                    "magic {} batch in a produce request (v3+ sends magic 2)",
                    h.magic
                ),
            ));
        }
        verify_crc(&frame)?;
        // A producer's batch holds offset deltas 0..count-1 (LogValidator rejects anything else).
        if i64::from(h.records_count) != i64::from(h.last_offset_delta) + 1 {
            return Err(Error::corrupt(
                h.file_position,
                format!(
                    "{} records but last offset delta {}",
                    h.records_count, h.last_offset_delta
                ),
            ));
        }
        spans.push((h.file_position as usize, next));
        next = next
            .checked_add(i64::from(h.last_offset_delta) + 1)
            .ok_or_else(|| Error::corrupt(h.file_position, "offsets overflow i64"))?;
        record_count += i64::from(h.records_count);
        max_timestamp = max_timestamp.max(h.max_timestamp);
    }
    if spans.is_empty() {
        return Err(Error::corrupt(0, "no record batch"));
    }
    for (at, offset) in spans {
        if let Some(field) = data.get_mut(at..at + 8) {
            field.copy_from_slice(&offset.to_be_bytes());
        }
        if let Some(field) = data.get_mut(at + 12..at + 16) {
            field.copy_from_slice(&partition_leader_epoch.to_be_bytes());
        }
    }
    Ok(Stamped {
        last_offset: next - 1,
        record_count,
        max_timestamp,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::records::{decode_batches, encode_batch, BatchSpec, DecodeOptions, NewRecord};

    fn batch(records: usize, first_ts: i64) -> Vec<u8> {
        let values: Vec<Vec<u8>> = (0..records).map(|i| vec![i as u8; 3]).collect();
        let recs: Vec<NewRecord<'_>> = values
            .iter()
            .enumerate()
            .map(|(i, v)| NewRecord {
                key: None,
                value: Some(v),
                headers: vec![],
                timestamp: Some(first_ts + i as i64),
            })
            .collect();
        encode_batch(&BatchSpec::default(), &recs).unwrap()
    }

    #[test]
    fn stamps_offsets_and_epoch_and_keeps_crc_valid() {
        let mut data = batch(3, 1000);
        data.extend(batch(2, 5000));
        let stamped = stamp_batches(&mut data, 40, 7).unwrap();
        assert_eq!(
            stamped,
            Stamped {
                last_offset: 44,
                record_count: 5,
                max_timestamp: 5001
            }
        );
        let (batches, _) = decode_batches(&data, 0, DecodeOptions::default()).unwrap();
        let offsets: Vec<i64> = batches
            .iter()
            .flat_map(|b| b.records.iter().map(|r| r.offset))
            .collect();
        assert_eq!(offsets, vec![40, 41, 42, 43, 44]);
        assert!(batches.iter().all(|b| b.header.partition_leader_epoch == 7));
    }

    #[test]
    fn refuses_bad_crc_partial_tail_and_empty_input_without_writing() {
        let mut data = batch(2, 0);
        let last = data.len() - 1;
        data[last] ^= 1;
        let before = data.clone();
        assert!(matches!(
            stamp_batches(&mut data, 5, 1),
            Err(Error::Corrupt { .. })
        ));
        assert_eq!(data, before, "nothing written when a batch is bad");
        let mut partial = batch(2, 0);
        partial.truncate(partial.len() - 1);
        assert!(matches!(
            stamp_batches(&mut partial, 5, 1),
            Err(Error::Corrupt { .. })
        ));
        assert!(matches!(
            stamp_batches(&mut [], 5, 1),
            Err(Error::Corrupt { .. })
        ));
    }
}

//! The header-only pass: every batch's header, one Arrow row per batch, without reading records.
//!
//! Kafka's followers copy their leader's batches byte for byte, so two replicas that agree hold the
//! same batches at the same offsets with the same CRC (which covers every record of the batch):
//! comparing replicas needs their batch headers, not their records. This pass reads each batch's
//! first [`V2_HEADER_SIZE`] bytes (a legacy magic 0/1 message: its message header) and seeks to the
//! next batch. With `verify_crc` it also reads every batch's bytes to check its stored CRC (still no
//! decompression, no record parsing): a batch whose bytes no longer match its CRC is then an error
//! at its position, as [`super::Decoder`] reports it.
//!
//! Legacy wrappers are reported as they are framed (magic 0/1; `base_offset` is the message's own
//! offset, for a compressed wrapper its last inner offset; `records_count` 1, the inner count being
//! known only once decompressed): a comparison that needs their records falls back to decoding.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Int16Array, Int32Array, Int64Array, Int8Array, RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::arrow::ArrowDecoded;
use super::batch::{verify_crc, BatchCursor, BatchHeader};
use super::compression::Compression;
use crate::{Error, Result};

/// The batches of an input, header fields only, and where an incomplete last batch starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderScan {
    pub headers: Vec<BatchHeader>,
    pub partial_tail: Option<u64>,
}

/// Every batch header of `data` (its first byte at absolute `base_position`): the same batches,
/// errors and partial tail as [`BatchCursor`] over the same bytes; with `verify_crc` each batch's
/// CRC is checked as well.
pub fn scan_headers(
    data: &[u8],
    base_position: u64,
    verify: bool,
    allow_partial_tail: bool,
) -> Result<HeaderScan> {
    let mut cursor = BatchCursor::new(data, base_position, allow_partial_tail);
    let mut headers = Vec::new();
    while let Some(frame) = cursor.next()? {
        if verify {
            verify_crc(&frame)?;
        }
        headers.push(frame.header);
    }
    Ok(HeaderScan {
        headers,
        partial_tail: cursor.partial_tail(),
    })
}

/// The columns of [`headers_arrow`], one row per batch.
pub const HEADER_COLUMNS: [(&str, DataType); 14] = [
    ("batch_position", DataType::Int64),
    ("batch_size", DataType::Int32),
    ("base_offset", DataType::Int64),
    ("last_offset", DataType::Int64),
    ("partition_leader_epoch", DataType::Int32),
    ("magic", DataType::Int8),
    // The stored CRC (CRC-32C for magic 2, CRC-32 for legacy), as an unsigned 32-bit value.
    ("crc", DataType::Int64),
    ("attributes", DataType::Int16),
    ("compression", DataType::Utf8),
    ("is_transactional", DataType::Boolean),
    ("is_control", DataType::Boolean),
    ("records_count", DataType::Int32),
    ("producer_id", DataType::Int64),
    ("max_timestamp", DataType::Int64),
];

/// The schema of [`headers_arrow`].
pub fn headers_schema() -> SchemaRef {
    Arc::new(Schema::new(
        HEADER_COLUMNS
            .iter()
            .map(|(name, t)| Field::new(*name, t.clone(), false))
            .collect::<Vec<_>>(),
    ))
}

/// A scan as one Arrow batch (one row per batch header).
pub fn headers_arrow(scan: &HeaderScan) -> Result<ArrowDecoded> {
    let h = &scan.headers;
    fn col<T, A, F>(h: &[BatchHeader], f: F) -> ArrayRef
    where
        A: From<Vec<T>> + arrow_array::Array + 'static,
        F: Fn(&BatchHeader) -> T,
    {
        Arc::new(A::from(h.iter().map(f).collect::<Vec<T>>()))
    }
    let columns: Vec<ArrayRef> = vec![
        col::<i64, Int64Array, _>(h, |b| b.file_position as i64),
        col::<i32, Int32Array, _>(h, |b| b.size_in_bytes as i32),
        col::<i64, Int64Array, _>(h, |b| b.base_offset),
        col::<i64, Int64Array, _>(h, BatchHeader::last_offset),
        col::<i32, Int32Array, _>(h, |b| b.partition_leader_epoch),
        col::<i8, Int8Array, _>(h, |b| b.magic),
        col::<i64, Int64Array, _>(h, |b| i64::from(b.crc)),
        col::<i16, Int16Array, _>(h, |b| b.attributes),
        Arc::new(StringArray::from(
            h.iter()
                .map(|b| b.compression().unwrap_or(Compression::None).name())
                .collect::<Vec<_>>(),
        )),
        Arc::new(BooleanArray::from(
            h.iter()
                .map(BatchHeader::is_transactional)
                .collect::<Vec<_>>(),
        )),
        Arc::new(BooleanArray::from(
            h.iter().map(BatchHeader::is_control).collect::<Vec<_>>(),
        )),
        col::<i32, Int32Array, _>(h, |b| b.records_count),
        col::<i64, Int64Array, _>(h, |b| b.producer_id),
        col::<i64, Int64Array, _>(h, |b| b.max_timestamp),
    ];
    let schema = headers_schema();
    let batch = RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| Error::invalid(format!("building the header columns: {e}")))?;
    Ok(ArrowDecoded {
        schema,
        batches: vec![batch],
        partial_tail: scan.partial_tail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{batch_index, encode_batch, BatchSpec, NewRecord};

    fn batch(base_offset: i64, epoch: i32, n: usize, compression: Compression) -> Vec<u8> {
        let value = vec![b'v'; 100];
        let records: Vec<NewRecord<'_>> = (0..n)
            .map(|_| NewRecord {
                value: Some(&value),
                ..NewRecord::default()
            })
            .collect();
        let spec = BatchSpec {
            base_offset,
            partition_leader_epoch: epoch,
            compression,
            ..BatchSpec::default()
        };
        encode_batch(&spec, &records).unwrap_or_default()
    }

    fn log() -> Vec<u8> {
        let mut out = batch(0, 0, 3, Compression::None);
        out.extend(batch(3, 1, 5, Compression::Zstd));
        out.extend(batch(8, 4, 1, Compression::Gzip));
        out
    }

    #[test]
    fn every_header_field_of_every_batch_as_the_cursor_reads_it() {
        let data = log();
        let scan = scan_headers(&data, 0, true, false).unwrap_or_default();
        let firsts: Vec<_> = scan
            .headers
            .iter()
            .map(|h| {
                (
                    h.base_offset,
                    h.last_offset(),
                    h.partition_leader_epoch,
                    h.records_count,
                )
            })
            .collect();
        assert_eq!(firsts, [(0, 2, 0, 3), (3, 7, 1, 5), (8, 8, 4, 1)]);
        let (index, _) = batch_index(&data, 0, false).unwrap_or_default();
        let positions: Vec<_> = scan.headers.iter().map(|h| h.file_position).collect();
        let want: Vec<_> = index.iter().map(|l| l.file_position).collect();
        assert_eq!(positions, want);
        let arrow = headers_arrow(&scan).unwrap_or_else(|e| panic!("{e}"));
        let b = &arrow.batches[0];
        assert_eq!(b.num_rows(), 3);
        assert_eq!(b.schema(), headers_schema());
        let codec = b
            .column(8)
            .as_any()
            .downcast_ref::<StringArray>()
            .map(|a| a.value(1).to_owned());
        assert_eq!(codec.as_deref(), Some("zstd"));
    }

    #[test]
    fn a_crc_is_checked_only_when_asked() {
        let mut data = log();
        let second = batch(0, 0, 3, Compression::None).len();
        let last = data.len() - 1;
        data[last] ^= 0xFF; // a byte of the last batch's records
        assert_eq!(
            scan_headers(&data, 0, false, false)
                .map(|s| s.headers.len())
                .ok(),
            Some(3)
        );
        match scan_headers(&data, 0, true, false) {
            Err(Error::Corrupt { position, reason }) => {
                assert!(position > second as u64, "{position}");
                assert!(reason.contains("CRC"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_incomplete_last_batch_is_a_partial_tail_or_an_error() {
        let data = log();
        let cut = &data[..data.len() - 5];
        let scan = scan_headers(cut, 100, false, true).unwrap_or_default();
        assert_eq!(scan.headers.len(), 2);
        let last = scan
            .headers
            .last()
            .map(|h| h.file_position + u64::from(h.size_in_bytes));
        assert_eq!(scan.partial_tail, last);
        assert!(scan_headers(cut, 100, false, false).is_err());
    }
}

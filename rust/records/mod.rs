//! Kafka record batches: decode magic v2 batches and legacy magic 0/1 message sets (every codec,
//! CRC-checked, size-capped), encode v2 batches, and export decoded records as Arrow columns.
//!
//! Entry points: [`BatchCursor`] cuts bytes into batches (header only), [`Decoder`] decodes one
//! batch's records into a [`RecordSink`], [`decode_batches`] / [`arrow::decode_arrow`] do a whole
//! input, [`encode::encode_batch`] writes a batch.

pub mod arrow;
pub mod batch;
pub mod compression;
pub mod digest;
pub mod encode;
pub mod headers;
mod legacy;
pub mod produce;
pub mod reader;
pub mod record;
pub mod stamp;
pub mod varint;

pub use arrow::Column;
pub use batch::{BatchCursor, BatchHeader, Frame};
pub use compression::Compression;
pub use encode::{encode_batch, BatchSpec, NewRecord};
pub use record::{Header, RecordSink, RecordView, Records, Slot};

use record::PayloadPos;

use crate::Result;

/// Default cap on one batch's decompressed records (64 MiB).
pub const DEFAULT_MAX_DECOMPRESSED_SIZE: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Check every batch's (and legacy inner message's) CRC.
    pub verify_crc: bool,
    /// Report an incomplete last batch instead of failing.
    pub allow_partial_tail: bool,
    /// Largest decompressed records payload of one batch; more is a `Corrupt` error.
    pub max_decompressed_size: usize,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            verify_crc: true,
            allow_partial_tail: false,
            max_decompressed_size: DEFAULT_MAX_DECOMPRESSED_SIZE,
        }
    }
}

/// Decodes batches' records, reusing one decompression buffer across batches.
#[derive(Debug, Default)]
pub struct Decoder {
    opts: DecodeOptions,
    decompressor: compression::Decompressor,
    scratch: record::Scratch,
}

impl Decoder {
    pub fn new(opts: DecodeOptions) -> Self {
        Decoder {
            opts,
            decompressor: compression::Decompressor::new(),
            scratch: record::Scratch::default(),
        }
    }

    pub fn options(&self) -> &DecodeOptions {
        &self.opts
    }

    /// Verify (CRC), decompress and decode `frame`'s records into `sink`. Returns the header, with
    /// `records_count` filled in for legacy wrappers (their count is only known after decoding).
    pub fn decode<S: RecordSink>(
        &mut self,
        frame: &Frame<'_>,
        sink: &mut S,
    ) -> Result<BatchHeader> {
        self.decode_into(frame, sink, None)
    }

    /// [`Decoder::decode`], a compressed v2 batch decompressed after the output `out` already holds
    /// (not into the decoder's own reused buffer), so its records' bytes stay where they are decoded:
    /// the sink learns where through [`RecordSink::payload_region`]. For output that keeps the
    /// decompressed bytes (Arrow views into `out`).
    pub fn decode_appending<S: RecordSink>(
        &mut self,
        frame: &Frame<'_>,
        sink: &mut S,
        out: &mut compression::Appended,
    ) -> Result<BatchHeader> {
        self.decode_into(frame, sink, Some(out))
    }

    fn decode_into<S: RecordSink>(
        &mut self,
        frame: &Frame<'_>,
        sink: &mut S,
        out: Option<&mut compression::Appended>,
    ) -> Result<BatchHeader> {
        sink.payload_region(None);
        if self.opts.verify_crc {
            batch::verify_crc(frame)?;
        }
        let h = &frame.header;
        if h.magic < 2 {
            return legacy::decode_legacy(frame, &self.opts, &mut self.decompressor, sink);
        }
        if h.records_count == 0 {
            // Like Kafka's `DefaultRecordBatch.iterator()`: an empty batch (left by compaction to
            // keep producer state) has nothing to decompress, whatever its codec bits say.
            return Ok(*h);
        }
        let records = frame.bytes.get(batch::V2_HEADER_SIZE..).unwrap_or_default();
        let records_at = h.file_position + batch::V2_HEADER_SIZE as u64;
        let cap = self.opts.max_decompressed_size;
        let pos = PayloadPos {
            batch: h.file_position,
            start: None,
        };
        match (h.compression(), out) {
            (Some(Compression::None) | None, _) => record::decode_v2(
                h,
                records,
                PayloadPos {
                    batch: h.file_position,
                    start: Some(records_at),
                },
                sink,
                &mut self.scratch,
            )?,
            (Some(codec), None) => {
                let payload = self
                    .decompressor
                    .decompress(codec, records, cap, false)
                    .map_err(|e| crate::Error::corrupt(records_at, e.reason(codec)))?;
                record::decode_v2(h, payload, pos, sink, &mut self.scratch)?
            }
            (Some(codec), Some(out)) => {
                let range = self
                    .decompressor
                    .decompress_append(codec, records, cap, false, out)
                    .map_err(|e| crate::Error::corrupt(records_at, e.reason(codec)))?;
                let whole = out.output();
                sink.payload_region(Some(whole));
                let records = whole.get(range).unwrap_or_default();
                record::decode_v2(h, records, pos, sink, &mut self.scratch)?
            }
        }
        Ok(*h)
    }
}

/// A record with owned bytes (see [`RecordView`] for the fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl From<&RecordView<'_, '_>> for OwnedRecord {
    fn from(r: &RecordView<'_, '_>) -> Self {
        OwnedRecord {
            offset: r.offset,
            timestamp: r.timestamp,
            attributes: r.attributes,
            timestamp_delta: r.timestamp_delta,
            offset_delta: r.offset_delta,
            key: r.key.map(<[u8]>::to_vec),
            value: r.value.map(<[u8]>::to_vec),
            headers: r
                .headers
                .iter()
                .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                .collect(),
        }
    }
}

/// A batch with its records decoded and owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedBatch {
    pub header: BatchHeader,
    pub records: Vec<OwnedRecord>,
}

impl RecordSink for Vec<OwnedRecord> {
    fn begin_batch(
        &mut self,
        _header: &BatchHeader,
        records: usize,
        _payload_len: usize,
    ) -> Result<()> {
        self.reserve(records);
        Ok(())
    }
    fn record(&mut self, _header: &BatchHeader, record: &RecordView<'_, '_>) -> Result<()> {
        self.push(record.into());
        Ok(())
    }
}

/// Decode the next batch of `cursor` with owned records; `None` at the end.
pub fn next_decoded(
    cursor: &mut BatchCursor<'_>,
    decoder: &mut Decoder,
) -> Result<Option<DecodedBatch>> {
    let Some(frame) = cursor.next()? else {
        return Ok(None);
    };
    let mut records = Vec::new();
    let header = decoder.decode(&frame, &mut records)?;
    Ok(Some(DecodedBatch { header, records }))
}

/// Decode every batch of `data` (whose first byte is at absolute `base_position`). Returns the
/// batches and the position of a tolerated partial tail.
pub fn decode_batches(
    data: &[u8],
    base_position: u64,
    opts: DecodeOptions,
) -> Result<(Vec<DecodedBatch>, Option<u64>)> {
    let mut cursor =
        BatchCursor::new(data, base_position, opts.allow_partial_tail).crc_first(opts.verify_crc);
    let mut decoder = Decoder::new(opts);
    let mut out = Vec::new();
    while let Some(batch) = next_decoded(&mut cursor, &mut decoder)? {
        out.push(batch);
    }
    Ok((out, cursor.partial_tail()))
}

/// One entry of [`batch_index`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLocation {
    pub file_position: u64,
    pub size_in_bytes: u32,
    pub base_offset: i64,
    pub last_offset: i64,
}

impl BatchLocation {
    pub fn of(h: &BatchHeader) -> Self {
        BatchLocation {
            file_position: h.file_position,
            size_in_bytes: h.size_in_bytes,
            base_offset: h.base_offset,
            last_offset: h.last_offset(),
        }
    }
}

/// Header-only scan (no CRC check, no decompression): where each batch is and which offsets it
/// holds. For batch-aligned byte ranges to decode in parallel. Returns the partial tail too.
pub fn batch_index(
    data: &[u8],
    base_position: u64,
    allow_partial_tail: bool,
) -> Result<(Vec<BatchLocation>, Option<u64>)> {
    let mut cursor = BatchCursor::new(data, base_position, allow_partial_tail);
    let mut out = Vec::new();
    while let Some(frame) = cursor.next()? {
        out.push(BatchLocation::of(&frame.header));
    }
    Ok((out, cursor.partial_tail()))
}

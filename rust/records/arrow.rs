//! Records as Arrow columns, built straight from the decoded bytes (one row per record; batch
//! fields repeated on every row). No per-record allocation: keys, values and headers are appended
//! to flat buffers; chunks are cut between batches so binary offsets stay within `i32`.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Int16Array, Int32Array, Int64Array, Int8Array, ListArray,
    RecordBatch, StringArray, StructArray,
};
use arrow_buffer::{BooleanBufferBuilder, Buffer, NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema, SchemaRef};

use super::batch::{BatchCursor, BatchHeader};
use super::record::{RecordSink, RecordView};
use super::{DecodeOptions, Decoder};
use crate::{Error, Result};

/// Start a new Arrow chunk once this many rows or key/value/header bytes have accumulated. Chunks
/// of a few MiB keep offsets far from `i32::MAX` and stay under glibc's 32 MiB mmap threshold, so
/// their memory is recycled instead of page-faulted in afresh on every decode.
const CHUNK_ROWS: usize = 1 << 20;
const CHUNK_BYTES: usize = 8 << 20;

fn header_fields() -> Fields {
    Fields::from(vec![
        Field::new("key", DataType::Utf8, true),
        Field::new("value", DataType::Binary, true),
    ])
}

fn header_item() -> Arc<Field> {
    Arc::new(Field::new("item", DataType::Struct(header_fields()), true))
}

/// The schema of [`decode_arrow`]'s output (one row per record).
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("offset", DataType::Int64, false),
        Field::new("timestamp", DataType::Int64, false),
        Field::new("timestamp_type", DataType::Int8, false),
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
        Field::new("headers", DataType::List(header_item()), false),
        Field::new("leader_epoch", DataType::Int32, false),
        Field::new("batch_offset", DataType::Int64, false),
        Field::new("producer_id", DataType::Int64, false),
        Field::new("producer_epoch", DataType::Int16, false),
        Field::new("sequence", DataType::Int32, false),
        Field::new("is_transactional", DataType::Boolean, false),
        Field::new("is_control", DataType::Boolean, false),
        Field::new("magic", DataType::Int8, false),
    ]))
}

fn arrow_err(e: ArrowError) -> Error {
    Error::invalid(format!("building Arrow columns: {e}"))
}

fn offset_i32(len: usize) -> Result<i32> {
    i32::try_from(len).map_err(|_| {
        Error::invalid(
            "more than 2 GiB of binary data in one Arrow chunk; lower max_decompressed_size",
        )
    })
}

#[derive(Debug)]
struct BinaryColumn {
    offsets: Vec<i32>,
    data: Vec<u8>,
    nulls: NullBufferBuilder,
}

impl BinaryColumn {
    fn new() -> Self {
        BinaryColumn {
            offsets: vec![0],
            data: Vec::new(),
            nulls: NullBufferBuilder::new(0),
        }
    }
    fn reserve(&mut self, rows: usize) {
        self.offsets.reserve(rows);
    }
    #[inline]
    fn push(&mut self, value: Option<&[u8]>) -> Result<()> {
        match value {
            Some(v) => {
                self.data.extend_from_slice(v);
                self.nulls.append_non_null();
            }
            None => self.nulls.append_null(),
        }
        self.offsets.push(offset_i32(self.data.len())?);
        Ok(())
    }
    fn take(&mut self) -> (OffsetBuffer<i32>, Buffer, Option<arrow_buffer::NullBuffer>) {
        let offsets = std::mem::replace(&mut self.offsets, vec![0]);
        let data = std::mem::take(&mut self.data);
        (
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Buffer::from_vec(data),
            self.nulls.finish(),
        )
    }
    fn binary(&mut self) -> Result<BinaryArray> {
        let (offsets, data, nulls) = self.take();
        BinaryArray::try_new(offsets, data, nulls).map_err(arrow_err)
    }
    fn string(&mut self) -> Result<StringArray> {
        let (offsets, data, nulls) = self.take();
        StringArray::try_new(offsets, data, nulls).map_err(arrow_err)
    }
}

/// Column builders for one chunk; a [`RecordSink`].
#[derive(Debug)]
struct Columns {
    offset: Vec<i64>,
    timestamp: Vec<i64>,
    timestamp_type: Vec<i8>,
    key: BinaryColumn,
    value: BinaryColumn,
    header_offsets: Vec<i32>,
    header_key: BinaryColumn,
    header_value: BinaryColumn,
    leader_epoch: Vec<i32>,
    batch_offset: Vec<i64>,
    producer_id: Vec<i64>,
    producer_epoch: Vec<i16>,
    sequence: Vec<i32>,
    is_transactional: BooleanBufferBuilder,
    is_control: BooleanBufferBuilder,
    magic: Vec<i8>,
}

impl Columns {
    fn new() -> Self {
        Columns {
            offset: Vec::new(),
            timestamp: Vec::new(),
            timestamp_type: Vec::new(),
            key: BinaryColumn::new(),
            value: BinaryColumn::new(),
            header_offsets: vec![0],
            header_key: BinaryColumn::new(),
            header_value: BinaryColumn::new(),
            leader_epoch: Vec::new(),
            batch_offset: Vec::new(),
            producer_id: Vec::new(),
            producer_epoch: Vec::new(),
            sequence: Vec::new(),
            is_transactional: BooleanBufferBuilder::new(0),
            is_control: BooleanBufferBuilder::new(0),
            magic: Vec::new(),
        }
    }

    fn rows(&self) -> usize {
        self.offset.len()
    }

    fn bytes(&self) -> usize {
        self.key.data.len()
            + self.value.data.len()
            + self.header_key.data.len()
            + self.header_value.data.len()
    }

    fn finish(&mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        let header_struct = StructArray::try_new(
            header_fields(),
            vec![
                Arc::new(self.header_key.string()?) as ArrayRef,
                Arc::new(self.header_value.binary()?),
            ],
            None,
        )
        .map_err(arrow_err)?;
        let header_offsets = std::mem::replace(&mut self.header_offsets, vec![0]);
        let headers = ListArray::try_new(
            header_item(),
            OffsetBuffer::new(ScalarBuffer::from(header_offsets)),
            Arc::new(header_struct),
            None,
        )
        .map_err(arrow_err)?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::new(
                ScalarBuffer::from(std::mem::take(&mut self.offset)),
                None,
            )),
            Arc::new(Int64Array::new(
                ScalarBuffer::from(std::mem::take(&mut self.timestamp)),
                None,
            )),
            Arc::new(Int8Array::new(
                ScalarBuffer::from(std::mem::take(&mut self.timestamp_type)),
                None,
            )),
            Arc::new(self.key.binary()?),
            Arc::new(self.value.binary()?),
            Arc::new(headers),
            Arc::new(Int32Array::new(
                ScalarBuffer::from(std::mem::take(&mut self.leader_epoch)),
                None,
            )),
            Arc::new(Int64Array::new(
                ScalarBuffer::from(std::mem::take(&mut self.batch_offset)),
                None,
            )),
            Arc::new(Int64Array::new(
                ScalarBuffer::from(std::mem::take(&mut self.producer_id)),
                None,
            )),
            Arc::new(Int16Array::new(
                ScalarBuffer::from(std::mem::take(&mut self.producer_epoch)),
                None,
            )),
            Arc::new(Int32Array::new(
                ScalarBuffer::from(std::mem::take(&mut self.sequence)),
                None,
            )),
            Arc::new(BooleanArray::new(self.is_transactional.finish(), None)),
            Arc::new(BooleanArray::new(self.is_control.finish(), None)),
            Arc::new(Int8Array::new(
                ScalarBuffer::from(std::mem::take(&mut self.magic)),
                None,
            )),
        ];
        RecordBatch::try_new(schema.clone(), columns).map_err(arrow_err)
    }
}

impl RecordSink for Columns {
    fn begin_batch(&mut self, h: &BatchHeader, n: usize, payload_len: usize) -> Result<()> {
        // Keys and values are cut from the payload: it bounds their bytes (values dominate).
        self.value.data.reserve(payload_len);
        self.offset.reserve(n);
        self.timestamp.reserve(n);
        self.sequence.reserve(n);
        self.key.reserve(n);
        self.value.reserve(n);
        self.header_offsets.reserve(n);
        // Batch-level columns: the decoder emits exactly `n` records or fails.
        self.timestamp_type
            .extend(std::iter::repeat_n(h.timestamp_type(), n));
        self.leader_epoch
            .extend(std::iter::repeat_n(h.partition_leader_epoch, n));
        self.batch_offset
            .extend(std::iter::repeat_n(h.base_offset, n));
        self.producer_id
            .extend(std::iter::repeat_n(h.producer_id, n));
        self.producer_epoch
            .extend(std::iter::repeat_n(h.producer_epoch, n));
        self.is_transactional.append_n(n, h.is_transactional());
        self.is_control.append_n(n, h.is_control());
        self.magic.extend(std::iter::repeat_n(h.magic, n));
        Ok(())
    }

    #[inline]
    fn record(&mut self, h: &BatchHeader, r: &RecordView<'_, '_>) -> Result<()> {
        self.offset.push(r.offset);
        self.timestamp.push(r.timestamp);
        self.sequence.push(h.sequence_at(r.offset_delta));
        self.key.push(r.key)?;
        self.value.push(r.value)?;
        for header in r.headers {
            self.header_key.push(Some(header.key.as_bytes()))?;
            self.header_value.push(header.value)?;
        }
        self.header_offsets
            .push(offset_i32(self.header_key.offsets.len() - 1)?);
        Ok(())
    }
}

/// Decoded records as Arrow record batches (all sharing [`schema`]).
#[derive(Debug, Clone)]
pub struct ArrowDecoded {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
    pub partial_tail: Option<u64>,
}

impl ArrowDecoded {
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

/// Decode every batch of `data` (first byte at absolute `base_position`) into Arrow columns.
pub fn decode_arrow(data: &[u8], base_position: u64, opts: DecodeOptions) -> Result<ArrowDecoded> {
    let schema = schema();
    let mut cursor = BatchCursor::new(data, base_position, opts.allow_partial_tail);
    let mut decoder = Decoder::new(opts);
    let mut columns = Columns::new();
    let mut batches = Vec::new();
    while let Some(frame) = cursor.next()? {
        if columns.rows() >= CHUNK_ROWS || columns.bytes() >= CHUNK_BYTES {
            batches.push(columns.finish(&schema)?);
        }
        if columns.rows() == 0 {
            // One allocation for the chunk's values rather than a doubling series: sized from the
            // input left (x4 for compression), so a small input does not get a whole chunk.
            let consumed = (cursor.position() - base_position) as usize - frame.bytes.len();
            let left = data.len() - consumed;
            columns
                .value
                .data
                .reserve(left.saturating_mul(4).min(CHUNK_BYTES) + frame.bytes.len());
        }
        decoder.decode(&frame, &mut columns)?;
    }
    if columns.rows() > 0 || batches.is_empty() {
        batches.push(columns.finish(&schema)?);
    }
    Ok(ArrowDecoded {
        schema,
        batches,
        partial_tail: cursor.partial_tail(),
    })
}

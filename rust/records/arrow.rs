//! Records as Arrow columns, built straight from the decoded bytes (one row per record; batch
//! fields repeated on every row). No per-record allocation: keys, values and headers are appended
//! to flat buffers; chunks are cut between batches so binary offsets stay within `i32`.
//!
//! A decode is projected: the caller names the [`Column`]s it wants and the sink holds a builder for
//! those alone, so a column not asked for is never built (a `count(*)` copies no value byte). Every
//! projection parses and validates the same bytes, so it accepts and rejects exactly what the full
//! decode does.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BinaryArray, BinaryViewArray, BooleanArray, Int32Array, ListArray, RecordBatch,
    RecordBatchOptions, StringArray, StructArray,
};
use arrow_buffer::{BooleanBufferBuilder, Buffer, NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema, SchemaRef};

use super::batch::{BatchCursor, BatchHeader, Frame};
use super::compression::{Appended, Compression};
use super::digest::record_digest;
use super::record::{RecordSink, RecordView, Records, Slot};
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

/// One output column: a field of the record or its batch, or a value computed from the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Column {
    Offset,
    Timestamp,
    TimestampType,
    Key,
    Value,
    Headers,
    LeaderEpoch,
    BatchOffset,
    ProducerId,
    ProducerEpoch,
    Sequence,
    IsTransactional,
    IsControl,
    Magic,
    /// Bytes of the key, null for a null key (Spark's `length(key)`).
    KeyLength,
    /// Bytes of the value, null for a null value.
    ValueLength,
    HeadersCount,
    /// [`record_digest`] of key, value and headers; the u64 stored as Int64 (same bits), since
    /// Spark has no unsigned 64-bit type.
    RecordDigest,
    /// Absolute byte position of the record's batch, and its size: the range to re-decode it from.
    BatchPosition,
    BatchSize,
}

impl Column {
    /// The record columns of a full decode, in order.
    pub const RECORD: [Column; 14] = [
        Column::Offset,
        Column::Timestamp,
        Column::TimestampType,
        Column::Key,
        Column::Value,
        Column::Headers,
        Column::LeaderEpoch,
        Column::BatchOffset,
        Column::ProducerId,
        Column::ProducerEpoch,
        Column::Sequence,
        Column::IsTransactional,
        Column::IsControl,
        Column::Magic,
    ];
    /// Columns computed from a record or its batch, not stored as such.
    pub const COMPUTED: [Column; 6] = [
        Column::KeyLength,
        Column::ValueLength,
        Column::HeadersCount,
        Column::RecordDigest,
        Column::BatchPosition,
        Column::BatchSize,
    ];

    pub fn all() -> impl Iterator<Item = Column> {
        Column::RECORD.into_iter().chain(Column::COMPUTED)
    }

    pub fn name(self) -> &'static str {
        match self {
            Column::Offset => "offset",
            Column::Timestamp => "timestamp",
            Column::TimestampType => "timestamp_type",
            Column::Key => "key",
            Column::Value => "value",
            Column::Headers => "headers",
            Column::LeaderEpoch => "leader_epoch",
            Column::BatchOffset => "batch_offset",
            Column::ProducerId => "producer_id",
            Column::ProducerEpoch => "producer_epoch",
            Column::Sequence => "sequence",
            Column::IsTransactional => "is_transactional",
            Column::IsControl => "is_control",
            Column::Magic => "magic",
            Column::KeyLength => "key_length",
            Column::ValueLength => "value_length",
            Column::HeadersCount => "headers_count",
            Column::RecordDigest => "record_digest",
            Column::BatchPosition => "batch_position",
            Column::BatchSize => "batch_size",
        }
    }

    pub fn from_name(name: &str) -> Option<Column> {
        Column::all().find(|c| c.name() == name)
    }

    /// Parse a projection: known names, each at most once.
    pub fn parse_list<S: AsRef<str>>(names: &[S]) -> Result<Vec<Column>> {
        let mut out: Vec<Column> = Vec::with_capacity(names.len());
        for name in names {
            let name = name.as_ref();
            let column = Column::from_name(name).ok_or_else(|| {
                let known: Vec<&str> = Column::all().map(Column::name).collect();
                Error::invalid(format!(
                    "unknown column {name:?} (known: {})",
                    known.join(", ")
                ))
            })?;
            if out.contains(&column) {
                return Err(Error::invalid(format!(
                    "column {name:?} is asked for twice"
                )));
            }
            out.push(column);
        }
        Ok(out)
    }

    fn data_type(self) -> DataType {
        match self {
            Column::Offset
            | Column::Timestamp
            | Column::BatchOffset
            | Column::ProducerId
            | Column::RecordDigest
            | Column::BatchPosition => DataType::Int64,
            Column::LeaderEpoch
            | Column::Sequence
            | Column::KeyLength
            | Column::ValueLength
            | Column::HeadersCount
            | Column::BatchSize => DataType::Int32,
            Column::TimestampType | Column::Magic => DataType::Int8,
            Column::ProducerEpoch => DataType::Int16,
            Column::Key | Column::Value => DataType::Binary,
            Column::Headers => DataType::List(header_item()),
            Column::IsTransactional | Column::IsControl => DataType::Boolean,
        }
    }

    fn nullable(self) -> bool {
        matches!(
            self,
            Column::Key | Column::Value | Column::KeyLength | Column::ValueLength
        )
    }

    pub fn field(self) -> Field {
        Field::new(self.name(), self.data_type(), self.nullable())
    }

    /// The column's field in `layout`: keys and values as `BinaryView` under [`Layout::BinaryView`].
    pub fn field_in(self, layout: Layout) -> Field {
        match (self, layout) {
            (Column::Key | Column::Value, Layout::BinaryView) => {
                Field::new(self.name(), DataType::BinaryView, true)
            }
            _ => self.field(),
        }
    }
}

/// How keys and values are laid out in Arrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// `binary`: every key and value copied into one contiguous data buffer per chunk.
    #[default]
    Binary,
    /// `binary_view`: 16-byte views pointing into the input (uncompressed batches of an input
    /// handed over as a [`Buffer`]) or into the chunk's decompression buffer (compressed batches),
    /// those buffers the arrays' data buffers: no value byte copied. Values that lie in neither (a
    /// file read in pieces, legacy messages) are copied into a third buffer. Header values stay `binary`.
    BinaryView,
}

/// The schema of a decode projected to `columns`.
pub fn projected_schema(columns: &[Column]) -> SchemaRef {
    projected_schema_in(columns, Layout::Binary)
}

/// The schema of a decode projected to `columns` in `layout`.
pub fn projected_schema_in(columns: &[Column], layout: Layout) -> SchemaRef {
    Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| c.field_in(layout))
            .collect::<Vec<_>>(),
    ))
}

/// The schema of [`decode_arrow`]'s output (one row per record, [`Column::RECORD`]).
pub fn schema() -> SchemaRef {
    projected_schema(&Column::RECORD)
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
    /// Append `values` (one per record, null or bytes): the bytes copied back to back, an offset
    /// each, the null mask in one step when none is null (the common case).
    #[inline]
    fn extend<'v>(&mut self, values: impl Iterator<Item = Option<&'v [u8]>> + Clone) -> Result<()> {
        append_validity(&mut self.nulls, values.clone());
        for value in values {
            if let Some(v) = value {
                self.data.extend_from_slice(v);
            }
            // Wraps only past 2 GiB, which the check below then rejects (the chunk is dropped).
            self.offsets.push(self.data.len() as i32);
        }
        // Offsets only grow: the last one fitting an i32 means every one does.
        offset_i32(self.data.len()).map(drop)
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

/// Data buffer indices of a view column's chunk: the input, the decompression buffer, copied values.
const INPUT_BUFFER: u32 = 0;
const DECOMPRESSED_BUFFER: u32 = 1;
const COPIED_BUFFER: u32 = 2;

/// Bytes by address (never dereferenced: only compared), to tell where a value's bytes lie.
#[derive(Debug, Clone, Copy, Default)]
struct Region {
    start: usize,
    len: usize,
}

impl Region {
    fn of(bytes: &[u8]) -> Self {
        Region {
            start: bytes.as_ptr() as usize,
            len: bytes.len(),
        }
    }

    /// Where `v` starts in the region, if all of it lies inside and the offset fits a view (int32).
    #[inline]
    fn offset_of(self, v: &[u8]) -> Option<u32> {
        let at = (v.as_ptr() as usize).checked_sub(self.start)?;
        if at.checked_add(v.len())? > self.len {
            return None;
        }
        u32::try_from(at).ok().filter(|&o| o <= i32::MAX as u32)
    }
}

/// Where the current batch's values may be pointed at: the input (data buffer 0, for the whole
/// decode) and the current compressed batch's decompressed records (inside data buffer 1).
#[derive(Debug, Clone, Copy, Default)]
struct Regions {
    input: Region,
    decompressed: Region,
}

/// Record which of `values` are null: in one step when none is (the common case), a bit a value
/// otherwise.
#[inline]
fn append_validity<'v>(
    nulls: &mut NullBufferBuilder,
    values: impl Iterator<Item = Option<&'v [u8]>> + Clone,
) {
    if values.clone().all(|v| v.is_some()) {
        nulls.append_n_non_nulls(values.count());
    } else {
        for v in values {
            nulls.append(v.is_some());
        }
    }
}

/// The view of `v`: inline up to 12 bytes, else pointing into the input or the decompression buffer
/// when `v` lies inside one, else into `copied` (where `v` is then copied).
#[inline(always)]
fn view_of(v: &[u8], regions: &Regions, copied: &mut Vec<u8>) -> Result<u128> {
    let len = offset_i32(v.len())? as u32;
    Ok(match v.first_chunk::<4>() {
        Some(prefix) if v.len() > 12 => {
            let (buffer, offset) = if let Some(at) = regions.input.offset_of(v) {
                (INPUT_BUFFER, at)
            } else if let Some(at) = regions.decompressed.offset_of(v) {
                (DECOMPRESSED_BUFFER, at)
            } else {
                let at = offset_i32(copied.len())? as u32;
                offset_i32(copied.len() + v.len())?;
                copied.extend_from_slice(v);
                (COPIED_BUFFER, at)
            };
            u128::from(len)
                | u128::from(u32::from_le_bytes(*prefix)) << 32
                | u128::from(buffer) << 64
                | u128::from(offset) << 96
        }
        _ => {
            let mut inline = [0u8; 16];
            if let Some(dst) = inline.get_mut(4..4 + v.len()) {
                dst.copy_from_slice(v);
            }
            u128::from_le_bytes(inline) | u128::from(len)
        }
    })
}

/// A `BinaryView` column: views of at most 12 bytes hold the value inline; longer ones point into
/// the input, the decompression buffer or, for bytes found in neither, a buffer of copies.
#[derive(Debug)]
struct ViewColumn {
    views: Vec<u128>,
    nulls: NullBufferBuilder,
    copied: Vec<u8>,
}

impl ViewColumn {
    fn new() -> Self {
        ViewColumn {
            views: Vec::new(),
            nulls: NullBufferBuilder::new(0),
            copied: Vec::new(),
        }
    }

    /// Append `values` (one per record).
    #[inline]
    fn extend<'v>(
        &mut self,
        values: impl Iterator<Item = Option<&'v [u8]>> + Clone,
        regions: &Regions,
    ) -> Result<()> {
        append_validity(&mut self.nulls, values.clone());
        for value in values {
            let view = match value {
                Some(v) => view_of(v, regions, &mut self.copied)?,
                None => 0,
            };
            self.views.push(view);
        }
        Ok(())
    }

    /// The chunk's array; `input` and `decompressed` are the buffers the regions were taken from.
    fn finish(&mut self, input: &Buffer, decompressed: &Buffer) -> BinaryViewArray {
        let views = ScalarBuffer::from(std::mem::take(&mut self.views));
        let buffers = vec![
            input.clone(),
            decompressed.clone(),
            Buffer::from_vec(std::mem::take(&mut self.copied)),
        ];
        // SAFETY: `push` makes a view point into a buffer only after checking that the value's
        // bytes lie wholly inside that buffer's region (the input: the whole of `input`; a
        // decompressed batch: a prefix of the output that becomes `decompressed`, which only grows
        // within a chunk), with an offset below 2^31; the prefix is the value's first 4 bytes, and
        // inline views are zero-padded. That is every condition of `BinaryViewArray::try_new`;
        // the tests and the `decode_views` fuzz target check it with a full validation.
        unsafe { BinaryViewArray::new_unchecked(views, buffers, self.nulls.finish()) }
    }
}

/// Lengths of a nullable binary field (null stays null).
#[derive(Debug)]
struct LengthColumn {
    values: Vec<i32>,
    nulls: NullBufferBuilder,
}

impl LengthColumn {
    fn new() -> Self {
        LengthColumn {
            values: Vec::new(),
            nulls: NullBufferBuilder::new(0),
        }
    }
    #[inline]
    fn push(&mut self, value: Option<&[u8]>) -> Result<()> {
        match value {
            Some(v) => {
                self.values.push(offset_i32(v.len())?);
                self.nulls.append_non_null();
            }
            None => {
                self.values.push(0);
                self.nulls.append_null();
            }
        }
        Ok(())
    }
    fn finish(&mut self) -> Int32Array {
        Int32Array::new(
            ScalarBuffer::from(std::mem::take(&mut self.values)),
            self.nulls.finish(),
        )
    }
}

/// A `list<struct<key: string, value: binary>>` of every record's headers.
#[derive(Debug)]
struct HeaderColumn {
    offsets: Vec<i32>,
    key: BinaryColumn,
    value: BinaryColumn,
}

impl HeaderColumn {
    fn new() -> Self {
        HeaderColumn {
            offsets: vec![0],
            key: BinaryColumn::new(),
            value: BinaryColumn::new(),
        }
    }
    /// Append the headers of a run of records: `records.headers` holds them all in record order
    /// and each slot's range ends where its record's headers end.
    #[inline]
    fn extend(&mut self, records: &Records<'_, '_>) -> Result<()> {
        let base = self.key.offsets.len() - 1;
        self.key
            .extend(records.headers.iter().map(|h| Some(h.key.as_bytes())))?;
        self.value.extend(records.headers.iter().map(|h| h.value))?;
        self.offsets.extend(
            records
                .slots
                .iter()
                .map(|s| (base + s.headers.1 as usize) as i32),
        );
        offset_i32(base + records.headers.len()).map(drop)
    }
    fn finish(&mut self) -> Result<ListArray> {
        let entries = StructArray::try_new(
            header_fields(),
            vec![
                Arc::new(self.key.string()?) as ArrayRef,
                Arc::new(self.value.binary()?),
            ],
            None,
        )
        .map_err(arrow_err)?;
        let offsets = std::mem::replace(&mut self.offsets, vec![0]);
        ListArray::try_new(
            header_item(),
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Arc::new(entries),
            None,
        )
        .map_err(arrow_err)
    }
}

/// The builder of one column. Record-level builders take a value per record; batch-level ones
/// repeat their batch's field once per batch (the decoder emits exactly the count it announces).
#[derive(Debug)]
enum Builder {
    Offset(Vec<i64>),
    Timestamp(Vec<i64>),
    Sequence(Vec<i32>),
    Key(BinaryColumn),
    Value(BinaryColumn),
    KeyView(ViewColumn),
    ValueView(ViewColumn),
    Headers(HeaderColumn),
    KeyLength(LengthColumn),
    ValueLength(LengthColumn),
    HeadersCount(Vec<i32>),
    RecordDigest(Vec<i64>, Vec<u8>),
    TimestampType(Vec<i8>),
    LeaderEpoch(Vec<i32>),
    BatchOffset(Vec<i64>),
    ProducerId(Vec<i64>),
    ProducerEpoch(Vec<i16>),
    IsTransactional(BooleanBufferBuilder),
    IsControl(BooleanBufferBuilder),
    Magic(Vec<i8>),
    BatchPosition(Vec<i64>),
    BatchSize(Vec<i32>),
}

fn int<T: arrow_array::types::ArrowPrimitiveType>(
    values: &mut Vec<T::Native>,
) -> arrow_array::PrimitiveArray<T> {
    arrow_array::PrimitiveArray::<T>::new(ScalarBuffer::from(std::mem::take(values)), None)
}

impl Builder {
    fn new(column: Column, layout: Layout) -> Builder {
        match (column, layout) {
            (Column::Key, Layout::BinaryView) => return Builder::KeyView(ViewColumn::new()),
            (Column::Value, Layout::BinaryView) => return Builder::ValueView(ViewColumn::new()),
            _ => {}
        }
        match column {
            Column::Offset => Builder::Offset(Vec::new()),
            Column::Timestamp => Builder::Timestamp(Vec::new()),
            Column::Sequence => Builder::Sequence(Vec::new()),
            Column::Key => Builder::Key(BinaryColumn::new()),
            Column::Value => Builder::Value(BinaryColumn::new()),
            Column::Headers => Builder::Headers(HeaderColumn::new()),
            Column::KeyLength => Builder::KeyLength(LengthColumn::new()),
            Column::ValueLength => Builder::ValueLength(LengthColumn::new()),
            Column::HeadersCount => Builder::HeadersCount(Vec::new()),
            Column::RecordDigest => Builder::RecordDigest(Vec::new(), Vec::new()),
            Column::TimestampType => Builder::TimestampType(Vec::new()),
            Column::LeaderEpoch => Builder::LeaderEpoch(Vec::new()),
            Column::BatchOffset => Builder::BatchOffset(Vec::new()),
            Column::ProducerId => Builder::ProducerId(Vec::new()),
            Column::ProducerEpoch => Builder::ProducerEpoch(Vec::new()),
            Column::IsTransactional => Builder::IsTransactional(BooleanBufferBuilder::new(0)),
            Column::IsControl => Builder::IsControl(BooleanBufferBuilder::new(0)),
            Column::Magic => Builder::Magic(Vec::new()),
            Column::BatchPosition => Builder::BatchPosition(Vec::new()),
            Column::BatchSize => Builder::BatchSize(Vec::new()),
        }
    }

    fn per_record(&self) -> bool {
        matches!(
            self,
            Builder::Offset(_)
                | Builder::Timestamp(_)
                | Builder::Sequence(_)
                | Builder::Key(_)
                | Builder::Value(_)
                | Builder::KeyView(_)
                | Builder::ValueView(_)
                | Builder::Headers(_)
                | Builder::KeyLength(_)
                | Builder::ValueLength(_)
                | Builder::HeadersCount(_)
                | Builder::RecordDigest(..)
        )
    }

    /// Binary bytes held (what bounds a chunk).
    fn bytes(&self) -> usize {
        match self {
            Builder::Key(c) | Builder::Value(c) => c.data.len(),
            Builder::KeyView(c) | Builder::ValueView(c) => c.copied.len(),
            Builder::Headers(h) => h.key.data.len() + h.value.data.len(),
            _ => 0,
        }
    }

    /// Room for `n` more rows, and `bytes` more of values.
    fn reserve(&mut self, n: usize, bytes: usize) {
        match self {
            Builder::Offset(v)
            | Builder::Timestamp(v)
            | Builder::BatchOffset(v)
            | Builder::ProducerId(v)
            | Builder::BatchPosition(v)
            | Builder::RecordDigest(v, _) => v.reserve(n),
            Builder::Sequence(v)
            | Builder::HeadersCount(v)
            | Builder::LeaderEpoch(v)
            | Builder::BatchSize(v) => v.reserve(n),
            Builder::TimestampType(v) | Builder::Magic(v) => v.reserve(n),
            Builder::ProducerEpoch(v) => v.reserve(n),
            Builder::IsTransactional(b) | Builder::IsControl(b) => b.reserve(n),
            Builder::Key(c) => c.reserve(n),
            // Values are cut from the payload: it bounds their bytes (values dominate).
            Builder::Value(c) => {
                c.reserve(n);
                c.data.reserve(bytes);
            }
            Builder::KeyView(c) | Builder::ValueView(c) => c.views.reserve(n),
            Builder::Headers(c) => c.offsets.reserve(n),
            Builder::KeyLength(c) | Builder::ValueLength(c) => c.values.reserve(n),
        }
    }

    fn begin_batch(&mut self, h: &BatchHeader, n: usize, payload_len: usize) {
        self.reserve(n, payload_len);
        match self {
            Builder::TimestampType(v) => v.extend(std::iter::repeat_n(h.timestamp_type(), n)),
            Builder::LeaderEpoch(v) => v.extend(std::iter::repeat_n(h.partition_leader_epoch, n)),
            Builder::BatchOffset(v) => v.extend(std::iter::repeat_n(h.base_offset, n)),
            Builder::ProducerId(v) => v.extend(std::iter::repeat_n(h.producer_id, n)),
            Builder::ProducerEpoch(v) => v.extend(std::iter::repeat_n(h.producer_epoch, n)),
            Builder::IsTransactional(b) => b.append_n(n, h.is_transactional()),
            Builder::IsControl(b) => b.append_n(n, h.is_control()),
            Builder::Magic(v) => v.extend(std::iter::repeat_n(h.magic, n)),
            Builder::BatchPosition(v) => v.extend(std::iter::repeat_n(h.file_position as i64, n)),
            Builder::BatchSize(v) => v.extend(std::iter::repeat_n(h.size_in_bytes as i32, n)),
            _ => {} // record-level: filled in `records`
        }
    }

    /// Fill a record-level column from a run of records: one loop specialised to the column (the
    /// projection is decided once a run, not tested once a record).
    fn records(&mut self, h: &BatchHeader, rs: &Records<'_, '_>, regions: &Regions) -> Result<()> {
        let slots = rs.slots;
        match self {
            Builder::Offset(v) => v.extend(slots.iter().map(|s| s.record.offset)),
            Builder::Timestamp(v) => v.extend(slots.iter().map(|s| s.record.timestamp)),
            Builder::Sequence(v) => {
                v.extend(slots.iter().map(|s| h.sequence_at(s.record.offset_delta)))
            }
            Builder::Key(c) => c.extend(slots.iter().map(|s| s.record.key))?,
            Builder::Value(c) => c.extend(slots.iter().map(|s| s.record.value))?,
            Builder::KeyView(c) => c.extend(slots.iter().map(|s| s.record.key), regions)?,
            Builder::ValueView(c) => c.extend(slots.iter().map(|s| s.record.value), regions)?,
            Builder::Headers(c) => c.extend(rs)?,
            Builder::KeyLength(c) => slots.iter().try_for_each(|s| c.push(s.record.key))?,
            Builder::ValueLength(c) => slots.iter().try_for_each(|s| c.push(s.record.value))?,
            Builder::HeadersCount(v) => {
                for s in slots {
                    v.push(offset_i32(rs.headers_of(s).len())?);
                }
            }
            Builder::RecordDigest(v, scratch) => v.extend(
                slots
                    .iter()
                    .map(|s| record_digest(&rs.view(s), scratch) as i64),
            ),
            _ => {} // batch-level: filled in `begin_batch`
        }
        Ok(())
    }

    fn finish(&mut self, input: &Buffer, decompressed: &Buffer) -> Result<ArrayRef> {
        use arrow_array::types::{Int16Type, Int32Type, Int64Type, Int8Type};
        Ok(match self {
            Builder::Offset(v)
            | Builder::Timestamp(v)
            | Builder::BatchOffset(v)
            | Builder::ProducerId(v)
            | Builder::BatchPosition(v) => Arc::new(int::<Int64Type>(v)),
            Builder::RecordDigest(v, _) => Arc::new(int::<Int64Type>(v)),
            Builder::Sequence(v)
            | Builder::HeadersCount(v)
            | Builder::LeaderEpoch(v)
            | Builder::BatchSize(v) => Arc::new(int::<Int32Type>(v)),
            Builder::TimestampType(v) | Builder::Magic(v) => Arc::new(int::<Int8Type>(v)),
            Builder::ProducerEpoch(v) => Arc::new(int::<Int16Type>(v)),
            Builder::Key(c) | Builder::Value(c) => Arc::new(c.binary()?),
            Builder::KeyView(c) | Builder::ValueView(c) => Arc::new(c.finish(input, decompressed)),
            Builder::Headers(c) => Arc::new(c.finish()?),
            Builder::KeyLength(c) | Builder::ValueLength(c) => Arc::new(c.finish()),
            Builder::IsTransactional(b) | Builder::IsControl(b) => {
                Arc::new(BooleanArray::new(b.finish(), None))
            }
        })
    }
}

/// Column builders for one chunk, only for the projected columns; a [`RecordSink`].
#[derive(Debug)]
struct Projection {
    schema: SchemaRef,
    /// (output position, builder), split so a record touches only record-level builders.
    per_record: Vec<(usize, Builder)>,
    per_batch: Vec<(usize, Builder)>,
    rows: usize,
    regions: Regions,
}

impl Projection {
    fn new(columns: &[Column], layout: Layout, input: Option<&Buffer>) -> Self {
        let (per_record, per_batch) = columns
            .iter()
            .enumerate()
            .map(|(i, &c)| (i, Builder::new(c, layout)))
            .partition(|(_, b)| b.per_record());
        Projection {
            schema: projected_schema_in(columns, layout),
            per_record,
            per_batch,
            rows: 0,
            regions: Regions {
                input: input.map(|b| Region::of(b.as_slice())).unwrap_or_default(),
                decompressed: Region::default(),
            },
        }
    }

    fn bytes(&self) -> usize {
        self.per_record.iter().map(|(_, b)| b.bytes()).sum()
    }

    /// Room for a chunk of `rows` rows and `bytes` of values, taken at its start: growing the
    /// columns batch by batch instead reallocates (copies) each of them a dozen times a chunk.
    fn reserve(&mut self, rows: usize, bytes: usize) {
        for (_, b) in self.per_record.iter_mut().chain(self.per_batch.iter_mut()) {
            b.reserve(rows, bytes);
        }
    }

    /// The chunk as a record batch; views point into `input` and `decompressed`.
    fn finish(&mut self, input: &Buffer, decompressed: &Buffer) -> Result<RecordBatch> {
        let mut arrays: Vec<Option<ArrayRef>> =
            vec![None; self.per_record.len() + self.per_batch.len()];
        for (i, b) in self.per_record.iter_mut().chain(self.per_batch.iter_mut()) {
            if let Some(slot) = arrays.get_mut(*i) {
                *slot = Some(b.finish(input, decompressed)?);
            }
        }
        let rows = std::mem::take(&mut self.rows);
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(
            self.schema.clone(),
            arrays.into_iter().flatten().collect(),
            &options,
        )
        .map_err(arrow_err)
    }
}

impl RecordSink for Projection {
    fn begin_batch(&mut self, h: &BatchHeader, n: usize, payload_len: usize) -> Result<()> {
        for (_, b) in self.per_record.iter_mut().chain(self.per_batch.iter_mut()) {
            b.begin_batch(h, n, payload_len);
        }
        Ok(())
    }

    /// A legacy message: a run of one record.
    fn record(&mut self, h: &BatchHeader, r: &RecordView<'_, '_>) -> Result<()> {
        let slot = [Slot::of(r)];
        self.records(
            h,
            &Records {
                slots: &slot,
                headers: r.headers,
            },
        )
    }

    fn records(&mut self, h: &BatchHeader, records: &Records<'_, '_>) -> Result<()> {
        for (_, b) in &mut self.per_record {
            b.records(h, records, &self.regions)?;
        }
        self.rows += records.slots.len();
        Ok(())
    }

    fn payload_region(&mut self, whole: Option<&[u8]>) {
        self.regions.decompressed = whole.map(Region::of).unwrap_or_default();
    }
}

/// Decoded records as Arrow record batches (all sharing `schema`).
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

/// Builds Arrow chunks from frames fed one at a time (from a slice, or read from a file).
#[derive(Debug)]
pub struct ArrowBuilder {
    decoder: Decoder,
    columns: Projection,
    batches: Vec<RecordBatch>,
    layout: Layout,
    /// [`Layout::BinaryView`]: the input views may point into (empty when frames do not come
    /// from one buffer), and the current chunk's decompressed batches.
    input: Buffer,
    decompressed: Appended,
}

impl ArrowBuilder {
    pub fn new(opts: DecodeOptions, columns: &[Column]) -> Self {
        ArrowBuilder::with_layout(opts, columns, Layout::Binary, None)
    }

    /// A builder in `layout`. With [`Layout::BinaryView`] and `input`, every frame pushed must be
    /// cut from `input` for its values to be pointed at rather than copied (any other bytes are copied).
    pub fn with_layout(
        opts: DecodeOptions,
        columns: &[Column],
        layout: Layout,
        input: Option<Buffer>,
    ) -> Self {
        let input = match layout {
            Layout::BinaryView => input.unwrap_or_else(|| Buffer::from_vec(Vec::<u8>::new())),
            Layout::Binary => Buffer::from_vec(Vec::<u8>::new()),
        };
        ArrowBuilder {
            decoder: Decoder::new(opts),
            columns: Projection::new(columns, layout, Some(&input)),
            batches: Vec::new(),
            layout,
            input,
            decompressed: Appended::default(),
        }
    }

    fn finish_chunk(&mut self) -> Result<RecordBatch> {
        let decompressed = Buffer::from_vec(self.decompressed.take());
        self.columns.finish(&self.input, &decompressed)
    }

    /// Decode `frame` into the current chunk. `input_left`: bytes of input after this frame, to size
    /// a new chunk's value buffer in one allocation rather than a doubling series.
    pub fn push(&mut self, frame: &Frame<'_>, input_left: usize) -> Result<()> {
        // x4 for compression, so a small input does not get a whole chunk.
        let estimate = input_left.saturating_mul(4).min(CHUNK_BYTES) + frame.bytes.len();
        // Room a compressed batch may need in the decompression buffer: a batch that would not fit
        // in what is reserved starts a new chunk, rather than reallocate (copy) the buffer.
        let room = frame.bytes.len().saturating_mul(8);
        let out = &self.decompressed;
        if self.columns.rows >= CHUNK_ROWS
            || self.columns.bytes() >= CHUNK_BYTES
            || (!out.is_empty() && out.len().saturating_add(room) > out.buf.capacity())
        {
            let chunk = self.finish_chunk()?;
            self.batches.push(chunk);
        }
        if self.columns.rows == 0 {
            // The rows to come, if the batches left are like this one (within the chunk's bounds).
            let batches = input_left / frame.bytes.len().max(1) + 1;
            let rows = (frame.header.records_count.max(0) as usize)
                .saturating_mul(batches)
                .min(CHUNK_ROWS);
            let values = match self.layout {
                Layout::Binary => estimate,
                Layout::BinaryView => 0,
            };
            self.columns.reserve(rows, values);
        }
        match self.layout {
            Layout::Binary => {
                self.decoder.decode(frame, &mut self.columns)?;
            }
            Layout::BinaryView => {
                let compressed = !matches!(frame.header.compression(), Some(Compression::None));
                if compressed && self.decompressed.buf.capacity() == 0 {
                    self.decompressed.buf.reserve(estimate.max(room));
                }
                self.decoder
                    .decode_appending(frame, &mut self.columns, &mut self.decompressed)?;
            }
        }
        Ok(())
    }

    pub fn finish(mut self, partial_tail: Option<u64>) -> Result<ArrowDecoded> {
        if self.columns.rows > 0 || self.batches.is_empty() {
            let chunk = self.finish_chunk()?;
            self.batches.push(chunk);
        }
        Ok(ArrowDecoded {
            schema: self.columns.schema.clone(),
            batches: self.batches,
            partial_tail,
        })
    }
}

/// Decode every batch of `data` (first byte at absolute `base_position`) into Arrow columns: only
/// `columns`, in that order.
pub fn decode_projected(
    data: &[u8],
    base_position: u64,
    opts: DecodeOptions,
    columns: &[Column],
) -> Result<ArrowDecoded> {
    decode_run(data, base_position, opts, columns, View::BINARY)
}

/// The layout of a decode's keys and values, and the buffer `data` was cut from (what views of
/// uncompressed values point into).
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    pub layout: Layout,
    pub input: Option<&'a Buffer>,
}

impl View<'_> {
    pub const BINARY: View<'static> = View {
        layout: Layout::Binary,
        input: None,
    };
}

fn decode_run(
    data: &[u8],
    base_position: u64,
    opts: DecodeOptions,
    columns: &[Column],
    view: View<'_>,
) -> Result<ArrowDecoded> {
    let mut cursor =
        BatchCursor::new(data, base_position, opts.allow_partial_tail).crc_first(opts.verify_crc);
    let mut builder = ArrowBuilder::with_layout(opts, columns, view.layout, view.input.cloned());
    while let Some(frame) = cursor.next()? {
        let left = data.len() - (cursor.position() - base_position) as usize;
        builder.push(&frame, left)?;
    }
    builder.finish(cursor.partial_tail())
}

/// [`decode_projected`] with the batches split across `threads` threads (batches are independent):
/// contiguous runs of batches of about equal bytes, each decoded into its own chunks, concatenated
/// in input order. The same rows and the same first error as one thread (input whose batch framing
/// is broken is decoded on one thread, to report the error the sequential decode meets first).
/// `threads <= 1` is [`decode_projected`]: callers that already parallelise (Spark tasks) keep it.
pub fn decode_projected_threads(
    data: &[u8],
    base_position: u64,
    opts: DecodeOptions,
    columns: &[Column],
    threads: usize,
) -> Result<ArrowDecoded> {
    decode_projected_in(data, base_position, opts, columns, threads, View::BINARY)
}

/// [`decode_projected_threads`] in `view`'s layout. With [`Layout::BinaryView`] and `view.input`,
/// `data` must be a slice of that buffer: uncompressed values are then pointed at, never copied.
pub fn decode_projected_in(
    data: &[u8],
    base_position: u64,
    opts: DecodeOptions,
    columns: &[Column],
    threads: usize,
    view: View<'_>,
) -> Result<ArrowDecoded> {
    if threads <= 1 {
        return decode_run(data, base_position, opts, columns, view);
    }
    let Ok((index, partial_tail)) =
        super::batch_index(data, base_position, opts.allow_partial_tail)
    else {
        return decode_run(data, base_position, opts, columns, view);
    };
    let ranges = split_batches(&index, base_position, threads);
    if ranges.len() <= 1 {
        return decode_run(data, base_position, opts, columns, view);
    }
    // Each range ends on a batch boundary: no partial tail inside, the real one is the index's.
    let strict = DecodeOptions {
        allow_partial_tail: false,
        ..opts
    };
    let parts: Vec<Result<ArrowDecoded>> = std::thread::scope(|scope| {
        let handles: Vec<_> = ranges
            .iter()
            .map(|&(start, end)| {
                let bytes = data.get(start..end).unwrap_or_default();
                let base = base_position + start as u64;
                scope.spawn(move || decode_run(bytes, base, strict, columns, view))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::invalid("a decode thread panicked")))
            })
            .collect()
    });
    let mut batches = Vec::new();
    for part in parts {
        batches.extend(part?.batches.into_iter().filter(|b| b.num_rows() > 0));
    }
    if batches.is_empty() {
        return decode_run(data, base_position, opts, columns, view);
    }
    Ok(ArrowDecoded {
        schema: projected_schema_in(columns, view.layout),
        batches,
        partial_tail,
    })
}

/// Cut the batches of `index` into at most `parts` contiguous byte ranges (relative to the input's
/// first byte) of about equal size.
fn split_batches(
    index: &[super::BatchLocation],
    base_position: u64,
    parts: usize,
) -> Vec<(usize, usize)> {
    let Some(last) = index.last() else {
        return Vec::new();
    };
    let end = (last.file_position + u64::from(last.size_in_bytes) - base_position) as usize;
    let target = end.div_ceil(parts.max(1)).max(1);
    let mut out = Vec::with_capacity(parts);
    let mut start = 0usize;
    for l in index {
        let batch_end = (l.file_position + u64::from(l.size_in_bytes) - base_position) as usize;
        if batch_end - start >= target {
            out.push((start, batch_end));
            start = batch_end;
        }
    }
    if start < end {
        out.push((start, end));
    }
    out
}

/// Decode every batch of `data` into all of [`Column::RECORD`].
pub fn decode_arrow(data: &[u8], base_position: u64, opts: DecodeOptions) -> Result<ArrowDecoded> {
    decode_projected(data, base_position, opts, &Column::RECORD)
}

//! A producer's side of records: Java's default partitioner (`Utils.murmur2` and
//! `BuiltInPartitioner.partitionForKey`), Arrow rows partitioned and cut into produce batches
//! (`send_arrow`; each batch written by [`encode_batch`]), and the idempotent producer's fields
//! written into an encoded batch when it is sent (`ProducerBatch.setProducerState`).
//!
//! Input columns, by name (others are ignored, so `poll_arrow`'s output can be produced as is):
//! `key` and `value` (binary, large binary, binary view, the string types, or null; at least one of
//! the two), `headers` (list or large list of struct<key: string, value: binary or string>, or a map of
//! string to binary), `partition` (an integer; null rows are partitioned), `timestamp` (int64
//! milliseconds or a timestamp of any unit; null rows get the default). A column of another type is
//! [`Error::Schema`]; a bad value (a partition out of range, a row with neither key nor value, a null
//! header key) is [`Error::InvalidArgument`]. Nothing is encoded unless every row is valid.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Int16Type, Int32Type, Int64Type, Int8Type, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt16Type, UInt32Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, GenericListArray, OffsetSizeTrait, RecordBatch};
use arrow_schema::{DataType, TimeUnit};

use super::batch::V2_CRC_START;
use super::compression::Compression;
use super::encode::{encode_batch, BatchSpec, NewRecord};
use super::record::Header;
use crate::{Error, Result};

/// Kafka's `Utils.murmur2`: 32-bit MurmurHash2 with seed 0x9747b28c, as a signed int.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len();
    let mut h: u32 = 0x9747_b28c ^ (length as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = chunks.remainder();
    if tail.len() == 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// `BuiltInPartitioner.partitionForKey`: `toPositive(murmur2(key)) % partitions`.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % partitions.max(1)
}

/// The bytes a record adds to its batch for `batch_size`, as the producer counts it.
pub fn record_size(key: Option<&[u8]>, value: Option<&[u8]>, headers: &[Header<'_>]) -> usize {
    let header_bytes: usize = headers
        .iter()
        .map(|h| h.key.len() + h.value.map_or(0, <[u8]>::len))
        .sum();
    key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len) + header_bytes + 16
}

/// Where rows go and how batches are cut.
#[derive(Debug, Clone, Copy)]
pub struct ArrowProduceOptions {
    /// The topic's partition count (explicit partitions must be below it).
    pub partitions: i32,
    /// Where rows without a key or a partition go (the producer's sticky partition, KIP-480).
    pub sticky_partition: i32,
    /// The timestamp of rows without one (milliseconds).
    pub default_timestamp: i64,
    /// A batch is closed before a record would take it past this many bytes (`record_size`); a
    /// batch holds at least one record.
    pub batch_size: usize,
    pub compression: Compression,
}

/// One encoded batch for one partition and the input rows it holds, in order (row `rows[i]` of the
/// input is the batch's record at offset delta `i`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducedBatch {
    pub partition: i32,
    pub bytes: Vec<u8>,
    pub rows: Vec<u32>,
}

fn schema_error(column: &str, reason: impl Into<String>) -> Error {
    Error::Schema {
        column: column.to_string(),
        reason: reason.into(),
    }
}

/// A column of bytes (key, value, header value) whatever its Arrow spelling.
enum Bytes<'a> {
    Absent,
    Binary(&'a arrow_array::BinaryArray),
    LargeBinary(&'a arrow_array::LargeBinaryArray),
    BinaryView(&'a arrow_array::BinaryViewArray),
    Utf8(&'a arrow_array::StringArray),
    LargeUtf8(&'a arrow_array::LargeStringArray),
    Utf8View(&'a arrow_array::StringViewArray),
}

impl<'a> Bytes<'a> {
    fn of(column: &str, array: &'a dyn Array) -> Result<Self> {
        Ok(match array.data_type() {
            DataType::Null => Bytes::Absent,
            DataType::Binary => Bytes::Binary(array.as_binary::<i32>()),
            DataType::LargeBinary => Bytes::LargeBinary(array.as_binary::<i64>()),
            DataType::BinaryView => Bytes::BinaryView(array.as_binary_view()),
            DataType::Utf8 => Bytes::Utf8(array.as_string::<i32>()),
            DataType::LargeUtf8 => Bytes::LargeUtf8(array.as_string::<i64>()),
            DataType::Utf8View => Bytes::Utf8View(array.as_string_view()),
            other => {
                return Err(schema_error(
                    column,
                    format!("{other} is not bytes (binary or string)"),
                ))
            }
        })
    }

    fn get(&self, i: usize) -> Option<&'a [u8]> {
        match self {
            Bytes::Absent => None,
            Bytes::Binary(a) => (!a.is_null(i)).then(|| a.value(i)),
            Bytes::LargeBinary(a) => (!a.is_null(i)).then(|| a.value(i)),
            Bytes::BinaryView(a) => (!a.is_null(i)).then(|| a.value(i)),
            Bytes::Utf8(a) => (!a.is_null(i)).then(|| a.value(i).as_bytes()),
            Bytes::LargeUtf8(a) => (!a.is_null(i)).then(|| a.value(i).as_bytes()),
            Bytes::Utf8View(a) => (!a.is_null(i)).then(|| a.value(i).as_bytes()),
        }
    }

    fn get_str(&self, i: usize) -> Option<&'a str> {
        match self {
            Bytes::Utf8(a) => (!a.is_null(i)).then(|| a.value(i)),
            Bytes::LargeUtf8(a) => (!a.is_null(i)).then(|| a.value(i)),
            Bytes::Utf8View(a) => (!a.is_null(i)).then(|| a.value(i)),
            _ => None,
        }
    }
}

/// The headers column: per row a range of (key, value) entries.
struct Headers<'a> {
    offsets: Vec<usize>,
    row_valid: Option<&'a dyn Array>,
    entry_valid: Option<&'a dyn Array>,
    keys: Bytes<'a>,
    values: Bytes<'a>,
}

/// A list column's per-row offsets and its struct entries.
fn list_entries<O: OffsetSizeTrait + TryInto<usize>>(
    list: &GenericListArray<O>,
) -> Result<(Vec<usize>, &arrow_array::StructArray)> {
    let entries = list
        .values()
        .as_struct_opt()
        .ok_or_else(|| schema_error("headers", "a list of struct<key: string, value: binary>"))?;
    let offsets = list
        .offsets()
        .iter()
        .map(|&o| o.try_into().unwrap_or(0))
        .collect();
    Ok((offsets, entries))
}

impl<'a> Headers<'a> {
    fn of(array: &'a dyn Array) -> Result<Option<Self>> {
        const COLUMN: &str = "headers";
        let (offsets, entries): (Vec<usize>, &'a arrow_array::StructArray) = match array.data_type()
        {
            DataType::Null => return Ok(None),
            DataType::List(_) => list_entries(array.as_list::<i32>())?,
            DataType::LargeList(_) => list_entries(array.as_list::<i64>())?,
            DataType::Map(_, _) => {
                let map = array.as_map();
                let offsets = map.offsets().iter().map(|&o| o as usize).collect();
                (offsets, map.entries())
            }
            other => {
                return Err(schema_error(
                    COLUMN,
                    format!("{other}: expected list<struct<key: string, value: binary>> or map<string, binary>"),
                ))
            }
        };
        let is_map = matches!(array.data_type(), DataType::Map(_, _));
        let field = |name: &str, position: usize| -> Result<&'a ArrayRef> {
            // a map's entries are (key, value) by position, whatever their names
            let at = if is_map {
                Some(position)
            } else {
                entries.fields().iter().position(|f| f.name() == name)
            };
            at.filter(|&i| i < entries.num_columns())
                .map(|i| entries.column(i))
                .ok_or_else(|| schema_error(COLUMN, format!("its entries have no {name:?} field")))
        };
        let keys = Bytes::of("headers.key", field("key", 0)?.as_ref())?;
        if matches!(
            keys,
            Bytes::Binary(_) | Bytes::LargeBinary(_) | Bytes::BinaryView(_)
        ) {
            return Err(schema_error(
                "headers.key",
                "header keys are strings, not binary",
            ));
        }
        let values = Bytes::of("headers.value", field("value", 1)?.as_ref())?;
        Ok(Some(Headers {
            offsets,
            row_valid: (array.null_count() > 0).then_some(array),
            entry_valid: (entries.null_count() > 0).then_some(entries as &dyn Array),
            keys,
            values,
        }))
    }

    fn row(&self, i: usize, out: &mut Vec<Header<'a>>) -> Result<()> {
        out.clear();
        if self.row_valid.is_some_and(|a| a.is_null(i)) {
            return Ok(());
        }
        let (start, end) = match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&s), Some(&e)) => (s, e),
            _ => return Err(Error::invalid("headers: offsets shorter than the column")),
        };
        for j in start..end {
            if self.entry_valid.is_some_and(|a| a.is_null(j)) {
                return Err(Error::invalid(format!("row {i}: a null header")));
            }
            let key = self
                .keys
                .get_str(j)
                .ok_or_else(|| Error::invalid(format!("row {i}: a header with a null key")))?;
            out.push(Header {
                key,
                value: self.values.get(j),
            });
        }
        Ok(())
    }
}

/// An integer column (partition) read as i64, null where absent.
fn int_at(column: &str, array: &dyn Array, i: usize) -> Result<Option<i64>> {
    if array.is_null(i) {
        return Ok(None);
    }
    Ok(Some(match array.data_type() {
        DataType::Int8 => i64::from(array.as_primitive::<Int8Type>().value(i)),
        DataType::Int16 => i64::from(array.as_primitive::<Int16Type>().value(i)),
        DataType::Int32 => i64::from(array.as_primitive::<Int32Type>().value(i)),
        DataType::Int64 => array.as_primitive::<Int64Type>().value(i),
        DataType::UInt8 => i64::from(array.as_primitive::<UInt8Type>().value(i)),
        DataType::UInt16 => i64::from(array.as_primitive::<UInt16Type>().value(i)),
        DataType::UInt32 => i64::from(array.as_primitive::<UInt32Type>().value(i)),
        other => return Err(schema_error(column, format!("{other} is not an integer"))),
    }))
}

fn check_int(column: &str, array: &dyn Array) -> Result<()> {
    match array.data_type() {
        DataType::Null
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32 => Ok(()),
        other => Err(schema_error(column, format!("{other} is not an integer"))),
    }
}

/// A timestamp column read as milliseconds, null where absent.
fn timestamp_at(array: &dyn Array, i: usize) -> Option<i64> {
    if array.is_null(i) {
        return None;
    }
    match array.data_type() {
        DataType::Int64 => Some(array.as_primitive::<Int64Type>().value(i)),
        DataType::Timestamp(TimeUnit::Second, _) => Some(
            array
                .as_primitive::<TimestampSecondType>()
                .value(i)
                .saturating_mul(1000),
        ),
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            Some(array.as_primitive::<TimestampMillisecondType>().value(i))
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => Some(
            array
                .as_primitive::<TimestampMicrosecondType>()
                .value(i)
                .div_euclid(1000),
        ),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => Some(
            array
                .as_primitive::<TimestampNanosecondType>()
                .value(i)
                .div_euclid(1_000_000),
        ),
        _ => None,
    }
}

fn check_timestamp(array: &dyn Array) -> Result<()> {
    match array.data_type() {
        DataType::Null | DataType::Int64 | DataType::Timestamp(_, _) => Ok(()),
        other => Err(schema_error(
            "timestamp",
            format!("{other}: expected int64 milliseconds or a timestamp"),
        )),
    }
}

/// One input chunk's columns, typed.
struct Chunk<'a> {
    key: Bytes<'a>,
    value: Bytes<'a>,
    headers: Option<Headers<'a>>,
    partition: Option<&'a dyn Array>,
    timestamp: Option<&'a dyn Array>,
    rows: usize,
}

impl<'a> Chunk<'a> {
    fn of(batch: &'a RecordBatch) -> Result<Self> {
        let column = |name: &str| batch.column_by_name(name).map(|a| a.as_ref());
        let (key, value) = (column("key"), column("value"));
        if key.is_none() && value.is_none() {
            return Err(schema_error(
                "key",
                "the table has neither a key nor a value column",
            ));
        }
        let partition = column("partition");
        if let Some(p) = partition {
            check_int("partition", p)?;
        }
        let timestamp = column("timestamp");
        if let Some(t) = timestamp {
            check_timestamp(t)?;
        }
        Ok(Chunk {
            key: key.map_or(Ok(Bytes::Absent), |a| Bytes::of("key", a))?,
            value: value.map_or(Ok(Bytes::Absent), |a| Bytes::of("value", a))?,
            headers: column("headers").map_or(Ok(None), Headers::of)?,
            partition,
            timestamp,
            rows: batch.num_rows(),
        })
    }
}

/// Partition `batches`' rows as the producer's `send` does and encode them into batches of at most
/// `batch_size` bytes per partition, rows kept in input order within each partition.
pub fn encode_arrow(
    batches: &[RecordBatch],
    opts: &ArrowProduceOptions,
) -> Result<Vec<ProducedBatch>> {
    if opts.partitions <= 0 {
        return Err(Error::invalid(format!(
            "the topic has {} partitions",
            opts.partitions
        )));
    }
    if !(0..opts.partitions).contains(&opts.sticky_partition) {
        return Err(Error::invalid(format!(
            "sticky partition {} outside [0, {})",
            opts.sticky_partition, opts.partitions
        )));
    }
    let chunks = batches.iter().map(Chunk::of).collect::<Result<Vec<_>>>()?;
    // Pass 1: every row's partition (and its checks); rows grouped by partition, in order.
    let n = usize::try_from(opts.partitions).unwrap_or(0);
    let mut by_partition: Vec<Vec<(u32, u32)>> = vec![Vec::new(); n]; // (chunk, row in chunk)
    let mut global: u64 = 0;
    for (c, chunk) in (0u32..).zip(&chunks) {
        for i in 0..chunk.rows {
            let key = chunk.key.get(i);
            if key.is_none() && chunk.value.get(i).is_none() {
                return Err(Error::invalid(format!(
                    "row {global}: a record needs a key or a value"
                )));
            }
            let explicit = match chunk.partition {
                Some(p) => int_at("partition", p, i)?,
                None => None,
            };
            let partition = match (explicit, key) {
                (Some(p), _) => {
                    if !(0..i64::from(opts.partitions)).contains(&p) {
                        return Err(Error::invalid(format!(
                            "row {global}: partition {p} outside [0, {})",
                            opts.partitions
                        )));
                    }
                    p as usize
                }
                (None, Some(k)) => partition_for_key(k, opts.partitions) as usize,
                (None, None) => opts.sticky_partition as usize,
            };
            let row = u32::try_from(i).map_err(|_| Error::invalid("more than 2^32 rows"))?;
            if let Some(rows) = by_partition.get_mut(partition) {
                rows.push((c, row));
            }
            global += 1;
        }
    }
    if global > u64::from(u32::MAX) {
        return Err(Error::invalid("more than 2^32 rows in one send_arrow"));
    }
    let offsets: Vec<u32> = chunks
        .iter()
        .scan(0u32, |acc, ch| {
            let start = *acc;
            *acc = acc.saturating_add(ch.rows as u32);
            Some(start)
        })
        .collect();
    // Pass 2: per partition, cut and encode.
    let spec = BatchSpec {
        compression: opts.compression,
        ..BatchSpec::default()
    };
    let mut out = Vec::new();
    let mut records: Vec<NewRecord<'_>> = Vec::new();
    let mut rows: Vec<u32> = Vec::new();
    let mut size = 0usize;
    let mut headers: Vec<Header<'_>> = Vec::new();
    for (partition, entries) in (0i32..).zip(&by_partition) {
        for &(c, i) in entries {
            let (chunk, i) = (&chunks[c as usize], i as usize);
            let (key, value) = (chunk.key.get(i), chunk.value.get(i));
            if let Some(h) = &chunk.headers {
                h.row(i, &mut headers)?;
            } else {
                headers.clear();
            }
            let bytes = record_size(key, value, &headers);
            if !records.is_empty() && size + bytes > opts.batch_size {
                seal(&mut out, partition, &spec, &mut records, &mut rows)?;
                size = 0;
            }
            size += bytes;
            let timestamp = chunk
                .timestamp
                .and_then(|t| timestamp_at(t, i))
                .unwrap_or(opts.default_timestamp);
            records.push(NewRecord {
                key,
                value,
                headers: headers.clone(),
                timestamp: Some(timestamp),
            });
            rows.push(offsets[c as usize] + i as u32);
        }
        seal(&mut out, partition, &spec, &mut records, &mut rows)?;
        size = 0;
    }
    Ok(out)
}

/// Encode the records gathered for `partition` (if any) as one batch and start the next.
fn seal(
    out: &mut Vec<ProducedBatch>,
    partition: i32,
    spec: &BatchSpec,
    records: &mut Vec<NewRecord<'_>>,
    rows: &mut Vec<u32>,
) -> Result<()> {
    if !records.is_empty() {
        out.push(ProducedBatch {
            partition,
            bytes: encode_batch(spec, records)?,
            rows: std::mem::take(rows),
        });
        records.clear();
    }
    Ok(())
}

/// Write an idempotent producer's id, epoch and base sequence into one encoded v2 batch (when it
/// is sent; a retry keeps them), the transactional attribute for a transactional producer's, and its
/// CRC anew (`DefaultRecordBatch.setProducerState`... the CRC covers those fields, unlike the offset
/// and leader epoch a broker stamps).
pub fn set_producer_state(
    batch: &mut [u8],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    is_transactional: bool,
) -> Result<()> {
    const ATTRIBUTES: usize = 21;
    const TRANSACTIONAL: u8 = 0x10; // bit 4 of the attributes' low byte
    const PRODUCER_ID: usize = 43;
    if batch.len() < super::batch::V2_HEADER_SIZE || batch.get(16) != Some(&2) {
        return Err(Error::invalid("not a magic v2 record batch"));
    }
    if is_transactional {
        batch[ATTRIBUTES + 1] |= TRANSACTIONAL;
    }
    batch[PRODUCER_ID..PRODUCER_ID + 8].copy_from_slice(&producer_id.to_be_bytes());
    batch[PRODUCER_ID + 8..PRODUCER_ID + 10].copy_from_slice(&producer_epoch.to_be_bytes());
    batch[PRODUCER_ID + 10..PRODUCER_ID + 14].copy_from_slice(&base_sequence.to_be_bytes());
    let crc = crc32c::crc32c(&batch[V2_CRC_START..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_is_javas() {
        // Kafka's UtilsTest.testMurmur2
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (key, expected) in cases {
            assert_eq!(murmur2(key), expected);
        }
    }
}

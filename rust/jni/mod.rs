//! JNI entry points for the JVM `kafka-log` reader (`tools/kafka-log-reader`, class
//! `io.epochguard.spark.Native`): the same decoder the Python binding calls
//! ([`reader::for_each_frame`] feeding an [`ArrowBuilder`]), handing record batches to the JVM through
//! Arrow's C Data Interface. The one place of the crate that touches `jni` (feature `jvm`).
//!
//! Batches whose headers rule them out (offset, timestamp, leader-epoch bounds) are skipped before
//! their records are decoded; `count` answers COUNT(*) and min/max(offset) from headers, decoding only
//! what a header cannot tell (a legacy message set, the first or last batch of a compacted range).
//! Errors become a `KafkaLogException` (position and reason), a panic a `RuntimeException`: nothing
//! unwinds into the JVM.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use arrow_array::ffi::{to_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_buffer::{Buffer, NullBuffer};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{
    make_array, Array, ArrayRef, BinaryArray, Int64Array, ListArray, RecordBatch, StringArray,
    StructArray,
};
use arrow_schema::{DataType, Fields};
use jni::objects::{JByteBuffer, JClass, JLongArray, JString};
use jni::sys::{jboolean, jint, jlong, jlongArray, JNI_TRUE};
use jni::JNIEnv;

use crate::file::InputFile;
use crate::offset_index;
use crate::records::arrow::{ArrowBuilder, Column, Layout};
use crate::records::batch::{i32_at, BatchHeader, Frame, LOG_OVERHEAD};
use crate::records::{reader, BatchCursor, DecodeOptions, Decoder, OwnedRecord};
use crate::reporting::{self, Piece, Src};
use crate::{Error, Result};

/// The library's allocator, as for the Python extension (rust/py/mod.rs): a decode's columns are
/// short-lived buffers of a few MiB, which glibc maps afresh (page-faulting them in again) for every
/// window above its mmap threshold, and mimalloc reuses. Arrow frees them through our release
/// callbacks, so one allocator owns them. Not when the library is also the Python extension.
#[cfg(not(feature = "python"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const EXCEPTION: &str = "io/epochguard/spark/KafkaLogException";

/// Inclusive bounds a batch must overlap to be decoded: [offset, timestamp, leader epoch] x [lo, hi].
#[derive(Debug, Clone, Copy)]
struct Bounds {
    offset: (i64, i64),
    timestamp: (i64, i64),
    epoch: (i64, i64),
}

impl Bounds {
    const ALL: Bounds = Bounds {
        offset: (i64::MIN, i64::MAX),
        timestamp: (i64::MIN, i64::MAX),
        epoch: (i64::MIN, i64::MAX),
    };

    fn from_slice(b: &[i64]) -> Result<Bounds> {
        match b {
            [o0, o1, t0, t1, e0, e1] => Ok(Bounds {
                offset: (*o0, *o1),
                timestamp: (*t0, *t1),
                epoch: (*e0, *e1),
            }),
            _ => Err(Error::invalid(format!(
                "bounds: 6 longs expected, got {}",
                b.len()
            ))),
        }
    }

    fn is_all(&self) -> bool {
        self.offset == Bounds::ALL.offset
            && self.timestamp == Bounds::ALL.timestamp
            && self.epoch == Bounds::ALL.epoch
    }

    /// Whether some record of the batch with header `h` may fall within the bounds. Only v2 headers
    /// are trusted (a legacy message set's wrapper says little about its records): a legacy batch
    /// is always decoded, and its rows filtered by Spark.
    fn may_hold(&self, h: &BatchHeader) -> bool {
        if h.magic < 2 {
            return true;
        }
        let last = h.base_offset.saturating_add(i64::from(h.last_offset_delta));
        let epoch = i64::from(h.partition_leader_epoch);
        // Create time: the records' timestamps are at most the header's max (their minimum is not
        // in the header). Log-append time: every record carries the max.
        let ts_ok = if h.timestamp_type() == 1 {
            self.timestamp.0 <= h.max_timestamp && h.max_timestamp <= self.timestamp.1
        } else {
            self.timestamp.0 <= h.max_timestamp
        };
        last >= self.offset.0
            && h.base_offset <= self.offset.1
            && ts_ok
            && self.epoch.0 <= epoch
            && epoch <= self.epoch.1
    }
}

/// What one decode handed out, for the reader's metrics.
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    batches_decoded: i64,
    batches_skipped: i64,
    partial_tail: i64,
}

/// A decoded byte range, handed out one piece at a time by `next`: decoded up front (`withErrors`,
/// bytes the JVM read), or a window at a time from a local file as `next` asks (`stream`).
struct Decoded {
    pieces: VecDeque<Piece>,
    stream: Option<Stream>,
    stats: Stats,
}

/// Bytes of a local file read, CRC-checked and decoded per `next` (more when one batch is larger):
/// small enough that the window is still in the core's cache (2 MiB of L2 here) when its values are
/// copied out and when Spark reads them, where a whole range decoded before the first batch is
/// handed out is read back from memory. Issue 37's profile: CPU per full read 1.56 s decoded whole,
/// 1.07 s in 1 MiB windows, 0.89 s in 256 KiB ones (docs/performance.md).
const WINDOW: usize = 1 << 18;

/// Read buffers the JVM may still hold: a window's keys and values are views into the bytes read
/// (`Layout::BinaryView`, no value copied on the Rust side), so a buffer is reused only once every
/// array pointing into it is released, which the JVM does when it loads the next batch.
const SPARE_BUFFERS: usize = 3;

/// A range of a local file decoded a window at a time, keys and values handed out as views into the
/// window's read buffer (the JVM's `BinaryViewColumnVector` reads them there). With bounds, `runs`
/// holds only the batches their headers let through: the others are never read.
struct Stream {
    file: InputFile,
    runs: VecDeque<(u64, u64)>,
    opts: DecodeOptions,
    columns: Vec<Column>,
    spare: VecDeque<Buffer>,
}

impl Stream {
    fn new(
        (path, file): (&Path, InputFile),
        (start, end): (u64, u64),
        columns: &str,
        (opts, bounds): (DecodeOptions, Bounds),
        stats: &mut Stats,
    ) -> Result<Stream> {
        let runs = if bounds.is_all() {
            VecDeque::from([(start, end)])
        } else {
            indexed_runs((path, &file), (start, end), bounds, stats)?.into()
        };
        Ok(Stream {
            file,
            runs,
            opts,
            columns: parse_columns(columns)?,
            spare: VecDeque::new(),
        })
    }

    /// A read buffer of at least `want` bytes: a spare one no array points into any more, else a
    /// new one (zeroing 256 KiB costs more than finding it free).
    fn buffer(&mut self, want: usize) -> Vec<u8> {
        for _ in 0..self.spare.len() {
            let Some(spare) = self.spare.pop_front() else {
                break;
            };
            match spare.into_vec::<u8>() {
                Ok(mut buf) => {
                    if buf.len() < want {
                        buf.resize(want, 0);
                    }
                    return buf;
                }
                Err(shared) => self.spare.push_back(shared),
            }
        }
        vec![0; want]
    }

    /// The record batches of the next window of whole batches (empty once every run is read). A
    /// batch larger than the window is read whole; a file found shorter than when it was opened is
    /// an error, as for `reader::for_each_frame`.
    fn next_window(&mut self, stats: &mut Stats) -> Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        let mut read = 0u64;
        while read < WINDOW as u64 {
            let Some(&(pos, end)) = self.runs.front() else {
                break;
            };
            let mut want = usize::try_from(end - pos).map_or(WINDOW, |left| left.min(WINDOW));
            let (input, builder, next) = loop {
                let mut buf = self.buffer(want);
                let data = buf.get_mut(..want).unwrap_or_default();
                let got = self.file.read_at(pos, data)?;
                if got < want {
                    return Err(reader::shrunk(pos + got as u64, end));
                }
                let input = Buffer::from_vec(buf);
                let mut builder = ArrowBuilder::with_layout(
                    self.opts,
                    &self.columns,
                    Layout::BinaryView,
                    Some(input.clone()),
                );
                let data = input.get(..want).unwrap_or_default();
                let last = pos + want as u64 == end;
                let mut cursor = BatchCursor::new(data, pos, !last);
                while let Some(frame) = cursor.next()? {
                    stats.batches_decoded += 1;
                    builder.push(&frame, (pos + want as u64 - cursor.position()) as usize)?;
                }
                match cursor.partial_tail() {
                    // The first batch does not fit: read it whole (its length is in its first 12 bytes).
                    Some(tail) if tail == pos => {
                        let size = i32_at(data, 8).map_or(0, |l| LOG_OVERHEAD + l.max(0) as usize);
                        let left = usize::try_from(end - pos).unwrap_or(usize::MAX);
                        want = left.min(size.max(want.saturating_mul(2)));
                        drop(builder);
                        self.spare.push_back(input);
                    }
                    Some(tail) => break (input, builder, tail),
                    None => break (input, builder, end.min(pos + want as u64)),
                }
            };
            let decoded = builder.finish(None)?;
            out.extend(decoded.batches.into_iter().filter(|b| b.num_rows() > 0));
            if self.spare.len() >= SPARE_BUFFERS {
                self.spare.pop_front(); // still held by the JVM: freed when it lets go
            }
            self.spare.push_back(input);
            read += next - pos;
            match self.runs.front_mut() {
                Some(run) if next < run.1 => run.0 = next,
                _ => {
                    self.runs.pop_front();
                }
            }
        }
        Ok(out)
    }
}

fn parse_columns(columns: &str) -> Result<Vec<Column>> {
    let names: Vec<&str> = columns.split(',').filter(|c| !c.is_empty()).collect();
    Column::parse_list(&names)
}

fn options(verify: jboolean, max_decompressed: jlong) -> Result<DecodeOptions> {
    let max_decompressed_size = usize::try_from(max_decompressed)
        .map_err(|_| Error::invalid(format!("maxDecompressedSize {max_decompressed} < 0")))?;
    Ok(DecodeOptions {
        verify_crc: verify == JNI_TRUE,
        allow_partial_tail: false,
        max_decompressed_size,
    })
}

fn range(file: &InputFile, start: jlong, end: jlong) -> Result<(u64, u64)> {
    let (s, e) = (u64::try_from(start), u64::try_from(end));
    match (s, e) {
        (Ok(s), Ok(e)) if s <= e && e <= file.len() => Ok((s, e)),
        _ => Err(Error::invalid(format!(
            "byte range {start}..{end} is not within the file ({} bytes)",
            file.len()
        ))),
    }
}

/// The handle `next`, `problem`, `stats` and `close` take: the decoded range, owned by the JVM reader.
fn handle(decoded: Decoded) -> Result<jlong> {
    Ok(Box::into_raw(Box::new(decoded)) as jlong)
}

/// Decode `[start, end)` of `src` into `columns` (comma-separated names), with the decode options,
/// the header bounds and whether problems are reported as pieces (`withErrors`).
fn decode(
    src: Src<'_>,
    start: u64,
    end: u64,
    columns: &str,
    (opts, bounds, with_errors): (DecodeOptions, Bounds, bool),
) -> Result<Decoded> {
    let columns = parse_columns(columns)?;
    let mut stats = Stats::default();
    let pieces = if with_errors {
        reporting::decode_reporting(src, start, end, opts, &columns, &mut stats.batches_decoded)?
    } else {
        let (batches, _) = decode_range(src, start, end, opts, &columns, bounds, &mut stats)?;
        batches.into_iter().map(Piece::Batch).collect()
    };
    Ok(Decoded {
        pieces,
        stream: None,
        stats,
    })
}

/// `kept_runs` of the part of `[start, end)` that the segment's offset index (`crate::offset_index`)
/// says holds the offset bounds, when there is an index and the headers found there agree (the
/// first batch starts at or below the lower bound, the last ends at or above the upper one); else
/// of the whole range. With an index, a 1% offset range of a 1 GiB segment reads a few headers, not
/// every batch's.
fn indexed_runs(
    (path, file): (&Path, &InputFile),
    (start, end): (u64, u64),
    bounds: Bounds,
    stats: &mut Stats,
) -> Result<Vec<(u64, u64)>> {
    let (lo, hi) = bounds.offset;
    let base = path
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse::<i64>().ok());
    if let (Some(base), false) = (base, bounds.offset == Bounds::ALL.offset) {
        let entries = offset_index::read_beside(path);
        let (from, until) =
            offset_index::range_for(&entries, lo.saturating_sub(base), hi.saturating_sub(base));
        let (from, to) = (
            from.clamp(start, end),
            until.map_or(end, |u| u.clamp(start, end)),
        );
        if (from, to) != (start, end) {
            let mut narrowed = Stats::default();
            if let Ok(headers) = Src::File(file).headers(from, to) {
                let first_ok =
                    from == start || headers.first().is_some_and(|h| h.base_offset <= lo);
                let last_ok = to == end
                    || headers.last().is_some_and(|h| {
                        h.base_offset.saturating_add(i64::from(h.last_offset_delta)) >= hi
                    });
                if first_ok && last_ok {
                    let runs = runs_of(&headers, bounds, &mut narrowed);
                    stats.batches_skipped += narrowed.batches_skipped;
                    return Ok(runs);
                }
            }
        }
    }
    kept_runs(Src::File(file), start, end, bounds, stats)
}

/// The runs of adjacent batches of `[start, end)` whose headers the bounds let through (one small
/// positioned read a batch); the others are counted as skipped.
fn kept_runs(
    src: Src<'_>,
    start: u64,
    end: u64,
    bounds: Bounds,
    stats: &mut Stats,
) -> Result<Vec<(u64, u64)>> {
    Ok(runs_of(&src.headers(start, end)?, bounds, stats))
}

fn runs_of(headers: &[BatchHeader], bounds: Bounds, stats: &mut Stats) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for h in headers {
        let (at, until) = (
            h.file_position,
            h.file_position + u64::from(h.size_in_bytes),
        );
        if !bounds.may_hold(h) {
            stats.batches_skipped += 1;
            continue;
        }
        match runs.last_mut() {
            Some(run) if run.1 == at => run.1 = until,
            _ => runs.push((at, until)),
        }
    }
    runs
}

/// The record batches of `[start, end)` and its partial tail (with `opts.allow_partial_tail`).
fn decode_range(
    src: Src<'_>,
    start: u64,
    end: u64,
    opts: DecodeOptions,
    columns: &[Column],
    bounds: Bounds,
    stats: &mut Stats,
) -> Result<(Vec<RecordBatch>, Option<u64>)> {
    // With bounds, the headers alone (one small positioned read a batch) say which batches to
    // read at all; runs of adjacent kept batches are then read and decoded as one range.
    let runs = if bounds.is_all() {
        vec![(start, end)]
    } else {
        kept_runs(src, start, end, bounds, stats)?
    };
    let (batches, tail) =
        reporting::decode_runs(src, &runs, opts, columns, &mut stats.batches_decoded)?;
    stats.partial_tail = tail.map_or(-1, |t| t as i64);
    Ok((batches, tail))
}

/// COUNT(*), min(offset), max(offset) of the records in `[start, end)` (min/max `i64::MAX`/`MIN`
/// when there is none), from the headers (one small positioned read a batch, no CRC: a record's
/// bytes do not change the count its header states). A batch whose header cannot tell (one the log
/// cleaner thinned out, a legacy message set) is read and decoded, CRC-checked if `opts` says so.
fn count(path: &str, start: jlong, end: jlong, opts: DecodeOptions) -> Result<[i64; 3]> {
    let file = InputFile::open(&PathBuf::from(path))?;
    let (start, end) = range(&file, start, end)?;
    let mut decoder = Decoder::new(opts);
    let (mut rows, mut min, mut max) = (0i64, i64::MAX, i64::MIN);
    let scan = reader::scan_headers_file(&file, start, end, false, false)?;
    for h in &scan.headers {
        let n = i64::from(h.records_count);
        let last = h.base_offset.saturating_add(i64::from(h.last_offset_delta));
        // A v2 batch whose count fills its offset range holds every offset of it.
        if h.magic >= 2 && (n == 0 || n == last - h.base_offset + 1) {
            if n > 0 {
                rows += n;
                min = min.min(h.base_offset);
                max = max.max(last);
            }
            continue;
        }
        let bytes = reader::read_frame_bytes(&file, h.file_position, end)?;
        let mut cursor = BatchCursor::new(&bytes, h.file_position, false);
        let Some(frame) = cursor.next()? else {
            continue;
        };
        let offsets = frame_offsets(&mut decoder, &frame)?;
        rows += offsets.len() as i64;
        if let (Some(lo), Some(hi)) = (offsets.iter().min(), offsets.iter().max()) {
            min = min.min(*lo);
            max = max.max(*hi);
        }
    }
    Ok([rows, min, max])
}

fn frame_offsets(decoder: &mut Decoder, frame: &Frame<'_>) -> Result<Vec<i64>> {
    if frame.header.magic >= 2 {
        let mut builder = ArrowBuilder::new(*decoder.options(), &[Column::Offset]);
        builder.push(frame, 0)?;
        let decoded = builder.finish(None)?;
        let mut out = Vec::new();
        for batch in &decoded.batches {
            if let Some(col) = batch.column(0).as_any().downcast_ref::<Int64Array>() {
                out.extend(col.values().iter().copied());
            }
        }
        return Ok(out);
    }
    let mut records: Vec<OwnedRecord> = Vec::new();
    decoder.decode(frame, &mut records)?;
    Ok(records.iter().map(|r| r.offset).collect())
}

/// Run `f`, turning an error into a Java exception and a panic into a RuntimeException.
fn guarded<T>(env: &mut JNIEnv<'_>, default: T, f: impl FnOnce(&mut JNIEnv<'_>) -> Result<T>) -> T {
    let outcome = catch_unwind(AssertUnwindSafe(|| f(env)));
    let message = match outcome {
        Ok(Ok(value)) => return value,
        Ok(Err(err)) => (EXCEPTION, err.to_string()),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            (
                "java/lang/RuntimeException",
                format!("epochguard native decoder panicked: {what}"),
            )
        }
    };
    if !env.exception_check().unwrap_or(false) {
        let _ = env.throw_new(message.0, message.1);
    }
    default
}

fn java_string(env: &mut JNIEnv<'_>, s: &JString<'_>) -> Result<String> {
    env.get_string(s)
        .map(Into::into)
        .map_err(|e| Error::invalid(format!("string argument: {e}")))
}

fn bounds_of(env: &mut JNIEnv<'_>, array: &JLongArray<'_>) -> Result<Bounds> {
    if array.is_null() {
        return Ok(Bounds::ALL);
    }
    let mut buf = [0i64; 6];
    let len = env
        .get_array_length(array)
        .map_err(|e| Error::invalid(format!("bounds: {e}")))?;
    if len != 6 {
        return Err(Error::invalid(format!(
            "bounds: 6 longs expected, got {len}"
        )));
    }
    env.get_long_array_region(array, 0, &mut buf)
        .map_err(|e| Error::invalid(format!("bounds: {e}")))?;
    Bounds::from_slice(&buf)
}

/// `long decode(String path, long start, long end, String columns, boolean verifyCrc,
/// long maxDecompressedSize, long[] bounds, boolean withErrors)`: a handle to the decoded range (free
/// it with `close`).
#[no_mangle]
pub extern "system" fn Java_io_epochguard_spark_Native_decode<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    path: JString<'l>,
    start: jlong,
    end: jlong,
    columns: JString<'l>,
    verify: jboolean,
    max_decompressed: jlong,
    bounds: JLongArray<'l>,
    with_errors: jboolean,
) -> jlong {
    guarded(&mut env, 0, |env| {
        let path = java_string(env, &path)?;
        let columns = java_string(env, &columns)?;
        let bounds = bounds_of(env, &bounds)?;
        let opts = options(verify, max_decompressed)?;
        if with_errors == JNI_TRUE {
            // The file's own problems (gone, shorter than listed) are error rows too.
            let (from, to) = (u64::try_from(start), u64::try_from(end));
            let (Ok(start), Ok(end)) = (from, to) else {
                return Err(Error::invalid(format!("byte range {start}..{end}")));
            };
            let mut stats = Stats::default();
            let (columns, decoded) = (parse_columns(&columns)?, &mut stats.batches_decoded);
            let pieces = reporting::decode_file_reporting(
                Path::new(&path),
                start,
                end,
                opts,
                &columns,
                decoded,
            )?;
            return handle(Decoded {
                pieces,
                stream: None,
                stats,
            });
        }
        let file = InputFile::open(&PathBuf::from(&path))?;
        let (start, end) = range(&file, start, end)?;
        let mut stats = Stats::default();
        let path = PathBuf::from(&path);
        let stream = Stream::new(
            (&path, file),
            (start, end),
            &columns,
            (opts, bounds),
            &mut stats,
        )?;
        handle(Decoded {
            pieces: VecDeque::new(),
            stream: Some(stream),
            stats,
        })
    })
}

/// `long decodeBytes(ByteBuffer direct, long base, String columns, boolean verifyCrc,
/// long maxDecompressedSize, long[] bounds, boolean withErrors)`: as `decode`, over the buffer's
/// bytes (a range the JVM read from a Hadoop FileSystem; its first byte at absolute `base`). The
/// decoded batches own their memory: the buffer may be dropped once this returns.
#[no_mangle]
pub extern "system" fn Java_io_epochguard_spark_Native_decodeBytes<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    buffer: JByteBuffer<'l>,
    base: jlong,
    columns: JString<'l>,
    verify: jboolean,
    max_decompressed: jlong,
    bounds: JLongArray<'l>,
    with_errors: jboolean,
) -> jlong {
    guarded(&mut env, 0, |env| {
        let columns = java_string(env, &columns)?;
        let bounds = bounds_of(env, &bounds)?;
        let err = |e| Error::invalid(format!("decodeBytes: not a direct buffer ({e})"));
        let address = env.get_direct_buffer_address(&buffer).map_err(err)?;
        let len = env.get_direct_buffer_capacity(&buffer).map_err(err)?;
        let base = u64::try_from(base).map_err(|_| Error::invalid(format!("base {base} < 0")))?;
        // SAFETY: a direct buffer's `len` bytes at `address`, kept alive by the Java caller for this call.
        let data = unsafe { std::slice::from_raw_parts(address, len) };
        let end = base + len as u64;
        let opts = options(verify, max_decompressed)?;
        let how = (opts, bounds, with_errors == JNI_TRUE);
        handle(decode(Src::Bytes { data, base }, base, end, &columns, how)?)
    })
}

/// `int next(long handle, long arrowArray, long arrowSchema)`: moves the next batch, as a struct
/// array, into the C Data Interface structs at those addresses; its row count, -1 when done, -2 when
/// the next piece is a problem (take it with `problem`). `arrowSchema` 0: the array alone (the JVM
/// imports a reader's schema once and loads later batches into the same vectors).
#[no_mangle]
pub extern "system" fn Java_io_epochguard_spark_Native_next<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    array: jlong,
    schema: jlong,
) -> jint {
    guarded(&mut env, -1, |_| {
        if handle == 0 || array == 0 {
            return Err(Error::invalid("next: null handle or address"));
        }
        // SAFETY: `handle` came from `decode` and has not been closed (the Java reader owns it).
        let decoded = unsafe { &mut *(handle as *mut Decoded) };
        if let Some(stream) = decoded.stream.as_mut() {
            while decoded.pieces.is_empty() && !stream.runs.is_empty() {
                let batches = stream.next_window(&mut decoded.stats)?;
                decoded.pieces.extend(batches.into_iter().map(Piece::Batch));
            }
        }
        let batch = match decoded.pieces.front() {
            None => return Ok(-1),
            Some(Piece::Problem(..)) => return Ok(-2),
            Some(Piece::Batch(_)) => match decoded.pieces.pop_front() {
                Some(Piece::Batch(batch)) => batch,
                _ => return Ok(-1),
            },
        };
        let rows = jint::try_from(batch.num_rows())
            .map_err(|_| Error::invalid("a batch of more than 2^31 rows"))?;
        let (ffi_array, ffi_schema) = to_ffi(&for_the_jvm(batch)?.to_data())
            .map_err(|e| Error::invalid(format!("arrow export: {e}")))?;
        // SAFETY: the JVM allocated both structs (`ArrowArray.allocateNew`, `ArrowSchema.allocateNew`),
        // empty (released); writing moves ownership of the buffers to the importer, which releases them.
        unsafe {
            std::ptr::write(array as *mut FFI_ArrowArray, ffi_array);
            if schema != 0 {
                std::ptr::write(schema as *mut FFI_ArrowSchema, ffi_schema);
            }
        }
        Ok(rows)
    })
}

/// `String problem(long handle)`: the problem `next` announced, as "<byte position> <reason>".
#[no_mangle]
pub extern "system" fn Java_io_epochguard_spark_Native_problem<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
) -> jni::sys::jstring {
    guarded(&mut env, std::ptr::null_mut(), |env| {
        if handle == 0 {
            return Err(Error::invalid("problem: null handle"));
        }
        // SAFETY: as in `next`.
        let decoded = unsafe { &mut *(handle as *mut Decoded) };
        let Some(Piece::Problem(position, reason)) = decoded.pieces.pop_front() else {
            return Err(Error::invalid("problem: the next piece is not a problem"));
        };
        env.new_string(format!("{position} {reason}"))
            .map(|s| s.into_raw())
            .map_err(|e| Error::invalid(format!("new String: {e}")))
    })
}

/// `long[] stats(long handle)`: batches decoded, batches skipped by their headers, partial tail (-1).
#[no_mangle]
pub extern "system" fn Java_io_epochguard_spark_Native_stats<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
) -> jlongArray {
    guarded(&mut env, std::ptr::null_mut(), |env| {
        if handle == 0 {
            return Err(Error::invalid("stats: null handle"));
        }
        // SAFETY: as in `next`.
        let s = unsafe { &*(handle as *const Decoded) }.stats;
        long_array(env, &[s.batches_decoded, s.batches_skipped, s.partial_tail])
    })
}

/// `void close(long handle)`: frees what `decode` returned and was not handed out.
#[no_mangle]
pub extern "system" fn Java_io_epochguard_spark_Native_close<'l>(
    _env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
) {
    if handle != 0 {
        // SAFETY: `handle` came from `decode`; the Java reader closes it once.
        drop(unsafe { Box::from_raw(handle as *mut Decoded) });
    }
}

/// `long[] count(String path, long start, long end, boolean verifyCrc, long maxDecompressedSize)`:
/// {records, min offset, max offset} of the range.
#[no_mangle]
pub extern "system" fn Java_io_epochguard_spark_Native_count<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    path: JString<'l>,
    start: jlong,
    end: jlong,
    verify: jboolean,
    max_decompressed: jlong,
) -> jlongArray {
    guarded(&mut env, std::ptr::null_mut(), |env| {
        let path = java_string(env, &path)?;
        let got = count(&path, start, end, options(verify, max_decompressed)?)?;
        long_array(env, &got)
    })
}

/// `long[] batchIndex(String path)`: (position, size) pairs of the segment's batches, from their
/// headers, for cutting a large segment into batch-aligned byte ranges.
#[no_mangle]
pub extern "system" fn Java_io_epochguard_spark_Native_batchIndex<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    path: JString<'l>,
) -> jlongArray {
    guarded(&mut env, std::ptr::null_mut(), |env| {
        let path = java_string(env, &path)?;
        let file = InputFile::open(&PathBuf::from(&path))?;
        let (index, _) = reader::batch_index_file(&file, 0, file.len(), true)?;
        let flat: Vec<i64> = index
            .iter()
            .flat_map(|b| [b.file_position as i64, i64::from(b.size_in_bytes)])
            .collect();
        long_array(env, &flat)
    })
}

/// The batch as a struct array for the JVM reader: a key or value column of binary views as it is
/// (the reader's `BinaryViewColumnVector` reads the views), views nested deeper (header values) as
/// plain binary (Spark's `ArrowColumnVector` reads them).
fn for_the_jvm(batch: RecordBatch) -> Result<ArrayRef> {
    let batch = StructArray::from(batch);
    let (fields, columns, nulls) = batch.into_parts();
    let columns = columns
        .iter()
        .map(|c| match c.data_type() {
            DataType::BinaryView => Ok(c.clone()),
            _ => without_views(c.as_ref()),
        })
        .collect::<Result<Vec<_>>>()?;
    struct_of(&fields, columns, nulls)
}

/// A struct array of `columns` under `fields`' names, each field typed as its new column.
fn struct_of(
    fields: &Fields,
    columns: Vec<ArrayRef>,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef> {
    let fields: Fields = fields
        .iter()
        .zip(&columns)
        .map(|(f, c)| f.as_ref().clone().with_data_type(c.data_type().clone()))
        .collect();
    let array = StructArray::try_new(fields, columns, nulls)
        .map_err(|e| Error::invalid(format!("arrow: {e}")))?;
    Ok(Arc::new(array))
}

/// `array` with its binary and string views (at any depth) as plain binary and strings: Spark's
/// `ArrowColumnVector` reads a string view but no binary view, so the decoder may build either.
fn without_views(array: &dyn Array) -> Result<ArrayRef> {
    let err = |e: arrow_schema::ArrowError| Error::invalid(format!("arrow: {e}"));
    Ok(match array.data_type() {
        DataType::BinaryView => Arc::new(BinaryArray::from_iter(array.as_binary_view().iter())),
        DataType::Utf8View => Arc::new(StringArray::from_iter(array.as_string_view().iter())),
        DataType::Struct(fields) => {
            let a = array.as_struct();
            let columns = a
                .columns()
                .iter()
                .map(|c| without_views(c.as_ref()))
                .collect::<Result<Vec<_>>>()?;
            struct_of(fields, columns, a.nulls().cloned())?
        }
        DataType::List(field) => {
            let a = array.as_list::<i32>();
            let values = without_views(a.values().as_ref())?;
            let field = Arc::new(
                field
                    .as_ref()
                    .clone()
                    .with_data_type(values.data_type().clone()),
            );
            Arc::new(
                ListArray::try_new(field, a.offsets().clone(), values, a.nulls().cloned())
                    .map_err(err)?,
            )
        }
        _ => make_array(array.to_data()),
    })
}

fn long_array(env: &mut JNIEnv<'_>, values: &[i64]) -> Result<jlongArray> {
    let len = i32::try_from(values.len()).map_err(|_| Error::invalid("array too long"))?;
    let array = env
        .new_long_array(len)
        .map_err(|e| Error::invalid(format!("new long[]: {e}")))?;
    env.set_long_array_region(&array, 0, values)
        .map_err(|e| Error::invalid(format!("long[]: {e}")))?;
    Ok(array.into_raw())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{BinaryViewArray, StringViewArray};
    use arrow_buffer::OffsetBuffer;
    use arrow_schema::Field;

    #[test]
    fn views_become_plain_arrays_at_any_depth() -> Result<()> {
        let key = Arc::new(StringViewArray::from(vec![Some("n"), None])) as ArrayRef;
        let value =
            Arc::new(BinaryViewArray::from(vec![Some(&b"0"[..]), Some(&b""[..])])) as ArrayRef;
        let header = StructArray::try_new(
            Fields::from(vec![
                Field::new("key", DataType::Utf8View, true),
                Field::new("value", DataType::BinaryView, true),
            ]),
            vec![key, value.clone()],
            None,
        )
        .map_err(|e| Error::invalid(e.to_string()))?;
        let item = Arc::new(Field::new("item", header.data_type().clone(), true));
        let headers = ListArray::try_new(
            item,
            OffsetBuffer::new(vec![0, 2, 2].into()),
            Arc::new(header),
            None,
        )
        .map_err(|e| Error::invalid(e.to_string()))?;
        let batch = RecordBatch::try_from_iter(vec![
            ("value", value),
            ("headers", Arc::new(headers) as ArrayRef),
        ])
        .map_err(|e| Error::invalid(e.to_string()))?;
        let plain = without_views(&StructArray::from(batch))?;
        let plain = plain.as_struct();
        assert_eq!(plain.column(0).data_type(), &DataType::Binary);
        assert_eq!(plain.column(0).as_binary::<i32>().value(0), b"0");
        let list = plain.column(1).as_list::<i32>();
        let inner = list.values().as_struct();
        assert_eq!(inner.column(0).data_type(), &DataType::Utf8);
        assert_eq!(inner.column(1).data_type(), &DataType::Binary);
        assert_eq!(inner.column(0).as_string::<i32>().value(0), "n");
        assert!(inner.column(0).is_null(1));
        assert_eq!((list.value_length(0), list.value_length(1)), (2, 0));
        Ok(())
    }

    #[test]
    fn bounds_keep_a_batch_only_when_its_header_can_match() {
        let mut h = BatchHeader {
            file_position: 0,
            size_in_bytes: 100,
            base_offset: 10,
            batch_length: 88,
            partition_leader_epoch: 3,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: 9,
            base_timestamp: 1000,
            max_timestamp: 2000,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records_count: 10,
        };
        let with = |offset, timestamp, epoch| Bounds {
            offset,
            timestamp,
            epoch,
        };
        let all = (i64::MIN, i64::MAX);
        assert!(Bounds::ALL.may_hold(&h) && Bounds::ALL.is_all());
        assert!(with((19, 19), all, all).may_hold(&h) && !with((20, 30), all, all).may_hold(&h));
        assert!(!with((0, 9), all, all).may_hold(&h));
        assert!(with(all, all, (3, 3)).may_hold(&h) && !with(all, all, (4, 9)).may_hold(&h));
        // create time: only the max is known, so a range below it may hold earlier records
        assert!(
            with(all, (0, 1500), all).may_hold(&h)
                && !with(all, (2001, i64::MAX), all).may_hold(&h)
        );
        h.attributes = 0x08; // log-append time: every record carries the max
        assert!(
            !with(all, (0, 1500), all).may_hold(&h) && with(all, (2000, 2000), all).may_hold(&h)
        );
        h.magic = 1; // a legacy wrapper's header is not trusted
        assert!(with((50, 60), all, all).may_hold(&h));
    }
}

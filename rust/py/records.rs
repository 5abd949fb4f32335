//! Bindings for `crate::records`: record batches as Python objects, Arrow export, encoding.
//! Inputs are borrowed (buffer protocol) or read from a file in bounded positioned reads, and decoded
//! with the GIL released.

use std::ffi::CString;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::RecordBatchIterator;
use arrow_buffer::Buffer;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyCapsule, PyString, PyTuple};

use crate::file::InputFile;
use crate::records::arrow::{decode_projected_in, ArrowDecoded, Column, Layout, View};
use crate::records::batch::verify_crc;
use crate::records::headers::{headers_arrow, scan_headers as scan_headers_core, HeaderScan};
use crate::records::{
    batch_index as batch_index_core, next_decoded, reader, BatchCursor, BatchHeader, BatchLocation,
    BatchSpec, Compression, DecodeOptions, DecodedBatch, Decoder, Header, NewRecord, OwnedRecord,
    DEFAULT_MAX_DECOMPRESSED_SIZE,
};
use crate::reporting::{self, Piece, Src};

/// The bytes behind a `source` argument: a caller's buffer, or a file read with positioned reads
/// (never mapped: a file that shrinks under the reader is an error or a partial tail, not SIGBUS).
enum Backing {
    /// Shared, so that Arrow views can keep the caller's buffer alive (see [`Source::arrow_input`]).
    Buffer(Arc<PyBuffer<u8>>),
    /// Buffers that export signed bytes (format "b", e.g. `pyarrow.Buffer`).
    SignedBuffer(Arc<PyBuffer<i8>>),
    File(InputFile),
}

/// A byte range of a backing store; positions reported are absolute within the backing.
struct Source {
    backing: Backing,
    start: usize,
    end: usize,
}

impl Source {
    fn open(source: &Bound<'_, PyAny>, offset: u64, length: Option<u64>) -> PyResult<Source> {
        let backing = if source.is_instance_of::<PyString>() || source.hasattr("__fspath__")? {
            let path: PathBuf = source.extract()?;
            Backing::File(InputFile::open(&path)?)
        } else {
            let backing = match PyBuffer::<u8>::get(source) {
                Ok(buffer) => Backing::Buffer(Arc::new(buffer)),
                Err(unsigned_err) => match PyBuffer::<i8>::get(source) {
                    Ok(buffer) => Backing::SignedBuffer(Arc::new(buffer)),
                    Err(_) => return Err(unsigned_err),
                },
            };
            let contiguous = match &backing {
                Backing::Buffer(b) => b.is_c_contiguous(),
                Backing::SignedBuffer(b) => b.is_c_contiguous(),
                Backing::File(_) => true,
            };
            if !contiguous {
                return Err(PyBufferError::new_err(
                    "source buffer must be C-contiguous bytes",
                ));
            }
            backing
        };
        let total = match &backing {
            Backing::Buffer(b) => b.len_bytes(),
            Backing::SignedBuffer(b) => b.len_bytes(),
            Backing::File(f) => usize::try_from(f.len()).unwrap_or(usize::MAX),
        };
        let start = usize::try_from(offset)
            .ok()
            .filter(|&s| s <= total)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "offset {offset} is past the end of the source ({total} bytes)"
                ))
            })?;
        let end = match length {
            None => total,
            Some(len) => usize::try_from(len).ok().and_then(|l| start.checked_add(l)).filter(|&e| e <= total).ok_or_else(
                || PyValueError::new_err(format!("offset {offset} + length {len} is past the end of the source ({total} bytes)")),
            )?,
        };
        Ok(Source {
            backing,
            start,
            end,
        })
    }

    /// All of an in-memory source's bytes (empty for a file).
    fn all_bytes(&self) -> &[u8] {
        match &self.backing {
            // SAFETY: the buffer is C-contiguous, `len_bytes` long and kept alive (exported) by `self`.
            Backing::Buffer(b) => unsafe {
                std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes())
            },
            // SAFETY: as above; i8 and u8 have the same layout.
            Backing::SignedBuffer(b) => unsafe {
                std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes())
            },
            Backing::File(_) => &[],
        }
    }

    /// The range's bytes, for an in-memory source (`None` for a file).
    fn bytes(&self) -> Option<&[u8]> {
        match &self.backing {
            Backing::File(_) => None,
            _ => Some(
                self.all_bytes()
                    .get(self.start..self.end)
                    .unwrap_or_default(),
            ),
        }
    }

    fn base(&self) -> u64 {
        self.start as u64
    }

    /// The whole in-memory source as an Arrow buffer that views may point into: the caller's own
    /// memory (kept alive by the buffer) when it is read-only, else a copy (a writable buffer could
    /// change under the views after the decode). `None` for a file.
    fn arrow_input(&self) -> Option<Buffer> {
        let (owner, readonly): (Arc<dyn arrow_buffer::alloc::Allocation>, bool) =
            match &self.backing {
                Backing::Buffer(b) => (b.clone(), b.readonly()),
                Backing::SignedBuffer(b) => (b.clone(), b.readonly()),
                Backing::File(_) => return None,
            };
        let all = self.all_bytes();
        match NonNull::new(all.as_ptr().cast_mut()) {
            // SAFETY: `all` is the exported buffer's memory, `len` bytes, valid and immutable
            // (read-only, and exported: CPython refuses to resize a bytearray while it is) for as
            // long as the export lives, which `owner` keeps alive for the Arrow buffer's lifetime.
            Some(ptr) if readonly => {
                Some(unsafe { Buffer::from_custom_allocation(ptr, all.len(), owner) })
            }
            _ => Some(Buffer::from_slice_ref(all)),
        }
    }

    /// Decode the range; `threads` splits an in-memory source's batches (a file: one thread).
    fn decode(
        &self,
        opts: DecodeOptions,
        columns: &[Column],
        threads: usize,
        layout: Layout,
    ) -> crate::Result<ArrowDecoded> {
        if let Backing::File(f) = &self.backing {
            return reader::decode_file(f, self.base(), self.end as u64, opts, columns, layout);
        }
        let input = match layout {
            Layout::BinaryView => self.arrow_input(),
            Layout::Binary => None,
        };
        let data = match &input {
            Some(all) => all.as_slice().get(self.start..self.end).unwrap_or_default(),
            None => self.bytes().unwrap_or_default(),
        };
        let view = View {
            layout,
            input: input.as_ref(),
        };
        decode_projected_in(data, self.base(), opts, columns, threads, view)
    }

    fn batch_index(
        &self,
        allow_partial_tail: bool,
    ) -> crate::Result<(Vec<BatchLocation>, Option<u64>)> {
        match (&self.backing, self.bytes()) {
            (Backing::File(f), _) => {
                reader::batch_index_file(f, self.base(), self.end as u64, allow_partial_tail)
            }
            (_, bytes) => {
                batch_index_core(bytes.unwrap_or_default(), self.base(), allow_partial_tail)
            }
        }
    }

    fn scan_headers(&self, verify: bool, allow_partial_tail: bool) -> crate::Result<HeaderScan> {
        match (&self.backing, self.bytes()) {
            (Backing::File(f), _) => reader::scan_headers_file(
                f,
                self.base(),
                self.end as u64,
                verify,
                allow_partial_tail,
            ),
            (_, bytes) => scan_headers_core(
                bytes.unwrap_or_default(),
                self.base(),
                verify,
                allow_partial_tail,
            ),
        }
    }

    /// Decode the batch at relative position `pos`; with the position of a partial tail at the end.
    /// With `headers_only`, a v2 data batch is CRC-checked (if the decoder verifies) but its records
    /// are left undecoded (`false` beside it); control batches and legacy messages are decoded whole.
    fn next_batch(
        &self,
        pos: usize,
        decoder: &mut Decoder,
        headers_only: bool,
    ) -> crate::Result<(Option<Batch>, Option<u64>)> {
        let allow_partial_tail = decoder.options().allow_partial_tail;
        let at = self.base() + pos as u64;
        let read;
        let data = match (&self.backing, self.bytes()) {
            (Backing::File(f), _) => {
                read = reader::read_frame_bytes(f, at, self.end as u64)?;
                if read.is_empty() && at < self.end as u64 {
                    // Nothing left where the file had bytes when opened: it shrank under us.
                    return match allow_partial_tail {
                        true => Ok((None, Some(at))),
                        false => Err(reader::shrunk(at, self.end as u64)),
                    };
                }
                &read[..]
            }
            (_, bytes) => bytes.unwrap_or_default().get(pos..).unwrap_or_default(),
        };
        let mut cursor =
            BatchCursor::new(data, at, allow_partial_tail).crc_first(decoder.options().verify_crc);
        if headers_only {
            return next_header(&mut cursor, decoder).map(|b| (b, cursor.partial_tail()));
        }
        next_decoded(&mut cursor, decoder).map(|b| (b.map(|b| (b, true)), cursor.partial_tail()))
    }
}

/// A batch read by [`Source::next_batch`], and whether its records were decoded.
type Batch = (DecodedBatch, bool);

/// The next batch of `cursor`, its records decoded only where the header alone cannot say what a
/// consumer needs: a legacy message (its record count) and a control batch (its control type).
fn next_header(
    cursor: &mut BatchCursor<'_>,
    decoder: &mut Decoder,
) -> crate::Result<Option<Batch>> {
    let Some(frame) = cursor.next()? else {
        return Ok(None);
    };
    let header = frame.header;
    if header.magic >= 2 && !header.is_control() {
        if decoder.options().verify_crc {
            verify_crc(&frame)?;
        }
        let records = Vec::new();
        return Ok(Some((DecodedBatch { header, records }, false)));
    }
    let mut records = Vec::new();
    let header = decoder.decode(&frame, &mut records)?;
    Ok(Some((DecodedBatch { header, records }, true)))
}

fn options(
    verify_crc: bool,
    allow_partial_tail: bool,
    max_decompressed_size: usize,
) -> DecodeOptions {
    DecodeOptions {
        verify_crc,
        allow_partial_tail,
        max_decompressed_size,
    }
}

/// One record. Bytes fields are copied out on access.
#[pyclass(frozen, name = "Record", module = "epochguard._core")]
pub struct PyRecord(OwnedRecord);

#[pymethods]
impl PyRecord {
    #[getter]
    fn offset(&self) -> i64 {
        self.0.offset
    }
    #[getter]
    fn timestamp(&self) -> i64 {
        self.0.timestamp
    }
    #[getter]
    fn attributes(&self) -> i8 {
        self.0.attributes
    }
    #[getter]
    fn timestamp_delta(&self) -> i64 {
        self.0.timestamp_delta
    }
    #[getter]
    fn offset_delta(&self) -> i32 {
        self.0.offset_delta
    }
    #[getter]
    fn key<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.0.key.as_deref().map(|b| PyBytes::new(py, b))
    }
    #[getter]
    fn value<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.0.value.as_deref().map(|b| PyBytes::new(py, b))
    }
    #[getter]
    fn headers<'py>(&self, py: Python<'py>) -> Vec<(&str, Option<Bound<'py, PyBytes>>)> {
        self.0
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref().map(|b| PyBytes::new(py, b))))
            .collect()
    }
    fn __repr__(&self) -> String {
        let r = &self.0;
        format!(
            "Record(offset={}, timestamp={}, key_len={}, value_len={}, headers={})",
            r.offset,
            r.timestamp,
            r.key.as_ref().map_or(-1, |k| k.len() as i64),
            r.value.as_ref().map_or(-1, |v| v.len() as i64),
            r.headers.len()
        )
    }
}

/// One batch (a v2 record batch, or a legacy message / compressed wrapper) with its records decoded
/// (unless read with `iter_batches(..., headers_only=True)`: then `records()` raises).
#[pyclass(frozen, name = "RecordBatch", module = "epochguard._core")]
pub struct PyRecordBatch {
    header: BatchHeader,
    records: Vec<OwnedRecord>,
    decoded: bool,
}

#[pymethods]
impl PyRecordBatch {
    #[getter]
    fn file_position(&self) -> u64 {
        self.header.file_position
    }
    #[getter]
    fn size_in_bytes(&self) -> u32 {
        self.header.size_in_bytes
    }
    #[getter]
    fn base_offset(&self) -> i64 {
        self.header.base_offset
    }
    #[getter]
    fn batch_length(&self) -> i32 {
        self.header.batch_length
    }
    #[getter]
    fn partition_leader_epoch(&self) -> i32 {
        self.header.partition_leader_epoch
    }
    #[getter]
    fn magic(&self) -> i8 {
        self.header.magic
    }
    #[getter]
    fn crc(&self) -> u32 {
        self.header.crc
    }
    #[getter]
    fn attributes(&self) -> i16 {
        self.header.attributes
    }
    #[getter]
    fn compression(&self) -> &'static str {
        self.header
            .compression()
            .unwrap_or(Compression::None)
            .name()
    }
    #[getter]
    fn timestamp_type(&self) -> i8 {
        self.header.timestamp_type()
    }
    #[getter]
    fn is_transactional(&self) -> bool {
        self.header.is_transactional()
    }
    #[getter]
    fn is_control(&self) -> bool {
        self.header.is_control()
    }
    #[getter]
    fn has_delete_horizon(&self) -> bool {
        self.header.has_delete_horizon()
    }
    #[getter]
    fn last_offset_delta(&self) -> i32 {
        self.header.last_offset_delta
    }
    #[getter]
    fn base_timestamp(&self) -> i64 {
        self.header.base_timestamp
    }
    #[getter]
    fn max_timestamp(&self) -> i64 {
        self.header.max_timestamp
    }
    #[getter]
    fn producer_id(&self) -> i64 {
        self.header.producer_id
    }
    #[getter]
    fn producer_epoch(&self) -> i16 {
        self.header.producer_epoch
    }
    #[getter]
    fn base_sequence(&self) -> i32 {
        self.header.base_sequence
    }
    #[getter]
    fn records_count(&self) -> i32 {
        self.header.records_count
    }
    #[getter]
    fn last_offset(&self) -> i64 {
        self.header.last_offset()
    }
    #[getter]
    fn next_offset(&self) -> i64 {
        self.header.next_offset()
    }
    fn records(&self) -> PyResult<Vec<PyRecord>> {
        self.check_decoded()?;
        Ok(self.records.iter().cloned().map(PyRecord).collect())
    }
    /// Whether the records were decoded (false for a data batch read with `headers_only=True`).
    #[getter]
    fn decoded(&self) -> bool {
        self.decoded
    }
    fn __len__(&self) -> PyResult<usize> {
        self.check_decoded()?;
        Ok(self.records.len())
    }
    fn __repr__(&self) -> String {
        let h = &self.header;
        format!(
            "RecordBatch(file_position={}, base_offset={}, last_offset={}, magic={}, partition_leader_epoch={}, compression={:?}, records={})",
            h.file_position,
            h.base_offset,
            h.last_offset(),
            h.magic,
            h.partition_leader_epoch,
            self.compression(),
            self.records.len()
        )
    }
}

impl PyRecordBatch {
    fn check_decoded(&self) -> PyResult<()> {
        match self.decoded {
            true => Ok(()),
            false => Err(PyValueError::new_err(
                "this batch was read with headers_only=True: its records are not decoded",
            )),
        }
    }
}

/// Lazily decodes one batch per `__next__` (GIL released while decoding).
#[pyclass(name = "BatchIterator", module = "epochguard._core")]
pub struct PyBatchIterator {
    source: Source,
    decoder: Decoder,
    headers_only: bool,
    /// Next unread byte, relative to `source.bytes()`.
    pos: usize,
    done: bool,
    #[pyo3(get)]
    partial_tail: Option<u64>,
}

#[pymethods]
impl PyBatchIterator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(mut slf: PyRefMut<'_, Self>, py: Python<'_>) -> PyResult<Option<PyRecordBatch>> {
        let this = &mut *slf;
        if this.done {
            return Ok(None);
        }
        let (source, decoder, pos) = (&this.source, &mut this.decoder, this.pos);
        let headers_only = this.headers_only;
        let step = py.detach(|| source.next_batch(pos, decoder, headers_only));
        match step {
            Ok((Some((batch, decoded)), _)) => {
                this.pos += batch.header.size_in_bytes as usize;
                Ok(Some(PyRecordBatch {
                    header: batch.header,
                    records: batch.records,
                    decoded,
                }))
            }
            Ok((None, tail)) => {
                this.done = true;
                this.partial_tail = tail;
                Ok(None)
            }
            Err(e) => {
                this.done = true;
                Err(e.into())
            }
        }
    }
}

#[pyfunction]
#[pyo3(signature = (source, *, verify_crc=true, allow_partial_tail=false, max_decompressed_size=DEFAULT_MAX_DECOMPRESSED_SIZE, offset=0, length=None, headers_only=false))]
#[allow(clippy::too_many_arguments)]
fn iter_batches(
    source: &Bound<'_, PyAny>,
    verify_crc: bool,
    allow_partial_tail: bool,
    max_decompressed_size: usize,
    offset: u64,
    length: Option<u64>,
    headers_only: bool,
) -> PyResult<PyBatchIterator> {
    Ok(PyBatchIterator {
        source: Source::open(source, offset, length)?,
        decoder: Decoder::new(options(
            verify_crc,
            allow_partial_tail,
            max_decompressed_size,
        )),
        headers_only,
        pos: 0,
        done: false,
        partial_tail: None,
    })
}

/// Decoded records as Arrow; export with the Arrow PyCapsule stream interface.
#[pyclass(frozen, name = "ArrowRecords", module = "epochguard._core")]
pub struct PyArrowRecords(ArrowDecoded);

#[pymethods]
impl PyArrowRecords {
    #[getter]
    fn partial_tail(&self) -> Option<u64> {
        self.0.partial_tail
    }
    #[getter]
    fn num_rows(&self) -> usize {
        self.0.num_rows()
    }
    fn __len__(&self) -> usize {
        self.0.num_rows()
    }
    /// The records as an `ArrowArrayStream` capsule (`requested_schema` is not supported and ignored).
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        let batches = self.0.batches.clone();
        let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), self.0.schema.clone());
        let stream = FFI_ArrowArrayStream::new(Box::new(reader));
        let name =
            CString::new("arrow_array_stream").map_err(|e| PyValueError::new_err(e.to_string()))?;
        PyCapsule::new(py, stream, Some(name))
    }
}

/// Names of every column `decode_arrow(columns=...)` accepts: the record columns of a full decode
/// (its default, in order), then the computed ones.
#[pyfunction]
fn record_columns() -> (Vec<&'static str>, Vec<&'static str>) {
    (
        Column::RECORD.iter().map(|c| c.name()).collect(),
        Column::COMPUTED.iter().map(|c| c.name()).collect(),
    )
}

#[pyfunction]
#[pyo3(signature = (source, *, columns=None, verify_crc=true, allow_partial_tail=false, max_decompressed_size=DEFAULT_MAX_DECOMPRESSED_SIZE, offset=0, length=None, threads=1, binary_view=false))]
#[allow(clippy::too_many_arguments)]
fn decode_arrow(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    columns: Option<Vec<String>>,
    verify_crc: bool,
    allow_partial_tail: bool,
    max_decompressed_size: usize,
    offset: u64,
    length: Option<u64>,
    threads: usize,
    binary_view: bool,
) -> PyResult<PyArrowRecords> {
    if threads == 0 {
        return Err(PyValueError::new_err("threads must be at least 1"));
    }
    let columns = match columns {
        None => Column::RECORD.to_vec(),
        Some(names) => Column::parse_list(&names)?,
    };
    let source = Source::open(source, offset, length)?;
    let opts = options(verify_crc, allow_partial_tail, max_decompressed_size);
    let layout = match binary_view {
        true => Layout::BinaryView,
        false => Layout::Binary,
    };
    let decoded = py.detach(|| source.decode(opts, &columns, threads, layout))?;
    Ok(PyArrowRecords(decoded))
}

/// `withErrors`' decode (`crate::reporting`, the one implementation both `kafka-log` readers use):
/// the range's records and the problems between them, in order, an `ArrowRecords` of one batch or a
/// `(byte position, reason)` each. A path's own problems (gone, shorter than `offset + length`) are
/// problems too; a buffer's range must lie within it.
#[pyfunction]
#[pyo3(signature = (source, *, columns=None, verify_crc=true, max_decompressed_size=DEFAULT_MAX_DECOMPRESSED_SIZE, offset=0, length=None))]
fn decode_arrow_reporting<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    columns: Option<Vec<String>>,
    verify_crc: bool,
    max_decompressed_size: usize,
    offset: u64,
    length: Option<u64>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let columns = match columns {
        None => Column::RECORD.to_vec(),
        Some(names) => Column::parse_list(&names)?,
    };
    let opts = options(verify_crc, false, max_decompressed_size);
    let schema = crate::records::arrow::projected_schema(&columns);
    let pieces = if source.is_instance_of::<PyString>() || source.hasattr("__fspath__")? {
        let path: PathBuf = source.extract()?;
        let end = match length {
            Some(len) => offset.checked_add(len).ok_or_else(|| {
                PyValueError::new_err(format!("offset {offset} + length {len} overflows"))
            })?,
            None => std::fs::metadata(&path).map_or(offset, |m| m.len().max(offset)),
        };
        py.detach(|| reporting::decode_file_reporting(&path, offset, end, opts, &columns, &mut 0))?
    } else {
        let source = Source::open(source, offset, length)?;
        let src = Src::Bytes {
            data: source.all_bytes(),
            base: 0,
        };
        let (start, end) = (source.start as u64, source.end as u64);
        py.detach(|| reporting::decode_reporting(src, start, end, opts, &columns, &mut 0))?
    };
    pieces
        .into_iter()
        .map(|piece| match piece {
            Piece::Batch(batch) => {
                let records = PyArrowRecords(ArrowDecoded {
                    schema: schema.clone(),
                    batches: vec![batch],
                    partial_tail: None,
                });
                Ok(Bound::new(py, records)?.into_any())
            }
            Piece::Problem(position, reason) => {
                Ok((position, reason).into_pyobject(py)?.into_any())
            }
        })
        .collect()
}

#[pyfunction]
#[pyo3(signature = (source, *, allow_partial_tail=false, offset=0, length=None))]
fn batch_index(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    allow_partial_tail: bool,
    offset: u64,
    length: Option<u64>,
) -> PyResult<Vec<(u64, u32, i64, i64)>> {
    let source = Source::open(source, offset, length)?;
    let (locations, _) = py.detach(|| source.batch_index(allow_partial_tail))?;
    Ok(locations
        .into_iter()
        .map(|l| {
            (
                l.file_position,
                l.size_in_bytes,
                l.base_offset,
                l.last_offset,
            )
        })
        .collect())
}

/// One Arrow row per batch header (`crate::records::headers`), records never read (with
/// `verify_crc`, read for their CRC only), as an `ArrowRecords` stream.
#[pyfunction]
#[pyo3(signature = (source, *, verify_crc=false, allow_partial_tail=false, offset=0, length=None))]
fn scan_headers(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    verify_crc: bool,
    allow_partial_tail: bool,
    offset: u64,
    length: Option<u64>,
) -> PyResult<PyArrowRecords> {
    let source = Source::open(source, offset, length)?;
    let arrow = py.detach(|| {
        source
            .scan_headers(verify_crc, allow_partial_tail)
            .and_then(|scan| headers_arrow(&scan))
    })?;
    Ok(PyArrowRecords(arrow))
}

/// A record tuple from Python: `(key, value[, headers[, timestamp]])`.
struct PyNewRecord {
    key: Option<PyBackedBytes>,
    value: Option<PyBackedBytes>,
    headers: Vec<(String, Option<PyBackedBytes>)>,
    timestamp: Option<i64>,
}

impl<'py> FromPyObject<'_, 'py> for PyNewRecord {
    type Error = PyErr;
    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<Self> {
        let t = obj.cast::<PyTuple>()?;
        if !(2..=4).contains(&t.len()) {
            return Err(PyValueError::new_err(format!(
                "a record is (key, value[, headers[, timestamp]]), got a tuple of {}",
                t.len()
            )));
        }
        let headers = match t.len() > 2 {
            true => t
                .get_item(2)?
                .extract::<Option<Vec<(String, Option<PyBackedBytes>)>>>()?
                .unwrap_or_default(),
            false => Vec::new(),
        };
        let timestamp = match t.len() > 3 {
            true => t.get_item(3)?.extract()?,
            false => None,
        };
        Ok(PyNewRecord {
            key: t.get_item(0)?.extract()?,
            value: t.get_item(1)?.extract()?,
            headers,
            timestamp,
        })
    }
}

#[pyfunction]
// pyo3 renders negative defaults as `...`; spell the signature out for help() and stubtest.
#[pyo3(
    text_signature = "(records, *, base_offset=0, partition_leader_epoch=-1, compression='none', timestamp_type=0, base_timestamp=None, producer_id=-1, producer_epoch=-1, base_sequence=-1, is_transactional=False, is_control=False)"
)]
#[pyo3(signature = (records, *, base_offset=0, partition_leader_epoch=-1, compression="none", timestamp_type=0,
    base_timestamp=None, producer_id=-1, producer_epoch=-1, base_sequence=-1, is_transactional=false, is_control=false))]
#[allow(clippy::too_many_arguments)]
fn encode_batch<'py>(
    py: Python<'py>,
    records: Vec<PyNewRecord>,
    base_offset: i64,
    partition_leader_epoch: i32,
    compression: &str,
    timestamp_type: i8,
    base_timestamp: Option<i64>,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    is_transactional: bool,
    is_control: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let compression = Compression::from_name(compression).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown compression {compression:?} (none, gzip, snappy, lz4 or zstd)"
        ))
    })?;
    let spec = BatchSpec {
        base_offset,
        partition_leader_epoch,
        compression,
        timestamp_type,
        base_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        is_transactional,
        is_control,
    };
    let views: Vec<NewRecord<'_>> = records
        .iter()
        .map(|r| NewRecord {
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            headers: r
                .headers
                .iter()
                .map(|(k, v)| Header {
                    key: k,
                    value: v.as_deref(),
                })
                .collect(),
            timestamp: r.timestamp,
        })
        .collect();
    let bytes = py.detach(|| crate::records::encode_batch(&spec, &views))?;
    Ok(PyBytes::new(py, &bytes))
}

/// Kafka's `Utils.murmur2` of `key` (the default partitioner's hash), a signed 32-bit int.
#[pyfunction]
fn murmur2(key: &[u8]) -> i32 {
    crate::records::produce::murmur2(key)
}

/// `toPositive(murmur2(key)) % partitions`: the partition Java's default partitioner gives a key.
#[pyfunction]
fn partition_for_key(key: &[u8], partitions: i32) -> PyResult<i32> {
    if partitions <= 0 {
        return Err(PyValueError::new_err(format!(
            "partitions must be positive: {partitions}"
        )));
    }
    Ok(crate::records::produce::partition_for_key(key, partitions))
}

/// The `RecordBatch`es of an object that exports an Arrow stream (`__arrow_c_stream__`: a
/// pyarrow Table, RecordBatchReader...). Imported with the GIL held (a stream may call into Python).
fn import_arrow_stream(data: &Bound<'_, PyAny>) -> PyResult<Vec<arrow_array::RecordBatch>> {
    if !data.hasattr("__arrow_c_stream__")? {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "expected an Arrow table (an object with __arrow_c_stream__), not {}",
            data.get_type().name()?
        )));
    }
    let capsule = data.call_method0("__arrow_c_stream__")?;
    let capsule = capsule.cast::<PyCapsule>()?;
    let name =
        CString::new("arrow_array_stream").map_err(|e| PyValueError::new_err(e.to_string()))?;
    let pointer = capsule.pointer_checked(Some(name.as_c_str()))?;
    // SAFETY: the capsule holds an ArrowArrayStream (checked by name); from_raw moves it out and leaves
    // a released stream behind, so the capsule's destructor does not release it twice.
    let stream =
        unsafe { FFI_ArrowArrayStream::from_raw(pointer.as_ptr().cast::<FFI_ArrowArrayStream>()) };
    let reader = arrow_array::ffi_stream::ArrowArrayStreamReader::try_new(stream)
        .map_err(|e| PyValueError::new_err(format!("cannot read the Arrow stream: {e}")))?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PyValueError::new_err(format!("cannot read the Arrow stream: {e}")))
}

/// One encoded batch as Python sees it: (partition, batch bytes, row indices as little-endian u32).
type ProducedTuple<'py> = (i32, Bound<'py, PyBytes>, Bound<'py, PyBytes>);

/// `send_arrow`'s encoder: the rows of `data` (an Arrow table) partitioned as the producer's `send`
/// (an explicit `partition`, else murmur2 of the key, else `sticky_partition`) and cut into v2 batches
/// of at most `batch_size` bytes per partition, with the GIL released. A list of `(partition, batch
/// bytes, row indices)`, the indices as little-endian u32 (the input rows the batch holds, in order).
#[pyfunction]
#[pyo3(signature = (data, *, partitions, sticky_partition, default_timestamp, batch_size, compression="none"))]
fn encode_arrow_batches<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    partitions: i32,
    sticky_partition: i32,
    default_timestamp: i64,
    batch_size: usize,
    compression: &str,
) -> PyResult<Vec<ProducedTuple<'py>>> {
    let compression = Compression::from_name(compression).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown compression {compression:?} (none, gzip, snappy, lz4 or zstd)"
        ))
    })?;
    let batches = import_arrow_stream(data)?;
    let opts = crate::records::produce::ArrowProduceOptions {
        partitions,
        sticky_partition,
        default_timestamp,
        batch_size,
        compression,
    };
    let produced = py.detach(|| crate::records::produce::encode_arrow(&batches, &opts))?;
    Ok(produced
        .into_iter()
        .map(|b| {
            let rows: Vec<u8> = b.rows.iter().flat_map(|r| r.to_le_bytes()).collect();
            (
                b.partition,
                PyBytes::new(py, &b.bytes),
                PyBytes::new(py, &rows),
            )
        })
        .collect())
}

/// A copy of one encoded v2 batch with an idempotent producer's id, epoch and base sequence, and
/// its CRC, written in (the producer does this when the batch is first sent); `is_transactional`
/// sets the batch's transactional attribute (a transactional producer's batches).
#[pyfunction]
#[pyo3(signature = (batch, producer_id, producer_epoch, base_sequence, *, is_transactional=false))]
fn with_producer_state<'py>(
    py: Python<'py>,
    batch: &[u8],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    is_transactional: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut copy = batch.to_vec();
    crate::records::produce::set_producer_state(
        &mut copy,
        producer_id,
        producer_epoch,
        base_sequence,
        is_transactional,
    )?;
    Ok(PyBytes::new(py, &copy))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(murmur2, m)?)?;
    m.add_function(wrap_pyfunction!(partition_for_key, m)?)?;
    m.add_function(wrap_pyfunction!(encode_arrow_batches, m)?)?;
    m.add_function(wrap_pyfunction!(with_producer_state, m)?)?;
    m.add_class::<PyRecord>()?;
    m.add_class::<PyRecordBatch>()?;
    m.add_class::<PyBatchIterator>()?;
    m.add_class::<PyArrowRecords>()?;
    m.add_function(wrap_pyfunction!(iter_batches, m)?)?;
    m.add_function(wrap_pyfunction!(decode_arrow, m)?)?;
    m.add_function(wrap_pyfunction!(decode_arrow_reporting, m)?)?;
    m.add_function(wrap_pyfunction!(record_columns, m)?)?;
    m.add_function(wrap_pyfunction!(batch_index, m)?)?;
    m.add_function(wrap_pyfunction!(scan_headers, m)?)?;
    m.add_function(wrap_pyfunction!(encode_batch, m)?)?;
    Ok(())
}

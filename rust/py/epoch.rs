//! Python bindings for the epoch cache, checkpoint file and divergence search.
//!
//! Scalar calls are plain methods; batched calls borrow any int32/int64 buffer (numpy, array.array,
//! memoryview; Arrow arrays via the C Data Interface), run with the GIL released and hand back numpy
//! arrays viewing Rust-owned memory.

use std::ffi::{c_int, c_void, CStr};
use std::path::PathBuf;
use std::ptr;

use arrow_array::ffi::{from_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_buffer::{ArrowNativeType, ScalarBuffer};
use arrow_schema::DataType;
use pyo3::buffer::{Element, PyBuffer};
use pyo3::exceptions::{PyBufferError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyCapsule, PyIterator, PyList, PyString, PyTuple, PyType};

use crate::checkpoint;
use crate::divergence::{self, Histories};
use crate::epoch_cache::LeaderEpochCache;

/// Kafka's leader-epoch cache: `(epoch, start_offset)` entries, both strictly increasing.
#[pyclass(name = "LeaderEpochCache", module = "epochguard._core", eq)]
#[derive(Clone, Default, PartialEq)]
pub struct PyLeaderEpochCache {
    pub(crate) inner: LeaderEpochCache,
}

#[pymethods]
impl PyLeaderEpochCache {
    /// Build from `(epoch, start_offset)` pairs, replayed through `assign` (as Kafka loads a checkpoint).
    /// Any iterable of pairs: tuples, lists read back from JSON, the rows of an N x 2 integer array.
    #[new]
    #[pyo3(signature = (entries = None), text_signature = "(entries=())")]
    fn new(entries: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let mut inner = LeaderEpochCache::new();
        if let Some(entries) = entries {
            for item in PyIterator::from_object(entries)? {
                let (epoch, start_offset) = entry_pair(&item?)?;
                inner.assign(epoch, start_offset)?;
            }
        }
        Ok(Self { inner })
    }

    /// Pickle (and Spark broadcast) as the entries, rebuilt by the constructor.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> (Bound<'py, PyType>, (Vec<(i32, i64)>,)) {
        (slf.get_type(), (slf.borrow().entries(),))
    }

    /// Iterate over the `(epoch, start_offset)` entries, oldest first (a snapshot).
    fn __iter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyIterator>> {
        PyList::new(slf.py(), slf.borrow().entries())?
            .as_any()
            .try_iter()
    }

    /// Record that `epoch` starts at `start_offset` (Kafka's rules for stale and conflicting entries).
    fn assign(&mut self, epoch: i32, start_offset: i64) -> PyResult<()> {
        self.inner.assign(epoch, start_offset)?;
        Ok(())
    }

    /// OffsetsForLeaderEpoch answer `(epoch, end_offset)`; `(-1, -1)` when undefined.
    fn end_offset_for(&self, requested_epoch: i32, log_end_offset: i64) -> (i32, i64) {
        self.inner.end_offset_for(requested_epoch, log_end_offset)
    }

    /// The epoch that wrote `offset`, or None before the oldest entry.
    fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.inner.epoch_for_offset(offset)
    }

    /// Drop entries starting at or after `end_offset` (negative: no-op).
    fn truncate_from_end(&mut self, end_offset: i64) {
        self.inner.truncate_from_end(end_offset);
    }

    /// Drop entries starting at or before `start_offset`; the last dropped epoch restarts there.
    fn truncate_from_start(&mut self, start_offset: i64) {
        self.inner.truncate_from_start(start_offset);
    }

    fn entries(&self) -> Vec<(i32, i64)> {
        self.inner
            .entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    #[getter]
    fn latest_epoch(&self) -> Option<i32> {
        self.inner.latest_epoch()
    }

    #[getter]
    fn previous_epoch(&self) -> Option<i32> {
        self.inner.previous_epoch()
    }

    fn previous_epoch_of(&self, epoch: i32) -> Option<i32> {
        self.inner.previous_epoch_of(epoch)
    }

    fn next_epoch(&self, epoch: i32) -> Option<i32> {
        self.inner.next_epoch(epoch)
    }

    #[getter]
    fn earliest_entry(&self) -> Option<(i32, i64)> {
        self.inner
            .earliest_entry()
            .map(|e| (e.epoch, e.start_offset))
    }

    fn copy(&self) -> Self {
        self.clone()
    }

    fn __copy__(&self) -> Self {
        self.clone()
    }

    fn __deepcopy__(&self, _memo: &Bound<'_, PyAny>) -> Self {
        self.clone()
    }

    fn clear(&mut self) {
        self.inner.clear();
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        let entries: Vec<String> = self
            .inner
            .entries()
            .iter()
            .map(|e| format!("({}, {})", e.epoch, e.start_offset))
            .collect();
        format!("LeaderEpochCache([{}])", entries.join(", "))
    }

    /// Load a `leader-epoch-checkpoint` file (strict, bounded; replayed through `assign`).
    #[staticmethod]
    fn read_checkpoint(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let inner = py.detach(|| checkpoint::read(&path))?;
        Ok(Self { inner })
    }

    /// Atomically write this cache as a Kafka `leader-epoch-checkpoint` file.
    fn write_checkpoint(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        let entries = self.inner.entries();
        py.detach(|| checkpoint::write(&path, entries))?;
        Ok(())
    }

    /// `end_offset_for` over an int32 buffer of epochs: `(epochs int32, end_offsets int64)` arrays.
    fn end_offsets_for<'py>(
        &self,
        epochs: &Bound<'py, PyAny>,
        log_end_offset: i64,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let py = epochs.py();
        let input = Input::<i32>::borrow(epochs, "epochs")?;
        let requested = input.as_slice();
        let cache = &self.inner;
        let (out_epochs, out_offsets) =
            py.detach(|| cache.end_offsets_for(requested, log_end_offset));
        Ok((
            to_numpy(py, Column::I32(out_epochs))?,
            to_numpy(py, Column::I64(out_offsets))?,
        ))
    }

    /// `epoch_for_offset` over an int64 buffer of offsets: an int32 array, -1 where there is none.
    fn epochs_for_offsets<'py>(&self, offsets: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = offsets.py();
        let input = Input::<i64>::borrow(offsets, "offsets")?;
        let offsets = input.as_slice();
        let cache = &self.inner;
        let out = py.detach(|| cache.epochs_for_offsets(offsets));
        to_numpy(py, Column::I32(out))
    }
}

/// Leader side of a Fetch with LastFetchedEpoch: `(epoch, end_offset)` if the follower diverged.
/// `(-1, -1)` means the leader cannot answer: callers map it to OFFSET_OUT_OF_RANGE.
#[pyfunction]
fn find_diverging_epoch(
    leader_cache: PyRef<'_, PyLeaderEpochCache>,
    leader_log_end_offset: i64,
    last_fetched_epoch: i32,
    fetch_offset: i64,
) -> Option<(i32, i64)> {
    divergence::find_diverging_epoch(
        &leader_cache.inner,
        leader_log_end_offset,
        last_fetched_epoch,
        fetch_offset,
    )
}

/// Follower side: `(offset, final)` to truncate to for the leader's `(epoch, end_offset)` answer;
/// None when the leader's offset is undefined (truncate to the initial fetch offset instead).
#[pyfunction]
fn truncation_offset(
    local_cache: PyRef<'_, PyLeaderEpochCache>,
    local_log_end_offset: i64,
    leader_epoch: i32,
    leader_end_offset: i64,
) -> Option<(i64, bool)> {
    divergence::truncation_offset(
        &local_cache.inner,
        local_log_end_offset,
        leader_epoch,
        leader_end_offset,
    )
}

/// First offset at which two replicas' logs can differ according to their epoch histories.
#[pyfunction]
fn divergence_point(
    cache_a: PyRef<'_, PyLeaderEpochCache>,
    log_end_a: i64,
    cache_b: PyRef<'_, PyLeaderEpochCache>,
    log_end_b: i64,
) -> Option<i64> {
    divergence::divergence_point(
        cache_a.inner.entries(),
        log_end_a,
        cache_b.inner.entries(),
        log_end_b,
    )
}

/// `divergence_point` per row of two CSR batches of histories: an int64 array, -1 = none.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn divergence_points<'py>(
    a_bounds: &Bound<'py, PyAny>,
    a_epochs: &Bound<'py, PyAny>,
    a_starts: &Bound<'py, PyAny>,
    a_log_ends: &Bound<'py, PyAny>,
    b_bounds: &Bound<'py, PyAny>,
    b_epochs: &Bound<'py, PyAny>,
    b_starts: &Bound<'py, PyAny>,
    b_log_ends: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = a_bounds.py();
    let bufs_a = (
        Input::<i64>::borrow(a_bounds, "a_bounds")?,
        Input::<i32>::borrow(a_epochs, "a_epochs")?,
        Input::<i64>::borrow(a_starts, "a_starts")?,
        Input::<i64>::borrow(a_log_ends, "a_log_ends")?,
    );
    let bufs_b = (
        Input::<i64>::borrow(b_bounds, "b_bounds")?,
        Input::<i32>::borrow(b_epochs, "b_epochs")?,
        Input::<i64>::borrow(b_starts, "b_starts")?,
        Input::<i64>::borrow(b_log_ends, "b_log_ends")?,
    );
    let a = Histories {
        bounds: bufs_a.0.as_slice(),
        epochs: bufs_a.1.as_slice(),
        starts: bufs_a.2.as_slice(),
        log_ends: bufs_a.3.as_slice(),
    };
    let b = Histories {
        bounds: bufs_b.0.as_slice(),
        epochs: bufs_b.1.as_slice(),
        starts: bufs_b.2.as_slice(),
        log_ends: bufs_b.3.as_slice(),
    };
    let out = py.detach(|| divergence::divergence_points(a, b))?;
    to_numpy(py, Column::I64(out))
}

/// One `(epoch, start_offset)` entry from any pair of ints. Tuples keep pyo3's own errors (length,
/// overflow); other pairs (a list, a numpy row) are read by length and index.
fn entry_pair(item: &Bound<'_, PyAny>) -> PyResult<(i32, i64)> {
    if let Ok(tuple) = item.cast::<PyTuple>() {
        return tuple.extract();
    }
    let not_a_pair = |cause: Option<PyErr>| {
        let err = PyTypeError::new_err(format!(
            "LeaderEpochCache entries must be (epoch, start_offset) pairs of ints, got {}",
            item.get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        ));
        err.set_cause(item.py(), cause);
        err
    };
    if item.is_instance_of::<PyString>() || item.is_instance_of::<PyBytes>() {
        return Err(not_a_pair(None));
    }
    let len = item.len().map_err(|e| not_a_pair(Some(e)))?;
    if len != 2 {
        return Err(PyValueError::new_err(format!(
            "a LeaderEpochCache entry must be a pair (length 2), got length {len}"
        )));
    }
    Ok((item.get_item(0)?.extract()?, item.get_item(1)?.extract()?))
}

/// An element type the batched calls accept, with its names in the buffer and Arrow worlds.
trait Native: Element + ArrowNativeType + for<'py> FromPyObjectOwned<'py> {
    const NAME: &'static str;
    const ARROW: DataType;
}

impl Native for i32 {
    const NAME: &'static str = "int32";
    const ARROW: DataType = DataType::Int32;
}

impl Native for i64 {
    const NAME: &'static str = "int64";
    const ARROW: DataType = DataType::Int64;
}

/// A 1-D column of `T` read in place: a buffer-protocol view, an imported Arrow array, or a copy
/// when the exporter's memory is not C-contiguous.
enum Input<T: Native> {
    Buffer(PyBuffer<T>),
    Arrow(ScalarBuffer<T>),
    Copied(Vec<T>),
}

impl<T: Native> Input<T> {
    fn borrow(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Self> {
        let py = obj.py();
        let buffer = match PyBuffer::<T>::get(obj) {
            Ok(buffer) => buffer,
            Err(_) if obj.hasattr("__arrow_c_array__")? => {
                return import_arrow(obj, name).map(Input::Arrow)
            }
            // Not a buffer at all: a list, tuple or range of ints, copied. A buffer of the wrong item
            // type, or an Arrow stream (chunked), stays an error rather than a slow converting copy.
            Err(_) if !is_buffer(obj) && !obj.hasattr("__arrow_c_stream__")? => {
                return match obj.extract::<Vec<T>>() {
                    Ok(values) => Ok(Input::Copied(values)),
                    Err(overflow) if overflow.is_instance_of::<PyOverflowError>(py) => {
                        Err(overflow)
                    }
                    Err(cause) => Err(wrong_type::<T>(py, name, cause)),
                };
            }
            Err(e) => return Err(wrong_type::<T>(py, name, e)),
        };
        if buffer.dimensions() != 1 {
            return Err(PyValueError::new_err(format!(
                "{name} must be one-dimensional, got {} dimensions",
                buffer.dimensions()
            )));
        }
        if buffer.is_c_contiguous() {
            Ok(Input::Buffer(buffer))
        } else {
            Ok(Input::Copied(buffer.to_vec(py)?))
        }
    }

    fn as_slice(&self) -> &[T] {
        match self {
            // SAFETY: PyBuffer::get checked item size, format and alignment, the buffer is C-contiguous
            // with `item_count` items, and the exporter keeps the memory alive while `self` holds the
            // view. As with numpy's own GIL-free loops, concurrent mutation by another thread is the
            // caller's responsibility.
            Input::Buffer(buffer) => unsafe {
                std::slice::from_raw_parts(buffer.buf_ptr().cast::<T>(), buffer.item_count())
            },
            Input::Arrow(values) => values,
            Input::Copied(v) => v,
        }
    }
}

fn is_buffer(obj: &Bound<'_, PyAny>) -> bool {
    // SAFETY: `obj` is a valid object pointer while the GIL is held; the call only reads its type slots.
    unsafe { ffi::PyObject_CheckBuffer(obj.as_ptr()) != 0 }
}

fn wrong_type<T: Native>(py: Python<'_>, name: &str, cause: PyErr) -> PyErr {
    let err = PyTypeError::new_err(format!(
        "{name} must be a sequence of ints, a 1-D {} buffer (numpy array, array.array, memoryview) \
         or an Arrow array",
        T::NAME
    ));
    err.set_cause(py, Some(cause));
    err
}

/// Import a null-free primitive Arrow array through the C Data Interface (`__arrow_c_array__`),
/// keeping the exporter's memory alive instead of copying it.
fn import_arrow<T: Native>(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<ScalarBuffer<T>> {
    let (schema, array): (Bound<'_, PyCapsule>, Bound<'_, PyCapsule>) =
        obj.call_method0("__arrow_c_array__")?.extract()?;
    let schema = schema
        .pointer_checked(Some(c"arrow_schema"))?
        .cast::<FFI_ArrowSchema>();
    let array = array
        .pointer_checked(Some(c"arrow_array"))?
        .cast::<FFI_ArrowArray>();
    // SAFETY: capsules with these names hold initialised C Data Interface structs. The array is moved
    // out (a released struct is left behind, as the protocol requires); the schema is only borrowed
    // while its capsule is alive.
    let data = unsafe { from_ffi(FFI_ArrowArray::from_raw(array.as_ptr()), schema.as_ref()) }
        .and_then(|data| data.validate().map(|()| data))
        .map_err(|e| PyValueError::new_err(format!("{name}: invalid Arrow array: {e}")))?;
    if data.data_type() != &T::ARROW {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an Arrow {} array, got {}",
            T::NAME,
            data.data_type()
        )));
    }
    if data.null_count() > 0 {
        return Err(PyValueError::new_err(format!(
            "{name} must not contain nulls"
        )));
    }
    let values = data
        .buffers()
        .first()
        .filter(|b| b.as_ptr().align_offset(std::mem::align_of::<T>()) == 0)
        .ok_or_else(|| {
            PyValueError::new_err(format!("{name}: Arrow values buffer missing or misaligned"))
        })?;
    // In bounds and aligned (validated and checked above), so this cannot panic.
    Ok(ScalarBuffer::new(values.clone(), data.offset(), data.len()))
}

enum Column {
    I32(Vec<i32>),
    I64(Vec<i64>),
}

/// A Rust-owned column exported read-only through the buffer protocol; `numpy.frombuffer` wraps it
/// without copying and keeps it alive as the array's base.
#[pyclass(module = "epochguard._core", frozen)]
struct ColumnBuffer {
    column: Column,
    shape: [ffi::Py_ssize_t; 1],
    strides: [ffi::Py_ssize_t; 1],
}

impl ColumnBuffer {
    fn new(column: Column) -> Self {
        let (len, itemsize) = match &column {
            Column::I32(v) => (v.len(), 4),
            Column::I64(v) => (v.len(), 8),
        };
        // A Vec never holds more than isize::MAX bytes, so these conversions are lossless.
        Self {
            column,
            shape: [len as ffi::Py_ssize_t],
            strides: [itemsize],
        }
    }

    fn raw(&self) -> (*const c_void, &'static CStr) {
        match &self.column {
            Column::I32(v) => (v.as_ptr().cast(), c"i"),
            Column::I64(v) => (v.as_ptr().cast(), c"q"),
        }
    }
}

#[pymethods]
impl ColumnBuffer {
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("null view"));
        }
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err(
                "epochguard result buffers are read-only",
            ));
        }
        let this = slf.get();
        let (buf, format) = this.raw();
        let wants = |flag: c_int| flags & flag == flag;
        // SAFETY: `view` is a valid, writable Py_buffer provided by the interpreter. `shape`, `strides`
        // and the data live inside this frozen object, which `view.obj` keeps alive.
        unsafe {
            (*view).buf = buf.cast_mut();
            (*view).len = this.shape[0] * this.strides[0];
            (*view).readonly = 1;
            (*view).itemsize = this.strides[0];
            (*view).format = if wants(ffi::PyBUF_FORMAT) {
                format.as_ptr().cast_mut()
            } else {
                ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape = if wants(ffi::PyBUF_ND) {
                this.shape.as_ptr().cast_mut()
            } else {
                ptr::null_mut()
            };
            (*view).strides = if wants(ffi::PyBUF_STRIDES) {
                this.strides.as_ptr().cast_mut()
            } else {
                ptr::null_mut()
            };
            (*view).suboffsets = ptr::null_mut();
            (*view).internal = ptr::null_mut();
            (*view).obj = slf.into_any().into_ptr();
        }
        Ok(())
    }
}

fn numpy(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static NUMPY: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    Ok(NUMPY
        .get_or_try_init(py, || py.import("numpy").map(Bound::unbind))?
        .bind(py))
}

fn to_numpy(py: Python<'_>, column: Column) -> PyResult<Bound<'_, PyAny>> {
    let dtype = match column {
        Column::I32(_) => "int32",
        Column::I64(_) => "int64",
    };
    let buffer = Bound::new(py, ColumnBuffer::new(column))?;
    numpy(py)?.call_method1("frombuffer", (buffer, dtype))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLeaderEpochCache>()?;
    m.add_function(wrap_pyfunction!(find_diverging_epoch, m)?)?;
    m.add_function(wrap_pyfunction!(truncation_offset, m)?)?;
    m.add_function(wrap_pyfunction!(divergence_point, m)?)?;
    m.add_function(wrap_pyfunction!(divergence_points, m)?)?;
    Ok(())
}

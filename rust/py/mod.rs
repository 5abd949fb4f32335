//! The only module that touches pyo3: thin wrappers that convert, release the GIL and map errors.

use pyo3::prelude::*;

mod checkpoint;
mod epoch;
mod errors;
mod records;
#[cfg(feature = "wire")]
mod wire;

/// The extension's allocator, here because a global allocator is a crate-wide choice. Decoded
/// columns are large, short-lived buffers handed to Arrow; glibc maps every one above its mmap
/// threshold afresh (page-faulting it in again on each decode), mimalloc reuses them. Arrow frees
/// them through our release callbacks, so one allocator owns them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    epoch::register(m)?;
    checkpoint::register(m)?;
    records::register(m)?;
    #[cfg(feature = "wire")]
    wire::register(m)?;
    Ok(())
}

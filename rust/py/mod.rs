//! The only module that touches pyo3: thin wrappers that convert, release the GIL and map errors.

use pyo3::prelude::*;

mod epoch;
mod errors;
mod records;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    epoch::register(m)?;
    records::register(m)?;
    Ok(())
}

//! Python exception tree for the core, and the one conversion from `crate::Error`.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;

use crate::Error;

create_exception!(
    epochguard._core,
    EpochGuardError,
    PyException,
    "Base class of every epochguard error."
);
create_exception!(
    epochguard._core,
    CorruptRecordError,
    EpochGuardError,
    "Record bytes that are not a valid Kafka record batch or message set. `position` is the byte offset, `reason` says what is wrong."
);
create_exception!(
    epochguard._core,
    CheckpointError,
    EpochGuardError,
    "A malformed leader-epoch-checkpoint file. `line` is 1-based (0: the file as a whole)."
);

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("EpochGuardError", py.get_type::<EpochGuardError>())?;
    m.add("CorruptRecordError", py.get_type::<CorruptRecordError>())?;
    m.add("CheckpointError", py.get_type::<CheckpointError>())?;
    Ok(())
}

/// Build the exception instance and attach the structured fields as attributes.
fn with_attrs(err: PyErr, attrs: &[(&str, Py<PyAny>)]) -> PyErr {
    Python::attach(|py| {
        let value = err.value(py);
        for (name, v) in attrs {
            // Setting an attribute on a fresh exception instance cannot fail in practice; ignore if it does.
            let _ = value.setattr(*name, v);
        }
    });
    err
}

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        let msg = e.to_string();
        match e {
            Error::Corrupt { position, reason } => Python::attach(|py| {
                with_attrs(
                    CorruptRecordError::new_err(msg),
                    &[
                        (
                            "position",
                            position
                                .into_pyobject(py)
                                .map(|o| o.into_any().unbind())
                                .unwrap_or_else(|_| py.None()),
                        ),
                        (
                            "reason",
                            reason
                                .into_pyobject(py)
                                .map(|o| o.into_any().unbind())
                                .unwrap_or_else(|_| py.None()),
                        ),
                    ],
                )
            }),
            Error::Checkpoint { line, reason } => Python::attach(|py| {
                with_attrs(
                    CheckpointError::new_err(msg),
                    &[
                        (
                            "line",
                            line.into_pyobject(py)
                                .map(|o| o.into_any().unbind())
                                .unwrap_or_else(|_| py.None()),
                        ),
                        (
                            "reason",
                            reason
                                .into_pyobject(py)
                                .map(|o| o.into_any().unbind())
                                .unwrap_or_else(|_| py.None()),
                        ),
                    ],
                )
            }),
            Error::InvalidArgument(_) => PyValueError::new_err(msg),
            // pyo3 maps io::ErrorKind to the matching OSError subclass (FileNotFoundError, ...).
            Error::Io(io) => io.into(),
        }
    }
}

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

create_exception!(
    epochguard._core,
    CorruptFrameError,
    EpochGuardError,
    "A malformed Kafka request frame (truncated, bad string, array count above the bytes left). `position` is the byte offset in the frame, `reason` says what is wrong."
);

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("EpochGuardError", py.get_type::<EpochGuardError>())?;
    m.add("CorruptRecordError", py.get_type::<CorruptRecordError>())?;
    m.add("CheckpointError", py.get_type::<CheckpointError>())?;
    m.add("CorruptFrameError", py.get_type::<CorruptFrameError>())?;
    Ok(())
}

/// Attach the structured fields (`err.position` or `err.line`, and `err.reason`) to the exception.
fn with_fields(err: PyErr, number_name: &str, number: u64, reason: &str) -> PyErr {
    Python::attach(|py| {
        let value = err.value(py);
        // Setting attributes on a fresh exception instance cannot fail in practice; ignore if it does.
        let _ = value.setattr(number_name, number);
        let _ = value.setattr("reason", reason);
    });
    err
}

/// `epochguard.errors.ArrowSchemaError` (an EpochGuardError and a TypeError) with `column` and `reason`.
fn schema_error(msg: String, column: &str, reason: &str) -> PyErr {
    Python::attach(|py| {
        let made = (|| -> PyResult<PyErr> {
            let cls = py
                .import("epochguard.errors")?
                .getattr("ArrowSchemaError")?;
            Ok(PyErr::from_value(cls.call1((
                msg.clone(),
                column,
                reason,
            ))?))
        })();
        made.unwrap_or_else(|_| pyo3::exceptions::PyTypeError::new_err(msg))
    })
}

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        let msg = e.to_string();
        match e {
            Error::Corrupt { position, reason } => with_fields(
                CorruptRecordError::new_err(msg),
                "position",
                position,
                &reason,
            ),
            Error::Checkpoint { line, reason } => {
                with_fields(CheckpointError::new_err(msg), "line", line as u64, &reason)
            }
            Error::CorruptFrame { position, reason } => with_fields(
                CorruptFrameError::new_err(msg),
                "position",
                position,
                &reason,
            ),
            // `epochguard.errors.UnsupportedVersionError` (a Python ApiError) with the header.
            #[cfg(feature = "wire")]
            Error::UnsupportedVersion {
                api_key,
                api_version,
                correlation_id,
                client_id,
            } => Python::attach(|py| {
                super::wire::unsupported_version(
                    py,
                    crate::wire::RequestHeader {
                        api_key,
                        api_version,
                        correlation_id,
                        client_id,
                    },
                )
            }),
            #[cfg(not(feature = "wire"))]
            Error::UnsupportedVersion { .. } => EpochGuardError::new_err(msg),
            Error::Schema { column, reason } => schema_error(msg, &column, &reason),
            Error::InvalidArgument(_) => PyValueError::new_err(msg),
            // pyo3 maps io::ErrorKind to the matching OSError subclass (FileNotFoundError, ...).
            Error::Io(io) => io.into(),
        }
    }
}

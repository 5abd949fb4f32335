//! The crate's one error type. Every variant maps to exactly one Python exception (see `py/errors.rs`).

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Malformed record bytes: `position` is the absolute byte offset in the input where decoding failed.
    #[error("corrupt record data at byte {position}: {reason}")]
    Corrupt { position: u64, reason: String },
    /// Malformed `leader-epoch-checkpoint` file: `line` is 1-based (0 when the problem is the file as a whole).
    #[error("malformed leader-epoch checkpoint at line {line}: {reason}")]
    Checkpoint { line: usize, reason: String },
    /// A malformed Kafka request frame: `position` is the byte offset in the frame (after its size
    /// prefix) where decoding stopped.
    #[error("corrupt request frame at byte {position}: {reason}")]
    CorruptFrame { position: u64, reason: String },
    /// A request whose API key or version the wire codec does not serve, with its parsed header.
    #[error("unsupported request: api key {api_key} version {api_version}")]
    UnsupportedVersion {
        api_key: i16,
        api_version: i16,
        correlation_id: i32,
        client_id: Option<String>,
    },
    /// Input columns of the wrong type (or missing) for what reads them, e.g. `send_arrow`'s table.
    #[error("column {column}: {reason}")]
    Schema { column: String, reason: String },
    /// A caller passed an argument outside its domain (negative epoch, bad codec id, ...).
    #[error("{0}")]
    InvalidArgument(String),
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl Error {
    pub fn corrupt(position: u64, reason: impl Into<String>) -> Self {
        Error::Corrupt {
            position,
            reason: reason.into(),
        }
    }
    pub fn checkpoint(line: usize, reason: impl Into<String>) -> Self {
        Error::Checkpoint {
            line,
            reason: reason.into(),
        }
    }
    pub fn corrupt_frame(position: u64, reason: impl Into<String>) -> Self {
        Error::CorruptFrame {
            position,
            reason: reason.into(),
        }
    }
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }
}

pub type Result<T> = std::result::Result<T, Error>;

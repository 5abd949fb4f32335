//! epochguard core: Kafka's leader-epoch cache, divergence search and record-batch codec.
//!
//! Pure Rust (bytes, epochs, offsets). Python bindings live in `py/` behind the `python` feature.

pub mod checkpoint;
pub mod divergence;
pub mod epoch_cache;
pub mod error;
pub mod file;
pub mod offset_index;
pub mod records;
pub mod reporting;
#[cfg(feature = "wire")]
pub mod wire;

#[cfg(feature = "python")]
mod py;

#[cfg(feature = "jvm")]
#[path = "jni/mod.rs"]
mod jvm;

pub use error::{Error, Result};

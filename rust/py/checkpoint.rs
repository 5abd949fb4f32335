//! Bindings for parsing Kafka checkpoint bytes (for readers that get a file's bytes from elsewhere:
//! a Hadoop filesystem, an archive), with the same rules as `LeaderEpochCache.read_checkpoint`.

use pyo3::prelude::*;

use crate::checkpoint::{parse, MAX_FILE_SIZE};
use crate::epoch_cache::LeaderEpochCache;
use crate::Error;

/// The (epoch, start offset) entries of `leader-epoch-checkpoint` bytes, replayed through `assign`
/// as Kafka loads the file. Malformed bytes raise `CheckpointError` with the 1-based line.
#[pyfunction]
fn parse_leader_epoch_checkpoint(py: Python<'_>, data: &[u8]) -> PyResult<Vec<(i32, i64)>> {
    let parsed = py.detach(|| {
        if data.len() as u64 > MAX_FILE_SIZE {
            return Err(Error::checkpoint(
                0,
                format!("file is larger than {MAX_FILE_SIZE} bytes"),
            ));
        }
        let entries = parse(data)?;
        LeaderEpochCache::from_entries(entries.into_iter().map(|e| (e.epoch, e.start_offset)))
    })?;
    Ok(parsed
        .entries()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect())
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(parse_leader_epoch_checkpoint, m)?)?;
    Ok(())
}

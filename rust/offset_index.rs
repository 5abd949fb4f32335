//! Kafka's offset index, the `<base offset>.index` file beside a segment (storage's `OffsetIndex`):
//! 8-byte big-endian entries (offset relative to the segment's base offset: i32, byte position in the
//! segment: i32). `LogSegment.append` adds one after every `index.interval.bytes` of appended batches:
//! the position of the first batch of an append, and the largest offset of that append. So every
//! batch before an entry's position holds offsets below the entry's offset, and every batch from the
//! next entry's position on holds offsets above it.
//!
//! The index is a hint, never needed: an active segment's index is preallocated (it ends in zero
//! entries), a crash can leave it behind the log, a copy can lose it. Entries are read while both
//! their offsets and positions increase, and callers check what they find there (a batch header
//! where an entry points, else the whole range is scanned).

use std::path::{Path, PathBuf};

use crate::file::InputFile;

/// Kafka's largest index (`segment.index.bytes` defaults to 10 MiB); a larger file is not read.
const MAX_INDEX_BYTES: u64 = 64 << 20;

/// The usable entries of an index file's bytes, as (relative offset, position).
pub fn entries(index: &[u8]) -> Vec<(i32, u32)> {
    let mut out: Vec<(i32, u32)> = Vec::new();
    for entry in index.chunks_exact(8) {
        let (Some(rel), Some(pos)) = (entry.first_chunk::<4>(), entry.last_chunk::<4>()) else {
            break;
        };
        let (rel, pos) = (i32::from_be_bytes(*rel), i32::from_be_bytes(*pos));
        let Ok(pos) = u32::try_from(pos) else { break };
        match out.last() {
            Some(&(r, p)) if rel <= r || pos <= p => break, // zeros of a preallocated index, or garbage
            None if rel < 0 => break,
            _ => out.push((rel, pos)),
        }
    }
    out
}

/// The byte range of a segment whose batches hold every offset of `[lo, hi]` (relative to the
/// segment's base offset): from the entry with the largest offset <= `lo` (the start without one) to
/// the entry after the first with an offset >= `hi` (the end, `None`, without one).
pub fn range_for(entries: &[(i32, u32)], lo: i64, hi: i64) -> (u64, Option<u64>) {
    let from = entries
        .iter()
        .take_while(|(rel, _)| i64::from(*rel) <= lo)
        .last()
        .map_or(0, |(_, pos)| u64::from(*pos));
    let until = entries
        .iter()
        .position(|(rel, _)| i64::from(*rel) >= hi)
        .and_then(|i| entries.get(i + 1))
        .map(|(_, pos)| u64::from(*pos));
    (from, until)
}

/// The index file beside `segment` (`x.log` -> `x.index`).
pub fn path_of(segment: &Path) -> PathBuf {
    segment.with_extension("index")
}

/// The usable entries of the index beside `segment`; none when it is missing, unreadable or larger
/// than any index Kafka writes.
pub fn read_beside(segment: &Path) -> Vec<(i32, u32)> {
    let Ok(file) = InputFile::open(&path_of(segment)) else {
        return Vec::new();
    };
    if file.len() > MAX_INDEX_BYTES {
        return Vec::new();
    }
    let mut bytes = vec![0u8; file.len() as usize];
    match file.read_at(0, &mut bytes) {
        Ok(got) => entries(bytes.get(..got).unwrap_or_default()),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(entries: &[(i32, i32)]) -> Vec<u8> {
        entries
            .iter()
            .flat_map(|(r, p)| [r.to_be_bytes(), p.to_be_bytes()].concat())
            .collect()
    }

    #[test]
    fn entries_stop_at_a_preallocated_tail_or_disorder() {
        let bytes = index(&[(9, 0), (19, 1000), (29, 2000), (0, 0), (0, 0)]);
        assert_eq!(entries(&bytes), vec![(9, 0), (19, 1000), (29, 2000)]);
        assert_eq!(entries(&index(&[(9, 100), (19, 50)])), vec![(9, 100)]);
        assert_eq!(entries(&index(&[(9, -1)])), vec![]);
        assert_eq!(entries(&[0, 0, 0, 9, 0, 0]), vec![]); // a cut entry
    }

    #[test]
    fn range_covers_the_offsets_asked_for() {
        // appends of 10 offsets each, 1000 bytes each, every one indexed
        let e = [(9, 0), (19, 1000), (29, 2000), (39, 3000)];
        assert_eq!(range_for(&e, 25, 27), (1000, Some(3000)));
        assert_eq!(range_for(&e, 19, 19), (1000, Some(2000)));
        assert_eq!(range_for(&e, 5, 100), (0, None));
        assert_eq!(range_for(&e, 35, 100), (2000, None));
        assert_eq!(range_for(&e, 0, 3), (0, Some(1000)));
        assert_eq!(range_for(&[], 10, 20), (0, None));
    }
}

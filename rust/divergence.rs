//! Where two replicas' logs part ways, from their leader-epoch histories (SPEC.md (b)5 and (d)).
//!
//! Pure functions over [`LeaderEpochCache`]s and entry slices; the Python wrappers live in `py/epoch.rs`.

use crate::epoch_cache::{EpochEntry, LeaderEpochCache, UNDEFINED_EPOCH, UNDEFINED_OFFSET};
use crate::{Error, Result};

/// Leader side of a Fetch with `LastFetchedEpoch` (KIP-320): `Some((epoch, end_offset))` when the
/// follower's log diverges from the leader's and must be truncated, `None` when it may read.
///
/// `last_fetched_epoch < 0` means the follower sent none: no check, `None`. When the leader cannot
/// answer for that epoch the result is `Some((-1, -1))`; callers map it to OFFSET_OUT_OF_RANGE.
pub fn find_diverging_epoch(
    leader: &LeaderEpochCache,
    leader_log_end_offset: i64,
    last_fetched_epoch: i32,
    fetch_offset: i64,
) -> Option<(i32, i64)> {
    if last_fetched_epoch < 0 {
        return None;
    }
    let (epoch, end_offset) = leader.end_offset_for(last_fetched_epoch, leader_log_end_offset);
    // An undefined answer is (-1, -1), and -1 is below every epoch a follower can send: it comes out
    // of the same comparison as a real divergence.
    (epoch < last_fetched_epoch || end_offset < fetch_offset).then_some((epoch, end_offset))
}

/// Follower side: given the leader's `(epoch, end_offset)` answer (OffsetsForLeaderEpoch or a
/// DivergingEpoch), the offset to truncate the local log to and whether that is final (`false`:
/// truncate, then ask again with the new latest epoch).
///
/// `None` when the leader's offset is undefined (-1): the caller truncates to its initial fetch
/// offset (the high watermark), which this function does not know.
pub fn truncation_offset(
    local: &LeaderEpochCache,
    local_log_end_offset: i64,
    leader_epoch: i32,
    leader_end_offset: i64,
) -> Option<(i64, bool)> {
    if leader_end_offset == UNDEFINED_OFFSET {
        return None;
    }
    if leader_epoch == UNDEFINED_EPOCH {
        return Some((leader_end_offset.min(local_log_end_offset), true));
    }
    let (local_epoch, local_end) = local.end_offset_for(leader_epoch, local_log_end_offset);
    Some(
        if local_epoch == UNDEFINED_EPOCH && local_end == UNDEFINED_OFFSET {
            (leader_end_offset.min(local_log_end_offset), true)
        } else if local_epoch != leader_epoch {
            (local_end.min(local_log_end_offset), false)
        } else {
            (
                local_end.min(leader_end_offset).min(local_log_end_offset),
                true,
            )
        },
    )
}

/// The first offset at which two replicas' logs can differ, judged from their epoch histories alone.
///
/// Each history assigns to offset `o` the epoch of its entry with the largest start `<= o`; its last
/// epoch extends to infinity (the next write in that epoch would land there). The answer is the
/// smallest `o` with `max(earliest start of a, earliest start of b) <= o < max(log_end_a, log_end_b)`
/// at which the two assignments differ, or `None` when there is none or either history is empty
/// (then the histories say nothing). Both histories must be valid caches (strictly increasing).
///
/// The assignment only changes at entry starts, so the candidates are the lower bound and the entry
/// starts above it: a merge walk, O(len a + len b).
pub fn divergence_point(
    a: &[EpochEntry],
    log_end_a: i64,
    b: &[EpochEntry],
    log_end_b: i64,
) -> Option<i64> {
    walk(a, log_end_a, b, log_end_b)
}

/// Read access to one history, stored as entries (a cache) or as parallel columns (a CSR batch row),
/// so the batched search walks the caller's arrays without copying them.
trait History {
    fn epoch(&self, i: usize) -> Option<i32>;
    fn start(&self, i: usize) -> Option<i64>;
}

impl History for [EpochEntry] {
    fn epoch(&self, i: usize) -> Option<i32> {
        self.get(i).map(|e| e.epoch)
    }
    fn start(&self, i: usize) -> Option<i64> {
        self.get(i).map(|e| e.start_offset)
    }
}

struct Columns<'a> {
    epochs: &'a [i32],
    starts: &'a [i64],
}

impl History for Columns<'_> {
    fn epoch(&self, i: usize) -> Option<i32> {
        self.epochs.get(i).copied()
    }
    fn start(&self, i: usize) -> Option<i64> {
        self.starts.get(i).copied()
    }
}

fn walk<A: History + ?Sized, B: History + ?Sized>(
    a: &A,
    log_end_a: i64,
    b: &B,
    log_end_b: i64,
) -> Option<i64> {
    let end = log_end_a.max(log_end_b);
    let mut offset = a.start(0)?.max(b.start(0)?);
    let (mut ia, mut ib) = (0usize, 0usize);
    while offset < end {
        // Advance each side to its entry covering `offset`.
        while a.start(ia + 1).is_some_and(|s| s <= offset) {
            ia += 1;
        }
        while b.start(ib + 1).is_some_and(|s| s <= offset) {
            ib += 1;
        }
        if a.epoch(ia)? != b.epoch(ib)? {
            return Some(offset);
        }
        offset = match (a.start(ia + 1), b.start(ib + 1)) {
            (Some(x), Some(y)) => x.min(y),
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => return None,
        };
    }
    None
}

/// A batch of epoch histories in CSR form: row `i` is `epochs/starts[bounds[i]..bounds[i+1]]`.
#[derive(Clone, Copy, Debug)]
pub struct Histories<'a> {
    pub bounds: &'a [i64],
    pub epochs: &'a [i32],
    pub starts: &'a [i64],
    pub log_ends: &'a [i64],
}

impl<'a> Histories<'a> {
    fn rows(&self) -> usize {
        self.bounds.len().saturating_sub(1)
    }

    fn check_shape(&self, name: &str) -> Result<()> {
        if self.bounds.is_empty() {
            return Err(Error::invalid(format!(
                "{name}_bounds must have n + 1 entries, got none"
            )));
        }
        if self.epochs.len() != self.starts.len() {
            return Err(Error::invalid(format!(
                "{name}_epochs has {} entries but {name}_starts has {}",
                self.epochs.len(),
                self.starts.len()
            )));
        }
        if self.log_ends.len() != self.rows() {
            return Err(Error::invalid(format!(
                "{name}_log_ends has {} entries, expected {} (one per row)",
                self.log_ends.len(),
                self.rows()
            )));
        }
        Ok(())
    }

    /// Row `row` and its log end, checked to be a valid cache (the walk relies on the ordering).
    fn row(&self, row: usize, name: &str) -> Result<(Columns<'a>, i64)> {
        let bound = |i: usize| self.bounds.get(i).and_then(|&b| usize::try_from(b).ok());
        let columns = bound(row)
            .zip(bound(row + 1))
            .and_then(|(lo, hi)| {
                Some(Columns {
                    epochs: self.epochs.get(lo..hi)?,
                    starts: self.starts.get(lo..hi)?,
                })
            })
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{name}_bounds must be non-decreasing within 0..={}, broken at row {row}",
                    self.epochs.len()
                ))
            })?;
        let increasing = columns
            .epochs
            .windows(2)
            .all(|w| matches!(w, [x, y] if x < y))
            && columns
                .starts
                .windows(2)
                .all(|w| matches!(w, [x, y] if x < y));
        let non_negative = columns.epochs.first().is_none_or(|&e| e >= 0)
            && columns.starts.first().is_none_or(|&s| s >= 0);
        if !(increasing && non_negative) {
            return Err(Error::invalid(format!(
                "{name} row {row}: epochs and start offsets must be non-negative and strictly increasing"
            )));
        }
        let log_end = self.log_ends.get(row).copied().unwrap_or(UNDEFINED_OFFSET);
        Ok((columns, log_end))
    }
}

/// [`divergence_point`] for each row pair; `-1` where there is none. Rows are validated as they are
/// walked; the input arrays are read in place.
pub fn divergence_points(a: Histories<'_>, b: Histories<'_>) -> Result<Vec<i64>> {
    if a.rows() != b.rows() {
        return Err(Error::invalid(format!(
            "a has {} rows but b has {}",
            a.rows(),
            b.rows()
        )));
    }
    a.check_shape("a")?;
    b.check_shape("b")?;
    (0..a.rows())
        .map(|row| {
            let ((ra, log_end_a), (rb, log_end_b)) = (a.row(row, "a")?, b.row(row, "b")?);
            Ok(walk(&ra, log_end_a, &rb, log_end_b).unwrap_or(UNDEFINED_OFFSET))
        })
        .collect()
}

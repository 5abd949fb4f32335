//! The leader-epoch cache (SPEC.md (a)): which epoch wrote which offsets, as a list of
//! `(epoch, start_offset)` entries with both fields strictly increasing.
//!
//! Mirrors Kafka's `LeaderEpochFileCache` in memory; persistence lives in `checkpoint.rs`.

use crate::{Error, Result};

/// "No epoch" on the wire and in answers.
pub const UNDEFINED_EPOCH: i32 = -1;
/// "No offset" on the wire and in answers.
pub const UNDEFINED_OFFSET: i64 = -1;

/// One cache entry: `start_offset` is the first offset written in `epoch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

impl EpochEntry {
    pub const fn new(epoch: i32, start_offset: i64) -> Self {
        Self {
            epoch,
            start_offset,
        }
    }
}

/// Kafka's leader-epoch cache. Entries are kept in one contiguous, sorted `Vec` so every query is a
/// binary search and batched lookups stay cache-friendly.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Build a cache by replaying `(epoch, start_offset)` pairs through [`assign`](Self::assign),
    /// exactly as Kafka loads a checkpoint (so out-of-order input is repaired, not rejected).
    pub fn from_entries(entries: impl IntoIterator<Item = (i32, i64)>) -> Result<Self> {
        let mut cache = Self::new();
        for (epoch, start_offset) in entries {
            cache.assign(epoch, start_offset)?;
        }
        Ok(cache)
    }

    /// Record that `epoch` starts at `start_offset`. Returns whether the cache changed.
    ///
    /// Only the newest entry decides whether anything happens: the same epoch at an equal or later
    /// offset is a no-op. Otherwise every entry (newest first) whose epoch or start offset is not
    /// below the new one is dropped, so an older epoch wipes all newer ones and a newer epoch at an
    /// equal offset replaces the old one.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> Result<bool> {
        if epoch < 0 || start_offset < 0 {
            return Err(Error::invalid(format!(
                "leader epoch and start offset must be non-negative, got epoch {epoch}, start offset {start_offset}"
            )));
        }
        if let Some(last) = self.entries.last() {
            if last.epoch == epoch && start_offset >= last.start_offset {
                return Ok(false);
            }
        }
        // Both fields are sorted, so the entries to drop form a suffix.
        let keep = self
            .entries
            .iter()
            .rposition(|e| e.epoch < epoch && e.start_offset < start_offset)
            .map_or(0, |i| i + 1);
        self.entries.truncate(keep);
        self.entries.push(EpochEntry::new(epoch, start_offset));
        Ok(true)
    }

    /// The answer to OffsetsForLeaderEpoch: `(epoch, end_offset)` where `end_offset` is the first
    /// offset after `requested` (the start of the next higher epoch, or `log_end_offset` for the
    /// newest epoch). `(-1, -1)` when undefined: `requested == -1`, empty cache, or above the newest.
    /// Below the oldest entry, the requested epoch is echoed with the oldest start offset.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> (i32, i64) {
        const UNDEFINED: (i32, i64) = (UNDEFINED_EPOCH, UNDEFINED_OFFSET);
        if requested == UNDEFINED_EPOCH {
            return UNDEFINED;
        }
        if self.latest_epoch() == Some(requested) {
            return (requested, log_end_offset);
        }
        // First entry with an epoch above `requested`.
        let higher = self.entries.partition_point(|e| e.epoch <= requested);
        match (
            higher.checked_sub(1).and_then(|i| self.entries.get(i)),
            self.entries.get(higher),
        ) {
            (_, None) => UNDEFINED,
            (None, Some(next)) => (requested, next.start_offset),
            (Some(floor), Some(next)) => (floor.epoch, next.start_offset),
        }
    }

    /// The epoch that wrote `offset`: the entry with the largest start offset `<= offset`.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        let idx = self.entries.partition_point(|e| e.start_offset <= offset);
        idx.checked_sub(1)
            .and_then(|i| self.entries.get(i))
            .map(|e| e.epoch)
    }

    /// [`end_offset_for`](Self::end_offset_for) for each requested epoch.
    pub fn end_offsets_for(&self, requested: &[i32], log_end_offset: i64) -> (Vec<i32>, Vec<i64>) {
        requested
            .iter()
            .map(|&e| self.end_offset_for(e, log_end_offset))
            .unzip()
    }

    /// [`epoch_for_offset`](Self::epoch_for_offset) for each offset, `-1` where there is none.
    /// Sorted input (offsets read from a log) is one merge walk; anything else is a binary search each.
    pub fn epochs_for_offsets(&self, offsets: &[i64]) -> Vec<i32> {
        if !offsets.is_sorted() {
            return offsets
                .iter()
                .map(|&o| self.epoch_for_offset(o).unwrap_or(UNDEFINED_EPOCH))
                .collect();
        }
        let mut next = 0usize; // index of the first entry starting after the current offset
        offsets
            .iter()
            .map(|&o| {
                while self.entries.get(next).is_some_and(|e| e.start_offset <= o) {
                    next += 1;
                }
                next.checked_sub(1)
                    .and_then(|i| self.entries.get(i))
                    .map_or(UNDEFINED_EPOCH, |e| e.epoch)
            })
            .collect()
    }

    /// Log truncated to `end_offset`: drop every entry starting at or after it. Negative: no-op.
    pub fn truncate_from_end(&mut self, end_offset: i64) {
        if end_offset >= 0 {
            let keep = self
                .entries
                .partition_point(|e| e.start_offset < end_offset);
            self.entries.truncate(keep);
        }
    }

    /// Log start advanced to `start_offset`: drop entries starting at or before it and, if any were
    /// dropped, re-insert the last dropped epoch at `start_offset` (it still owns those offsets).
    pub fn truncate_from_start(&mut self, start_offset: i64) {
        let dropped = self
            .entries
            .partition_point(|e| e.start_offset <= start_offset);
        if let Some(last_dropped) = dropped.checked_sub(1) {
            // Keep the last dropped entry in place and move its start instead of re-inserting it.
            self.entries.drain(..last_dropped);
            if let Some(first) = self.entries.first_mut() {
                first.start_offset = start_offset;
            }
        }
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn latest_entry(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    pub fn earliest_entry(&self) -> Option<EpochEntry> {
        self.entries.first().copied()
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    /// The epoch of the entry before the newest one.
    pub fn previous_epoch(&self) -> Option<i32> {
        let n = self.entries.len();
        n.checked_sub(2)
            .and_then(|i| self.entries.get(i))
            .map(|e| e.epoch)
    }

    /// The nearest cached epoch strictly below `epoch`.
    pub fn previous_epoch_of(&self, epoch: i32) -> Option<i32> {
        let idx = self.entries.partition_point(|e| e.epoch < epoch);
        idx.checked_sub(1)
            .and_then(|i| self.entries.get(i))
            .map(|e| e.epoch)
    }

    /// The nearest cached epoch strictly above `epoch`.
    pub fn next_epoch(&self, epoch: i32) -> Option<i32> {
        let idx = self.entries.partition_point(|e| e.epoch <= epoch);
        self.entries.get(idx).map(|e| e.epoch)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A pre-v2 (no epoch) batch was appended, or the log was fully truncated.
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

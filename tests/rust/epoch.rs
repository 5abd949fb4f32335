//! Leader-epoch cache, checkpoint file and divergence search against SPEC.md (a), (b)5 and (d).
//! Cache cases follow Kafka's LeaderEpochFileCacheTest; proptests check the cache against a naive
//! model and the divergence search against brute force and Kafka's follower truncation loop.

// Tests and fixtures are trusted input: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use _core::checkpoint;
use _core::divergence::{
    divergence_point, divergence_points, find_diverging_epoch, truncation_offset, Histories,
};
use _core::epoch_cache::{EpochEntry, LeaderEpochCache};
use _core::Error;
use proptest::prelude::*;

fn cache(entries: &[(i32, i64)]) -> LeaderEpochCache {
    LeaderEpochCache::from_entries(entries.iter().copied()).unwrap()
}

fn pairs(c: &LeaderEpochCache) -> Vec<(i32, i64)> {
    c.entries()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect()
}

// ---- assign ------------------------------------------------------------------------------------

#[test]
fn assign_appends_new_epochs() {
    let mut c = LeaderEpochCache::new();
    assert!(c.assign(2, 10).unwrap());
    assert!(c.assign(3, 20).unwrap());
    assert_eq!(pairs(&c), [(2, 10), (3, 20)]);
}

#[test]
fn assign_same_epoch_at_later_or_equal_offset_is_noop() {
    let mut c = cache(&[(2, 6)]);
    assert!(!c.assign(2, 6).unwrap());
    assert!(!c.assign(2, 7).unwrap());
    assert_eq!(pairs(&c), [(2, 6)]);
}

#[test]
fn assign_same_epoch_at_lower_offset_replaces_it() {
    let mut c = cache(&[(1, 5), (2, 10)]);
    assert!(c.assign(2, 8).unwrap());
    assert_eq!(pairs(&c), [(1, 5), (2, 8)]);
}

#[test]
fn assign_only_consults_newest_entry_for_noop() {
    // Epoch 1 exists but is not the newest: re-assigning it wipes the newer epoch.
    let mut c = cache(&[(1, 5), (2, 10)]);
    assert!(c.assign(1, 12).unwrap());
    assert_eq!(pairs(&c), [(1, 12)]);
}

#[test]
fn assign_older_epoch_wipes_all_newer() {
    let mut c = cache(&[(2, 6), (3, 8), (4, 11)]);
    c.assign(1, 20).unwrap();
    assert_eq!(pairs(&c), [(1, 20)]);
}

#[test]
fn assign_new_epoch_at_equal_offset_replaces_old() {
    let mut c = cache(&[(2, 6), (3, 8)]);
    c.assign(4, 8).unwrap();
    assert_eq!(pairs(&c), [(2, 6), (4, 8)]);
}

#[test]
fn assign_new_epoch_at_lower_offset_drops_entries_at_or_above() {
    let mut c = cache(&[(2, 6), (3, 8), (4, 11)]);
    c.assign(5, 7).unwrap();
    assert_eq!(pairs(&c), [(2, 6), (5, 7)]);
}

#[test]
fn assign_rejects_negative_epoch_or_offset() {
    let mut c = cache(&[(1, 0)]);
    assert!(matches!(c.assign(-1, 5), Err(Error::InvalidArgument(_))));
    assert!(matches!(c.assign(2, -1), Err(Error::InvalidArgument(_))));
    assert_eq!(pairs(&c), [(1, 0)]);
}

#[test]
fn from_entries_repairs_non_monotonic_input() {
    // (2, 12) wipes the newer epoch 3; (4, 12) then replaces epoch 2 at the same offset.
    assert_eq!(
        pairs(&cache(&[(0, 0), (3, 10), (2, 12), (4, 12)])),
        [(0, 0), (4, 12)]
    );
}

// ---- end_offset_for ----------------------------------------------------------------------------

#[test]
fn end_offset_for_undefined_epoch_is_undefined() {
    assert_eq!(cache(&[(2, 6)]).end_offset_for(-1, 20), (-1, -1));
}

#[test]
fn end_offset_for_empty_cache_is_undefined() {
    assert_eq!(LeaderEpochCache::new().end_offset_for(0, 20), (-1, -1));
    assert_eq!(LeaderEpochCache::new().end_offset_for(5, 0), (-1, -1));
}

#[test]
fn end_offset_for_latest_epoch_is_log_end_offset_uncapped() {
    let c = cache(&[(2, 6), (3, 10)]);
    assert_eq!(c.end_offset_for(3, 15), (3, 15));
    // The caller's LEO is used as is, even when below the epoch's start.
    assert_eq!(c.end_offset_for(3, 4), (3, 4));
}

#[test]
fn end_offset_for_below_earliest_echoes_requested_with_oldest_start() {
    let c = cache(&[(5, 11), (7, 20)]);
    assert_eq!(c.end_offset_for(4, 30), (4, 11));
    assert_eq!(c.end_offset_for(0, 30), (0, 11));
}

#[test]
fn end_offset_for_between_entries_is_floor_epoch_and_next_start() {
    let c = cache(&[(1, 0), (3, 5), (6, 9)]);
    assert_eq!(c.end_offset_for(1, 20), (1, 5));
    assert_eq!(c.end_offset_for(2, 20), (1, 5));
    assert_eq!(c.end_offset_for(3, 20), (3, 9));
    assert_eq!(c.end_offset_for(5, 20), (3, 9));
}

#[test]
fn end_offset_for_above_newest_is_undefined() {
    assert_eq!(cache(&[(1, 0), (3, 5)]).end_offset_for(4, 20), (-1, -1));
}

// ---- queries -----------------------------------------------------------------------------------

#[test]
fn epoch_for_offset_is_the_largest_start_at_or_below() {
    let c = cache(&[(1, 5), (3, 10)]);
    assert_eq!(c.epoch_for_offset(4), None);
    assert_eq!(c.epoch_for_offset(5), Some(1));
    assert_eq!(c.epoch_for_offset(9), Some(1));
    assert_eq!(c.epoch_for_offset(10), Some(3));
    assert_eq!(c.epoch_for_offset(1_000), Some(3));
    assert_eq!(LeaderEpochCache::new().epoch_for_offset(0), None);
}

#[test]
fn neighbouring_epoch_queries() {
    let c = cache(&[(1, 0), (3, 5), (6, 9)]);
    assert_eq!(c.latest_epoch(), Some(6));
    assert_eq!(c.previous_epoch(), Some(3));
    assert_eq!(c.previous_epoch_of(6), Some(3));
    assert_eq!(c.previous_epoch_of(4), Some(3));
    assert_eq!(c.previous_epoch_of(1), None);
    assert_eq!(c.next_epoch(1), Some(3));
    assert_eq!(c.next_epoch(4), Some(6));
    assert_eq!(c.next_epoch(6), None);
    assert_eq!(c.earliest_entry(), Some(EpochEntry::new(1, 0)));
    assert_eq!(cache(&[(1, 0)]).previous_epoch(), None);
    assert_eq!(LeaderEpochCache::new().latest_epoch(), None);
}

#[test]
fn newest_entry_and_size_follow_assign_truncate_and_clear() {
    // Kafka's LeaderEpochFileCache.latestEntry() and epochEntries().size() through the cache's life.
    let mut c = LeaderEpochCache::new();
    assert!(c.is_empty());
    assert_eq!((c.len(), c.latest_entry()), (0, None));
    c.assign(2, 6).unwrap();
    c.assign(3, 8).unwrap();
    c.assign(4, 11).unwrap();
    assert!(!c.is_empty());
    assert_eq!(c.len(), 3);
    assert_eq!(c.latest_entry(), Some(EpochEntry::new(4, 11)));
    c.truncate_from_end(11);
    assert_eq!(
        (c.len(), c.latest_entry()),
        (2, Some(EpochEntry::new(3, 8)))
    );
    c.clear();
    assert!(c.is_empty());
    assert_eq!((c.len(), c.latest_entry()), (0, None));
}

// ---- truncation --------------------------------------------------------------------------------

#[test]
fn truncate_from_end_drops_entries_at_or_after() {
    let base = cache(&[(2, 6), (3, 8), (4, 11)]);
    let mut c = base.clone();
    c.truncate_from_end(11);
    assert_eq!(pairs(&c), [(2, 6), (3, 8)]);
    let mut c = base.clone();
    c.truncate_from_end(9);
    assert_eq!(pairs(&c), [(2, 6), (3, 8)]);
    let mut c = base.clone();
    c.truncate_from_end(8);
    assert_eq!(pairs(&c), [(2, 6)]);
    let mut c = base.clone();
    c.truncate_from_end(12);
    assert_eq!(c, base);
    let mut c = base.clone();
    c.truncate_from_end(0);
    assert!(c.is_empty());
    let mut c = base.clone();
    c.truncate_from_end(-1);
    assert_eq!(c, base);
}

#[test]
fn truncate_from_start_reinserts_last_dropped_epoch_at_new_start() {
    let base = cache(&[(2, 6), (3, 8), (4, 11)]);
    let mut c = base.clone();
    c.truncate_from_start(9);
    assert_eq!(pairs(&c), [(3, 9), (4, 11)]);
    // An entry starting exactly at x is unchanged.
    let mut c = base.clone();
    c.truncate_from_start(8);
    assert_eq!(pairs(&c), [(3, 8), (4, 11)]);
    // Below the oldest start, or -1: no-op.
    let mut c = base.clone();
    c.truncate_from_start(5);
    assert_eq!(c, base);
    c.truncate_from_start(-1);
    assert_eq!(c, base);
    // Past the newest start: only the newest epoch remains, starting at x.
    let mut c = base.clone();
    c.truncate_from_start(17);
    assert_eq!(pairs(&c), [(4, 17)]);
}

// ---- checkpoint --------------------------------------------------------------------------------

#[test]
fn checkpoint_format_is_kafkas() {
    let c = cache(&[(0, 0), (2, 15)]);
    assert_eq!(checkpoint::format(c.entries()), "0\n2\n0 0\n2 15\n");
    assert_eq!(checkpoint::format(&[]), "0\n0\n");
}

#[test]
fn checkpoint_parse_accepts_empty_and_version_only() {
    assert!(checkpoint::parse(b"").unwrap().is_empty());
    assert!(checkpoint::parse(b"0\n").unwrap().is_empty());
    assert!(checkpoint::parse(b"0\n0\n").unwrap().is_empty());
    assert_eq!(
        checkpoint::parse(b"0\r\n1\r\n3\t 7").unwrap(),
        [EpochEntry::new(3, 7)]
    );
}

fn checkpoint_error(bytes: &[u8]) -> (usize, String) {
    match checkpoint::parse(bytes) {
        Err(Error::Checkpoint { line, reason }) => (line, reason),
        other => panic!("expected a checkpoint error for {bytes:?}, got {other:?}"),
    }
}

#[test]
fn checkpoint_parse_errors_name_the_line() {
    assert_eq!(checkpoint_error(b"1\n0\n").0, 1);
    assert!(checkpoint_error(b"1\n0\n").1.contains("version 1"));
    assert_eq!(checkpoint_error(b"x\n").0, 1);
    assert_eq!(checkpoint_error(b"0\nmany\n").0, 2);
    assert_eq!(checkpoint_error(b"0\n-1\n").0, 2);
    assert_eq!(checkpoint_error(b"0\n2\n0 0\n1\n").0, 4);
    assert_eq!(checkpoint_error(b"0\n1\n0 0 0\n").0, 3);
    assert_eq!(checkpoint_error(b"0\n1\n0 x\n").0, 3);
    assert_eq!(checkpoint_error(b"0\n1\n3000000000 0\n").0, 3);
    assert_eq!(checkpoint_error(b"0\n1\n-2 0\n").0, 3);
    assert_eq!(checkpoint_error(b"0\n2\n0 0\n\n").0, 4);
    assert_eq!(checkpoint_error(b"0\n2\n0 0\n").0, 2);
    assert_eq!(checkpoint_error(b"0\n0\n0 0\n").0, 2);
    assert_eq!(checkpoint_error(b"0\n1\n0 \xff\n").0, 3);
}

#[test]
fn checkpoint_huge_count_claim_does_not_allocate() {
    let (line, reason) = checkpoint_error(b"0\n18446744073709551615\n0 0\n");
    assert_eq!(line, 2);
    assert!(reason.contains("has 1 entries"), "{reason}");
}

#[test]
fn checkpoint_read_replays_through_assign() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leader-epoch-checkpoint");
    std::fs::write(&path, "0\n3\n0 0\n3 10\n2 12\n").unwrap();
    assert_eq!(pairs(&checkpoint::read(&path).unwrap()), [(0, 0), (2, 12)]);
}

#[test]
fn checkpoint_read_missing_file_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    match checkpoint::read(&dir.path().join("absent")) {
        Err(Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
        other => panic!("expected NotFound, got {other:?}"),
    }
}

#[test]
fn checkpoint_read_rejects_oversized_file_without_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(checkpoint::MAX_FILE_SIZE + 1).unwrap(); // sparse
    assert!(matches!(
        checkpoint::read(&path),
        Err(Error::Checkpoint { line: 0, .. })
    ));
}

#[test]
fn checkpoint_read_accepts_large_files_up_to_64_mib() {
    // The cap only guards against garbage: a checkpoint of 120,000 leader changes (~1.6 MB) is real.
    assert_eq!(checkpoint::MAX_FILE_SIZE, 64 << 20);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leader-epoch-checkpoint");
    let entries: Vec<EpochEntry> = (0..120_000)
        .map(|i| EpochEntry {
            epoch: i,
            start_offset: i64::from(i) * 10,
        })
        .collect();
    checkpoint::write(&path, &entries).unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() > 1_500_000);
    assert_eq!(checkpoint::read(&path).unwrap().entries(), &entries[..]);
}

#[test]
fn checkpoint_read_parses_a_file_of_exactly_the_cap() {
    // 64 MiB exactly is still read (and parsed: this one has an unsupported version on line 1).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leader-epoch-checkpoint");
    std::fs::write(&path, "1\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(checkpoint::MAX_FILE_SIZE) // sparse
        .unwrap();
    assert!(matches!(
        checkpoint::read(&path),
        Err(Error::Checkpoint { line: 1, .. })
    ));
}

#[test]
fn checkpoint_write_to_a_bare_file_name_syncs_the_current_directory() {
    // A path without a directory part has the empty path as parent: the directory synced is ".".
    // (The only test in this binary that uses a relative path or the working directory.)
    let dir = tempfile::tempdir().unwrap();
    let before = std::env::current_dir().unwrap();
    std::env::set_current_dir(dir.path()).unwrap();
    let written = checkpoint::write(std::path::Path::new("leader-epoch-checkpoint"), &[]);
    std::env::set_current_dir(before).unwrap();
    written.unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap(),
        "0\n0\n"
    );
}

#[test]
fn checkpoint_write_is_atomic_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leader-epoch-checkpoint");
    std::fs::write(&path, "stale content that is longer than the new file\n").unwrap();
    let c = cache(&[(0, 0), (2, 15), (5, 40)]);
    checkpoint::write(&path, c.entries()).unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "0\n3\n0 0\n2 15\n5 40\n"
    );
    assert_eq!(checkpoint::read(&path).unwrap(), c);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["leader-epoch-checkpoint"]);
}

#[test]
fn checkpoint_reads_real_broker_files() {
    let root = std::path::Path::new("/work/shared/kafka-segments/ldi-poc");
    let Ok(dirs) = std::fs::read_dir(root) else {
        return;
    }; // data only on the dev machine
    let mut seen = 0;
    for dir in dirs {
        let path = dir.unwrap().path().join("leader-epoch-checkpoint");
        if let Ok(bytes) = std::fs::read(&path) {
            let c = checkpoint::read(&path).unwrap();
            assert_eq!(
                checkpoint::format(c.entries()).as_bytes(),
                &bytes[..],
                "{path:?}"
            );
            seen += 1;
        }
    }
    assert!(seen >= 3);
}

// ---- divergence --------------------------------------------------------------------------------

#[test]
fn find_diverging_epoch_cases() {
    let leader = cache(&[(0, 0), (2, 10), (4, 20)]);
    // No last fetched epoch: no check.
    assert_eq!(find_diverging_epoch(&leader, 30, -1, 50), None);
    // Follower in the latest epoch, within the log: reads.
    assert_eq!(find_diverging_epoch(&leader, 30, 4, 25), None);
    // Follower ahead of the leader's LEO in the same epoch.
    assert_eq!(find_diverging_epoch(&leader, 30, 4, 35), Some((4, 30)));
    // Follower in epoch 1 (never cached by the leader): leader's epoch 0 ends at 10.
    assert_eq!(find_diverging_epoch(&leader, 30, 1, 8), Some((0, 10)));
    // Epoch 2 ends at 20; fetching at 20 is consistent, 21 is not.
    assert_eq!(find_diverging_epoch(&leader, 30, 2, 20), None);
    assert_eq!(find_diverging_epoch(&leader, 30, 2, 21), Some((2, 20)));
    // Above the leader's newest epoch: undefined, mapped by callers to OFFSET_OUT_OF_RANGE.
    assert_eq!(find_diverging_epoch(&leader, 30, 5, 21), Some((-1, -1)));
}

#[test]
fn truncation_offset_cases() {
    let local = cache(&[(0, 0), (2, 10), (3, 15)]);
    assert_eq!(truncation_offset(&local, 18, 3, -1), None);
    assert_eq!(truncation_offset(&local, 18, -1, 12), Some((12, true)));
    assert_eq!(truncation_offset(&local, 18, -1, 25), Some((18, true)));
    // Local has the leader's epoch: min(local end, leader end, LEO), final.
    assert_eq!(truncation_offset(&local, 18, 2, 12), Some((12, true)));
    assert_eq!(truncation_offset(&local, 18, 2, 17), Some((15, true)));
    assert_eq!(truncation_offset(&local, 18, 3, 30), Some((18, true)));
    // Local lacks epoch 1: its floor epoch 0 ends at 10, not final.
    assert_eq!(truncation_offset(&local, 18, 1, 12), Some((10, false)));
    // Leader epoch above everything local: local has no answer.
    assert_eq!(truncation_offset(&local, 18, 7, 12), Some((12, true)));
}

#[test]
fn divergence_point_cases() {
    let e = |v: &[(i32, i64)]| {
        v.iter()
            .map(|&(e, s)| EpochEntry::new(e, s))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        divergence_point(&e(&[(0, 0)]), 15, &e(&[(0, 0), (2, 10)]), 10),
        Some(10)
    );
    assert_eq!(
        divergence_point(&e(&[(0, 0), (2, 10)]), 10, &e(&[(0, 0)]), 15),
        Some(10)
    );
    assert_eq!(
        divergence_point(&e(&[(0, 0), (2, 10)]), 20, &e(&[(0, 0), (2, 10)]), 15),
        None
    );
    assert_eq!(
        divergence_point(&e(&[(0, 0), (1, 5)]), 8, &e(&[(0, 0), (2, 5)]), 9),
        Some(5)
    );
    // A divergence at or beyond both log ends is invisible.
    assert_eq!(
        divergence_point(&e(&[(0, 0)]), 10, &e(&[(0, 0), (2, 10)]), 10),
        None
    );
    // Lower bound is the later of the two earliest starts.
    assert_eq!(
        divergence_point(&e(&[(1, 5)]), 8, &e(&[(0, 0), (2, 6)]), 10),
        Some(5)
    );
    assert_eq!(
        divergence_point(&e(&[(0, 7)]), 8, &e(&[(0, 0), (2, 6)]), 10),
        Some(7)
    );
    assert_eq!(divergence_point(&[], 8, &e(&[(0, 0)]), 10), None);
}

#[test]
fn divergence_points_validates_layout() {
    let h = |bounds: &'static [i64],
             epochs: &'static [i32],
             starts: &'static [i64],
             ends: &'static [i64]| Histories {
        bounds,
        epochs,
        starts,
        log_ends: ends,
    };
    let ok = h(&[0, 1, 3], &[0, 0, 2], &[0, 0, 10], &[15, 10]);
    let other = h(&[0, 2, 3], &[0, 2, 0], &[0, 10, 0], &[10, 15]);
    assert_eq!(divergence_points(ok, other).unwrap(), [10, 10]);
    assert!(matches!(
        divergence_points(ok, h(&[0, 1], &[0], &[0], &[1])),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        divergence_points(ok, h(&[0, 2, 1], &[0, 1], &[0, 1], &[1, 1])),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        divergence_points(ok, h(&[0, 2, 2], &[1, 0], &[0, 1], &[1, 1])),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        divergence_points(ok, h(&[0, 1, 9], &[0], &[0], &[1, 1])),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        divergence_points(ok, h(&[], &[], &[], &[])),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn divergence_points_names_each_layout_error() {
    let h = |bounds: &'static [i64],
             epochs: &'static [i32],
             starts: &'static [i64],
             ends: &'static [i64]| Histories {
        bounds,
        epochs,
        starts,
        log_ends: ends,
    };
    let reason = |a, b| match divergence_points(a, b) {
        Err(Error::InvalidArgument(reason)) => reason,
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    let ok = h(&[0, 1], &[0], &[0], &[5]);
    // Shapes, named after the side and the array at fault.
    let none = h(&[], &[], &[], &[]);
    assert_eq!(
        reason(none, none),
        "a_bounds must have n + 1 entries, got none"
    );
    assert_eq!(
        reason(ok, h(&[0, 1], &[0, 1], &[0], &[5])),
        "b_epochs has 2 entries but b_starts has 1"
    );
    assert_eq!(
        reason(h(&[0, 1], &[0], &[0], &[]), ok),
        "a_log_ends has 0 entries, expected 1 (one per row)"
    );
    // Each row must be a valid cache: epochs and starts both strictly increasing, neither negative.
    for bad in [
        h(&[0, 2], &[0, 1], &[5, 5], &[9]),
        h(&[0, 2], &[1, 1], &[0, 5], &[9]),
        h(&[0, 2], &[-1, 1], &[0, 5], &[9]),
        h(&[0, 2], &[0, 1], &[-1, 5], &[9]),
    ] {
        assert_eq!(
            reason(ok, bad),
            "b row 0: epochs and start offsets must be non-negative and strictly increasing"
        );
    }
    assert_eq!(
        divergence_points(ok, h(&[0, 2], &[0, 1], &[0, 5], &[9])).unwrap(),
        [5]
    );
}

// ---- property tests ----------------------------------------------------------------------------

/// The cache rules written as naively as possible.
#[derive(Default, Debug)]
struct Model(Vec<(i32, i64)>);

impl Model {
    fn assign(&mut self, epoch: i32, start: i64) {
        if self
            .0
            .last()
            .is_some_and(|&(e, s)| e == epoch && start >= s)
        {
            return;
        }
        while self
            .0
            .last()
            .is_some_and(|&(e, s)| e >= epoch || s >= start)
        {
            self.0.pop();
        }
        self.0.push((epoch, start));
    }
    fn end_offset_for(&self, requested: i32, leo: i64) -> (i32, i64) {
        if requested == -1 {
            return (-1, -1);
        }
        if self.0.last().map(|l| l.0) == Some(requested) {
            return (requested, leo);
        }
        let Some(higher) = self.0.iter().find(|x| x.0 > requested) else {
            return (-1, -1);
        };
        match self.0.iter().rfind(|x| x.0 <= requested) {
            None => (requested, higher.1),
            Some(floor) => (floor.0, higher.1),
        }
    }
    fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.0.iter().rfind(|x| x.1 <= offset).map(|x| x.0)
    }
    fn truncate_from_end(&mut self, x: i64) {
        if x >= 0 {
            self.0.retain(|e| e.1 < x);
        }
    }
    fn truncate_from_start(&mut self, x: i64) {
        let dropped: Vec<_> = self.0.iter().copied().filter(|e| e.1 <= x).collect();
        self.0.retain(|e| e.1 > x);
        if let Some(&(epoch, _)) = dropped.last() {
            self.0.insert(0, (epoch, x));
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Assign(i32, i64),
    TruncateFromEnd(i64),
    TruncateFromStart(i64),
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..10i32, 0..50i64).prop_map(|(e, s)| Op::Assign(e, s)),
        2 => (-2..55i64).prop_map(Op::TruncateFromEnd),
        2 => (-2..55i64).prop_map(Op::TruncateFromStart),
        1 => Just(Op::Clear),
    ]
}

proptest! {
    #[test]
    fn cache_matches_naive_model(ops in prop::collection::vec(op(), 0..40), leo_extra in 0..5i64) {
        let (mut c, mut m) = (LeaderEpochCache::new(), Model::default());
        for op in ops {
            match op {
                Op::Assign(e, s) => { c.assign(e, s).unwrap(); m.assign(e, s); }
                Op::TruncateFromEnd(x) => { c.truncate_from_end(x); m.truncate_from_end(x); }
                Op::TruncateFromStart(x) => { c.truncate_from_start(x); m.truncate_from_start(x); }
                Op::Clear => { c.clear(); m.0.clear(); }
            }
            prop_assert_eq!(pairs(&c), m.0.clone());
            prop_assert_eq!((c.len(), c.is_empty()), (m.0.len(), m.0.is_empty()));
            prop_assert_eq!(c.latest_entry().map(|e| (e.epoch, e.start_offset)), m.0.last().copied());
            prop_assert!(c.entries().windows(2).all(|w| w[0].epoch < w[1].epoch && w[0].start_offset < w[1].start_offset));
            let leo = c.latest_entry().map_or(0, |e| e.start_offset) + leo_extra;
            for requested in -1..12 {
                prop_assert_eq!(c.end_offset_for(requested, leo), m.end_offset_for(requested, leo));
                let below = m.0.iter().rfind(|x| x.0 < requested).map(|x| x.0);
                let above = m.0.iter().find(|x| x.0 > requested).map(|x| x.0);
                prop_assert_eq!(c.previous_epoch_of(requested), below);
                prop_assert_eq!(c.next_epoch(requested), above);
            }
            let offsets: Vec<i64> = (-1..56).collect();
            for &offset in &offsets {
                prop_assert_eq!(c.epoch_for_offset(offset), m.epoch_for_offset(offset));
            }
            // Batched lookups: sorted input takes the merge walk, reversed input the binary search.
            let scalar: Vec<i32> = offsets.iter().map(|&o| c.epoch_for_offset(o).unwrap_or(-1)).collect();
            prop_assert_eq!(c.epochs_for_offsets(&offsets), scalar.clone());
            let reversed: Vec<i64> = offsets.iter().rev().copied().collect();
            prop_assert_eq!(c.epochs_for_offsets(&reversed), scalar.iter().rev().copied().collect::<Vec<_>>());
            let requested: Vec<i32> = (-1..12).collect();
            let (es, os) = c.end_offsets_for(&requested, leo);
            let pairs_out: Vec<(i32, i64)> = es.into_iter().zip(os).collect();
            prop_assert_eq!(pairs_out, requested.iter().map(|&r| c.end_offset_for(r, leo)).collect::<Vec<_>>());
            let reparsed = checkpoint::parse(checkpoint::format(c.entries()).as_bytes()).unwrap();
            prop_assert_eq!(reparsed, c.entries().to_vec());
        }
    }
}

/// A valid history: strictly increasing epochs and starts, first start `first`.
fn history(first: i64) -> impl Strategy<Value = Vec<EpochEntry>> {
    prop::collection::vec((1..4i32, 1..6i64), 0..6).prop_flat_map(move |steps| {
        (0..3i32).prop_map(move |e0| {
            let mut out = vec![EpochEntry::new(e0, first)];
            for &(de, ds) in &steps {
                let last = out[out.len() - 1];
                out.push(EpochEntry::new(last.epoch + de, last.start_offset + ds));
            }
            out
        })
    })
}

fn brute_force(a: &[EpochEntry], leo_a: i64, b: &[EpochEntry], leo_b: i64) -> Option<i64> {
    let epoch_at =
        |h: &[EpochEntry], o: i64| h.iter().rfind(|e| e.start_offset <= o).map(|e| e.epoch);
    let lo = a.first()?.start_offset.max(b.first()?.start_offset);
    (lo..leo_a.max(leo_b)).find(|&o| epoch_at(a, o) != epoch_at(b, o))
}

proptest! {
    #[test]
    fn divergence_point_matches_brute_force(
        a in (0..4i64).prop_flat_map(history), b in (0..4i64).prop_flat_map(history),
        extra_a in 0..6i64, extra_b in 0..6i64,
    ) {
        let leo_a = a[a.len() - 1].start_offset + extra_a;
        let leo_b = b[b.len() - 1].start_offset + extra_b;
        prop_assert_eq!(divergence_point(&a, leo_a, &b, leo_b), brute_force(&a, leo_a, &b, leo_b));
        prop_assert_eq!(divergence_point(&b, leo_b, &a, leo_a), divergence_point(&a, leo_a, &b, leo_b));
    }

    /// A follower running Kafka's truncation loop against a leader that shares a common prefix of
    /// history (and holds the newest epoch) ends exactly at the divergence point, capped by both log ends.
    #[test]
    fn follower_truncation_ends_at_divergence_point(
        prefix in history(0), follower_tail in prop::collection::vec((1..3i32, 1..5i64), 0..4),
        leader_tail in prop::collection::vec((1..3i32, 1..5i64), 1..4), leader_bump in 0..3i32,
        extra_f in 1..6i64, extra_l in 0..6i64,
    ) {
        // Each epoch has one leader, so an epoch outside the common prefix belongs to one replica
        // only: the follower's own epochs sit at odd distances from the prefix, the leader's at even.
        let extend = |base: &[EpochEntry], tail: &[(i32, i64)], first_shift: i32| {
            let mut out = base.to_vec();
            for (i, &(de, ds)) in tail.iter().enumerate() {
                let last = out[out.len() - 1];
                let step = 2 * de + if i == 0 { first_shift } else { 0 };
                out.push(EpochEntry::new(last.epoch + step, last.start_offset + ds));
            }
            out
        };
        let f_hist = extend(&prefix, &follower_tail, -1);
        // The leader's newest epoch is above every follower epoch, as leader election guarantees.
        let max_f = f_hist[f_hist.len() - 1].epoch;
        let mut l_hist = extend(&prefix, &leader_tail, 2 * leader_bump);
        let l_last = l_hist.len() - 1;
        l_hist[l_last].epoch = l_hist[l_last].epoch.max(max_f + 1);
        let leader = LeaderEpochCache::from_entries(l_hist.iter().map(|e| (e.epoch, e.start_offset))).unwrap();
        let mut follower = LeaderEpochCache::from_entries(f_hist.iter().map(|e| (e.epoch, e.start_offset))).unwrap();
        let leo_l = l_hist[l_last].start_offset + extra_l;
        let mut leo_f = f_hist[f_hist.len() - 1].start_offset + extra_f;
        let expected = divergence_point(follower.entries(), leo_f, leader.entries(), leo_l)
            .unwrap_or(i64::MAX).min(leo_f).min(leo_l);

        for _ in 0..50 {
            let Some(last_fetched) = follower.latest_epoch() else { break };
            let Some((epoch, end)) = find_diverging_epoch(&leader, leo_l, last_fetched, leo_f) else { break };
            prop_assert!(epoch >= 0, "leader answered undefined");
            let (to, _final) = truncation_offset(&follower, leo_f, epoch, end).unwrap();
            prop_assert!(to <= leo_f);
            follower.truncate_from_end(to);
            leo_f = to;
        }
        prop_assert_eq!(leo_f, expected);
    }
}

// ---- scenarios from Kafka's LeaderEpochFileCacheTest ---------------------------------------------

#[test]
fn kafka_matching_epoch_at_earlier_offset_truncates() {
    let mut c = cache(&[(5, 11), (6, 12), (7, 13)]);
    c.assign(7, 12).unwrap();
    assert_eq!(pairs(&c), [(5, 11), (7, 12)]);
    assert_eq!(c.end_offset_for(5, 20), (5, 12));
    assert_eq!(c.end_offset_for(6, 20), (5, 12));
}

#[test]
fn kafka_epoch_in_the_past_drops_later_epochs() {
    let mut c = cache(&[(1, 5), (2, 6)]);
    c.assign(1, 7).unwrap();
    assert_eq!(c.latest_epoch(), Some(1));
    assert_eq!(c.end_offset_for(1, 8), (1, 8));
    assert_eq!(c.end_offset_for(2, 8), (-1, -1));
    assert_eq!(pairs(&c), [(1, 7)]);
}

#[test]
fn kafka_offset_going_backwards_wins() {
    assert_eq!(pairs(&cache(&[(2, 6), (3, 5)])), [(3, 5)]);
}

#[test]
fn kafka_leaders_change_many_times() {
    let mut c = cache(&[(0, 0), (1, 0)]);
    assert_eq!(c.latest_epoch(), Some(1));
    assert_eq!(c.end_offset_for(1, 0), (1, 0));
    assert_eq!(c.end_offset_for(0, 0), (0, 0));
    assert_eq!(c.end_offset_for(1, 5), (1, 5));
    c.assign(2, 5).unwrap();
    assert_eq!(c.end_offset_for(2, 10), (2, 10));
    assert_eq!(c.end_offset_for(1, 10), (1, 5));
    assert_eq!(c.end_offset_for(0, 10), (0, 0));
}

#[test]
fn kafka_follower_receives_many_messages() {
    let mut c = LeaderEpochCache::new();
    for (epoch, offset) in [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 3),
        (1, 4),
        (1, 5),
        (2, 6),
        (2, 7),
        (2, 8),
    ] {
        c.assign(epoch, offset).unwrap();
    }
    assert_eq!(pairs(&c), [(0, 0), (1, 3), (2, 6)]);
    assert_eq!(c.end_offset_for(2, 9), (2, 9));
    assert_eq!(c.end_offset_for(0, 9), (0, 3));
    assert_eq!(c.end_offset_for(1, 9), (1, 6));
}

#[test]
fn kafka_truncate_from_start_between_first_entries() {
    let mut c = cache(&[(0, 0), (1, 7), (2, 10)]);
    c.truncate_from_start(5);
    assert_eq!(pairs(&c), [(0, 5), (1, 7), (2, 10)]);
}

// Fuzz-style coverage of the checkpoint parser: arbitrary bytes and mutations of valid files must
// come back as entries or a `Checkpoint` error naming a line inside the file, never a panic.
fn checkpoint_outcome_is_typed(bytes: &[u8]) -> std::result::Result<(), TestCaseError> {
    match checkpoint::parse(bytes) {
        Ok(entries) => {
            let loaded =
                LeaderEpochCache::from_entries(entries.iter().map(|e| (e.epoch, e.start_offset)));
            prop_assert!(loaded.is_ok(), "parsed entries must replay through assign");
        }
        Err(Error::Checkpoint { line, reason }) => {
            prop_assert!(!reason.is_empty());
            prop_assert!(line <= bytes.iter().filter(|b| **b == b'\n').count() + 1);
        }
        Err(other) => prop_assert!(false, "unexpected error kind: {other:?}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn checkpoint_parser_never_panics_on_random_bytes(data in prop::collection::vec(any::<u8>(), 0..200)) {
        checkpoint_outcome_is_typed(&data)?;
    }

    #[test]
    fn checkpoint_parser_never_panics_on_mutated_files(
        entries in prop::collection::vec((0i32..1000, 0i64..1 << 40), 0..8),
        edits in prop::collection::vec((any::<prop::sample::Index>(), prop::sample::select(b" \n\t-0123456789x\xff".to_vec())), 1..5),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let cache = LeaderEpochCache::from_entries(entries).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut data = checkpoint::format(cache.entries()).into_bytes();
        for (at, byte) in edits {
            let i = at.index(data.len());
            data[i] = byte;
        }
        if let Some(c) = cut {
            data.truncate(c.index(data.len() + 1));
        }
        checkpoint_outcome_is_typed(&data)?;
    }
}

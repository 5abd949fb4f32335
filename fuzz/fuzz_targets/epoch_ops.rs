//! `LeaderEpochCache` and the divergence search over arbitrary operation sequences, including
//! epochs and offsets at the i32/i64 extremes: no panic (overflow included: the fuzz build has
//! debug assertions), caches stay strictly increasing, and the batched CSR search agrees with the
//! per-pair one.
#![no_main]

use _core::divergence::{
    divergence_point, divergence_points, find_diverging_epoch, truncation_offset, Histories,
};
use _core::epoch_cache::LeaderEpochCache;
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    Assign(bool, i32, i64),
    TruncateFromEnd(bool, i64),
    TruncateFromStart(bool, i64),
    Clear(bool),
    EndOffsetFor(bool, i32, i64),
    EpochsForOffsets(bool, Vec<i64>),
    Neighbours(bool, i32),
    Diverge(i64, i64, i32, i64),
}

#[derive(Arbitrary, Debug)]
struct Input {
    ops: Vec<Op>,
    /// A raw CSR batch, lying bounds and all.
    bounds: Vec<i64>,
    epochs: Vec<i32>,
    starts: Vec<i64>,
    log_ends: Vec<i64>,
}

fn valid(cache: &LeaderEpochCache) -> bool {
    let e = cache.entries();
    e.first()
        .is_none_or(|f| f.epoch >= 0 && f.start_offset >= 0)
        && e.windows(2)
            .all(|w| w[0].epoch < w[1].epoch && w[0].start_offset < w[1].start_offset)
}

fn csr(caches: &[&LeaderEpochCache]) -> (Vec<i64>, Vec<i32>, Vec<i64>) {
    let mut bounds = vec![0i64];
    let (mut epochs, mut starts) = (Vec::new(), Vec::new());
    for c in caches {
        epochs.extend(c.entries().iter().map(|e| e.epoch));
        starts.extend(c.entries().iter().map(|e| e.start_offset));
        bounds.push(epochs.len() as i64);
    }
    (bounds, epochs, starts)
}

fuzz_target!(|input: Input| {
    let mut caches = [LeaderEpochCache::new(), LeaderEpochCache::new()];
    for op in input.ops.iter().take(256) {
        match *op {
            Op::Assign(which, epoch, start) => {
                let result = caches[which as usize].assign(epoch, start);
                assert_eq!(result.is_err(), epoch < 0 || start < 0);
            }
            Op::TruncateFromEnd(which, end) => caches[which as usize].truncate_from_end(end),
            Op::TruncateFromStart(which, start) => {
                caches[which as usize].truncate_from_start(start)
            }
            Op::Clear(which) => caches[which as usize].clear(),
            Op::EndOffsetFor(which, epoch, leo) => {
                let _ = caches[which as usize].end_offset_for(epoch, leo);
            }
            Op::EpochsForOffsets(which, ref offsets) => {
                let c = &caches[which as usize];
                let batched = c.epochs_for_offsets(offsets);
                let single: Vec<i32> = offsets
                    .iter()
                    .map(|&o| c.epoch_for_offset(o).unwrap_or(-1))
                    .collect();
                assert_eq!(batched, single);
            }
            Op::Neighbours(which, epoch) => {
                let c = &caches[which as usize];
                let _ = (
                    c.previous_epoch_of(epoch),
                    c.next_epoch(epoch),
                    c.previous_epoch(),
                );
            }
            Op::Diverge(leo_a, leo_b, epoch, offset) => {
                let [a, b] = &caches;
                let point = divergence_point(a.entries(), leo_a, b.entries(), leo_b);
                if let Some(o) = point {
                    assert!(o < leo_a.max(leo_b));
                    assert_ne!(a.epoch_for_offset(o), b.epoch_for_offset(o));
                }
                let (bounds_a, epochs_a, starts_a) = csr(&[a]);
                let (bounds_b, epochs_b, starts_b) = csr(&[b]);
                let batched = divergence_points(
                    Histories {
                        bounds: &bounds_a,
                        epochs: &epochs_a,
                        starts: &starts_a,
                        log_ends: &[leo_a],
                    },
                    Histories {
                        bounds: &bounds_b,
                        epochs: &epochs_b,
                        starts: &starts_b,
                        log_ends: &[leo_b],
                    },
                );
                assert!(matches!(batched.as_deref(), Ok([p]) if *p == point.unwrap_or(-1)));
                let _ = find_diverging_epoch(a, leo_a, epoch, offset);
                let _ = truncation_offset(b, leo_b, epoch, offset);
            }
        }
        assert!(caches.iter().all(valid), "{caches:?}");
    }
    // Arbitrary CSR input: an answer or an InvalidArgument, never a panic.
    let h = Histories {
        bounds: &input.bounds,
        epochs: &input.epochs,
        starts: &input.starts,
        log_ends: &input.log_ends,
    };
    let _ = divergence_points(h, h);
});

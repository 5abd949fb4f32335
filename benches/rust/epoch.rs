//! Criterion benches: epoch lookups (single and batched) and the divergence search.

use std::hint::black_box;

use _core::divergence::{divergence_point, divergence_points, Histories};
use _core::epoch_cache::{EpochEntry, LeaderEpochCache};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const ENTRIES: i32 = 1000;
const LOOKUPS: usize = 1_000_000;

/// 1000 epochs, every other epoch number, 1000 offsets apart.
fn big_cache() -> LeaderEpochCache {
    LeaderEpochCache::from_entries((0..ENTRIES).map(|i| (2 * i, i64::from(i) * 1000)))
        .unwrap_or_default()
}

/// A cheap deterministic pseudo-random sequence (xorshift), so runs are comparable.
fn xorshift(n: usize, seed: u64) -> impl Iterator<Item = u64> {
    let mut x = seed;
    (0..n).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    })
}

fn lookups(c: &mut Criterion) {
    let cache = big_cache();
    let leo = i64::from(ENTRIES) * 1000;
    let mut group = c.benchmark_group("end_offset_for");
    group.bench_function("single", |b| {
        b.iter(|| cache.end_offset_for(black_box(1001), black_box(leo)))
    });
    let epochs: Vec<i32> = xorshift(LOOKUPS, 7)
        .map(|x| (x % (2 * ENTRIES as u64)) as i32)
        .collect();
    group.throughput(Throughput::Elements(LOOKUPS as u64));
    group.bench_function("batched_1e6", |b| {
        b.iter(|| cache.end_offsets_for(black_box(&epochs), leo))
    });
    group.finish();

    let mut group = c.benchmark_group("epochs_for_offsets_1e6");
    group.throughput(Throughput::Elements(LOOKUPS as u64));
    let random: Vec<i64> = xorshift(LOOKUPS, 11)
        .map(|x| (x % leo as u64) as i64)
        .collect();
    let mut sorted = random.clone();
    sorted.sort_unstable();
    group.bench_function("random", |b| {
        b.iter(|| cache.epochs_for_offsets(black_box(&random)))
    });
    group.bench_function("sorted", |b| {
        b.iter(|| cache.epochs_for_offsets(black_box(&sorted)))
    });
    group.finish();
}

fn divergence(c: &mut Criterion) {
    let mut group = c.benchmark_group("divergence_point");
    for n in [10usize, 1000] {
        // Same history except the last epoch, which the two replicas wrote independently.
        let a: Vec<EpochEntry> = (0..n)
            .map(|i| EpochEntry::new(2 * i as i32, i as i64 * 100))
            .collect();
        let mut b = a.clone();
        if let Some(last) = b.last_mut() {
            last.epoch += 1;
        }
        let leo = n as i64 * 100;
        group.bench_with_input(BenchmarkId::new("entries", n), &n, |bench, _| {
            bench.iter(|| divergence_point(black_box(&a), leo, black_box(&b), leo))
        });
    }
    group.finish();

    // The audit's shape: many partitions with short histories.
    let (rows, per_row) = (100_000usize, 8usize);
    let bounds: Vec<i64> = (0..=rows).map(|r| (r * per_row) as i64).collect();
    let epochs_a: Vec<i32> = (0..rows * per_row)
        .map(|i| (i % per_row) as i32 * 2)
        .collect();
    let starts: Vec<i64> = (0..rows * per_row)
        .map(|i| (i % per_row) as i64 * 50)
        .collect();
    let epochs_b: Vec<i32> = epochs_a
        .iter()
        .enumerate()
        .map(|(i, &e)| if i % per_row == per_row - 1 { e + 1 } else { e })
        .collect();
    let log_ends: Vec<i64> = vec![per_row as i64 * 50; rows];
    let a = Histories {
        bounds: &bounds,
        epochs: &epochs_a,
        starts: &starts,
        log_ends: &log_ends,
    };
    let b = Histories {
        bounds: &bounds,
        epochs: &epochs_b,
        starts: &starts,
        log_ends: &log_ends,
    };
    let mut group = c.benchmark_group("divergence_points");
    group.throughput(Throughput::Elements(rows as u64));
    group.bench_function("100k_rows_x8", |bench| {
        bench.iter(|| divergence_points(black_box(a), black_box(b)))
    });
    group.finish();
}

criterion_group!(benches, lookups, divergence);
criterion_main!(benches);

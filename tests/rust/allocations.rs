//! No per-record allocation in the Arrow decoder: a counting global allocator (this test binary's
//! own) sees a decode of 20,000 records in 200 batches allocate a bounded number of times, whatever
//! the record count: builders are sized from each batch header's record count and values are copied
//! into (or, as views, pointed at in) buffers of a chunk, never one allocation a record.
//!
//! Built without the `python` and `jvm` features only (as `make test-rust` runs it): with either the
//! crate sets mimalloc as the global allocator, and a binary has one.
#![cfg(not(any(feature = "python", feature = "jvm")))]

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use _core::records::arrow::{decode_projected_in, Column, Layout, View};
use _core::records::{encode_batch, BatchSpec, Compression, DecodeOptions, Header, NewRecord};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged, counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// `batches` batches of `per_batch` records: keys, 40- and 200-byte values, a header on every other.
fn log(batches: usize, per_batch: usize, compression: Compression) -> Vec<u8> {
    let value = [b'v'; 200];
    let mut out = Vec::new();
    for b in 0..batches {
        let keys: Vec<Vec<u8>> = (0..per_batch)
            .map(|i| format!("key-{b}-{i}").into_bytes())
            .collect();
        let header = Header {
            key: "h",
            value: Some(b"x"),
        };
        let records: Vec<NewRecord<'_>> = (0..per_batch)
            .map(|i| NewRecord {
                key: Some(&keys[i]),
                value: Some(&value[..if i % 2 == 0 { 40 } else { 200 }]),
                headers: if i % 2 == 0 { vec![header] } else { Vec::new() },
                timestamp: Some(1_700_000_000_000 + i as i64),
            })
            .collect();
        let spec = BatchSpec {
            base_offset: (b * per_batch) as i64,
            compression,
            ..BatchSpec::default()
        };
        out.extend(encode_batch(&spec, &records).unwrap_or_default());
    }
    out
}

fn allocations_to_decode(data: &[u8], layout: Layout) -> (usize, usize) {
    let input = arrow_buffer::Buffer::from_slice_ref(data);
    let view = View {
        layout,
        input: Some(&input),
    };
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let decoded = decode_projected_in(
        input.as_slice(),
        0,
        DecodeOptions::default(),
        &Column::RECORD,
        1,
        view,
    );
    let count = ALLOCATIONS.load(Ordering::Relaxed) - before;
    (count, decoded.map(|d| d.num_rows()).unwrap_or(0))
}

#[test]
fn decoding_allocates_per_batch_and_chunk_not_per_record() {
    for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
        let small = log(20, 100, compression);
        let large = log(200, 100, compression);
        for layout in [Layout::Binary, Layout::BinaryView] {
            let (few, rows) = allocations_to_decode(&small, layout);
            assert_eq!(rows, 2_000);
            let (many, rows) = allocations_to_decode(&large, layout);
            assert_eq!(rows, 20_000);
            // A fixed cost (schema, builders, chunks) and a few per batch at most (a record's
            // header list, a column's buffers growing), never one a record: the 180 batches of
            // 18,000 records more cost at most 5 allocations a batch.
            assert!(
                many.saturating_sub(few) < 5 * 180,
                "{compression:?} {layout:?}: {few} allocations for 2,000 records, {many} for 20,000"
            );
        }
    }
}

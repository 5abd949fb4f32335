//! Criterion benches of the record codec: CRC-32C throughput, and decoding uncompressed, LZ4 and
//! zstd batches (1 KiB text-like values, 100 records per batch) to Arrow columns, next to the bare
//! decompression of the same payloads. Throughput is in bytes of input.

use std::hint::black_box;

use _core::records::arrow::{decode_arrow, decode_projected_in, Column, Layout, View};
use _core::records::compression::Decompressor;
use _core::records::{batch_index, encode_batch, BatchSpec, Compression, DecodeOptions, NewRecord};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const WORDS: [&str; 10] = [
    "alpha", "beta", "gamma", "delta", "epsilon", "kafka", "epoch", "leader", "offset", "record",
];

/// Deterministic text-like values (compress about 3x, like JSON payloads).
fn value(seed: &mut u64, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 32);
    while out.len() < size {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let word = WORDS[(*seed >> 33) as usize % WORDS.len()];
        out.extend_from_slice(word.as_bytes());
        out.extend_from_slice(format!(" {},", (*seed >> 40) % 1_000_000).as_bytes());
    }
    out.truncate(size);
    out
}

fn log(records: usize, value_size: usize, per_batch: usize, compression: Compression) -> Vec<u8> {
    let mut seed = value_size as u64;
    let values: Vec<Vec<u8>> = (0..records).map(|_| value(&mut seed, value_size)).collect();
    let keys: Vec<Vec<u8>> = (0..records)
        .map(|i| format!("key-{i}").into_bytes())
        .collect();
    let mut out = Vec::new();
    for start in (0..records).step_by(per_batch) {
        let end = (start + per_batch).min(records);
        let batch: Vec<NewRecord<'_>> = (start..end)
            .map(|i| NewRecord {
                key: Some(&keys[i]),
                value: Some(&values[i]),
                timestamp: Some(1_700_000_000_000 + i as i64),
                ..NewRecord::default()
            })
            .collect();
        let spec = BatchSpec {
            base_offset: start as i64,
            partition_leader_epoch: 5,
            compression,
            ..BatchSpec::default()
        };
        out.extend(encode_batch(&spec, &batch).unwrap_or_default());
    }
    out
}

fn crc(c: &mut Criterion) {
    let data = vec![0xa5u8; 1 << 20];
    let mut g = c.benchmark_group("crc32c");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.bench_function("1 MiB", |b| b.iter(|| crc32c::crc32c(black_box(&data))));
    g.finish();
}

fn decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("decode_arrow");
    g.sample_size(20);
    for codec in [Compression::None, Compression::Lz4, Compression::Zstd] {
        let data = log(10_000, 1024, 100, codec);
        g.throughput(Throughput::Bytes(data.len() as u64));
        g.bench_with_input(
            BenchmarkId::new("1KiB values", codec.name()),
            &data,
            |b, data| {
                b.iter(|| {
                    decode_arrow(black_box(data), 0, DecodeOptions::default())
                        .map(|d| d.num_rows())
                        .unwrap_or(0)
                })
            },
        );
        // Keys and values as views into the input / the decompression buffer (no value copied).
        let input = arrow_buffer::Buffer::from_slice_ref(&data);
        g.bench_with_input(
            BenchmarkId::new("1KiB values binary_view", codec.name()),
            &input,
            |b, input| {
                b.iter(|| {
                    let view = View {
                        layout: Layout::BinaryView,
                        input: Some(input),
                    };
                    let opts = DecodeOptions::default();
                    decode_projected_in(input.as_slice(), 0, opts, &Column::RECORD, 1, view)
                        .map(|d| d.num_rows())
                        .unwrap_or(0)
                })
            },
        );
        if codec != Compression::None {
            // The floor: decompressing the same payloads and nothing else.
            let (index, _) = batch_index(&data, 0, false).unwrap_or_default();
            let payloads: Vec<&[u8]> = index
                .iter()
                .map(|l| {
                    &data[l.file_position as usize + 61
                        ..(l.file_position + u64::from(l.size_in_bytes)) as usize]
                })
                .collect();
            let mut decompressor = Decompressor::new();
            g.bench_with_input(
                BenchmarkId::new("decompress only", codec.name()),
                &payloads,
                |b, payloads| {
                    b.iter(|| {
                        payloads
                            .iter()
                            .map(|p| {
                                decompressor
                                    .decompress(codec, p, 64 << 20, false)
                                    .map(<[u8]>::len)
                                    .unwrap_or(0)
                            })
                            .sum::<usize>()
                    })
                },
            );
        }
    }
    let small = log(50_000, 100, 500, Compression::None);
    g.throughput(Throughput::Elements(50_000));
    g.bench_function("100B values (records)", |b| {
        b.iter(|| {
            decode_arrow(black_box(&small), 0, DecodeOptions::default())
                .map(|d| d.num_rows())
                .unwrap_or(0)
        })
    });
    g.finish();
}

criterion_group!(benches, crc, decode);
criterion_main!(benches);

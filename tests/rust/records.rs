//! Integration tests of the pure record-batch codec: round trips through every codec, the real
//! segments in shared/kafka-segments, and a fuzz target (random and mutated bytes never panic,
//! every failure is a `Corrupt` error inside the input) that replays tests/data/fuzz.

use std::path::{Path, PathBuf};

use _core::records::arrow::{
    decode_arrow, decode_projected_in, ArrowDecoded, Column, Layout, View,
};
use _core::records::{
    batch_index, decode_batches, encode_batch, BatchSpec, Compression, DecodeOptions, Header,
    NewRecord,
};
use _core::Error;
use proptest::prelude::*;

fn opts() -> DecodeOptions {
    DecodeOptions::default()
}

fn corpus() -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    files
        .into_iter()
        .filter_map(|p| std::fs::read(&p).ok().map(|b| (p, b)))
        .collect()
}

/// Every key and value view of a `binary_view` decode lies inside its data buffers (Arrow's full
/// validation: buffer index, offset + length, prefix), and the rows equal the `binary` decode's.
fn check_views(views: &ArrowDecoded, plain: &ArrowDecoded) -> Result<(), String> {
    use arrow_array::cast::AsArray;
    use arrow_array::Array;
    if views.num_rows() != plain.num_rows() {
        return Err(format!(
            "{} rows as views, {} as binary",
            views.num_rows(),
            plain.num_rows()
        ));
    }
    let collect = |d: &ArrowDecoded, column: usize| -> Result<Vec<Option<Vec<u8>>>, String> {
        let mut out = Vec::new();
        for batch in &d.batches {
            let array = batch.column(column);
            array
                .to_data()
                .validate_full()
                .map_err(|e| format!("invalid view array: {e}"))?;
            match array.data_type() {
                arrow_schema::DataType::BinaryView => {
                    out.extend(array.as_binary_view().iter().map(|v| v.map(<[u8]>::to_vec)))
                }
                _ => out.extend(
                    array
                        .as_binary::<i32>()
                        .iter()
                        .map(|v| v.map(<[u8]>::to_vec)),
                ),
            }
        }
        Ok(out)
    };
    for column in [0, 1] {
        if collect(views, column)? != collect(plain, column)? {
            return Err(format!("column {column} differs between views and binary"));
        }
    }
    Ok(())
}

/// The same error kind at the same position for the same cause: a codec's own message may differ
/// with the room its output had (zstd says "Destination buffer is too small" or "Data corruption
/// detected" for the same corrupt frame), so reasons are compared up to their first colon.
fn same_error(a: &Error, b: &Error) -> bool {
    match (a, b) {
        (
            Error::Corrupt {
                position: p,
                reason: r,
            },
            Error::Corrupt {
                position: q,
                reason: s,
            },
        ) => p == q && r.split(':').next() == s.split(':').next(),
        _ => a.to_string() == b.to_string(),
    }
}

/// `binary_view` decodes of `data` (one thread and two; the input as the views' buffer) next to the
/// `binary` one: the same rows, every view inside its buffers, or the same error.
fn decode_views(data: &[u8], o: DecodeOptions) -> Result<(), String> {
    let columns = [Column::Key, Column::Value, Column::Offset];
    let input = arrow_buffer::Buffer::from_slice_ref(data);
    let plain = decode_projected_in(input.as_slice(), 7, o, &columns, 1, View::BINARY);
    for threads in [1, 2] {
        let view = View {
            layout: Layout::BinaryView,
            input: Some(&input),
        };
        let views = decode_projected_in(input.as_slice(), 7, o, &columns, threads, view);
        match (&views, &plain) {
            (Ok(v), Ok(p)) => check_views(v, p)?,
            (Err(a), Err(b)) if same_error(a, b) => {}
            _ => return Err(format!("views {views:?} but binary {plain:?}")),
        }
    }
    Ok(())
}

/// Decode with every entry point; any error must be `Corrupt` at a position inside the input.
fn decode_everything(data: &[u8], verify_crc: bool) -> Result<(), String> {
    for allow_partial_tail in [false, true] {
        let o = DecodeOptions {
            verify_crc,
            allow_partial_tail,
            max_decompressed_size: 1 << 20,
        };
        let results = [
            decode_batches(data, 7, o).map(|_| ()),
            decode_arrow(data, 7, o).map(|_| ()),
            batch_index(data, 7, allow_partial_tail).map(|_| ()),
        ];
        decode_views(data, o)?;
        for r in results {
            match r {
                Ok(()) => {}
                Err(Error::Corrupt { position, .. })
                    if (7..=7 + data.len() as u64).contains(&position) => {}
                Err(e) => return Err(format!("unexpected error {e:?}")),
            }
        }
    }
    Ok(())
}

#[test]
fn corpus_decodes_and_survives_mutation() {
    let files = corpus();
    assert!(files.len() >= 10, "tests/data/fuzz corpus missing");
    for (path, data) in &files {
        let (batches, tail) = decode_batches(data, 0, opts())
            .map_err(|e| format!("{path:?}: {e}"))
            .unwrap_or_default();
        assert!(!batches.is_empty() && tail.is_none(), "{path:?}");
        // Every single-byte flip and every truncation of every corpus file.
        for i in 0..data.len() {
            let mut m = data.clone();
            m[i] ^= 0x5a;
            assert_eq!(decode_everything(&m, false), Ok(()), "{path:?} flip {i}");
            assert_eq!(decode_everything(&m, true), Ok(()), "{path:?} flip {i}");
            assert_eq!(
                decode_everything(&data[..i], false),
                Ok(()),
                "{path:?} cut {i}"
            );
        }
    }
}

/// (key, value, headers, timestamp) of one generated record.
type GenRecord = (
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(String, Option<Vec<u8>>)>,
    Option<i64>,
);

fn record_strategy() -> impl Strategy<Value = GenRecord> {
    (
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200)),
        proptest::collection::vec(
            (
                ".{0,6}",
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..10)),
            ),
            0..3,
        ),
        proptest::option::of(0i64..1 << 42),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        prop_assert_eq!(decode_everything(&data, false), Ok(()));
    }

    #[test]
    fn mutated_batches_never_panic(
        seed in 0usize..64,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let files = corpus();
        prop_assume!(!files.is_empty());
        let mut data = files[seed % files.len()].1.clone();
        for (at, byte) in edits {
            let i = at.index(data.len());
            data[i] = byte;
        }
        if let Some(c) = cut {
            data.truncate(c.index(data.len()));
        }
        prop_assert_eq!(decode_everything(&data, false), Ok(()));
        prop_assert_eq!(decode_everything(&data, true), Ok(()));
    }

    #[test]
    fn encode_decode_round_trip(
        records in proptest::collection::vec(record_strategy(), 1..20),
        codec in proptest::sample::select(Compression::ALL.to_vec()),
        base_offset in 0i64..1 << 50,
        epoch in -1i32..1000,
        log_append in any::<bool>(),
        base_sequence in prop_oneof![Just(-1i32), 0..i32::MAX],
    ) {
        let new: Vec<NewRecord<'_>> = records
            .iter()
            .map(|(k, v, h, ts)| NewRecord {
                key: k.as_deref(),
                value: v.as_deref(),
                headers: h.iter().map(|(k, v)| Header { key: k, value: v.as_deref() }).collect(),
                timestamp: *ts,
            })
            .collect();
        let spec = BatchSpec {
            base_offset,
            partition_leader_epoch: epoch,
            compression: codec,
            timestamp_type: i8::from(log_append),
            producer_id: 11,
            producer_epoch: 2,
            base_sequence,
            ..BatchSpec::default()
        };
        let bytes = encode_batch(&spec, &new).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (batches, tail) = decode_batches(&bytes, 0, opts()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(tail.is_none());
        prop_assert_eq!(batches.len(), 1);
        let b = &batches[0];
        prop_assert_eq!(b.header.compression(), Some(codec));
        prop_assert_eq!(b.header.partition_leader_epoch, epoch);
        prop_assert_eq!(b.header.base_offset, base_offset);
        prop_assert_eq!(b.header.last_offset(), base_offset + new.len() as i64 - 1);
        prop_assert_eq!(b.header.size_in_bytes as usize, bytes.len());
        let base_ts = new.iter().find_map(|r| r.timestamp).unwrap_or(-1);
        let max_ts = new.iter().map(|r| r.timestamp.unwrap_or(base_ts)).max().unwrap_or(-1);
        prop_assert_eq!(b.header.max_timestamp, max_ts);
        for (i, (got, want)) in b.records.iter().zip(&new).enumerate() {
            prop_assert_eq!(got.offset, base_offset + i as i64);
            prop_assert_eq!(got.key.as_deref(), want.key);
            prop_assert_eq!(got.value.as_deref(), want.value);
            let expected_ts = if log_append { max_ts } else { want.timestamp.unwrap_or(base_ts) };
            prop_assert_eq!(got.timestamp, expected_ts);
            let headers: Vec<_> = got.headers.iter().map(|(k, v)| Header { key: k, value: v.as_deref() }).collect();
            prop_assert_eq!(headers, want.headers.clone());
        }
        let arrow = decode_arrow(&bytes, 0, opts()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(arrow.num_rows(), new.len());
    }
}

#[test]
fn decompression_cap_is_exact() {
    let value = vec![b'x'; 100_000];
    let rec = [NewRecord {
        value: Some(&value),
        ..NewRecord::default()
    }];
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let bytes = encode_batch(
            &BatchSpec {
                compression: codec,
                ..BatchSpec::default()
            },
            &rec,
        )
        .unwrap_or_default();
        // Exactly the payload size is allowed; one byte less is not.
        let payload = {
            let plain = encode_batch(&BatchSpec::default(), &rec).unwrap_or_default();
            plain.len() - 61
        };
        let at = |cap| DecodeOptions {
            max_decompressed_size: cap,
            ..DecodeOptions::default()
        };
        assert!(decode_batches(&bytes, 0, at(payload)).is_ok(), "{codec:?}");
        match decode_batches(&bytes, 0, at(payload - 1)) {
            Err(Error::Corrupt {
                position: 61,
                reason,
            }) => assert!(reason.contains("max_decompressed_size"), "{reason}"),
            other => panic!("{codec:?}: {other:?}"),
        }
    }
}

/// Offsets never wrap: a batch (or a record in it) whose offsets would pass i64::MAX is rejected on
/// both sides instead of decoding to negative offsets.
#[test]
fn offsets_that_overflow_i64_are_rejected_not_wrapped() {
    let rec: Vec<NewRecord<'_>> = (0..3)
        .map(|_| NewRecord {
            value: Some(b"v"),
            ..NewRecord::default()
        })
        .collect();
    let spec = |base_offset| BatchSpec {
        base_offset,
        ..BatchSpec::default()
    };
    // The encoder: the last offset and the next one must fit.
    assert!(encode_batch(&spec(i64::MAX - 3), &rec).is_ok());
    for base in [i64::MAX - 2, i64::MAX] {
        assert!(matches!(
            encode_batch(&spec(base), &rec),
            Err(Error::InvalidArgument(_))
        ));
    }
    let ok = encode_batch(&spec(0), &rec).unwrap_or_default();
    let with_base = |base: i64| {
        let mut b = ok.clone();
        b[..8].copy_from_slice(&base.to_be_bytes()); // not covered by the v2 CRC
        b
    };
    let no_crc = DecodeOptions {
        verify_crc: false,
        ..opts()
    };
    let (batches, _) = decode_batches(&with_base(i64::MAX - 3), 0, opts()).unwrap_or_default();
    let offsets: Vec<i64> = batches[0].records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [i64::MAX - 3, i64::MAX - 2, i64::MAX - 1]);
    // Header: base + last_offset_delta (2) + 1 overflows, in every entry point.
    let bad = with_base(i64::MAX - 2);
    for r in [
        decode_batches(&bad, 0, opts()).map(|_| ()),
        decode_arrow(&bad, 0, opts()).map(|_| ()),
        batch_index(&bad, 0, false).map(|_| ()),
    ] {
        assert!(
            matches!(&r, Err(Error::Corrupt { position: 0, reason }) if reason.contains("overflow")),
            "{r:?}"
        );
    }
    // A record whose own offset delta passes i64::MAX although the header's last delta does not.
    let mut lying = with_base(i64::MAX - 1);
    lying[23..27].copy_from_slice(&0i32.to_be_bytes()); // last_offset_delta 0 (CRC not checked)
    let r = decode_batches(&lying, 0, no_crc);
    assert!(
        matches!(&r, Err(Error::Corrupt { reason, .. }) if reason.contains("record 2: offset delta 2 overflows")),
        "{r:?}"
    );
}

/// shared/kafka-segments: $EPOCHGUARD_KAFKA_SEGMENTS, beside or inside the checkout, or /work/shared.
fn segments_dir() -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        std::env::var_os("EPOCHGUARD_KAFKA_SEGMENTS").map(PathBuf::from),
        repo.parent().map(|p| p.join("shared/kafka-segments")),
        Some(repo.join("shared/kafka-segments")),
        Some(PathBuf::from("/work/shared/kafka-segments")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.join("expected").is_dir())
}

/// `"batch_count": N` and `"record_count": N` from an expected/*.json (no JSON dependency needed).
fn json_int(text: &str, key: &str) -> Option<usize> {
    let at = text.find(&format!("\"{key}\":"))? + key.len() + 3;
    text[at..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[test]
fn real_segments_match_expected_counts() {
    let Some(root) = segments_dir() else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(root.join("expected")) else {
        return;
    };
    let mut checked = 0;
    for entry in entries.filter_map(|e| e.ok()) {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let Some(start) = text.find("\"description\": \"") else {
            continue;
        };
        let rel = &text[start + 16..];
        let rel = &rel[..rel.find('"').unwrap_or(0)];
        let data = std::fs::read(root.join(rel)).unwrap_or_default();
        let verify_crc = !text.contains("\"crc_valid\": false");
        let (batches, tail) = decode_batches(
            &data,
            0,
            DecodeOptions {
                verify_crc,
                ..DecodeOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert!(tail.is_none());
        assert_eq!(Some(batches.len()), json_int(&text, "batch_count"), "{rel}");
        assert_eq!(
            Some(batches.iter().map(|b| b.records.len()).sum()),
            json_int(&text, "record_count"),
            "{rel}"
        );
        let arrow = decode_arrow(
            &data,
            0,
            DecodeOptions {
                verify_crc,
                ..DecodeOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert_eq!(Some(arrow.num_rows()), json_int(&text, "record_count"));
        checked += 1;
    }
    assert!(checked >= 10);
}

/// A batch of more records than the decoder parses before handing them on (1024): every row's key,
/// value, headers, offset, timestamp and sequence land in its own row, in both layouts and through
/// a codec, nulls and header counts varying record to record (a header range kept across a hand-over,
/// or headers not cleared with the records, would shift them).
#[test]
fn a_batch_longer_than_a_parse_run_keeps_every_rows_fields() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type};
    use arrow_array::Array;
    let n = 2_600usize;
    let keys: Vec<Vec<u8>> = (0..n).map(|i| format!("key-{i}").into_bytes()).collect();
    let values: Vec<Vec<u8>> = (0..n).map(|i| vec![(i % 251) as u8; i % 40]).collect();
    let header_keys: Vec<String> = (0..n).map(|i| format!("h{i}")).collect();
    let new: Vec<NewRecord<'_>> = (0..n)
        .map(|i| NewRecord {
            key: (i % 7 != 3).then(|| keys[i].as_slice()),
            value: (i % 11 != 5).then(|| values[i].as_slice()),
            headers: (0..i % 4)
                .map(|j| Header {
                    key: &header_keys[i],
                    value: (j != 1).then(|| &keys[i][..j]),
                })
                .collect(),
            timestamp: Some(1_700_000_000_000 + (i as i64 * 37) % 5_000),
        })
        .collect();
    for codec in [Compression::None, Compression::Zstd] {
        let spec = BatchSpec {
            base_offset: 1_000,
            compression: codec,
            base_sequence: 7,
            producer_id: 3,
            ..BatchSpec::default()
        };
        let bytes = encode_batch(&spec, &new).unwrap_or_default();
        let input = arrow_buffer::Buffer::from_slice_ref(&bytes);
        for layout in [Layout::Binary, Layout::BinaryView] {
            let view = View {
                layout,
                input: Some(&input),
            };
            let decoded = decode_projected_in(&bytes, 0, opts(), &Column::RECORD, 1, view);
            let Ok(decoded) = decoded else {
                panic!("{codec:?} {layout:?}: {decoded:?}");
            };
            assert_eq!(decoded.batches.len(), 1, "one chunk");
            let b = &decoded.batches[0];
            assert_eq!(b.num_rows(), n);
            let col = |name: &str| {
                b.column_by_name(name)
                    .cloned()
                    .unwrap_or_else(|| panic!("{name}"))
            };
            let binary = |name: &str, i: usize| -> Option<Vec<u8>> {
                let c = col(name);
                if c.is_null(i) {
                    return None;
                }
                Some(match layout {
                    Layout::Binary => c.as_binary::<i32>().value(i).to_vec(),
                    Layout::BinaryView => c.as_binary_view().value(i).to_vec(),
                })
            };
            let offsets = col("offset");
            let timestamps = col("timestamp");
            let sequences = col("sequence");
            let headers = col("headers");
            let headers = headers.as_list::<i32>();
            for (i, want) in new.iter().enumerate() {
                let at = format!("{codec:?} {layout:?} row {i}");
                assert_eq!(
                    offsets.as_primitive::<Int64Type>().value(i),
                    1_000 + i as i64,
                    "{at}"
                );
                assert_eq!(
                    timestamps.as_primitive::<Int64Type>().value(i),
                    want.timestamp.unwrap_or(-1),
                    "{at}"
                );
                assert_eq!(
                    sequences.as_primitive::<Int32Type>().value(i),
                    7 + i as i32,
                    "{at}"
                );
                assert_eq!(binary("key", i).as_deref(), want.key, "{at}");
                assert_eq!(binary("value", i).as_deref(), want.value, "{at}");
                let row = headers.value(i);
                let row = row.as_struct();
                let got: Vec<(String, Option<Vec<u8>>)> = (0..row.len())
                    .map(|j| {
                        let value = row.column(1).as_binary::<i32>();
                        (
                            row.column(0).as_string::<i32>().value(j).to_owned(),
                            (!value.is_null(j)).then(|| value.value(j).to_vec()),
                        )
                    })
                    .collect();
                let expected: Vec<(String, Option<Vec<u8>>)> = want
                    .headers
                    .iter()
                    .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                    .collect();
                assert_eq!(got, expected, "{at}");
            }
        }
    }
}

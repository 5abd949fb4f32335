//! A byte range of a segment decoded with its problems reported between its records: the one
//! implementation of `withErrors` (`read_kafka_logs(with_errors=True)` and both `kafka-log` readers),
//! called by the Python binding (rust/py) and the JVM reader (rust/jni). Kafka has no such reader:
//! `DumpLogSegments` and `LogSegment.recover` stop at the first bad batch; here a batch that does not
//! decode is named and skipped when the headers still say where it ends, so one bad batch does not
//! hide the records after it.
//!
//! The rules, in order of the pieces handed out:
//! - a batch that does not decode (CRC, a record, a codec) is a problem at the byte where decoding
//!   failed, between the records before it and those after it, "<reason>; skipped the batch at <p>
//!   (<n> bytes)"; when the headers are broken there too, the rest of the range is one problem,
//!   "<reason>; bytes <p>..<end> not decoded";
//! - an incomplete last batch is "incomplete batch at the end: <n> bytes";
//! - a file that does not open is "<error>; bytes <start>..<end> not decoded", and one found shorter
//!   than the range it was listed with (a live log dir, changed since) is decoded as far as it goes,
//!   then "the file ends at byte <size>, shorter than when listed; bytes <p>..<end> not decoded"
//!   (unless the batch cut by its new end was reported as incomplete already).

use std::collections::VecDeque;
use std::path::Path;

use arrow_array::RecordBatch;

use crate::file::InputFile;
use crate::records::arrow::{ArrowBuilder, Column};
use crate::records::batch::{BatchHeader, Frame};
use crate::records::headers::scan_headers;
use crate::records::{batch_index, reader, BatchCursor, BatchLocation, DecodeOptions};
use crate::{Error, Result};

/// What a reported range hands out, in order: record batches, and the problems between them (byte
/// position, reason).
#[derive(Debug)]
pub enum Piece {
    Batch(RecordBatch),
    Problem(u64, String),
}

/// Where a range's bytes are: a local file read in bounded positioned reads, or bytes in memory (a
/// Python buffer, a range the JVM read from a Hadoop FileSystem), the first at absolute `base`.
#[derive(Clone, Copy)]
pub enum Src<'a> {
    File(&'a InputFile),
    Bytes { data: &'a [u8], base: u64 },
}

impl Src<'_> {
    fn slice(data: &[u8], base: u64, from: u64, to: u64) -> Result<&[u8]> {
        let (a, b) = (from.checked_sub(base), to.checked_sub(base));
        match (a, b) {
            (Some(a), Some(b)) => data.get(a as usize..b as usize),
            _ => None,
        }
        .ok_or_else(|| Error::invalid(format!("bytes {from}..{to} are not in the buffer")))
    }

    /// Every whole batch of `[from, to)`, with the bytes left after it; the partial tail's position.
    pub fn for_each_frame(
        self,
        from: u64,
        to: u64,
        allow_partial_tail: bool,
        mut each: impl FnMut(&Frame<'_>, usize) -> Result<()>,
    ) -> Result<Option<u64>> {
        match self {
            Src::File(f) => reader::for_each_frame(f, from, to, allow_partial_tail, each),
            Src::Bytes { data, base } => {
                let mut cursor =
                    BatchCursor::new(Src::slice(data, base, from, to)?, from, allow_partial_tail);
                while let Some(frame) = cursor.next()? {
                    each(&frame, (to - cursor.position()) as usize)?;
                }
                Ok(cursor.partial_tail())
            }
        }
    }

    /// The batch headers of `[from, to)`, records never read.
    pub fn headers(self, from: u64, to: u64) -> Result<Vec<BatchHeader>> {
        Ok(match self {
            Src::File(f) => reader::scan_headers_file(f, from, to, false, false)?,
            Src::Bytes { data, base } => {
                scan_headers(Src::slice(data, base, from, to)?, from, false, false)?
            }
        }
        .headers)
    }

    fn batch_index(self, from: u64, to: u64) -> Result<Vec<BatchLocation>> {
        Ok(match self {
            Src::File(f) => reader::batch_index_file(f, from, to, true)?,
            Src::Bytes { data, base } => {
                batch_index(Src::slice(data, base, from, to)?, from, true)?
            }
        }
        .0)
    }
}

/// The record batches of the runs (byte ranges of whole batches, in order) and the last run's
/// partial tail (with `opts.allow_partial_tail`); `decoded` counts the batches decoded.
pub fn decode_runs(
    src: Src<'_>,
    runs: &[(u64, u64)],
    opts: DecodeOptions,
    columns: &[Column],
    decoded: &mut i64,
) -> Result<(Vec<RecordBatch>, Option<u64>)> {
    let mut builder = ArrowBuilder::new(opts, columns);
    let mut tail = None;
    for &(from, to) in runs {
        tail = src.for_each_frame(from, to, opts.allow_partial_tail, |frame, left| {
            *decoded += 1;
            builder.push(frame, left)
        })?;
    }
    let batches = builder.finish(tail)?.batches;
    Ok((
        batches.into_iter().filter(|b| b.num_rows() > 0).collect(),
        tail,
    ))
}

/// `[start, end)` of `src` with its problems (the module's rules); only an error that is not about
/// the bytes (a bad argument) is raised.
pub fn decode_reporting(
    src: Src<'_>,
    start: u64,
    end: u64,
    opts: DecodeOptions,
    columns: &[Column],
    decoded: &mut i64,
) -> Result<VecDeque<Piece>> {
    let opts = DecodeOptions {
        allow_partial_tail: true,
        ..opts
    };
    let mut pieces = VecDeque::new();
    let mut position = start;
    while position < end {
        let failure = match decode_runs(src, &[(position, end)], opts, columns, decoded) {
            Ok((batches, tail)) => {
                pieces.extend(batches.into_iter().map(Piece::Batch));
                if let Some(tail) = tail {
                    let reason = format!("incomplete batch at the end: {} bytes", end - tail);
                    pieces.push_back(Piece::Problem(tail, reason));
                }
                return Ok(pieces);
            }
            Err(Error::Corrupt { position, reason }) => (Some(position), reason),
            Err(Error::Io(e)) => (None, e.to_string()),
            Err(e) => return Err(e),
        };
        let (failed, reason) = match failure {
            (Some(at), reason) if position <= at && at < end => (at, reason),
            (_, reason) => {
                let reason = format!("{reason}; bytes {position}..{end} not decoded");
                pieces.push_back(Piece::Problem(position, reason));
                return Ok(pieces);
            }
        };
        // The whole batches before the failure (the one it falls in, if cut, is a partial tail).
        if let Ok((batches, _)) = decode_runs(src, &[(position, failed)], opts, columns, decoded) {
            pieces.extend(batches.into_iter().map(Piece::Batch));
        }
        let around = src.batch_index(position, end).ok().and_then(|index| {
            index.into_iter().find_map(|b| {
                let until = b.file_position + u64::from(b.size_in_bytes);
                (b.file_position <= failed && failed < until).then_some((b.file_position, until))
            })
        });
        match around {
            None => {
                let reason = format!("{reason}; bytes {failed}..{end} not decoded");
                pieces.push_back(Piece::Problem(failed, reason));
                return Ok(pieces);
            }
            Some((from, until)) => {
                let reason = format!(
                    "{reason}; skipped the batch at {from} ({} bytes)",
                    until - from
                );
                pieces.push_back(Piece::Problem(failed, reason));
                position = until;
            }
        }
    }
    Ok(pieces)
}

/// `[start, end)` of the file at `path` with its problems, the file's own among them: one that does
/// not open, or that ends before `end` (the module's rules).
pub fn decode_file_reporting(
    path: &Path,
    start: u64,
    end: u64,
    opts: DecodeOptions,
    columns: &[Column],
    decoded: &mut i64,
) -> Result<VecDeque<Piece>> {
    let file = match InputFile::open(path) {
        Ok(file) => file,
        Err(e) => {
            let reason = format!("{}; bytes {start}..{end} not decoded", cause(&e));
            return Ok(VecDeque::from([Piece::Problem(start, reason)]));
        }
    };
    let size = file.len();
    if size >= end {
        return decode_reporting(Src::File(&file), start, end, opts, columns, decoded);
    }
    let mut pieces = if start < size {
        decode_reporting(Src::File(&file), start, size, opts, columns, decoded)?
    } else {
        VecDeque::new()
    };
    // A batch cut by the new end is reported as an incomplete tail already.
    if !pieces.iter().any(|p| matches!(p, Piece::Problem(..))) {
        let first = start.max(size);
        let reason = format!(
            "the file ends at byte {size}, shorter than when listed; bytes {first}..{end} not decoded"
        );
        pieces.push_back(Piece::Problem(first, reason));
    }
    Ok(pieces)
}

/// An error's own words: an I/O error's message, without the crate's framing.
fn cause(e: &Error) -> String {
    match e {
        Error::Io(io) => io.to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::encode::{encode_batch, BatchSpec, NewRecord};
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;

    type Row = std::result::Result<i64, (u64, String)>;

    fn opts() -> DecodeOptions {
        DecodeOptions {
            verify_crc: true,
            allow_partial_tail: false,
            max_decompressed_size: 1 << 20,
        }
    }

    /// Offsets of the records, problems in their place.
    fn rows(pieces: &VecDeque<Piece>) -> Vec<Row> {
        let mut out = Vec::new();
        for p in pieces {
            match p {
                Piece::Batch(b) => out.extend(
                    b.column(0)
                        .as_primitive::<Int64Type>()
                        .values()
                        .iter()
                        .map(|o| Ok(*o)),
                ),
                Piece::Problem(at, why) => out.push(Err((*at, why.clone()))),
            }
        }
        out
    }

    /// Three batches of three records (offsets 0-8) and where the 2nd and 3rd start.
    fn segment() -> (Vec<u8>, usize, usize) {
        let mut data = Vec::new();
        let mut starts = Vec::new();
        for b in 0..3i64 {
            starts.push(data.len());
            let value = [b'v'; 20];
            let records: Vec<NewRecord<'_>> = (0..3)
                .map(|_| NewRecord {
                    value: Some(&value),
                    ..NewRecord::default()
                })
                .collect();
            let spec = BatchSpec {
                base_offset: b * 3,
                ..BatchSpec::default()
            };
            data.extend(encode_batch(&spec, &records).unwrap_or_default());
        }
        (data, starts[1], starts[2])
    }

    fn reported(data: &[u8]) -> Result<Vec<Row>> {
        let src = Src::Bytes { data, base: 0 };
        let pieces =
            decode_reporting(src, 0, data.len() as u64, opts(), &[Column::Offset], &mut 0)?;
        Ok(rows(&pieces))
    }

    #[test]
    fn a_bad_batch_is_named_and_skipped_and_a_cut_one_is_incomplete() -> Result<()> {
        let (mut data, second, third) = segment();
        let last = data.len() - 1;
        let inside_third = last - (data.len() - third) / 2;
        data[inside_third] ^= 1; // inside the third batch's records: its CRC
        data[second + 70] ^= 1; // and the second's
        data.extend_from_within(..30);
        let got = reported(&data)?;
        assert_eq!(got[..3], [Ok(0), Ok(1), Ok(2)]);
        let Err((at, why)) = &got[3] else {
            panic!("{got:?}")
        };
        assert_eq!(*at, second as u64);
        assert!(why.starts_with("CRC mismatch"), "{why}");
        assert!(why.ends_with(&format!(
            "skipped the batch at {second} ({} bytes)",
            third - second
        )));
        let Err((at, why)) = &got[4] else {
            panic!("{got:?}")
        };
        assert!(
            *at == third as u64
                && why.ends_with(&format!(
                    "skipped the batch at {third} ({} bytes)",
                    last + 1 - third
                ))
        );
        assert_eq!(
            got[5],
            Err((
                (last + 1) as u64,
                "incomplete batch at the end: 30 bytes".to_owned()
            ))
        );
        assert_eq!(got.len(), 6);
        Ok(())
    }

    #[test]
    fn broken_headers_leave_the_rest_undecoded() -> Result<()> {
        let (mut data, second, _) = segment();
        data[second + 8..second + 12].copy_from_slice(&(-5i32).to_be_bytes()); // its length
        let got = reported(&data)?;
        assert_eq!(got[..3], [Ok(0), Ok(1), Ok(2)]);
        let Err((at, why)) = &got[3] else {
            panic!("{got:?}")
        };
        assert!(
            *at == second as u64
                && why.ends_with(&format!("bytes {second}..{} not decoded", data.len())),
            "{why}"
        );
        assert_eq!(got.len(), 4);
        Ok(())
    }

    #[test]
    fn a_file_shorter_than_listed_or_missing_is_reported() -> Result<()> {
        let (data, second, third) = segment();
        let dir = std::env::temp_dir().join(format!("eg-reporting-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("00000000000000000000.log");
        let listed = data.len() as u64;
        let read = |path: &Path| -> Result<Vec<Row>> {
            let pieces = decode_file_reporting(path, 0, listed, opts(), &[Column::Offset], &mut 0)?;
            Ok(rows(&pieces))
        };
        std::fs::write(&path, &data[..third])?; // truncated at a batch boundary
        let got = read(&path)?;
        assert_eq!(got[..6], [Ok(0), Ok(1), Ok(2), Ok(3), Ok(4), Ok(5)]);
        let why = format!("the file ends at byte {third}, shorter than when listed; bytes {third}..{listed} not decoded");
        assert_eq!(got[6..], [Err((third as u64, why))]);
        std::fs::write(&path, &data[..second + 10])?; // inside a batch: that one is incomplete
        let got = read(&path)?;
        assert_eq!(
            got[3..],
            [Err((
                second as u64,
                "incomplete batch at the end: 10 bytes".to_owned()
            ))]
        );
        std::fs::remove_file(&path)?;
        let got = read(&path)?;
        assert!(
            matches!(&got[..], [Err((0, why))] if why.ends_with(&format!("; bytes 0..{listed} not decoded")))
        );
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}

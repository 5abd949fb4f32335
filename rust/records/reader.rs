//! Batches read from a file in bounded positioned reads (see [`crate::file::InputFile`]): the same
//! frames, errors and partial tails as the in-memory cursor over the same bytes, in memory bounded by
//! [`READ_BYTES`] or the largest batch, and safe against a file that shrinks while it is read.

use super::arrow::{ArrowBuilder, ArrowDecoded, Column, Layout};
use super::batch::{
    i32_at, parse_header, verify_crc, BatchCursor, Frame, Parsed, LOG_OVERHEAD, V2_HEADER_SIZE,
};
use super::headers::HeaderScan;
use super::{BatchLocation, DecodeOptions};
use crate::file::InputFile;
use crate::{Error, Result};

/// Bytes asked for per read; a larger batch gets one read of its own size.
pub const READ_BYTES: usize = 8 << 20;

/// The error for a file found shorter at `at` than the `end` it had when opened.
pub fn shrunk(at: u64, end: u64) -> Error {
    Error::corrupt(
        at,
        format!("the file ends at byte {at}, before byte {end} it had when opened (truncated or deleted while being read)"),
    )
}

/// Call `each(frame, input_left)` for every batch in bytes `[start, end)` of `file`; returns the
/// position of a tolerated incomplete last batch. A file found shorter than `end` ends the input
/// there: a partial tail with `allow_partial_tail`, else a `Corrupt` error at the new end.
pub fn for_each_frame(
    file: &InputFile,
    start: u64,
    end: u64,
    allow_partial_tail: bool,
    each: impl FnMut(&Frame<'_>, usize) -> Result<()>,
) -> Result<Option<u64>> {
    frames_in_reads_of(
        READ_BYTES,
        file,
        start,
        end,
        allow_partial_tail,
        false,
        each,
    )
}

fn frames_in_reads_of(
    read_bytes: usize,
    file: &InputFile,
    start: u64,
    end: u64,
    allow_partial_tail: bool,
    crc_first: bool,
    mut each: impl FnMut(&Frame<'_>, usize) -> Result<()>,
) -> Result<Option<u64>> {
    let mut buf: Vec<u8> = Vec::new();
    let (mut pos, mut need) = (start, 0usize);
    while pos < end {
        let want = usize::try_from(end - pos)
            .unwrap_or(usize::MAX)
            .min(read_bytes.max(need));
        if buf.len() < want {
            buf.resize(want, 0);
        }
        let got = file.read_at(pos, buf.get_mut(..want).unwrap_or_default())?;
        let data = buf.get(..got).unwrap_or_default();
        let short = got < want;
        let last = short || pos + got as u64 == end;
        let mut cursor =
            BatchCursor::new(data, pos, allow_partial_tail || !last).crc_first(crc_first);
        while let Some(frame) = cursor.next().map_err(|e| match e {
            Error::Corrupt { position, reason } if short => Error::corrupt(
                position,
                format!("{reason}; {}", shrunk(pos + got as u64, end)),
            ),
            e => e,
        })? {
            each(&frame, (end - cursor.position()) as usize)?;
        }
        match cursor.partial_tail() {
            Some(tail) if last => return Ok(Some(tail)),
            Some(tail) => {
                // An incomplete batch at the end of the buffer: read again from it, whole.
                let rest = data.get((tail - pos) as usize..).unwrap_or_default();
                need = i32_at(rest, 8).map_or(LOG_OVERHEAD, |l| LOG_OVERHEAD + l.max(0) as usize);
                pos = tail;
            }
            None if short => {
                let at = pos + got as u64;
                return match allow_partial_tail {
                    true => Ok(Some(at)),
                    false => Err(shrunk(at, end)),
                };
            }
            None => {
                pos += got as u64;
                need = 0;
            }
        }
    }
    Ok(None)
}

/// [`super::arrow::decode_projected`] over bytes `[start, end)` of a file.
pub fn decode_file(
    file: &InputFile,
    start: u64,
    end: u64,
    opts: DecodeOptions,
    columns: &[Column],
    layout: Layout,
) -> Result<ArrowDecoded> {
    // Views of compressed values point into the chunk's decompression buffer; the file's own bytes
    // are read into a reused buffer, so uncompressed values are copied in either layout.
    let mut builder = ArrowBuilder::with_layout(opts, columns, layout, None);
    let each = |frame: &Frame<'_>, left| builder.push(frame, left);
    let tail = frames_in_reads_of(
        READ_BYTES,
        file,
        start,
        end,
        opts.allow_partial_tail,
        opts.verify_crc,
        each,
    )?;
    builder.finish(tail)
}

/// [`super::batch_index`] over bytes `[start, end)` of a file.
pub fn batch_index_file(
    file: &InputFile,
    start: u64,
    end: u64,
    allow_partial_tail: bool,
) -> Result<(Vec<BatchLocation>, Option<u64>)> {
    let mut out = Vec::new();
    let tail = for_each_frame(file, start, end, allow_partial_tail, |frame, _| {
        out.push(BatchLocation::of(&frame.header));
        Ok(())
    })?;
    Ok((out, tail))
}

/// [`super::headers::scan_headers`] over bytes `[start, end)` of a file. Without `verify`, one
/// positioned read of at most [`V2_HEADER_SIZE`] bytes per batch, then a seek past its records: the
/// cost grows with the number of batches, not with their bytes. With `verify`, batches are read
/// whole (in [`READ_BYTES`] reads, as the decoder does) for their CRC, and never decompressed.
/// A file found shorter than `end` where a header is read ends the input there, as for the decoder.
pub fn scan_headers_file(
    file: &InputFile,
    start: u64,
    end: u64,
    verify: bool,
    allow_partial_tail: bool,
) -> Result<HeaderScan> {
    let mut headers = Vec::new();
    if verify {
        let partial_tail = for_each_frame(file, start, end, allow_partial_tail, |frame, _| {
            verify_crc(frame)?;
            headers.push(frame.header);
            Ok(())
        })?;
        return Ok(HeaderScan {
            headers,
            partial_tail,
        });
    }
    let mut head = [0u8; V2_HEADER_SIZE];
    let mut pos = start;
    while pos < end {
        let available = end - pos;
        let want = usize::try_from(available).map_or(V2_HEADER_SIZE, |a| a.min(V2_HEADER_SIZE));
        let got = file.read_at(pos, head.get_mut(..want).unwrap_or_default())?;
        if got < want {
            // The file ends before the bytes it had when opened: inside this batch's header.
            return match allow_partial_tail {
                true => Ok(HeaderScan {
                    headers,
                    partial_tail: Some(pos),
                }),
                false => Err(shrunk(pos + got as u64, end)),
            };
        }
        let parsed = parse_header(head.get(..got).unwrap_or_default(), pos, available)?;
        match parsed {
            Parsed::Header(header) => {
                pos += u64::from(header.size_in_bytes);
                headers.push(header);
            }
            Parsed::Incomplete(_) if allow_partial_tail => {
                return Ok(HeaderScan {
                    headers,
                    partial_tail: Some(pos),
                })
            }
            Parsed::Incomplete(what) => {
                return Err(Error::corrupt(
                    pos,
                    format!("{what} (a partial batch at the end of the input)"),
                ))
            }
        }
    }
    Ok(HeaderScan {
        headers,
        partial_tail: None,
    })
}

/// The bytes of the batch at `pos` (all of them, or what is left of `[pos, end)` when it is cut
/// short), for decoding one batch at a time.
pub fn read_frame_bytes(file: &InputFile, pos: u64, end: u64) -> Result<Vec<u8>> {
    let left = usize::try_from(end.saturating_sub(pos)).unwrap_or(usize::MAX);
    let mut head = [0u8; LOG_OVERHEAD];
    let got = file.read_at(
        pos,
        head.get_mut(..left.min(LOG_OVERHEAD)).unwrap_or_default(),
    )?;
    let size = match i32_at(&head, 8) {
        Some(length) if got == LOG_OVERHEAD => LOG_OVERHEAD + length.max(0) as usize,
        _ => got,
    };
    let mut bytes = vec![0u8; size.min(left)];
    let got = file.read_at(pos, &mut bytes)?;
    bytes.truncate(got);
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::records::{batch_index, encode_batch, BatchSpec, NewRecord};

    fn segment() -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..20i64 {
            let value = vec![b'v'; 10 * i as usize];
            let records = vec![NewRecord {
                value: Some(&value),
                ..NewRecord::default()
            }];
            let spec = BatchSpec {
                base_offset: i,
                ..BatchSpec::default()
            };
            out.extend(encode_batch(&spec, &records).unwrap_or_default());
        }
        out
    }

    fn file_of(bytes: &[u8]) -> (tempfile::NamedTempFile, InputFile) {
        let mut tmp = tempfile::NamedTempFile::new().unwrap_or_else(|e| panic!("{e}"));
        tmp.write_all(bytes).unwrap_or_else(|e| panic!("{e}"));
        let file = InputFile::open(tmp.path()).unwrap_or_else(|e| panic!("{e}"));
        (tmp, file)
    }

    fn index(
        read_bytes: usize,
        file: &InputFile,
        end: u64,
        allow: bool,
    ) -> Result<(Vec<u64>, Option<u64>)> {
        let mut out = Vec::new();
        let tail = frames_in_reads_of(read_bytes, file, 0, end, allow, false, |f, _| {
            out.push(f.header.file_position);
            Ok(())
        })?;
        Ok((out, tail))
    }

    #[test]
    fn any_read_size_cuts_the_same_batches_as_the_slice_cursor() {
        let data = segment();
        let mut cut = data.clone();
        cut.truncate(data.len() - 7); // an incomplete last batch
        for bytes in [&data, &cut] {
            let (_tmp, file) = file_of(bytes);
            let (want, want_tail) = batch_index(bytes, 0, true).unwrap_or_default();
            let want: Vec<u64> = want.iter().map(|l| l.file_position).collect();
            for read_bytes in [1, 13, 61, 100, 333, 1 << 20] {
                let got = index(read_bytes, &file, bytes.len() as u64, true);
                assert_eq!(got.ok(), Some((want.clone(), want_tail)), "{read_bytes}");
            }
            let strict = index(61, &file, bytes.len() as u64, false);
            assert_eq!(strict.is_err(), want_tail.is_some());
        }
    }

    #[test]
    fn the_header_pass_over_a_file_matches_the_cursor_with_and_without_crc() {
        let data = segment();
        let mut cut = data.clone();
        cut.truncate(data.len() - 7);
        for bytes in [&data, &cut] {
            let (_tmp, file) = file_of(bytes);
            let want = crate::records::headers::scan_headers(bytes, 0, true, true);
            let want = want.unwrap_or_default();
            assert_eq!(
                want.headers.len(),
                20 - usize::from(bytes.len() < data.len())
            );
            for verify in [false, true] {
                let got = scan_headers_file(&file, 0, bytes.len() as u64, verify, true);
                assert_eq!(got.ok().as_ref(), Some(&want), "{verify}");
                let strict = scan_headers_file(&file, 0, bytes.len() as u64, verify, false);
                assert_eq!(strict.is_err(), want.partial_tail.is_some());
            }
        }
    }

    #[test]
    fn the_header_pass_reports_a_file_that_shrank_under_it() {
        let data = segment();
        let (tmp, file) = file_of(&data);
        let (all, _) = batch_index(&data, 0, false).unwrap_or_default();
        let cut = all.get(5).map_or(0, |l| l.file_position) + 30; // inside the sixth header
        std::fs::OpenOptions::new()
            .write(true)
            .open(tmp.path())
            .and_then(|f| f.set_len(cut))
            .unwrap_or_else(|e| panic!("{e}"));
        let end = data.len() as u64;
        let scan = scan_headers_file(&file, 0, end, false, true).unwrap_or_default();
        assert_eq!(scan.headers.len(), 5);
        assert_eq!(scan.partial_tail, all.get(5).map(|l| l.file_position));
        match scan_headers_file(&file, 0, end, false, false) {
            Err(Error::Corrupt { position, reason }) => {
                assert_eq!(position, cut);
                assert!(reason.contains("truncated"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_file_shorter_than_when_opened_is_an_error_or_a_partial_tail() {
        let data = segment();
        let (tmp, file) = file_of(&data);
        let (all, _) = batch_index(&data, 0, false).unwrap_or_default();
        let third = all.get(3).map_or(0, |l| l.file_position);
        std::fs::OpenOptions::new()
            .write(true)
            .open(tmp.path())
            .and_then(|f| f.set_len(third))
            .unwrap_or_else(|e| panic!("{e}"));
        let end = data.len() as u64;
        let (kept, tail) = index(100, &file, end, true).unwrap_or_default();
        assert_eq!((kept.len(), tail), (3, Some(third)));
        match index(100, &file, end, false) {
            Err(Error::Corrupt { position, reason }) => {
                assert_eq!(position, third);
                assert!(reason.contains("truncated"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
}

//! The five codecs of the attributes' low 3 bits, decoding into a caller-owned buffer that never
//! grows past a cap. Sizes claimed inside compressed data are never trusted for allocation: output
//! is streamed into a buffer grown step by step up to the cap, and one byte past the cap is an error.
//! lz4 and zstd write into the buffer's uninitialised spare capacity (their raw APIs take a pointer
//! and a capacity and report the bytes written), so their output is written once, never zero-filled
//! first; gzip and snappy write into zero-filled slices.

use std::ffi::{c_char, c_int};
use std::io::{self, Read, Write};

/// Compression codec id (attributes & 0x07).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
    Zstd = 4,
}

impl Compression {
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// The codec for an attributes value; `None` for the unassigned ids 5..=7.
    pub fn from_attributes(attributes: i16) -> Option<Compression> {
        match attributes & 0x07 {
            0 => Some(Compression::None),
            1 => Some(Compression::Gzip),
            2 => Some(Compression::Snappy),
            3 => Some(Compression::Lz4),
            4 => Some(Compression::Zstd),
            _ => None,
        }
    }

    /// Kafka's name for the codec (`compression.type`).
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    pub fn from_name(name: &str) -> Option<Compression> {
        Compression::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// Why a payload could not be decompressed.
#[derive(Debug)]
pub enum DecompressError {
    /// Output would exceed the cap (a decompression bomb or a cap set too low).
    TooLarge { cap: usize },
    /// The codec rejected the data.
    Invalid(String),
}

impl DecompressError {
    pub fn reason(&self, codec: Compression) -> String {
        match self {
            DecompressError::TooLarge { cap } => {
                format!(
                    "{} payload decompresses to more than max_decompressed_size ({cap} bytes)",
                    codec.name()
                )
            }
            DecompressError::Invalid(msg) => format!("invalid {} data: {msg}", codec.name()),
        }
    }
}

fn invalid(e: impl std::fmt::Display) -> DecompressError {
    DecompressError::Invalid(e.to_string())
}

/// xerial snappy-java's stream header (`SnappyOutputStream`, Kafka's Java client): magic, version, compat.
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;
const XERIAL_BLOCK: usize = 32 * 1024;
const LZ4_MAGIC: u32 = 0x184D_2204;
const LZ4_SKIPPABLE: std::ops::RangeInclusive<u32> = 0x184D_2A50..=0x184D_2A5F;

/// Decompresses batch payloads into one buffer reused across batches (and a reused zstd context).
///
/// The buffer's capacity only grows, to the largest output seen, never past the cap; sizes claimed
/// inside compressed data are never used to allocate.
#[derive(Default)]
pub struct Decompressor {
    /// The last output (its capacity kept for the next).
    buf: Vec<u8>,
    zstd: Option<zstd::zstd_safe::DCtx<'static>>,
}

impl std::fmt::Debug for Decompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decompressor")
            .field("capacity", &self.buf.capacity())
            .field("len", &self.buf.len())
            .finish()
    }
}

/// How far ahead of the writes gzip's and snappy's output is zero-filled (about an L2 cache's worth).
const GROW_STEP: usize = 256 * 1024;

/// Grow `buf` so that it holds at least `need` initialised bytes (`need <= cap`), geometrically but
/// within `cap`. Within the capacity already reserved (an appended output), in steps of
/// [`GROW_STEP`]: no reallocation, and the zero-fill stays just ahead of the writes, in cache when
/// they come. (For gzip and snappy, which write into initialised slices; the caller truncates
/// `buf` back to the output's end.)
fn grow(buf: &mut Vec<u8>, need: usize, cap: usize) {
    if buf.len() < need {
        let target = if need <= buf.capacity() {
            need.max(buf.len().saturating_add(GROW_STEP))
                .min(buf.capacity())
                .min(cap.max(need))
        } else {
            need.max(buf.len().saturating_mul(2))
                .max(64 * 1024)
                .min(cap.max(need))
        };
        buf.resize(target, 0);
    }
}

impl Decompressor {
    pub fn new() -> Self {
        Decompressor::default()
    }

    /// The last output.
    pub fn output(&self) -> &[u8] {
        &self.buf
    }

    /// Decompress `input`, writing at most `cap` bytes; returns the output.
    ///
    /// `lz4_legacy_checksum`: accept the frame-descriptor checksum Kafka 0.8 (magic 0) computed
    /// wrongly over the magic number too; Kafka skips that check for magic 0 (`KafkaLZ4BlockInputStream`).
    pub fn decompress(
        &mut self,
        codec: Compression,
        input: &[u8],
        cap: usize,
        lz4_legacy_checksum: bool,
    ) -> Result<&[u8], DecompressError> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let mut out = Appended { buf };
        let result = self.decompress_append(codec, input, cap, lz4_legacy_checksum, &mut out);
        self.buf = out.buf;
        result?;
        Ok(self.output())
    }

    /// Decompress `input` after the `out.len()` bytes `out` already holds, writing at most `cap`
    /// bytes; returns where the output lies in `out`. On error `out` is as it was. The output is
    /// never copied: the caller may hand `out` over whole (an Arrow data buffer whose views point
    /// into it).
    pub fn decompress_append(
        &mut self,
        codec: Compression,
        input: &[u8],
        cap: usize,
        lz4_legacy_checksum: bool,
        out: &mut Appended,
    ) -> Result<std::ops::Range<usize>, DecompressError> {
        let start = out.buf.len();
        let limit = Limit {
            start,
            end: start.saturating_add(cap),
            cap,
        };
        let buf = &mut out.buf;
        let end = match codec {
            Compression::None => {
                if input.len() > cap {
                    return Err(DecompressError::TooLarge { cap });
                }
                buf.extend_from_slice(input);
                Ok(buf.len())
            }
            Compression::Gzip => read_capped(buf, flate2::read::MultiGzDecoder::new(input), limit),
            Compression::Snappy => snappy(buf, input, limit),
            Compression::Lz4 => lz4_frames(buf, input, limit, lz4_legacy_checksum),
            Compression::Zstd => {
                let dctx = self.zstd.get_or_insert_with(zstd::zstd_safe::DCtx::create);
                zstd_stream(buf, dctx, input, limit)
            }
        };
        // The output ends at `end`: scratch past it (zero-filled ahead for gzip and snappy) and
        // a failed decompression's partial output are cut off.
        buf.truncate(*end.as_ref().unwrap_or(&start));
        let end = end?;
        Ok(start..end)
    }
}

/// Decompressed output appended batch after batch: `buf` holds it; its spare capacity is what the
/// next batch is decompressed into (reserve it ahead to keep the output from being reallocated).
#[derive(Debug, Default)]
pub struct Appended {
    pub buf: Vec<u8>,
}

impl Appended {
    /// The output so far.
    pub fn output(&self) -> &[u8] {
        &self.buf
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Hand over the output (without a copy), leaving an empty buffer.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}

/// Where one decompression may write: from `start` (bytes before it belong to earlier output) to
/// `end` = `start + cap` (`cap` as the caller set it, for the error).
#[derive(Debug, Clone, Copy)]
struct Limit {
    start: usize,
    end: usize,
    cap: usize,
}

impl Limit {
    fn too_large(self) -> DecompressError {
        DecompressError::TooLarge { cap: self.cap }
    }
}

/// Stream `reader` into `buf` from `limit.start`, growing it up to `limit.end`; one byte more is
/// `TooLarge`. Returns the end of the output.
fn read_capped<R: Read>(
    buf: &mut Vec<u8>,
    mut reader: R,
    limit: Limit,
) -> Result<usize, DecompressError> {
    let cap = limit.end;
    let mut filled = limit.start;
    loop {
        if filled >= buf.len().min(cap) {
            if filled >= cap {
                let mut probe = [0u8; 1];
                return match read_some(&mut reader, &mut probe)? {
                    0 => Ok(filled),
                    _ => Err(limit.too_large()),
                };
            }
            grow(buf, filled + 1, cap);
        }
        let end = buf.len().min(cap);
        let Some(spare) = buf.get_mut(filled..end) else {
            return Ok(filled);
        };
        match read_some(&mut reader, spare)? {
            0 => return Ok(filled),
            n => filled += n,
        }
    }
}

fn read_some<R: Read>(reader: &mut R, buf: &mut [u8]) -> Result<usize, DecompressError> {
    loop {
        match reader.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(invalid(e)),
        }
    }
}

/// zstd frames (one or more) streamed straight into `buf`'s spare capacity after its `limit.start`
/// bytes (zstd-safe's `OutBuffer` over a `Vec` sets its length to what zstd reports written);
/// returns the end.
fn zstd_stream(
    buf: &mut Vec<u8>,
    dctx: &mut zstd::zstd_safe::DCtx<'static>,
    input: &[u8],
    limit: Limit,
) -> Result<usize, DecompressError> {
    let cap = limit.end;
    use zstd::zstd_safe::{get_error_name, InBuffer, OutBuffer, ResetDirective};
    let zerr = |code: usize| invalid(get_error_name(code));
    dctx.reset(ResetDirective::SessionOnly).map_err(zerr)?;
    let mut src = InBuffer::around(input);
    let mut filled = limit.start;
    loop {
        let before = (src.pos(), filled);
        let finished_frame = if filled >= cap && buf.capacity() <= filled {
            // At the cap: one more byte of output means the payload is too large.
            let mut probe = [0u8; 1];
            let mut dst = OutBuffer::around(&mut probe[..]);
            let hint = dctx.decompress_stream(&mut dst, &mut src).map_err(zerr)?;
            if dst.pos() > 0 {
                return Err(limit.too_large());
            }
            hint == 0
        } else {
            if buf.capacity() <= filled {
                // Full: room for about the payload's expansion, never past the cap.
                let room = input.len().saturating_mul(4).max(64 << 10);
                buf.reserve(room.min(cap - filled));
            }
            let mut dst = OutBuffer::around_pos(&mut *buf, filled);
            let hint = dctx.decompress_stream(&mut dst, &mut src).map_err(zerr)?;
            filled = dst.pos();
            // Capacity reserved earlier (a reused buffer) may lie past the cap.
            if filled > cap {
                return Err(limit.too_large());
            }
            hint == 0
        };
        if finished_frame && src.pos() == input.len() {
            return Ok(filled);
        }
        // Input left or a frame unfinished, yet no byte moved although there was room: the
        // stream is truncated (or stalled); stop rather than spin.
        if before == (src.pos(), filled) {
            return Err(invalid("truncated zstd frame"));
        }
    }
}

/// Raw snappy, or the xerial framing (header, then big-endian length + raw block, repeated), into
/// `buf` from `limit.start`; returns the end.
fn snappy(buf: &mut Vec<u8>, input: &[u8], limit: Limit) -> Result<usize, DecompressError> {
    let cap = limit.end;
    let mut decoder = snap::raw::Decoder::new();
    let mut filled = limit.start;
    let mut append_block = |block: &[u8], buf: &mut Vec<u8>| -> Result<(), DecompressError> {
        let len = snap::raw::decompress_len(block).map_err(invalid)?;
        // A snappy element expands at most 64 bytes from 3 (a 2-byte-offset copy): a larger
        // claim is a lie, rejected before it sizes the buffer.
        if len > block.len().saturating_mul(22) {
            return Err(invalid(format!(
                "claims {len} bytes from a {}-byte block",
                block.len()
            )));
        }
        if len > cap - filled {
            return Err(limit.too_large());
        }
        grow(buf, filled + len, cap);
        let dst = buf.get_mut(filled..filled + len).unwrap_or_default();
        filled += decoder.decompress(block, dst).map_err(invalid)?;
        Ok(())
    };
    match input.strip_prefix(XERIAL_MAGIC.as_slice()) {
        None => append_block(input, buf)?,
        Some(rest) => {
            let mut rest = rest
                .get(XERIAL_HEADER_LEN - XERIAL_MAGIC.len()..)
                .ok_or_else(|| invalid("truncated xerial header"))?;
            while !rest.is_empty() {
                let (len, tail) = rest
                    .split_first_chunk::<4>()
                    .ok_or_else(|| invalid("truncated xerial block length"))?;
                let len = u32::from_be_bytes(*len) as usize;
                let block = tail
                    .get(..len)
                    .ok_or_else(|| invalid("xerial block runs past the end of the payload"))?;
                append_block(block, buf)?;
                rest = tail.get(len..).unwrap_or_default();
            }
        }
    }
    Ok(filled)
}

fn xxh32(data: &[u8]) -> u32 {
    twox_hash::XxHash32::oneshot(0, data)
}

/// LZ4 frames (several may follow each other; skippable frames are skipped) parsed here, every block
/// decoded by liblz4 straight into `buf`'s spare capacity. Kafka writes independent blocks; linked ones (other
/// writers' default) decode the same way, their matches reaching back into the frame's output.
fn lz4_frames(
    buf: &mut Vec<u8>,
    input: &[u8],
    limit: Limit,
    legacy: bool,
) -> Result<usize, DecompressError> {
    let cap = limit.end;
    let truncated = || invalid("truncated LZ4 frame");
    let mut rest = input;
    let mut filled = limit.start;
    if rest.is_empty() {
        return Err(invalid("empty LZ4 payload"));
    }
    while !rest.is_empty() {
        let (magic, tail) = rest.split_first_chunk::<4>().ok_or_else(truncated)?;
        let magic = u32::from_le_bytes(*magic);
        if LZ4_SKIPPABLE.contains(&magic) {
            let (len, tail) = tail.split_first_chunk::<4>().ok_or_else(truncated)?;
            rest = tail
                .get(u32::from_le_bytes(*len) as usize..)
                .ok_or_else(truncated)?;
            continue;
        }
        if magic != LZ4_MAGIC {
            return Err(invalid(format!("bad LZ4 frame magic {magic:#010x}")));
        }
        let (&[flg, bd], _) = tail.split_first_chunk::<2>().ok_or_else(truncated)?;
        if flg >> 6 != 1 || flg & 0x02 != 0 || bd & 0x8f != 0 {
            return Err(invalid(
                "unsupported LZ4 frame version or reserved bits set",
            ));
        }
        if flg & 0x01 != 0 {
            return Err(invalid("LZ4 dictionaries are not supported"));
        }
        let linked = flg & 0x20 == 0;
        let block_checksums = flg & 0x10 != 0;
        let content_checksum = flg & 0x04 != 0;
        let max_block = match (bd >> 4) & 0x07 {
            4 => 64 << 10,
            5 => 256 << 10,
            6 => 1 << 20,
            7 => 4 << 20,
            other => return Err(invalid(format!("unsupported LZ4 block size id {other}"))),
        };
        let hc_at = 2 + if flg & 0x08 != 0 { 8 } else { 0 };
        let descriptor = tail.get(..hc_at).ok_or_else(truncated)?;
        let stored_hc = *tail.get(hc_at).ok_or_else(truncated)?;
        if !legacy && stored_hc != (xxh32(descriptor) >> 8) as u8 {
            return Err(invalid("LZ4 frame header checksum mismatch"));
        }
        rest = tail.get(hc_at + 1..).ok_or_else(truncated)?;
        let frame_start = filled;
        loop {
            let (word, tail) = rest.split_first_chunk::<4>().ok_or_else(truncated)?;
            let word = u32::from_le_bytes(*word);
            rest = tail;
            if word == 0 {
                break; // end mark
            }
            let size = (word & 0x7fff_ffff) as usize;
            if size > max_block {
                return Err(invalid(format!(
                    "LZ4 block of {size} bytes exceeds the frame's block size {max_block}"
                )));
            }
            let block = rest.get(..size).ok_or_else(truncated)?;
            rest = rest.get(size..).ok_or_else(truncated)?;
            if block_checksums {
                let (sum, tail) = rest.split_first_chunk::<4>().ok_or_else(truncated)?;
                if u32::from_le_bytes(*sum) != xxh32(block) {
                    return Err(invalid("LZ4 block checksum mismatch"));
                }
                rest = tail;
            }
            if word & 0x8000_0000 != 0 {
                if size > cap - filled {
                    return Err(limit.too_large());
                }
                buf.extend_from_slice(block);
                filled += size;
            } else {
                let history = if linked {
                    (filled - frame_start).min(LZ4_WINDOW)
                } else {
                    0
                };
                let room = max_block.min(cap - filled);
                buf.reserve(room);
                match lz4_block(block, buf, history, room) {
                    Some(n) => filled += n,
                    None if room < max_block && lz4_block_fits(block, buf, history, max_block) => {
                        return Err(limit.too_large())
                    }
                    None => return Err(invalid("corrupt LZ4 block")),
                }
            }
        }
        if content_checksum {
            let (sum, tail) = rest.split_first_chunk::<4>().ok_or_else(truncated)?;
            if u32::from_le_bytes(*sum) != xxh32(buf.get(frame_start..filled).unwrap_or_default()) {
                return Err(invalid("LZ4 content checksum mismatch"));
            }
            rest = tail;
        }
    }
    Ok(filled)
}

/// How far back an LZ4 match can reach.
const LZ4_WINDOW: usize = 64 << 10;

// liblz4's stable block API (lz4.h), compiled into the `lz4-sys` crate, which does not bind this
// one function: the one-shot decoder that takes the preceding output as history.
extern "C" {
    fn LZ4_decompress_safe_usingDict(
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
        dict_start: *const c_char,
        dict_size: c_int,
    ) -> c_int;
}

/// Decode one LZ4 block into `buf`'s spare capacity, at most `room` bytes, its matches free to reach
/// back into the last `history` bytes of `buf` (a linked block's preceding output; 0 for independent
/// blocks); `buf`'s length then covers the bytes written. `None`: the block is corrupt or its
/// output does not fit (`buf` unchanged).
fn lz4_block(block: &[u8], buf: &mut Vec<u8>, history: usize, room: usize) -> Option<usize> {
    let filled = buf.len();
    if history > filled || buf.capacity() - filled < room {
        return None;
    }
    let src_size = c_int::try_from(block.len()).ok()?;
    let dst_capacity = c_int::try_from(room).ok()?;
    let dict_size = c_int::try_from(history).ok()?;
    let start = buf.as_mut_ptr();
    // SAFETY: liblz4 reads `src_size` bytes at `block`, reads at most the `dict_size` bytes that
    // precede `dst` (its documented prefix mode: the history ends where `dst` starts), which are
    // `buf`'s last `history` initialised bytes (`history <= filled` checked above), and writes at
    // most `dst_capacity` bytes from `dst` = `buf`'s end, inside its spare capacity (`room` bytes
    // of it checked above); it keeps no pointer. It returns the bytes written, or a negative
    // number for corrupt input or output that does not fit, having then written nothing we keep.
    let n = unsafe {
        LZ4_decompress_safe_usingDict(
            block.as_ptr().cast(),
            start.add(filled).cast(),
            src_size,
            dst_capacity,
            start.add(filled - history).cast_const().cast(),
            dict_size,
        )
    };
    let n = usize::try_from(n).ok().filter(|&n| n <= room)?;
    // SAFETY: liblz4 initialised the `n <= room` bytes after `filled`, within the capacity.
    unsafe { buf.set_len(filled + n) };
    Some(n)
}

/// Whether a block that failed to decode into the room left under the cap decodes into a whole
/// `max_block` (so the cap, not the data, was at fault). Only on that error path: a scratch copy of
/// the history plus at most 4 MiB, the largest LZ4 block.
fn lz4_block_fits(block: &[u8], buf: &[u8], history: usize, max_block: usize) -> bool {
    let mut scratch = Vec::with_capacity(history + max_block);
    scratch.extend_from_slice(buf.get(buf.len() - history..).unwrap_or_default());
    lz4_block(block, &mut scratch, history, max_block).is_some()
}

/// Compress `input` with `codec` the way Kafka's Java producer does (gzip default level, xerial
/// snappy framing in 32 KiB blocks, LZ4 frames of independent 64 KiB blocks, zstd level 3).
pub fn compress(codec: Compression, input: &[u8]) -> io::Result<Vec<u8>> {
    match codec {
        Compression::None => Ok(input.to_vec()),
        Compression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            enc.write_all(input)?;
            enc.finish()
        }
        Compression::Snappy => {
            let mut out =
                Vec::with_capacity(XERIAL_HEADER_LEN + snap::raw::max_compress_len(input.len()));
            out.extend_from_slice(XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes()); // version
            out.extend_from_slice(&1i32.to_be_bytes()); // minimum compatible version
            let mut encoder = snap::raw::Encoder::new();
            for chunk in input.chunks(XERIAL_BLOCK) {
                let block = encoder.compress_vec(chunk).map_err(io::Error::other)?;
                out.extend_from_slice(&(block.len() as u32).to_be_bytes());
                out.extend_from_slice(&block);
            }
            Ok(out)
        }
        Compression::Lz4 => {
            let mut enc = lz4::EncoderBuilder::new()
                .block_size(lz4::BlockSize::Max64KB)
                .block_mode(lz4::BlockMode::Independent)
                .block_checksum(lz4::liblz4::BlockChecksum::NoBlockChecksum)
                .checksum(lz4::ContentChecksum::NoChecksum)
                .build(Vec::with_capacity(input.len() / 2 + 64))?;
            enc.write_all(input)?;
            let (out, finished) = enc.finish();
            finished.map(|()| out)
        }
        Compression::Zstd => zstd::bulk::compress(input, 3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_round_trips() {
        let data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for codec in Compression::ALL {
            let packed = compress(codec, &data).map_err(|e| e.to_string());
            let mut out = Decompressor::new();
            assert!(packed.is_ok(), "{codec:?}");
            let packed = packed.unwrap_or_default();
            assert_eq!(
                out.decompress(codec, &packed, data.len(), false).ok(),
                Some(data.as_slice()),
                "{codec:?}"
            );
            let capped = out.decompress(codec, &packed, data.len() - 1, false);
            assert!(
                matches!(capped, Err(DecompressError::TooLarge { .. })),
                "{codec:?}"
            );
        }
    }

    /// Linked 64 KiB blocks of data that repeats with a 100 KiB period: matches cross blocks.
    fn lz4_linked(data: &[u8]) -> Vec<u8> {
        let enc = lz4::EncoderBuilder::new()
            .block_size(lz4::BlockSize::Max64KB)
            .block_mode(lz4::BlockMode::Linked)
            .build(Vec::new());
        let Ok(mut enc) = enc else { return Vec::new() };
        assert!(enc.write_all(data).is_ok());
        let (out, finished) = enc.finish();
        assert!(finished.is_ok());
        out
    }

    #[test]
    fn lz4_linked_blocks_use_the_frames_history() {
        let period: Vec<u8> = (0..100_000u32).map(|i| (i * 7919 % 251) as u8).collect();
        let data = period.repeat(5);
        let packed = lz4_linked(&data);
        assert!(
            packed.len() < data.len() / 3,
            "blocks must reference earlier blocks"
        );
        let mut out = Decompressor::new();
        // Twice in a row, and as two frames: history never leaks between frames.
        for _ in 0..2 {
            assert_eq!(
                out.decompress(Compression::Lz4, &packed, data.len(), false)
                    .ok(),
                Some(data.as_slice())
            );
        }
        let twice = [packed.as_slice(), packed.as_slice()].concat();
        assert_eq!(
            out.decompress(Compression::Lz4, &twice, 2 * data.len(), false)
                .map(<[u8]>::len)
                .ok(),
            Some(2 * data.len())
        );
        assert!(matches!(
            out.decompress(Compression::Lz4, &packed, data.len() - 1, false),
            Err(DecompressError::TooLarge { .. })
        ));
    }

    #[test]
    fn lz4_corrupt_block_under_the_cap_is_invalid_not_too_large() {
        let data: Vec<u8> = (0..150_000u32).map(|i| (i % 97) as u8).collect();
        let mut packed = compress(Compression::Lz4, &data).unwrap_or_default();
        // The last block now opens with a match (no literals) 65535 bytes back: before its output.
        let (mut at, mut last) = (7, 0); // blocks follow magic, FLG, BD and the header checksum
        while let Some(word) = packed.get(at..at + 4) {
            let size = u32::from_le_bytes(word.try_into().unwrap_or_default()) & 0x7fff_ffff;
            if size == 0 {
                break;
            }
            last = at + 4;
            at = last + size as usize;
        }
        assert!(last > 7, "more than one block");
        packed[last..last + 3].copy_from_slice(&[0x00, 0xff, 0xff]);
        let mut out = Decompressor::new();
        for cap in [data.len(), data.len() - 1] {
            assert!(matches!(
                out.decompress(Compression::Lz4, &packed, cap, false),
                Err(DecompressError::Invalid(_))
            ));
        }
    }

    /// Sizes a frame claims are not trusted: an LZ4 block that decodes to more than its frame's block
    /// size, and zstd frames whose header claims fewer or (far) more bytes than they hold, give the
    /// typed error (or the true output), with the buffer never sized from the claim. The lz4 and zstd
    /// output is written into uninitialised capacity: run under valgrind's memcheck to see that
    /// nothing reads it (`valgrind --error-exitcode=1 <test binary> records::compression`).
    #[test]
    fn lying_frame_sizes_give_typed_errors() {
        let data: Vec<u8> = (0..256 * 1024u32).map(|i| (i * 31 % 253) as u8).collect();
        // One 256 KiB block (block size id 5), then the frame relabelled as 64 KiB blocks (id 4).
        let enc = lz4::EncoderBuilder::new()
            .block_size(lz4::BlockSize::Max256KB)
            .block_mode(lz4::BlockMode::Independent)
            .build(Vec::new());
        let Ok(mut enc) = enc else {
            panic!("lz4 encoder")
        };
        assert!(enc.write_all(&data).is_ok());
        let (mut packed, finished) = enc.finish();
        assert!(finished.is_ok());
        assert_eq!(packed[5] >> 4, 5, "a 256 KiB block size");
        let block = u32::from_le_bytes([packed[7], packed[8], packed[9], packed[10]]) & 0x7fff_ffff;
        assert!(
            block <= 64 * 1024,
            "the block itself is small enough to pass the size check"
        );
        packed[5] = 4 << 4;
        packed[6] = (xxh32(&packed[4..6]) >> 8) as u8;
        let mut out = Decompressor::new();
        for cap in [1 << 30, data.len()] {
            match out.decompress(Compression::Lz4, &packed, cap, false) {
                Err(DecompressError::Invalid(msg)) => assert!(msg.contains("corrupt LZ4 block")),
                other => panic!("{other:?}"),
            }
        }
        // The same decompressor still decodes honest frames after the failures.
        let honest = compress(Compression::Lz4, &data).unwrap_or_default();
        assert_eq!(
            out.decompress(Compression::Lz4, &honest, data.len(), false)
                .ok(),
            Some(data.as_slice())
        );

        let packed = zstd::bulk::compress(&data, 3).unwrap_or_default();
        let fhd = packed[4];
        let single_segment = fhd & 0x20 != 0;
        let at = 5 + usize::from(!single_segment) + [0, 1, 2, 4][usize::from(fhd & 3)];
        let fcs_bytes = [usize::from(single_segment), 2, 4, 8][usize::from(fhd >> 6)];
        assert!(
            fcs_bytes >= 4,
            "the frame states its content size ({fcs_bytes} bytes)"
        );
        for claim in [1_000u32, 0xffff_fff0] {
            let mut lying = packed.clone();
            lying[at..at + 4].copy_from_slice(&claim.to_le_bytes());
            let mut out = Decompressor::new();
            let got = out.decompress(Compression::Zstd, &lying, data.len() + 10, false);
            assert!(
                matches!(got, Err(DecompressError::Invalid(_))),
                "{claim}: {:?}",
                got.map(<[u8]>::len)
            );
            assert!(out.buf.capacity() <= 2 * data.len(), "sized from the claim");
        }
    }

    #[test]
    fn lz4_broken_header_checksum_only_for_legacy() {
        let packed = compress(Compression::Lz4, b"hello hello hello").unwrap_or_default();
        let mut broken = packed.clone();
        // Kafka 0.8 hashed the magic number as well: any other byte is what it wrote.
        let hc = 6;
        broken[hc] = (twox_hash::XxHash32::oneshot(0, &packed[0..hc]) >> 8) as u8;
        assert_ne!(broken[hc], packed[hc]);
        let mut out = Decompressor::new();
        assert!(out
            .decompress(Compression::Lz4, &broken, 1 << 20, false)
            .is_err());
        assert_eq!(
            out.decompress(Compression::Lz4, &broken, 1 << 20, true)
                .ok(),
            Some(b"hello hello hello".as_slice())
        );
    }
}

//! The five codecs of the attributes' low 3 bits, decoding into a caller-owned buffer that never
//! grows past a cap. Sizes claimed inside compressed data are never trusted for allocation: output
//! is streamed into a buffer grown step by step up to the cap, and one byte past the cap is an error.

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
/// The buffer only grows, never past the cap, and is zero-filled once when it grows; sizes claimed
/// inside compressed data are never used to allocate.
#[derive(Default)]
pub struct Decompressor {
    /// Initialised storage; the output is `buf[..len]`.
    buf: Vec<u8>,
    len: usize,
    zstd: Option<zstd::zstd_safe::DCtx<'static>>,
}

impl std::fmt::Debug for Decompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decompressor")
            .field("capacity", &self.buf.len())
            .field("len", &self.len)
            .finish()
    }
}

/// Grow `buf` so that it holds at least `need` bytes (`need <= cap`), geometrically but within `cap`.
fn grow(buf: &mut Vec<u8>, need: usize, cap: usize) {
    if buf.len() < need {
        let target = need
            .max(buf.len().saturating_mul(2))
            .max(64 * 1024)
            .min(cap.max(need));
        buf.resize(target, 0);
    }
}

impl Decompressor {
    pub fn new() -> Self {
        Decompressor::default()
    }

    /// The last output.
    pub fn output(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
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
        self.len = 0;
        self.len = match codec {
            Compression::None => {
                if input.len() > cap {
                    return Err(DecompressError::TooLarge { cap });
                }
                grow(&mut self.buf, input.len(), cap);
                if let Some(dst) = self.buf.get_mut(..input.len()) {
                    dst.copy_from_slice(input);
                }
                input.len()
            }
            Compression::Gzip => {
                read_capped(&mut self.buf, flate2::read::MultiGzDecoder::new(input), cap)?
            }
            Compression::Snappy => snappy(&mut self.buf, input, cap)?,
            Compression::Lz4 => {
                match lz4_independent(&mut self.buf, input, cap, lz4_legacy_checksum)? {
                    Some(n) => n,
                    // Linked blocks (never written by Kafka clients): the streaming frame decoder.
                    None => read_capped(
                        &mut self.buf,
                        lz4_flex::frame::FrameDecoder::new(input),
                        cap,
                    )?,
                }
            }
            Compression::Zstd => {
                let dctx = self.zstd.get_or_insert_with(zstd::zstd_safe::DCtx::create);
                zstd_stream(&mut self.buf, dctx, input, cap)?
            }
        };
        Ok(self.output())
    }
}

/// Stream `reader` into `buf`, growing it up to `cap`; one byte more than `cap` is `TooLarge`.
fn read_capped<R: Read>(
    buf: &mut Vec<u8>,
    mut reader: R,
    cap: usize,
) -> Result<usize, DecompressError> {
    let mut filled = 0usize;
    loop {
        if filled >= buf.len().min(cap) {
            if filled >= cap {
                let mut probe = [0u8; 1];
                return match read_some(&mut reader, &mut probe)? {
                    0 => Ok(filled),
                    _ => Err(DecompressError::TooLarge { cap }),
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

/// zstd frames (one or more) streamed straight into `buf`.
fn zstd_stream(
    buf: &mut Vec<u8>,
    dctx: &mut zstd::zstd_safe::DCtx<'static>,
    input: &[u8],
    cap: usize,
) -> Result<usize, DecompressError> {
    use zstd::zstd_safe::{get_error_name, InBuffer, OutBuffer, ResetDirective};
    let zerr = |code: usize| invalid(get_error_name(code));
    dctx.reset(ResetDirective::SessionOnly).map_err(zerr)?;
    let mut src = InBuffer::around(input);
    let mut filled = 0usize;
    loop {
        let before = (src.pos(), filled);
        let finished_frame = if filled >= cap {
            // At the cap: one more byte of output means the payload is too large.
            let mut probe = [0u8; 1];
            let mut dst = OutBuffer::around(&mut probe[..]);
            let hint = dctx.decompress_stream(&mut dst, &mut src).map_err(zerr)?;
            if dst.pos() > 0 {
                return Err(DecompressError::TooLarge { cap });
            }
            hint == 0
        } else {
            grow(
                buf,
                (filled + 1).max(input.len().saturating_mul(4)).min(cap),
                cap,
            );
            let end = buf.len().min(cap);
            let window = buf.get_mut(..end).unwrap_or_default();
            let mut dst = OutBuffer::around_pos(window, filled);
            let hint = dctx.decompress_stream(&mut dst, &mut src).map_err(zerr)?;
            filled = dst.pos();
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

/// Raw snappy, or the xerial framing (header, then big-endian length + raw block, repeated).
fn snappy(buf: &mut Vec<u8>, input: &[u8], cap: usize) -> Result<usize, DecompressError> {
    let mut decoder = snap::raw::Decoder::new();
    let mut filled = 0usize;
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
            return Err(DecompressError::TooLarge { cap });
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

/// LZ4 frames of independent blocks (what Kafka writes), each block decoded straight into `buf`.
/// `Ok(None)`: a frame uses linked blocks; the caller falls back to the streaming decoder.
fn lz4_independent(
    buf: &mut Vec<u8>,
    input: &[u8],
    cap: usize,
    legacy: bool,
) -> Result<Option<usize>, DecompressError> {
    let truncated = || invalid("truncated LZ4 frame");
    let mut rest = input;
    let mut filled = 0usize;
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
        if flg & 0x20 == 0 {
            return Ok(None);
        }
        if flg & 0x01 != 0 {
            return Err(invalid("LZ4 dictionaries are not supported"));
        }
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
                    return Err(DecompressError::TooLarge { cap });
                }
                grow(buf, filled + size, cap);
                buf.get_mut(filled..filled + size)
                    .unwrap_or_default()
                    .copy_from_slice(block);
                filled += size;
            } else {
                let room = max_block.min(cap - filled);
                grow(buf, filled + room, cap);
                let dst = buf.get_mut(filled..filled + room).unwrap_or_default();
                match lz4_flex::block::decompress_into(block, dst) {
                    Ok(n) => filled += n,
                    Err(lz4_flex::block::DecompressError::OutputTooSmall { .. })
                        if room < max_block =>
                    {
                        return Err(DecompressError::TooLarge { cap })
                    }
                    Err(e) => return Err(invalid(e)),
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
    Ok(Some(filled))
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
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            enc.write_all(input)?;
            enc.finish().map_err(io::Error::other)
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

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
    pub const ALL: [Compression; 5] =
        [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];

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
                format!("{} payload decompresses to more than max_decompressed_size ({cap} bytes)", codec.name())
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

/// Decompress `input` into `out` (cleared first), writing at most `cap` bytes.
///
/// `lz4_legacy_checksum`: accept the frame-descriptor checksum Kafka 0.8 (magic 0) computed wrongly
/// over the magic number too; Kafka itself skips that check for magic 0 (`KafkaLZ4BlockInputStream`).
pub fn decompress(
    codec: Compression,
    input: &[u8],
    cap: usize,
    lz4_legacy_checksum: bool,
    out: &mut Vec<u8>,
) -> Result<(), DecompressError> {
    out.clear();
    match codec {
        Compression::None => {
            if input.len() > cap {
                return Err(DecompressError::TooLarge { cap });
            }
            out.extend_from_slice(input);
            Ok(())
        }
        Compression::Gzip => read_capped(flate2::read::MultiGzDecoder::new(input), input.len(), cap, out),
        Compression::Snappy => snappy(input, cap, out),
        Compression::Lz4 => match lz4_patched_header(input, lz4_legacy_checksum) {
            Some((header, rest)) => {
                read_capped(lz4_flex::frame::FrameDecoder::new(header.as_slice().chain(rest)), input.len(), cap, out)
            }
            None => read_capped(lz4_flex::frame::FrameDecoder::new(input), input.len(), cap, out),
        },
        Compression::Zstd => {
            let decoder = zstd::stream::read::Decoder::with_buffer(input).map_err(invalid)?;
            read_capped(decoder, input.len(), cap, out)
        }
    }
}

/// Stream `reader` into `out`, growing it geometrically but never beyond `cap`; then probe one more
/// byte so that output of exactly `cap` bytes is accepted and anything longer is not.
fn read_capped<R: Read>(mut reader: R, input_len: usize, cap: usize, out: &mut Vec<u8>) -> Result<(), DecompressError> {
    let mut filled = 0usize;
    let initial = input_len.saturating_mul(4).max(4096);
    out.resize(out.capacity().max(initial).min(cap), 0);
    loop {
        if filled == out.len() {
            if filled >= cap {
                let mut probe = [0u8; 1];
                match read_some(&mut reader, &mut probe)? {
                    0 => break,
                    _ => return Err(DecompressError::TooLarge { cap }),
                }
            }
            let grown = filled.saturating_mul(2).max(4096).min(cap);
            out.resize(grown, 0);
        }
        let Some(spare) = out.get_mut(filled..) else { break };
        match read_some(&mut reader, spare)? {
            0 => break,
            n => filled += n,
        }
    }
    out.truncate(filled);
    Ok(())
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

/// Raw snappy, or the xerial framing (header, then big-endian length + raw block, repeated).
fn snappy(input: &[u8], cap: usize, out: &mut Vec<u8>) -> Result<(), DecompressError> {
    let mut decoder = snap::raw::Decoder::new();
    let mut append_block = |block: &[u8], out: &mut Vec<u8>| -> Result<(), DecompressError> {
        let len = snap::raw::decompress_len(block).map_err(invalid)?;
        let start = out.len();
        if len > cap - start {
            return Err(DecompressError::TooLarge { cap });
        }
        out.resize(start + len, 0);
        let dst = out.get_mut(start..).unwrap_or_default();
        let written = decoder.decompress(block, dst).map_err(invalid)?;
        out.truncate(start + written);
        Ok(())
    };
    let Some(mut rest) = input.strip_prefix(XERIAL_MAGIC.as_slice()) else {
        return append_block(input, out);
    };
    rest = rest.get(XERIAL_HEADER_LEN - XERIAL_MAGIC.len()..).ok_or_else(|| invalid("truncated xerial header"))?;
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<4>().ok_or_else(|| invalid("truncated xerial block length"))?;
        let len = u32::from_be_bytes(*len) as usize;
        let block = tail.get(..len).ok_or_else(|| invalid("xerial block runs past the end of the payload"))?;
        append_block(block, out)?;
        rest = tail.get(len..).unwrap_or_default();
    }
    Ok(())
}

/// For a Kafka 0.8 LZ4 frame whose descriptor checksum is wrong, the header with the checksum
/// recomputed, and the bytes after it. `None` when nothing needs patching (or it is not a frame).
fn lz4_patched_header(input: &[u8], legacy: bool) -> Option<(Vec<u8>, &[u8])> {
    if !legacy {
        return None;
    }
    let magic = u32::from_le_bytes(*input.first_chunk::<4>()?);
    let flg = *input.get(4)?;
    if magic != LZ4_MAGIC {
        return None;
    }
    let descriptor_len = 2 + if flg & 0x08 != 0 { 8 } else { 0 } + if flg & 0x01 != 0 { 4 } else { 0 };
    let hc_pos = 4 + descriptor_len;
    let stored = *input.get(hc_pos)?;
    let correct = (twox_hash::XxHash32::oneshot(0, input.get(4..hc_pos)?) >> 8) as u8;
    if stored == correct {
        return None;
    }
    let mut header = input.get(..=hc_pos)?.to_vec();
    *header.last_mut()? = correct;
    Some((header, input.get(hc_pos + 1..)?))
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
            let mut out = Vec::with_capacity(XERIAL_HEADER_LEN + snap::raw::max_compress_len(input.len()));
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
        let data: Vec<u8> = (0..200_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        for codec in Compression::ALL {
            let packed = compress(codec, &data).map_err(|e| e.to_string());
            let mut out = Vec::new();
            assert!(packed.is_ok(), "{codec:?}");
            let packed = packed.unwrap_or_default();
            assert!(decompress(codec, &packed, data.len(), false, &mut out).is_ok(), "{codec:?}");
            assert_eq!(out, data, "{codec:?}");
            let capped = decompress(codec, &packed, data.len() - 1, false, &mut out);
            assert!(matches!(capped, Err(DecompressError::TooLarge { .. })), "{codec:?}");
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
        let mut out = Vec::new();
        assert!(decompress(Compression::Lz4, &broken, 1 << 20, false, &mut out).is_err());
        assert!(decompress(Compression::Lz4, &broken, 1 << 20, true, &mut out).is_ok());
        assert_eq!(out, b"hello hello hello");
    }
}

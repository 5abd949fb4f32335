//! Zigzag varints as Kafka writes them (`ByteUtils.readVarint/readVarlong`): at most 5 bytes for an
//! int, 10 for a long; a longer run of continuation bits is corruption, not a bigger number.

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarintError {
    /// The input ended inside the varint.
    Truncated,
    /// More continuation bytes than the type allows.
    TooLong,
}

impl VarintError {
    pub fn reason(self, what: &str) -> String {
        match self {
            VarintError::Truncated => format!("{what}: input ends inside a varint"),
            VarintError::TooLong => format!("{what}: varint is longer than allowed"),
        }
    }
}

/// The value and the bytes it took. Out of line, and taking the slice by value, so the callers'
/// fast paths keep their cursor in registers.
#[inline(never)]
fn read_unsigned(buf: &[u8], max_bytes: usize) -> Result<(u64, usize), VarintError> {
    let mut value: u64 = 0;
    for (i, &byte) in buf.iter().enumerate() {
        if i == max_bytes {
            return Err(VarintError::TooLong);
        }
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    if buf.len() >= max_bytes {
        Err(VarintError::TooLong)
    } else {
        Err(VarintError::Truncated)
    }
}

/// Read a zigzag varint (int32) and advance `buf` past it.
#[inline(always)]
pub fn read_varint(buf: &mut &[u8]) -> Result<i32, VarintError> {
    // Fast path: one byte holds every value in -64..=63 (most lengths and deltas).
    if let Some(&b) = buf.first() {
        if b & 0x80 == 0 {
            *buf = buf.get(1..).unwrap_or_default();
            return Ok(((b >> 1) as i32) ^ -((b & 1) as i32));
        }
    }
    // Two bytes hold -8192..=8191 (record lengths of small records, most offset deltas).
    if let Some(&[b0, b1]) = buf.first_chunk::<2>() {
        if b1 & 0x80 == 0 {
            *buf = buf.get(2..).unwrap_or_default();
            let raw = u32::from(b0 & 0x7f) | (u32::from(b1) << 7);
            return Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32));
        }
    }
    // Like Java, bits past 32 in the fifth byte are dropped rather than rejected.
    let (raw, n) = read_unsigned(buf, 5)?;
    *buf = buf.get(n..).unwrap_or_default();
    let raw = raw as u32;
    Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

/// Read a zigzag varlong (int64) and advance `buf` past it.
#[inline(always)]
pub fn read_varlong(buf: &mut &[u8]) -> Result<i64, VarintError> {
    // Fast paths: timestamp deltas inside a batch are mostly under 64 or 8192 ms.
    match buf.first_chunk::<2>() {
        Some(&[b0, _]) if b0 & 0x80 == 0 => {
            *buf = buf.get(1..).unwrap_or_default();
            let raw = u64::from(b0);
            return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
        Some(&[b0, b1]) if b1 & 0x80 == 0 => {
            *buf = buf.get(2..).unwrap_or_default();
            let raw = u64::from(b0 & 0x7f) | (u64::from(b1) << 7);
            return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
        _ => {}
    }
    let (raw, n) = read_unsigned(buf, 10)?;
    *buf = buf.get(n..).unwrap_or_default();
    Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

/// Append `value` as a zigzag varint.
pub fn write_varint(out: &mut Vec<u8>, value: i32) {
    write_unsigned(out, ((value << 1) ^ (value >> 31)) as u32 as u64);
}

/// Append `value` as a zigzag varlong.
pub fn write_varlong(out: &mut Vec<u8>, value: i64) {
    write_unsigned(out, ((value << 1) ^ (value >> 63)) as u64);
}

fn write_unsigned(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes `write_varint(value)` would append.
pub fn varint_size(value: i32) -> usize {
    let mut v = ((value << 1) ^ (value >> 31)) as u32;
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_extremes() {
        for v in [0, 1, -1, 63, -64, 64, -65, i32::MAX, i32::MIN] {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            assert_eq!(out.len(), varint_size(v));
            let mut s = out.as_slice();
            assert_eq!(read_varint(&mut s), Ok(v));
            assert!(s.is_empty());
        }
        for v in [0, -1, i64::MAX, i64::MIN, 1 << 40] {
            let mut out = Vec::new();
            write_varlong(&mut out, v);
            let mut s = out.as_slice();
            assert_eq!(read_varlong(&mut s), Ok(v));
            assert!(s.is_empty());
        }
    }

    /// Every value whose encoding takes 1, 2 or 3 bytes, through the fast paths and the slow one,
    /// with and without bytes after it, agrees with the encoder.
    #[test]
    fn fast_paths_agree_with_the_encoder_at_every_short_value() {
        for v in -70_000..70_000i32 {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            let len = out.len();
            out.push(0x55); // a following byte must not be consumed
            for bytes in [&out[..len], &out[..]] {
                let mut s = bytes;
                assert_eq!(read_varint(&mut s), Ok(v), "{v}");
                assert_eq!(s.len(), bytes.len() - len, "{v}");
                let mut s = bytes;
                assert_eq!(read_varlong(&mut s), Ok(i64::from(v)), "{v}");
                assert_eq!(s.len(), bytes.len() - len, "{v}");
            }
        }
    }

    #[test]
    fn rejects_overlong_and_truncated() {
        let mut s: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(read_varint(&mut s), Err(VarintError::TooLong));
        let mut s: &[u8] = &[0xff; 11];
        assert_eq!(read_varlong(&mut s), Err(VarintError::TooLong));
        let mut s: &[u8] = &[0xff, 0xff];
        assert_eq!(read_varint(&mut s), Err(VarintError::Truncated));
        let mut s: &[u8] = &[];
        assert_eq!(read_varint(&mut s), Err(VarintError::Truncated));
    }
}

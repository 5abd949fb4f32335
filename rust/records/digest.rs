//! A record's content digest: 64-bit XXH3 of its key, value and headers in the v2 record encoding
//! (`DefaultRecord.writeTo` from the key length on: zigzag-varint lengths, -1 for null, so a null
//! key or value differs from an empty one; header count, then each header in order).
//!
//! Replicas copy batches byte for byte, so equal records have equal digests whatever their codec;
//! legacy (magic 0/1) messages, which have no headers, are hashed in the same encoding.
//! Independently reproducible: `xxhash.xxh3_64_intdigest(encoding)` in Python gives the same value.

use twox_hash::XxHash3_64;

use super::encode::write_key_value_headers;
use super::record::RecordView;
use super::varint::varint_size;

/// Bytes of the canonical encoding of `len` bytes (or null) with its length prefix.
fn bytes_size(value: Option<&[u8]>) -> usize {
    match value {
        None => varint_size(-1),
        Some(b) => i32::try_from(b.len()).map_or(usize::MAX / 4, varint_size) + b.len(),
    }
}

/// Size of the canonical encoding of `r`'s key, value and headers.
fn canonical_size(r: &RecordView<'_, '_>) -> usize {
    let headers: usize = r
        .headers
        .iter()
        .map(|h| bytes_size(Some(h.key.as_bytes())) + bytes_size(h.value))
        .sum();
    let count = i32::try_from(r.headers.len()).map_or(5, varint_size);
    bytes_size(r.key) + bytes_size(r.value) + count + headers
}

/// The digest of one record. v2 records written with minimal varints (every Kafka client) are hashed
/// in place; others are re-encoded into `scratch` first, so the digest depends on content only.
pub fn record_digest(r: &RecordView<'_, '_>, scratch: &mut Vec<u8>) -> u64 {
    if let Some(written) = r.key_value_headers {
        if written.len() == canonical_size(r) {
            return XxHash3_64::oneshot(written);
        }
    }
    scratch.clear();
    // Cannot fail for decoded records: their parts came from lengths that fit in an i32.
    if write_key_value_headers(scratch, r.key, r.value, r.headers).is_err() {
        scratch.clear();
    }
    XxHash3_64::oneshot(scratch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Header;

    fn view<'a, 'h>(
        key: Option<&'a [u8]>,
        value: Option<&'a [u8]>,
        headers: &'h [Header<'a>],
        written: Option<&'a [u8]>,
    ) -> RecordView<'a, 'h> {
        RecordView {
            offset: 0,
            timestamp: 0,
            attributes: 0,
            timestamp_delta: 0,
            offset_delta: 0,
            key,
            value,
            headers,
            key_value_headers: written,
        }
    }

    #[test]
    fn null_and_empty_differ() {
        let mut s = Vec::new();
        let null = record_digest(&view(None, Some(b"v"), &[], None), &mut s);
        let empty = record_digest(&view(Some(b""), Some(b"v"), &[], None), &mut s);
        assert_ne!(null, empty);
        let hv_null = [Header {
            key: "h",
            value: None,
        }];
        let hv_empty = [Header {
            key: "h",
            value: Some(b""),
        }];
        assert_ne!(
            record_digest(&view(None, None, &hv_null, None), &mut s),
            record_digest(&view(None, None, &hv_empty, None), &mut s)
        );
    }

    #[test]
    fn non_minimal_varints_hash_like_canonical_ones() {
        let mut s = Vec::new();
        // key length 1 as a two-byte varint (0x82 0x00), value null, no headers.
        let padded: &[u8] = &[0x82, 0x00, b'k', 0x01, 0x00];
        let canonical: &[u8] = &[0x02, b'k', 0x01, 0x00];
        let a = record_digest(&view(Some(b"k"), None, &[], Some(padded)), &mut s);
        let b = record_digest(&view(Some(b"k"), None, &[], Some(canonical)), &mut s);
        let c = record_digest(&view(Some(b"k"), None, &[], None), &mut s);
        assert_eq!(a, b);
        assert_eq!(b, c);
        assert_eq!(c, XxHash3_64::oneshot(canonical));
    }
}

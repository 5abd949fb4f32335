//! Kafka request and response frames through the generated `kafka-protocol` crate, bounded.
//!
//! Mirrors the broker's side of `org.apache.kafka.common.requests.RequestHeader`,
//! `RequestContext.parseRequest` and `ResponseHeader`: a frame (the bytes after the 4-byte size) is a
//! request header then the request body; a response frame is the size, a response header (v0:
//! correlation id; v1: plus tagged fields, for flexible versions except ApiVersions) and the body.
//! Only the APIs and versions in [`SUPPORTED`] are decoded; anything else is refused with the parsed
//! header so the caller can answer (ApiVersions) or close. Message bodies are the crate's types;
//! records stay the bytes they arrived as (`bytes::Bytes` slices of the frame, no copy).

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::buf::ByteBufMut;

use crate::{Error, Result};

pub mod client;

/// Largest request the server reads (checked on the size prefix, before the body is read): Kafka's
/// `socket.request.max.bytes` default.
pub const MAX_FRAME_BYTES: usize = 100 * 1024 * 1024;

/// The APIs and versions this codec decodes and encodes (inclusive): what real clients send. Fetch
/// v13+ names topics by id (KIP-516), Fetch v16 and Produce v10 carry KIP-951's leader hints.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 10),
    (ApiKey::Fetch, 4, 16),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 1, 8),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 7),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 4),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    // The transaction coordinator (`epochguard.wire.txn_coordinator`), transaction version 1: v4+ of
    // AddPartitionsToTxn is the brokers' batched form (KIP-890); EndTxn v5 and TxnOffsetCommit v5 too.
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 4),
    (ApiKey::TxnOffsetCommit, 0, 4),
];

/// APIs only the client side of the codec encodes and decodes (`epochguard.client` authenticating
/// with SASL): `serve` neither advertises nor answers them, so they stay out of [`SUPPORTED`].
pub const CLIENT_ONLY: &[(ApiKey, i16, i16)] = &[
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    // `epochguard watch` (issue 34): every group by name, whether it has members, and the producers a
    // partition's leader holds state for (an open transaction holding the last stable offset back).
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::DescribeProducers, 0, 0),
];

/// Where the client's half stops below [`SUPPORTED`]: epochguard's consumer names topics, never topic
/// ids, so its Fetch stays at v12 (v13+ would need the ids from Metadata in every request).
pub const CLIENT_CAPS: &[(ApiKey, i16)] = &[(ApiKey::Fetch, 12)];

/// Where the client's half goes above [`SUPPORTED`] (`serve` neither advertises nor answers these
/// versions): KIP-890's transaction version 2, which a producer uses only where the broker finalized
/// `transaction.version` >= 2. Produce v11 adds TRANSACTION_ABORTABLE and v12 adds the partition to the
/// transaction on the leader (no AddPartitionsToTxn); EndTxn v5 answers with the bumped producer id and
/// epoch; TxnOffsetCommit v5 adds the offsets partition itself (no AddOffsetsToTxn).
pub const CLIENT_BEYOND: &[(ApiKey, i16)] = &[
    (ApiKey::Produce, 12),
    (ApiKey::EndTxn, 5),
    (ApiKey::TxnOffsetCommit, 5),
];

/// The highest version of `key` the client's half speaks, given the shared table's `high`.
pub fn client_cap(key: ApiKey, high: i16) -> i16 {
    if let Some((_, beyond)) = CLIENT_BEYOND.iter().find(|(k, _)| *k == key) {
        return high.max(*beyond);
    }
    CLIENT_CAPS
        .iter()
        .find(|(k, _)| *k == key)
        .map_or(high, |(_, cap)| high.min(*cap))
}

/// The `ApiKey` the client's codec encodes (and whose answer it decodes) at this version: [`SUPPORTED`]
/// (within [`CLIENT_CAPS`], up to [`CLIENT_BEYOND`]) and [`CLIENT_ONLY`].
pub fn client_supported(api_key: i16, api_version: i16) -> Option<ApiKey> {
    SUPPORTED
        .iter()
        .find(|(key, low, high)| {
            *key as i16 == api_key && (*low..=client_cap(*key, *high)).contains(&api_version)
        })
        .map(|(key, _, _)| *key)
        .or_else(|| {
            CLIENT_ONLY
                .iter()
                .find(|(key, low, high)| {
                    *key as i16 == api_key && (*low..=*high).contains(&api_version)
                })
                .map(|(key, _, _)| *key)
        })
}

/// The fields of a request header every version shares (`RequestHeaderData`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestHeader {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
}

/// The supported `ApiKey` for a header, or `None` (unknown key, or a version outside [`SUPPORTED`]).
pub fn supported(api_key: i16, api_version: i16) -> Option<ApiKey> {
    SUPPORTED
        .iter()
        .find(|(key, low, high)| *key as i16 == api_key && (*low..=*high).contains(&api_version))
        .map(|(key, _, _)| *key)
}

/// A topic id as Kafka prints it (`Uuid.toString()`: 16 bytes in unpadded URL-safe base64, 22
/// characters), or in the 8-4-4-4-12 hex form; `None` if it is neither.
pub fn parse_topic_id(s: &str) -> Option<[u8; 16]> {
    if s.len() == 22 {
        let mut bits: u128 = 0;
        for (i, c) in s.bytes().enumerate() {
            let v = match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'-' => 62,
                b'_' => 63,
                _ => return None,
            };
            if i < 21 {
                bits = (bits << 6) | u128::from(v);
            } else {
                // 22 x 6 = 132 bits: the last character's low 4 bits are padding, zero.
                if v & 0xf != 0 {
                    return None;
                }
                bits = (bits << 2) | u128::from(v >> 4);
            }
        }
        return Some(bits.to_be_bytes());
    }
    uuid::Uuid::parse_str(s).ok().map(|u| *u.as_bytes())
}

/// A topic id in Kafka's printed form (`Uuid.toString()`: unpadded URL-safe base64, 22 characters), the
/// inverse of [`parse_topic_id`] for that form.
pub fn format_topic_id(id: [u8; 16]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bits = u128::from_be_bytes(id);
    let mut out = String::with_capacity(22);
    for i in 0..21 {
        let v = (bits >> (122 - 6 * i)) & 0x3f;
        out.push(char::from(ALPHABET[v as usize]));
    }
    // The last character holds the final 2 bits, then 4 zero bits of padding.
    out.push(char::from(ALPHABET[((bits & 0x3) << 4) as usize]));
    out
}

/// A frame cursor that knows where it is, for error positions.
struct Reader {
    buf: Bytes,
    len: usize,
}

impl Reader {
    fn position(&self) -> u64 {
        (self.len - self.buf.remaining()) as u64
    }
    fn corrupt(&self, reason: impl Into<String>) -> Error {
        Error::corrupt_frame(self.position(), reason)
    }
    fn i16(&mut self, what: &str) -> Result<i16> {
        self.buf
            .try_get_i16()
            .map_err(|_| self.corrupt(format!("truncated before {what}")))
    }
    fn i32(&mut self, what: &str) -> Result<i32> {
        self.buf
            .try_get_i32()
            .map_err(|_| self.corrupt(format!("truncated before {what}")))
    }
    fn take(&mut self, n: usize, what: &str) -> Result<Bytes> {
        if self.buf.remaining() < n {
            return Err(self.corrupt(format!(
                "{what} of {n} bytes but only {} left",
                self.buf.remaining()
            )));
        }
        Ok(self.buf.split_to(n))
    }
    fn unsigned_varint(&mut self, what: &str) -> Result<u32> {
        let mut value: u32 = 0;
        for shift in (0..35).step_by(7) {
            let byte = self
                .buf
                .try_get_u8()
                .map_err(|_| self.corrupt(format!("truncated in {what}")))?;
            value |= u32::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.corrupt(format!("{what}: varint longer than 5 bytes")))
    }
    /// A nullable non-compact string (the header's client id stays non-compact in header v2).
    fn nullable_string(&mut self, what: &str) -> Result<Option<String>> {
        let len = self.i16(what)?;
        if len == -1 {
            return Ok(None);
        }
        let Ok(n) = usize::try_from(len) else {
            return Err(self.corrupt(format!("{what}: negative length {len}")));
        };
        let bytes = self.take(n, what)?;
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|_| self.corrupt(format!("{what} is not UTF-8")))
    }
    /// Tagged fields of a flexible header: none are known, all are skipped (bounded by the frame).
    fn skip_tagged_fields(&mut self) -> Result<()> {
        let count = self.unsigned_varint("tagged field count")?;
        for _ in 0..count {
            self.unsigned_varint("tag")?;
            let size = self.unsigned_varint("tagged field size")?;
            self.take(size as usize, "tagged field")?;
        }
        Ok(())
    }
}

/// Parse a request frame: the header, then the body if its API and version are supported.
///
/// Errors: `UnsupportedVersion` (with the header) for an unknown API key or version, `CorruptFrame`
/// for anything malformed (truncated, bad strings, array counts above the bytes left); bytes after
/// the body are ignored, as Kafka does. Never allocates more than the frame's own size for its arrays and strings (the vendored
/// crate checks every length against the bytes left).
pub fn decode_request(frame: Bytes) -> Result<(RequestHeader, RequestKind)> {
    if frame.len() > MAX_FRAME_BYTES {
        return Err(Error::corrupt_frame(
            0,
            format!("frame of {} bytes exceeds {MAX_FRAME_BYTES}", frame.len()),
        ));
    }
    let mut r = Reader {
        len: frame.len(),
        buf: frame,
    };
    let api_key = r.i16("api key")?;
    let api_version = r.i16("api version")?;
    let correlation_id = r.i32("correlation id")?;
    let client_id = r.nullable_string("client id")?;
    let header = RequestHeader {
        api_key,
        api_version,
        correlation_id,
        client_id,
    };
    let Some(key) = supported(api_key, api_version) else {
        return Err(Error::UnsupportedVersion {
            api_key,
            api_version,
            correlation_id,
            client_id: header.client_id,
        });
    };
    if key.request_header_version(api_version) >= 2 {
        r.skip_tagged_fields()?;
    }
    let body = RequestKind::decode(key, &mut r.buf, api_version)
        .map_err(|e| r.corrupt(format!("{key:?} v{api_version}: {}", e.root_cause())))?;
    // Bytes after the body are ignored, as Kafka's `RequestContext.parseRequest` does: librdkafka
    // 2.16 sends Metadata v12 with 3 bytes past the schema, and real brokers answer it.
    Ok((header, body))
}

/// The whole response frame, size prefix included: `response` at `header.api_version`, after a
/// response header v0 or v1 as the API's flexibility requires (ApiVersions always v0).
pub fn encode_response(header: &RequestHeader, response: &ResponseKind) -> Result<Vec<u8>> {
    let key = ApiKey::try_from(header.api_key)
        .map_err(|()| Error::invalid(format!("unknown api key {}", header.api_key)))?;
    let version = header.api_version;
    let header_version = key.response_header_version(version);
    let invalid = |e: anyhow::Error| Error::invalid(format!("{key:?} v{version} response: {e}"));
    let body_size = response_size(response, version).map_err(invalid)?;
    let header_size = if header_version >= 1 { 5 } else { 4 };
    let size = header_size + body_size;
    let size_prefix = i32::try_from(size)
        .map_err(|_| Error::invalid(format!("response of {size} bytes exceeds a frame")))?;
    let mut out = Vec::with_capacity(4 + size);
    out.extend_from_slice(&size_prefix.to_be_bytes());
    out.extend_from_slice(&header.correlation_id.to_be_bytes());
    if header_version >= 1 {
        out.push(0); // no tagged fields
    }
    encode_body(response, &mut out, version).map_err(invalid)?;
    if out.len() != 4 + size {
        return Err(Error::invalid(format!(
            "{key:?} v{version} encoded {} bytes, computed {}",
            out.len() - 4,
            size
        )));
    }
    Ok(out)
}

/// `ResponseKind::encode` wants a `BytesMut`; this writes into any buffer, after sizing it exactly.
fn encode_body<B: ByteBufMut>(r: &ResponseKind, buf: &mut B, version: i16) -> anyhow::Result<()> {
    use kafka_protocol::protocol::Encodable;
    match r {
        ResponseKind::Produce(m) => m.encode(buf, version),
        ResponseKind::Fetch(m) => m.encode(buf, version),
        ResponseKind::ListOffsets(m) => m.encode(buf, version),
        ResponseKind::Metadata(m) => m.encode(buf, version),
        ResponseKind::OffsetCommit(m) => m.encode(buf, version),
        ResponseKind::OffsetFetch(m) => m.encode(buf, version),
        ResponseKind::FindCoordinator(m) => m.encode(buf, version),
        ResponseKind::JoinGroup(m) => m.encode(buf, version),
        ResponseKind::Heartbeat(m) => m.encode(buf, version),
        ResponseKind::LeaveGroup(m) => m.encode(buf, version),
        ResponseKind::SyncGroup(m) => m.encode(buf, version),
        ResponseKind::ApiVersions(m) => m.encode(buf, version),
        ResponseKind::InitProducerId(m) => m.encode(buf, version),
        ResponseKind::OffsetForLeaderEpoch(m) => m.encode(buf, version),
        ResponseKind::AddPartitionsToTxn(m) => m.encode(buf, version),
        ResponseKind::AddOffsetsToTxn(m) => m.encode(buf, version),
        ResponseKind::EndTxn(m) => m.encode(buf, version),
        ResponseKind::TxnOffsetCommit(m) => m.encode(buf, version),
        _ => anyhow::bail!("not a response this codec serves"),
    }
}

fn response_size(r: &ResponseKind, version: i16) -> anyhow::Result<usize> {
    use kafka_protocol::protocol::Encodable;
    match r {
        ResponseKind::Produce(m) => m.compute_size(version),
        ResponseKind::Fetch(m) => m.compute_size(version),
        ResponseKind::ListOffsets(m) => m.compute_size(version),
        ResponseKind::Metadata(m) => m.compute_size(version),
        ResponseKind::OffsetCommit(m) => m.compute_size(version),
        ResponseKind::OffsetFetch(m) => m.compute_size(version),
        ResponseKind::FindCoordinator(m) => m.compute_size(version),
        ResponseKind::JoinGroup(m) => m.compute_size(version),
        ResponseKind::Heartbeat(m) => m.compute_size(version),
        ResponseKind::LeaveGroup(m) => m.compute_size(version),
        ResponseKind::SyncGroup(m) => m.compute_size(version),
        ResponseKind::ApiVersions(m) => m.compute_size(version),
        ResponseKind::InitProducerId(m) => m.compute_size(version),
        ResponseKind::OffsetForLeaderEpoch(m) => m.compute_size(version),
        ResponseKind::AddPartitionsToTxn(m) => m.compute_size(version),
        ResponseKind::AddOffsetsToTxn(m) => m.compute_size(version),
        ResponseKind::EndTxn(m) => m.compute_size(version),
        ResponseKind::TxnOffsetCommit(m) => m.compute_size(version),
        _ => anyhow::bail!("not a response this codec serves"),
    }
}

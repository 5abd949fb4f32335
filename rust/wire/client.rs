//! The client's side of the wire: request frames out, response frames in.
//!
//! Mirrors `org.apache.kafka.common.requests.AbstractRequest.serializeWithHeader` and
//! `AbstractResponse.parseResponse` (as `NetworkClient` uses them): a request frame is the 4-byte
//! size, a request header (v1: key, version, correlation id, nullable client id; v2: plus tagged
//! fields, for flexible versions) and the body; a response frame (after its size) is a response
//! header (v0: correlation id; v1: plus tagged fields; ApiVersions always v0) and the body. Only the
//! APIs and versions in [`super::SUPPORTED`] and [`super::CLIENT_ONLY`] are encoded and decoded. Record batches in a Fetch or
//! Produce stay the bytes they are (slices of the frame, no copy).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

use super::{client_supported, RequestHeader, MAX_FRAME_BYTES};
use crate::{Error, Result};

/// The whole request frame, size prefix included: `body` at `header.api_version`.
///
/// Errors: `UnsupportedVersion` outside the codec's table, `Invalid` when the body cannot be
/// written at that version (a field the version lacks holds a non-default value, too large).
pub fn encode_request(header: &RequestHeader, body: &RequestKind) -> Result<Vec<u8>> {
    let Some(key) = client_supported(header.api_key, header.api_version) else {
        return Err(Error::UnsupportedVersion {
            api_key: header.api_key,
            api_version: header.api_version,
            correlation_id: header.correlation_id,
            client_id: header.client_id.clone(),
        });
    };
    let version = header.api_version;
    let mut out = BytesMut::with_capacity(64);
    out.put_i32(0); // the size, patched below
    out.put_i16(header.api_key);
    out.put_i16(version);
    out.put_i32(header.correlation_id);
    match &header.client_id {
        None => out.put_i16(-1),
        Some(id) => {
            let len = i16::try_from(id.len())
                .map_err(|_| Error::invalid(format!("client id of {} bytes", id.len())))?;
            out.put_i16(len);
            out.put_slice(id.as_bytes());
        }
    }
    if key.request_header_version(version) >= 2 {
        out.put_u8(0); // no tagged fields
    }
    body.encode(&mut out, version)
        .map_err(|e| Error::invalid(format!("{key:?} v{version} request: {}", e.root_cause())))?;
    let size = out.len() - 4;
    if size > MAX_FRAME_BYTES {
        return Err(Error::invalid(format!(
            "{key:?} v{version} request of {size} bytes exceeds {MAX_FRAME_BYTES}"
        )));
    }
    let prefix = i32::try_from(size)
        .map_err(|_| Error::invalid(format!("request of {size} bytes exceeds a frame")))?;
    out[..4].copy_from_slice(&prefix.to_be_bytes());
    Ok(out.to_vec())
}

/// Parse a response frame (the bytes after its size prefix) to a request sent at
/// `api_key`/`api_version`: `(correlation id, body)`.
///
/// Errors: `UnsupportedVersion` for a key/version outside the codec's table, `CorruptFrame` for
/// anything malformed (truncated, array counts above the bytes left, bad UTF-8). Bytes after the
/// body are ignored, as Kafka's `AbstractResponse.parseResponse` does. Never allocates more than the
/// frame's own size for arrays and strings (the vendored crate checks every length).
pub fn decode_response(
    api_key: i16,
    api_version: i16,
    frame: Bytes,
) -> Result<(i32, ResponseKind)> {
    let Some(key) = client_supported(api_key, api_version) else {
        return Err(Error::UnsupportedVersion {
            api_key,
            api_version,
            correlation_id: -1,
            client_id: None,
        });
    };
    if frame.len() > MAX_FRAME_BYTES {
        return Err(Error::corrupt_frame(
            0,
            format!("frame of {} bytes exceeds {MAX_FRAME_BYTES}", frame.len()),
        ));
    }
    let len = frame.len();
    let mut buf = frame;
    let correlation_id = buf
        .try_get_i32()
        .map_err(|_| Error::corrupt_frame(0, "truncated before correlation id"))?;
    // ApiVersions answers always use header v0, so a client can read the refusal of any version.
    let header_version = if key == ApiKey::ApiVersions {
        0
    } else {
        key.response_header_version(api_version)
    };
    if header_version >= 1 {
        skip_tagged_fields(&mut buf, len)?;
    }
    let body = ResponseKind::decode(key, &mut buf, api_version).map_err(|e| {
        Error::corrupt_frame(
            (len - buf.remaining()) as u64,
            format!("{key:?} v{api_version} response: {}", e.root_cause()),
        )
    })?;
    Ok((correlation_id, body))
}

fn unsigned_varint(buf: &mut Bytes, len: usize, what: &str) -> Result<u32> {
    let mut value: u32 = 0;
    for shift in (0..35).step_by(7) {
        let byte = buf.try_get_u8().map_err(|_| {
            Error::corrupt_frame(
                (len - buf.remaining()) as u64,
                format!("truncated in {what}"),
            )
        })?;
        value |= u32::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(Error::corrupt_frame(
        (len - buf.remaining()) as u64,
        format!("{what}: varint longer than 5 bytes"),
    ))
}

/// A flexible response header's tagged fields: none are known, all skipped (bounded by the frame).
fn skip_tagged_fields(buf: &mut Bytes, len: usize) -> Result<()> {
    let count = unsigned_varint(buf, len, "tagged field count")?;
    for _ in 0..count {
        unsigned_varint(buf, len, "tag")?;
        let size = unsigned_varint(buf, len, "tagged field size")? as usize;
        if buf.remaining() < size {
            return Err(Error::corrupt_frame(
                (len - buf.remaining()) as u64,
                format!(
                    "tagged field of {size} bytes but only {} left",
                    buf.remaining()
                ),
            ));
        }
        buf.advance(size);
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kafka_protocol::messages as km;

    fn header(key: ApiKey, version: i16) -> RequestHeader {
        RequestHeader {
            api_key: key as i16,
            api_version: version,
            correlation_id: 7,
            client_id: Some("c".into()),
        }
    }

    #[test]
    fn transaction_version_2_versions_are_the_clients_only() {
        use crate::wire::supported;
        for (key, version) in [
            (ApiKey::Produce, 12),
            (ApiKey::EndTxn, 5),
            (ApiKey::TxnOffsetCommit, 5),
        ] {
            assert_eq!(client_supported(key as i16, version), Some(key));
            assert_eq!(supported(key as i16, version), None); // serve is version 1
        }
        // Produce v13 names topics by id; AddPartitionsToTxn v4+ is the brokers' batched form
        assert_eq!(client_supported(ApiKey::Produce as i16, 13), None);
        assert_eq!(client_supported(ApiKey::AddPartitionsToTxn as i16, 4), None);
        assert_eq!(client_supported(ApiKey::Fetch as i16, 13), None); // CLIENT_CAPS still holds
    }

    #[test]
    fn sasl_is_encoded_for_the_client_only() {
        let mut handshake = km::SaslHandshakeRequest::default();
        handshake.mechanism = "PLAIN".into();
        let frame = encode_request(
            &header(ApiKey::SaslHandshake, 1),
            &RequestKind::SaslHandshake(handshake),
        )
        .unwrap();
        // size, key 17, version 1, correlation 7, client id "c", mechanism "PLAIN"
        assert_eq!(
            frame,
            b"\0\0\0\x12\0\x11\0\x01\0\0\0\x07\0\x01c\0\x05PLAIN".to_vec()
        );
        // serve's decoder does not know it (no SASL there): refused with the header, never answered
        assert!(matches!(
            crate::wire::decode_request(Bytes::from(frame[4..].to_vec())),
            Err(Error::UnsupportedVersion { api_key: 17, .. })
        ));
        assert!(encode_request(
            &header(ApiKey::SaslAuthenticate, 3),
            &RequestKind::SaslAuthenticate(km::SaslAuthenticateRequest::default())
        )
        .is_err());
    }

    #[test]
    fn request_round_trips_through_the_server_decoder() {
        for version in 4..=12 {
            let mut fetch = km::FetchRequest::default();
            fetch.max_wait_ms = 500;
            fetch.replica_id = km::BrokerId(-1);
            let frame = encode_request(
                &header(ApiKey::Fetch, version),
                &RequestKind::Fetch(fetch.clone()),
            )
            .unwrap();
            let size = i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
            assert_eq!(size, frame.len() - 4);
            let (h, body) = super::super::decode_request(Bytes::from(frame[4..].to_vec())).unwrap();
            assert_eq!(h, header(ApiKey::Fetch, version));
            let RequestKind::Fetch(got) = body else {
                panic!("not a fetch")
            };
            assert_eq!(got.max_wait_ms, 500);
        }
    }

    #[test]
    fn response_round_trips_through_the_server_encoder() {
        for version in 0..=3 {
            let mut r = km::ApiVersionsResponse::default();
            r.error_code = 35;
            let h = header(ApiKey::ApiVersions, version);
            let frame = super::super::encode_response(&h, &ResponseKind::ApiVersions(r)).unwrap();
            let (cid, body) = decode_response(
                ApiKey::ApiVersions as i16,
                version,
                Bytes::from(frame[4..].to_vec()),
            )
            .unwrap();
            assert_eq!(cid, 7);
            let ResponseKind::ApiVersions(got) = body else {
                panic!("not api versions")
            };
            assert_eq!(got.error_code, 35);
        }
    }

    #[test]
    fn hostile_responses_are_typed_errors() {
        // A 6-byte Metadata v12 body claiming 2^31 brokers: an error, not an allocation.
        let frame = Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff]);
        let err = decode_response(ApiKey::Metadata as i16, 12, frame).unwrap_err();
        assert!(matches!(err, Error::CorruptFrame { .. }), "{err:?}");
        let err =
            decode_response(ApiKey::Metadata as i16, 12, Bytes::from_static(&[0, 0])).unwrap_err();
        assert!(matches!(err, Error::CorruptFrame { .. }), "{err:?}");
        let err = decode_response(ApiKey::Fetch as i16, 99, Bytes::new()).unwrap_err();
        assert!(matches!(err, Error::UnsupportedVersion { .. }), "{err:?}");
    }
}

//! The wire codec over frames the crate's client side encodes, and over hostile frames: every
//! supported API x version decodes; truncation at every byte, trailing bytes, unknown keys and
//! versions and absurd counts give typed errors, never a panic or an allocation beyond the frame.
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use _core::wire::{decode_request, encode_response, supported, RequestHeader, SUPPORTED};
use _core::Error;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{self as km, ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::{Encodable, StrBytes};

/// Records the largest single allocation made on this thread while `TRACK` is set. (With the
/// `python` feature the library brings its own global allocator; the bound is then not measured.)
#[cfg_attr(feature = "python", allow(dead_code))]
struct Tracking;
thread_local! {
    static TRACK: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}
#[cfg_attr(feature = "python", allow(dead_code))]
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = TRACK.try_with(|t| {
            if t.get() {
                let _ = LARGEST.try_with(|l| l.set(l.get().max(layout.size())));
            }
        });
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}
#[cfg(not(feature = "python"))]
#[global_allocator]
static ALLOC: Tracking = Tracking;

fn largest_allocation_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    TRACK.with(|t| t.set(true));
    let out = f();
    TRACK.with(|t| t.set(false));
    (out, LARGEST.with(Cell::get))
}

fn header_bytes(key: ApiKey, version: i16, correlation_id: i32, client_id: &str) -> BytesMut {
    let mut h = km::RequestHeader::default();
    h.request_api_key = key as i16;
    h.request_api_version = version;
    h.correlation_id = correlation_id;
    h.client_id = Some(StrBytes::from_string(client_id.to_owned()));
    let mut buf = BytesMut::new();
    h.encode(&mut buf, key.request_header_version(version))
        .unwrap();
    buf
}

/// A small but non-trivial request of each kind (one topic, one partition where there are any).
fn sample_request(key: ApiKey, version: i16) -> RequestKind {
    let topic = || km::TopicName(StrBytes::from_static_str("events"));
    match key {
        ApiKey::Fetch => {
            let mut p = km::fetch_request::FetchPartition::default();
            p.partition = 2;
            p.fetch_offset = 42;
            let mut t = km::fetch_request::FetchTopic::default();
            // v13+ names the topic by id only (KIP-516); the crate refuses a name there.
            if version >= 13 {
                t.topic_id = uuid::Uuid::from_u128(0x5b0c_1a3e_1d2f_4e5a_9b8c_7d6e_5f4a_3b2c);
            } else {
                t.topic = topic();
            }
            t.partitions.push(p);
            let mut r = km::FetchRequest::default();
            if version < 15 {
                r.replica_id = km::BrokerId(-1); // v15 moved it into the tagged ReplicaState
            }
            r.max_wait_ms = 500;
            r.topics.push(t);
            RequestKind::Fetch(r)
        }
        ApiKey::Produce => {
            let mut p = km::produce_request::PartitionProduceData::default();
            p.index = 1;
            p.records = Some(Bytes::from_static(b"batch bytes, opaque to the codec"));
            let mut t = km::produce_request::TopicProduceData::default();
            t.name = topic();
            t.partition_data.push(p);
            let mut r = km::ProduceRequest::default();
            r.acks = -1;
            r.timeout_ms = 30_000;
            r.topic_data.push(t);
            RequestKind::Produce(r)
        }
        ApiKey::Metadata => {
            let mut t = km::metadata_request::MetadataRequestTopic::default();
            t.name = Some(topic());
            let mut r = km::MetadataRequest::default();
            r.topics = Some(vec![t]);
            RequestKind::Metadata(r)
        }
        ApiKey::LeaveGroup if version >= 3 => {
            let mut m = km::leave_group_request::MemberIdentity::default();
            m.member_id = StrBytes::from_static_str("m-1");
            let mut r = km::LeaveGroupRequest::default();
            r.members.push(m);
            RequestKind::LeaveGroup(r)
        }
        ApiKey::OffsetFetch if version >= 8 => {
            let mut g = km::offset_fetch_request::OffsetFetchRequestGroup::default();
            g.group_id = km::GroupId(StrBytes::from_static_str("g"));
            let mut r = km::OffsetFetchRequest::default();
            r.groups.push(g);
            RequestKind::OffsetFetch(r)
        }
        ApiKey::FindCoordinator if version >= 4 => {
            let mut r = km::FindCoordinatorRequest::default();
            r.coordinator_keys.push(StrBytes::from_static_str("g"));
            RequestKind::FindCoordinator(r)
        }
        ApiKey::ApiVersions => RequestKind::ApiVersions(km::ApiVersionsRequest::default()),
        ApiKey::ListOffsets => RequestKind::ListOffsets(km::ListOffsetsRequest::default()),
        ApiKey::OffsetCommit => RequestKind::OffsetCommit(km::OffsetCommitRequest::default()),
        ApiKey::OffsetFetch => RequestKind::OffsetFetch(km::OffsetFetchRequest::default()),
        ApiKey::FindCoordinator => {
            RequestKind::FindCoordinator(km::FindCoordinatorRequest::default())
        }
        ApiKey::JoinGroup => RequestKind::JoinGroup(km::JoinGroupRequest::default()),
        ApiKey::SyncGroup => RequestKind::SyncGroup(km::SyncGroupRequest::default()),
        ApiKey::Heartbeat => RequestKind::Heartbeat(km::HeartbeatRequest::default()),
        ApiKey::LeaveGroup => RequestKind::LeaveGroup(km::LeaveGroupRequest::default()),
        ApiKey::InitProducerId => RequestKind::InitProducerId(km::InitProducerIdRequest::default()),
        ApiKey::OffsetForLeaderEpoch => {
            RequestKind::OffsetForLeaderEpoch(km::OffsetForLeaderEpochRequest::default())
        }
        ApiKey::AddPartitionsToTxn => {
            RequestKind::AddPartitionsToTxn(km::AddPartitionsToTxnRequest::default())
        }
        ApiKey::AddOffsetsToTxn => {
            RequestKind::AddOffsetsToTxn(km::AddOffsetsToTxnRequest::default())
        }
        ApiKey::TxnOffsetCommit => {
            RequestKind::TxnOffsetCommit(km::TxnOffsetCommitRequest::default())
        }
        ApiKey::EndTxn => RequestKind::EndTxn(km::EndTxnRequest::default()),
        other => panic!("no sample for {other:?}"),
    }
}

fn frame(key: ApiKey, version: i16, body: &RequestKind) -> Bytes {
    let mut buf = header_bytes(key, version, 7, "tester");
    body.encode(&mut buf, version).unwrap();
    buf.freeze()
}

#[test]
fn every_supported_api_and_version_decodes_to_what_was_encoded() {
    for &(key, low, high) in SUPPORTED {
        for version in low..=high {
            let body = sample_request(key, version);
            let (header, decoded) = decode_request(frame(key, version, &body))
                .unwrap_or_else(|e| panic!("{key:?} v{version}: {e}"));
            assert_eq!(
                header,
                RequestHeader {
                    api_key: key as i16,
                    api_version: version,
                    correlation_id: 7,
                    client_id: Some("tester".into()),
                }
            );
            assert_eq!(decoded, body, "{key:?} v{version}");
        }
    }
}

#[test]
fn unknown_key_or_version_is_refused_with_the_parsed_header() {
    for (key, version) in [
        (ApiKey::ApiVersions as i16, 4),
        (ApiKey::Fetch as i16, 3),
        (ApiKey::Fetch as i16, 17),
        (ApiKey::Produce as i16, 11),
        (999, 0),
        (-1, 0),
    ] {
        let mut buf = BytesMut::new();
        buf.put_i16(key);
        buf.put_i16(version);
        buf.put_i32(99);
        buf.put_i16(3);
        buf.put_slice(b"cli");
        buf.put_slice(b"whatever body");
        match decode_request(buf.freeze()) {
            Err(Error::UnsupportedVersion {
                api_key,
                api_version,
                correlation_id,
                client_id,
            }) => {
                assert_eq!((api_key, api_version, correlation_id), (key, version, 99));
                assert_eq!(client_id.as_deref(), Some("cli"));
            }
            other => panic!("key {key} v{version}: {other:?}"),
        }
        assert!(supported(key, version).is_none());
    }
}

#[test]
fn truncation_at_every_byte_is_a_corrupt_frame_and_trailing_bytes_are_ignored() {
    for &(key, low, high) in SUPPORTED {
        for version in [low, high] {
            let whole = frame(key, version, &sample_request(key, version));
            for cut in 0..whole.len() {
                match decode_request(whole.slice(..cut)) {
                    Err(Error::CorruptFrame { position, .. }) => assert!(position <= cut as u64),
                    other => panic!("{key:?} v{version} cut at {cut}: {other:?}"),
                }
            }
            // Trailing bytes are ignored, as Kafka's broker does (librdkafka sends some).
            let mut longer = BytesMut::from(&whole[..]);
            longer.put_u8(0);
            assert!(
                decode_request(longer.freeze()).is_ok(),
                "{key:?} v{version} with a trailing byte"
            );
        }
    }
}

#[test]
fn huge_array_count_is_rejected_before_allocation() {
    // Metadata v0 claiming i32::MAX topics, v9 (compact) claiming u32::MAX - 1, Fetch v4 claiming
    // i32::MAX partitions: the crate as released would reserve count x element size (hundreds of GiB).
    let mut metadata_v0 = header_bytes(ApiKey::Metadata, 0, 1, "x");
    metadata_v0.put_i32(i32::MAX);
    let mut metadata_v9 = header_bytes(ApiKey::Metadata, 9, 1, "x");
    metadata_v9.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    let mut fetch_v4 = header_bytes(ApiKey::Fetch, 4, 1, "x");
    fetch_v4.put_slice(&[
        0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0,
    ]);
    fetch_v4.put_i32(1);
    fetch_v4.put_i16(1);
    fetch_v4.put_slice(b"t");
    fetch_v4.put_i32(i32::MAX);
    for hostile in [metadata_v0, metadata_v9, fetch_v4] {
        let hostile = hostile.freeze();
        let len = hostile.len();
        let (result, largest) = largest_allocation_during(|| decode_request(hostile));
        assert!(
            matches!(result, Err(Error::CorruptFrame { .. })),
            "{result:?}"
        );
        #[cfg(not(feature = "python"))]
        assert!(
            largest < 64 * 1024,
            "largest allocation {largest} bytes for a {len}-byte frame"
        );
        let _ = (largest, len);
    }
}

#[test]
fn responses_carry_the_correlation_id_and_the_header_version_by_flexibility() {
    let header = |key: ApiKey, version| RequestHeader {
        api_key: key as i16,
        api_version: version,
        correlation_id: 0x0102_0304,
        client_id: None,
    };
    // ApiVersions v3 is flexible but answers with response header v0 (no tagged-field byte).
    let api_versions = ResponseKind::ApiVersions(km::ApiVersionsResponse::default());
    let v3 = encode_response(&header(ApiKey::ApiVersions, 3), &api_versions).unwrap();
    let heartbeat = ResponseKind::Heartbeat(km::HeartbeatResponse::default());
    let v4 = encode_response(&header(ApiKey::Heartbeat, 4), &heartbeat).unwrap();
    let v3_hb = encode_response(&header(ApiKey::Heartbeat, 3), &heartbeat).unwrap();
    for frame in [&v3, &v4, &v3_hb] {
        let size = i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(size, frame.len() - 4);
        assert_eq!(&frame[4..8], &[1, 2, 3, 4]);
    }
    // Heartbeat v4 body: throttle (4), error (2), no tags (1), after header v1's tag byte.
    assert_eq!(v4.len(), 4 + 4 + 1 + 4 + 2 + 1);
    assert_eq!(v3_hb.len(), 4 + 4 + 4 + 2);
    assert_eq!(
        v3[8..10],
        [0, 0],
        "ApiVersions body starts right after the correlation id"
    );
}

//! The request-frame decoder over arbitrary bytes (what a client may send after a size prefix): it
//! must return a request, `UnsupportedVersion` or a `CorruptFrame` positioned inside the frame; never
//! panic, hang or allocate without bound (libFuzzer's malloc limit catches oversized allocations).
#![no_main]

use _core::wire::decode_request;
use _core::Error;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match decode_request(Bytes::copy_from_slice(data)) {
        Ok(_) | Err(Error::UnsupportedVersion { .. }) => {}
        Err(Error::CorruptFrame { position, .. }) => assert!(
            position <= data.len() as u64,
            "error position {position} outside the frame"
        ),
        Err(e) => panic!("unexpected error kind: {e:?}"),
    }
});

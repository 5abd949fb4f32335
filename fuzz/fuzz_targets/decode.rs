//! The record decoder over arbitrary bytes: every entry point (owned records with and without CRC
//! checks, the header-only index, the Arrow builder) must return batches or a `Corrupt` error
//! positioned inside the input; never panic, hang or allocate without bound.
#![no_main]

use _core::records::arrow::{decode_arrow, decode_projected, Column};
use _core::records::{batch_index, decode_batches, DecodeOptions};
use _core::Error;
use libfuzzer_sys::fuzz_target;

const BASE: u64 = 7;

fn check<T>(result: _core::Result<T>, len: usize) {
    match result {
        Ok(_) => {}
        Err(Error::Corrupt { position, .. }) => assert!(
            (BASE..=BASE + len as u64).contains(&position),
            "error position {position} outside the input"
        ),
        Err(e) => panic!("unexpected error kind: {e:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    for verify_crc in [false, true] {
        for allow_partial_tail in [false, true] {
            let opts = DecodeOptions {
                verify_crc,
                allow_partial_tail,
                max_decompressed_size: 1 << 20,
            };
            check(decode_batches(data, BASE, opts), data.len());
            check(decode_arrow(data, BASE, opts), data.len());
            // The computed columns (digest, lengths, batch ranges) see the same records.
            check(
                decode_projected(data, BASE, opts, &Column::COMPUTED),
                data.len(),
            );
        }
    }
    check(batch_index(data, BASE, false), data.len());
    check(batch_index(data, BASE, true), data.len());
});

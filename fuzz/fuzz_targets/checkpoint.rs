//! The checkpoint parser over arbitrary bytes: entries or a line-numbered `Checkpoint` error, and
//! whatever parses must survive format -> parse unchanged and load into a valid cache.
#![no_main]

use _core::checkpoint::{format, parse};
use _core::epoch_cache::LeaderEpochCache;
use _core::Error;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Ok(entries) => {
            let again = parse(format(&entries).as_bytes());
            assert!(
                matches!(&again, Ok(e) if *e == entries),
                "round trip: {again:?}"
            );
            let pairs = entries.iter().map(|e| (e.epoch, e.start_offset));
            match LeaderEpochCache::from_entries(pairs) {
                Ok(cache) => assert!(cache
                    .entries()
                    .windows(2)
                    .all(|w| w[0].epoch < w[1].epoch && w[0].start_offset < w[1].start_offset)),
                Err(Error::InvalidArgument(_)) => {}
                Err(e) => panic!("unexpected error kind: {e:?}"),
            }
        }
        Err(Error::Checkpoint { line, .. }) => {
            let lines = data.iter().filter(|&&b| b == b'\n').count() + 1;
            assert!((1..=lines).contains(&line), "line {line} of {lines}");
        }
        Err(e) => panic!("unexpected error kind: {e:?}"),
    }
});

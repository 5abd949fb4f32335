//! The `binary_view` path over arbitrary bytes: keys and values as views into the input buffer, the
//! decompression buffer or copied bytes. Every decode either fails as the `binary` one does (the same
//! `Corrupt` error) or gives its rows, with every view inside its data buffers (Arrow's full
//! validation: buffer index, offset + length, prefix); never a panic or a view past a buffer.
#![no_main]

use _core::records::arrow::{decode_projected_in, Column, Layout, View};
use _core::records::DecodeOptions;
use arrow_array::cast::AsArray;
use arrow_array::Array;
use libfuzzer_sys::fuzz_target;

const BASE: u64 = 7;

fuzz_target!(|data: &[u8]| {
    let input = arrow_buffer::Buffer::from_slice_ref(data);
    let columns = [Column::Key, Column::Value];
    for verify_crc in [false, true] {
        let opts = DecodeOptions {
            verify_crc,
            allow_partial_tail: true,
            max_decompressed_size: 1 << 20,
        };
        let plain = decode_projected_in(input.as_slice(), BASE, opts, &columns, 1, View::BINARY);
        for threads in [1, 2] {
            let view = View {
                layout: Layout::BinaryView,
                input: Some(&input),
            };
            let views = decode_projected_in(input.as_slice(), BASE, opts, &columns, threads, view);
            match (&views, &plain) {
                (Ok(v), Ok(p)) => {
                    assert_eq!(v.num_rows(), p.num_rows());
                    for (vb, pb) in v.batches.iter().zip(&p.batches) {
                        for c in 0..columns.len() {
                            let array = vb.column(c);
                            assert!(array.to_data().validate_full().is_ok(), "a view outside its buffer");
                            let got: Vec<_> = array.as_binary_view().iter().collect();
                            let want: Vec<_> = pb.column(c).as_binary::<i32>().iter().collect();
                            assert_eq!(got, want);
                        }
                    }
                }
                // The same kind at the same position; a codec's own message may differ with the
                // room its output had, so reasons are compared up to their first colon.
                (Err(a), Err(b)) => assert_eq!(
                    a.to_string().split(':').take(2).collect::<Vec<_>>(),
                    b.to_string().split(':').take(2).collect::<Vec<_>>()
                ),
                _ => panic!("views {views:?} but binary {plain:?}"),
            }
        }
    }
});

//! Fuzz target: `tokenscope::fuzz::batch_block` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tokenscope::fuzz::batch_block(data));

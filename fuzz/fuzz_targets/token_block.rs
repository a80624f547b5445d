//! Fuzz target: `tokenscope::fuzz::token_block` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tokenscope::fuzz::token_block(data));

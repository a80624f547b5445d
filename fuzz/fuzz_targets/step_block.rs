//! Fuzz target: `tokenscope::fuzz::step_block` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tokenscope::fuzz::step_block(data));

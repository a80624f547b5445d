//! Fuzz target: `tokenscope::fuzz::native_json` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tokenscope::fuzz::native_json(data));

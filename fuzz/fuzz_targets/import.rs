//! Fuzz target: `tokenscope::fuzz::import_file` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tokenscope::fuzz::import_file(data));

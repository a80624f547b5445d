//! Fuzz target: `tokenscope::fuzz::otlp_proto` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tokenscope::fuzz::otlp_proto(data));

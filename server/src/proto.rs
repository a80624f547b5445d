//! Rust types generated from `proto/tokenscope/v1` (prost + tonic + proto3-JSON serde).

#[allow(clippy::all, clippy::pedantic)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/tokenscope.v1.rs"));
    include!(concat!(env!("OUT_DIR"), "/tokenscope.v1.serde.rs"));
}

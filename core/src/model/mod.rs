//! The unified trace model: what every engine's traces become after ingest. Pure data, no IO.
//!
//! Invariants (checked by [`validate`] before anything is stored):
//! - times are integer nanoseconds since the Unix epoch ([`Nanos`]);
//! - a request's `tokens`, when present, number exactly `output_tokens`;
//! - candidates are in rank order (non-increasing logprob).

pub mod architecture;
pub mod calendar;
mod iteration;
pub mod latency_cells;
pub mod metrics;
mod request;
mod resource;
mod token;
pub mod validate;

pub use architecture::Architecture;
pub use iteration::{BatchEntry, Draft, DraftSums, Iteration, Phase, StepLoad};
pub use request::{
    FinishReason, KvTransfer, MAX_BLOCK_HASHES, OtherRequest, Preemption, PrefillChunk,
    PrefixCache, RequestTrace, SamplingParams, Served,
};
pub use resource::{EngineKind, Resource, Role};
pub use token::{Candidate, Rank, SpecialToken, Token};

/// Nanoseconds since the Unix epoch (or a duration in nanoseconds).
pub type Nanos = i64;

pub const NANOS_PER_MS: f64 = 1e6;

/// Durations as [`Nanos`].
pub const MS: Nanos = 1_000_000;
pub const SECOND: Nanos = 1_000_000_000;
pub const MINUTE: Nanos = 60 * SECOND;
pub const HOUR: Nanos = 60 * MINUTE;

/// Engine steps this long before a request's arrival still count as its own: the step that
/// admits a request may start just before the gateway stamped its arrival (the clocks differ).
pub const CLOCK_SLACK_NS: Nanos = SECOND;

/// Converts a nanosecond duration to milliseconds for display and the JSON API.
pub fn ms(ns: Nanos) -> f64 {
    ns as f64 / NANOS_PER_MS
}

/// Lowercase hex of an id (W3C trace and span ids are shown and stored this way).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes of a hex id; `None` when it is not an even run of hex digits.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok())
        .collect()
}

/// For `#[serde(skip_serializing_if = "…")]`: a count of zero is left out of the JSON.
pub fn is_zero(n: &u32) -> bool {
    *n == 0
}

//! `tokenscope sim`: a simulated LLM serving engine that emits the traces a real one would.
//!
//! `cost` models step times, `engine` runs continuous batching over requests, `content` gives
//! tokens real vocabulary ids and texts, and `scenarios` reproduces named incidents with ground
//! truth. Everything here is deterministic for a seed and does no IO.

pub mod content;
pub mod cost;
pub mod engine;
pub mod scenarios;

//! One engine scheduler step and the batch it ran: the evidence for interference between requests.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Nanos;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Prefill,
    Decode,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchEntry {
    /// Shared: a batch names the same requests step after step, so an export's steps hold one
    /// copy of each id (the native format sends each once, `ResourceTraces.request_ids`).
    #[serde(with = "shared_str")]
    pub request_id: Arc<str>,
    pub phase: Phase,
    /// Tokens computed for this request in this step (chunk size, or 1 for plain decode).
    pub tokens: u32,
    /// Offset of this prefill chunk in the prompt (0 for decode and the first chunk).
    pub prefill_offset: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Iteration {
    pub iteration_id: u64,
    pub start_ns: Nanos,
    pub end_ns: Nanos,
    pub batch: Vec<BatchEntry>,
    pub running: u32,
    pub waiting: u32,
    pub kv_cache_usage: f32,
}

/// `Arc<str>` as a JSON string (serde's own impl needs its `rc` feature, which would rebuild
/// every crate that uses serde for one field).
mod shared_str {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(s: &Arc<str>, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
        String::deserialize(d).map(Arc::from)
    }
}

/// The load of one engine step as a request saw it: the batch, the queue, and whose prefill ran
/// in it (what a request page shows beside each token).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StepLoad {
    pub iteration_id: u64,
    pub start_ns: Nanos,
    pub end_ns: Nanos,
    /// Requests in the batch.
    pub batch_size: u32,
    /// Requests waiting in the queue.
    pub waiting: u32,
    pub prefill_tokens: u32,
    pub decode_tokens: u32,
    /// Other requests whose prefill ran in this step (the usual cause of a slow token).
    pub prefill_requests: Vec<String>,
}

impl Iteration {
    pub fn tokens_in(&self, phase: Phase) -> u32 {
        self.batch
            .iter()
            .filter(|e| e.phase == phase)
            .map(|e| e.tokens)
            .sum()
    }
}

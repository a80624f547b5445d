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
    /// Speculative decoding: the draft tokens this step verified for the request, and how many
    /// it accepted. The step emitted `accepted + 1` tokens for it: the accepted drafts, then one
    /// sampled by the target model (the correction at the first rejected draft, or the bonus
    /// token when all were accepted). None: no speculation in this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<Draft>,
}

impl BatchEntry {
    /// Tokens this entry decoded (gave the request): its accepted drafts and the target
    /// model's token after them; without speculation, its tokens; a prefill chunk, none.
    pub fn decoded(&self) -> u32 {
        match (self.phase, self.draft) {
            (Phase::Prefill, _) => 0,
            (Phase::Decode, Some(d)) => d.accepted + 1,
            (Phase::Decode, None) => self.tokens,
        }
    }
}

/// Speculative decoding summed over steps (a step, a pixel's bucket, a rollup cell): how many
/// request-steps verified drafts, how many drafts they verified, how many were accepted. Each
/// such request-step made `accepted + 1` tokens, so tokens per step is
/// `(entries + accepted) / entries`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DraftSums {
    pub entries: u64,
    pub proposed: u64,
    pub accepted: u64,
}

impl DraftSums {
    pub fn add(&mut self, d: Draft) {
        self.entries += 1;
        self.proposed += u64::from(d.proposed);
        self.accepted += u64::from(d.accepted);
    }

    pub fn merge(&mut self, o: DraftSums) {
        self.entries += o.entries;
        self.proposed += o.proposed;
        self.accepted += o.accepted;
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Accepted drafts per draft verified.
    pub fn acceptance(&self) -> Option<f64> {
        (self.proposed > 0).then(|| self.accepted as f64 / self.proposed as f64)
    }

    /// Tokens each speculating request got per step.
    pub fn tokens_per_step(&self) -> Option<f64> {
        (self.entries > 0).then(|| (self.entries + self.accepted) as f64 / self.entries as f64)
    }
}

/// Draft tokens verified for one request in one step (`BatchEntry::draft`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Draft {
    pub proposed: u32,
    pub accepted: u32,
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
    /// The request's own draft tokens in this step (speculative decoding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_draft: Option<Draft>,
}

impl Iteration {
    /// Tokens the step decoded for its requests (speculation: the ones they kept).
    pub fn decoded(&self) -> u32 {
        self.batch.iter().map(BatchEntry::decoded).sum()
    }

    /// Its speculative decoding: requests that verified drafts, drafts verified, accepted.
    pub fn drafts(&self) -> DraftSums {
        let mut sums = DraftSums::default();
        for d in self.batch.iter().filter_map(|e| e.draft) {
            sums.add(d);
        }
        sums
    }

    /// Tokens the step computed in `phase` (speculation: drafts verified included).
    pub fn tokens_in(&self, phase: Phase) -> u32 {
        self.batch
            .iter()
            .filter(|e| e.phase == phase)
            .map(|e| e.tokens)
            .sum()
    }
}

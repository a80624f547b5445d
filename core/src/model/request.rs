//! One finished request on one instance: its stage timestamps, counts and tokens.

use serde::{Deserialize, Serialize};

use super::{Nanos, Token};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    #[default]
    Unknown,
    Stop,
    Length,
    Abort,
    Error,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Unknown => "unknown",
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
            FinishReason::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Unknown,
            Self::Stop,
            Self::Length,
            Self::Abort,
            Self::Error,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrefillChunk {
    pub start_ns: Nanos,
    pub end_ns: Nanos,
    pub tokens: u32,
    pub iteration: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Preemption {
    pub at_ns: Nanos,
    pub resumed_ns: Option<Nanos>,
    /// KV cache dropped and recomputed (true) rather than swapped out.
    pub recompute: bool,
    /// The request the scheduler was making room for when it evicted this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggressor: Option<String>,
    /// Tokens it had computed and will compute again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recompute_tokens: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KvTransfer {
    pub start_ns: Nanos,
    pub end_ns: Nanos,
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<u32>,
}

/// The prefix cache's part in a request's prompt, and the prompt's fingerprint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixCache {
    /// Prompt tokens served from each tier.
    pub gpu_tokens: u32,
    pub cpu_tokens: u32,
    pub external_tokens: u32,
    /// Tokens per KV block.
    pub block_size: u32,
    /// The first hashes of the prompt's block-hash chain (requests sharing a prefix share its
    /// start), as 16 hex digits each: a JSON number would lose a u64's low bits in a browser.
    #[serde(with = "hex_u64s")]
    pub block_hashes: Vec<u64>,
    /// The whole chain's length.
    pub blocks: u32,
}

/// At most this many block hashes are kept per request: the first 64 blocks (1,024 tokens at a
/// block of 16) tell prompts that share a system prompt or a conversation apart.
pub const MAX_BLOCK_HASHES: usize = 64;

mod hex_u64s {
    use serde::{Deserialize, Deserializer, Serializer, de::Error, de::Visitor};

    pub fn serialize<S: Serializer>(v: &[u64], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|h| format!("{h:016x}")))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        Ok(Vec::<Hex>::deserialize(d)?
            .into_iter()
            .map(|h| h.0)
            .collect())
    }

    /// One hash, parsed from the string as it is read: a read of 50,000 fingerprints is 2.6
    /// million of them, and a `String` each was a tenth of its time.
    struct Hex(u64);

    impl<'de> Deserialize<'de> for Hex {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Digits;
            impl Visitor<'_> for Digits {
                type Value = Hex;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a block hash as 16 hex digits")
                }
                fn visit_str<E: Error>(self, v: &str) -> Result<Hex, E> {
                    u64::from_str_radix(v, 16).map(Hex).map_err(E::custom)
                }
            }
            d.deserialize_str(Digits)
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i32>,
    pub max_tokens: Option<u32>,
    pub seed: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestTrace {
    pub request_id: String,
    /// W3C trace id, 32 lowercase hex digits.
    pub trace_id: Option<String>,
    /// W3C parent span id, 16 lowercase hex digits.
    pub parent_span_id: Option<String>,
    pub arrival_ns: Nanos,
    pub queued_ns: Option<Nanos>,
    pub first_scheduled_ns: Option<Nanos>,
    pub first_token_ns: Option<Nanos>,
    pub finished_ns: Nanos,
    pub finish_reason: FinishReason,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    pub cached_tokens: u32,
    pub prefill_chunks: Vec<PrefillChunk>,
    pub preemptions: Vec<Preemption>,
    pub kv_transfer: Option<KvTransfer>,
    pub sampling: SamplingParams,
    pub tokens: Vec<Token>,
    #[serde(flatten)]
    pub served: Served,
}

/// How a request was served, beyond its times: for whom, through which LoRA adapter, at which
/// priority, and what the prefix cache gave it. Each as the engine reported it, or None.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Served {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora_adapter: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_cache: Option<PrefixCache>,
}

impl RequestTrace {
    /// When its prompt was computed: the end of its last prefill chunk, else its first token.
    pub fn prefilled_at(&self) -> Option<Nanos> {
        self.prefill_chunks
            .iter()
            .map(|c| c.end_ns)
            .max()
            .or(self.first_token_at())
    }

    /// Every time of the request moved by `by` (another instance's clock onto this one's).
    pub fn shift(&mut self, by: Nanos) {
        let at = |t: &mut Nanos| *t += by;
        let opt = |t: &mut Option<Nanos>| {
            if let Some(t) = t {
                *t += by;
            }
        };
        at(&mut self.arrival_ns);
        opt(&mut self.queued_ns);
        opt(&mut self.first_scheduled_ns);
        opt(&mut self.first_token_ns);
        at(&mut self.finished_ns);
        for c in &mut self.prefill_chunks {
            at(&mut c.start_ns);
            at(&mut c.end_ns);
        }
        for p in &mut self.preemptions {
            at(&mut p.at_ns);
            opt(&mut p.resumed_ns);
        }
        if let Some(kv) = &mut self.kv_transfer {
            at(&mut kv.start_ns);
            at(&mut kv.end_ns);
        }
        for t in &mut self.tokens {
            opt(&mut t.emitted_ns);
            opt(&mut t.scheduled_ns);
        }
    }

    /// First-token time: the explicit stage time, else the first token's emitted time.
    pub fn first_token_at(&self) -> Option<Nanos> {
        self.first_token_ns
            .or_else(|| self.tokens.first().and_then(|t| t.emitted_ns))
    }

    /// When the scheduler first picked the request: explicit, else the first prefill chunk.
    pub fn first_scheduled_at(&self) -> Option<Nanos> {
        self.first_scheduled_ns
            .or_else(|| self.prefill_chunks.first().map(|c| c.start_ns))
    }
}

/// Another request on the same instance, as far as a diagnosis needs it: its prompt
/// and when its prefill ran.
#[derive(Clone, Debug, PartialEq)]
pub struct OtherRequest {
    pub request_id: String,
    pub prompt_tokens: u32,
    /// Prefill intervals (start, end, tokens), in time order.
    pub prefill: Vec<(Nanos, Nanos, u32)>,
}

impl OtherRequest {
    /// A request as its neighbours' diagnoses see it.
    pub fn of(r: &RequestTrace) -> Self {
        Self::from_chunks(r.request_id.clone(), r.prompt_tokens, &r.prefill_chunks)
    }

    /// The same from a request's id, prompt and prefill chunks (a stored row's, say).
    pub fn from_chunks(request_id: String, prompt_tokens: u32, chunks: &[PrefillChunk]) -> Self {
        OtherRequest {
            request_id,
            prompt_tokens,
            prefill: chunks
                .iter()
                .map(|c| (c.start_ns, c.end_ns, c.tokens))
                .collect(),
        }
    }
}

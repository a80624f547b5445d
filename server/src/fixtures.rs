//! Deterministic synthetic traces for tests and benchmarks (the simulator makes realistic ones).

use tokenscope_core::model::{
    BatchEntry, Candidate, EngineKind, FinishReason, Iteration, Nanos, Phase, PrefillChunk,
    RequestTrace, Resource, Role, SamplingParams, SpecialToken, Token,
};

pub use tokenscope_sim::Rng;

pub const EOS_ID: u32 = 128_009;
const VOCAB_SIZE: u64 = 128_000;
const WORDS: [&str; 16] = [
    " the", " of", " and", " model", " token", ",", ".", " latency", " batch", " is", " a", "\n",
    " GPU", " in", " to", " é",
];

/// The text of a token id in the fixture vocabulary.
pub fn token_text(id: u32) -> String {
    if id == EOS_ID {
        "<|eot_id|>".into()
    } else {
        format!(
            "{}{}",
            WORDS[id as usize % WORDS.len()],
            id / WORDS.len() as u32 % 7
        )
    }
}

/// A logprob on the storage grid (multiples of 1/2048), so round trips compare exactly.
fn grid_logprob(rng: &mut Rng, max_nats: u64) -> f32 {
    -(rng.below(max_nats * 2048) as f32) / 2048.0
}

pub fn resource(instance: &str) -> Resource {
    Resource {
        engine: EngineKind::Vllm,
        engine_version: "0.11.0".into(),
        model: "meta-llama/Llama-3.1-8B-Instruct".into(),
        instance_id: instance.into(),
        role: Role::Colocated,
        host: "node-1".into(),
    }
}

/// A finished request with `n` output tokens, `top_k` candidates each, the last one EOS, emitted
/// one per iteration starting at `first_iteration`.
pub fn request(
    id: &str,
    arrival_ns: Nanos,
    n: usize,
    top_k: usize,
    first_iteration: u64,
    seed: u64,
) -> RequestTrace {
    let mut rng = Rng::new(seed);
    let queued = arrival_ns + 1_500_000 + rng.below(500_000) as Nanos;
    let scheduled = queued + 2_000_000 + rng.below(5_000_000) as Nanos;
    let prefill_end = scheduled + 40_000_000 + rng.below(20_000_000) as Nanos;
    let mut at = prefill_end;
    let tokens: Vec<Token> = (0..n)
        .map(|i| {
            if i > 0 {
                at += 18_000_000 + rng.below(9_000_000) as Nanos;
            }
            let last = i + 1 == n;
            let mut candidates: Vec<Candidate> = Vec::with_capacity(top_k);
            let mut lp = grid_logprob(&mut rng, 1);
            for _ in 0..top_k {
                let cid = rng.below(VOCAB_SIZE) as u32;
                candidates.push(Candidate {
                    token_id: Some(cid),
                    text: Some(token_text(cid)),
                    logprob: lp,
                });
                lp += grid_logprob(&mut rng, 3);
            }
            // Mostly the top candidate is chosen; sometimes a lower one; rarely one outside the top-k.
            let roll = rng.below(100);
            let (token_id, logprob, rank) = if last {
                // EOS as the most likely candidate.
                (
                    EOS_ID,
                    candidates.first().map_or(-0.5, |c| c.logprob),
                    Some(1),
                )
            } else if top_k == 0 || roll >= 98 {
                (
                    rng.below(VOCAB_SIZE) as u32,
                    -8.0 - grid_logprob(&mut rng, 2),
                    Some(top_k as u32 + 1 + rng.below(50) as u32),
                )
            } else {
                let k = if roll < 85 {
                    0
                } else {
                    rng.below(top_k as u64) as usize
                };
                (
                    candidates[k].token_id.unwrap_or_default(),
                    candidates[k].logprob,
                    Some(k as u32 + 1),
                )
            };
            if last && top_k > 0 {
                candidates[0] = Candidate {
                    token_id: Some(EOS_ID),
                    text: Some(token_text(EOS_ID)),
                    logprob,
                };
            }
            Token {
                token_id: Some(token_id),
                emitted_ns: Some(at),
                scheduled_ns: Some(at - 15_000_000),
                batch_size: None,
                waiting: None,
                iteration: Some(first_iteration + i as u64),
                logprob: Some(logprob),
                rank,
                text: Some(token_text(token_id)),
                special: if last {
                    SpecialToken::Eos
                } else {
                    SpecialToken::None
                },
                candidates,
            }
        })
        .collect();
    let prompt_tokens = 200 + rng.below(3000) as u32;
    RequestTrace {
        request_id: id.into(),
        trace_id: Some(format!("{:016x}{:016x}", rng.next_u64(), rng.next_u64())),
        parent_span_id: Some(format!("{:016x}", rng.next_u64())),
        arrival_ns,
        queued_ns: Some(queued),
        first_scheduled_ns: Some(scheduled),
        first_token_ns: tokens.first().and_then(|t| t.emitted_ns),
        finished_ns: at + 1_000,
        finish_reason: FinishReason::Stop,
        prompt_tokens,
        output_tokens: n as u32,
        cached_tokens: prompt_tokens / 4,
        prefill_chunks: vec![PrefillChunk {
            start_ns: scheduled,
            end_ns: prefill_end,
            tokens: prompt_tokens - prompt_tokens / 4,
            iteration: Some(first_iteration.saturating_sub(1)),
        }],
        preemptions: Vec::new(),
        kv_transfer: None,
        sampling: SamplingParams {
            temperature: Some(0.7),
            top_p: Some(0.95),
            top_k: None,
            max_tokens: Some(4096),
            seed: Some(seed),
        },
        tokens,
        ..RequestTrace::default()
    }
}

/// One iteration per token of `r` (a decode batch of `batch_size` with `waiting` queued).
pub fn iterations_for(r: &RequestTrace, batch_size: u32, waiting: u32) -> Vec<Iteration> {
    r.tokens
        .iter()
        .filter_map(|t| Some((t.iteration?, t.emitted_ns?)))
        .map(|(id, end)| Iteration {
            iteration_id: id,
            start_ns: end - 15_000_000,
            end_ns: end,
            batch: (0..batch_size)
                .map(|k| BatchEntry {
                    request_id: if k == 0 {
                        r.request_id.as_str().into()
                    } else {
                        format!("other-{k}").into()
                    },
                    phase: Phase::Decode,
                    tokens: 1,
                    prefill_offset: 0,
                    draft: None,
                })
                .collect(),
            running: batch_size,
            waiting,
            kv_cache_usage: 0.5,
        })
        .collect()
}

/// The iterations of requests decoded together (they must share `first_iteration`): one record
/// per step with every request of the group in its batch, timed by the first request.
pub fn shared_iterations(group: &[RequestTrace], waiting: u32) -> Vec<Iteration> {
    let Some(lead) = group.first() else {
        return Vec::new();
    };
    let mut its = iterations_for(lead, 1, waiting);
    for it in &mut its {
        it.batch = group
            .iter()
            .map(|r| BatchEntry {
                request_id: r.request_id.as_str().into(),
                phase: Phase::Decode,
                tokens: 1,
                prefill_offset: 0,
                draft: None,
            })
            .collect();
        it.running = group.len() as u32;
    }
    its
}

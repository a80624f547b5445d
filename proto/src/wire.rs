//! The model as the native wire format: what a client sends (the tests, the benchmarks, the
//! simulator), so that what it sends is exactly what a model value means. The reverse, wire →
//! model with every check, is the server's ingest (`tokenscope::ingest::native`).

use std::collections::HashSet;

use tokenscope_core::model::{
    self, EngineKind, FinishReason, Iteration, Phase, RequestTrace, Resource, Role, Token,
};

use crate::{UNKNOWN_ID, v1};

/// One resource's requests and steps as an export carries them. Batch entries name their
/// requests by reference (`request_ids`), as tokenscope's exporters send them.
pub fn to_wire(
    resource: &Resource,
    requests: &[RequestTrace],
    iterations: &[Iteration],
) -> v1::ResourceTraces {
    let mut refs = RequestRefs::default();
    v1::ResourceTraces {
        resource: Some(v1::Resource {
            engine: match resource.engine {
                EngineKind::Vllm => v1::EngineKind::Vllm,
                EngineKind::Sglang => v1::EngineKind::Sglang,
                EngineKind::Trtllm => v1::EngineKind::Trtllm,
                EngineKind::Other => v1::EngineKind::Other,
            } as i32,
            engine_version: resource.engine_version.clone(),
            model: resource.model.clone(),
            instance_id: resource.instance_id.clone(),
            role: match resource.role {
                Role::Colocated => v1::Role::Colocated,
                Role::Prefill => v1::Role::Prefill,
                Role::Decode => v1::Role::Decode,
            } as i32,
            host: resource.host.clone(),
        }),
        requests: requests.iter().map(request_to_wire).collect(),
        iterations: iterations
            .iter()
            .map(|it| iteration_to_wire(it, &mut refs))
            .collect(),
        token_texts: None,
        request_ids: refs.ids,
    }
}

/// The request ids an export's batch entries name by reference, each listed once.
#[derive(Default)]
struct RequestRefs<'a> {
    ids: Vec<String>,
    // foldhash: one lookup per batch entry of every step the simulator sends.
    refs: foldhash::HashMap<&'a str, u32>,
}

impl<'a> RequestRefs<'a> {
    /// `id`'s `request_ref`: 1 + its position in `ids`, listing it if it is new.
    fn of(&mut self, id: &'a str) -> u32 {
        *self.refs.entry(id).or_insert_with(|| {
            self.ids.push(id.to_owned());
            self.ids.len() as u32
        })
    }
}

/// Gives `rt`'s token texts by id (`ResourceTraces.token_texts`), the way an exporter whose
/// texts are its tokenizer's text of each id sends them: each id's text once, and not at all for
/// ids in `sent` (ids whose texts earlier, acknowledged exports carried; the caller vouches the
/// texts were the same). A request in which one id has two texts, or a text has no id, keeps its
/// own columns. Returns the ids whose texts this export carries.
pub fn intern_texts(rt: &mut v1::ResourceTraces, sent: &HashSet<u32>) -> Vec<u32> {
    // foldhash: SipHash made interning about a sixth of the simulator's thread.
    let mut texts: foldhash::HashMap<u32, &str> = foldhash::HashMap::default();
    let mut internable = Vec::with_capacity(rt.requests.len());
    for r in &rt.requests {
        let Some(c) = &r.tokens else {
            internable.push(false);
            continue;
        };
        let given = (c.token_id.iter().zip(&c.text))
            .chain(c.candidate_token_id.iter().zip(&c.candidate_text));
        let mut ok = true;
        for (&id, text) in given {
            ok &= id != UNKNOWN_ID && *texts.entry(id).or_insert(text) == text.as_str();
        }
        internable.push(ok);
    }
    let mut carried: Vec<(u32, String)> = Vec::new();
    let mut added = foldhash::HashSet::default();
    for (r, ok) in rt.requests.iter_mut().zip(internable) {
        let Some(c) = r.tokens.as_mut().filter(|_| ok) else {
            continue;
        };
        let given = (c.token_id.iter().zip(&c.text))
            .chain(c.candidate_token_id.iter().zip(&c.candidate_text));
        for (&id, text) in given {
            if !sent.contains(&id) && added.insert(id) {
                carried.push((id, text.clone()));
            }
        }
        c.text = Vec::new();
        c.candidate_text = Vec::new();
    }
    let ids = carried.iter().map(|(id, _)| *id).collect();
    let (token_id, text) = carried.into_iter().unzip();
    rt.token_texts = Some(v1::TokenTexts { token_id, text });
    ids
}

fn unhex(s: &Option<String>) -> Vec<u8> {
    s.as_deref().and_then(model::unhex).unwrap_or_default()
}

fn request_to_wire(r: &RequestTrace) -> v1::Request {
    let t = &r.tokens;
    let all = |f: fn(&Token) -> bool| !t.is_empty() && t.iter().all(f);
    let mut cols = v1::TokenColumns {
        token_id: t.iter().map(|x| x.token_id.unwrap_or(UNKNOWN_ID)).collect(),
        ..Default::default()
    };
    if all(|x| x.emitted_ns.is_some()) {
        cols.emitted_ns = t.iter().filter_map(|x| x.emitted_ns).collect();
    }
    if all(|x| x.scheduled_ns.is_some()) {
        cols.scheduled_ns = t.iter().filter_map(|x| x.scheduled_ns).collect();
    }
    if all(|x| x.batch_size.is_some()) {
        cols.batch_size = t.iter().filter_map(|x| x.batch_size).collect();
    }
    if all(|x| x.waiting.is_some()) {
        cols.waiting = t.iter().filter_map(|x| x.waiting).collect();
    }
    if all(|x| x.iteration.is_some()) {
        cols.iteration_id = t.iter().filter_map(|x| x.iteration).collect();
    }
    if all(|x| x.logprob.is_some()) {
        cols.logprob = t.iter().filter_map(|x| x.logprob).collect();
    }
    if t.iter().any(|x| x.rank.is_some()) {
        cols.rank = t.iter().map(|x| x.rank.unwrap_or(0)).collect();
    }
    if all(|x| x.text.is_some()) {
        cols.text = t.iter().filter_map(|x| x.text.clone()).collect();
    }
    if t.iter().any(|x| x.special.is_special()) {
        cols.special = t.iter().map(|x| i32::from(x.special.code())).collect();
    }
    if t.iter().any(|x| !x.candidates.is_empty()) {
        cols.candidate_count = t.iter().map(|x| x.candidates.len() as u32).collect();
        let cands = || t.iter().flat_map(|x| &x.candidates);
        cols.candidate_token_id = cands().map(|c| c.token_id.unwrap_or(UNKNOWN_ID)).collect();
        cols.candidate_logprob = cands().map(|c| c.logprob).collect();
        if cands().all(|c| c.text.is_some()) {
            cols.candidate_text = cands().filter_map(|c| c.text.clone()).collect();
        }
    }
    v1::Request {
        request_id: r.request_id.clone(),
        trace_id: unhex(&r.trace_id),
        parent_span_id: unhex(&r.parent_span_id),
        arrival_ns: r.arrival_ns,
        queued_ns: r.queued_ns.unwrap_or(0),
        first_scheduled_ns: r.first_scheduled_ns.unwrap_or(0),
        first_token_ns: r.first_token_ns.unwrap_or(0),
        finished_ns: r.finished_ns,
        finish_reason: match r.finish_reason {
            FinishReason::Unknown => v1::FinishReason::Unspecified,
            FinishReason::Stop => v1::FinishReason::Stop,
            FinishReason::Length => v1::FinishReason::Length,
            FinishReason::Abort => v1::FinishReason::Abort,
            FinishReason::Error => v1::FinishReason::Error,
        } as i32,
        prompt_tokens: r.prompt_tokens,
        output_tokens: r.output_tokens,
        cached_tokens: r.cached_tokens,
        prefill_chunks: r
            .prefill_chunks
            .iter()
            .map(|c| v1::PrefillChunk {
                start_ns: c.start_ns,
                end_ns: c.end_ns,
                tokens: c.tokens,
                iteration_id: c.iteration.unwrap_or(0),
            })
            .collect(),
        preemptions: r
            .preemptions
            .iter()
            .map(|p| v1::Preemption {
                at_ns: p.at_ns,
                resumed_ns: p.resumed_ns.unwrap_or(0),
                recompute: p.recompute,
                aggressor_request_id: p.aggressor.clone().unwrap_or_default(),
                recompute_tokens: p.recompute_tokens.unwrap_or(0),
            })
            .collect(),
        kv_transfer: r.kv_transfer.as_ref().map(|k| v1::KvTransfer {
            start_ns: k.start_ns,
            end_ns: k.end_ns,
            bytes: k.bytes.unwrap_or(0),
            blocks: k.blocks.unwrap_or(0),
        }),
        lora_adapter: r.served.lora_adapter.clone().unwrap_or_default(),
        priority: r.served.priority,
        tenant: r.served.tenant.clone().unwrap_or_default(),
        prefix_cache: r.served.prefix_cache.as_ref().map(|p| v1::PrefixCache {
            gpu_tokens: p.gpu_tokens,
            cpu_tokens: p.cpu_tokens,
            external_tokens: p.external_tokens,
            block_size: p.block_size,
            block_hashes: p.block_hashes.clone(),
            blocks: p.blocks,
        }),
        sampling: Some(v1::SamplingParams {
            temperature: r.sampling.temperature,
            top_p: r.sampling.top_p,
            top_k: r.sampling.top_k,
            max_tokens: r.sampling.max_tokens,
            seed: r.sampling.seed,
        }),
        tokens: (!t.is_empty()).then_some(cols),
    }
}

fn iteration_to_wire<'a>(it: &'a model::Iteration, refs: &mut RequestRefs<'a>) -> v1::Iteration {
    v1::Iteration {
        iteration_id: it.iteration_id,
        start_ns: it.start_ns,
        end_ns: it.end_ns,
        batch: it
            .batch
            .iter()
            .map(|e| v1::BatchEntry {
                request_id: String::new(),
                request_ref: refs.of(&e.request_id),
                phase: match e.phase {
                    Phase::Prefill => v1::Phase::Prefill,
                    Phase::Decode => v1::Phase::Decode,
                } as i32,
                tokens: e.tokens,
                prefill_offset: e.prefill_offset,
                draft_tokens: e.draft.map_or(0, |d| d.proposed),
                accepted_tokens: e.draft.map_or(0, |d| d.accepted),
            })
            .collect(),
        running: it.running,
        waiting: it.waiting,
        kv_cache_usage: it.kv_cache_usage,
    }
}

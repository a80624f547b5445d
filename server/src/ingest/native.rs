//! Adapter for tokenscope's own wire format (`proto/tokenscope/v1`, gRPC or proto3 JSON).

use tokenscope_core::model::{
    self, BatchEntry, Candidate, Draft, EngineKind, FinishReason, Iteration, KvTransfer, Phase,
    Preemption, PrefillChunk, PrefixCache, RequestTrace, Resource, Role, SamplingParams, Served,
    SpecialToken, Token,
    validate::{self, FieldError},
};

use std::collections::hash_map::Entry;
use std::sync::Arc;

use super::{Decoded, Item, ItemKind, ResourceBatch, normalize};
use crate::store::vocab::TextsById;
use tokenscope_proto::{UNKNOWN_ID, v1};

pub fn decode(export: v1::ExportRequest) -> Decoded {
    let mut out = Decoded::default();
    for (i, rt) in export.resource_traces.into_iter().enumerate() {
        let at = format!("resource_traces[{i}]");
        let checked = resource(rt.resource)
            .and_then(|r| validate::resource(&r).map(|()| r))
            .and_then(|r| Ok((r, texts_by_id(rt.token_texts)?)));
        let (resource, texts_by_id) = match checked {
            Ok(checked) => checked,
            Err(e) => {
                // Without a valid resource no item can be attributed to an instance; without valid
                // texts by id, none would have the texts it was sent with.
                for (j, r) in rt.requests.iter().enumerate() {
                    let item = format!("{at}.requests[{j}] (request_id {:?})", r.request_id);
                    out.reject(ItemKind::Request, &item, e.clone());
                }
                for j in 0..rt.iterations.len() {
                    out.reject(
                        ItemKind::Iteration,
                        &format!("{at}.iterations[{j}]"),
                        e.clone(),
                    );
                }
                continue;
            }
        };
        let mut batch = ResourceBatch {
            resource,
            requests: Vec::new(),
            iterations: Vec::new(),
            texts_by_id,
        };
        for (j, r) in rt.requests.into_iter().enumerate() {
            let label = format!("{at}.requests[{j}] (request_id {:?})", r.request_id);
            match request(r) {
                Ok(value) => batch.requests.push(Item { label, value }),
                Err(e) => out.reject(ItemKind::Request, &label, e),
            }
        }
        // One shared copy of each id the batches name by reference.
        let ids: Vec<Arc<str>> = rt.request_ids.into_iter().map(Arc::from).collect();
        for (j, it) in rt.iterations.into_iter().enumerate() {
            let label = format!("{at}.iterations[{j}] (iteration_id {})", it.iteration_id);
            match iteration(it, &ids) {
                Ok(value) => batch.iterations.push(Item { label, value }),
                Err(e) => out.reject(ItemKind::Iteration, &label, e),
            }
        }
        out.batches.push(batch);
    }
    out
}

fn resource(r: Option<v1::Resource>) -> Result<Resource, FieldError> {
    let r = r.ok_or_else(|| FieldError::new("resource", "is missing"))?;
    let engine = match v1::EngineKind::try_from(r.engine) {
        Ok(v1::EngineKind::Vllm) => EngineKind::Vllm,
        Ok(v1::EngineKind::Sglang) => EngineKind::Sglang,
        Ok(v1::EngineKind::Trtllm) => EngineKind::Trtllm,
        Ok(v1::EngineKind::Other | v1::EngineKind::Unspecified) => EngineKind::Other,
        Err(_) => {
            return Err(FieldError::new(
                "resource.engine",
                format!("{} is not a known engine kind", r.engine),
            ));
        }
    };
    let role = match v1::Role::try_from(r.role) {
        Ok(v1::Role::Colocated | v1::Role::Unspecified) => Role::Colocated,
        Ok(v1::Role::Prefill) => Role::Prefill,
        Ok(v1::Role::Decode) => Role::Decode,
        Err(_) => {
            return Err(FieldError::new(
                "resource.role",
                format!("{} is not a known role", r.role),
            ));
        }
    };
    Ok(Resource {
        engine,
        engine_version: r.engine_version,
        model: r.model,
        instance_id: r.instance_id,
        role,
        host: r.host,
    })
}

/// The export's token texts by id: as many texts as ids, every id known, none given twice with
/// two texts (given twice with one, it is kept once).
fn texts_by_id(t: Option<v1::TokenTexts>) -> Result<Option<TextsById>, FieldError> {
    let Some(t) = t else {
        return Ok(None);
    };
    if t.text.len() != t.token_id.len() {
        return Err(FieldError::new(
            "token_texts.text",
            format!(
                "has {} elements but token_id has {}; give one text per id",
                t.text.len(),
                t.token_id.len()
            ),
        ));
    }
    let mut first: foldhash::HashMap<u32, usize> =
        foldhash::HashMap::with_capacity_and_hasher(t.token_id.len(), Default::default());
    let mut out = Vec::with_capacity(t.token_id.len());
    for (i, (id, text)) in t.token_id.into_iter().zip(t.text).enumerate() {
        if id == UNKNOWN_ID {
            return Err(FieldError::new(
                format!("token_texts.token_id[{i}]"),
                "is the unknown id (4294967295); a text by id needs a known id",
            ));
        }
        match first.entry(id) {
            Entry::Vacant(v) => {
                v.insert(out.len());
                out.push((id, text));
            }
            Entry::Occupied(o) if out[*o.get()].1 == text => {}
            Entry::Occupied(_) => {
                return Err(FieldError::new(
                    format!("token_texts.text[{i}]"),
                    format!("gives token id {id} a second, different text"),
                ));
            }
        }
    }
    Ok(Some(TextsById(out)))
}

/// 0 means "not given" for optional instants.
fn opt(t: i64) -> Option<i64> {
    (t != 0).then_some(t)
}

/// An optional string field: empty is not sent.
fn text(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn hex(bytes: &[u8]) -> Option<String> {
    (!bytes.is_empty()).then(|| model::hex(bytes))
}

fn request(r: v1::Request) -> Result<RequestTrace, FieldError> {
    let finish_reason = match v1::FinishReason::try_from(r.finish_reason) {
        Ok(v1::FinishReason::Unspecified) => FinishReason::Unknown,
        Ok(v1::FinishReason::Stop) => FinishReason::Stop,
        Ok(v1::FinishReason::Length) => FinishReason::Length,
        Ok(v1::FinishReason::Abort) => FinishReason::Abort,
        Ok(v1::FinishReason::Error) => FinishReason::Error,
        Err(_) => {
            return Err(FieldError::new(
                "finish_reason",
                format!("{} is not a known finish reason", r.finish_reason),
            ));
        }
    };
    let tokens = match r.tokens {
        Some(cols) => tokens(cols)?,
        None => Vec::new(),
    };
    let sampling = r
        .sampling
        .map_or_else(SamplingParams::default, |s| SamplingParams {
            temperature: s.temperature,
            top_p: s.top_p,
            top_k: s.top_k,
            max_tokens: s.max_tokens,
            seed: s.seed,
        });
    let mut trace = RequestTrace {
        request_id: r.request_id,
        trace_id: hex(&r.trace_id),
        parent_span_id: hex(&r.parent_span_id),
        arrival_ns: r.arrival_ns,
        queued_ns: opt(r.queued_ns),
        first_scheduled_ns: opt(r.first_scheduled_ns),
        first_token_ns: opt(r.first_token_ns),
        finished_ns: r.finished_ns,
        finish_reason,
        prompt_tokens: r.prompt_tokens,
        output_tokens: r.output_tokens,
        cached_tokens: r.cached_tokens,
        prefill_chunks: r
            .prefill_chunks
            .into_iter()
            .map(|c| PrefillChunk {
                start_ns: c.start_ns,
                end_ns: c.end_ns,
                tokens: c.tokens,
                iteration: (c.iteration_id != 0).then_some(c.iteration_id),
            })
            .collect(),
        preemptions: r
            .preemptions
            .into_iter()
            .map(|p| Preemption {
                at_ns: p.at_ns,
                resumed_ns: opt(p.resumed_ns),
                recompute: p.recompute,
                aggressor: text(p.aggressor_request_id),
                recompute_tokens: (p.recompute_tokens != 0).then_some(p.recompute_tokens),
            })
            .collect(),
        kv_transfer: r.kv_transfer.map(|k| KvTransfer {
            start_ns: k.start_ns,
            end_ns: k.end_ns,
            bytes: (k.bytes != 0).then_some(k.bytes),
            blocks: (k.blocks != 0).then_some(k.blocks),
        }),
        sampling,
        tokens,
        served: Served {
            lora_adapter: text(r.lora_adapter),
            priority: r.priority,
            tenant: text(r.tenant),
            prefix_cache: r.prefix_cache.map(|p| PrefixCache {
                gpu_tokens: p.gpu_tokens,
                cpu_tokens: p.cpu_tokens,
                external_tokens: p.external_tokens,
                block_size: p.block_size,
                block_hashes: p.block_hashes,
                blocks: p.blocks,
            }),
        },
    };
    normalize(&mut trace);
    validate::request(&trace)?;
    Ok(trace)
}

fn known(id: u32) -> Option<u32> {
    (id != UNKNOWN_ID).then_some(id)
}

/// A column must be empty (not recorded) or have one element per token.
fn column<T>(name: &str, col: Vec<T>, n: usize) -> Result<Option<Vec<T>>, FieldError> {
    match col.len() {
        0 => Ok(None),
        len if len == n => Ok(Some(col)),
        len => Err(FieldError::new(
            format!("tokens.{name}"),
            format!(
                "has {len} elements but token_id has {n}; a column must be empty or one per token"
            ),
        )),
    }
}

/// A column that may come as varints or at a fixed width (`name` and `name_fixed`): one of them.
fn one_of<T>(name: &str, varints: Vec<T>, fixed: Vec<T>) -> Result<Vec<T>, FieldError> {
    match (varints.is_empty(), fixed.is_empty()) {
        (_, true) => Ok(varints),
        (true, false) => Ok(fixed),
        (false, false) => Err(FieldError::new(
            format!("tokens.{name}"),
            format!(
                "sent twice, as {name} ({} elements) and as {name}_fixed ({}); send one of them",
                varints.len(),
                fixed.len()
            ),
        )),
    }
}

/// [`column`] of a column that may come either way ([`one_of`]).
fn either_column<T>(
    name: &str,
    varints: Vec<T>,
    fixed: Vec<T>,
    n: usize,
) -> Result<Option<Vec<T>>, FieldError> {
    column(name, one_of(name, varints, fixed)?, n)
}

fn tokens(c: v1::TokenColumns) -> Result<Vec<Token>, FieldError> {
    let token_id = one_of("token_id", c.token_id, c.token_id_fixed)?;
    let n = token_id.len();
    let emitted = either_column("emitted_ns", c.emitted_ns, c.emitted_ns_fixed, n)?;
    let iteration = either_column("iteration_id", c.iteration_id, c.iteration_id_fixed, n)?;
    let logprob = column("logprob", c.logprob, n)?;
    let rank = column("rank", c.rank, n)?;
    let text = column("text", c.text, n)?;
    let special = column("special", c.special, n)?;
    let scheduled = either_column("scheduled_ns", c.scheduled_ns, c.scheduled_ns_fixed, n)?;
    let candidate_token_id = one_of(
        "candidate_token_id",
        c.candidate_token_id,
        c.candidate_token_id_fixed,
    )?;
    let batch_size = column("batch_size", c.batch_size, n)?;
    let waiting = column("waiting", c.waiting, n)?;
    let counts = column("candidate_count", c.candidate_count, n)?;
    let total: u64 = counts.iter().flatten().map(|&k| u64::from(k)).sum();
    for (name, len) in [
        ("candidate_token_id", candidate_token_id.len()),
        ("candidate_logprob", c.candidate_logprob.len()),
    ] {
        if len as u64 != total {
            return Err(FieldError::new(
                format!("tokens.{name}"),
                format!("has {len} elements but candidate_count adds up to {total}"),
            ));
        }
    }
    let cand_text = match c.candidate_text.len() {
        0 => None,
        len if len as u64 == total => Some(c.candidate_text),
        len => {
            return Err(FieldError::new(
                "tokens.candidate_text",
                format!(
                    "has {len} elements but candidate_count adds up to {total}; send none or one per candidate"
                ),
            ));
        }
    };

    let mut cand_ids = candidate_token_id.into_iter();
    let mut cand_lps = c.candidate_logprob.into_iter();
    let mut cand_texts = cand_text.map(|t| t.into_iter());
    let mut texts = text.map(|t| t.into_iter());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let special = match special.as_ref().map(|s| s[i]) {
            None => SpecialToken::None,
            Some(code) => special_token(code).ok_or_else(|| {
                FieldError::new(
                    format!("tokens.special[{i}]"),
                    format!("{code} is not a known special-token kind"),
                )
            })?,
        };
        let k = counts.as_ref().map_or(0, |c| c[i] as usize);
        let candidates = (0..k)
            .map(|_| Candidate {
                // Lengths were checked above, so the iterators cannot run dry.
                token_id: known(cand_ids.next().unwrap_or(UNKNOWN_ID)),
                logprob: cand_lps.next().unwrap_or_default(),
                text: cand_texts.as_mut().and_then(Iterator::next),
            })
            .collect();
        out.push(Token {
            token_id: known(token_id[i]),
            emitted_ns: emitted.as_ref().map(|e| e[i]),
            scheduled_ns: scheduled.as_ref().map(|e| e[i]),
            batch_size: batch_size.as_ref().map(|b| b[i]),
            waiting: waiting.as_ref().map(|w| w[i]),
            // 0: not known (a PD decode part's first token, made on the prefill instance).
            iteration: iteration
                .as_ref()
                .and_then(|it| (it[i] != 0).then_some(it[i])),
            logprob: logprob.as_ref().map(|l| l[i]),
            rank: rank.as_ref().and_then(|r| (r[i] != 0).then_some(r[i])),
            text: texts.as_mut().and_then(Iterator::next),
            special,
            candidates,
        });
    }
    Ok(out)
}

fn special_token(code: i32) -> Option<SpecialToken> {
    Some(match v1::SpecialToken::try_from(code).ok()? {
        v1::SpecialToken::None => SpecialToken::None,
        v1::SpecialToken::Eos => SpecialToken::Eos,
        v1::SpecialToken::Bos => SpecialToken::Bos,
        v1::SpecialToken::Pad => SpecialToken::Pad,
        v1::SpecialToken::Other => SpecialToken::Other,
    })
}

/// An iteration whose batch entries name their requests by id or by reference into `ids`
/// (`ResourceTraces.request_ids`).
fn iteration(it: v1::Iteration, ids: &[Arc<str>]) -> Result<Iteration, FieldError> {
    let batch = it
        .batch
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let request_id = batch_request(i, e.request_id, e.request_ref, ids)?;
            let phase = match v1::Phase::try_from(e.phase) {
                Ok(v1::Phase::Prefill) => Phase::Prefill,
                Ok(v1::Phase::Decode) => Phase::Decode,
                _ => {
                    return Err(FieldError::new(
                        format!("batch[{i}].phase"),
                        "must be PREFILL or DECODE",
                    ));
                }
            };
            let draft = match (e.draft_tokens, e.accepted_tokens) {
                (0, 0) => None,
                (proposed, accepted) if accepted > proposed => {
                    return Err(FieldError::new(
                        format!("batch[{i}].accepted_tokens"),
                        format!("{accepted} accepted of {proposed} draft tokens"),
                    ));
                }
                _ if phase == Phase::Prefill => {
                    return Err(FieldError::new(
                        format!("batch[{i}].draft_tokens"),
                        "draft tokens are verified in a DECODE entry, not a PREFILL one",
                    ));
                }
                (proposed, accepted) => Some(Draft { proposed, accepted }),
            };
            Ok(BatchEntry {
                request_id,
                phase,
                tokens: e.tokens,
                prefill_offset: e.prefill_offset,
                draft,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let it = Iteration {
        iteration_id: it.iteration_id,
        start_ns: it.start_ns,
        end_ns: it.end_ns,
        batch,
        running: it.running,
        waiting: it.waiting,
        kv_cache_usage: it.kv_cache_usage,
    };
    validate::iteration(&it)?;
    Ok(it)
}

/// The request a batch entry names: by its id or by `request_ref` (1 + its position in `ids`).
fn batch_request(
    i: usize,
    id: String,
    reference: u32,
    ids: &[Arc<str>],
) -> Result<Arc<str>, FieldError> {
    if reference == 0 {
        return Ok(Arc::from(id));
    }
    if !id.is_empty() {
        return Err(FieldError::new(
            format!("batch[{i}]"),
            "has both request_id and request_ref; set one",
        ));
    }
    ids.get(reference as usize - 1).cloned().ok_or_else(|| {
        FieldError::new(
            format!("batch[{i}].request_ref"),
            format!(
                "{reference} is past the {} ids in the resource's request_ids",
                ids.len()
            ),
        )
    })
}

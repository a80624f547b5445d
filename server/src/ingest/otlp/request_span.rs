//! Maps one request span carrying the `gen_ai.*` request conventions to the model: vLLM's
//! `llm_request`, TensorRT-LLM's request span, and an SGLang root span (whose stage spans
//! `sglang.rs` adds). Latencies arrive as seconds relative to the span start (= arrival).

use opentelemetry_proto::tonic::trace::v1::Span;

use tokenscope_core::model::{
    FinishReason, KvTransfer, Nanos, PrefillChunk, RequestTrace, SamplingParams,
    validate::FieldError,
};

use super::attrs::Attrs;
use super::{nanos, tokens};

pub const TTFT: &str = "gen_ai.latency.time_to_first_token";
pub const E2E: &str = "gen_ai.latency.e2e";
pub const QUEUE: &str = "gen_ai.latency.time_in_queue";
pub const PREFILL: &str = "gen_ai.latency.time_in_model_prefill";
pub const KV_TRANSFER: &str = "gen_ai.latency.kv_cache_transfer_time";
pub const REQUEST_ID: &str = "gen_ai.request.id";

/// Whether a span describes a whole request (and not a stage or an unrelated span).
pub fn is_request_span(span: &Span) -> bool {
    let a = Attrs::new(&span.attributes);
    span.name == "llm_request"
        || a.has(E2E)
        || a.has(TTFT)
        || (a.has(REQUEST_ID) && tokens::present(span))
}

/// The model name a span reports, if any.
pub fn model_of(span: &Span) -> Option<String> {
    let a = Attrs::new(&span.attributes);
    ["gen_ai.response.model", "gen_ai.request.model"]
        .iter()
        .find_map(|k| a.str(k).ok().flatten().map(str::to_string))
}

fn finish_reason(a: &Attrs) -> Result<FinishReason, FieldError> {
    let key = "gen_ai.response.finish_reasons";
    let first = match a.str_array(key) {
        Ok(list) => list.and_then(|l| l.into_iter().next()),
        // Some exporters send a single string instead of an array.
        Err(_) => a.str(key)?.map(str::to_string),
    };
    Ok(match first.as_deref() {
        None => FinishReason::Unknown,
        Some("stop" | "eos" | "stop_sequence" | "end_turn") => FinishReason::Stop,
        Some("length" | "max_tokens") => FinishReason::Length,
        Some("abort" | "cancelled" | "canceled") => FinishReason::Abort,
        Some("error") => FinishReason::Error,
        Some(_) => FinishReason::Unknown,
    })
}

fn sampling(a: &Attrs) -> Result<SamplingParams, FieldError> {
    Ok(SamplingParams {
        temperature: a.f64("gen_ai.request.temperature")?.map(|v| v as f32),
        top_p: a.f64("gen_ai.request.top_p")?.map(|v| v as f32),
        top_k: a
            .i64("gen_ai.request.top_k")?
            .map(|v| v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32),
        max_tokens: a.u32("gen_ai.request.max_tokens")?,
        seed: a.i64("gen_ai.request.seed")?.map(|v| v as u64),
    })
}

fn count(a: &Attrs, keys: &[&str]) -> Result<u32, FieldError> {
    for k in keys {
        if let Some(v) = a.u32(k)? {
            return Ok(v);
        }
    }
    Ok(0)
}

/// Maps the span; stage details (chunks, queue) come from its attributes as far as they go.
/// `request_id` overrides `gen_ai.request.id` for engines that name requests otherwise.
pub fn request(
    span: &Span,
    request_id: Option<String>,
    warnings: &mut Vec<String>,
) -> Result<RequestTrace, FieldError> {
    let a = Attrs::new(&span.attributes);
    let arrival = nanos(span.start_time_unix_nano, "start_time_unix_nano")?;
    let end = nanos(span.end_time_unix_nano, "end_time_unix_nano")?;
    let after = |d: Option<Nanos>| d.map(|d| arrival + d);
    let ttft = a.seconds_ns(TTFT)?;
    let e2e = a.seconds_ns(E2E)?;
    let queue = a.seconds_ns(QUEUE)?;
    let prefill = a.seconds_ns(PREFILL)?;
    let finish = finish_reason(&a)?;
    let tokens = tokens::tokens(span, finish)?;

    let request_id =
        match request_id.map_or_else(|| a.string_like(REQUEST_ID), |id| Ok(Some(id)))? {
            Some(id) => id,
            None => {
                let id = tokenscope_core::model::hex(&span.span_id);
                warnings.push(format!(
                    "span {id}: no {REQUEST_ID}; the span id is used as the request id"
                ));
                id
            }
        };
    // vLLM ends the span when it processes the finished request, a little after the last token;
    // arrival + e2e is the engine's own measure.
    let finished = after(e2e).unwrap_or(end);
    let first_token = after(ttft).or_else(|| tokens.first().and_then(|t| t.emitted_ns));
    // vLLM: prefill = first token − scheduled, queue = scheduled − queued.
    let first_scheduled = match (first_token, prefill) {
        (Some(ft), Some(p)) => Some(ft - p),
        _ => after(queue),
    };
    let queued = match (first_scheduled, queue) {
        (Some(s), Some(q)) => Some((s - q).max(arrival)),
        _ => None,
    };
    let prompt_tokens = count(
        &a,
        &["gen_ai.usage.prompt_tokens", "gen_ai.usage.input_tokens"],
    )?;
    let cached_tokens = count(
        &a,
        &[
            "gen_ai.usage.cached_tokens",
            "gen_ai.usage.cache_read_input_tokens",
        ],
    )?;
    let output_tokens = count(
        &a,
        &[
            "gen_ai.usage.completion_tokens",
            "gen_ai.usage.output_tokens",
        ],
    )?;
    let prefill_chunks = match (first_scheduled, first_token) {
        (Some(s), Some(ft)) if ft >= s => vec![PrefillChunk {
            start_ns: s,
            end_ns: ft,
            tokens: prompt_tokens.saturating_sub(cached_tokens),
            iteration: None,
        }],
        _ => Vec::new(),
    };
    let kv_transfer = kv_transfer(span, &a, arrival)?;
    Ok(RequestTrace {
        request_id,
        trace_id: (!span.trace_id.is_empty()).then(|| tokenscope_core::model::hex(&span.trace_id)),
        parent_span_id: (!span.parent_span_id.is_empty())
            .then(|| tokenscope_core::model::hex(&span.parent_span_id)),
        arrival_ns: arrival,
        queued_ns: queued,
        first_scheduled_ns: first_scheduled,
        first_token_ns: first_token,
        finished_ns: finished,
        finish_reason: finish,
        prompt_tokens,
        output_tokens: if tokens.is_empty() { output_tokens } else { 0 },
        cached_tokens,
        prefill_chunks,
        preemptions: Vec::new(),
        kv_transfer,
        sampling: sampling(&a)?,
        tokens,
        // Its tenant is the mapping's (`otlp::Mapping`).
        served: Default::default(),
    })
}

/// TensorRT-LLM marks a disaggregated request's KV transfer with events, or reports its length.
fn kv_transfer(span: &Span, a: &Attrs, arrival: Nanos) -> Result<Option<KvTransfer>, FieldError> {
    let event = |name: &str| span.events.iter().find(|e| e.name == name);
    if let (Some(s), Some(e)) = (
        event("kv_cache_transfer_start"),
        event("kv_cache_transfer_end"),
    ) {
        return Ok(Some(KvTransfer {
            start_ns: nanos(
                s.time_unix_nano,
                "events[kv_cache_transfer_start].time_unix_nano",
            )?,
            end_ns: nanos(
                e.time_unix_nano,
                "events[kv_cache_transfer_end].time_unix_nano",
            )?,
            bytes: None,
            blocks: None,
        }));
    }
    // Only a duration: the transfer precedes the first token, so it is placed from arrival.
    Ok(a.seconds_ns(KV_TRANSFER)?.map(|d| KvTransfer {
        start_ns: arrival,
        end_ns: arrival + d,
        bytes: None,
        blocks: None,
    }))
}

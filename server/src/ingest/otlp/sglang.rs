//! SGLang (`--enable-trace`): a root span per request (`rid`, named "{role} Req {rid[:8]}"), a
//! span per worker thread under it (`thread_label`, `tp_rank`, `host_id`, `pid`), and stage
//! spans under those (`request_process`, `prefill_waiting`, `chunked_prefill`, `prefill_forward`,
//! `decode_loop`/`decode_forward`, PD stages such as `prefill_transfer_kv_cache`), with events
//! such as `schedule` and `retract`. Stage spans are exported as they end, before their root.

use std::collections::{HashMap, HashSet};

use opentelemetry_proto::tonic::trace::v1::Span;

use tokenscope_core::model::{
    KvTransfer, Preemption, PrefillChunk, RequestTrace, Role, validate::FieldError,
};

use super::attrs::Attrs;
use super::{nanos, request_span};

/// Whether a span is SGLang-shaped (root, thread or a known stage).
pub fn is_sglang_span(span: &Span) -> bool {
    let a = Attrs::new(&span.attributes);
    a.has("rid") || a.has("thread_label") || STAGES.contains(&span.name.as_str())
}

pub fn is_root(span: &Span) -> bool {
    Attrs::new(&span.attributes).has("rid")
}

const STAGES: &[&str] = &[
    "tokenize",
    "dispatch",
    "api_server_dispatch",
    "request_process",
    "prefill_waiting",
    "chunked_prefill",
    "prefill_forward",
    "decode_loop",
    "decode_forward",
    "prefill_prepare",
    "prefill_bootstrap",
    "prefill_transfer_kv_cache",
    "decode_prepare",
    "decode_bootstrap",
    "decode_waiting",
    "decode_transferred",
];

/// The role in the root span's name ("prefill Req 3f2a9c1e").
fn role(root: &Span) -> Role {
    match root.name.split_whitespace().next() {
        Some("prefill") => Role::Prefill,
        Some("decode") => Role::Decode,
        _ => Role::Colocated,
    }
}

/// Maps a root span and its descendants. Stages are taken from the lowest tensor-parallel rank
/// (every rank records the same steps) and from threads without a rank (the tokenizer).
pub fn request<'a>(
    root: &Span,
    descendants: &[&'a Span],
    warnings: &mut Vec<String>,
) -> Result<(RequestTrace, Role), FieldError> {
    let a = Attrs::new(&root.attributes);
    let rid = a
        .string_like("rid")?
        .ok_or_else(|| FieldError::new("attributes[\"rid\"]", "is missing on the root span"))?;
    let mut r = request_span::request(root, Some(rid), warnings)?;

    let ranks: HashMap<&[u8], Option<i64>> = descendants
        .iter()
        .filter(|s| Attrs::new(&s.attributes).has("thread_label"))
        .map(|s| {
            (
                s.span_id.as_slice(),
                Attrs::new(&s.attributes).i64("tp_rank").ok().flatten(),
            )
        })
        .collect();
    let lowest = ranks.values().flatten().min().copied();
    let keep: HashSet<&[u8]> = ranks
        .iter()
        .filter(|(_, rank)| rank.is_none() || **rank == lowest)
        .map(|(id, _)| *id)
        .collect();
    // A stage belongs to the thread it descends from; walk up to find it.
    let parent: HashMap<&[u8], &[u8]> = descendants
        .iter()
        .map(|s| (s.span_id.as_slice(), s.parent_span_id.as_slice()))
        .collect();
    let thread_of = |s: &'a Span| -> Option<&'a [u8]> {
        let mut id = s.parent_span_id.as_slice();
        for _ in 0..32 {
            if ranks.contains_key(id) {
                return Some(id);
            }
            id = parent.get(id)?;
        }
        None
    };
    let mut stages: Vec<&Span> = descendants
        .iter()
        .copied()
        .filter(|s| STAGES.contains(&s.name.as_str()))
        .filter(|s| thread_of(s).is_some_and(|t| keep.contains(t)))
        .collect();
    stages.sort_by_key(|s| s.start_time_unix_nano);
    let time = |t: u64, what: &str| nanos(t, what);
    let first = |name: &str| stages.iter().find(|s| s.name == name);

    if let Some(w) = first("prefill_waiting").or(first("decode_waiting")) {
        r.queued_ns = Some(time(w.start_time_unix_nano, "prefill_waiting.start")?);
        r.first_scheduled_ns = Some(time(w.end_time_unix_nano, "prefill_waiting.end")?);
    }
    let chunks: Vec<&&Span> = stages
        .iter()
        .filter(|s| s.name == "chunked_prefill" || s.name == "prefill_forward")
        .collect();
    if !chunks.is_empty() {
        let single = chunks.len() == 1;
        r.prefill_chunks = chunks
            .iter()
            .map(|s| {
                Ok(PrefillChunk {
                    start_ns: time(s.start_time_unix_nano, "chunk.start")?,
                    end_ns: time(s.end_time_unix_nano, "chunk.end")?,
                    // Chunk sizes are not exported; a lone chunk is the whole uncached prompt.
                    tokens: if single {
                        r.prompt_tokens.saturating_sub(r.cached_tokens)
                    } else {
                        0
                    },
                    iteration: None,
                })
            })
            .collect::<Result<_, FieldError>>()?;
        if r.first_scheduled_ns.is_none() {
            r.first_scheduled_ns = r.prefill_chunks.first().map(|c| c.start_ns);
        }
        // The first token comes out of the last prefill forward (unless a decode instance
        // received it with the KV cache; then the root's TTFT stands).
        if role(root) != Role::Decode && !Attrs::new(&root.attributes).has(request_span::TTFT) {
            r.first_token_ns = r.prefill_chunks.last().map(|c| c.end_ns);
        }
    }
    if let Some(kv) = first("prefill_transfer_kv_cache").or(first("decode_transferred")) {
        r.kv_transfer = Some(KvTransfer {
            start_ns: time(kv.start_time_unix_nano, "kv_transfer.start")?,
            end_ns: time(kv.end_time_unix_nano, "kv_transfer.end")?,
            bytes: None,
            blocks: None,
        });
    }
    let mut events: Vec<(u64, &str)> = stages
        .iter()
        .flat_map(|s| s.events.iter().map(|e| (e.time_unix_nano, e.name.as_str())))
        .collect();
    events.sort();
    for (k, (at, name)) in events.iter().enumerate() {
        if *name == "retract" {
            let resumed = events[k + 1..]
                .iter()
                .find(|(_, n)| *n == "schedule")
                .map(|(t, _)| *t);
            r.preemptions.push(Preemption {
                at_ns: time(*at, "events[retract].time_unix_nano")?,
                resumed_ns: resumed
                    .map(|t| time(t, "events[schedule].time_unix_nano"))
                    .transpose()?,
                recompute: true,
                ..Preemption::default()
            });
        }
    }
    Ok((r, role(root)))
}

/// A root for stage spans whose real root never arrived: spans their extent, named after the
/// missing root's span id, so the request is still stored and findable.
pub fn stand_in_root(spans: &[Span]) -> Span {
    let ids: HashSet<&[u8]> = spans.iter().map(|s| s.span_id.as_slice()).collect();
    let root_id = spans
        .iter()
        .find(|s| !ids.contains(s.parent_span_id.as_slice()))
        .map(|s| s.parent_span_id.clone())
        .unwrap_or_default();
    let rid = format!("sglang-{}", tokenscope_core::model::hex(&root_id));
    Span {
        trace_id: spans
            .first()
            .map(|s| s.trace_id.clone())
            .unwrap_or_default(),
        span_id: root_id,
        name: "Req (root missing)".into(),
        start_time_unix_nano: spans
            .iter()
            .map(|s| s.start_time_unix_nano)
            .min()
            .unwrap_or(0),
        end_time_unix_nano: spans
            .iter()
            .map(|s| s.end_time_unix_nano)
            .max()
            .unwrap_or(0),
        attributes: vec![opentelemetry_proto::tonic::common::v1::KeyValue {
            key: "rid".into(),
            value: Some(opentelemetry_proto::tonic::common::v1::AnyValue {
                value: Some(
                    opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(rid),
                ),
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

//! OpenAI-compatible responses with logprobs, as vLLM, SGLang and OpenAI return them: chat
//! (`choices[].logprobs.content[]` with `top_logprobs`) and completions (`choices[].logprobs`
//! with `tokens`, `token_logprobs`, `top_logprobs`). One JSON response, an array, or JSONL.
//!
//! These carry no per-token times and no rank: the rank is derived from the candidates when the
//! chosen token is among them. vLLM's `return_tokens_as_token_ids` form (`"token_id:1234"`)
//! gives the token id as well.

use serde_json::Value;

use tokenscope_core::model::{
    Candidate, EngineKind, FinishReason, RequestTrace, SpecialToken, Token,
    validate::{self, FieldError},
};

use super::{Imported, Options, json_values, resource};
use crate::error::Result;
use crate::ingest::{Item, ItemKind, ResourceBatch, normalize};

/// Text and id of an OpenAI token string.
fn token(s: &str) -> (Option<u32>, String) {
    match s.strip_prefix("token_id:").and_then(|id| id.parse().ok()) {
        Some(id) => (Some(id), String::new()),
        None => (None, s.to_string()),
    }
}

fn candidate(tok: &str, logprob: f64) -> Candidate {
    let (token_id, text) = token(tok);
    Candidate {
        token_id,
        text: (!text.is_empty() || token_id.is_none()).then_some(text),
        logprob: logprob as f32,
    }
}

/// Builds one output token from the chosen token and its alternatives.
fn make_token(tok: &str, logprob: Option<f64>, mut candidates: Vec<Candidate>) -> Token {
    let (token_id, text) = token(tok);
    candidates.sort_by(|a, b| b.logprob.total_cmp(&a.logprob));
    let text = (!text.is_empty() || token_id.is_none()).then_some(text);
    let mut t = Token {
        token_id,
        special: text
            .as_deref()
            .map_or(SpecialToken::None, SpecialToken::from_text),
        text,
        logprob: logprob.map(|l| l as f32),
        candidates,
        ..Token::default()
    };
    t.rank = t.rank_from_candidates();
    t
}

fn chat_tokens(lp: &Value, at: &str) -> Result<Vec<Token>, FieldError> {
    let content = lp.get("content").and_then(Value::as_array).ok_or_else(|| {
        FieldError::new(
            format!("{at}.logprobs.content"),
            "is missing: request logprobs=true",
        )
    })?;
    content
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let tok = c.get("token").and_then(Value::as_str).ok_or_else(|| {
                FieldError::new(
                    format!("{at}.logprobs.content[{i}].token"),
                    "is missing or not a string",
                )
            })?;
            let cands = c
                .get("top_logprobs")
                .and_then(Value::as_array)
                .map(|top| {
                    top.iter()
                        .filter_map(|t| {
                            Some(candidate(
                                t.get("token")?.as_str()?,
                                t.get("logprob")?.as_f64()?,
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default();
            Ok(make_token(
                tok,
                c.get("logprob").and_then(Value::as_f64),
                cands,
            ))
        })
        .collect()
}

fn completion_tokens(lp: &Value, at: &str) -> Result<Vec<Token>, FieldError> {
    let tokens = lp.get("tokens").and_then(Value::as_array).ok_or_else(|| {
        FieldError::new(
            format!("{at}.logprobs.tokens"),
            "is missing: request logprobs",
        )
    })?;
    let lps = lp.get("token_logprobs").and_then(Value::as_array);
    let tops = lp.get("top_logprobs").and_then(Value::as_array);
    tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let tok = t.as_str().ok_or_else(|| {
                FieldError::new(format!("{at}.logprobs.tokens[{i}]"), "is not a string")
            })?;
            let cands = tops
                .and_then(|t| t.get(i))
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some(candidate(k, v.as_f64()?)))
                        .collect()
                })
                .unwrap_or_default();
            Ok(make_token(
                tok,
                lps.and_then(|l| l.get(i)).and_then(Value::as_f64),
                cands,
            ))
        })
        .collect()
}

fn finish(v: Option<&Value>) -> FinishReason {
    match v.and_then(Value::as_str) {
        Some("stop" | "eos") => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("abort" | "cancelled") => FinishReason::Abort,
        Some("error") => FinishReason::Error,
        _ => FinishReason::Unknown,
    }
}

pub fn responses(text: &str, opts: &Options) -> Result<Imported> {
    let mut out = Imported::default();
    let mut batches: Vec<ResourceBatch> = Vec::new();
    for located in json_values(text)? {
        let (at_file, resp) = (&located.at, &located.value);
        let id = resp
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let model = resp.get("model").and_then(Value::as_str);
        let created = resp.get("created").and_then(Value::as_i64);
        let choices = resp
            .get("choices")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        if choices.is_empty() {
            out.decoded.reject(
                ItemKind::Request,
                &format!("{at_file} (id {id:?})"),
                FieldError::new("choices", "is missing or empty"),
            );
            continue;
        }
        for (k, choice) in choices.iter().enumerate() {
            let at = format!("choices[{k}]");
            let rid = if choices.len() == 1 {
                id.clone()
            } else {
                format!("{id}-{k}")
            };
            let label = format!("{at_file} {at} (id {rid:?})");
            let result = (|| {
                if rid.is_empty() {
                    return Err(FieldError::new("id", "is missing"));
                }
                let created = created.ok_or_else(|| FieldError::new("created", "is missing"))?;
                let lp = choice
                    .get("logprobs")
                    .filter(|v| !v.is_null())
                    .ok_or_else(|| {
                        FieldError::new(
                            format!("{at}.logprobs"),
                            "is missing: request the response with logprobs",
                        )
                    })?;
                let tokens = if lp.get("content").is_some() {
                    chat_tokens(lp, &at)?
                } else {
                    completion_tokens(lp, &at)?
                };
                let arrival = created.saturating_mul(1_000_000_000);
                let usage = resp.get("usage");
                let count = |p: &str| {
                    usage
                        .and_then(|u| u.pointer(p))
                        .and_then(Value::as_u64)
                        .unwrap_or(0) as u32
                };
                let mut r = RequestTrace {
                    request_id: rid.clone(),
                    arrival_ns: arrival,
                    // The response says when it was created, not how long anything took.
                    finished_ns: arrival,
                    finish_reason: finish(choice.get("finish_reason")),
                    prompt_tokens: count("/prompt_tokens"),
                    cached_tokens: count("/prompt_tokens_details/cached_tokens"),
                    tokens,
                    ..RequestTrace::default()
                };
                normalize(&mut r);
                validate::request(&r)?;
                Ok(r)
            })();
            match result {
                Ok(r) => {
                    let res = resource(opts, EngineKind::Other, model);
                    match batches.iter_mut().find(|b| b.resource == res) {
                        Some(b) => b.requests.push(Item { label, value: r }),
                        None => batches.push(ResourceBatch {
                            resource: res,
                            requests: vec![Item { label, value: r }],
                            iterations: Vec::new(),
                            texts_by_id: None,
                        }),
                    }
                }
                Err(e) => out.decoded.reject(ItemKind::Request, &label, e),
            }
        }
    }
    out.warnings.push("OpenAI-style responses carry no per-token times: word choice only; times are the response's `created`".into());
    out.decoded.batches = batches;
    Ok(out)
}

//! The LoongSuite GenAI token layer: per-token times, batch load and candidates on any engine's
//! request span, either as span events or as per-token array attributes.
//!
//! Candidates arrive with the emitted token FIRST and the rest by rank; the model wants them in
//! rank order with the chosen token's rank, so they are re-sorted here.

use opentelemetry_proto::tonic::trace::v1::Span;

use tokenscope_core::model::{
    Candidate, FinishReason, Nanos, SpecialToken, Token, validate::FieldError,
};

use super::attrs::{self, Attrs};
use super::nanos;

pub const EVENT_GENERATED: &str = "gen_ai.token.generated";
pub const EVENT_SCHEDULED: &str = "gen_ai.token.scheduled";

/// Attribute names with the aliases seen in engine forks, preferred first.
const TIME_TO_GENERATE: &[&str] = &[
    "gen_ai.response.per_token_time_to_generate",
    "gen_ai.latency.per_token_generation_time",
];
const TIME_TO_SCHEDULE: &[&str] = &[
    "gen_ai.response.per_token_time_to_schedule",
    "gen_ai.latency.per_token_scheduled_time",
];
const BATCH_SIZE: &[&str] = &["gen_ai.iteration.per_token_batch_size"];
const WAITING: &[&str] = &["gen_ai.iteration.per_token_waiting_requests"];
const CAND_IDS: &[&str] = &[
    "gen_ai.response.candidate.per_position_token_ids",
    "gen_ai.response.per_token_candidate_token_ids",
];
const CAND_TEXTS: &[&str] = &[
    "gen_ai.response.candidate.per_position_decoded_tokens",
    "gen_ai.response.per_token_candidate_decoded_tokens",
];
const CAND_LOGPROBS: &[&str] = &[
    "gen_ai.response.candidate.per_position_logprobs",
    "gen_ai.response.per_token_candidate_tokens_logprobs",
];

/// Whether a span carries token-level data in either form.
pub fn present(span: &Span) -> bool {
    let a = Attrs::new(&span.attributes);
    span.events.iter().any(|e| e.name == EVENT_GENERATED)
        || TIME_TO_GENERATE.iter().chain(CAND_IDS).any(|k| a.has(k))
}

fn first_key<'a>(a: &Attrs, keys: &[&'a str]) -> &'a str {
    keys.iter().copied().find(|k| a.has(k)).unwrap_or(keys[0])
}

/// The tokens of a request span. `finish` decides whether a trailing empty token is the EOS.
pub fn tokens(span: &Span, finish: FinishReason) -> Result<Vec<Token>, FieldError> {
    let mut out = if span.events.iter().any(|e| e.name == EVENT_GENERATED) {
        from_events(span)?
    } else {
        from_arrays(span)?
    };
    flag_special(&mut out, finish);
    Ok(out)
}

/// One emitted-first candidate list → (chosen id, chosen logprob, chosen text, candidates by rank, rank).
struct Position {
    ids: Vec<i64>,
    texts: Option<Vec<String>>,
    logprobs: Vec<f64>,
}

fn token_from(pos: Position, at: &str) -> Result<Token, FieldError> {
    let n = pos.ids.len();
    if n == 0 {
        return Err(FieldError::new(
            format!("{at}.token_ids"),
            "is empty: the emitted token must come first",
        ));
    }
    if pos.logprobs.len() != n || pos.texts.as_ref().is_some_and(|t| t.len() != n) {
        return Err(FieldError::new(
            at.to_string(),
            format!(
                "candidate arrays of mismatched length: {n} token ids, {} logprobs, {} texts",
                pos.logprobs.len(),
                pos.texts.as_ref().map_or(n, Vec::len)
            ),
        ));
    }
    let id = |v: i64| {
        u32::try_from(v).map_err(|_| {
            FieldError::new(format!("{at}.token_ids"), format!("{v} is not a token id"))
        })
    };
    let mut cands: Vec<Candidate> = Vec::with_capacity(n);
    for k in 0..n {
        let token_id = id(pos.ids[k])?;
        // The emitted token may be repeated among the top-k; keep it once.
        if k > 0 && Some(token_id) == cands[0].token_id {
            continue;
        }
        cands.push(Candidate {
            token_id: Some(token_id),
            text: pos.texts.as_ref().map(|t| t[k].clone()),
            logprob: pos.logprobs[k] as f32,
        });
    }
    let chosen = cands[0].clone();
    // Stable sort: among equal logprobs the emitted token keeps the better rank.
    cands.sort_by(|a, b| b.logprob.total_cmp(&a.logprob));
    let rank = cands
        .iter()
        .position(|c| c.token_id == chosen.token_id)
        .map(|r| r as u32 + 1);
    Ok(Token {
        token_id: chosen.token_id,
        logprob: Some(chosen.logprob),
        text: chosen.text.clone(),
        rank,
        candidates: cands,
        ..Token::default()
    })
}

fn from_events(span: &Span) -> Result<Vec<Token>, FieldError> {
    let mut out = Vec::new();
    let scheduled: Vec<_> = span
        .events
        .iter()
        .filter(|e| e.name == EVENT_SCHEDULED)
        .collect();
    for (i, e) in span
        .events
        .iter()
        .filter(|e| e.name == EVENT_GENERATED)
        .enumerate()
    {
        let at = format!("events[{EVENT_GENERATED}][{i}]");
        let a = Attrs::new(&e.attributes);
        let pos = Position {
            ids: a
                .i64_array("gen_ai.response.candidate.token_ids")?
                .unwrap_or_default(),
            texts: a.str_array("gen_ai.response.candidate.decoded_tokens")?,
            logprobs: a
                .f64_array("gen_ai.response.candidate.logprobs")?
                .unwrap_or_default(),
        };
        let mut token = token_from(pos, &at)?;
        token.emitted_ns = Some(nanos(e.time_unix_nano, &format!("{at}.time_unix_nano"))?);
        // The k-th scheduled event belongs to the k-th generated token.
        if let Some(s) = scheduled.get(i) {
            let sa = Attrs::new(&s.attributes);
            token.scheduled_ns = Some(nanos(
                s.time_unix_nano,
                &format!("events[{EVENT_SCHEDULED}][{i}].time_unix_nano"),
            )?);
            token.batch_size = sa.u32("gen_ai.iteration.batch_size")?;
            token.waiting = sa.u32("gen_ai.iteration.waiting_requests")?;
        }
        out.push(token);
    }
    Ok(out)
}

fn from_arrays(span: &Span) -> Result<Vec<Token>, FieldError> {
    let a = Attrs::new(&span.attributes);
    let start = nanos(span.start_time_unix_nano, "start_time_unix_nano")?;
    let key = |keys| first_key(&a, keys);
    let gen_times = a.f64_array(key(TIME_TO_GENERATE))?;
    let sched_times = a.f64_array(key(TIME_TO_SCHEDULE))?;
    let batch = a.i64_array(key(BATCH_SIZE))?;
    let waiting = a.i64_array(key(WAITING))?;
    let ids = a.nested(key(CAND_IDS), "integers", attrs::integer)?;
    let texts = a.nested(key(CAND_TEXTS), "strings", attrs::string)?;
    let logprobs = a.nested(key(CAND_LOGPROBS), "numbers", attrs::number)?;
    let n = gen_times
        .as_ref()
        .map(Vec::len)
        .or(ids.as_ref().map(Vec::len))
        .unwrap_or(0);
    let check = |name: &str, len: Option<usize>| match len {
        Some(l) if l != n => Err(FieldError::new(
            format!("attributes[{name:?}]"),
            format!(
                "has {l} elements but the span has {n} tokens: per-token arrays of mismatched length"
            ),
        )),
        _ => Ok(()),
    };
    check(key(TIME_TO_GENERATE), gen_times.as_ref().map(Vec::len))?;
    check(key(TIME_TO_SCHEDULE), sched_times.as_ref().map(Vec::len))?;
    check(key(BATCH_SIZE), batch.as_ref().map(Vec::len))?;
    check(key(WAITING), waiting.as_ref().map(Vec::len))?;
    check(key(CAND_IDS), ids.as_ref().map(Vec::len))?;
    check(key(CAND_TEXTS), texts.as_ref().map(Vec::len))?;
    check(key(CAND_LOGPROBS), logprobs.as_ref().map(Vec::len))?;
    let offset = |s: f64, what: &str, i: usize| -> Result<Nanos, FieldError> {
        if !(s.is_finite() && (0.0..1.0e6).contains(&s)) {
            return Err(FieldError::new(
                format!("attributes[{what:?}][{i}]"),
                format!("{s} is not seconds since the span start"),
            ));
        }
        Ok(start + (s * 1e9).round() as Nanos)
    };
    let count = |v: i64, what: &str, i: usize| {
        u32::try_from(v).map_err(|_| {
            FieldError::new(
                format!("attributes[{what:?}][{i}]"),
                format!("{v} is not a count"),
            )
        })
    };
    (0..n)
        .map(|i| {
            let mut token = match (&ids, &logprobs) {
                (Some(ids), Some(lps)) => token_from(
                    Position {
                        ids: ids[i].clone(),
                        texts: texts.as_ref().map(|t| t[i].clone()),
                        logprobs: lps[i].clone(),
                    },
                    &format!("position[{i}]"),
                )?,
                _ => Token::default(),
            };
            token.emitted_ns = gen_times
                .as_ref()
                .map(|t| offset(t[i], key(TIME_TO_GENERATE), i))
                .transpose()?;
            token.scheduled_ns = sched_times
                .as_ref()
                .map(|t| offset(t[i], key(TIME_TO_SCHEDULE), i))
                .transpose()?;
            token.batch_size = batch
                .as_ref()
                .map(|b| count(b[i], key(BATCH_SIZE), i))
                .transpose()?;
            token.waiting = waiting
                .as_ref()
                .map(|w| count(w[i], key(WAITING), i))
                .transpose()?;
            Ok(token)
        })
        .collect()
}

/// Flags control tokens from their text, so they are never rendered as nothing. A stop-finished
/// request whose last token decoded to "" ended on an EOS the detokenizer hid.
fn flag_special(tokens: &mut [Token], finish: FinishReason) {
    let n = tokens.len();
    for (i, t) in tokens.iter_mut().enumerate() {
        let kind = t
            .text
            .as_deref()
            .map_or(SpecialToken::None, SpecialToken::from_text);
        t.special = match kind {
            SpecialToken::None
                if i + 1 == n && finish == FinishReason::Stop && t.text.as_deref() == Some("") =>
            {
                SpecialToken::Eos
            }
            k => k,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emitted_first_candidates_are_put_in_rank_order() {
        let t = token_from(
            Position {
                ids: vec![7, 3, 7, 9],
                texts: None,
                logprobs: vec![-2.3, -0.1, -2.3, -3.0],
            },
            "p",
        )
        .unwrap();
        assert_eq!(t.token_id, Some(7));
        assert_eq!(t.rank, Some(2));
        let order: Vec<u32> = t.candidates.iter().filter_map(|c| c.token_id).collect();
        assert_eq!(
            order,
            [3, 7, 9],
            "duplicate of the emitted token dropped, rest by logprob"
        );
    }

    #[test]
    fn per_token_arrays_of_mismatched_length_are_rejected() {
        use opentelemetry_proto::tonic::common::v1::{
            AnyValue, ArrayValue, KeyValue, any_value::Value,
        };
        let array = |key: &str, values: Vec<Value>| KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(Value::ArrayValue(ArrayValue {
                    values: values
                        .into_iter()
                        .map(|v| AnyValue { value: Some(v) })
                        .collect(),
                })),
            }),
            ..Default::default()
        };
        let span = Span {
            start_time_unix_nano: 1_796_022_000_000_000_000,
            attributes: vec![
                array(
                    TIME_TO_GENERATE[0],
                    vec![
                        Value::DoubleValue(0.1),
                        Value::DoubleValue(0.2),
                        Value::DoubleValue(0.3),
                    ],
                ),
                array(BATCH_SIZE[0], vec![Value::IntValue(4), Value::IntValue(4)]),
            ],
            ..Default::default()
        };
        let e = tokens(&span, FinishReason::Stop).unwrap_err();
        assert_eq!(
            e.field,
            "attributes[\"gen_ai.iteration.per_token_batch_size\"]"
        );
        assert!(e.message.contains("mismatched length"), "{}", e.message);
    }
}

//! Per-token rows for the high-magnification views: latency, word choice, batch load at that step.

use crate::analysis::diagnosis::Thresholds;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};

use crate::model::{Draft, Nanos, Rank, RequestTrace, SpecialToken, Token, ms};

pub use crate::model::StepLoad;

/// Probability, entropy of the candidates, and margin to the best other candidate.
pub fn word_choice(t: &Token) -> (Option<f32>, Option<f32>, Option<f32>) {
    t.word_choice()
}

/// Other requests' prefills in the steps that ran wholly within `[from, to]`, and their prompt
/// tokens: what the engine computed instead of this request's next token. `steps` by start.
fn prefills_within(steps: &[StepLoad], from: Nanos, to: Nanos, own: &str) -> (Vec<String>, u32) {
    let first = steps.partition_point(|s| s.start_ns < from);
    let mut ids = BTreeSet::new();
    let mut tokens = 0;
    for s in steps[first..].iter().take_while(|s| s.start_ns < to) {
        if s.end_ns > to || s.prefill_requests.iter().all(|id| id == own) {
            continue;
        }
        tokens += s.prefill_tokens;
        ids.extend(s.prefill_requests.iter().filter(|id| *id != own).cloned());
    }
    (ids.into_iter().collect(), tokens)
}

/// Per-token rows of a request. `steps` are the instance's steps over the request's lifetime,
/// sorted by start (the store returns them so). Flags use `th`.
pub fn token_views(r: &RequestTrace, steps: &[StepLoad], th: &Thresholds) -> Vec<TokenView> {
    let by_id: HashMap<u64, &StepLoad> = steps.iter().map(|s| (s.iteration_id, s)).collect();
    let first_token = r.first_token_at();
    // A stretch of the answer that repeats one span (a repetition loop), flagged on its tokens.
    let looped = crate::analysis::diagnosis::speculation::repeated_span(&r.tokens);
    let mut previous = None;
    let mut in_step = 0u32;
    r.tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let latency_ms = match (i, t.emitted_ns, previous) {
                (0, Some(at), _) => Some(ms(at - r.arrival_ns)),
                (0, None, _) => first_token.map(|ft| ms(ft - r.arrival_ns)),
                (_, Some(at), Some(prev)) => Some(ms(at - prev)),
                _ => None,
            };
            let since = if i == 0 { Some(r.arrival_ns) } else { previous };
            let wait_ms = t.scheduled_ns.zip(since).map(|(s, p)| ms(s - p));
            let compute_ms = t.scheduled_ns.zip(t.emitted_ns).map(|(s, e)| ms(e - s));
            previous = t.emitted_ns;
            let (probability, entropy, margin) = word_choice(t);
            let known = t.rank_known();
            let mut flags = Vec::new();
            if i > 0 && latency_ms.is_some_and(|l| l > th.tpot_ms) {
                flags.push("slo_breach".to_string());
            }
            if t.special == SpecialToken::None
                && known.is_some_and(Rank::below_top)
                && probability.is_some_and(|p| p < th.token_probability)
            {
                flags.push("far_from_top".to_string());
            }
            if t.special == SpecialToken::Eos && probability.is_some_and(|p| p < th.eos_probability)
            {
                flags.push("low_probability_eos".to_string());
            }
            if looped.is_some_and(|l| (l.start..l.end).contains(&i)) {
                flags.push("repeated".to_string());
            }
            let step = t.iteration.and_then(|id| by_id.get(&id).copied());
            // The k-th of this request's tokens from one speculative step: its accepted drafts
            // come first, the target model's own token last.
            in_step = if i > 0 && t.iteration.is_some() && r.tokens[i - 1].iteration == t.iteration
            {
                in_step + 1
            } else {
                0
            };
            let draft = step.and_then(|s| s.own_draft);
            let (prefilled_meanwhile, prefill_tokens_meanwhile) = match (since, t.emitted_ns) {
                (Some(from), Some(to)) => prefills_within(steps, from, to, &r.request_id),
                _ => (Vec::new(), 0),
            };
            TokenView {
                index: i as u32,
                token_id: t.token_id,
                text: t.text.clone(),
                is_special: t.special.is_special(),
                special: t.special,
                emitted_ns: t.emitted_ns,
                scheduled_ns: t.scheduled_ns,
                latency_ms,
                iteration: t.iteration,
                logprob: t.logprob,
                rank: match known {
                    Some(Rank::At(k)) => Some(k),
                    _ => None,
                },
                rank_beyond: match known {
                    Some(Rank::Beyond(k)) => Some(k),
                    _ => None,
                },
                candidates: t
                    .candidates
                    .iter()
                    .map(|c| CandidateView {
                        token_id: c.token_id,
                        text: c.text.clone(),
                        logprob: c.logprob,
                    })
                    .collect(),
                // What the engine reported for this very token wins; iteration records fill in
                // (an imported file may hold only part of a batch's members).
                batch_size: t.batch_size.or(step.map(|s| s.batch_size)),
                waiting: t.waiting.or(step.map(|s| s.waiting)),
                wait_ms,
                compute_ms,
                step_prefill_tokens: step.map(|s| s.prefill_tokens),
                step_decode_tokens: step.map(|s| s.decode_tokens),
                step_draft: draft,
                accepted_draft: draft.map(|d| in_step < d.accepted),
                step_prefill_requests: step
                    .map(|s| {
                        s.prefill_requests
                            .iter()
                            .filter(|id| **id != r.request_id)
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default(),
                prefilled_meanwhile,
                prefill_tokens_meanwhile,
                probability,
                entropy,
                margin,
                flags,
            }
        })
        .collect()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CandidateView {
    /// `null` when the source gave only the text.
    pub token_id: Option<u32>,
    pub text: Option<String>,
    pub logprob: f32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenView {
    pub index: u32,
    /// `null` for timing-only or text-only sources.
    pub token_id: Option<u32>,
    pub text: Option<String>,
    pub is_special: bool,
    /// Which special token ("eos", "bos", "pad", "other"); "none" for ordinary text.
    pub special: SpecialToken,
    pub emitted_ns: Option<Nanos>,
    /// When the step that produced the token was scheduled: emitted − scheduled is compute time.
    pub scheduled_ns: Option<Nanos>,
    /// Gap since the previous token; for token 0, the time to first token.
    pub latency_ms: Option<f64>,
    pub iteration: Option<u64>,
    pub logprob: Option<f32>,
    pub rank: Option<u32>,
    /// Set (to `k`) when no rank was reported and the token is not among the `k` candidates
    /// returned with it: its rank is greater than `k`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank_beyond: Option<u32>,
    pub candidates: Vec<CandidateView>,
    /// Requests in the engine batch that produced this token (from iteration records).
    pub batch_size: Option<u32>,
    /// Requests waiting in the engine queue at that step.
    pub waiting: Option<u32>,
    /// The latency split: waiting to be scheduled (since the previous token, or arrival for
    /// token 0) and computing (scheduled → emitted).
    pub wait_ms: Option<f64>,
    pub compute_ms: Option<f64>,
    /// What else the producing step computed.
    pub step_prefill_tokens: Option<u32>,
    pub step_decode_tokens: Option<u32>,
    /// Speculative decoding: the request's draft tokens in the producing step, and whether this
    /// token was one of the accepted drafts (false: the target model sampled it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_draft: Option<Draft>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_draft: Option<bool>,
    /// Other requests that prefilled in the producing step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_prefill_requests: Vec<String>,
    /// Other requests that prefilled while this token was awaited (the steps between the
    /// previous token, or arrival, and this one): who the engine served instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefilled_meanwhile: Vec<String>,
    /// Their prompt tokens computed in that time.
    #[serde(default, skip_serializing_if = "crate::model::is_zero")]
    pub prefill_tokens_meanwhile: u32,
    /// Word choice: probability of the chosen token, entropy of the candidates (nats), and the
    /// chosen token's probability minus the best other candidate's (negative: a likelier one existed).
    pub probability: Option<f32>,
    pub entropy: Option<f32>,
    pub margin: Option<f32>,
    /// "slo_breach" (latency above the TPOT SLO), "far_from_top" (rank > 1, unlikely),
    /// "low_probability_eos", "repeated" (inside a stretch that repeats one span: a loop).
    pub flags: Vec<String>,
}

impl TokenView {
    /// The rank as people read it: `3`, or `> 5` for a token outside the returned top 5.
    pub fn rank_text(&self) -> Option<String> {
        self.rank
            .map(|k| k.to_string())
            .or_else(|| self.rank_beyond.map(|k| format!("> {k}")))
    }
}

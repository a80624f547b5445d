//! Per-token rows for the high-magnification views: latency, word choice, batch load at that step.

use crate::api::{CandidateView, TokenView};
use crate::model::{RequestTrace, ms};

/// The load of one engine step, as the token view needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepLoad {
    pub iteration_id: u64,
    /// Requests in the batch.
    pub batch_size: u32,
    /// Requests waiting in the queue.
    pub waiting: u32,
}

/// `steps` must be sorted by `iteration_id` (the store returns them so).
pub fn token_views(r: &RequestTrace, steps: &[StepLoad]) -> Vec<TokenView> {
    let first_token = r.first_token_at();
    let mut previous = None;
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
            previous = t.emitted_ns;
            let step = t.iteration.and_then(|id| {
                steps
                    .binary_search_by_key(&id, |s| s.iteration_id)
                    .ok()
                    .map(|k| steps[k])
            });
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
                rank: t.rank.or_else(|| t.rank_from_candidates()),
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
            }
        })
        .collect()
}

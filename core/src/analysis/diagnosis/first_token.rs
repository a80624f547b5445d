//! A late first token, or none before the request was given up on: a slow KV transfer, one long
//! prompt (or two) holding the engine, or a queue that no single prompt explains.

use std::collections::BTreeMap;

use super::{
    Cause, Context, Finding, Severity, Thresholds, duration, ms, name_list, slo_text, thousands,
};
use crate::model::{Iteration, Nanos, Phase, RequestTrace};

/// At most this many requests are named as holding the engine; more is a queue.
const FEW: usize = 2;

/// How long the request waited for its first token, and how the findings say so.
#[derive(Clone, Copy)]
pub(super) enum Wait {
    /// It came, later than the TTFT SLO.
    Late(Nanos),
    /// None came: the request was aborted (a client that gave up, a queue that refused it) this
    /// long after it arrived.
    Abandoned(Nanos),
}

impl Wait {
    pub(super) fn ns(self) -> Nanos {
        match self {
            Wait::Late(t) | Wait::Abandoned(t) => t,
        }
    }

    /// What every finding opens with: `TTFT 3.20 s > 2 s SLO`, `No first token: aborted after 3.20 s`.
    pub(super) fn lead(self, th: &Thresholds) -> String {
        match self {
            Wait::Late(t) => format!("TTFT {} > {} SLO", duration(t), slo_text(th.ttft_ms)),
            Wait::Abandoned(t) => format!("No first token: aborted after {}", duration(t)),
        }
    }

    /// The evidence, with the wait under its name (`ttft_ms` or `aborted_after_ms`) first.
    pub(super) fn evidence(self, rest: serde_json::Value) -> serde_json::Value {
        let key = match self {
            Wait::Late(_) => "ttft_ms",
            Wait::Abandoned(_) => "aborted_after_ms",
        };
        let mut out = serde_json::Map::new();
        out.insert(key.into(), ms(self.ns()).into());
        if let serde_json::Value::Object(rest) = rest {
            out.extend(rest);
        }
        out.into()
    }
}

pub(super) fn slow_first_token(
    r: &RequestTrace,
    wait: Wait,
    ctx: &Context,
    th: &Thresholds,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let ttft = wait.ns();
    let first = r.first_token_at().unwrap_or(r.finished_ns);
    if let Some(kv) = &r.kv_transfer {
        let took = kv.end_ns - kv.start_ns;
        if ms(took) > th.kv_transfer_ms {
            out.push(Finding {
                cause: Cause::KvTransferSlow,
                severity: Severity::Critical,
                summary: format!(
                    "{}: the KV-cache transfer from the prefill instance took {}.",
                    wait.lead(th),
                    duration(took)
                ),
                culprits: Vec::new(),
                evidence: wait
                    .evidence(serde_json::json!({ "kv_transfer_ms": ms(took), "bytes": kv.bytes })),
                inferred: false,
            });
            return out;
        }
    }
    // Who prefilled while this request waited for its first step?
    let wait_from = r.arrival_ns;
    let wait_to = r.first_scheduled_at().unwrap_or(first);
    if let Some(f) = monopoly(r, wait_from, first, ctx, th, wait) {
        out.push(f);
        return out;
    }
    let queue = wait_to - r.queued_ns.unwrap_or(r.arrival_ns);
    if queue * 2 >= ttft {
        let waiting = ctx
            .iterations
            .iter()
            .filter(|it| it.start_ns >= wait_from && it.start_ns <= wait_to)
            .map(|it| it.waiting)
            .max();
        out.push(Finding {
            cause: Cause::QueueBacklog,
            severity: Severity::Warning,
            summary: format!(
                "{}: {} of it waiting in the queue{}.",
                wait.lead(th),
                duration(queue),
                waiting
                    .map(|w| format!(" behind up to {w} requests"))
                    .unwrap_or_default()
            ),
            culprits: Vec::new(),
            evidence: wait
                .evidence(serde_json::json!({ "queue_ms": ms(queue), "max_waiting": waiting })),
            inferred: ctx.iterations.is_empty(),
        });
    }
    out
}

/// Who held the engine while a request waited: per other request, the time its prefill had the
/// engine inside the wait, and its prompt tokens; and, from iteration records, the longest run
/// of consecutive steps one request's prefill dominated.
struct Holders {
    held: BTreeMap<String, (Nanos, u64)>,
    /// (request, steps, tokens, time) of the longest run of consecutive steps.
    run: Option<(String, usize, u64, Nanos)>,
    inferred: bool,
}

/// From iteration records: a step belongs to the request whose prefill is at least half its
/// prefill tokens; its time inside the wait counts for that request.
fn from_steps(r: &RequestTrace, from: Nanos, to: Nanos, steps: &[Iteration]) -> Holders {
    let mut held: BTreeMap<String, (Nanos, u64)> = BTreeMap::new();
    let mut best: Option<(String, usize, u64, Nanos)> = None;
    let mut cur: Option<(String, usize, u64, Nanos)> = None;
    for it in steps
        .iter()
        .filter(|it| it.end_ns > from && it.start_ns < to)
    {
        let total = it.tokens_in(Phase::Prefill);
        let owner = it
            .batch
            .iter()
            .filter(|e| e.phase == Phase::Prefill && *e.request_id != *r.request_id)
            .max_by_key(|e| e.tokens)
            .filter(|e| total > 0 && e.tokens * 2 >= total)
            .map(|e| (e.request_id.to_string(), e.tokens));
        let took = it.end_ns.min(to) - it.start_ns.max(from);
        if let Some((id, k)) = &owner {
            let slot = held.entry(id.clone()).or_default();
            slot.0 += took;
            slot.1 += u64::from(*k);
        }
        cur = match (cur, owner) {
            (Some((id, n, t, d)), Some((o, k))) if id == o => {
                Some((id, n + 1, t + u64::from(k), d + it.end_ns - it.start_ns))
            }
            (_, Some((o, k))) => Some((o, 1, u64::from(k), it.end_ns - it.start_ns)),
            (_, None) => None,
        };
        if let Some(c) = cur
            .as_ref()
            .filter(|c| best.as_ref().is_none_or(|b| c.1 > b.1))
        {
            best = Some(c.clone());
        }
    }
    Holders {
        held,
        run: best,
        inferred: false,
    }
}

/// From request spans: each other request's prefill intervals (one for vLLM, a chunk each where
/// the engine reports them) clipped to the wait.
fn from_spans(r: &RequestTrace, from: Nanos, to: Nanos, others: &[super::OtherRequest]) -> Holders {
    let held = others
        .iter()
        .filter(|o| o.request_id != r.request_id)
        .filter_map(|o| {
            let t: Nanos = o
                .prefill
                .iter()
                .map(|&(s, e, _)| (e.min(to) - s.max(from)).max(0))
                .sum();
            (t > 0).then(|| (o.request_id.clone(), (t, u64::from(o.prompt_tokens))))
        })
        .collect();
    Holders {
        held,
        run: None,
        inferred: true,
    }
}

/// The fewest requests (at most [`FEW`]) whose held time covers at least half the wait, with
/// their time and tokens; their times are summed, so two prefills batched together count twice
/// (a bound the threshold tolerates: each alone must have held a share).
fn covering(h: &Holders, wait: Nanos) -> Option<(Vec<String>, Nanos, u64)> {
    let mut by: Vec<(&String, &(Nanos, u64))> = h.held.iter().collect();
    by.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(b.0)));
    let (mut ids, mut time, mut tokens) = (Vec::new(), 0, 0);
    for (id, &(t, k)) in by.into_iter().take(FEW) {
        ids.push(id.clone());
        time += t;
        tokens += k;
        if time * 2 >= wait {
            return Some((ids, time.min(wait), tokens));
        }
    }
    None
}

/// One other request's prefill (or two) held the engine for most of this request's wait for its
/// first token, or (from iteration records) for `monopoly_iterations` consecutive steps.
fn monopoly(
    r: &RequestTrace,
    from: Nanos,
    to: Nanos,
    ctx: &Context,
    th: &Thresholds,
    wait_for: Wait,
) -> Option<Finding> {
    let h = if ctx.iterations.is_empty() {
        from_spans(r, from, to, ctx.others)
    } else {
        from_steps(r, from, to, ctx.iterations)
    };
    let wait = to - from;
    if let Some((id, run, tokens, held)) =
        h.run.clone().filter(|run| run.1 >= th.monopoly_iterations)
    {
        return Some(Finding {
            cause: Cause::PrefillMonopolized,
            severity: Severity::Critical,
            summary: format!(
                "{}: waited while {id}'s {}-token prefill held the engine for {run} consecutive iterations ({}).",
                wait_for.lead(th),
                thousands(tokens),
                duration(held)
            ),
            culprits: vec![id],
            evidence: wait_for.evidence(serde_json::json!({ "iterations": run, "prefill_tokens": tokens, "held_ms": ms(held) })),
            inferred: false,
        });
    }
    let (ids, held, tokens) = covering(&h, wait)?;
    let whose = match ids.as_slice() {
        [one] => format!("{one}'s {}-token prefill ran", thousands(tokens)),
        _ => format!(
            "{} prefilled {} prompt tokens",
            name_list(&ids),
            thousands(tokens)
        ),
    };
    Some(Finding {
        cause: Cause::PrefillMonopolized,
        severity: Severity::Critical,
        summary: format!(
            "{}: waited {} for its first token while {whose} ({} of the wait).",
            wait_for.lead(th),
            duration(wait),
            duration(held)
        ),
        culprits: ids,
        evidence: wait_for.evidence(serde_json::json!({ "wait_ms": ms(wait), "held_ms": ms(held), "prefill_tokens": tokens })),
        inferred: h.inferred,
    })
}

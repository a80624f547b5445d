//! A late first token, or none before the request was given up on: a slow KV transfer, a few long
//! prompts holding the engine (each named with its share of the wait), a queue, or a saturated
//! engine (many prefills, none a material share).

use super::share::Shares;
use super::{Cause, Context, Finding, Severity, Thresholds, duration, ms, slo_text, thousands};
use crate::model::{Iteration, Nanos, Phase, RequestTrace};

/// At most this many requests (each a material share) are said to have held the engine; more
/// is a queue (`queue_backlog`) or a saturated engine (`engine_saturated`), their names listed.
const FEW: usize = 4;

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
    // Who prefilled while this request waited for its first token?
    let wait_from = r.arrival_ns;
    let wait_to = r.first_scheduled_at().unwrap_or(first);
    let mut shares = Shares::default();
    shares.add(&r.request_id, wait_from, first, ctx);
    let queue = wait_to - r.queued_ns.unwrap_or(r.arrival_ns);
    if shares.own > 0 && shares.own >= shares.prefill() && queue * 2 < ttft {
        // Scheduled soon, and its own prompt took more of the wait than everyone else's:
        // `long_prompt` names it (own.rs).
        return out;
    }
    if let Some(f) = monopoly(r, (wait_from, first), &shares, ctx, th, wait) {
        out.push(f);
        return out;
    }
    let named = shares.material();
    let meanwhile = if named.is_empty() {
        String::new()
    } else {
        format!("; prefilling meanwhile: {}", shares.sentence(&named))
    };
    if queue * 2 < ttft && shares.prefill() * 2 >= shares.lost {
        // Scheduled, yet other prompts took the engine: many of them, none (or too many) to
        // single out.
        out.push(Finding {
            cause: Cause::EngineSaturated,
            severity: Severity::Warning,
            summary: format!(
                "{}: {} other requests prefilled {} prompt tokens in its wait ({} of it){meanwhile}: the engine was saturated.",
                wait.lead(th),
                shares.requests(),
                thousands(shares.tokens()),
                duration(shares.prefill()),
            ),
            culprits: named.iter().map(|c| c.id.clone()).collect(),
            evidence: wait.evidence(serde_json::json!({
                "prefill_ms": ms(shares.prefill()),
                "prefill_requests": shares.requests(),
                "prefill_tokens": shares.tokens(),
                "culprits": shares.evidence(&named),
            })),
            inferred: shares.inferred,
        });
        return out;
    }
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
                "{}: {} of it waiting in the queue{}{meanwhile}.",
                wait.lead(th),
                duration(queue),
                // The engine's count of waiting requests, when it saw any besides this one.
                match waiting {
                    Some(2) => " behind up to 1 other request".to_string(),
                    Some(w) if w > 2 => format!(" behind up to {} other requests", w - 1),
                    _ => String::new(),
                }
            ),
            culprits: named.iter().map(|c| c.id.clone()).collect(),
            evidence: wait.evidence(serde_json::json!({
                "queue_ms": ms(queue), "max_waiting": waiting,
                "culprits": shares.evidence(&named),
            })),
            inferred: ctx.iterations.is_empty(),
        });
    }
    out
}

/// From iteration records: the longest run of consecutive steps one other request's prefill
/// dominated (at least half the step's prefill tokens) inside the wait: (request, steps,
/// tokens, time).
fn longest_run(
    r: &RequestTrace,
    from: Nanos,
    to: Nanos,
    steps: &[Iteration],
) -> Option<(String, usize, u64, Nanos)> {
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
    best
}

/// A few other requests' prefills (at most [`FEW`], each a material share) held the engine for
/// at least half this request's wait for its first token, or (from iteration records) one held
/// it for `monopoly_iterations` consecutive steps.
/// `shares` are those of the wait [from, to).
fn monopoly(
    r: &RequestTrace,
    (from, to): (Nanos, Nanos),
    shares: &Shares,
    ctx: &Context,
    th: &Thresholds,
    wait_for: Wait,
) -> Option<Finding> {
    let named = shares.material();
    let wait = shares.lost;
    if let Some((id, run, tokens, held)) =
        longest_run(r, from, to, ctx.iterations).filter(|run| run.1 >= th.monopoly_iterations)
    {
        // The run's owner first, then whoever else held a material share.
        let mut culprits = vec![id.clone()];
        culprits.extend(named.iter().map(|c| c.id.clone()).filter(|c| *c != id));
        return Some(Finding {
            cause: Cause::PrefillMonopolized,
            severity: Severity::Critical,
            summary: format!(
                "{}: waited while {id}'s {}-token prefill held the engine for {run} consecutive iterations ({}).",
                wait_for.lead(th),
                thousands(tokens),
                duration(held.min(wait))
            ),
            culprits,
            evidence: wait_for.evidence(serde_json::json!({
                "iterations": run, "prefill_tokens": tokens, "held_ms": ms(held.min(wait)),
                "culprits": shares.evidence(&named),
            })),
            inferred: false,
        });
    }
    let held: Nanos = named.iter().map(|c| c.held).sum();
    if named.is_empty() || named.len() > FEW || held * 2 < wait {
        return None;
    }
    let whose = match named.as_slice() {
        [one] => {
            // The whole prompt's size where the request is known, else what ran in the wait.
            let tokens = ctx
                .others
                .iter()
                .find(|o| o.request_id == one.id)
                .map_or(one.tokens, |o| u64::from(o.prompt_tokens));
            format!(
                "while {}'s {}-token prefill ran ({} of the wait)",
                one.id,
                thousands(tokens),
                duration(one.held)
            )
        }
        several => format!(
            "behind {} prompts: {}",
            several.len(),
            shares.sentence(several)
        ),
    };
    Some(Finding {
        cause: Cause::PrefillMonopolized,
        severity: Severity::Critical,
        summary: format!(
            "{}: waited {} for its first token {whose}.",
            wait_for.lead(th),
            duration(wait),
        ),
        culprits: named.iter().map(|c| c.id.clone()).collect(),
        evidence: wait_for.evidence(serde_json::json!({
            "wait_ms": ms(wait), "held_ms": ms(held), "prefill_tokens": shares.tokens(),
            "culprits": shares.evidence(&named),
        })),
        inferred: shares.inferred,
    })
}

#[cfg(test)]
mod tests {
    //! Engine timelines built by hand; the expected culprits are the prompts that ran.

    use std::sync::Arc;

    use super::super::{Context, Diagnosis, OtherRequest, Thresholds, diagnose};
    use crate::model::{BatchEntry, Iteration, Nanos, Phase, RequestTrace, Token};

    const MS: Nanos = 1_000_000;

    /// Arrived at 0, queued until `scheduled` ms, first token at `first` ms.
    fn waiting(scheduled: i64, first: i64) -> RequestTrace {
        RequestTrace {
            request_id: "v".into(),
            arrival_ns: 0,
            queued_ns: Some(0),
            first_scheduled_ns: Some(scheduled * MS),
            finished_ns: (first + 40) * MS,
            prompt_tokens: 200,
            output_tokens: 2,
            tokens: [first, first + 40]
                .iter()
                .map(|&t| Token {
                    emitted_ns: Some(t * MS),
                    ..Token::default()
                })
                .collect(),
            ..RequestTrace::default()
        }
    }

    fn culprits(d: &Diagnosis) -> Vec<(&'static str, Vec<String>)> {
        d.findings
            .iter()
            .map(|f| (f.cause.name(), f.culprits.clone()))
            .collect()
    }

    /// `n` equal 30k-token prompts prefilled one after another over the first 2.4 s.
    fn equal_prompts(n: i64) -> Vec<OtherRequest> {
        let each = 2_400 / n;
        (0..n)
            .map(|k| OtherRequest {
                request_id: format!("long{k}"),
                prompt_tokens: 30_000,
                prefill: vec![(k * each * MS, (k + 1) * each * MS, 30_000)],
            })
            .collect()
    }

    #[test]
    fn three_and_four_equal_long_prompts_are_all_named_with_their_shares() {
        for n in [3, 4] {
            let others = equal_prompts(n);
            let ctx = Context::new(&[], &others, None);
            let d = diagnose(&waiting(10, 2_500), &ctx, &Thresholds::default());
            let want: Vec<String> = (0..n).map(|k| format!("long{k}")).collect();
            assert_eq!(culprits(&d), [("prefill_monopolized", want)], "{n}");
            let s = &d.findings[0].summary;
            assert!(s.contains(&format!("behind {n} prompts: long0 ")), "{s}");
            let held: f64 = d.findings[0].evidence["culprits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["held_ms"].as_f64().unwrap())
                .sum();
            assert!(held <= 2_500.0, "held {held} ms of a 2,500 ms wait");
        }
    }

    #[test]
    fn a_small_prompt_sharing_a_step_with_a_long_one_is_not_blamed() {
        // Five 480 ms steps, each computing 30,000 tokens of `long` and 500 of `small`.
        let steps: Vec<Iteration> = (0..5)
            .map(|k| Iteration {
                iteration_id: k as u64,
                start_ns: (10 + k * 480) * MS,
                end_ns: (10 + (k + 1) * 480) * MS,
                batch: vec![
                    BatchEntry {
                        request_id: Arc::from("long"),
                        phase: Phase::Prefill,
                        tokens: 30_000,
                        prefill_offset: 0,
                        draft: None,
                    },
                    BatchEntry {
                        request_id: Arc::from("small"),
                        phase: Phase::Prefill,
                        tokens: 500,
                        prefill_offset: 0,
                        draft: None,
                    },
                ],
                running: 2,
                waiting: 1,
                kv_cache_usage: 0.4,
            })
            .collect();
        let ctx = Context::new(&steps, &[], None);
        let d = diagnose(&waiting(2_420, 2_500), &ctx, &Thresholds::default());
        assert_eq!(culprits(&d), [("prefill_monopolized", vec!["long".into()])]);
    }
}

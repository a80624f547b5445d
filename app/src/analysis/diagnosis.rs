//! Automatic diagnosis: names why a request was slow or odd, with culprits and a sentence a
//! support engineer can paste into a ticket.
//!
//! Timing causes are attributed exactly from iteration records (which requests ran prefill in
//! the steps between two tokens) when the engine sent them, and inferred from other requests'
//! prefill intervals on the same instance when only request spans exist (`inferred: true`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::analysis::metrics::request_metrics;
use crate::model::{Iteration, Nanos, Phase, RequestTrace, SpecialToken};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    PrefillInterruptedDecode,
    PrefillMonopolized,
    QueueBacklog,
    KvPreempted,
    KvTransferSlow,
    LowProbabilityEos,
    LowProbabilityToken,
}

impl Cause {
    /// A cause in what the model said (rather than how fast it said it).
    pub fn is_word_choice(self) -> bool {
        matches!(self, Cause::LowProbabilityEos | Cause::LowProbabilityToken)
    }

    /// The name the API uses (`prefill_interrupted_decode`).
    pub fn name(self) -> &'static str {
        match self {
            Cause::PrefillInterruptedDecode => "prefill_interrupted_decode",
            Cause::PrefillMonopolized => "prefill_monopolized",
            Cause::QueueBacklog => "queue_backlog",
            Cause::KvPreempted => "kv_preempted",
            Cause::KvTransferSlow => "kv_transfer_slow",
            Cause::LowProbabilityEos => "low_probability_eos",
            Cause::LowProbabilityToken => "low_probability_token",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Healthy,
    Degraded,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub cause: Cause,
    pub severity: Severity,
    pub summary: String,
    pub culprits: Vec<String>,
    pub evidence: serde_json::Value,
    pub inferred: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub request_id: String,
    pub verdict: Verdict,
    pub findings: Vec<Finding>,
}

/// Service-level objectives and thresholds; every one can be overridden per query.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    pub ttft_ms: f64,
    pub tpot_ms: f64,
    /// A stop token below this probability ended the answer early.
    pub eos_probability: f32,
    /// A sampled token below this probability and not the likeliest is flagged.
    pub token_probability: f32,
    /// Consecutive prefill steps of one request that count as holding the engine.
    pub monopoly_iterations: usize,
    pub kv_transfer_ms: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            ttft_ms: 2000.0,
            tpot_ms: 50.0,
            eos_probability: 0.3,
            token_probability: 0.05,
            monopoly_iterations: 3,
            kv_transfer_ms: 1000.0,
        }
    }
}

/// Another request on the same instance, as far as the inferred mode needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct OtherRequest {
    pub request_id: String,
    pub prompt_tokens: u32,
    /// Prefill intervals (start, end, tokens), in time order.
    pub prefill: Vec<(Nanos, Nanos, u32)>,
}

/// What the diagnosis may look at besides the request itself.
pub struct Context<'a> {
    /// The instance's iterations overlapping the request, by start time (may be empty).
    pub iterations: &'a [Iteration],
    /// Other requests on the instance whose lifetime overlaps the request's.
    pub others: &'a [OtherRequest],
}

fn ms(ns: Nanos) -> f64 {
    ns as f64 / 1e6
}

/// `54.8 ms`, `6.82 s`.
pub fn duration(ns: Nanos) -> String {
    let v = ms(ns);
    if v >= 1000.0 {
        format!("{:.2} s", v / 1000.0)
    } else {
        format!("{v:.1} ms")
    }
}

/// An SLO as people write it: `50 ms`, `2 s`.
fn slo_text(ms: f64) -> String {
    if ms >= 1000.0 && (ms / 1000.0).fract() == 0.0 {
        format!("{} s", ms / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

fn thousands(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn name_list(ids: &[String]) -> String {
    match ids.len() {
        0 => "no other request".into(),
        1..=3 => ids.join(", "),
        n => format!("{}, … ({n} requests)", ids[..2].join(", ")),
    }
}

pub fn diagnose(r: &RequestTrace, ctx: &Context, th: &Thresholds) -> Diagnosis {
    let m = request_metrics(r);
    let mut findings = Vec::new();
    if let Some(tpot) = m.tpot_ns.filter(|&t| ms(t) > th.tpot_ms) {
        findings.extend(interrupted_decode(r, tpot, ctx, th));
    }
    if let Some(ttft) = m.ttft_ns.filter(|&t| ms(t) > th.ttft_ms) {
        findings.extend(slow_first_token(r, ttft, ctx, th));
    }
    if !r.preemptions.is_empty() {
        let lost: Nanos = r
            .preemptions
            .iter()
            .map(|p| p.resumed_ns.unwrap_or(r.finished_ns) - p.at_ns)
            .sum();
        let recompute = r.preemptions.iter().filter(|p| p.recompute).count();
        findings.push(Finding {
            cause: Cause::KvPreempted,
            severity: Severity::Warning,
            summary: format!(
                "Preempted {} time{} when the KV cache ran out ({recompute} with recompute), losing {} before it resumed.",
                r.preemptions.len(),
                if r.preemptions.len() == 1 { "" } else { "s" },
                duration(lost)
            ),
            culprits: Vec::new(),
            evidence: serde_json::json!({ "preemptions": r.preemptions, "lost_ms": ms(lost) }),
            inferred: false,
        });
    }
    findings.extend(word_choice(r, th));
    findings.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.cause.cmp(&b.cause)));
    Diagnosis {
        request_id: r.request_id.clone(),
        verdict: if findings.is_empty() {
            Verdict::Healthy
        } else {
            Verdict::Degraded
        },
        findings,
    }
}

/// Prefill work by other requests inside [from, to): exact from iterations, else inferred.
/// Returns per-culprit (time, tokens) and whether it was inferred.
fn prefill_between(
    victim: &str,
    from: Nanos,
    to: Nanos,
    ctx: &Context,
) -> (BTreeMap<String, (Nanos, u64)>, bool) {
    let mut by: BTreeMap<String, (Nanos, u64)> = BTreeMap::new();
    if !ctx.iterations.is_empty() {
        for it in ctx
            .iterations
            .iter()
            .filter(|it| it.start_ns >= from && it.end_ns <= to)
        {
            let total: u32 = it.tokens_in(Phase::Prefill);
            for e in it
                .batch
                .iter()
                .filter(|e| e.phase == Phase::Prefill && e.request_id != victim)
            {
                // A step's time is shared by its prefills in proportion to their tokens.
                let share = (it.end_ns - it.start_ns) as f64 * f64::from(e.tokens)
                    / f64::from(total.max(1));
                let slot = by.entry(e.request_id.clone()).or_default();
                slot.0 += share as Nanos;
                slot.1 += u64::from(e.tokens);
            }
        }
        return (by, false);
    }
    for o in ctx.others.iter().filter(|o| o.request_id != victim) {
        for &(s, e, tokens) in &o.prefill {
            let overlap = e.min(to) - s.max(from);
            if overlap > 0 {
                let slot = by.entry(o.request_id.clone()).or_default();
                slot.0 += overlap;
                slot.1 += u64::from(tokens);
            }
        }
    }
    (by, true)
}

/// The gaps between consecutive tokens (emission times, in order) longer than `slo_ms`: where a
/// reader watched the stream stop. The diagnosis attributes them; the waterfall shades them.
pub fn gaps_over(times: &[Nanos], slo_ms: f64) -> impl Iterator<Item = (Nanos, Nanos)> + '_ {
    let slo = (slo_ms * 1e6) as Nanos;
    times
        .windows(2)
        .filter(move |w| w[1] - w[0] > slo)
        .map(|w| (w[0], w[1]))
}

fn interrupted_decode(
    r: &RequestTrace,
    tpot: Nanos,
    ctx: &Context,
    th: &Thresholds,
) -> Option<Finding> {
    let times: Vec<Nanos> = r.tokens.iter().filter_map(|t| t.emitted_ns).collect();
    let mut stalled: Nanos = 0;
    let mut gaps = 0;
    let mut culprits: BTreeMap<String, (Nanos, u64)> = BTreeMap::new();
    let mut inferred = false;
    for (from, to) in gaps_over(&times, th.tpot_ms) {
        gaps += 1;
        stalled += to - from;
        let (by, inf) = prefill_between(&r.request_id, from, to, ctx);
        inferred |= inf;
        for (id, (t, n)) in by {
            let slot = culprits.entry(id).or_default();
            slot.0 += t;
            slot.1 += n;
        }
    }
    let prefill_time: Nanos = culprits.values().map(|v| v.0).sum();
    // Only a diagnosis when other requests' prefills explain most of the stall.
    if culprits.is_empty() || prefill_time * 2 < stalled {
        return None;
    }
    let ids: Vec<String> = culprits.keys().cloned().collect();
    let tokens: u64 = culprits.values().map(|v| v.1).sum();
    let shares: serde_json::Map<String, serde_json::Value> = culprits
        .iter()
        .map(|(id, (t, _))| {
            (
                id.clone(),
                serde_json::json!((*t as f64 / stalled as f64 * 1000.0).round() / 1000.0),
            )
        })
        .collect();
    Some(Finding {
        cause: Cause::PrefillInterruptedDecode,
        severity: Severity::Critical,
        summary: format!(
            "TPOT {} > {} SLO: decode stalled {} in {gaps} gap{} while {} prefilled {} prompt tokens.",
            duration(tpot),
            slo_text(th.tpot_ms),
            duration(stalled),
            if gaps == 1 { "" } else { "s" },
            name_list(&ids),
            thousands(tokens)
        ),
        culprits: ids,
        evidence: serde_json::json!({ "tpot_ms": ms(tpot), "stalled_ms": ms(stalled), "gaps": gaps, "share_of_stall": shares }),
        inferred,
    })
}

fn slow_first_token(r: &RequestTrace, ttft: Nanos, ctx: &Context, th: &Thresholds) -> Vec<Finding> {
    let mut out = Vec::new();
    let first = r.first_token_at().unwrap_or(r.finished_ns);
    if let Some(kv) = &r.kv_transfer {
        let took = kv.end_ns - kv.start_ns;
        if ms(took) > th.kv_transfer_ms {
            out.push(Finding {
                cause: Cause::KvTransferSlow,
                severity: Severity::Critical,
                summary: format!(
                    "TTFT {} > {} SLO: the KV-cache transfer from the prefill instance took {}.",
                    duration(ttft),
                    slo_text(th.ttft_ms),
                    duration(took)
                ),
                culprits: Vec::new(),
                evidence: serde_json::json!({ "ttft_ms": ms(ttft), "kv_transfer_ms": ms(took), "bytes": kv.bytes }),
                inferred: false,
            });
            return out;
        }
    }
    // Who prefilled while this request waited for its first step?
    let wait_from = r.arrival_ns;
    let wait_to = r.first_scheduled_at().unwrap_or(first);
    if let Some(f) = monopoly(r, wait_from, first, ctx, th, ttft) {
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
                "TTFT {} > {} SLO: {} of it waiting in the queue{}.",
                duration(ttft),
                slo_text(th.ttft_ms),
                duration(queue),
                waiting.map(|w| format!(" behind up to {w} requests")).unwrap_or_default()
            ),
            culprits: Vec::new(),
            evidence: serde_json::json!({ "ttft_ms": ms(ttft), "queue_ms": ms(queue), "max_waiting": waiting }),
            inferred: ctx.iterations.is_empty(),
        });
    }
    out
}

/// One other request whose prefill held `min` or more consecutive steps while this one waited.
fn monopoly(
    r: &RequestTrace,
    from: Nanos,
    to: Nanos,
    ctx: &Context,
    th: &Thresholds,
    ttft: Nanos,
) -> Option<Finding> {
    let (culprit, run, tokens, held, inferred) = if !ctx.iterations.is_empty() {
        let steps: Vec<&Iteration> = ctx
            .iterations
            .iter()
            .filter(|it| it.end_ns > from && it.start_ns < to)
            .collect();
        // Longest run of consecutive steps whose prefill is mostly one other request's.
        let mut best: Option<(String, usize, u64, Nanos)> = None;
        let mut cur: Option<(String, usize, u64, Nanos)> = None;
        for it in steps {
            let total = it.tokens_in(Phase::Prefill);
            let top = it
                .batch
                .iter()
                .filter(|e| e.phase == Phase::Prefill && e.request_id != r.request_id)
                .max_by_key(|e| e.tokens);
            let owner = top
                .filter(|e| total > 0 && e.tokens * 2 >= total)
                .map(|e| (e.request_id.clone(), e.tokens));
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
        let (id, n, t, d) = best?;
        (id, n, t, d, false)
    } else {
        // Inferred: another request's prefill chunks back to back inside the wait.
        let mut best: Option<(String, usize, u64, Nanos)> = None;
        for o in ctx.others.iter().filter(|o| o.request_id != r.request_id) {
            let chunks: Vec<_> = o
                .prefill
                .iter()
                .filter(|&&(s, e, _)| e > from && s < to)
                .collect();
            if chunks.len() > best.as_ref().map_or(0, |b| b.1) {
                let held = chunks.iter().map(|&&(s, e, _)| e - s).sum();
                best = Some((
                    o.request_id.clone(),
                    chunks.len(),
                    u64::from(o.prompt_tokens),
                    held,
                ));
            }
        }
        let (id, n, t, d) = best?;
        (id, n, t, d, true)
    };
    if run < th.monopoly_iterations {
        return None;
    }
    Some(Finding {
        cause: Cause::PrefillMonopolized,
        severity: Severity::Critical,
        summary: format!(
            "TTFT {} > {} SLO: waited while {culprit}'s {}-token prefill held the engine for {run} consecutive iterations ({}).",
            duration(ttft),
            slo_text(th.ttft_ms),
            thousands(tokens),
            duration(held)
        ),
        culprits: vec![culprit],
        evidence: serde_json::json!({ "ttft_ms": ms(ttft), "iterations": run, "prefill_tokens": tokens, "held_ms": ms(held) }),
        inferred,
    })
}

fn word_choice(r: &RequestTrace, th: &Thresholds) -> Vec<Finding> {
    let mut out = Vec::new();
    let n = r.tokens.len();
    let prob = |lp: Option<f32>| lp.map(|l| l.exp());
    let eos = r.tokens.last().filter(|t| t.special == SpecialToken::Eos);
    if let Some((last, p)) = eos.and_then(|t| {
        prob(t.logprob)
            .filter(|&p| p < th.eos_probability)
            .map(|p| (t, p))
    }) {
        let top = last
            .candidates
            .first()
            .filter(|c| c.token_id != last.token_id || c.text != last.text);
        out.push(Finding {
                cause: Cause::LowProbabilityEos,
                severity: Severity::Warning,
                summary: format!(
                    "The answer ended after {n} tokens on an end-of-sequence token sampled at p = {p:.3}{}{}.",
                    last.rank.map(|k| format!(" (rank {k})")).unwrap_or_default(),
                    top.map(|c| format!("; the likeliest token was {:?} (p = {:.3})", c.text.clone().unwrap_or_default(), c.logprob.exp()))
                        .unwrap_or_default()
                ),
                culprits: Vec::new(),
                evidence: serde_json::json!({ "index": n - 1, "probability": p, "rank": last.rank }),
                inferred: false,
            });
    }
    let unlikely: Vec<(usize, f32)> = r
        .tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| t.special == SpecialToken::None && t.rank.is_some_and(|k| k > 1))
        .filter_map(|(i, t)| {
            prob(t.logprob)
                .filter(|&p| p < th.token_probability)
                .map(|p| (i, p))
        })
        .collect();
    if let Some(&(worst, p)) = unlikely.iter().min_by(|a, b| a.1.total_cmp(&b.1)) {
        out.push(Finding {
            cause: Cause::LowProbabilityToken,
            severity: Severity::Info,
            summary: format!(
                "{} token{} sampled far from the top (p < {}); the least likely, {:?} at position {worst}, had p = {p:.4}.",
                unlikely.len(),
                if unlikely.len() == 1 { " was" } else { "s were" },
                th.token_probability,
                r.tokens[worst].text.clone().unwrap_or_default()
            ),
            culprits: Vec::new(),
            evidence: serde_json::json!({ "positions": unlikely.iter().map(|(i, _)| i).collect::<Vec<_>>() }),
            inferred: false,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::gaps_over;

    #[test]
    fn only_gaps_longer_than_the_slo_are_stalls() {
        let ms = 1_000_000;
        let times = [0, 20 * ms, 70 * ms, 120 * ms, 1_620 * ms];
        let gaps: Vec<_> = gaps_over(&times, 50.0).collect();
        assert_eq!(gaps, [(120 * ms, 1_620 * ms)], "exactly 50 ms is not over");
        assert_eq!(gaps_over(&times, 10.0).count(), 4);
        assert_eq!(gaps_over(&[5], 1.0).count(), 0);
    }
}

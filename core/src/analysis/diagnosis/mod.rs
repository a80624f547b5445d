//! Automatic diagnosis: names why a request was slow or odd, with culprits and a sentence a
//! support engineer can paste into a ticket.
//!
//! Timing causes are attributed exactly from iteration records (which requests ran prefill in
//! the steps between two tokens) when the engine sent them, and inferred from other requests'
//! prefill intervals on the same instance when only request spans exist (`inferred: true`).

mod decode;
mod first_token;
mod own;
pub mod share;
mod span_fit;
pub mod speculation;
mod words;

use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::analysis::metrics::request_metrics;
use crate::model::architecture::{self, Architecture};
use crate::model::{FinishReason, Iteration, Nanos, RequestTrace};
use first_token::Wait;
use share::StepTimes;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    PrefillInterruptedDecode,
    PrefillMonopolized,
    QueueBacklog,
    KvPreempted,
    KvTransferSlow,
    /// A gap between tokens past the stall threshold that no prefill explains.
    DecodeStalled,
    /// Many other requests' prefills took the time, none of them a material share.
    EngineSaturated,
    /// The request's own prompt took the first-token time (no one else held the engine).
    LongPrompt,
    /// A decode past its SLO that no other request's prefill explains: the load it ran under.
    DecodeSlow,
    /// An SLO broken with no cause found; the finding says what was checked.
    Unexplained,
    LowProbabilityEos,
    LowProbabilityToken,
    /// Its draft tokens were accepted far less often than its neighbours' in the same steps.
    SpeculationLowAcceptance,
    /// Its drafts were accepted far more often over a long run (usually a repetition loop).
    SpeculationHighAcceptance,
}

impl Cause {
    pub const ALL: [Cause; 14] = [
        Cause::PrefillInterruptedDecode,
        Cause::PrefillMonopolized,
        Cause::QueueBacklog,
        Cause::KvPreempted,
        Cause::KvTransferSlow,
        Cause::DecodeStalled,
        Cause::EngineSaturated,
        Cause::LongPrompt,
        Cause::DecodeSlow,
        Cause::Unexplained,
        Cause::LowProbabilityEos,
        Cause::LowProbabilityToken,
        Cause::SpeculationLowAcceptance,
        Cause::SpeculationHighAcceptance,
    ];

    /// The cause the API names `name`.
    pub fn parse(name: &str) -> Option<Cause> {
        Cause::ALL.into_iter().find(|c| c.name() == name)
    }

    /// A cause in what the model said (rather than how fast it said it).
    pub fn is_word_choice(self) -> bool {
        matches!(
            self,
            Cause::LowProbabilityEos
                | Cause::LowProbabilityToken
                | Cause::SpeculationHighAcceptance
        )
    }

    /// The name the API uses (`prefill_interrupted_decode`).
    pub fn name(self) -> &'static str {
        match self {
            Cause::PrefillInterruptedDecode => "prefill_interrupted_decode",
            Cause::PrefillMonopolized => "prefill_monopolized",
            Cause::QueueBacklog => "queue_backlog",
            Cause::KvPreempted => "kv_preempted",
            Cause::KvTransferSlow => "kv_transfer_slow",
            Cause::DecodeStalled => "decode_stalled",
            Cause::EngineSaturated => "engine_saturated",
            Cause::LongPrompt => "long_prompt",
            Cause::DecodeSlow => "decode_slow",
            Cause::Unexplained => "unexplained",
            Cause::LowProbabilityEos => "low_probability_eos",
            Cause::LowProbabilityToken => "low_probability_token",
            Cause::SpeculationLowAcceptance => "speculation_low_acceptance",
            Cause::SpeculationHighAcceptance => "speculation_high_acceptance",
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

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    #[default]
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
    /// Degraded when `speed` or `words` is.
    pub verdict: Verdict,
    /// How fast it was served: degraded by any timing finding (an SLO broken, a stall, a
    /// preemption, an abort after a long wait).
    #[serde(default)]
    pub speed: Verdict,
    /// What it said: degraded by a word-choice finding at warning level (an unlikely end of the
    /// answer). A lone unlikely token in a sampled answer (info) is listed, not degraded.
    #[serde(default)]
    pub words: Verdict,
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
    /// One gap between tokens longer than this is a stall, whatever the mean (TPOT) says.
    #[serde(default = "default_stall_ms")]
    pub stall_ms: f64,
}

fn default_stall_ms() -> f64 {
    1000.0
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
            stall_ms: default_stall_ms(),
        }
    }
}

pub use crate::model::OtherRequest;
pub use share::StepSums;

/// What the diagnosis may look at besides the request itself.
pub struct Context<'a> {
    /// The instance's iterations overlapping the request, by start time (may be empty).
    pub iterations: &'a [Iteration],
    /// Other requests on the instance whose lifetime overlaps the request's.
    pub others: &'a [OtherRequest],
    /// The served model's shape, when its name is a known one: what a prompt's prefill costs
    /// late in a long prompt against early ([`crate::model::architecture`]).
    pub model: Option<Architecture>,
    /// `iterations`' batches counted once for a page of requests ([`Context::among`]), and
    /// where in that page `iterations` start; counted here when not.
    counted: Option<(Arc<StepSums>, usize)>,
    /// `iterations` as the engine spent its time on them, found once a diagnosis: every
    /// finding that weighs who held the engine reads them.
    times: OnceLock<StepTimes>,
}

impl<'a> Context<'a> {
    /// A request's context: the instance's steps that may have served it ([`steps_of`]), the
    /// other requests on the instance, the served model's shape when known.
    pub fn new(
        iterations: &'a [Iteration],
        others: &'a [OtherRequest],
        model: Option<Architecture>,
    ) -> Self {
        Context {
            iterations,
            others,
            model,
            counted: None,
            times: OnceLock::new(),
        }
    }

    /// `r`'s context among the steps of a page of requests (`steps`, by start time), whose
    /// batches `sums` counted once for all of them ([`StepSums::of`] over the same `steps`;
    /// counted for another model's shape, they are not used). The same diagnosis as with
    /// [`Context::new`] over [`steps_of`]`(steps, r)`, without reading each batch again.
    pub fn among(
        steps: &'a [Iteration],
        sums: &Arc<StepSums>,
        r: &RequestTrace,
        others: &'a [OtherRequest],
        model: Option<Architecture>,
    ) -> Self {
        let range = step_range(steps, r);
        let mut ctx = Context::new(&steps[range.clone()], others, model);
        if sums.fits(steps.len(), ctx.attention_even_tokens()) {
            ctx.counted = Some((sums.clone(), range.start));
        }
        ctx
    }

    /// The context length at which a prompt token's attention costs as much as its linear
    /// layers on this model.
    pub fn attention_even_tokens(&self) -> f64 {
        architecture::attention_even_tokens(self.model.as_ref())
    }

    fn step_times(&self) -> &StepTimes {
        self.times.get_or_init(|| StepTimes::of(self))
    }

    /// Whether any of the steps may have verified draft tokens: known from a page's counts,
    /// else assumed.
    fn may_have_drafts(&self) -> bool {
        self.counted
            .as_ref()
            .is_none_or(|(sums, from)| sums.drafted(*from, from + self.iterations.len()))
    }
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

pub fn diagnose(r: &RequestTrace, ctx: &Context, th: &Thresholds) -> Diagnosis {
    let m = request_metrics(r);
    // Each phase's findings apart: a decode's saturated engine does not explain a late first
    // token, nor the other way round.
    let mut decode = Vec::new();
    match m.tpot_ns {
        Some(tpot) if ms(tpot) > th.tpot_ms => {
            decode.extend(decode::interrupted_decode(r, tpot, ctx, th))
        }
        tpot => decode.extend(decode::frozen_decode(r, tpot, ctx, th)),
    }
    let wait = first_token_wait(r, m.ttft_ns, th);
    let mut first = Vec::new();
    if let Some(wait) = wait {
        first.extend(first_token::slow_first_token(r, wait, ctx, th));
    }
    let preempted = preemption(r);
    // Every SLO the request broke has a finding, even when no rule above named a cause; a
    // preemption explains either phase.
    if let Some(wait) = wait {
        let seen: Vec<Finding> = first.iter().chain(&preempted).cloned().collect();
        first.extend(own::first_token_left(r, wait, ctx, th, &seen));
    }
    let seen: Vec<Finding> = decode.iter().chain(&preempted).cloned().collect();
    decode.extend(own::decode_left(r, m.tpot_ns, ctx, th, &seen));
    let mut findings = decode;
    findings.extend(first);
    findings.extend(preempted);
    findings.extend(words::word_choice(r, th));
    findings.extend(speculation::speculation(r, ctx));
    Diagnosis::of(r.request_id.clone(), findings)
}

/// Whether `r`'s diagnosis is healthy whatever ran beside it, provided it did not speculate.
/// Every timing rule starts from the request's own breach (its TTFT or TPOT past the SLO, a
/// stall, an abort after waiting past the SLO) or its own preemptions, and its words are its
/// own tokens: neighbours and steps only name causes. Speculation is the exception: its
/// acceptance is judged against the other requests in the same steps. Ingest stores this
/// (`requests.healthy_alone`, default thresholds) so that the findings worker never reads such
/// a request again when its neighbourhood changes (docs/BENCHMARKS.md, keeping up).
pub fn healthy_alone(r: &RequestTrace, th: &Thresholds) -> bool {
    let alone = Context::new(&[], &[], None);
    diagnose(r, &alone, th).verdict == Verdict::Healthy
}

/// How long the request waited for a first token, when that is a finding: it came past the TTFT
/// SLO, or none came before it was given up on after waiting past the SLO or the stall threshold
/// (a client's timeout, a queue that refused it). A client that gives up sooner is no incident.
fn first_token_wait(r: &RequestTrace, ttft: Option<Nanos>, th: &Thresholds) -> Option<Wait> {
    let waited = r.finished_ns - r.arrival_ns;
    if let Some(ttft) = ttft.filter(|&t| ms(t) > th.ttft_ms) {
        Some(Wait::Late(ttft))
    } else if ttft.is_none()
        && r.finish_reason == FinishReason::Abort
        && r.tokens.is_empty()
        && ms(waited) > th.ttft_ms.min(th.stall_ms)
    {
        Some(Wait::Abandoned(waited))
    } else {
        None
    }
}

/// The request's preemptions, as one finding.
fn preemption(r: &RequestTrace) -> Option<Finding> {
    if r.preemptions.is_empty() {
        return None;
    }
    let lost: Nanos = r
        .preemptions
        .iter()
        .map(|p| p.resumed_ns.unwrap_or(r.finished_ns) - p.at_ns)
        .sum();
    let recompute = r.preemptions.iter().filter(|p| p.recompute).count();
    // The requests the scheduler made room for, when the engine said (each once, in order).
    let mut culprits: Vec<String> = Vec::new();
    for a in r.preemptions.iter().filter_map(|p| p.aggressor.as_ref()) {
        if !culprits.contains(a) && *a != r.request_id {
            culprits.push(a.clone());
        }
    }
    let again: u32 = r
        .preemptions
        .iter()
        .filter_map(|p| p.recompute_tokens)
        .sum();
    let mut summary = format!(
        "Preempted {} time{} when the KV cache ran out ({recompute} with recompute), losing {} before it resumed",
        r.preemptions.len(),
        if r.preemptions.len() == 1 { "" } else { "s" },
        duration(lost)
    );
    if again > 0 {
        summary.push_str(&format!(
            " and computing {} tokens again",
            thousands(again.into())
        ));
    }
    match culprits.as_slice() {
        [] => {}
        [one] => summary.push_str(&format!(": the scheduler made room for {one}")),
        [first, rest @ ..] => summary.push_str(&format!(
            ": the scheduler made room for {first} and {} more",
            rest.len()
        )),
    }
    summary.push('.');
    Some(Finding {
        cause: Cause::KvPreempted,
        severity: Severity::Warning,
        summary,
        culprits,
        evidence: serde_json::json!({ "preemptions": r.preemptions, "lost_ms": ms(lost) }),
        inferred: false,
    })
}

impl Diagnosis {
    /// The diagnosis these findings make: the most severe first; speed degraded by any timing
    /// finding, words by a word-choice finding above info.
    /// A request with nothing found.
    pub fn healthy(request_id: String) -> Self {
        Self::of(request_id, Vec::new())
    }

    fn of(request_id: String, mut findings: Vec<Finding>) -> Self {
        findings.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.cause.cmp(&b.cause)));
        let degraded = |any: bool| {
            if any {
                Verdict::Degraded
            } else {
                Verdict::Healthy
            }
        };
        let speed = degraded(findings.iter().any(|f| !f.cause.is_word_choice()));
        let words = degraded(
            findings
                .iter()
                .any(|f| f.cause.is_word_choice() && f.severity > Severity::Info),
        );
        Diagnosis {
            request_id,
            verdict: degraded(speed == Verdict::Degraded || words == Verdict::Degraded),
            speed,
            words,
            findings,
        }
    }
}

/// One diagnosis from the diagnoses of a request's parts (a PD request's prefill and decode
/// parts, each diagnosed against its own instance's steps): each cause once, its most severe
/// finding kept, in the order `diagnose` sorts them.
pub fn merge(request_id: &str, parts: Vec<Diagnosis>) -> Diagnosis {
    let findings = parts.into_iter().flat_map(|d| d.findings).collect();
    let mut d = Diagnosis::of(request_id.to_string(), findings);
    // Sorted most severe first: the first finding of a cause is the one kept.
    let mut seen = Vec::new();
    d.findings.retain(|f| {
        let first = !seen.contains(&f.cause);
        seen.push(f.cause);
        first
    });
    d
}

/// The steps of `iterations` (by start time) that may have served `r`: from a little before it
/// arrived (`CLOCK_SLACK_NS`) to its end.
pub fn steps_of<'a>(iterations: &'a [Iteration], r: &RequestTrace) -> &'a [Iteration] {
    &iterations[step_range(iterations, r)]
}

/// Where [`steps_of`] are in `iterations`.
fn step_range(iterations: &[Iteration], r: &RequestTrace) -> std::ops::Range<usize> {
    let lo =
        iterations.partition_point(|it| it.start_ns < r.arrival_ns - crate::model::CLOCK_SLACK_NS);
    let hi = iterations.partition_point(|it| it.start_ns <= r.finished_ns);
    lo..hi.max(lo)
}

/// A PD request's diagnosis: its parts' (each against its own instance), merged, and — when the
/// request the client saw broke the TTFT SLO though no part's finding says why — the stretch of
/// the wait that took most of it: the prefill instance's queue, the prefill, the KV transfer,
/// the decode instance's queue, or its first step. `parts` in join order, on one clock.
pub fn merge_pd(
    joined: &RequestTrace,
    parts: &[&RequestTrace],
    each: Vec<Diagnosis>,
    th: &Thresholds,
) -> Diagnosis {
    let mut d = merge(&joined.request_id, each);
    let Some(ttft) = request_metrics(joined)
        .ttft_ns
        .filter(|&t| ms(t) > th.ttft_ms)
    else {
        return d;
    };
    let explained = d
        .findings
        .iter()
        .any(|f| f.evidence.get("ttft_ms").is_some());
    if explained {
        return d;
    }
    let stretches = pd_wait(joined, parts);
    let Some(&(name, cause, longest)) = stretches.iter().max_by_key(|s| s.2) else {
        return d;
    };
    let listed: Vec<String> = stretches
        .iter()
        .filter(|s| s.2 > 0)
        .map(|(n, _, t)| format!("{n} {}", duration(*t)))
        .collect();
    d.findings.push(Finding {
        cause,
        severity: Severity::Warning,
        summary: format!(
            "TTFT {} > {} SLO across its PD parts, though neither instance's own part broke it; the {name} took the most ({:.0} %): {}.",
            duration(ttft),
            slo_text(th.ttft_ms),
            100.0 * longest as f64 / ttft.max(1) as f64,
            listed.join(", ")
        ),
        culprits: Vec::new(),
        evidence: serde_json::json!({
            "ttft_ms": ms(ttft),
            "stretches_ms": stretches.iter().map(|(n, _, t)| (n.to_string(), serde_json::Value::from(ms(*t)))).collect::<serde_json::Map<_, _>>(),
        }),
        inferred: false,
    });
    Diagnosis::of(d.request_id, d.findings)
}

/// A PD request's wait for its first token, stretch by stretch (never negative), each with the
/// cause it is named by.
fn pd_wait(joined: &RequestTrace, parts: &[&RequestTrace]) -> Vec<(&'static str, Cause, Nanos)> {
    let (Some(p), Some(last)) = (parts.first(), parts.last()) else {
        return Vec::new();
    };
    let first_token = joined.first_token_at().unwrap_or(joined.finished_ns);
    let scheduled = p.first_scheduled_at().unwrap_or(joined.arrival_ns);
    let prefilled = p.prefilled_at().unwrap_or(scheduled);
    let (kv_start, kv_end) = joined
        .kv_transfer
        .as_ref()
        .map_or((prefilled, prefilled), |kv| (kv.start_ns, kv.end_ns));
    let decode_scheduled = last.first_scheduled_at().unwrap_or(first_token);
    let span = |a: Nanos, b: Nanos| (b - a).max(0);
    vec![
        (
            "prefill queue",
            Cause::QueueBacklog,
            span(joined.arrival_ns, scheduled),
        ),
        ("prefill", Cause::LongPrompt, span(scheduled, prefilled)),
        (
            "KV transfer",
            Cause::KvTransferSlow,
            span(prefilled.min(kv_start), kv_end),
        ),
        (
            "decode queue",
            Cause::QueueBacklog,
            span(kv_end.max(prefilled), decode_scheduled),
        ),
        (
            "first decode step",
            Cause::Unexplained,
            span(decode_scheduled, first_token),
        ),
    ]
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

/// The stalled spans of a request that arrived at `arrival_ns` and emitted tokens at `times`:
/// the wait for the first token when it broke the TTFT SLO, and every gap between tokens longer
/// than the TPOT SLO.
pub fn stalls(
    arrival_ns: Nanos,
    times: &[Nanos],
    ttft_slo_ms: f64,
    tpot_slo_ms: f64,
) -> Vec<(Nanos, Nanos)> {
    let mut out = Vec::new();
    if let Some(&first) = times.first()
        && (first - arrival_ns) as f64 / 1e6 > ttft_slo_ms
    {
        out.push((arrival_ns, first));
    }
    out.extend(gaps_over(times, tpot_slo_ms));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PrefillChunk, SpecialToken, Token};

    const MS: Nanos = 1_000_000;

    /// A request arriving at 0, first scheduled at `scheduled` ms, its tokens at these ms.
    fn request(id: &str, scheduled: i64, token_ms: &[i64]) -> RequestTrace {
        let at = |v: i64| v * MS;
        RequestTrace {
            request_id: id.into(),
            arrival_ns: 0,
            queued_ns: Some(0),
            first_scheduled_ns: Some(at(scheduled)),
            first_token_ns: token_ms.first().map(|&t| at(t)),
            finished_ns: at(*token_ms.last().unwrap_or(&scheduled)),
            prompt_tokens: 500,
            output_tokens: token_ms.len() as u32,
            prefill_chunks: vec![PrefillChunk {
                start_ns: at(scheduled),
                end_ns: at(token_ms.first().copied().unwrap_or(scheduled)),
                tokens: 500,
                iteration: None,
            }],
            tokens: token_ms
                .iter()
                .map(|&t| Token {
                    emitted_ns: Some(at(t)),
                    ..Token::default()
                })
                .collect(),
            ..RequestTrace::default()
        }
    }

    fn other(id: &str, tokens: u32, prefills_ms: &[(i64, i64)]) -> OtherRequest {
        OtherRequest {
            request_id: id.into(),
            prompt_tokens: tokens,
            prefill: prefills_ms
                .iter()
                .map(|&(s, e)| (s * MS, e * MS, tokens))
                .collect(),
        }
    }

    #[test]
    fn parts_merge_into_one_diagnosis_with_each_cause_once() {
        let finding = |cause, severity| Finding {
            cause,
            severity,
            summary: format!("{cause:?} {severity:?}"),
            culprits: Vec::new(),
            evidence: serde_json::Value::Null,
            inferred: false,
        };
        let part = |findings: Vec<Finding>| Diagnosis {
            request_id: "r".into(),
            verdict: Verdict::Degraded,
            speed: Verdict::Degraded,
            words: Verdict::Healthy,
            findings,
        };
        let prefill = part(vec![finding(Cause::QueueBacklog, Severity::Warning)]);
        let decode = part(vec![
            finding(Cause::KvTransferSlow, Severity::Critical),
            finding(Cause::QueueBacklog, Severity::Critical),
        ]);
        let merged = merge("r", vec![prefill, decode]);
        let got: Vec<(Cause, Severity)> = merged
            .findings
            .iter()
            .map(|f| (f.cause, f.severity))
            .collect();
        assert_eq!(
            got,
            vec![
                (Cause::QueueBacklog, Severity::Critical),
                (Cause::KvTransferSlow, Severity::Critical),
            ]
        );
        assert_eq!(merged.verdict, Verdict::Degraded);
        let healthy = merge("r", vec![part(Vec::new()), part(Vec::new())]);
        assert_eq!(healthy.verdict, Verdict::Healthy);
    }

    fn run(r: &RequestTrace, others: &[OtherRequest]) -> Diagnosis {
        let ctx = Context::new(&[], others, None);
        diagnose(r, &ctx, &Thresholds::default())
    }

    fn causes(d: &Diagnosis) -> Vec<(&'static str, Vec<String>)> {
        d.findings
            .iter()
            .map(|f| (f.cause.name(), f.culprits.clone()))
            .collect()
    }

    /// A 200-token answer at 20 ms a token, with one gap of `freeze` ms after token 100.
    fn answer(freeze: i64) -> Vec<i64> {
        (0..200)
            .map(|k| 100 + k * 20 + if k > 100 { freeze - 20 } else { 0 })
            .collect()
    }

    /// A fast 20-token answer whose words are `words(k)`: (token id, logprob, rank, special),
    /// each with the top 5 candidates 100..105.
    fn worded(words: impl Fn(usize) -> (u32, f32, Option<u32>, SpecialToken)) -> RequestTrace {
        let mut r = request("w", 10, &(0..20).map(|k| 50 + k * 20).collect::<Vec<_>>());
        for (k, t) in r.tokens.iter_mut().enumerate() {
            let (id, logprob, rank, special) = words(k);
            t.token_id = Some(id);
            t.logprob = Some(logprob);
            t.rank = rank;
            t.special = special;
            t.candidates = (100..105)
                .map(|c| crate::model::Candidate {
                    token_id: Some(c),
                    logprob: -0.1 * (c - 99) as f32,
                    text: None,
                })
                .collect();
        }
        r
    }

    #[test]
    fn a_pd_request_late_only_as_a_whole_names_the_stretch_that_took_most() {
        // Prefill instance: scheduled at once, 0.9 s of prefill. KV transfer 0.95 s (under the
        // 1 s threshold), 0.3 s in the decode instance's queue, then 30 ms to the first token.
        let prefill = RequestTrace {
            request_id: "pd".into(),
            arrival_ns: 0,
            first_scheduled_ns: Some(0),
            first_token_ns: Some(900 * MS),
            finished_ns: 900 * MS,
            output_tokens: 1,
            prefill_chunks: vec![PrefillChunk {
                start_ns: 0,
                end_ns: 900 * MS,
                tokens: 30_000,
                iteration: None,
            }],
            ..RequestTrace::default()
        };
        let mut decode = request("pd", 2150, &[2180, 2200, 2220]);
        decode.arrival_ns = 1850 * MS;
        decode.queued_ns = Some(1850 * MS);
        decode.prefill_chunks.clear();
        decode.kv_transfer = Some(crate::model::KvTransfer {
            start_ns: 900 * MS,
            end_ns: 1850 * MS,
            bytes: None,
            blocks: None,
        });
        let parts = [&prefill, &decode];
        let joined = crate::analysis::pd::join(&parts);
        let each: Vec<Diagnosis> = parts.iter().map(|p| run(p, &[])).collect();
        assert!(
            each.iter().all(|d| d.speed == Verdict::Healthy),
            "no part broke an SLO alone"
        );
        let d = merge_pd(&joined, &parts, each, &Thresholds::default());
        assert_eq!(causes(&d), [("kv_transfer_slow", vec![])]);
        assert_eq!(d.speed, Verdict::Degraded);
        let s = &d.findings[0].summary;
        assert!(
            s.starts_with("TTFT 2.18 s > 2 s SLO across its PD parts"),
            "{s}"
        );
        assert!(s.contains("the KV transfer took the most (44 %)"), "{s}");
    }

    #[test]
    fn speed_and_words_have_separate_verdicts_and_one_unlikely_token_degrades_neither() {
        use SpecialToken as S;
        // Token 7 was sampled at p = 0.01 outside the returned top 5, with no rank reported.
        let one_odd = worded(|k| match k {
            7 => (900, 0.01f32.ln(), None, S::None),
            _ => (100, -0.1, Some(1), S::None),
        });
        let d = run(&one_odd, &[]);
        assert_eq!(causes(&d), [("low_probability_token", vec![])]);
        assert_eq!(
            (d.verdict, d.speed, d.words),
            (Verdict::Healthy, Verdict::Healthy, Verdict::Healthy)
        );
        let views = crate::analysis::token_view::token_views(&one_odd, &[], &Thresholds::default());
        assert_eq!(views[7].rank_text().as_deref(), Some("> 5"));
        assert!(views[7].flags.iter().any(|f| f == "far_from_top"));
        assert_eq!(views[6].rank_text().as_deref(), Some("1"));

        // The answer ended on an EOS the model gave p = 0.05: the words are degraded, not the speed.
        let cut = worded(|k| match k {
            19 => (101, 0.05f32.ln(), None, S::Eos),
            _ => (100, -0.1, Some(1), S::None),
        });
        let d = run(&cut, &[]);
        assert_eq!(causes(&d), [("low_probability_eos", vec![])]);
        assert!(
            d.findings[0].summary.contains("(rank 2)"),
            "{}",
            d.findings[0].summary
        );
        assert_eq!(
            (d.verdict, d.speed, d.words),
            (Verdict::Degraded, Verdict::Healthy, Verdict::Degraded)
        );

        // Slow and oddly worded: both.
        let mut slow = cut.clone();
        for t in &mut slow.tokens[10..] {
            t.emitted_ns = t.emitted_ns.map(|e| e + 3000 * MS);
        }
        slow.finished_ns += 3000 * MS;
        let d = run(&slow, &[]);
        assert_eq!((d.speed, d.words), (Verdict::Degraded, Verdict::Degraded));
    }

    #[test]
    fn one_long_prefill_covering_the_wait_is_named_from_spans() {
        // vLLM-shaped: one prefill interval per request, no chunks, no iterations.
        let r = request("short", 2300, &[2400, 2410]);
        let long = other("long", 96_000, &[(-200, 2300)]);
        let small: Vec<_> = (0..4)
            .map(|k| other(&format!("s{k}"), 300, &[(k * 10, k * 10 + 5)]))
            .collect();
        let mut others = vec![long];
        others.extend(small);
        let d = run(&r, &others);
        assert_eq!(causes(&d), [("prefill_monopolized", vec!["long".into()])]);
        let f = &d.findings[0];
        assert!(f.inferred);
        assert!(
            f.summary.contains("long's 96,000-token prefill ran"),
            "{}",
            f.summary
        );
    }

    #[test]
    fn a_request_given_up_on_before_its_first_token_names_who_held_the_engine() {
        // Arrived at 0, never scheduled, aborted by its client at 1.5 s, while `long` prefilled:
        // within the TTFT SLO, yet no answer at all.
        let gone = RequestTrace {
            request_id: "gone".into(),
            arrival_ns: 0,
            queued_ns: Some(0),
            finished_ns: 1500 * MS,
            finish_reason: FinishReason::Abort,
            prompt_tokens: 300,
            ..RequestTrace::default()
        };
        let long = other("long", 96_000, &[(-100, 1500)]);
        let d = run(&gone, std::slice::from_ref(&long));
        assert_eq!(causes(&d), [("prefill_monopolized", vec!["long".into()])]);
        let f = &d.findings[0];
        assert!(
            f.summary
                .starts_with("No first token: aborted after 1.50 s: waited 1.50 s"),
            "{}",
            f.summary
        );
        assert_eq!(f.evidence["aborted_after_ms"], 1500.0);
        assert!(f.evidence.get("ttft_ms").is_none());
        assert_eq!(d.verdict, Verdict::Degraded);
        // Alone in the queue: the queue is the answer.
        let d = run(&gone, &[]);
        assert_eq!(causes(&d), [("queue_backlog", vec![])]);
        assert!(
            d.findings[0]
                .summary
                .contains("1.50 s of it waiting in the queue")
        );
        // An answer that stopped normally, or an abort after tokens, is not "no first token".
        let stopped = RequestTrace {
            finish_reason: FinishReason::Stop,
            ..gone.clone()
        };
        assert!(
            run(&stopped, std::slice::from_ref(&long))
                .findings
                .is_empty()
        );
        let answered = RequestTrace {
            first_token_ns: Some(10 * MS),
            output_tokens: 1,
            tokens: vec![Token {
                emitted_ns: Some(10 * MS),
                ..Token::default()
            }],
            ..gone.clone()
        };
        assert!(run(&answered, &[long]).findings.is_empty());
    }

    #[test]
    fn a_queue_of_many_prompts_stays_a_queue() {
        let r = request("late", 2400, &[2500, 2510]);
        let others: Vec<_> = (0..8)
            .map(|k| other(&format!("p{k}"), 4000, &[(k * 300, k * 300 + 300)]))
            .collect();
        let d = run(&r, &others);
        // Eight prompts, 12.5 % of the wait each: too many to have "held" it, but known, so
        // listed.
        let ids: Vec<String> = (0..8).map(|k| format!("p{k}")).collect();
        assert_eq!(causes(&d), [("queue_backlog", ids)]);
        let s = &d.findings[0].summary;
        assert!(
            s.contains("prefilling meanwhile: p0 300.0 ms (12 %), p1 300.0 ms (12 %), p2 300.0 ms (12 %) and 5 more"),
            "{s}"
        );
    }

    #[test]
    fn a_freeze_the_mean_hides_names_the_prefill_inside_it() {
        let r = request("victim", 50, &answer(1500));
        assert!(
            crate::analysis::metrics::request_metrics(&r)
                .tpot_ns
                .unwrap()
                < 50 * MS
        );
        let prompt = other("prompt", 32_000, &[(2125, 3600)]);
        let d = run(&r, &[prompt]);
        assert_eq!(
            causes(&d),
            [("prefill_interrupted_decode", vec!["prompt".into()])]
        );
        let f = &d.findings[0];
        assert_eq!(f.severity, Severity::Warning, "below a TPOT breach");
        assert!(
            f.summary
                .starts_with("The stream stopped for 1.50 s before token 101"),
            "{}",
            f.summary
        );

        // Nothing ran inside it: still a stall, without a culprit.
        let d = run(&r, &[]);
        assert_eq!(causes(&d), [("decode_stalled", vec![])]);
    }

    #[test]
    fn gaps_under_the_stall_threshold_stay_healthy() {
        let r = request("steady", 50, &answer(900));
        let busy = other("busy", 32_000, &[(2000, 2900)]);
        assert_eq!(run(&r, &[busy]).verdict, Verdict::Healthy);
        let th = Thresholds {
            stall_ms: 500.0,
            ..Thresholds::default()
        };
        let ctx = Context::new(&[], &[], None);
        assert_eq!(
            diagnose(&r, &ctx, &th).verdict,
            Verdict::Degraded,
            "per-query threshold"
        );
    }

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

//! Two sets of requests side by side ("before and after the deploy"): the percentile deltas, and
//! a one-line answer to "what changed".

use crate::analysis::diagnosis::Cause;
use crate::analysis::metrics::{LatencySeries, Percentiles};
use crate::model::Nanos;
pub use crate::model::metrics::WordSums;
use serde::{Deserialize, Serialize};

/// Histogram bins per doubling of latency: fine enough to see a shift of 20 %.
pub const BINS_PER_OCTAVE: f64 = 4.0;

/// Changes smaller than this (percent) are noise in a headline.
const NOTABLE_PCT: f64 = 5.0;

/// The latency range of histogram bin `k` (bin 0 starts at 1 ms).
pub fn bin(k: i32, requests: u32) -> HistogramBin {
    let edge = |k: i32| 2f64.powf(f64::from(k) / BINS_PER_OCTAVE);
    HistogramBin {
        lo_ms: edge(k),
        hi_ms: edge(k + 1),
        requests,
    }
}

fn metrics(s: &CompareSide) -> [(&'static str, Option<Percentiles>); 4] {
    [
        ("ttft", s.ttft_ms),
        ("tpot", s.tpot_ms),
        ("queue", s.queue_ms),
        ("e2e", s.e2e_ms),
    ]
}

/// B against A for every metric and percentile both sides have.
pub fn deltas(a: &CompareSide, b: &CompareSide) -> Vec<Delta> {
    let mut out = Vec::new();
    for ((metric, pa), (_, pb)) in metrics(a).into_iter().zip(metrics(b)) {
        let (Some(pa), Some(pb)) = (pa, pb) else {
            continue;
        };
        for (percentile, a_ms, b_ms) in [
            ("p50", pa.p50, pb.p50),
            ("p90", pa.p90, pb.p90),
            ("p99", pa.p99, pb.p99),
        ] {
            out.push(Delta {
                metric: metric.into(),
                percentile: percentile.into(),
                a_ms,
                b_ms,
                delta_ms: b_ms - a_ms,
                delta_pct: (a_ms > 0.0).then(|| (b_ms - a_ms) / a_ms * 100.0),
            });
        }
    }
    out
}

fn signed_duration(ms: f64) -> String {
    let sign = if ms < 0.0 { "−" } else { "+" };
    let v = ms.abs();
    if v >= 1000.0 {
        format!("{sign}{:.2} s", v / 1000.0)
    } else if v >= 10.0 {
        format!("{sign}{v:.0} ms")
    } else {
        format!("{sign}{v:.1} ms")
    }
}

fn cause_count(causes: &[CauseCount], c: crate::analysis::diagnosis::Cause) -> u32 {
    causes
        .iter()
        .find(|x| x.cause == c)
        .map_or(0, |x| x.requests)
}

/// "TTFT p90 +340 ms (+62 %) in B; queue_backlog 3 → 41": the p90 that moved most (relative to
/// A), then the cause whose count moved most.
pub fn headline(a: &CompareSide, b: &CompareSide, deltas: &[Delta]) -> String {
    if a.requests == 0 || b.requests == 0 {
        let empty = if a.requests == 0 { "A" } else { "B" };
        return format!("Side {empty} has no requests: widen its range or change its filters.");
    }
    let mut parts = Vec::new();
    let biggest = deltas
        .iter()
        .filter(|d| d.percentile == "p90")
        .filter_map(|d| d.delta_pct.map(|p| (d, p)))
        .max_by(|x, y| x.1.abs().total_cmp(&y.1.abs()));
    match biggest {
        Some((d, pct)) if pct.abs() >= NOTABLE_PCT => parts.push(format!(
            "{} p90 {} ({}{:.0} %) in B",
            d.metric.to_uppercase(),
            signed_duration(d.delta_ms),
            if pct < 0.0 { "−" } else { "+" },
            pct.abs()
        )),
        _ => parts.push(format!(
            "No p90 latency moved by {NOTABLE_PCT:.0} % or more"
        )),
    }
    let mut causes: Vec<_> = a.causes.iter().chain(&b.causes).map(|c| c.cause).collect();
    causes.sort();
    causes.dedup();
    let moved = causes
        .into_iter()
        .map(|c| (c, cause_count(&a.causes, c), cause_count(&b.causes, c)))
        .filter(|(_, x, y)| x != y)
        .max_by_key(|(_, x, y)| x.abs_diff(*y));
    if let Some((c, x, y)) = moved {
        parts.push(format!("{} {x} → {y}", c.name()));
    }
    if let (Some(wa), Some(wb)) = (a.words, b.words) {
        parts.extend(word_drift(&wa, &wb));
    }
    parts.join("; ")
}

/// The word-choice changes worth a headline: answers ending on EOS (5 points or more), their
/// length (by `NOTABLE_PCT`), the chosen tokens' mean probability (0.02 or more).
fn word_drift(a: &WordChoice, b: &WordChoice) -> Option<String> {
    let mut moved = Vec::new();
    if (b.eos_rate - a.eos_rate).abs() >= 0.05 {
        moved.push(format!(
            "answers ending on EOS {:.0} % → {:.0} %",
            a.eos_rate * 100.0,
            b.eos_rate * 100.0
        ));
    }
    let pct = (b.mean_answer_tokens / a.mean_answer_tokens.max(1e-9) - 1.0) * 100.0;
    if pct.abs() >= NOTABLE_PCT {
        moved.push(format!(
            "answers {:.0} → {:.0} tokens",
            a.mean_answer_tokens, b.mean_answer_tokens
        ));
    }
    if (b.mean_probability - a.mean_probability).abs() >= 0.02 {
        moved.push(format!(
            "chosen-token probability {:.2} → {:.2}",
            a.mean_probability, b.mean_probability
        ));
    }
    (!moved.is_empty()).then(|| moved.join(", "))
}

/// One side of a comparison (`GET /api/v1/compare`): which requests, their latency percentiles
/// over the whole side, the percentiles over time, histograms and the causes diagnosed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompareSide {
    pub instances: Vec<String>,
    pub engine: Option<String>,
    pub engine_version: Option<String>,
    pub model: Option<String>,
    /// The side's slice: tenant, LoRA adapter and priority (each when set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_adapter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// A prompt family (block hash) the side is narrowed to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    pub from_ns: Nanos,
    pub to_ns: Nanos,
    pub requests: u64,
    pub ttft_ms: Option<Percentiles>,
    pub tpot_ms: Option<Percentiles>,
    pub queue_ms: Option<Percentiles>,
    pub e2e_ms: Option<Percentiles>,
    pub series: LatencySeries,
    /// Requests per latency bin; bins are shared by both sides (quarter octaves of a millisecond).
    pub ttft_histogram: Vec<HistogramBin>,
    pub tpot_histogram: Vec<HistogramBin>,
    /// Degraded requests per diagnosis cause, most frequent first.
    pub causes: Vec<CauseCount>,
    /// Requests the cause counts looked at (the first ones of the side, at most a few thousand).
    pub diagnosed: u64,
    /// GPU time by tenant over the side's window (snapped out to whole minutes), most first.
    #[serde(default)]
    pub usage: Vec<crate::analysis::usage::UsageGroup>,
    /// The side's instances' busy time in that window (`usage`'s sum).
    #[serde(default)]
    pub busy_s: f64,
    /// What the answers said, when the engine reported probabilities (the data-plane A/B).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub words: Option<WordChoice>,
}

/// A side's word choice: how sure the model was of its tokens, how its answers ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WordChoice {
    /// Requests with token probabilities (the rest are not counted here).
    pub answers: u64,
    /// The chosen tokens' mean probability, and the candidates' mean entropy (nats; `None`
    /// without candidates).
    pub mean_probability: f64,
    pub mean_entropy: Option<f64>,
    /// Share of the answers that ended on an end-of-sequence token (the rest hit max_tokens,
    /// were aborted, or ended on a stop string).
    pub eos_rate: f64,
    pub mean_answer_tokens: f64,
    /// Tokens sampled far from the top (p < 0.05, not the likeliest) per 1,000 tokens.
    pub unlikely_per_1k: f64,
}

impl WordChoice {
    /// `None` when no answer of the side had probabilities.
    pub fn of(s: WordSums) -> Option<WordChoice> {
        if s.answers == 0 || s.tokens <= 0.0 {
            return None;
        }
        Some(WordChoice {
            answers: s.answers,
            mean_probability: s.probability_sum / s.tokens,
            mean_entropy: (s.entropy_tokens > 0.0).then(|| s.entropy_sum / s.entropy_tokens),
            eos_rate: s.eos as f64 / s.answers as f64,
            mean_answer_tokens: s.answer_tokens / s.answers as f64,
            unlikely_per_1k: s.unlikely * 1000.0 / s.tokens,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistogramBin {
    pub lo_ms: f64,
    pub hi_ms: f64,
    pub requests: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CauseCount {
    pub cause: Cause,
    pub requests: u32,
    /// The worst requests with this cause (up to three), to open as examples.
    pub examples: Vec<String>,
}

/// Side B against side A, one number.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    /// "ttft", "tpot", "queue" or "e2e".
    pub metric: String,
    /// "p50", "p90" or "p99".
    pub percentile: String,
    pub a_ms: f64,
    pub b_ms: f64,
    /// `b − a`; positive means B is slower.
    pub delta_ms: f64,
    /// The change relative to A, in percent (`null` when A is 0).
    pub delta_pct: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::diagnosis::Cause;
    use crate::analysis::metrics::LatencySeries;

    fn side(ttft_p90: f64, causes: &[(Cause, u32)]) -> CompareSide {
        let p = |v: f64| Percentiles {
            p50: v / 2.0,
            p90: v,
            p99: v * 2.0,
        };
        CompareSide {
            instances: vec!["gpu-0".into()],
            engine: None,
            engine_version: None,
            model: None,
            tenant: None,
            lora_adapter: None,
            priority: None,
            fingerprint: None,
            from_ns: 0,
            to_ns: 1,
            requests: 100,
            ttft_ms: Some(p(ttft_p90)),
            tpot_ms: Some(p(20.0)),
            queue_ms: None,
            e2e_ms: Some(p(1000.0)),
            series: LatencySeries {
                from_ns: 0,
                to_ns: 1,
                bucket_ns: 1,
                ttft_slo_ms: 2000.0,
                tpot_slo_ms: 50.0,
                buckets: vec![],
            },
            ttft_histogram: vec![],
            tpot_histogram: vec![],
            causes: causes
                .iter()
                .map(|&(cause, requests)| CauseCount {
                    cause,
                    requests,
                    examples: vec![],
                })
                .collect(),
            diagnosed: 100,
            usage: Vec::new(),
            busy_s: 0.0,
            words: None,
        }
    }

    #[test]
    fn the_words_drift_is_news_too() {
        let mut a = side(550.0, &[]);
        let mut b = side(552.0, &[]);
        let sums = |eos: u64, answer_tokens: f64| WordSums {
            answers: 100,
            answer_tokens,
            tokens: answer_tokens,
            probability_sum: answer_tokens * 0.8,
            entropy_tokens: 0.0,
            entropy_sum: 0.0,
            eos,
            unlikely: 3.0,
        };
        a.words = WordChoice::of(sums(80, 24_000.0));
        b.words = WordChoice::of(sums(100, 15_000.0));
        assert_eq!(b.words.unwrap().mean_entropy, None);
        assert!((b.words.unwrap().unlikely_per_1k - 0.2).abs() < 1e-9);
        assert_eq!(
            headline(&a, &b, &deltas(&a, &b)),
            "No p90 latency moved by 5 % or more; answers ending on EOS 80 % → 100 %, answers 240 → 150 tokens"
        );
        assert_eq!(WordChoice::of(WordSums::default()), None);
    }

    #[test]
    fn headline_names_the_biggest_p90_move_and_the_cause_that_grew() {
        let a = side(550.0, &[(Cause::QueueBacklog, 3)]);
        let b = side(890.0, &[(Cause::QueueBacklog, 41), (Cause::KvPreempted, 2)]);
        let d = deltas(&a, &b);
        assert_eq!(d.len(), 9, "queue has no percentiles on side A");
        assert_eq!(
            headline(&a, &b, &d),
            "TTFT p90 +340 ms (+62 %) in B; queue_backlog 3 → 41"
        );
    }

    #[test]
    fn small_moves_are_not_news_and_empty_sides_say_so() {
        let a = side(550.0, &[]);
        let b = side(560.0, &[]);
        assert_eq!(
            headline(&a, &b, &deltas(&a, &b)),
            "No p90 latency moved by 5 % or more"
        );
        let empty = CompareSide {
            requests: 0,
            ..side(1.0, &[])
        };
        assert!(headline(&a, &empty, &[]).starts_with("Side B has no requests"));
    }

    #[test]
    fn cause_names_are_the_api_names() {
        for c in [
            Cause::PrefillInterruptedDecode,
            Cause::PrefillMonopolized,
            Cause::QueueBacklog,
            Cause::KvPreempted,
            Cause::KvTransferSlow,
            Cause::LowProbabilityEos,
            Cause::LowProbabilityToken,
        ] {
            assert_eq!(serde_json::to_value(c).unwrap(), c.name());
        }
    }

    #[test]
    fn bins_double_every_four() {
        assert_eq!(bin(0, 1).lo_ms, 1.0);
        assert_eq!(bin(4, 1).lo_ms, 2.0);
        assert!((bin(3, 1).hi_ms - 2.0).abs() < 1e-9);
        assert_eq!(bin(-4, 1).lo_ms, 0.5);
    }
}

//! Request-level latency metrics, defined once: TTFT, TPOT, end-to-end and queue time. The store
//! keeps them as columns (derived at ingest) and the analysis reads them from here.

use serde::{Deserialize, Serialize};

use super::{Nanos, Rank, RequestTrace, SpecialToken};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestMetrics {
    /// First token − arrival.
    pub ttft_ns: Option<Nanos>,
    /// (finished − first token) / (output tokens − 1); needs at least two output tokens.
    pub tpot_ns: Option<Nanos>,
    /// Finished − arrival.
    pub e2e_ns: Nanos,
    /// First scheduled − queued (arrival when the queue entry time is unknown).
    pub queue_ns: Option<Nanos>,
}

pub fn request_metrics(r: &RequestTrace) -> RequestMetrics {
    let first_token = r.first_token_at();
    let tpot_ns = match (first_token, r.output_tokens) {
        (Some(ft), n) if n >= 2 => Some((r.finished_ns - ft) / Nanos::from(n - 1)),
        _ => None,
    };
    RequestMetrics {
        ttft_ns: first_token.map(|t| t - r.arrival_ns),
        tpot_ns,
        e2e_ns: r.finished_ns - r.arrival_ns,
        queue_ns: r
            .first_scheduled_at()
            .map(|s| s - r.queued_ns.unwrap_or(r.arrival_ns)),
    }
}

/// A token sampled below this probability and not the likeliest counts as unlikely in
/// [`WordStats`] (the diagnosis's default `token_probability`).
pub const UNLIKELY_TOKEN_PROBABILITY: f32 = 0.05;

/// What a request's answer says about the model's word choice, summed so that a window adds
/// them up (kept with the stored request; compare's sides are their sums).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WordStats {
    /// Tokens with a probability, and their probabilities' sum.
    pub tokens: u32,
    pub probability_sum: f64,
    /// Tokens with candidates, and the candidates' entropy summed (nats).
    pub entropy_tokens: u32,
    pub entropy_sum: f64,
    /// The answer ended on an end-of-sequence token.
    pub eos: bool,
    /// Tokens sampled below [`UNLIKELY_TOKEN_PROBABILITY`] that were not the likeliest.
    pub unlikely: u32,
}

/// A set of requests' [`WordStats`] added up (with their answers' lengths): what the store
/// sums in SQL and compare turns into a side's word choice.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WordSums {
    /// Requests with word stats, and their output tokens.
    pub answers: u64,
    pub answer_tokens: f64,
    pub tokens: f64,
    pub probability_sum: f64,
    pub entropy_tokens: f64,
    pub entropy_sum: f64,
    /// Answers that ended on an end-of-sequence token.
    pub eos: u64,
    pub unlikely: f64,
}

impl WordSums {
    /// Adds one answer's stats, with its length in tokens.
    pub fn add(&mut self, w: &WordStats, output_tokens: u32) {
        self.answers += 1;
        self.answer_tokens += f64::from(output_tokens);
        self.tokens += f64::from(w.tokens);
        self.probability_sum += w.probability_sum;
        self.entropy_tokens += f64::from(w.entropy_tokens);
        self.entropy_sum += w.entropy_sum;
        self.eos += u64::from(w.eos);
        self.unlikely += f64::from(w.unlikely);
    }

    pub fn merge(&mut self, o: &WordSums) {
        self.answers += o.answers;
        self.answer_tokens += o.answer_tokens;
        self.tokens += o.tokens;
        self.probability_sum += o.probability_sum;
        self.entropy_tokens += o.entropy_tokens;
        self.entropy_sum += o.entropy_sum;
        self.eos += o.eos;
        self.unlikely += o.unlikely;
    }
}

/// The request's [`WordStats`]; `None` when no token has a probability (timing-only sources).
pub fn word_stats(r: &RequestTrace) -> Option<WordStats> {
    let mut s = WordStats {
        eos: r
            .tokens
            .last()
            .is_some_and(|t| t.special == SpecialToken::Eos),
        ..WordStats::default()
    };
    for t in &r.tokens {
        let (p, entropy, _) = t.word_choice();
        if let Some(p) = p {
            s.tokens += 1;
            s.probability_sum += f64::from(p);
            let below_top = t.rank_known().is_some_and(Rank::below_top);
            if below_top && t.special == SpecialToken::None && p < UNLIKELY_TOKEN_PROBABILITY {
                s.unlikely += 1;
            }
        }
        if let Some(e) = entropy {
            s.entropy_tokens += 1;
            s.entropy_sum += f64::from(e);
        }
    }
    (s.tokens > 0).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Token;

    const T0: Nanos = 1_700_000_000_000_000_000;

    #[test]
    fn metrics_follow_the_definitions() {
        let r = RequestTrace {
            request_id: "r".into(),
            arrival_ns: T0,
            queued_ns: Some(T0 + 1_000_000),
            first_scheduled_ns: Some(T0 + 5_000_000),
            finished_ns: T0 + 230_000_000,
            output_tokens: 3,
            tokens: [30_000_000, 130_000_000, 230_000_000]
                .iter()
                .map(|d| Token {
                    emitted_ns: Some(T0 + d),
                    ..Token::default()
                })
                .collect(),
            ..RequestTrace::default()
        };
        let m = request_metrics(&r);
        assert_eq!(m.ttft_ns, Some(30_000_000));
        assert_eq!(m.tpot_ns, Some(100_000_000));
        assert_eq!(m.e2e_ns, 230_000_000);
        assert_eq!(m.queue_ns, Some(4_000_000));
    }

    #[test]
    fn single_token_has_no_tpot() {
        let r = RequestTrace {
            arrival_ns: T0,
            first_token_ns: Some(T0 + 10),
            finished_ns: T0 + 10,
            output_tokens: 1,
            ..RequestTrace::default()
        };
        assert_eq!(request_metrics(&r).tpot_ns, None);
        assert_eq!(request_metrics(&r).ttft_ns, Some(10));
    }
}

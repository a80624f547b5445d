//! Culprits weighed by their share of the lost time: how long each other request's prefill had
//! the engine inside a window (a wait for the first token, the gaps of a stalled decode), never
//! more in all than the window itself.
//!
//! From iteration records, the steps that ended inside the window delayed it (a token comes out
//! when its step ends); each one's time inside the window is shared by the tokens it computed,
//! prefill and decode alike, so a small prompt in a large decode batch takes a small share. With
//! async scheduling step k+1 starts before step k's token is out: it straddles the window's end
//! but did not delay that token, and it ends in the next window, where it counts. Overlapping
//! steps are not counted twice: each instant of the window goes to the step that ended first
//! after it. From request spans,
//! overlapping prefill intervals share the time they overlap the same way, so two prompts
//! prefilled together are not counted twice.
//!
//! A culprit is named when its share is material: at least [`MATERIAL`] of the lost time. More
//! than that many equal culprits cannot all be material, so a wait spread over a stream of small
//! prefills (a saturated engine) names no one: `engine_saturated` says so instead of a list of
//! hundreds.

use std::collections::BTreeMap;

use super::{Context, duration, ms};
use crate::model::{Nanos, Phase};

/// The share of the lost time that makes a culprit worth naming.
pub const MATERIAL: f64 = 0.05;

/// At most this many culprits are named in a sentence; the rest are counted.
const IN_SENTENCE: usize = 3;

#[derive(Clone, Debug, PartialEq)]
pub(super) struct Culprit {
    pub id: String,
    /// Time its prefill had the engine inside the window.
    pub held: Nanos,
    /// Its prompt tokens computed inside the window.
    pub tokens: u64,
}

/// Who held the engine inside one window (or several: a decode's gaps, added up).
#[derive(Clone, Debug, Default)]
pub(super) struct Shares {
    /// The time the culprits are weighed against.
    pub lost: Nanos,
    by: BTreeMap<String, (Nanos, u64)>,
    /// The victim's own prompt's share, weighed the same way.
    pub own: Nanos,
    pub inferred: bool,
}

impl Shares {
    /// Adds the prefills of requests other than `victim` inside [from, to).
    pub fn add(&mut self, victim: &str, from: Nanos, to: Nanos, ctx: &Context) {
        if to <= from {
            return;
        }
        self.lost += to - from;
        if ctx.iterations.is_empty() {
            self.inferred = true;
            self.add_spans(victim, from, to, ctx);
        } else {
            self.add_steps(victim, from, to, ctx);
        }
    }

    fn add_steps(&mut self, victim: &str, from: Nanos, to: Nanos, ctx: &Context) {
        let mut ended: Vec<&crate::model::Iteration> = ctx
            .iterations
            .iter()
            .filter(|it| it.end_ns > from && it.end_ns <= to)
            .collect();
        ended.sort_by_key(|it| (it.end_ns, it.start_ns));
        let mut covered = from;
        for it in ended {
            let overlap = (it.end_ns - it.start_ns.max(covered)).max(0);
            covered = covered.max(it.end_ns);
            let inside = overlap as f64 / (it.end_ns - it.start_ns).max(1) as f64;
            let total = f64::from(it.batch.iter().map(|e| e.tokens).sum::<u32>().max(1));
            for e in it.batch.iter().filter(|e| e.phase == Phase::Prefill) {
                if *e.request_id == *victim {
                    self.own += (overlap as f64 * f64::from(e.tokens) / total) as Nanos;
                    continue;
                }
                let slot = self.by.entry(e.request_id.to_string()).or_default();
                slot.0 += (overlap as f64 * f64::from(e.tokens) / total) as Nanos;
                slot.1 += (f64::from(e.tokens) * inside).round() as u64;
            }
        }
    }

    /// Sweeps the window's elementary segments: in each, the prefill intervals active then share
    /// its time by their tokens.
    fn add_spans(&mut self, victim: &str, from: Nanos, to: Nanos, ctx: &Context) {
        let intervals: Vec<(Nanos, Nanos, u32, &str)> = ctx
            .others
            .iter()
            .flat_map(|o| {
                o.prefill
                    .iter()
                    .filter(|&&(s, e, _)| e > from && s < to && e > s)
                    .map(move |&(s, e, k)| (s, e, k.max(1), o.request_id.as_str()))
            })
            .collect();
        let mut cuts: Vec<Nanos> = intervals
            .iter()
            .flat_map(|&(s, e, _, _)| [s.max(from), e.min(to)])
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        for w in cuts.windows(2) {
            let (a, b) = (w[0], w[1]);
            let active: Vec<_> = intervals.iter().filter(|i| i.0 <= a && i.1 >= b).collect();
            let weight: f64 = active.iter().map(|i| f64::from(i.2)).sum();
            for &&(s, e, k, id) in &active {
                let part = f64::from(k) / weight;
                if id == victim {
                    self.own += ((b - a) as f64 * part) as Nanos;
                    continue;
                }
                let slot = self.by.entry(id.to_string()).or_default();
                slot.0 += ((b - a) as f64 * part) as Nanos;
                // Tokens by the part of its interval inside this segment.
                slot.1 += (f64::from(k) * (b - a) as f64 / (e - s) as f64).round() as u64;
            }
        }
    }

    /// Every culprit, the one that held the engine longest first.
    pub fn all(&self) -> Vec<Culprit> {
        let mut all: Vec<Culprit> = self
            .by
            .iter()
            .filter(|(_, v)| v.0 > 0)
            .map(|(id, &(held, tokens))| Culprit {
                id: id.clone(),
                held,
                tokens,
            })
            .collect();
        all.sort_by(|a, b| b.held.cmp(&a.held).then(a.id.cmp(&b.id)));
        all
    }

    /// The culprits whose share is material.
    pub fn material(&self) -> Vec<Culprit> {
        let min = (self.lost as f64 * MATERIAL) as Nanos;
        self.all()
            .into_iter()
            .filter(|c| c.held >= min.max(1))
            .collect()
    }

    /// Time all other requests' prefills held inside the window(s).
    pub fn prefill(&self) -> Nanos {
        self.by.values().map(|v| v.0).sum()
    }

    pub fn tokens(&self) -> u64 {
        self.by.values().map(|v| v.1).sum()
    }

    pub fn requests(&self) -> usize {
        self.by.values().filter(|v| v.0 > 0).count()
    }

    pub fn share(&self, held: Nanos) -> f64 {
        held as f64 / self.lost.max(1) as f64
    }

    /// `A 0.95 s (35 %), B 0.92 s (34 %) and 4 more`.
    pub fn sentence(&self, culprits: &[Culprit]) -> String {
        let named: Vec<String> = culprits
            .iter()
            .take(IN_SENTENCE)
            .map(|c| {
                format!(
                    "{} {} ({:.0} %)",
                    c.id,
                    duration(c.held),
                    self.share(c.held) * 100.0
                )
            })
            .collect();
        let rest = culprits.len().saturating_sub(IN_SENTENCE);
        match (named.len(), rest) {
            (0, _) => String::new(),
            (_, 0) => named.join(", "),
            _ => format!("{} and {rest} more", named.join(", ")),
        }
    }

    /// The culprits as evidence: each with its time, share and tokens.
    pub fn evidence(&self, culprits: &[Culprit]) -> serde_json::Value {
        culprits
            .iter()
            .map(|c| {
                serde_json::json!({
                    "request_id": c.id,
                    "held_ms": ms(c.held),
                    "share": (self.share(c.held) * 1000.0).round() / 1000.0,
                    "prefill_tokens": c.tokens,
                })
            })
            .collect::<Vec<_>>()
            .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::diagnosis::OtherRequest;

    const MS: Nanos = 1_000_000;

    fn other(id: &str, tokens: u32, s: i64, e: i64) -> OtherRequest {
        OtherRequest {
            request_id: id.into(),
            prompt_tokens: tokens,
            prefill: vec![(s * MS, e * MS, tokens)],
        }
    }

    #[test]
    fn overlapping_prefills_share_their_time_and_never_exceed_the_window() {
        // Two prompts prefilled together over the whole 1 s window, a third alone after it.
        let others = [
            other("a", 30_000, 0, 1_000),
            other("b", 10_000, 0, 1_000),
            other("c", 5_000, 1_000, 2_000),
        ];
        let ctx = Context {
            iterations: &[],
            others: &others,
        };
        let mut s = Shares::default();
        s.add("v", 0, 1_000 * MS, &ctx);
        assert_eq!(s.lost, 1_000 * MS);
        assert!(s.prefill() <= s.lost);
        let all = s.all();
        assert_eq!(all[0].id, "a");
        assert_eq!(all[0].held, 750 * MS);
        assert_eq!(all[1].held, 250 * MS);
        assert_eq!(all.len(), 2, "c is outside the window");
        assert_eq!(s.sentence(&all), "a 750.0 ms (75 %), b 250.0 ms (25 %)");
    }

    #[test]
    fn a_stream_of_small_prefills_names_no_one() {
        let others: Vec<OtherRequest> = (0..40)
            .map(|i| other(&format!("r{i}"), 500, i * 25, i * 25 + 25))
            .collect();
        let ctx = Context {
            iterations: &[],
            others: &others,
        };
        let mut s = Shares::default();
        s.add("v", 0, 1_000 * MS, &ctx);
        assert_eq!(s.requests(), 40);
        assert!(s.material().is_empty(), "each holds 2.5 %");
        assert_eq!(s.prefill(), 1_000 * MS);
    }
}

//! Decode stalls: gaps between tokens past the TPOT SLO, or, when the mean is within it, single
//! gaps past the stall threshold (a reader watched the stream stop); both attributed to the
//! prefills of other requests that ran inside them.

use std::collections::BTreeMap;

use super::{
    Cause, Context, Finding, Severity, Thresholds, duration, gaps_over, ms, name_list, slo_text,
    thousands,
};
use crate::model::{Nanos, Phase, RequestTrace};

/// Prefill work by other requests inside [from, to): exact from iterations, else inferred.
/// Returns per-culprit (time, tokens) and whether it was inferred.
///
/// A step counts for the part of it inside the gap. Engines that schedule step k+1 before step
/// k's output is processed (vLLM's async scheduling, SGLang's overlap scheduler) emit a token
/// after the next step started, so a step rarely lies wholly inside a gap between two tokens.
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
            .filter(|it| it.start_ns < to && it.end_ns > from)
        {
            let overlap = it.end_ns.min(to) - it.start_ns.max(from);
            let inside = overlap as f64 / (it.end_ns - it.start_ns).max(1) as f64;
            let total: u32 = it.tokens_in(Phase::Prefill);
            for e in it
                .batch
                .iter()
                .filter(|e| e.phase == Phase::Prefill && *e.request_id != *victim)
            {
                // The step's time in the gap is shared by its prefills in proportion to their
                // tokens; so are the tokens, by the part of the step inside the gap.
                let share = overlap as f64 * f64::from(e.tokens) / f64::from(total.max(1));
                let slot = by.entry(e.request_id.to_string()).or_default();
                slot.0 += share as Nanos;
                slot.1 += (f64::from(e.tokens) * inside).round() as u64;
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

/// What ran inside a request's stalled gaps.
struct Stalls {
    /// Time stalled in all, and in how many gaps.
    stalled: Nanos,
    gaps: usize,
    /// The longest gap: its length and the index of the token that ended it.
    longest: (Nanos, usize),
    /// Other requests' prefills inside the gaps: time and tokens per request.
    culprits: BTreeMap<String, (Nanos, u64)>,
    inferred: bool,
    /// Some gap overlaps one of the request's own preemptions (which its own finding names).
    preempted: bool,
}

impl Stalls {
    /// The gaps of `r` longer than `over_ms`, and who prefilled in them; `None` without such gaps.
    fn of(r: &RequestTrace, over_ms: f64, ctx: &Context) -> Option<Self> {
        let times: Vec<Nanos> = r.tokens.iter().filter_map(|t| t.emitted_ns).collect();
        let mut s = Stalls {
            stalled: 0,
            gaps: 0,
            longest: (0, 0),
            culprits: BTreeMap::new(),
            inferred: false,
            preempted: false,
        };
        for (from, to) in gaps_over(&times, over_ms) {
            s.gaps += 1;
            s.stalled += to - from;
            if to - from > s.longest.0 {
                s.longest = (to - from, times.partition_point(|&t| t < to));
            }
            s.preempted |= r
                .preemptions
                .iter()
                .any(|p| p.at_ns < to && p.resumed_ns.unwrap_or(r.finished_ns) > from);
            let (by, inferred) = prefill_between(&r.request_id, from, to, ctx);
            s.inferred |= inferred;
            for (id, (t, n)) in by {
                let slot = s.culprits.entry(id).or_default();
                slot.0 += t;
                slot.1 += n;
            }
        }
        (s.gaps > 0).then_some(s)
    }

    /// Other requests' prefills account for at least half the stalled time.
    fn explained(&self) -> bool {
        let prefill: Nanos = self.culprits.values().map(|v| v.0).sum();
        !self.culprits.is_empty() && prefill * 2 >= self.stalled
    }

    fn ids(&self) -> Vec<String> {
        self.culprits.keys().cloned().collect()
    }

    fn tokens(&self) -> u64 {
        self.culprits.values().map(|v| v.1).sum()
    }

    fn gap_words(&self) -> String {
        format!("{} gap{}", self.gaps, if self.gaps == 1 { "" } else { "s" })
    }

    fn evidence(&self, extra: serde_json::Value) -> serde_json::Value {
        let shares: serde_json::Map<String, serde_json::Value> = self
            .culprits
            .iter()
            .map(|(id, (t, _))| {
                let share = *t as f64 / self.stalled.max(1) as f64;
                (
                    id.clone(),
                    serde_json::json!((share * 1000.0).round() / 1000.0),
                )
            })
            .collect();
        let mut e = serde_json::json!({
            "stalled_ms": ms(self.stalled), "gaps": self.gaps,
            "longest_gap_ms": ms(self.longest.0), "longest_gap_before_token": self.longest.1,
            "share_of_stall": shares,
        });
        if let (Some(e), serde_json::Value::Object(x)) = (e.as_object_mut(), extra) {
            e.extend(x);
        }
        e
    }
}

/// TPOT over its SLO: the gaps past the SLO, when other requests' prefills explain them.
pub(super) fn interrupted_decode(
    r: &RequestTrace,
    tpot: Nanos,
    ctx: &Context,
    th: &Thresholds,
) -> Option<Finding> {
    let s = Stalls::of(r, th.tpot_ms, ctx).filter(Stalls::explained)?;
    let ids = s.ids();
    Some(Finding {
        cause: Cause::PrefillInterruptedDecode,
        severity: Severity::Critical,
        summary: format!(
            "TPOT {} > {} SLO: decode stalled {} in {} while {} prefilled {} prompt tokens.",
            duration(tpot),
            slo_text(th.tpot_ms),
            duration(s.stalled),
            s.gap_words(),
            name_list(&ids),
            thousands(s.tokens())
        ),
        evidence: s.evidence(serde_json::json!({ "tpot_ms": ms(tpot) })),
        culprits: ids,
        inferred: s.inferred,
    })
}

/// TPOT within its SLO, but the stream stopped once (or more) for longer than the stall
/// threshold: named after the prefills inside the stop, or as an unexplained stall. A preemption
/// inside it is left to the preemption's own finding.
pub(super) fn frozen_decode(
    r: &RequestTrace,
    tpot: Option<Nanos>,
    ctx: &Context,
    th: &Thresholds,
) -> Option<Finding> {
    let s = Stalls::of(r, th.stall_ms, ctx)?;
    let (longest, token) = s.longest;
    let mean = tpot
        .map(|t| {
            format!(
                "; TPOT {} is within the {} SLO",
                duration(t),
                slo_text(th.tpot_ms)
            )
        })
        .unwrap_or_default();
    let head = format!(
        "The stream stopped for {} before token {token} ({} over the {} stall threshold{mean})",
        duration(longest),
        s.gap_words(),
        slo_text(th.stall_ms),
    );
    let evidence =
        s.evidence(serde_json::json!({ "tpot_ms": tpot.map(ms), "stall_ms": th.stall_ms }));
    if s.explained() {
        let ids = s.ids();
        return Some(Finding {
            cause: Cause::PrefillInterruptedDecode,
            severity: Severity::Warning,
            summary: format!(
                "{head} while {} prefilled {} prompt tokens.",
                name_list(&ids),
                thousands(s.tokens())
            ),
            evidence,
            culprits: ids,
            inferred: s.inferred,
        });
    }
    if s.preempted {
        return None;
    }
    Some(Finding {
        cause: Cause::DecodeStalled,
        severity: Severity::Warning,
        summary: format!("{head}; no other request's prefill on this instance ran inside it."),
        evidence,
        culprits: Vec::new(),
        inferred: s.inferred,
    })
}

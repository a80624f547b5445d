//! Decode stalls: gaps between tokens past the TPOT SLO, or, when the mean is within it, single
//! gaps past the stall threshold (a reader watched the stream stop); both attributed to the
//! prefills of other requests that ran inside them, each weighed by its share (`share`).

use super::share::{Culprit, MATERIAL, Shares};
use super::{
    Cause, Context, Finding, Severity, Thresholds, duration, gaps_over, ms, slo_text, thousands,
};
use crate::model::{Nanos, RequestTrace};

/// What ran inside a request's stalled gaps. Each gap is judged on its own: one that other
/// requests' prefills held for at least half its length is theirs; one they did not (a decode
/// step that stalled by itself, the host pausing the engine) is set aside, so that one hiccup
/// does not hide five stalls that a long prompt caused, nor lend them its length.
struct Stalls {
    /// Time stalled in all, and in how many gaps.
    stalled: Nanos,
    gaps: usize,
    /// The longest gap: its length and the index of the token that ended it.
    longest: (Nanos, usize),
    /// The gaps other requests' prefills explain: their time, and how many.
    explained: Nanos,
    explained_gaps: usize,
    /// Other requests' prefills inside the explained gaps, weighed by their share of those gaps.
    shares: Shares,
    /// Other requests' prefills inside the gaps they do not explain.
    unexplained_prefill: Nanos,
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
            explained: 0,
            explained_gaps: 0,
            shares: Shares::for_gaps(&times, ctx),
            unexplained_prefill: 0,
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
            let gap = s.shares.window(&r.request_id, from, to, ctx);
            if gap.prefill() > 0 && gap.prefill() * 2 >= to - from {
                s.explained += to - from;
                s.explained_gaps += 1;
                s.shares.merge(gap);
            } else {
                s.unexplained_prefill += gap.prefill();
            }
        }
        (s.gaps > 0).then_some(s)
    }

    /// The gaps other requests' prefills explain are at least half the stalled time.
    fn explained(&self) -> bool {
        self.explained > 0 && self.explained * 2 >= self.stalled
    }

    /// ` (1 more gap of 60.0 ms in all no prefill explains)`, when some are not explained.
    fn rest(&self) -> String {
        match self.gaps - self.explained_gaps {
            0 => String::new(),
            n => format!(
                " ({n} more gap{} of {} in all no prefill explains)",
                if n == 1 { "" } else { "s" },
                duration(self.stalled - self.explained)
            ),
        }
    }

    fn gap_words(&self) -> String {
        format!("{} gap{}", self.gaps, if self.gaps == 1 { "" } else { "s" })
    }

    /// `while 6 other requests prefilled 168,000 prompt tokens: A 1.12 s (17 %), … and 3 more`,
    /// naming the material culprits.
    fn who(&self, named: &[Culprit]) -> String {
        let n = self.shares.requests();
        let list = self.shares.sentence(named);
        format!(
            "while {} prefilled {} prompt tokens{}",
            if n == 1 {
                "1 other request".to_string()
            } else {
                format!("{n} other requests")
            },
            thousands(self.shares.tokens()),
            if list.is_empty() {
                String::new()
            } else {
                format!(": {list}")
            }
        )
    }

    fn evidence(&self, named: &[Culprit], extra: serde_json::Value) -> serde_json::Value {
        let mut e = serde_json::json!({
            "stalled_ms": ms(self.stalled), "gaps": self.gaps,
            "longest_gap_ms": ms(self.longest.0), "longest_gap_before_token": self.longest.1,
            "explained_gaps": self.explained_gaps, "explained_ms": ms(self.explained),
            "prefill_ms": ms(self.shares.prefill()),
            "prefill_requests": self.shares.requests(),
            "prefill_tokens": self.shares.tokens(),
            "culprits": self.shares.evidence(named),
        });
        if let (Some(e), serde_json::Value::Object(x)) = (e.as_object_mut(), extra) {
            e.extend(x);
        }
        e
    }

    /// The stall's prefills, named: the material culprits, or (none material) a saturated
    /// engine.
    fn attributed(&self, head: String, severity: Severity, extra: serde_json::Value) -> Finding {
        let named = self.shares.material();
        let culprits = named.iter().map(|c| c.id.clone()).collect();
        if named.is_empty() {
            return Finding {
                cause: Cause::EngineSaturated,
                severity,
                summary: format!(
                    "{head} {}, none of them {:.0} % of the stall{}: the engine was saturated.",
                    self.who(&[]),
                    MATERIAL * 100.0,
                    self.rest(),
                ),
                evidence: self.evidence(&[], extra),
                culprits,
                inferred: self.shares.inferred,
            };
        }
        Finding {
            cause: Cause::PrefillInterruptedDecode,
            severity,
            summary: format!("{head} {}{}.", self.who(&named), self.rest()),
            evidence: self.evidence(&named, extra),
            culprits,
            inferred: self.shares.inferred,
        }
    }
}

/// TPOT over its SLO: the gaps past the SLO, when other requests' prefills explain them.
pub(super) fn interrupted_decode(
    r: &RequestTrace,
    tpot: Nanos,
    ctx: &Context,
    th: &Thresholds,
) -> Option<Finding> {
    let mut s = Stalls::of(r, th.tpot_ms, ctx).filter(Stalls::explained)?;
    s.shares = s.shares.against_prefill();
    let head = format!(
        "TPOT {} > {} SLO: decode stalled {} in {}",
        duration(tpot),
        slo_text(th.tpot_ms),
        duration(s.stalled),
        s.gap_words(),
    );
    Some(s.attributed(
        head,
        Severity::Critical,
        serde_json::json!({ "tpot_ms": ms(tpot) }),
    ))
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
    let extra = serde_json::json!({ "tpot_ms": tpot.map(ms), "stall_ms": th.stall_ms });
    if s.explained() {
        return Some(s.attributed(head, Severity::Warning, extra));
    }
    if s.preempted {
        return None;
    }
    Some(Finding {
        cause: Cause::DecodeStalled,
        severity: Severity::Warning,
        summary: match s.shares.prefill() + s.unexplained_prefill {
            0 => format!("{head}; no other request's prefill on this instance ran inside it."),
            p => format!(
                "{head}; other requests' prefills held the engine for {} of the {} stalled, too little to explain it.",
                duration(p),
                duration(s.stalled),
            ),
        },
        evidence: s.evidence(&[], extra),
        culprits: Vec::new(),
        inferred: s.shares.inferred,
    })
}

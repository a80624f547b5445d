//! Speculative decoding gone wrong for one request, judged against the other requests in the same
//! steps: its drafts far less often accepted (each step verified drafts to keep about one token:
//! speculation cost more than it saved), or far more often over a long run, which is usually an
//! answer repeating itself (the repeated span is named).

use super::{Cause, Context, Finding, Severity};
use crate::model::{Iteration, RequestTrace, Token};

/// Speculative steps a request needs before its acceptance is judged.
const MIN_STEPS: u32 = 24;
/// "A long run" of unusually accepted drafts.
const LONG_RUN_STEPS: u32 = 48;
/// Drafts the other requests need for their acceptance to be the instance's usual.
const MIN_USUAL_DRAFTS: u32 = 64;
/// A repetition: at least this many copies of a span covering at least `MIN_REPEATED_TOKENS`.
const MIN_REPEATS: usize = 4;
const MIN_REPEATED_TOKENS: usize = 32;
const MAX_PERIOD: usize = 64;

/// Draft tokens verified and accepted over some steps.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Tally {
    steps: u32,
    proposed: u32,
    accepted: u32,
}

impl Tally {
    fn rate(&self) -> f64 {
        f64::from(self.accepted) / f64::from(self.proposed.max(1))
    }
}

/// The request's own speculative steps, and the other requests' in the steps it lived through.
fn tallies(request_id: &str, iterations: &[Iteration]) -> (Tally, Tally) {
    let (mut own, mut others) = (Tally::default(), Tally::default());
    for e in iterations.iter().flat_map(|it| &it.batch) {
        let Some(d) = e.draft.filter(|d| d.proposed > 0) else {
            continue;
        };
        let t = if &*e.request_id == request_id {
            &mut own
        } else {
            &mut others
        };
        t.steps += 1;
        t.proposed += d.proposed;
        t.accepted += d.accepted;
    }
    (own, others)
}

fn percent(x: f64) -> String {
    format!("{:.0} %", x * 100.0)
}

pub(super) fn speculation(r: &RequestTrace, ctx: &Context) -> Vec<Finding> {
    if !ctx.may_have_drafts() {
        return Vec::new(); // no step verified drafts: every entry's walk would find none
    }
    let (own, others) = tallies(&r.request_id, ctx.iterations);
    if own.steps < MIN_STEPS {
        return Vec::new();
    }
    let rate = own.rate();
    let usual = (others.proposed >= MIN_USUAL_DRAFTS).then(|| others.rate());
    let per_step = f64::from(own.accepted + own.steps) / f64::from(own.steps);
    let drafts_per_step = f64::from(own.proposed) / f64::from(own.steps);
    let mut evidence = serde_json::json!({
        "steps": own.steps, "proposed": own.proposed, "accepted": own.accepted,
        "acceptance": rate, "usual_acceptance": usual, "tokens_per_step": per_step,
    });
    let meanwhile = |u: Option<f64>| match u {
        Some(u) => format!(
            "the instance's other requests had {} of theirs accepted in the same steps",
            percent(u)
        ),
        None => "no other request speculated enough meanwhile to compare".into(),
    };
    let low = match usual {
        Some(u) => rate <= u / 2.0 && u - rate >= 0.25,
        None => rate < 0.15,
    };
    if low {
        return vec![Finding {
            cause: Cause::SpeculationLowAcceptance,
            severity: Severity::Warning,
            summary: format!(
                "Speculation cost more than it saved: {} of {} draft tokens accepted ({}) over {} steps, {per_step:.1} tokens a step for {drafts_per_step:.1} drafts verified; {}.",
                own.accepted,
                own.proposed,
                percent(rate),
                own.steps,
                meanwhile(usual)
            ),
            culprits: Vec::new(),
            evidence,
            inferred: false,
        }];
    }
    // Judged by rejections, as the low side is by acceptances: at most a third of the usual.
    let high = own.steps >= LONG_RUN_STEPS
        && match usual {
            Some(u) => rate >= 0.8 && 1.0 - rate <= (1.0 - u) / 3.0,
            None => rate >= 0.9,
        };
    if !high {
        return Vec::new();
    }
    let looped = repeated_span(&r.tokens);
    let summary = match &looped {
        Some(rep) => {
            evidence["repeated"] = serde_json::json!({
                "start": rep.start, "period": rep.period, "repeats": rep.repeats, "end": rep.end,
            });
            format!(
                "The answer repeats itself: a {}-token span ({}) {} times from position {} to {}, and the draft model guessed {} of {} drafts over {} steps ({}): a repetition loop.",
                rep.period,
                span_text(&r.tokens[rep.start..rep.start + rep.period]),
                rep.repeats,
                rep.start,
                rep.end,
                percent(rate),
                own.proposed,
                own.steps,
                meanwhile(usual)
            )
        }
        None => format!(
            "Drafts accepted unusually often: {} of {} over {} steps ({}); no repeated span found in the answer.",
            percent(rate),
            own.proposed,
            own.steps,
            meanwhile(usual)
        ),
    };
    vec![Finding {
        cause: Cause::SpeculationHighAcceptance,
        // A loop is a bad answer; a run of easy text is only worth knowing.
        severity: if looped.is_some() {
            Severity::Warning
        } else {
            Severity::Info
        },
        summary,
        culprits: Vec::new(),
        evidence,
        inferred: false,
    }]
}

/// Tokens `start..end` (end exclusive) are `repeats` copies of the `period` tokens at `start`
/// (the last copy may be cut short).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repeat {
    pub start: usize,
    pub period: usize,
    pub repeats: usize,
    pub end: usize,
}

/// The longest stretch of the answer that repeats one span (of at most `MAX_PERIOD` tokens) at
/// least `MIN_REPEATS` times over at least `MIN_REPEATED_TOKENS` tokens; the shortest span when
/// several cover the same stretch. Tokens are compared by id, else by text.
pub fn repeated_span(tokens: &[Token]) -> Option<Repeat> {
    fn key(t: &Token) -> (Option<u32>, Option<&str>) {
        (t.token_id, t.text.as_deref())
    }
    let known = |t: &Token| t.token_id.is_some() || t.text.is_some();
    let mut best: Option<Repeat> = None;
    for period in 1..=MAX_PERIOD.min(tokens.len() / MIN_REPEATS) {
        // Runs of i where token i equals token i - period: [run_start - period, i] is periodic.
        let mut run_start = period;
        for i in period..=tokens.len() {
            let same = i < tokens.len()
                && known(&tokens[i])
                && key(&tokens[i]) == key(&tokens[i - period]);
            if same {
                continue;
            }
            let (start, end) = (run_start - period, i);
            let covered = end - start;
            if covered >= MIN_REPEATED_TOKENS
                && covered / period >= MIN_REPEATS
                && best.is_none_or(|b| covered > b.end - b.start)
            {
                best = Some(Repeat {
                    start,
                    period,
                    repeats: covered / period,
                    end,
                });
            }
            run_start = i + 1;
        }
    }
    best
}

/// A span as a sentence quotes it: its texts joined (at most 60 characters), else its ids.
fn span_text(tokens: &[Token]) -> String {
    let text: String = tokens.iter().filter_map(|t| t.text.as_deref()).collect();
    if text.is_empty() {
        let ids: Vec<String> = tokens
            .iter()
            .map(|t| t.token_id.map_or("?".into(), |id| id.to_string()))
            .collect();
        return format!("token ids {}", ids.join(" "));
    }
    let cut: String = text.chars().take(60).collect();
    if cut.len() < text.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BatchEntry, Draft, Phase};

    fn tokens(ids: &[u32]) -> Vec<Token> {
        ids.iter()
            .map(|&id| Token {
                token_id: Some(id),
                text: Some(format!("w{id} ")),
                ..Token::default()
            })
            .collect()
    }

    #[test]
    fn the_repeated_span_is_found_with_its_shortest_period() {
        // 20 distinct tokens, then "7 8 9" repeated 15 times (45 tokens), then 3 more.
        let mut ids: Vec<u32> = (100..120).collect();
        for _ in 0..15 {
            ids.extend([7, 8, 9]);
        }
        ids.extend([1, 2, 3]);
        let rep = repeated_span(&tokens(&ids)).unwrap();
        assert_eq!(
            rep,
            Repeat {
                start: 20,
                period: 3,
                repeats: 15,
                end: 65
            }
        );
        // Too short a stretch, or too few copies, is no loop.
        let mut short: Vec<u32> = (100..120).collect();
        for _ in 0..5 {
            short.extend([7, 8, 9]);
        }
        assert_eq!(repeated_span(&tokens(&short)), None);
        let plain: Vec<u32> = (0..500).collect();
        assert_eq!(repeated_span(&tokens(&plain)), None);
        // Tokens without id or text never match each other.
        let blank = vec![Token::default(); 100];
        assert_eq!(repeated_span(&blank), None);
    }

    fn step(entries: &[(&str, u32, u32)]) -> Iteration {
        Iteration {
            iteration_id: 1,
            start_ns: 0,
            end_ns: 1,
            batch: entries
                .iter()
                .map(|&(id, proposed, accepted)| BatchEntry {
                    request_id: id.into(),
                    phase: Phase::Decode,
                    tokens: 1 + proposed,
                    prefill_offset: 0,
                    draft: Some(Draft { proposed, accepted }),
                })
                .collect(),
            running: entries.len() as u32,
            waiting: 0,
            kv_cache_usage: 0.0,
        }
    }

    fn request(n: usize) -> RequestTrace {
        RequestTrace {
            request_id: "me".into(),
            tokens: tokens(&(0..n as u32).collect::<Vec<_>>()),
            ..RequestTrace::default()
        }
    }

    fn judged(r: &RequestTrace, steps: &[Iteration]) -> Vec<Finding> {
        speculation(r, &Context::new(steps, &[], None))
    }

    #[test]
    fn drafts_rejected_far_more_often_than_the_neighbours_are_named() {
        let steps: Vec<Iteration> = (0..40)
            .map(|k| step(&[("me", 4, u32::from(k % 8 == 0)), ("other", 4, 3)]))
            .collect();
        let f = judged(&request(50), &steps);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].cause, Cause::SpeculationLowAcceptance);
        assert!(
            f[0].summary
                .contains("5 of 160 draft tokens accepted (3 %) over 40 steps"),
            "{}",
            f[0].summary
        );
        assert!(f[0].summary.contains("75 % of theirs"), "{}", f[0].summary);
        // Too few steps to judge; or as often accepted as the neighbours'.
        assert!(judged(&request(50), &steps[..10]).is_empty());
        let same: Vec<Iteration> = (0..40)
            .map(|_| step(&[("me", 4, 3), ("other", 4, 3)]))
            .collect();
        assert!(judged(&request(50), &same).is_empty());
    }

    #[test]
    fn a_long_run_of_accepted_drafts_over_a_loop_names_the_span() {
        let steps: Vec<Iteration> = (0..60)
            .map(|_| step(&[("me", 4, 4), ("other", 4, 2)]))
            .collect();
        let mut ids: Vec<u32> = (100..130).collect();
        for _ in 0..30 {
            ids.extend([5, 6]);
        }
        let mut r = request(0);
        r.tokens = tokens(&ids);
        let f = judged(&r, &steps);
        assert_eq!(f[0].cause, Cause::SpeculationHighAcceptance);
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(
            f[0].summary
                .contains("a 2-token span (\"w5 w6 \") 30 times from position 30 to 90"),
            "{}",
            f[0].summary
        );
        // The same acceptance over text that does not repeat: worth knowing, not a fault.
        let f = judged(&request(90), &steps);
        assert_eq!(f[0].severity, Severity::Info);
        assert!(
            f[0].summary.contains("no repeated span"),
            "{}",
            f[0].summary
        );
    }
}

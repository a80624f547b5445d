//! How often the diagnosis names the true cause, scored against what the simulated engine did.
//!
//! Busy traffic on several engine configurations (chunked prefill, whole prompts with prefill
//! priority, a small KV cache, an overloaded instance), with long prompts arriving among short
//! ones, over many seeds. The engine keeps each request's ledger (`tokenscope_sim::ledger`):
//! where its time went, its own prompt, each other request's prompt, the rest of the engine's
//! work. That ledger, not the diagnosis's rules, says why a request broke an SLO: the component
//! that took the largest part of the late phase is the cause, and the other requests that took at
//! least 10 % of it are the culprits. Each request is then diagnosed three ways: with the
//! engine's step records, with spans only (no steps; one prefill interval per request, as vLLM's
//! spans give), and with steps shaped like async scheduling (each step starts before the
//! previous one's tokens are out, as vLLM and SGLang overlap them).
//!
//! `cargo bench -p tokenscope-sim --bench accuracy` (or `scripts/bench accuracy`) prints the
//! figures for docs/BENCHMARKS.md; the test below holds the line on two seeds.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::Rng;
use crate::cost::profile;
use crate::engine::{self, EngineConfig, SimRequest};
use crate::ledger::{Ledger, Spent};
use tokenscope_core::analysis::diagnosis::{
    Cause, Context, Diagnosis, StepSums, Thresholds, Verdict, diagnose,
};
use tokenscope_core::model::metrics::request_metrics;
use tokenscope_core::model::{
    Architecture, Iteration, Nanos, OtherRequest, PrefillChunk, RequestTrace,
};

const MS: Nanos = 1_000_000;
const SECOND: Nanos = 1_000_000_000;
/// A culprit took at least this share of the late phase (the diagnosis's threshold too).
const MATERIAL: f64 = 0.10;
/// Two measurements of a share near the threshold can fall on either side of it: scored
/// "right", a culprit with at least twice the threshold must be named, and none with less than
/// half of it may be. "Exact" asks for the truth's set at the threshold, no tolerance.
const MUST: f64 = 2.0 * MATERIAL;
const MAY: f64 = 0.5 * MATERIAL;

/// One simulated instance: its engine and its traffic.
struct Setup {
    name: &'static str,
    cfg: EngineConfig,
    /// Requests per second of ordinary traffic, and seconds between long prompts on average.
    rate: f64,
    long_every_s: f64,
    /// Range of a long prompt's tokens, and of ordinary answers' tokens.
    long_prompt: (u32, u32),
    output: (u32, u32),
}

fn setups() -> Vec<Setup> {
    let p8 = profile("llama-8b-h100").expect("profile exists");
    let p70 = profile("llama-70b-4xh100").expect("profile exists");
    let engine = |f: &dyn Fn(&mut EngineConfig)| {
        let mut c = EngineConfig::new(p8);
        f(&mut c);
        c
    };
    vec![
        Setup {
            name: "chunked 8k",
            cfg: engine(&|_| {}),
            rate: 3.0,
            long_every_s: 12.0,
            long_prompt: (24_000, 96_000),
            output: (20, 600),
        },
        Setup {
            name: "whole prompts",
            cfg: engine(&|c| {
                c.chunked_prefill = false;
                c.token_budget = 32_768;
            }),
            rate: 3.0,
            long_every_s: 10.0,
            long_prompt: (8_000, 30_000),
            output: (20, 600),
        },
        Setup {
            name: "small KV cache",
            cfg: engine(&|c| c.kv_blocks = 3_000),
            rate: 3.0,
            long_every_s: 30.0,
            long_prompt: (8_000, 16_000),
            output: (300, 1_200),
        },
        Setup {
            name: "overloaded",
            cfg: engine(&|c| c.token_budget = 2_048),
            rate: 8.0,
            long_every_s: 10.0,
            long_prompt: (16_000, 48_000),
            output: (20, 400),
        },
        // Another model: attention weighs less against 70B's linear layers than 8B's, so a
        // prompt late in its context costs it relatively less (54k tokens to even, not 31k).
        Setup {
            name: "70B on 4 GPUs",
            cfg: EngineConfig::new(p70),
            rate: 1.5,
            long_every_s: 15.0,
            long_prompt: (16_000, 64_000),
            output: (20, 400),
        },
    ]
}

fn uniform(rng: &mut Rng, (lo, hi): (u32, u32)) -> u32 {
    lo + rng.below(u64::from(hi - lo + 1)) as u32
}

/// Poisson arrivals of ordinary requests (prompts of 100–4,000 tokens) and, among them, long
/// prompts at their own Poisson rate.
fn traffic(s: &Setup, prefix: &str, t0: Nanos, duration_s: f64, rng: &mut Rng) -> Vec<SimRequest> {
    let mut out = Vec::new();
    for (rate, long) in [(s.rate, false), (1.0 / s.long_every_s, true)] {
        let mut t = 0.0f64;
        loop {
            let u = (rng.below(1_000_000) as f64 + 0.5) / 1e6;
            t += -u.ln() / rate;
            if t >= duration_s {
                break;
            }
            let arrival = t0 + (t * 1e9) as Nanos;
            let (prompt, output) = if long {
                (uniform(rng, s.long_prompt), uniform(rng, (4, 200)))
            } else {
                (uniform(rng, (100, 4_000)), uniform(rng, s.output))
            };
            let kind = if long { "long" } else { "r" };
            let id = format!("{prefix}-{kind}{:05}", out.len());
            out.push(SimRequest::new(id, arrival, prompt, output));
        }
    }
    out.sort_by_key(|r| r.arrival_ns);
    out
}

/// What the engine's ledger says the diagnosis should find.
struct Expect {
    /// The row of the report.
    label: &'static str,
    /// Causes that name it (a wait behind others' prompts is `prefill_monopolized` when a few
    /// held it, `queue_backlog` or `engine_saturated` when many did).
    accept: &'static [Cause],
    /// When the cause has culprits: the other requests' shares of the late phase (from `MAY`).
    culprits: Option<Vec<(String, f64)>>,
}

/// A decode slowed by other requests' prompts: a few named (`prefill_interrupted_decode`), or many
/// none of which is material (`engine_saturated`).
const PROMPTS_IN_DECODE: &[Cause] = &[Cause::PrefillInterruptedDecode, Cause::EngineSaturated];

const BEHIND_PROMPTS: &[Cause] = &[
    Cause::PrefillMonopolized,
    Cause::QueueBacklog,
    Cause::EngineSaturated,
];

/// Other requests' shares of `of`, from `MAY` up.
fn shares(spent: &Spent, of: f64) -> Vec<(String, f64)> {
    spent
        .material(of, MAY)
        .into_iter()
        .map(|(id, t)| (id, t / of.max(1.0)))
        .collect()
}

/// The ledger's component that took most of `spent`, and the other requests' shares of it.
fn largest(spent: &Spent) -> (&'static str, Vec<(String, f64)>) {
    let culprits = shares(spent, spent.total());
    let (others, own, rest) = (spent.others_total(), spent.own_prefill, spent.rest);
    let what = if others >= own && others >= rest {
        "others"
    } else if own >= rest {
        "own"
    } else {
        "rest"
    };
    (what, culprits)
}

/// The truth for one request: whether it broke an SLO, and what should be found.
fn truth(r: &RequestTrace, l: &Ledger, th: &Thresholds) -> (bool, Vec<Expect>) {
    let m = request_metrics(r);
    let over = |ns: Option<Nanos>, slo_ms: f64| ns.is_some_and(|v| v as f64 / 1e6 > slo_ms);
    let mut expect = Vec::new();
    if !r.preemptions.is_empty() {
        expect.push(Expect {
            label: "preempted",
            accept: &[Cause::KvPreempted],
            culprits: None,
        });
    }
    let late = over(m.ttft_ns, th.ttft_ms);
    if late {
        expect.push(match largest(&l.first_token) {
            ("others", culprits) => Expect {
                label: "TTFT: behind other prompts",
                accept: BEHIND_PROMPTS,
                culprits: Some(culprits),
            },
            ("own", _) => Expect {
                label: "TTFT: its own prompt",
                accept: &[Cause::LongPrompt],
                culprits: None,
            },
            _ => Expect {
                label: "TTFT: queued behind decodes",
                accept: &[
                    Cause::QueueBacklog,
                    Cause::EngineSaturated,
                    Cause::KvPreempted,
                ],
                culprits: None,
            },
        });
    }
    let slow = over(m.tpot_ns, th.tpot_ms);
    if slow {
        // But for the others' prompts, would the mean gap have met the SLO?
        let gaps = f64::from(r.output_tokens.saturating_sub(1).max(1));
        let without = (l.decode.total() - l.decode.others_total()) / gaps / 1e6;
        expect.push(if without <= th.tpot_ms {
            let lost = l.decode.others_total();
            Expect {
                label: "TPOT: prompts in its decode",
                accept: PROMPTS_IN_DECODE,
                culprits: Some(shares(&l.decode, lost)),
            }
        } else {
            Expect {
                label: "TPOT: the load itself",
                accept: &[Cause::DecodeSlow, Cause::KvPreempted],
                culprits: None,
            }
        });
    }
    // Every gap past the stall threshold, together (the diagnosis weighs them together too).
    let mut stall: Option<Spent> = None;
    for (from, to, spent) in &l.long_gaps {
        if (to - from) as f64 / 1e6 > th.stall_ms {
            stall.get_or_insert_with(Spent::default).add(spent);
        }
    }
    if let (false, Some(spent)) = (slow, &stall) {
        expect.push(match largest(spent) {
            ("others", culprits) => Expect {
                label: "stall: prompts in the gap",
                accept: PROMPTS_IN_DECODE,
                culprits: Some(culprits),
            },
            _ => Expect {
                label: "stall: the engine",
                accept: &[Cause::DecodeStalled, Cause::KvPreempted],
                culprits: None,
            },
        });
    }
    let broke = late || slow || stall.is_some();
    (broke, expect)
}

/// How the diagnosis is given the instance's records.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    Steps,
    Spans,
    AsyncSteps,
}

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::Steps => "with step records",
            Shape::Spans => "spans only",
            Shape::AsyncSteps => "async-scheduled steps",
        }
    }
}

/// The traces and steps as `shape` shows them.
fn shaped(
    shape: Shape,
    traces: &[RequestTrace],
    steps: &[Iteration],
) -> (Vec<RequestTrace>, Vec<Iteration>) {
    match shape {
        Shape::Steps => (traces.to_vec(), steps.to_vec()),
        Shape::Spans => {
            // One prefill interval per request, no step ids, no steps.
            let traces = traces
                .iter()
                .map(|r| {
                    let mut r = r.clone();
                    if let (Some(first), Some(last)) =
                        (r.prefill_chunks.first(), r.prefill_chunks.last())
                    {
                        r.prefill_chunks = vec![PrefillChunk {
                            start_ns: first.start_ns,
                            end_ns: last.end_ns,
                            tokens: r.prefill_chunks.iter().map(|c| c.tokens).sum(),
                            iteration: None,
                        }];
                    }
                    for t in &mut r.tokens {
                        t.iteration = None;
                        t.scheduled_ns = None;
                    }
                    r
                })
                .collect();
            (traces, Vec::new())
        }
        Shape::AsyncSteps => {
            // A step back to back with the previous one was scheduled while the previous one
            // still ran (40 % of it before its end): its tokens come out after the next step
            // started.
            let mut steps = steps.to_vec();
            let mut moved: HashMap<u64, Nanos> = HashMap::new();
            for k in 1..steps.len() {
                let (prev_start, prev_end) = (steps[k - 1].start_ns, steps[k - 1].end_ns);
                if steps[k].start_ns - prev_end < MS {
                    let start = prev_end - (prev_end - prev_start) * 2 / 5;
                    steps[k].start_ns = start;
                    moved.insert(steps[k].iteration_id, start);
                }
            }
            let traces = traces
                .iter()
                .map(|r| {
                    let mut r = r.clone();
                    for c in &mut r.prefill_chunks {
                        if let Some(start) = c.iteration.and_then(|i| moved.get(&i)) {
                            c.start_ns = *start;
                        }
                    }
                    for t in &mut r.tokens {
                        if let Some(start) = t.iteration.and_then(|i| moved.get(&i)) {
                            t.scheduled_ns = Some(*start);
                        }
                    }
                    if let Some(c) = r.prefill_chunks.first() {
                        r.first_scheduled_ns = Some(
                            r.first_scheduled_ns
                                .map_or(c.start_ns, |s| s.min(c.start_ns)),
                        );
                    }
                    r
                })
                .collect();
            (traces, steps)
        }
    }
}

/// What the diagnosis gets for each request of one instance, diagnosed.
fn diagnose_all(
    traces: &[RequestTrace],
    steps: &[Iteration],
    model: Option<Architecture>,
    th: &Thresholds,
) -> Vec<Diagnosis> {
    let others: Vec<OtherRequest> = traces.iter().map(OtherRequest::of).collect();
    let sums = Arc::new(StepSums::of(steps, model.as_ref()));
    traces
        .iter()
        .map(|r| {
            let near: Vec<OtherRequest> = others
                .iter()
                .filter(|o| {
                    o.prefill
                        .iter()
                        .any(|&(s, e, _)| e >= r.arrival_ns && s <= r.finished_ns)
                })
                .cloned()
                .collect();
            diagnose(r, &Context::among(steps, &sums, r, &near, model), th)
        })
        .collect()
}

#[derive(Default)]
pub struct Score {
    pub expected: usize,
    pub found: usize,
    pub with_culprits: usize,
    pub right: usize,
    pub exact: usize,
}

#[derive(Default)]
pub struct Report {
    pub requests: usize,
    pub met: usize,
    pub false_findings: usize,
    pub broke: usize,
    pub called_healthy: usize,
    pub rows: BTreeMap<&'static str, Score>,
    /// A few misses per row, to read.
    pub misses: BTreeMap<&'static str, Vec<String>>,
}

impl Report {
    fn score(&mut self, r: &RequestTrace, l: &Ledger, d: &Diagnosis, th: &Thresholds) {
        self.requests += 1;
        let (broke, expect) = truth(r, l, th);
        if broke {
            self.broke += 1;
            if d.speed == Verdict::Healthy {
                self.called_healthy += 1;
            }
        } else if r.preemptions.is_empty() {
            self.met += 1;
            if d.speed == Verdict::Degraded {
                self.false_findings += 1;
            }
        }
        for e in expect {
            let row = self.rows.entry(e.label).or_default();
            row.expected += 1;
            // A cause can be about either phase (`engine_saturated` of the wait and of the
            // decode): a first-token row takes a first-token finding, a decode row a decode one.
            let found = d.findings.iter().find(|f| {
                e.accept.contains(&f.cause)
                    && (f.cause == Cause::KvPreempted
                        || f.evidence.get("ttft_ms").is_some() == e.label.starts_with("TTFT"))
            });
            let miss = match (found, &e.culprits) {
                (None, _) => Some(format!(
                    "{}: found {:?}",
                    r.request_id,
                    d.findings
                        .iter()
                        .map(|f| f.cause.name())
                        .collect::<Vec<_>>()
                )),
                (Some(f), Some(want)) => {
                    row.found += 1;
                    row.with_culprits += 1;
                    let got: BTreeSet<&str> = f.culprits.iter().map(String::as_str).collect();
                    let with = |min: f64| -> BTreeSet<&str> {
                        want.iter()
                            .filter(|(_, s)| *s >= min)
                            .map(|(id, _)| id.as_str())
                            .collect()
                    };
                    let exact = got == with(MATERIAL);
                    let right = with(MUST).is_subset(&got) && got.is_subset(&with(MAY));
                    row.exact += usize::from(exact);
                    row.right += usize::from(right);
                    (!exact).then(|| {
                        let truth: Vec<String> = want
                            .iter()
                            .map(|(id, s)| format!("{id} {:.0} %", s * 100.0))
                            .collect();
                        format!("{}: culprits {got:?}, truth {truth:?}", r.request_id)
                    })
                }
                (Some(_), None) => {
                    row.found += 1;
                    None
                }
            };
            if let Some(m) = miss {
                let misses = self.misses.entry(e.label).or_default();
                if misses.len() < 3 {
                    misses.push(m);
                }
            }
        }
    }

    pub fn print(&self, shape: Shape) {
        let pct = |a: usize, b: usize| {
            if b == 0 {
                "–".to_string()
            } else {
                format!("{:.3}", a as f64 / b as f64)
            }
        };
        println!("\n## {}", shape.name());
        println!(
            "{} requests; {} broke an SLO, {} of them called healthy; {} met every SLO, false findings {} ({})",
            self.requests,
            self.broke,
            self.called_healthy,
            self.met,
            self.false_findings,
            pct(self.false_findings, self.met)
        );
        println!("| truth | requests | recall | culprits right | culprits exact |");
        println!("|---|---|---|---|---|");
        for (label, s) in &self.rows {
            let of = |n: usize| {
                if s.with_culprits == 0 {
                    "–".to_string()
                } else {
                    pct(n, s.with_culprits)
                }
            };
            // The exact count too: a figure at a bar's edge is read from it, not from rounding.
            let exact = match s.with_culprits {
                0 => "–".to_string(),
                n => format!("{} ({}/{n})", of(s.exact), s.exact),
            };
            println!(
                "| {label} | {} | {} | {} | {exact} |",
                s.expected,
                pct(s.found, s.expected),
                of(s.right),
            );
        }
        for (label, m) in &self.misses {
            for m in m {
                println!("  miss, {label}: {m}");
            }
        }
    }
}

/// Every shape's report over `seeds` seeds of the setups' traffic. The diagnosis knows the
/// simulated model by its name, as it knows a real engine's, unless `model_unknown` (then it
/// costs prompts with the default attention constant).
pub fn run(seeds: u64, model_unknown: bool) -> Vec<(Shape, Report)> {
    let th = Thresholds::default();
    let shapes = [Shape::Steps, Shape::Spans, Shape::AsyncSteps];
    let mut reports: Vec<Report> = shapes.iter().map(|_| Report::default()).collect();
    for seed in 0..seeds {
        for (k, s) in setups().iter().enumerate() {
            let mut rng = Rng::new(seed * 100 + k as u64 + 1);
            let t0 = 1_796_022_000 * SECOND;
            let reqs = traffic(s, &format!("s{seed}i{k}"), t0, 60.0, &mut rng);
            let mut cfg = s.cfg.clone();
            cfg.ledger_gaps_over = Some((th.stall_ms * 1e6) as Nanos);
            let (out, ledgers) = engine::run_with_ledgers(&cfg, reqs, &mut rng, 1);
            let model = Architecture::known(cfg.profile.model).filter(|_| !model_unknown);
            for (shape, report) in shapes.iter().zip(&mut reports) {
                let (traces, steps) = shaped(*shape, &out.requests, &out.iterations);
                let diagnoses = diagnose_all(&traces, &steps, model, &th);
                for ((r, l), d) in out.requests.iter().zip(&ledgers).zip(&diagnoses) {
                    report.score(r, l, d, &th);
                }
            }
        }
    }
    shapes.into_iter().zip(reports).collect()
}

/// The setups' names, for the report's head.
pub fn setup_names() -> Vec<&'static str> {
    setups().iter().map(|s| s.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenscope_core::analysis::diagnosis::{healthy_alone, steps_of};

    /// Whether a request is healthy never depends on its neighbours: every rule finds something
    /// only from the request's own tokens or its steps, and neighbours only name the culprits.
    /// Nor, without speculation, on its steps: a request `healthy_alone` says is healthy (ingest
    /// stores it, and the findings worker never reads such a request again) is healthy with
    /// everything beside it. Every request of the busy setups, each shape, against the same
    /// request diagnosed with no neighbours at all, and with nothing at all.
    #[test]
    fn neighbours_never_decide_whether_a_request_is_healthy() {
        let th = Thresholds::default();
        let (mut healthy, mut not, mut alone_healthy) = (0, 0, 0);
        for (k, s) in setups().iter().enumerate() {
            let mut rng = Rng::new(k as u64 + 7);
            let reqs = traffic(s, &format!("n{k}"), 1_796_022_000 * SECOND, 60.0, &mut rng);
            let out = engine::run(&s.cfg, reqs, &mut rng, 1);
            for shape in [Shape::Steps, Shape::Spans, Shape::AsyncSteps] {
                let (traces, steps) = shaped(shape, &out.requests, &out.iterations);
                for (r, d) in traces.iter().zip(diagnose_all(
                    &traces,
                    &steps,
                    Architecture::known(s.cfg.profile.model),
                    &th,
                )) {
                    let alone = diagnose(r, &Context::new(steps_of(&steps, r), &[], None), &th);
                    assert_eq!(
                        d.verdict, alone.verdict,
                        "{shape:?} {}: {d:?} / alone {alone:?}",
                        r.request_id
                    );
                    if d.verdict == Verdict::Healthy {
                        healthy += 1;
                    } else {
                        not += 1;
                    }
                    if healthy_alone(r, &th) {
                        alone_healthy += 1;
                        assert_eq!(d.verdict, Verdict::Healthy, "{shape:?}: {d:?}");
                    }
                }
            }
        }
        assert!(healthy > 1000 && not > 100, "{healthy} healthy, {not} not");
        // The same requests: nothing beside them never made a breach look healthy.
        assert_eq!(alone_healthy, healthy);
    }

    /// A page's steps counted once (`Context::among`) give each request the diagnosis it gets
    /// with its own steps counted for it alone, to the bit: the own times and the decode-only
    /// line stay the request's. Counts made for another model's shape are not used.
    #[test]
    fn steps_counted_once_a_page_are_each_requests_own_diagnosis() {
        let th = Thresholds::default();
        let (mut compared, mut degraded) = (0, 0);
        for (k, s) in setups().iter().enumerate() {
            let mut rng = Rng::new(k as u64 + 11);
            let reqs = traffic(s, &format!("c{k}"), 1_796_022_000 * SECOND, 30.0, &mut rng);
            let out = engine::run(&s.cfg, reqs, &mut rng, 1);
            let model = Architecture::known(s.cfg.profile.model);
            assert!(model.is_some(), "{}", s.cfg.profile.model);
            for shape in [Shape::Steps, Shape::AsyncSteps] {
                let (traces, steps) = shaped(shape, &out.requests, &out.iterations);
                let others: Vec<OtherRequest> = traces.iter().map(OtherRequest::of).collect();
                let page = Arc::new(StepSums::of(&steps, model.as_ref()));
                let unknown = Arc::new(StepSums::of(&steps, None));
                for r in &traces {
                    let own = diagnose(r, &Context::new(steps_of(&steps, r), &others, model), &th);
                    let among = diagnose(r, &Context::among(&steps, &page, r, &others, model), &th);
                    let other =
                        diagnose(r, &Context::among(&steps, &unknown, r, &others, model), &th);
                    assert_eq!(among, own, "{shape:?} {}", r.request_id);
                    assert_eq!(other, own, "{shape:?} {}", r.request_id);
                    compared += 1;
                    degraded += usize::from(own.verdict != Verdict::Healthy);
                }
            }
        }
        assert!(
            compared > 500 && degraded > 100,
            "{compared} compared, {degraded} degraded"
        );
    }

    /// Two seeds of the benchmark: no breach called healthy, no finding on a request that met
    /// its SLOs, every cause found, and the culprits the engine's: within the tolerance band and
    /// exactly, in every shape (spans only too, since the diagnosis knows the model's shape).
    #[test]
    fn the_diagnosis_finds_what_the_engine_did() {
        for (shape, r) in run(2, false) {
            assert_eq!(r.called_healthy, 0, "{shape:?}");
            assert_eq!(r.false_findings, 0, "{shape:?}");
            let s = &r.rows["TTFT: its own prompt"];
            assert!(
                s.expected >= 10 && s.found == s.expected,
                "{shape:?}: own prompt"
            );
            for row in [
                "TTFT: behind other prompts",
                "TPOT: prompts in its decode",
                "stall: prompts in the gap",
            ] {
                let s = &r.rows[row];
                let of = |n: usize| n as f64 / s.with_culprits.max(1) as f64;
                let recall = s.found as f64 / s.expected as f64;
                assert!(
                    s.expected >= 20,
                    "{shape:?} {row}: only {} cases",
                    s.expected
                );
                assert!(recall >= 0.95, "{shape:?} {row}: recall {recall:.3}");
                assert!(
                    of(s.right) >= 0.95,
                    "{shape:?} {row}: right {:.3}",
                    of(s.right)
                );
                assert!(
                    of(s.exact) >= 0.95,
                    "{shape:?} {row}: exact {:.3}",
                    of(s.exact)
                );
            }
        }
    }
}

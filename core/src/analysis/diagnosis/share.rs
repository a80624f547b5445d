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
use std::sync::Arc;

use super::span_fit::{self, DecodeSteps, SpanFit};
use super::{Context, duration, ms};
use crate::model::architecture::{self, Architecture};
use crate::model::{Iteration, Nanos, Phase};

/// The share of the lost time that makes a culprit worth naming.
pub const MATERIAL: f64 = 0.10;

/// The compute of a prefill chunk of `n` tokens after `offset` already computed, in units of
/// one context-free token: the linear layers, and causal attention over everything before,
/// which costs as much as the linear layers at `even` tokens of context
/// ([`Context::attention_even_tokens`]).
pub(super) fn chunk_cost(n: u32, offset: u32, even: f64) -> f64 {
    let (n, o) = (f64::from(n), f64::from(offset));
    n * (1.0 + (o + n / 2.0) / even)
}

/// What each step's batch holds, counted once: its prefill and total tokens, its decodes, and
/// its prefill entries (each an index into its batch, with its compute for a model of one
/// shape). It depends on the step alone, so a page of requests diagnosed against the same steps
/// counts them once ([`Context::among`]): the requests of a page share most of their steps, and
/// reading every 256-entry batch again for each request was the largest part of a saturated
/// instance's diagnosis (docs/BENCHMARKS.md, keeping up).
#[derive(Debug)]
pub struct StepSums {
    /// The model's [`Context::attention_even_tokens`] the prefills' compute was weighed with.
    even: f64,
    sums: Vec<StepSum>,
    /// Per step: its prefills' compute in all.
    weight: Vec<f64>,
    /// Step `k`'s prefill entries are `prefills[prefills_from[k]..prefills_from[k + 1]]`.
    prefills: Vec<(u32, f64)>,
    prefills_from: Vec<usize>,
    /// Entries that verified draft tokens in the steps before step `k` (speculative decoding):
    /// without any in a request's steps, the speculation rule has nothing to read.
    drafted_before: Vec<usize>,
}

/// One step's batch, counted.
#[derive(Debug)]
struct StepSum {
    prefill_tokens: f64,
    tokens: f64,
    decodes: usize,
}

impl StepSums {
    /// `steps`' batches counted, their prefills weighed for a model of shape `model` (unknown:
    /// the default).
    pub fn of(steps: &[Iteration], model: Option<&Architecture>) -> Self {
        Self::evened(steps, architecture::attention_even_tokens(model))
    }

    /// `steps`' batches counted, their prefills weighed for a model that evens attention and
    /// linear layers at `even` tokens of context.
    fn evened(steps: &[Iteration], even: f64) -> Self {
        let mut sums = Vec::with_capacity(steps.len());
        let mut weight = Vec::with_capacity(steps.len());
        let (mut prefills, mut prefills_from) = (Vec::new(), vec![0]);
        let mut drafted_before = Vec::with_capacity(steps.len() + 1);
        drafted_before.push(0);
        for it in steps {
            let drafted = it
                .batch
                .iter()
                .filter(|e| e.draft.is_some_and(|d| d.proposed > 0));
            drafted_before.push(drafted_before[drafted_before.len() - 1] + drafted.count());
            let mut sum = StepSum {
                prefill_tokens: 0.0,
                tokens: 0.0,
                decodes: 0,
            };
            let mut w = 0.0;
            for (i, e) in it.batch.iter().enumerate() {
                sum.tokens += f64::from(e.tokens);
                if e.phase == Phase::Prefill {
                    sum.prefill_tokens += f64::from(e.tokens);
                    let cost = chunk_cost(e.tokens, e.prefill_offset, even);
                    w += cost;
                    prefills.push((i as u32, cost));
                } else {
                    sum.decodes += 1;
                }
            }
            prefills_from.push(prefills.len());
            weight.push(w);
            sums.push(sum);
        }
        StepSums {
            even,
            sums,
            weight,
            prefills,
            prefills_from,
            drafted_before,
        }
    }

    /// Whether any entry of steps `from..to` verified draft tokens.
    pub(super) fn drafted(&self, from: usize, to: usize) -> bool {
        self.drafted_before[to] > self.drafted_before[from]
    }

    /// Whether these are `steps.len()` steps counted for a model evened at `even` tokens.
    pub(super) fn fits(&self, steps: usize, even: f64) -> bool {
        self.sums.len() == steps && self.even.to_bits() == even.to_bits()
    }
}

/// The context's steps as the engine spent its time on them: each step's own time (from the
/// end of the step before it, when they overlap, to its end: with async scheduling a step starts
/// before the previous one's output is out, and that part of its span is the other's), and what
/// a step of decodes alone takes. What each step's batch holds comes counted ([`StepSums`]);
/// the own times and the decode-only line are this context's: they depend on which steps it
/// starts with.
#[derive(Debug)]
pub(super) struct StepTimes {
    /// Step indices by (end, start), and their ends in that order: the steps that ended inside
    /// a window are a range of them, found by binary search.
    by_end: Vec<usize>,
    ends: Vec<Nanos>,
    /// Per step: the fraction of its own time its prefills took.
    prefill_part: Vec<f64>,
    /// The steps' batches counted; the context's step `k` is their step `from + k`.
    sums: Arc<StepSums>,
    from: usize,
}

impl StepTimes {
    pub(super) fn of(ctx: &Context) -> Self {
        let steps = ctx.iterations;
        let (sums, from) = match &ctx.counted {
            Some((sums, from)) => (sums.clone(), *from),
            None => (
                Arc::new(StepSums::evened(steps, ctx.attention_even_tokens())),
                0,
            ),
        };
        let mut by_end: Vec<usize> = (0..steps.len()).collect();
        by_end.sort_by_key(|&k| (steps[k].end_ns, steps[k].start_ns));
        let mut own = vec![0; steps.len()];
        let mut before = Nanos::MIN;
        for &k in &by_end {
            let it = &steps[k];
            own[k] = (it.end_ns - it.start_ns.max(before)).max(1);
            before = before.max(it.end_ns);
        }
        let counted = &sums.sums[from..from + steps.len()];
        let decode_only = DecodeOnly::of(steps, counted, &own);
        let prefill_part = counted
            .iter()
            .zip(&own)
            .map(|(sum, &took)| prefill_part(sum, took, decode_only))
            .collect();
        let ends = by_end.iter().map(|&k| steps[k].end_ns).collect();
        StepTimes {
            by_end,
            ends,
            prefill_part,
            sums,
            from,
        }
    }

    /// The steps that ended inside (from, to], by end.
    fn ended_in(&self, from: Nanos, to: Nanos) -> &[usize] {
        let lo = self.ends.partition_point(|&e| e <= from);
        let hi = self.ends.partition_point(|&e| e <= to).max(lo);
        &self.by_end[lo..hi]
    }

    /// Step `k`'s prefills' compute in all.
    fn weight(&self, k: usize) -> f64 {
        self.sums.weight[self.from + k]
    }

    /// Step `k`'s prefill entries, as indices into its batch, each with its compute.
    fn prefills_of(&self, k: usize) -> &[(u32, f64)] {
        let (s, j) = (&*self.sums, self.from + k);
        &s.prefills[s.prefills_from[j]..s.prefills_from[j + 1]]
    }
}

/// The fraction of a step's own time (`took`) its prefills took: what it took beyond its decodes
/// alone, or without that figure, the prefill tokens' share of the step's tokens.
fn prefill_part(sum: &StepSum, took: Nanos, decode_only: Option<DecodeOnly>) -> f64 {
    if sum.prefill_tokens == 0.0 {
        return 0.0;
    }
    let took = took as f64;
    match decode_only {
        Some(alone) if sum.decodes > 0 => {
            ((took - alone.step_ns(sum.decodes)) / took).clamp(0.0, 1.0)
        }
        // Prefills alone took the whole step (its fixed costs too: without them it would not
        // have run).
        Some(_) => 1.0,
        None => sum.prefill_tokens / sum.tokens.max(1.0),
    }
}

/// What a step of decodes alone takes on this instance, by how many requests it decodes: a
/// line fitted (least squares) to the steps without a prefill, or their median when their batch
/// sizes do not vary enough to fit one (fewer than three such steps: unknown). A decode step
/// reads every request's KV cache, so a busy step's decodes cost more than a quiet one's; with
/// the median alone, the prefills of busy steps were charged for their decodes.
#[derive(Clone, Copy, Debug, PartialEq)]
struct DecodeOnly {
    at_zero: f64,
    per_request: f64,
}

impl DecodeOnly {
    fn of(steps: &[Iteration], sums: &[StepSum], own: &[Nanos]) -> Option<Self> {
        let alone: Vec<(f64, f64)> = steps
            .iter()
            .zip(sums)
            .zip(own)
            .filter(|((it, sum), _)| !it.batch.is_empty() && sum.decodes == it.batch.len())
            .map(|((it, _), &own)| (it.batch.len() as f64, own as f64))
            .collect();
        if alone.len() < 3 {
            return None;
        }
        let n = alone.len() as f64;
        let (mx, my) = alone
            .iter()
            .fold((0.0, 0.0), |(x, y), &(a, b)| (x + a / n, y + b / n));
        let sxx: f64 = alone.iter().map(|&(x, _)| (x - mx) * (x - mx)).sum();
        let sxy: f64 = alone.iter().map(|&(x, y)| (x - mx) * (y - my)).sum();
        let slope = if sxx > 0.0 { (sxy / sxx).max(0.0) } else { 0.0 };
        if slope == 0.0 {
            let mut t: Vec<f64> = alone.iter().map(|a| a.1).collect();
            let mid = t.len() / 2;
            let median = *t.select_nth_unstable_by(mid, f64::total_cmp).1;
            return Some(DecodeOnly {
                at_zero: median,
                per_request: 0.0,
            });
        }
        Some(DecodeOnly {
            at_zero: my - slope * mx,
            per_request: slope,
        })
    }

    /// What a step decoding `decodes` requests would take alone.
    fn step_ns(self, decodes: usize) -> f64 {
        (self.at_zero + self.per_request * decodes as f64).max(0.0)
    }
}

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
    /// By request id (shared with the steps' batch entries: counting a prefill allocates nothing).
    by: BTreeMap<Arc<str>, (Nanos, u64)>,
    /// The victim's own prompt's share, weighed the same way.
    pub own: Nanos,
    pub inferred: bool,
    /// Without steps: the other requests' prefill intervals, fitted once (`span_fit`).
    fit: Option<Arc<SpanFit>>,
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
        let times = ctx.step_times();
        let mut covered = from;
        for &k in times.ended_in(from, to) {
            let it = &ctx.iterations[k];
            let overlap = (it.end_ns - it.start_ns.max(covered)).max(0);
            covered = covered.max(it.end_ns);
            if overlap == 0 {
                continue;
            }
            let inside = overlap as f64 / (it.end_ns - it.start_ns).max(1) as f64;
            let prefill_part = times.prefill_part[k] * overlap as f64;
            for &(i, cost) in times.prefills_of(k) {
                let e = &it.batch[i as usize];
                let held = (prefill_part * cost / times.weight(k)) as Nanos;
                if *e.request_id == *victim {
                    self.own += held;
                    continue;
                }
                let slot = self.by.entry(e.request_id.clone()).or_default();
                slot.0 += held;
                slot.1 += (f64::from(e.tokens) * inside).round() as u64;
            }
        }
    }

    /// Sweeps the window's elementary segments: in each, the prefill intervals active then share
    /// its time by the compute each was doing per second (its cost over its interval's length):
    /// a short prompt prefilled beside a long one for a few steps had a fair part of those steps,
    /// not its tokens' part of the long prompt's.
    fn add_spans(&mut self, victim: &str, from: Nanos, to: Nanos, ctx: &Context) {
        let fit = self
            .fit
            .get_or_insert_with(|| Arc::new(SpanFit::new(ctx, DecodeSteps::default())))
            .clone();
        let part = fit.steps.prefill_part(from, to);
        for (a, b, active) in span_fit::segments(&fit.intervals, from, to) {
            let weight: f64 = active.iter().map(|&k| fit.intervals[k].intensity).sum();
            for k in active {
                let i = &fit.intervals[k];
                let held = ((b - a) as f64 * part * i.intensity / weight) as Nanos;
                let id = ctx.others[i.other].request_id.as_str();
                if id == victim {
                    self.own += held;
                    continue;
                }
                let slot = self.by.entry(Arc::from(id)).or_default();
                slot.0 += held;
                // Tokens by the part of its interval inside this segment.
                slot.1 += (f64::from(i.tokens) * (b - a) as f64 / (i.end - i.start) as f64).round()
                    as u64;
            }
        }
    }

    /// A tally for the gaps of a decode (`times`: its tokens' emission times). Without steps,
    /// the gaps show what a step takes with no prefill beside it: only the rest of a gap is
    /// weighed among the prefills in it.
    pub fn for_gaps(times: &[Nanos], ctx: &Context) -> Self {
        Shares {
            fit: ctx
                .iterations
                .is_empty()
                .then(|| Arc::new(SpanFit::new(ctx, DecodeSteps::of(times, ctx)))),
            ..Shares::default()
        }
    }

    /// The tally of one more window of the same request and context, apart (to be merged or
    /// not): it uses, and fills, the prefill intervals this tally fits once.
    pub fn window(&mut self, victim: &str, from: Nanos, to: Nanos, ctx: &Context) -> Self {
        let mut w = Shares {
            fit: self.fit.clone(),
            ..Shares::default()
        };
        w.add(victim, from, to, ctx);
        self.fit.clone_from(&w.fit);
        w
    }

    /// Adds another window's tally to this one.
    pub fn merge(&mut self, other: Shares) {
        self.lost += other.lost;
        self.own += other.own;
        self.inferred |= other.inferred;
        self.fit = self.fit.take().or(other.fit);
        for (id, (held, tokens)) in other.by {
            let slot = self.by.entry(id).or_default();
            slot.0 += held;
            slot.1 += tokens;
        }
    }

    /// Weighs the culprits against the time all other prompts took instead of the whole window:
    /// a slow mean (TPOT) lost what the prompts took from the decode, while a wait or a stall
    /// lost the window itself.
    pub fn against_prefill(mut self) -> Self {
        self.lost = self.prefill().max(1);
        self
    }

    /// Every culprit, the one that held the engine longest first.
    pub fn all(&self) -> Vec<Culprit> {
        let mut all: Vec<Culprit> = self
            .by
            .iter()
            .filter(|(_, v)| v.0 > 0)
            .map(|(id, &(held, tokens))| Culprit {
                id: id.to_string(),
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
    fn overlapping_prefills_share_their_time_by_compute_and_never_exceed_the_window() {
        // Two prompts prefilled together over the whole 1 s window, a third alone after it.
        let others = [
            other("a", 30_000, 0, 1_000),
            other("b", 10_000, 0, 1_000),
            other("c", 5_000, 1_000, 2_000),
        ];
        let ctx = Context::new(&[], &others, None);
        let mut s = Shares::default();
        s.add("v", 0, 1_000 * MS, &ctx);
        assert_eq!(s.lost, 1_000 * MS);
        assert!(s.prefill() <= s.lost && s.prefill() > s.lost - 2);
        let all = s.all();
        assert_eq!(all.len(), 2, "c is outside the window");
        // a's tokens attend over a longer prompt: 30,000 × (1 + 15,000 / 40,000) against
        // 10,000 × (1 + 5,000 / 40,000), so it had 11/14 of the window, not 3/4.
        assert_eq!((all[0].id.as_str(), all[0].held / MS), ("a", 785));
        assert_eq!((all[1].id.as_str(), all[1].held / MS), ("b", 214));
        assert_eq!(s.sentence(&all), "a 785.7 ms (79 %), b 214.3 ms (21 %)");
    }

    #[test]
    fn a_short_prompt_beside_a_long_one_has_its_part_of_those_steps() {
        // A 40k-token prompt prefilled over 2 s; a 2k-token one beside it for 100 ms. By tokens
        // the short one would have 2k / 42k of those 100 ms. The engine did 62,050 units of
        // compute in the 2 s (40k tokens at 1.5 each, 2k at 1.025): the short prompt's 2,050
        // needed 66 ms of it, all inside those 100 ms (spread evenly over their intervals, it
        // would have had 40 ms, less than its own prompt takes).
        let others = [
            other("long", 40_000, 0, 2_000),
            other("short", 2_000, 500, 600),
        ];
        let ctx = Context::new(&[], &others, None);
        let mut s = Shares::default();
        s.add("v", 0, 2_000 * MS, &ctx);
        let short = s.all().into_iter().find(|c| c.id == "short").unwrap();
        assert!(
            (65 * MS..=67 * MS).contains(&short.held),
            "{} ms",
            short.held / MS
        );
    }

    fn step(id: u64, start_ms: i64, end_ms: i64, batch: &[(&str, Phase, u32, u32)]) -> Iteration {
        Iteration {
            iteration_id: id,
            start_ns: start_ms * MS,
            end_ns: end_ms * MS,
            batch: batch
                .iter()
                .map(
                    |&(r, phase, tokens, prefill_offset)| crate::model::BatchEntry {
                        request_id: r.into(),
                        phase,
                        tokens,
                        prefill_offset,
                        draft: None,
                    },
                )
                .collect(),
            running: batch.len() as u32,
            waiting: 0,
            kv_cache_usage: 0.5,
        }
    }

    /// A batch of `n` requests decoding a token each.
    fn decodes(n: usize) -> Vec<(&'static str, Phase, u32, u32)> {
        (0..n).map(|_| ("d", Phase::Decode, 1, 0)).collect()
    }

    /// Time other requests' prefills held inside [from, to) of `steps`, in ms.
    fn prefill_ms(steps: &[Iteration], from: i64, to: i64) -> Nanos {
        let ctx = Context::new(steps, &[], None);
        let mut s = Shares::default();
        s.add("v", from * MS, to * MS, &ctx);
        s.prefill() / MS
    }

    #[test]
    fn a_step_s_prefills_cost_what_it_took_beyond_its_decodes_alone() {
        use Phase::Prefill;
        // Decodes alone take 10 ms a step on this instance.
        let mut steps: Vec<Iteration> = (0..4)
            .map(|k| step(k, k as i64 * 10, k as i64 * 10 + 10, &decodes(50)))
            .collect();
        // Then a 100 ms step: 50 decodes, 8k tokens of a long prompt late in it (offset 32k),
        // and a 2k-token short prompt.
        let mut batch = decodes(50);
        batch.push(("long", Prefill, 6_000, 32_000));
        batch.push(("short", Prefill, 2_000, 0));
        steps.push(step(9, 40, 140, &batch));
        let ctx = Context::new(&steps, &[], None);
        let mut s = Shares::default();
        s.add("v", 40 * MS, 140 * MS, &ctx);
        // The prefills added 90 ms; the long chunk's tokens each cost 1 + 35k / 40k, the short
        // prompt's 1 + 1k / 40k: 11,250 against 2,050 of compute.
        let held: BTreeMap<String, Nanos> = s.all().into_iter().map(|c| (c.id, c.held)).collect();
        assert_eq!(held["long"] / MS, 76);
        assert_eq!(held["short"] / MS, 13);
        assert_eq!(s.prefill() / MS, 89, "{} ns", s.prefill());
    }

    #[test]
    fn a_busy_step_s_decodes_are_not_charged_to_its_prefill() {
        use Phase::Prefill;
        // Decodes alone: 10 requests take 10 ms a step, 50 take 20 ms, 90 take 30 ms (each
        // request's KV cache is read every step).
        let mut steps: Vec<Iteration> = [10, 50, 90, 10, 50, 90]
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                let t = k as i64 * 100;
                step(k as u64, t, t + 10 + (n as i64 - 10) / 4, &decodes(n))
            })
            .collect();
        // Then a 40 ms step of 90 decodes and one short prompt: the prompt added 10 ms. With
        // the median of the decode-only steps (20 ms) it would be charged 20.
        let mut batch = decodes(90);
        batch.push(("p", Prefill, 500, 0));
        steps.push(step(9, 1_000, 1_040, &batch));
        assert_eq!(prefill_ms(&steps, 1_000, 1_040), 10);
    }

    #[test]
    fn an_async_step_s_own_time_starts_where_the_step_before_it_ended() {
        use Phase::Prefill;
        // Back-to-back 20 ms decode steps, each scheduled 8 ms before the one before it ended
        // (async scheduling), then a step scheduled at 72 ms that ends at 130 with a prompt in
        // it: the engine was on it from 80 ms, 50 ms, of which the decodes took 20.
        let mut steps: Vec<Iteration> = (0..4)
            .map(|k| {
                let end = 20 + k as i64 * 20;
                step(k, (end - 28).max(0), end, &decodes(50))
            })
            .collect();
        let mut batch = decodes(50);
        batch.push(("p", Prefill, 2_000, 0));
        steps.push(step(9, 72, 130, &batch));
        // Measured over the step's whole span (58 ms), the prompt would have had 38 / 58 of
        // the 50 ms: 32.8 ms.
        assert_eq!(prefill_ms(&steps, 80, 130), 30);
    }

    #[test]
    fn without_steps_a_gap_s_own_decode_is_not_charged_to_the_prompts_in_it() {
        // The victim's tokens 20 ms apart, but one 60 ms gap in which a short prompt was
        // prefilled: the prompt added 40 ms to that step, not 60.
        let mut times: Vec<Nanos> = (0..10).map(|k| k * 20 * MS).collect();
        times.extend((0..10).map(|k| (240 + k * 20) * MS));
        let others = [other("p", 1_000, 180, 240)];
        let ctx = Context::new(&[], &others, None);
        let mut s = Shares::for_gaps(&times, &ctx);
        let gap = s.window("v", 180 * MS, 240 * MS, &ctx);
        assert_eq!(gap.prefill() / MS, 40, "{} ns", gap.prefill());
        assert_eq!(gap.lost, 60 * MS);
    }

    #[test]
    fn a_stream_of_small_prefills_names_no_one() {
        let others: Vec<OtherRequest> = (0..40)
            .map(|i| other(&format!("r{i}"), 500, i * 25, i * 25 + 25))
            .collect();
        let ctx = Context::new(&[], &others, None);
        let mut s = Shares::default();
        s.add("v", 0, 1_000 * MS, &ctx);
        assert_eq!(s.requests(), 40);
        assert!(s.material().is_empty(), "each holds 2.5 %");
        assert_eq!(s.prefill(), 1_000 * MS);
    }
}

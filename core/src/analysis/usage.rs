//! Who used the GPU: each engine step's time split across its batch by the tokens each request
//! computed in it, summed per request over fixed cells of time; without steps, estimated from
//! the requests' intervals.
//!
//! The weighting is the step's *work*: a request's share of a step is the tokens it computed
//! there (its prefill chunk, or its decoded token plus the drafts verified for it) over all the
//! tokens the step computed. Every token passes through the same linear layers (2 · params
//! FLOPs each), which dominate a step's compute, so a 2,048-token chunk beside 63 decodes gets
//! 97 % of that step and each decode 0.05 %. The weight reads and the fixed per-step cost are
//! split the same way, not per request: a step runs for its batch as a whole.
//!
//! Time is counted once: steps that overlap (vLLM's async scheduling runs step k+1 while step k
//! finishes) count only from where the previous ones ended, so an instance's attributed time is
//! its busy time, the union of its steps.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::{Iteration, Nanos};

/// Cells usage is summed over: a minute (a day is 1,440 of them per instance and group).
pub const CELL_NS: Nanos = 60 * 1_000_000_000;

/// Start of the cell containing `t`.
pub fn cell_of(t: Nanos) -> Nanos {
    t.div_euclid(CELL_NS) * CELL_NS
}

/// One request's use of an instance in one cell.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Use {
    pub gpu_ns: f64,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
}

/// Usage by (cell start, request id); the empty id holds the time of steps that computed no
/// token (nobody's).
pub type Uses = BTreeMap<(Nanos, Arc<str>), Use>;

/// The part of `[from, to)` inside `[cells.0, cells.1)`, cell by cell: (cell start, ns).
fn per_cell((from, to): (Nanos, Nanos), cells: (Nanos, Nanos)) -> Vec<(Nanos, f64)> {
    let (mut t, to) = (from.max(cells.0), to.min(cells.1));
    let mut out = Vec::new();
    while t < to {
        let end = (cell_of(t) + CELL_NS).min(to);
        out.push((cell_of(t), (end - t) as f64));
        t = end;
    }
    out
}

/// Attributes steps (by start time) to their requests in the cells of `[cells.0, cells.1)`,
/// both multiples of [`CELL_NS`]. Steps that start before the range count for the part of their
/// time inside it (and tell where busy time already began); tokens count in the cell a step
/// starts in.
pub fn from_steps(steps: &[Iteration], cells: (Nanos, Nanos)) -> Uses {
    let mut fold = StepFold::new(cells.0);
    fold.add(steps);
    fold.uses(cells.1)
}

/// [`from_steps`] a few steps at a time: the findings worker keeps one per instance between its
/// passes and adds only the steps stored since, where it read the minute's steps again each time
/// (docs/BENCHMARKS.md, keeping up). Over the same steps in the same order the sums are the same
/// to the last bit, whatever the pieces: nothing is clipped at the end of the range, so a step
/// that runs into the next cell has that part ready when the range grows.
pub struct StepFold {
    /// The first cell counted.
    from: Nanos,
    /// Where the steps added so far ended, the latest: busy time already counted.
    covered: Nanos,
    by_id: ById,
    nobody: Arc<str>,
    /// Cells some step's time falls in (measured minutes, as against estimated ones).
    stepped: BTreeSet<Nanos>,
    /// (start, id) of the last step added.
    last: Option<(Nanos, u64)>,
}

impl StepFold {
    /// Counts from the cell at `from` (a multiple of [`CELL_NS`]).
    pub fn new(from: Nanos) -> Self {
        StepFold {
            from,
            covered: Nanos::MIN,
            by_id: ById::default(),
            nobody: Arc::from(""),
            stepped: BTreeSet::new(),
            last: None,
        }
    }

    /// The first cell counted.
    pub fn from(&self) -> Nanos {
        self.from
    }

    /// (start, id) of the last step added: later steps may be added; an earlier one means
    /// starting again.
    pub fn last(&self) -> Option<(Nanos, u64)> {
        self.last
    }

    /// Adds steps ordered by (start, id), all after those already added.
    pub fn add(&mut self, steps: &[Iteration]) {
        for s in steps {
            debug_assert!(self.last < Some((s.start_ns, s.iteration_id)));
            self.last = Some((s.start_ns, s.iteration_id));
            self.add_one(s);
        }
    }

    fn add_one(&mut self, s: &Iteration) {
        let last = cell_of((s.end_ns - 1).max(s.start_ns));
        self.stepped
            .extend((cell_of(s.start_ns)..=last).step_by(CELL_NS as usize));
        // The part of this step no earlier step already counted.
        let own = (s.start_ns.max(self.covered), s.end_ns.max(self.covered));
        self.covered = self.covered.max(s.end_ns);
        let total: u64 = s.batch.iter().map(|e| u64::from(e.tokens)).sum();
        let cell = cell_of(s.start_ns);
        let counts_tokens = s.start_ns >= self.from;
        // The step's time in each cell, once, then each entry its share of it.
        let time = per_cell(own, (self.from, Nanos::MAX));
        if total == 0 {
            for &(c, ns) in &time {
                self.by_id.at(&self.nobody, c).gpu_ns += ns;
            }
            return;
        }
        for e in &s.batch {
            let share = f64::from(e.tokens) / total as f64;
            for &(c, ns) in &time {
                self.by_id.at(&e.request_id, c).gpu_ns += ns * share;
            }
            if counts_tokens {
                let u = self.by_id.at(&e.request_id, cell);
                match e.phase {
                    crate::model::Phase::Prefill => u.prefill_tokens += u64::from(e.tokens),
                    crate::model::Phase::Decode => u.decode_tokens += u64::from(e.decoded()),
                }
            }
        }
    }

    /// The uses in the cells from the first up to `to` (excluded).
    pub fn uses(&self, to: Nanos) -> Uses {
        self.by_id.uses(to)
    }

    /// The cells before `to` that some step's time falls in (from any step added, those before
    /// the first cell too).
    pub fn stepped(&self, to: Nanos) -> BTreeSet<Nanos> {
        self.stepped.range(..to).copied().collect()
    }
}

/// [`Uses`] while steps are added: by request id, then the few cells of each. A step's every
/// batch entry lands here, and an ordered map keyed by (cell, id) compared id strings and
/// cloned the `Arc` for each (a tenth of the findings worker's time, docs/BENCHMARKS.md);
/// each key's sums are added in the same order, so the result is the same to the last bit.
#[derive(Default)]
struct ById(foldhash::HashMap<Arc<str>, Vec<(Nanos, Use)>>);

impl ById {
    fn at(&mut self, id: &Arc<str>, cell: Nanos) -> &mut Use {
        if !self.0.contains_key(&**id) {
            self.0.insert(id.clone(), Vec::new());
        }
        let cells = self.0.get_mut(&**id).expect("inserted above");
        let k = match cells.iter().position(|(c, _)| *c == cell) {
            Some(k) => k,
            None => {
                cells.push((cell, Use::default()));
                cells.len() - 1
            }
        };
        &mut cells[k].1
    }

    fn uses(&self, to: Nanos) -> Uses {
        self.0
            .iter()
            .flat_map(|(id, cells)| {
                cells
                    .iter()
                    .filter(|(c, _)| *c < to)
                    .map(|(c, u)| ((*c, id.clone()), u.clone()))
            })
            .collect()
    }
}

/// What estimating a request's use from its interval needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Served {
    pub request_id: Arc<str>,
    /// When the engine first scheduled it (else its arrival).
    pub start_ns: Nanos,
    pub first_token_ns: Option<Nanos>,
    pub finished_ns: Nanos,
    /// Prompt tokens computed (not served from cache).
    pub prefill_tokens: u32,
    pub output_tokens: u32,
}

/// Estimates usage from request intervals alone (spans without engine steps): while requests
/// are being served the instance is busy, and its time is shared equally among them. Prefill
/// tokens count in the cell of the first token, decoded tokens in the cell of the end.
pub fn from_requests(requests: &[Served], cells: (Nanos, Nanos)) -> Uses {
    let mut out = Uses::new();
    // Sweep: +1 at each start, −1 at each end.
    let mut edges: Vec<(Nanos, bool, usize)> = Vec::with_capacity(2 * requests.len());
    for (k, r) in requests.iter().enumerate() {
        if r.finished_ns > r.start_ns {
            edges.push((r.start_ns, true, k));
            edges.push((r.finished_ns, false, k));
        }
    }
    edges.sort_unstable_by_key(|&(t, starts, k)| (t, starts, k));
    let mut alive: Vec<usize> = Vec::new();
    let mut last = Nanos::MIN;
    for (t, starts, k) in edges {
        if !alive.is_empty() && t > last {
            let share = 1.0 / alive.len() as f64;
            let time = per_cell((last, t), cells);
            for &a in &alive {
                for &(c, ns) in &time {
                    out.entry((c, requests[a].request_id.clone()))
                        .or_default()
                        .gpu_ns += ns * share;
                }
            }
        }
        last = t;
        if starts {
            alive.push(k);
        } else {
            alive.retain(|&a| a != k);
        }
    }
    for r in requests {
        let prefilled = r.first_token_ns.unwrap_or(r.finished_ns);
        if (cells.0..cells.1).contains(&prefilled) {
            out.entry((cell_of(prefilled), r.request_id.clone()))
                .or_default()
                .prefill_tokens += u64::from(r.prefill_tokens);
        }
        if r.first_token_ns.is_some() && (cells.0..cells.1).contains(&r.finished_ns) {
            out.entry((cell_of(r.finished_ns), r.request_id.clone()))
                .or_default()
                .decode_tokens += u64::from(r.output_tokens.saturating_sub(1));
        }
    }
    out
}

/// One group's use over a window (`GET /api/v1/usage`): a tenant, LoRA adapter or model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsageGroup {
    /// The tenant, adapter or model; `None`: requests served without one (no tenant, the base
    /// model) or, with `unstored`, steps of requests whose record has not arrived.
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unstored: bool,
    pub gpu_s: f64,
    /// Of the window's attributed time.
    pub share: f64,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
    /// Of `gpu_s`, estimated from request intervals (cells of an instance without steps).
    pub estimated_s: f64,
}

/// Attributed GPU time in one bucket of the chart, a value per group in the groups' order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsageBucket {
    pub start_ns: Nanos,
    pub gpu_s: Vec<f64>,
}

/// GPU time by tenant, adapter or model over a window of whole cells.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub from_ns: Nanos,
    pub to_ns: Nanos,
    pub bucket_ns: Nanos,
    /// `tenant`, `adapter` or `model`.
    pub by: String,
    /// Most GPU time first.
    pub groups: Vec<UsageGroup>,
    pub buckets: Vec<UsageBucket>,
    /// The instances' busy time in the window: the groups' sum.
    pub busy_s: f64,
    /// Of it, estimated from request intervals.
    pub estimated_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BatchEntry, Phase};

    const S: Nanos = 1_000_000_000;

    fn entry(id: &str, phase: Phase, tokens: u32) -> BatchEntry {
        BatchEntry {
            request_id: Arc::from(id),
            phase,
            tokens,
            prefill_offset: 0,
            draft: None,
        }
    }

    fn step(start: Nanos, end: Nanos, batch: Vec<BatchEntry>) -> Iteration {
        Iteration {
            iteration_id: start as u64,
            start_ns: start,
            end_ns: end,
            batch,
            running: 0,
            waiting: 0,
            kv_cache_usage: 0.0,
        }
    }

    fn gpu(u: &Uses, cell: Nanos, id: &str) -> f64 {
        u.get(&(cell, Arc::from(id))).map_or(0.0, |u| u.gpu_ns)
    }

    /// The attribution as it was first written, one step at a time into a map clipped to the
    /// range: what the fold must still give, whatever pieces it is fed in.
    fn reference(steps: &[Iteration], cells: (Nanos, Nanos)) -> Uses {
        let mut out = Uses::new();
        let mut covered = Nanos::MIN;
        for s in steps.iter().filter(|s| s.start_ns < cells.1) {
            let own = (s.start_ns.max(covered), s.end_ns.max(covered));
            covered = covered.max(s.end_ns);
            let total: u64 = s.batch.iter().map(|e| u64::from(e.tokens)).sum();
            let time = per_cell(own, cells);
            if total == 0 {
                for &(c, ns) in &time {
                    out.entry((c, Arc::from(""))).or_default().gpu_ns += ns;
                }
                continue;
            }
            for e in &s.batch {
                for &(c, ns) in &time {
                    let share = f64::from(e.tokens) / total as f64;
                    out.entry((c, e.request_id.clone())).or_default().gpu_ns += ns * share;
                }
                if (cells.0..cells.1).contains(&s.start_ns) {
                    let u = out
                        .entry((cell_of(s.start_ns), e.request_id.clone()))
                        .or_default();
                    match e.phase {
                        Phase::Prefill => u.prefill_tokens += u64::from(e.tokens),
                        Phase::Decode => u.decode_tokens += u64::from(e.decoded()),
                    }
                }
            }
        }
        out
    }

    proptest::proptest! {
        /// The findings worker adds an instance's steps as they are stored and asks for a range
        /// that grows: each answer is what reading the range's steps afresh gives, to the bit.
        #[test]
        fn a_fold_fed_in_pieces_is_the_range_read_afresh(
            raw in proptest::collection::vec((0i64..3_000, 1i64..900, 0u32..4, 0u32..300), 1..120),
            cut in 0usize..120,
            ends in (1i64..4, 0i64..3),
        ) {
            // Steps every ~25 ms on a 1 ms clock scaled to cells of a minute: several cells,
            // async overlaps, steps across a cell's edge, empty steps.
            let mut t = -5 * S;
            let mut steps = Vec::new();
            for (k, (gap, len, decodes, chunk)) in raw.into_iter().enumerate() {
                t += gap * 40_000_000;
                let mut batch: Vec<BatchEntry> = (0..decodes)
                    .map(|d| entry(&format!("d{d}"), Phase::Decode, 1))
                    .collect();
                if chunk > 0 {
                    batch.push(entry(&format!("p{}", k % 5), Phase::Prefill, chunk));
                }
                let mut s = step(t, t + len * 1_000_000, batch);
                s.iteration_id = k as u64;
                steps.push(s);
            }
            let (first, then) = (ends.0 * CELL_NS, (ends.0 + ends.1) * CELL_NS);
            let mut fold = StepFold::new(0);
            let before: Vec<Iteration> = steps.iter().filter(|s| s.start_ns < first).cloned().collect();
            let cut = cut.min(before.len());
            fold.add(&before[..cut]);
            fold.add(&before[cut..]);
            proptest::prop_assert_eq!(fold.uses(first), reference(&steps, (0, first)));
            fold.add(&steps[before.len()..]);
            proptest::prop_assert_eq!(fold.uses(then), reference(&steps, (0, then)));
            proptest::prop_assert_eq!(from_steps(&steps, (0, then)), reference(&steps, (0, then)));
        }
    }

    #[test]
    fn a_step_splits_by_tokens_and_overlapping_steps_count_once() {
        let steps = [
            // 100 ms: a 300-token chunk beside one decode.
            step(
                0,
                100_000_000,
                vec![
                    entry("a", Phase::Prefill, 299),
                    entry("b", Phase::Decode, 1),
                ],
            ),
            // Async scheduling: starts 40 ms before the first ends; 60 ms of its own.
            step(60_000_000, 160_000_000, vec![entry("b", Phase::Decode, 1)]),
        ];
        let u = from_steps(&steps, (0, CELL_NS));
        assert!((gpu(&u, 0, "a") - 99_666_666.7).abs() < 1.0);
        assert!((gpu(&u, 0, "b") - (333_333.3 + 60_000_000.0)).abs() < 1.0);
        let total: f64 = u.values().map(|u| u.gpu_ns).sum();
        assert!(
            (total - 160_000_000.0).abs() < 1e-3,
            "the union of the steps"
        );
        assert_eq!(u[&(0, Arc::from("a"))].prefill_tokens, 299);
        assert_eq!(u[&(0, Arc::from("b"))].decode_tokens, 2);
    }

    #[test]
    fn a_step_across_a_cell_edge_splits_its_time_and_keeps_its_tokens_where_it_started() {
        let start = CELL_NS - S / 2;
        let steps = [step(
            start,
            CELL_NS + S / 2,
            vec![entry("a", Phase::Prefill, 10)],
        )];
        let u = from_steps(&steps, (0, 2 * CELL_NS));
        assert_eq!(gpu(&u, 0, "a"), (S / 2) as f64);
        assert_eq!(gpu(&u, CELL_NS, "a"), (S / 2) as f64);
        assert_eq!(u[&(0, Arc::from("a"))].prefill_tokens, 10);
        assert_eq!(u[&(CELL_NS, Arc::from("a"))].prefill_tokens, 0);
        // Read for the second cell only: its half, and no tokens (counted with the first).
        let u = from_steps(&steps, (CELL_NS, 2 * CELL_NS));
        assert_eq!(gpu(&u, CELL_NS, "a"), (S / 2) as f64);
        assert_eq!(u.len(), 1);
        assert_eq!(u[&(CELL_NS, Arc::from("a"))].prefill_tokens, 0);
    }

    #[test]
    fn speculative_decodes_weigh_their_verified_drafts() {
        let mut spec = entry("s", Phase::Decode, 4);
        spec.draft = Some(crate::model::Draft {
            proposed: 3,
            accepted: 1,
        });
        let steps = [step(
            0,
            50_000_000,
            vec![spec, entry("p", Phase::Decode, 1)],
        )];
        let u = from_steps(&steps, (0, CELL_NS));
        assert!((gpu(&u, 0, "s") - 40_000_000.0).abs() < 1e-3);
        assert_eq!(u[&(0, Arc::from("s"))].decode_tokens, 2, "accepted + 1");
    }

    #[test]
    fn without_steps_concurrent_requests_share_the_time_equally() {
        let r = |id: &str, start: Nanos, end: Nanos| Served {
            request_id: Arc::from(id),
            start_ns: start,
            first_token_ns: Some(start + S / 10),
            finished_ns: end,
            prefill_tokens: 100,
            output_tokens: 11,
        };
        // a alone for 1 s, then a and b for 2 s, then b alone for 1 s; 2 s idle.
        let u = from_requests(
            &[r("a", 0, 3 * S), r("b", S, 4 * S), r("c", 6 * S, 6 * S)],
            (0, CELL_NS),
        );
        assert_eq!(gpu(&u, 0, "a"), (2 * S) as f64);
        assert_eq!(gpu(&u, 0, "b"), (2 * S) as f64);
        assert_eq!(gpu(&u, 0, "c"), 0.0);
        assert_eq!(u[&(0, Arc::from("a"))].decode_tokens, 10);
        assert_eq!(u[&(0, Arc::from("b"))].prefill_tokens, 100);
    }
}

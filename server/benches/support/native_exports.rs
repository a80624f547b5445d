//! Native exports for the benches: 32 requests × 512 tokens with top-5 candidates (texts and
//! ids), every 16 requests sharing one iteration record per step, over several instances. A second
//! shape, [`SERVING`], is closer to a busy engine: decode batches of 64 and Zipf-distributed ids.
//! Both send texts by id, as tokenscope's exporters do; [`TEXTS_PER_TOKEN`] sends them with each
//! token, as other senders may.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use tokenscope::fixtures;
use tokenscope_proto::v1;
use tokenscope_proto::wire::{intern_texts, to_wire};

pub const TOKENS_PER_REQUEST: usize = 512;
pub const REQUESTS_PER_BATCH: usize = 32;
pub const TOP_K: usize = 5;
/// Requests decoded together, sharing iterations (a realistic decode batch).
pub const GROUP: usize = 16;
const T0: i64 = 1_796_022_000_000_000_000;

/// How a run's exports are made.
pub struct Shape {
    pub name: &'static str,
    pub requests: usize,
    pub tokens: usize,
    /// Requests decoded together, sharing one iteration record per step.
    pub group: usize,
    /// Token ids drawn Zipf-distributed (as words in text are) rather than uniform over the
    /// vocabulary, which makes nearly every vocabulary lookup a cache miss.
    pub zipf: bool,
    /// Token texts by id (`ResourceTraces.token_texts`), each instance's exporter sending each
    /// id's text once, rather than a text with every token and candidate.
    pub texts_by_id: bool,
}

/// The shape every figure in docs/BENCHMARKS.md since 2026-11-30 was measured with: pessimistic
/// on purpose (small batches: a step per 16 tokens; uniform ids). Texts by id since 2026-12-02.
pub const BENCH: Shape = Shape {
    name: "bench",
    requests: REQUESTS_PER_BATCH,
    tokens: TOKENS_PER_REQUEST,
    group: GROUP,
    zipf: false,
    texts_by_id: true,
};

/// [`BENCH`] with a text sent with every token and candidate, as all figures before 2026-12-02
/// (late morning) were measured.
pub const TEXTS_PER_TOKEN: Shape = Shape {
    name: "texts",
    texts_by_id: false,
    ..BENCH
};

/// The same tokens per export as a busier engine makes them: 64 requests × 256 tokens decoded
/// in one batch, ids Zipf-distributed.
pub const SERVING: Shape = Shape {
    name: "serving",
    requests: 64,
    tokens: 256,
    group: 64,
    zipf: true,
    texts_by_id: true,
};

/// Exports `range` of a run in `shape`, cycling through `instances`, as the exporters send them:
/// with texts by id, each instance's exporter leaves out the texts its earlier exports carried
/// (one sender per instance sends them in order, so each was acknowledged before the next).
pub fn exports(range: Range<usize>, shape: &Shape, instances: usize) -> Vec<v1::ExportRequest> {
    let mut sent: HashMap<usize, HashSet<u32>> = HashMap::new();
    let mut out = Vec::with_capacity(range.len());
    for b in 0..range.end {
        let mut export = shaped(b, shape, instances);
        if shape.texts_by_id {
            let sent = sent.entry(b % instances).or_default();
            let carried = intern_texts(&mut export.resource_traces[0], sent);
            sent.extend(carried);
        }
        if range.contains(&b) {
            out.push(export);
        }
    }
    out
}

/// Export number `b`, texts with every token: its requests' ids and times follow on from export
/// `b - 1`'s.
fn shaped(b: usize, shape: &Shape, instances: usize) -> v1::ExportRequest {
    let requests: Vec<_> = (0..shape.requests)
        .map(|i| {
            let n = b * shape.requests + i;
            let arrival = T0 + n as i64 * 37_000_000;
            let first_iteration = (n / shape.group) as u64 * 1000;
            // Shaped like vLLM's ids ("cmpl-" + 32 hex digits + "-0"): their length is what
            // iteration batches would pay for every member of every step.
            let id = format!(
                "cmpl-{:032x}-0",
                (n as u128 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)
            );
            let mut r =
                fixtures::request(&id, arrival, shape.tokens, TOP_K, first_iteration, n as u64);
            if shape.zipf {
                for t in &mut r.tokens {
                    let texts = std::iter::once((&mut t.token_id, &mut t.text));
                    let cands = t
                        .candidates
                        .iter_mut()
                        .map(|c| (&mut c.token_id, &mut c.text));
                    for (id, text) in texts.chain(cands) {
                        if let Some(id) = id.as_mut().filter(|id| **id != fixtures::EOS_ID) {
                            *id = zipf(*id);
                            *text = Some(fixtures::token_text(*id));
                        }
                    }
                }
            }
            r
        })
        .collect();
    let iterations: Vec<_> = requests
        .chunks(shape.group)
        .flat_map(|g| fixtures::shared_iterations(g, 2))
        .collect();
    let instance = format!("{}-gpu-{}", shape.name, b % instances);
    v1::ExportRequest {
        resource_traces: vec![to_wire(
            &fixtures::resource(&instance),
            &requests,
            &iterations,
        )],
    }
}

/// Maps an id drawn uniformly from the fixture vocabulary (128,000 ids) to a Zipf-distributed
/// one (exponent 1: rank r drawn with probability ∝ 1/r), the ranks spread over the id space
/// as a tokenizer spreads its frequent words.
fn zipf(uniform: u32) -> u32 {
    const V: f64 = 128_000.0;
    let u = (f64::from(uniform) + 0.5) / V;
    let rank = (V.powf(u) as u64).clamp(1, 128_000) - 1;
    // 40,503 is coprime to 128,000, so this permutes the ids.
    (rank * 40_503 % 128_000) as u32
}

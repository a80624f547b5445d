//! Who used the GPU: the findings worker accounts each settled stretch's minutes
//! (`core::analysis::usage` over the stored steps, or the requests' intervals where an instance
//! reported none) into `usage_cells`; `GET /api/v1/usage` and compare sum those by tenant,
//! adapter or model.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tokenscope_core::analysis::usage::{
    self, CELL_NS, Served, StepFold, Usage, UsageBucket, UsageGroup, Uses, cell_of,
};
use tokenscope_core::model::Nanos;

use crate::error::{Error, Result};
use crate::store::{BlockKey, RequestFilter, Store, UsageBy, UsageRequest, UsageRow};

/// Steps read before the first cell: one that began earlier may run into it, and it tells where
/// the instance's busy time already began.
const STEP_LOOKBACK_NS: Nanos = 10 * 1_000_000_000;

/// Without a window: the hour up to the newest accounted minute.
const DEFAULT_WINDOW_NS: Nanos = 3600 * 1_000_000_000;

/// The findings worker's [`StepFold`]s, one per instance, kept between its passes: each pass
/// reads only the step blocks stored since the last one. Kept per worker, not per process: two
/// databases (tests) may both have an instance 1.
#[derive(Clone, Default)]
pub struct Folds(Arc<Mutex<HashMap<i32, Folded>>>);

/// Instances past this many folds: the oldest are not worth finding, all are dropped.
const MOST_FOLDS: usize = 4096;

/// An instance's steps folded from a cell on, and the blocks they came from.
struct Folded {
    fold: StepFold,
    blocks: HashSet<BlockKey>,
}

impl Folds {
    fn take(&self, instance_id: i32) -> Option<Folded> {
        self.lock().remove(&instance_id)
    }

    fn put(&self, instance_id: i32, folded: Folded) {
        let mut folds = self.lock();
        if folds.len() >= MOST_FOLDS {
            folds.clear();
        }
        folds.insert(instance_id, folded);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Folded>> {
        // A panic elsewhere leaves only folds that are checked before use anyway.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Folded {
    /// Whether the blocks now stored in the fold's range (`keys`, up to `end`) only add steps
    /// after those folded: every block folded before `end` is still there, and every other one
    /// starts after the last step folded. Otherwise (late steps, retention) it starts again.
    fn goes_on_with(&self, keys: &[BlockKey], end: Nanos) -> bool {
        let now: HashSet<&BlockKey> = keys.iter().collect();
        let last = self.fold.last();
        self.blocks
            .iter()
            .filter(|b| b.second_ns < end)
            .all(|b| now.contains(b))
            && keys
                .iter()
                .filter(|k| !self.blocks.contains(k))
                .all(|k| Some((k.first_start_ns, k.first_iteration_id as u64)) > last)
    }
}

/// Recomputes an instance's usage in the minutes `[from, to]` touches.
pub async fn account(
    store: &Store,
    folds: &Folds,
    instance_id: i32,
    from: Nanos,
    to: Nanos,
) -> Result<()> {
    let cells = (cell_of(from), cell_of(to) + CELL_NS);
    let (mut uses, stepped) = from_steps(store, folds, instance_id, cells).await?;
    let requests = store.usage_requests(instance_id, cells.0, cells.1).await?;
    // Minutes with a step in them are split by the steps; the others, where requests were served
    // with no step reported (spans only), are estimated from the requests' intervals.
    let served: Vec<Served> = requests.iter().map(served).collect();
    uses.extend(
        usage::from_requests(&served, cells)
            .into_iter()
            .filter(|((cell, _), _)| !stepped.contains(cell)),
    );
    let rows = rows(&requests, &uses, &stepped);
    store.put_usage(instance_id, cells, &rows).await?;
    Ok(())
}

/// The steps' uses in `cells` and the cells that have steps: the instance's fold carried on
/// with the blocks stored since, or a new one when it counts from another cell or steps arrived
/// among those it has.
async fn from_steps(
    store: &Store,
    folds: &Folds,
    instance_id: i32,
    cells: (Nanos, Nanos),
) -> Result<(Uses, BTreeSet<Nanos>)> {
    let range = cells.0 - STEP_LOOKBACK_NS..cells.1;
    let keys = store.step_block_keys(instance_id, range.clone()).await?;
    let mut folded = folds
        .take(instance_id)
        .filter(|f| f.fold.from() == cells.0 && f.goes_on_with(&keys, cells.1))
        .unwrap_or_else(|| Folded {
            fold: StepFold::new(cells.0),
            blocks: HashSet::new(),
        });
    let new: Vec<BlockKey> = keys
        .into_iter()
        .filter(|k| !folded.blocks.contains(k))
        .collect();
    let steps = store.iterations_in_blocks(instance_id, &new, range).await?;
    folded.fold.add(&steps);
    folded.blocks.extend(new);
    let out = (folded.fold.uses(cells.1), folded.fold.stepped(cells.1));
    folds.put(instance_id, folded);
    Ok(out)
}

fn served(r: &UsageRequest) -> Served {
    Served {
        request_id: Arc::from(r.request_id.as_str()),
        start_ns: r.first_scheduled_ns.unwrap_or(r.arrival_ns),
        first_token_ns: r.first_token_ns,
        finished_ns: r.finished_ns,
        prefill_tokens: (r.prompt_tokens - r.cached_tokens).max(0) as u32,
        output_tokens: r.output_tokens.max(0) as u32,
    }
}

/// Sums the requests' uses per cell by what they were served for; a minute is measured (it has
/// steps) or estimated, never both.
fn rows(requests: &[UsageRequest], uses: &Uses, stepped: &BTreeSet<Nanos>) -> Vec<UsageRow> {
    let by_id: HashMap<&str, &UsageRequest> = requests
        .iter()
        .map(|r| (r.request_id.as_str(), r))
        .collect();
    // (cell, model, tenant, adapter) → (GPU ns, prefill tokens, decode tokens)
    type Key = (Nanos, i32, String, String);
    let mut sums: BTreeMap<Key, (f64, i64, i64)> = BTreeMap::new();
    for ((cell, id), u) in uses {
        let (model_id, tenant, adapter) = match by_id.get(&**id) {
            Some(r) => (
                r.model_id,
                r.tenant.clone().unwrap_or_default(),
                r.lora_adapter.clone().unwrap_or_default(),
            ),
            None => (0, String::new(), String::new()),
        };
        let s = sums.entry((*cell, model_id, tenant, adapter)).or_default();
        s.0 += u.gpu_ns;
        s.1 += u.prefill_tokens as i64;
        s.2 += u.decode_tokens as i64;
    }
    sums.into_iter()
        .map(
            |((cell_ns, model_id, tenant, lora_adapter), (gpu, p, d))| UsageRow {
                cell_ns,
                model_id,
                tenant,
                lora_adapter,
                estimated: !stepped.contains(&cell_ns),
                gpu_ns: gpu.round() as i64,
                prefill_tokens: p,
                decode_tokens: d,
            },
        )
        .filter(|r| r.gpu_ns > 0 || r.prefill_tokens > 0 || r.decode_tokens > 0)
        .collect()
}

/// The chart's bucket: whole minutes, about one bar per six pixels.
fn bucket_for(from: Nanos, to: Nanos, width_px: u32) -> Nanos {
    let bars = Nanos::from((width_px / 6).clamp(1, 360));
    let per_bar = (to - from + bars - 1) / bars;
    (per_bar + CELL_NS - 1) / CELL_NS * CELL_NS
}

/// GPU time of `f`'s instances (engine, version, model, tenant, adapter) over its window, by
/// `by`: groups most first, and a chart's buckets. The window snaps out to whole minutes.
pub async fn window(store: &Store, f: &RequestFilter, by: UsageBy, width_px: u32) -> Result<Usage> {
    let to = match f.to_ns {
        Some(to) => to,
        None => store
            .newest_usage(f)
            .await?
            .map_or_else(crate::clock::now_ns, |t| t + CELL_NS),
    };
    let from = f.from_ns.unwrap_or(to - DEFAULT_WINDOW_NS);
    if from >= to {
        return Err(Error::InvalidArgument(format!(
            "from={from} must be before to={to}"
        )));
    }
    let (from, to) = (cell_of(from), cell_of(to - 1) + CELL_NS);
    let bucket_ns = bucket_for(from, to, width_px);
    let sums = store.usage_sums(f, (from, to), bucket_ns, by).await?;

    let mut groups: Vec<UsageGroup> = Vec::new();
    let mut index: HashMap<(Option<String>, bool), usize> = HashMap::new();
    for s in &sums {
        let k = *index.entry((s.key.clone(), s.unstored)).or_insert_with(|| {
            groups.push(UsageGroup {
                key: s.key.clone(),
                unstored: s.unstored,
                gpu_s: 0.0,
                share: 0.0,
                prefill_tokens: 0,
                decode_tokens: 0,
                estimated_s: 0.0,
            });
            groups.len() - 1
        });
        let g = &mut groups[k];
        g.gpu_s += s.gpu_ns / 1e9;
        g.estimated_s += s.estimated_ns / 1e9;
        g.prefill_tokens += s.prefill_tokens as u64;
        g.decode_tokens += s.decode_tokens as u64;
    }
    let busy_s: f64 = groups.iter().map(|g| g.gpu_s).sum();
    let estimated_s: f64 = groups.iter().map(|g| g.estimated_s).sum();
    // Most first; the chart's values follow this order.
    groups.sort_by(|a, b| b.gpu_s.total_cmp(&a.gpu_s).then_with(|| a.key.cmp(&b.key)));
    for (k, g) in groups.iter_mut().enumerate() {
        index.insert((g.key.clone(), g.unstored), k);
        g.share = if busy_s > 0.0 { g.gpu_s / busy_s } else { 0.0 };
    }
    let mut buckets: Vec<UsageBucket> = Vec::new();
    for s in &sums {
        let start_ns = from + s.bucket * bucket_ns;
        if buckets.last().is_none_or(|b| b.start_ns != start_ns) {
            buckets.push(UsageBucket {
                start_ns,
                gpu_s: vec![0.0; groups.len()],
            });
        }
        let k = index[&(s.key.clone(), s.unstored)];
        if let Some(b) = buckets.last_mut() {
            b.gpu_s[k] += s.gpu_ns / 1e9;
        }
    }
    Ok(Usage {
        from_ns: from,
        to_ns: to,
        bucket_ns,
        by: by.name().into(),
        groups,
        buckets,
        busy_s,
        estimated_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_whole_minutes_about_six_pixels_wide() {
        let hour = 3600 * 1_000_000_000;
        assert_eq!(bucket_for(0, hour, 600), CELL_NS);
        assert_eq!(bucket_for(0, 24 * hour, 600), 15 * CELL_NS);
        assert_eq!(bucket_for(0, CELL_NS, 1), CELL_NS);
    }
}

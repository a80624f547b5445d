//! Latency cells at fleet scale: the findings worker recounts the minutes a settled stretch
//! changed (`account`, then `sum_releases` for the fleet-wide sums), and the chart and compare
//! read a window as those minutes plus, counted from the requests, whatever the cells do not
//! cover yet — the window's ragged edges and the data still waiting for the worker (`window`).
//!
//! Only the filters a cell keeps (instances, engine, release, model, window) and the default
//! SLOs read cells; anything else (a tenant, a bucket, other SLOs) is counted from the requests,
//! as before.

use std::collections::BTreeMap;

use tokenscope_core::analysis::diagnosis::Thresholds;
use tokenscope_core::analysis::usage::{CELL_NS, cell_of};
use tokenscope_core::model::Nanos;
use tokenscope_core::model::latency_cells::{Cell, CellInput};

use crate::error::Result;
use crate::store::{CellRow, RequestFilter, Store};

/// A request alive this long before the oldest waiting stretch may have been changed by it: its
/// minute is counted from the requests until the worker has recounted it. (A request older
/// than this whose data still waits shows its last counted values until then.)
const ALIVE_NS: Nanos = 5 * 60 * 1_000_000_000;

/// Past this share of the window left to count from the requests (the worker far behind, or
/// none running), the caller's own scan is as cheap and exact.
const MOST_UNCOUNTED: f64 = 0.5;

/// The default SLOs, as cells count breaches of them.
pub fn default_slo_ns() -> (Nanos, Nanos) {
    let th = Thresholds::default();
    ((th.ttft_ms * 1e6) as Nanos, (th.tpot_ms * 1e6) as Nanos)
}

/// Recounts an instance's minutes that the stretch `[from, to]` changed (those of the requests
/// alive in it); returns them, `None` when no request was.
pub async fn account(
    store: &Store,
    instance_id: i32,
    from: Nanos,
    to: Nanos,
) -> Result<Option<(Nanos, Nanos)>> {
    let Some(first) = store.earliest_alive(instance_id, from, to).await? else {
        return Ok(None);
    };
    let minutes = (cell_of(first), cell_of(to) + CELL_NS);
    let mut by_model: BTreeMap<i32, Vec<_>> = BTreeMap::new();
    for (model, input) in store.cell_inputs(instance_id, minutes).await? {
        by_model.entry(model).or_default().push(input);
    }
    let mut rows = Vec::new();
    for (model_id, inputs) in by_model {
        rows.extend(
            by_minute(inputs)
                .into_iter()
                .map(|(cell_ns, cell)| CellRow {
                    cell_ns,
                    model_id,
                    cell,
                }),
        );
    }
    store.put_latency_cells(instance_id, minutes, &rows).await?;
    Ok(Some(minutes))
}

/// Sums the fleet cells of the minutes `account` recounted, per engine release, each stretch of
/// minutes once however many of the release's instances recounted it.
pub async fn sum_releases(store: &Store, recounted: &[(i32, (Nanos, Nanos))]) -> Result<()> {
    let ids: Vec<i32> = recounted.iter().map(|r| r.0).collect();
    let release_of: BTreeMap<i32, (String, String)> =
        store.releases_of(&ids).await?.into_iter().collect();
    let mut by_release: BTreeMap<(String, String), Vec<(Nanos, Nanos)>> = BTreeMap::new();
    for (instance_id, minutes) in recounted {
        if let Some(release) = release_of.get(instance_id) {
            by_release
                .entry(release.clone())
                .or_default()
                .push(*minutes);
        }
    }
    for ((engine, version), mut spans) in by_release {
        spans.sort_unstable();
        let mut merged: Vec<(Nanos, Nanos)> = Vec::new();
        for (a, b) in spans {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        for span in merged {
            store.sum_fleet_cells((&engine, &version), span).await?;
        }
    }
    Ok(())
}

/// Requests by the minute they arrived in: what the worker stores for a stretch.
fn by_minute(inputs: Vec<CellInput>) -> BTreeMap<Nanos, Cell> {
    let mut cells = BTreeMap::<Nanos, Cell>::new();
    for r in inputs {
        cells
            .entry(cell_of(r.arrival_ns))
            .or_default()
            .add(&r, default_slo_ns());
    }
    cells
}

/// Whether cells can answer for `f` with SLOs `slo_ns`: no slice, find, SLO or cause filter.
pub fn fits(f: &RequestFilter, slo_ns: (Nanos, Nanos)) -> bool {
    !f.sliced()
        && f.find.is_none()
        && f.slo_breach.is_none()
        && f.cause.is_none()
        && slo_ns == default_slo_ns()
}

/// `f`'s requests in `[from, to)` as one cell per bucket of `bucket_ns` from `origin` (a
/// minute boundary; `bucket_ns` whole minutes), keyed by bucket index; `None` when the cells
/// cannot answer (see [`fits`]) or most of the window is not counted yet.
pub async fn window(
    store: &Store,
    f: &RequestFilter,
    (from, to): (Nanos, Nanos),
    (origin, bucket_ns): (Nanos, Nanos),
) -> Result<Option<BTreeMap<i64, Cell>>> {
    if !fits(f, f.slo_ns) || from >= to {
        return Ok(None);
    }
    // Whole minutes inside the window, before anything waiting for the worker.
    let counted_to = match store.cells_pending_from(f).await? {
        Some(t) => cell_of(t - ALIVE_NS),
        None => Nanos::MAX,
    };
    let first = cell_of(from) + if cell_of(from) < from { CELL_NS } else { 0 };
    let last = cell_of(to).min(counted_to).max(first);
    let uncounted = (first - from) + (to - last);
    if uncounted as f64 > MOST_UNCOUNTED * (to - from) as f64 {
        return Ok(None);
    }
    let key = |t: Nanos| (t - origin).div_euclid(bucket_ns);
    let mut out: BTreeMap<i64, Cell> = BTreeMap::new();
    for r in store.latency_cells(f, (first, last)).await? {
        out.entry(key(r.cell_ns)).or_default().merge(&r.cell);
    }
    // The edges, from the requests.
    for (a, b) in [(from, first.min(to)), (last.max(from), to)] {
        if a >= b {
            continue;
        }
        let edge = RequestFilter {
            from_ns: Some(a),
            to_ns: Some(b),
            ..f.clone()
        };
        for r in store.cell_inputs_matching(&edge).await? {
            out.entry(key(r.arrival_ns))
                .or_default()
                .add(&r, default_slo_ns());
        }
    }
    Ok(Some(out))
}

//! Diagnoses: one request's (a PD request's parts each on their own instance, merged) and a
//! window's degraded requests, worst first, each read with its surroundings in one go.

use std::collections::BTreeMap;

use tokenscope_core::analysis::diagnosis::{
    Context, Diagnosis, Severity, Thresholds, Verdict, diagnose, merge_pd, steps_of,
};
use tokenscope_core::analysis::metrics::request_metrics;
use tokenscope_core::model::RequestTrace;

use crate::error::Result;
use crate::store::{CLOCK_SLACK_NS, Loaded, RequestFilter, Store};

/// Requests diagnosed together from one read of their surroundings (`GET /api/v1/diagnosis`).
const PAGE: i64 = 256;

/// Diagnoses requests of one instance (`traces` in arrival order) from one read of the
/// iterations and neighbours around all of them, instead of three queries per request.
async fn together(
    store: &Store,
    instance_id: i32,
    traces: &[&RequestTrace],
    th: &Thresholds,
) -> Result<Vec<Diagnosis>> {
    let (Some(from), Some(to)) = (
        traces.iter().map(|t| t.arrival_ns).min(),
        traces.iter().map(|t| t.finished_ns).max(),
    ) else {
        return Ok(Vec::new());
    };
    // From a little before arrival: the step that admitted a request may start just before
    // it (engine and gateway clocks differ).
    let iterations = store
        .iterations_between(instance_id, from - CLOCK_SLACK_NS, to)
        .await?;
    let others = store.overlapping_requests(instance_id, from, to).await?;
    Ok(traces
        .iter()
        .map(|t| {
            // Neighbours outside the request's lifetime are harmless: every rule looks only
            // at prefill inside the request's own intervals.
            diagnose(
                t,
                &Context {
                    iterations: steps_of(&iterations, t),
                    others: &others,
                },
                th,
            )
        })
        .collect())
}

/// `GET /api/v1/requests/{id}/diagnosis`.
pub async fn request(
    store: &Store,
    request_id: &str,
    instances: &[String],
    th: &Thresholds,
) -> Result<Diagnosis> {
    let l = super::requests::load(store, request_id, instances).await?;
    loaded(store, &l, th).await
}

/// A loaded request's diagnosis; a PD request's parts each against their own instance's
/// steps and neighbours (its prefill waited on one engine, its answer on another), merged.
pub async fn loaded(store: &Store, l: &Loaded, th: &Thresholds) -> Result<Diagnosis> {
    if l.parts.is_empty() {
        let mut one = together(store, l.instance_id, &[&l.trace], th).await?;
        return Ok(one.remove(0));
    }
    let mut each = Vec::with_capacity(l.parts.len());
    for p in &l.parts {
        // Against its own instance's steps, so on its own clock.
        let mut own = p.trace.clone();
        own.shift(-p.clock_shift_ns);
        each.push(together(store, p.instance_id, &[&own], th).await?.remove(0));
    }
    let parts: Vec<&RequestTrace> = l.parts.iter().map(|p| &p.trace).collect();
    Ok(merge_pd(&l.trace, &parts, each, th))
}

/// The degraded requests among the first `limit` that match `f` (its instances, engine,
/// model and window), worst first.
pub async fn window(
    store: &Store,
    f: &RequestFilter,
    th: &Thresholds,
    limit: i64,
) -> Result<Vec<Diagnosis>> {
    let mut out = Vec::new();
    let (mut after, mut left) = (None, limit);
    // A page of neighbours in arrival order at a time: one read of their surroundings per
    // instance, and memory bounded by a page's tokens rather than the whole window's.
    while left > 0 {
        let page = store.load_window(f, after.as_ref(), left.min(PAGE)).await?;
        left -= page.len() as i64;
        after = page
            .last()
            .map(|l| (l.trace.arrival_ns, l.trace.request_id.clone()));
        let mut by_instance: BTreeMap<i32, Vec<&RequestTrace>> = BTreeMap::new();
        for l in &page {
            by_instance.entry(l.instance_id).or_default().push(&l.trace);
        }
        for (instance_id, traces) in by_instance {
            let diagnoses = together(store, instance_id, &traces, th).await?;
            for (trace, d) in traces.into_iter().zip(diagnoses) {
                if d.verdict != Verdict::Degraded {
                    continue;
                }
                let m = request_metrics(trace);
                let excess = [
                    m.ttft_ns.map_or(0.0, |t| t as f64 / 1e6 / th.ttft_ms),
                    m.tpot_ns.map_or(0.0, |t| t as f64 / 1e6 / th.tpot_ms),
                ]
                .into_iter()
                .fold(0.0, f64::max);
                let worst = d
                    .findings
                    .iter()
                    .map(|f| f.severity)
                    .max()
                    .unwrap_or(Severity::Info);
                out.push((worst, excess, d));
            }
        }
        if page.len() < PAGE as usize {
            break;
        }
    }
    out.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.total_cmp(&a.1)));
    Ok(out.into_iter().map(|(_, _, d)| d).collect())
}

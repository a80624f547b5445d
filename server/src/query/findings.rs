//! Findings as data: each request's diagnosis stored once its neighbourhood has settled, the
//! same `diagnose` the on-demand endpoints run (`diagnosis::together`), with default thresholds.
//!
//! The rule for late and out-of-order data: every stored batch queues the stretch of its
//! instance's time it touched (`store::diagnoses`); a stretch is taken once no data has been
//! added to the queue for `settle`, and every request of the instance alive in it is diagnosed
//! again (but those ingest found healthy whatever ran beside them: `healthy_alone`). A culprit
//! exported after its victims were diagnosed therefore queues their lifetime, and their stored
//! findings change one settle period later. The same stretches have their GPU
//! time accounted (`usage`) and their minutes' latencies counted (`cells`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;

use tokenscope_core::analysis::diagnosis::{Diagnosis, Severity, Thresholds, Verdict};
use tokenscope_core::analysis::metrics::request_metrics;
use tokenscope_core::api::{Victim, VictimList};
use tokenscope_core::model::{Nanos, RequestTrace};

use super::usage::Folds;
use crate::error::{Error, Result};
use crate::store::{DiagnosisRow, Loaded, Store};

/// Requests this process's worker has diagnosed (`/metrics`): against the requests stored, how
/// often new data made it diagnose a request again.
static DIAGNOSED: AtomicU64 = AtomicU64::new(0);

/// See [`DIAGNOSED`].
pub fn diagnosed_total() -> u64 {
    DIAGNOSED.load(Ordering::Relaxed)
}

/// Requests diagnosed and written at a time.
const PAGE: i64 = 256;

/// Queue rows taken at a time.
const TAKE: i64 = 10_000;

/// How far past its SLO a request was: TTFT or TPOT over its SLO, the larger (the window
/// listing's second key, after the worst severity).
pub fn excess(r: &RequestTrace, th: &Thresholds) -> f64 {
    let m = request_metrics(r);
    [
        m.ttft_ns.map_or(0.0, |t| t as f64 / 1e6 / th.ttft_ms),
        m.tpot_ns.map_or(0.0, |t| t as f64 / 1e6 / th.tpot_ms),
    ]
    .into_iter()
    .fold(0.0, f64::max)
}

/// The worst severity among a diagnosis's findings.
pub fn worst(d: &Diagnosis) -> Severity {
    d.findings
        .iter()
        .map(|f| f.severity)
        .max()
        .unwrap_or(Severity::Info)
}

/// A diagnosis as its row; `None` for a healthy request (no row).
pub fn row_of(r: &RequestTrace, d: &Diagnosis) -> Result<Option<DiagnosisRow>> {
    if d.verdict == Verdict::Healthy {
        return Ok(None);
    }
    // Most severe first, as the findings are ordered: the first is what a list shows.
    let mut causes: Vec<&str> = Vec::new();
    for f in &d.findings {
        if !causes.contains(&f.cause.name()) {
            causes.push(f.cause.name());
        }
    }
    let culprits: BTreeSet<&str> = d
        .findings
        .iter()
        .flat_map(|f| f.culprits.iter().map(String::as_str))
        .collect();
    Ok(Some(DiagnosisRow {
        request_id: r.request_id.clone(),
        arrival_ns: r.arrival_ns,
        finished_ns: r.finished_ns,
        speed_degraded: d.speed == Verdict::Degraded,
        words_degraded: d.words == Verdict::Degraded,
        worst: worst(d) as i16,
        excess: excess(r, &Thresholds::default()),
        causes: causes.into_iter().map(String::from).collect(),
        culprits: culprits.into_iter().map(String::from).collect(),
        diagnosis: serde_json::to_value(d)
            .map_err(|e| Error::Internal(format!("a diagnosis does not serialise: {e}")))?,
    }))
}

/// A stored diagnosis back as the API's type.
pub fn parse(value: serde_json::Value) -> Result<Diagnosis> {
    serde_json::from_value(value)
        .map_err(|e| Error::Internal(format!("a stored diagnosis is unreadable: {e}")))
}

/// At most this many victims are listed for a culprit.
const VICTIMS: i64 = 100;

/// The requests whose stored findings name `l` as a culprit ("which requests did this one
/// hurt?"), most held first; a PD request's on each of its parts' instances.
pub async fn victims(store: &Store, l: &Loaded) -> Result<VictimList> {
    let parts: Vec<&Loaded> = if l.parts.is_empty() {
        vec![l]
    } else {
        l.parts.iter().collect()
    };
    let mut victims = Vec::new();
    for p in parts {
        let t = &p.trace;
        for row in store
            .victims_of(
                p.instance_id,
                &t.request_id,
                t.arrival_ns,
                t.finished_ns,
                VICTIMS,
            )
            .await?
        {
            let d = parse(row.diagnosis)?;
            let (mut causes, mut held) = (Vec::new(), 0.0f64);
            for f in d
                .findings
                .iter()
                .filter(|f| f.culprits.contains(&t.request_id))
            {
                if !causes.contains(&f.cause.name().to_string()) {
                    causes.push(f.cause.name().to_string());
                }
                let of = |c: &&serde_json::Value| c["request_id"] == t.request_id.as_str();
                let ms = f.evidence["culprits"]
                    .as_array()
                    .and_then(|cs| cs.iter().find(of))
                    .and_then(|c| c["held_ms"].as_f64())
                    .unwrap_or(0.0);
                held = held.max(ms);
            }
            victims.push(Victim {
                request_id: d.request_id,
                instance: p.instance.clone(),
                causes,
                held_ms: held,
            });
        }
    }
    victims.sort_by(|a, b| {
        b.held_ms
            .total_cmp(&a.held_ms)
            .then(a.request_id.cmp(&b.request_id))
    });
    Ok(VictimList { victims })
}

/// Diagnoses every request of an instance alive in `[from, to]` and stores the result; returns
/// how many requests it diagnosed.
pub async fn diagnose_stretch(
    store: &Store,
    instance_id: i32,
    from: Nanos,
    to: Nanos,
) -> Result<usize> {
    let th = Thresholds::default();
    // A request healthy whatever ran beside it has no row to store, whatever arrived since.
    let alive = store.alive(instance_id, from, to, PAGE);
    let (mut pages, mut done) = (alive.unless_healthy_alone(), 0);
    while let Some(page) = pages.next().await? {
        let (mut rows, mut keys) = (Vec::new(), Vec::with_capacity(page.len()));
        for (l, d) in super::diagnosis::together_untexted(store, instance_id, page, &th).await? {
            rows.extend(row_of(&l.trace, &d)?);
            keys.push((l.trace.request_id, l.trace.arrival_ns));
        }
        store.put_diagnoses(instance_id, &keys, &rows).await?;
        DIAGNOSED.fetch_add(keys.len() as u64, Ordering::Relaxed);
        done += keys.len();
    }
    Ok(done)
}

/// Diagnoses what has settled for `settle`; returns how many requests it diagnosed, `None` when
/// nothing was due. `folds` carries the GPU accounting's steps from one call to the next.
/// Instances are settled side by side, two per core: the work is mostly this process's CPU
/// (decoding tokens, the diagnosis) and its queries, so one at a time left a core idle
/// (docs/BENCHMARKS.md). An instance's own stretches go one after the other: two of them may
/// share requests and minutes, which would then be written twice at once.
pub async fn drain(store: &Store, folds: &Folds, settle: Duration) -> Result<Option<usize>> {
    let due = store.due_for_diagnosis(settle, TAKE).await?;
    if due.ids.is_empty() {
        return Ok(None);
    }
    let mut by_instance: BTreeMap<i32, Vec<(Nanos, Nanos)>> = BTreeMap::new();
    for &(instance_id, from, to) in &due.ranges {
        by_instance.entry(instance_id).or_default().push((from, to));
    }
    // Two per core: an instance's task waits on Postgres part of the time (docs/BENCHMARKS.md,
    // keeping up).
    let width = std::thread::available_parallelism().map_or(2, |n| (2 * n.get()).min(8));
    let mut settled = futures_util::stream::iter(by_instance)
        .map(|(instance_id, stretches)| {
            let (store, folds) = (store.clone(), folds.clone());
            async move {
                tokio::spawn(async move {
                    let (mut done, mut minutes) = (0, Vec::new());
                    for (from, to) in stretches {
                        let (n, m) = settle_stretch(&store, &folds, instance_id, from, to).await?;
                        done += n;
                        minutes.extend(m);
                    }
                    Ok::<_, Error>((done, minutes))
                })
                .await
                .map_err(|e| Error::Internal(format!("a findings task failed: {e}")))?
            }
        })
        .buffer_unordered(width);
    let (mut done, mut recounted) = (0, Vec::new());
    while let Some(instance) = settled.next().await {
        let (n, minutes) = instance?;
        done += n;
        recounted.extend(minutes);
    }
    super::cells::sum_releases(store, &recounted).await?;
    // Only what was taken: stretches queued meanwhile wait for their own settle time.
    store.diagnosed(&due.ids).await?;
    Ok(Some(done))
}

/// One stretch of one instance: its requests diagnosed, then who used the GPU in those minutes
/// and the minutes' latency cells, now that the requests' records are in. Returns how many
/// requests it diagnosed and the recounted minutes, if any.
async fn settle_stretch(
    store: &Store,
    folds: &Folds,
    instance_id: i32,
    from: Nanos,
    to: Nanos,
) -> Result<(usize, Option<(i32, (Nanos, Nanos))>)> {
    let done = diagnose_stretch(store, instance_id, from, to).await?;
    super::usage::account(store, folds, instance_id, from, to).await?;
    let minutes = super::cells::account(store, instance_id, from, to).await?;
    Ok((done, minutes.map(|m| (instance_id, m))))
}

//! Diagnoses: one request's (a PD request's parts each on their own instance, merged) and a
//! window's degraded requests, worst first. With the default thresholds they are read from the
//! stored findings (`findings`) where those are settled, and computed here, each request with
//! its surroundings read in one go, where data is still arriving or thresholds differ.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokenscope_core::analysis::diagnosis::{
    Context, Diagnosis, Severity, StepSums, Thresholds, Verdict, diagnose, healthy_alone, merge_pd,
};
use tokenscope_core::model::{Architecture, Iteration, Nanos, OtherRequest, RequestTrace};

use super::findings::{excess, parse, worst};
use crate::error::Result;
use crate::store::{CLOCK_SLACK_NS, Loaded, RequestFilter, Store, Stored, TextsLater};

/// Requests diagnosed together from one read of their surroundings (`GET /api/v1/diagnosis`).
const PAGE: i64 = 256;

/// Diagnoses requests of one instance (`traces` in arrival order, each with the name of the
/// model that served it) from one read of the iterations and neighbours around all of them,
/// instead of three queries per request.
pub(super) async fn together(
    store: &Store,
    instance_id: i32,
    served: &[(&RequestTrace, &str)],
    th: &Thresholds,
) -> Result<Vec<Diagnosis>> {
    let traces: Vec<&RequestTrace> = served.iter().map(|&(t, _)| t).collect();
    let Some(around) = Surroundings::read(store, instance_id, &traces).await? else {
        return Ok(Vec::new());
    };
    Ok(served
        .iter()
        .map(|&(t, model)| around.diagnose(t, Architecture::known(model), th))
        .collect())
}

/// [`together`] for a page read without the vocabulary's texts: every request is diagnosed as
/// read, and those that are not healthy again with their texts, which only their findings
/// quote (a text never decides a finding: equal ids have equal vocabulary texts). The page
/// comes back with its diagnoses.
pub(super) async fn together_untexted(
    store: &Store,
    instance_id: i32,
    page: Vec<(Loaded, TextsLater)>,
    th: &Thresholds,
) -> Result<Vec<(Loaded, Diagnosis)>> {
    let traces: Vec<&RequestTrace> = page.iter().map(|(l, _)| &l.trace).collect();
    let Some(around) = Surroundings::read(store, instance_id, &traces).await? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(page.len());
    for (mut l, later) in page {
        // Only findings quote texts. A request not healthy alone is not healthy beside anything
        // either (`accuracy::neighbours_never_decide_whether_a_request_is_healthy`): it gets its
        // texts before its one diagnosis. One healthy alone is diagnosed without them, and again
        // with them when its steps' speculation finds something.
        let model = Architecture::known(&l.model);
        let untexted = healthy_alone(&l.trace, th).then(|| around.diagnose(&l.trace, model, th));
        let d = match untexted {
            Some(d) if d.verdict == Verdict::Healthy => d,
            _ => {
                store.fill_texts(&mut l.trace, later).await?;
                around.diagnose(&l.trace, model, th)
            }
        };
        out.push((l, d));
    }
    Ok(out)
}

/// What a page of requests of one instance is diagnosed against: the steps and the neighbours
/// over all their lifetimes, and the steps' batches counted once for the page, per model shape
/// its requests were served by (one, almost always).
struct Surroundings {
    iterations: Vec<Iteration>,
    others: Vec<OtherRequest>,
    counted: Mutex<Vec<(Option<Architecture>, Arc<StepSums>)>>,
}

impl Surroundings {
    /// `None` for no requests.
    async fn read(
        store: &Store,
        instance_id: i32,
        traces: &[&RequestTrace],
    ) -> Result<Option<Self>> {
        let (Some(from), Some(to)) = (
            traces.iter().map(|t| t.arrival_ns).min(),
            traces.iter().map(|t| t.finished_ns).max(),
        ) else {
            return Ok(None);
        };
        // From a little before arrival: the step that admitted a request may start just before
        // it (engine and gateway clocks differ).
        let iterations = store
            .iterations_between(instance_id, from - CLOCK_SLACK_NS, to)
            .await?;
        let others = store.overlapping_requests(instance_id, from, to).await?;
        Ok(Some(Self {
            iterations,
            others,
            counted: Mutex::default(),
        }))
    }

    /// `t`'s context: its steps of the page, their batches counted for `model` once a page.
    fn context(&self, t: &RequestTrace, model: Option<Architecture>) -> Context<'_> {
        let sums = {
            let mut counted = self.counted.lock().unwrap_or_else(|e| e.into_inner());
            match counted.iter().find(|(m, _)| *m == model) {
                Some((_, sums)) => sums.clone(),
                None => {
                    let sums = Arc::new(StepSums::of(&self.iterations, model.as_ref()));
                    counted.push((model, sums.clone()));
                    sums
                }
            }
        };
        Context::among(&self.iterations, &sums, t, &self.others, model)
    }

    /// `t`, served by a model of shape `model` (when its name is known), which costs its
    /// neighbours' prompts.
    fn diagnose(
        &self,
        t: &RequestTrace,
        model: Option<Architecture>,
        th: &Thresholds,
    ) -> Diagnosis {
        // Neighbours outside the request's lifetime are harmless: every rule looks only at
        // prefill inside the request's own intervals.
        diagnose(t, &self.context(t, model), th)
    }
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
        if *th == Thresholds::default() {
            let t = &l.trace;
            match store
                .stored_diagnosis(l.instance_id, &t.request_id, t.arrival_ns, t.finished_ns)
                .await?
            {
                Stored::Settled(Some(row)) => return parse(row),
                Stored::Settled(None) => return Ok(Diagnosis::healthy(t.request_id.clone())),
                Stored::Pending => {}
            }
        }
        let mut one = together(store, l.instance_id, &[(&l.trace, &l.model)], th).await?;
        return Ok(one.remove(0));
    }
    let mut each = Vec::with_capacity(l.parts.len());
    for p in &l.parts {
        // Against its own instance's steps, so on its own clock.
        let mut own = p.trace.clone();
        own.shift(-p.clock_shift_ns);
        each.push(
            together(store, p.instance_id, &[(&own, &p.model)], th)
                .await?
                .remove(0),
        );
    }
    let parts: Vec<&RequestTrace> = l.parts.iter().map(|p| &p.trace).collect();
    Ok(merge_pd(&l.trace, &parts, each, th))
}

/// The degraded requests of a window, worst first: at most `limit`. With the default
/// thresholds and a filter of instances and time only, the settled part is a query of the stored
/// findings and the stretches still waiting for the worker are diagnosed here; otherwise the
/// first `limit` requests that match `f` are diagnosed.
pub async fn window(
    store: &Store,
    f: &RequestFilter,
    th: &Thresholds,
    limit: i64,
) -> Result<Vec<Diagnosis>> {
    let stored_fits = *th == Thresholds::default()
        && f.engine.is_none()
        && f.engine_version.is_none()
        && f.model.is_none()
        && !f.sliced();
    if !stored_fits {
        return computed(store, f, th, limit).await;
    }
    let instances = instance_ids(store, f).await?;
    let (from, to) = (
        f.from_ns.unwrap_or(Nanos::MIN),
        f.to_ns.unwrap_or(Nanos::MAX),
    );
    // Far behind (or no worker): the first `limit` requests, diagnosed here, as without rows.
    let Some(fresh) = unsettled(store, f, instances.as_deref(), th, limit as usize).await? else {
        return computed(store, f, th, limit).await;
    };
    let mut out = settled(
        store,
        instances.as_deref(),
        (from, to),
        limit,
        &fresh.stretches,
    )
    .await?;
    out.extend(fresh.degraded);
    Ok(worst_first(out, limit))
}

/// What `unsettled` found waiting: the stretches it diagnosed and the degraded requests in them.
pub struct Unsettled {
    /// (instance, from, to) as the queue held them when read.
    pub stretches: Vec<(i32, Nanos, Nanos)>,
    /// With their worst severity and how far past its SLO each was.
    pub degraded: Vec<(Severity, f64, Diagnosis)>,
}

/// The stored findings of requests that arrived in `[from, to)` on `instances`, worst first, at
/// most `limit`, except those alive in `diagnosed` (the stretches `unsettled` diagnosed): each
/// request once, whether or not the worker settled those stretches in between.
pub async fn settled(
    store: &Store,
    instances: Option<&[i32]>,
    window: (Nanos, Nanos),
    limit: i64,
    diagnosed: &[(i32, Nanos, Nanos)],
) -> Result<Vec<(Severity, f64, Diagnosis)>> {
    let mut out = Vec::new();
    for row in store
        .stored_diagnoses(instances, window, limit, diagnosed)
        .await?
    {
        let d = parse(row.diagnosis)?;
        out.push((worst(&d), row.excess, d));
    }
    Ok(out)
}

/// Whether `t` was served to `f`'s tenant, through its adapter, at its priority (each when set).
fn in_slice(f: &RequestFilter, t: &RequestTrace) -> bool {
    let s = &t.served;
    f.tenants
        .as_ref()
        .is_none_or(|ts| s.tenant.as_ref().is_some_and(|t| ts.contains(t)))
        && f.lora_adapter
            .as_ref()
            .is_none_or(|x| s.lora_adapter.as_ref() == Some(x))
        && f.priority.is_none_or(|x| s.priority == Some(x))
}

/// The ids of `f`'s instances (`None`: any).
pub(crate) async fn instance_ids(store: &Store, f: &RequestFilter) -> Result<Option<Vec<i32>>> {
    Ok(match f.instance_list() {
        Some(keys) => Some(store.instance_ids(keys).await?),
        None => None,
    })
}

/// The degraded requests of `f`'s window (its instances, as `instances`; engine, version,
/// model) that data still waiting for the findings worker touches, diagnosed here; the rest
/// are `settled`'s. `None` when there are more than `budget` such requests (the worker is far
/// behind, or none runs).
pub async fn unsettled(
    store: &Store,
    f: &RequestFilter,
    instances: Option<&[i32]>,
    th: &Thresholds,
    budget: usize,
) -> Result<Option<Unsettled>> {
    let (from, to) = (
        f.from_ns.unwrap_or(Nanos::MIN),
        f.to_ns.unwrap_or(Nanos::MAX),
    );
    let pending = store.pending_diagnosis(instances, from, to).await?;
    let stretches = pending.iter().map(|p| (p.0, p.2, p.3)).collect();
    if pending.is_empty() {
        return Ok(Some(Unsettled {
            stretches,
            degraded: Vec::new(),
        }));
    }
    // Engine and version are the instance's; the model is each request's.
    let instances = store.list_instances().await?;
    let matches = |key: &str| {
        instances.iter().any(|i| {
            i.instance == key
                && f.engine.as_deref().is_none_or(|e| i.engine.as_str() == e)
                && f.engine_version
                    .as_deref()
                    .is_none_or(|v| i.engine_version == v)
        })
    };
    let (mut out, mut seen) = (Vec::new(), 0);
    for (instance_id, key, lo, hi) in pending {
        if !matches(&key) {
            continue;
        }
        let mut pages = store.alive(instance_id, lo, hi, PAGE);
        if *th == Thresholds::default() {
            // Only the degraded are listed; these are healthy whatever ran beside them.
            pages = pages.unless_healthy_alone();
        }
        while let Some(page) = pages.next().await? {
            let page: Vec<(Loaded, TextsLater)> = page
                .into_iter()
                .filter(|(l, _)| {
                    f.model.as_deref().is_none_or(|m| l.model == m)
                        && in_slice(f, &l.trace)
                        && l.trace.arrival_ns >= from
                        && l.trace.arrival_ns < to
                })
                .collect();
            seen += page.len();
            if seen > budget {
                return Ok(None);
            }
            for (l, d) in together_untexted(store, instance_id, page, th).await? {
                if d.verdict == Verdict::Degraded {
                    out.push((worst(&d), excess(&l.trace, th), d));
                }
            }
        }
    }
    Ok(Some(Unsettled {
        stretches,
        degraded: out,
    }))
}

/// The degraded requests among the first `limit` that match `f` (its instances, engine,
/// model and window), worst first.
async fn computed(
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
        let mut by_instance: BTreeMap<i32, Vec<(&RequestTrace, &str)>> = BTreeMap::new();
        for l in &page {
            by_instance
                .entry(l.instance_id)
                .or_default()
                .push((&l.trace, &l.model));
        }
        for (instance_id, served) in by_instance {
            let diagnoses = together(store, instance_id, &served, th).await?;
            for ((trace, _), d) in served.into_iter().zip(diagnoses) {
                if d.verdict == Verdict::Degraded {
                    out.push((worst(&d), excess(trace, th), d));
                }
            }
        }
        if page.len() < PAGE as usize {
            break;
        }
    }
    Ok(worst_first(out, limit))
}

/// Worst severity first, then furthest past its SLO; then by id, so that the order does not
/// depend on where each diagnosis came from.
fn worst_first(mut out: Vec<(Severity, f64, Diagnosis)>, limit: i64) -> Vec<Diagnosis> {
    out.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(b.1.total_cmp(&a.1))
            .then(a.2.request_id.cmp(&b.2.request_id))
    });
    out.truncate(limit.max(0) as usize);
    out.into_iter().map(|(_, _, d)| d).collect()
}

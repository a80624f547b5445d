//! Requests as the API gives them: list pages, one request (a PD request's parts joined) with
//! its token views, the instances.

use tokenscope_core::analysis::token_view::token_views;
use tokenscope_core::analysis::{diagnosis::Thresholds, metrics::request_metrics, pd, stages};
use tokenscope_core::api::{
    FindingsBehind, InstanceInfo, RequestDetail, RequestPart, RequestSummary, Stage,
};
use tokenscope_core::model::{Nanos, RequestTrace, Role, StepLoad, ms};

use crate::error::{Error, Result};
use crate::store::{Loaded, RequestFilter, RequestRow, Store, Total};

/// The findings worker is "behind" once data has waited this long for it (the settle time,
/// 5 s by default, is normal).
const BEHIND: std::time::Duration = std::time::Duration::from_secs(30);

/// A page of the requests that match `f`, how many match in all (counted, or estimated past
/// what counting affords), and whether the findings worker is behind on them.
pub async fn list(
    store: &Store,
    f: &RequestFilter,
) -> Result<(Vec<RequestSummary>, Total, Option<FindingsBehind>)> {
    let (rows, total) = store.list_requests(f).await?;
    let pending = rows
        .iter()
        .filter(|r| r.causes.is_none())
        .map(|r| r.arrival_ns)
        .min();
    let behind = match pending {
        None => None,
        Some(first) => behind(store, f, first).await?,
    };
    Ok((rows.into_iter().map(summary).collect(), total, behind))
}

/// Up to when findings are known for `f`'s instances, when the worker is behind; `first`: the
/// earliest arrival of the page's requests still waiting. The queue's age is read first: most
/// pages with waiting requests are within the settle time, and need nothing more.
async fn behind(store: &Store, f: &RequestFilter, first: Nanos) -> Result<Option<FindingsBehind>> {
    let (waited, _) = store.diagnosis_backlog().await?;
    if waited < BEHIND {
        return Ok(None);
    }
    let instances = super::diagnosis::instance_ids(store, f).await?;
    let stretches = store
        .pending_diagnosis(instances.as_deref(), first, Nanos::MAX)
        .await?;
    // A request alive across a stretch's start waits too: no later than the first pending.
    let up_to = stretches
        .iter()
        .map(|s| s.2)
        .min()
        .unwrap_or(first)
        .min(first);
    Ok(Some(FindingsBehind {
        up_to_ns: up_to,
        waited_s: waited.as_secs_f64(),
    }))
}

fn summary(r: RequestRow) -> RequestSummary {
    RequestSummary {
        request_id: r.request_id,
        engine: r.engine,
        instance: r.instance,
        model: r.model,
        arrival_ns: r.arrival_ns,
        ttft_ms: r.ttft_ns.map(ms),
        tpot_ms: r.tpot_ns.map(ms),
        e2e_ms: ms(r.e2e_ns),
        queue_ms: r.queue_ns.map(ms),
        prompt_tokens: r.prompt_tokens,
        output_tokens: r.output_tokens,
        finish_reason: r.finish_reason,
        causes: r.causes,
        tenant: r.tenant,
        lora_adapter: r.lora_adapter,
    }
}

/// One request with where it ran, on one of `instances` (any when empty; several as the
/// waterfall joins them). An id found on several instances is one PD request when its parts are
/// a prefill and a decode part (joined), else ambiguous.
pub async fn load(store: &Store, request_id: &str, instances: &[String]) -> Result<Loaded> {
    let mut rows = store.load_request_rows(request_id, instances).await?;
    match rows.len() {
        0 => {
            let where_ = if instances.is_empty() {
                String::new()
            } else {
                format!(" on instance {:?}", instances.join(","))
            };
            Err(Error::NotFound(format!(
                "no request {request_id:?}{where_}"
            )))
        }
        1 => Ok(rows.remove(0)),
        _ => {
            let roles: Vec<Role> = rows.iter().map(|r| r.role).collect();
            let mut on: Vec<&str> = rows.iter().map(|r| r.instance.as_str()).collect();
            on.sort_unstable();
            let distinct = on.windows(2).all(|w| w[0] != w[1]);
            if !(distinct && pd::is_pd(&roles)) {
                return Err(Error::Ambiguous(format!(
                    "request id {request_id:?} exists on several instances ({}); add ?instance= to choose",
                    on.join(", ")
                )));
            }
            Ok(joined(rows))
        }
    }
}

/// A PD request's parts as one request, the parts kept beside it.
fn joined(mut parts: Vec<Loaded>) -> Loaded {
    parts.sort_by_key(|p| pd::part_order(p.role, &p.trace));
    // Onto one clock where a later part's instance provably runs behind.
    let behind = pd::clock_behind(&parts.iter().map(|p| &p.trace).collect::<Vec<_>>());
    let instances: Vec<&str> = parts.iter().map(|p| p.instance.as_str()).collect();
    let note = pd::clock_note(&behind, &instances);
    for (p, by) in parts.iter_mut().zip(behind) {
        p.trace.shift(by);
        p.clock_shift_ns = by;
    }
    let traces: Vec<&RequestTrace> = parts.iter().map(|p| &p.trace).collect();
    let trace = pd::join(&traces);
    let last = &parts[parts.len() - 1];
    Loaded {
        trace,
        instance_id: last.instance_id,
        instance: parts
            .iter()
            .map(|p| p.instance.as_str())
            .collect::<Vec<_>>()
            .join(","),
        engine: last.engine,
        role: last.role,
        model: last.model.clone(),
        parts,
        notes: note.into_iter().collect(),
        clock_shift_ns: 0,
    }
}

/// The request's bars; a PD request's from its parts.
pub fn stages_of(l: &Loaded) -> Vec<Stage> {
    if l.parts.is_empty() {
        return stages::stages(&l.trace);
    }
    let traces: Vec<&RequestTrace> = l.parts.iter().map(|p| &p.trace).collect();
    pd::joined_stages(&traces, &l.trace)
}

/// A PD request's parts as the API lists them.
pub fn part_summaries(l: &Loaded) -> Vec<RequestPart> {
    l.parts
        .iter()
        .map(|p| {
            let m = request_metrics(&p.trace);
            RequestPart {
                instance: p.instance.clone(),
                role: p.role,
                engine: p.engine,
                arrival_ns: p.trace.arrival_ns,
                finished_ns: p.trace.finished_ns,
                ttft_ms: m.ttft_ns.map(ms),
                queue_ms: m.queue_ns.map(ms),
                prompt_tokens: p.trace.prompt_tokens,
                output_tokens: p.trace.output_tokens,
            }
        })
        .collect()
}

/// A request and the load of its instance's steps over its lifetime: what its page is made of.
pub async fn load_with_steps(
    store: &Store,
    request_id: &str,
    instances: &[String],
) -> Result<(Loaded, Vec<StepLoad>)> {
    let loaded = load(store, request_id, instances).await?;
    let loads = store.step_loads(loaded.instance_id, &loaded.trace).await?;
    Ok((loaded, loads))
}

/// `GET /api/v1/requests/{id}`: the request's page.
pub async fn get(
    store: &Store,
    request_id: &str,
    instances: &[String],
    th: &Thresholds,
) -> Result<RequestDetail> {
    let (loaded, loads) = load_with_steps(store, request_id, instances).await?;
    Ok(detail(loaded, &loads, th))
}

/// A request's page from the request and its steps' load: metrics, stages, token views. Pure, so
/// an incident rebuilds the same page from what it froze.
pub fn detail(loaded: Loaded, loads: &[StepLoad], th: &Thresholds) -> RequestDetail {
    let parts = part_summaries(&loaded);
    let stages = stages_of(&loaded);
    let Loaded {
        trace,
        instance,
        engine,
        role,
        model,
        notes,
        ..
    } = loaded;
    let m = request_metrics(&trace);
    RequestDetail {
        summary: RequestSummary {
            request_id: trace.request_id.clone(),
            engine,
            instance,
            model,
            arrival_ns: trace.arrival_ns,
            ttft_ms: m.ttft_ns.map(ms),
            tpot_ms: m.tpot_ns.map(ms),
            e2e_ms: ms(m.e2e_ns),
            queue_ms: m.queue_ns.map(ms),
            prompt_tokens: trace.prompt_tokens,
            output_tokens: trace.output_tokens,
            finish_reason: trace.finish_reason,
            causes: None,
            // The detail's `served` carries them (one key each in the JSON).
            tenant: None,
            lora_adapter: None,
        },
        role,
        trace_id: trace.trace_id.clone(),
        parent_span_id: trace.parent_span_id.clone(),
        finished_ns: trace.finished_ns,
        cached_tokens: trace.cached_tokens,
        sampling: trace.sampling.clone(),
        preemptions: trace.preemptions.len() as u32,
        served: trace.served.clone(),
        stages,
        tokens: token_views(&trace, loads, th),
        parts,
        notes,
    }
}

/// Every instance that has reported, by key.
pub async fn instances(store: &Store) -> Result<Vec<InstanceInfo>> {
    Ok(store
        .list_instances()
        .await?
        .into_iter()
        .map(|r| InstanceInfo {
            instance: r.instance,
            engine: r.engine,
            engine_version: r.engine_version,
            model: r.model,
            role: r.role,
            host: r.host,
            first_seen_ns: r.first_seen_ns,
            last_seen_ns: r.last_seen_ns,
        })
        .collect())
}

//! The request table: a page of requests in the chosen order, sortable by any column, each row
//! linking to its request page and to its moment in the waterfall.

use leptos::prelude::*;

use super::ExplorerData;
use super::state::{ExplorerQuery, PAGE_ROWS};
use crate::api::RequestSummary;
use crate::links::{request_href, waterfall_href};
use crate::ui::format::{about, duration_ms, thousands};
use crate::ui::time::{Zone, clock, date_time, span};

const COLUMNS: [(&str, &str, &str); 7] = [
    ("arrival", "Arrival", ""),
    ("ttft", "TTFT", "num"),
    ("tpot", "TPOT", "num"),
    ("e2e", "E2E", "num"),
    ("queue", "Queue", "num"),
    ("prompt", "Prompt", "num"),
    ("output", "Output", "num"),
];

#[component]
pub fn Requests(data: ExplorerData, query: ExplorerQuery) -> impl IntoView {
    let zone = use_context::<RwSignal<Zone>>().unwrap_or_default();
    let (series, list) = (data.series, data.list);
    let total = list.total.unwrap_or(list.requests.len() as u64);
    // The findings worker is behind: say up to when causes are known, not just leave cells empty.
    let behind = list.findings_behind.clone().map(|b| {
        let waited = span((b.waited_s * 1e9) as i64);
        view! {
            <p class="behind" data-testid="findings-behind">
                "Findings up to " <b>{move || date_time(b.up_to_ns, &zone.get())}</b>
                {format!(": requests after it are still being diagnosed (the oldest new data has waited {waited}).")}
            </p>
        }
    });
    let first = u64::from(query.page * PAGE_ROWS);
    let (ttft_slo, tpot_slo) = (series.ttft_slo_ms, series.tpot_slo_ms);
    let window = (series.from_ns, series.to_ns);
    let header = COLUMNS
        .iter()
        .map(|&(key, label, class)| {
            let arrow = if query.order == format!("{key}_desc") {
                " ▼"
            } else if query.order == format!("{key}_asc") {
                " ▲"
            } else {
                ""
            };
            let href = query.sorted_by(key).href();
            view! { <th class=class><a href=href data-sort=key>{label}{arrow}</a></th> }
        })
        .collect_view();
    let pager = {
        let prev = (query.page > 0).then(|| query.with(|q| q.page = query.page - 1).href());
        let next = (first + u64::from(PAGE_ROWS) < total).then(|| {
            let mut q = query.clone();
            q.page += 1;
            q.href()
        });
        let shown = if total == 0 {
            "no requests".to_string()
        } else {
            format!(
                "{}–{} of {} requests",
                thousands(first + 1),
                thousands((first + u64::from(PAGE_ROWS)).min(total)),
                // Past what counting affords the database estimates; say so.
                if list.total_estimated {
                    about(total)
                } else {
                    thousands(total)
                }
            )
        };
        view! {
            <span class="pager" data-testid="pager">
                {prev.map(|h| view! { <a href=h>"‹ previous"</a> })}
                <span>{shown}</span>
                {next.map(|h| view! { <a href=h>"next ›"</a> })}
            </span>
        }
    };
    let found_one =
        (!query.find.is_empty() && list.requests.len() == 1).then(|| list.requests[0].clone());
    #[cfg(feature = "hydrate")]
    if let Some(r) = &found_one {
        // A pasted id lands on its request: the find is replaced in history, so Back returns
        // to where the user was, not to a page that jumps again.
        let href = waterfall_href(&r.instance, &r.request_id, r.arrival_ns, r.e2e_ms);
        let navigate = leptos_router::hooks::use_navigate();
        request_animation_frame(move || {
            navigate(
                &href,
                leptos_router::NavigateOptions {
                    replace: true,
                    ..Default::default()
                },
            )
        });
    }
    let empty = list.requests.is_empty().then(|| {
        let what = if query.find.is_empty() {
            format!(
                "No requests between {} and {} ({}) with these filters. Widen the range, clear a filter, or check that the engine's --otlp-traces-endpoint points at this server.",
                date_time(window.0, &zone.get_untracked()),
                date_time(window.1, &zone.get_untracked()),
                zone.get_untracked().label()
            )
        } else {
            format!(
                "No request or trace has the id {:?}. Request ids are matched exactly; trace ids are 32 hex digits.",
                query.find
            )
        };
        view! { <p class="empty" data-testid="no-requests">{what}</p> }
    });
    let rows = list
        .requests
        .into_iter()
        .map(|r| row(r, ttft_slo, tpot_slo, zone, &query))
        .collect_view();
    view! {
        <section class="panel" data-testid="request-table">
            <div class="table-head">
                <h2>{if query.find.is_empty() { "Requests".to_string() } else { format!("Requests matching {:?}", query.find) }}</h2>
                <span class="muted">{format!("{} window", span(window.1 - window.0))}</span>
                {pager}
            </div>
            {behind}
            {found_one.map(|r| view! {
                <p class="found">"Found " <b>{r.request_id.clone()}</b> " on " {r.instance.clone()} ": "
                    <a href=waterfall_href(&r.instance, &r.request_id, r.arrival_ns, r.e2e_ms)>"open its waterfall"</a></p>
            })}
            {empty}
            <table class="grid requests" data-testid="requests">
                <thead><tr>
                    <th>"Request"</th><th>"Instance"</th><th>"Tenant"</th>{header}<th>"Finish"</th><th>"SLO · cause"</th>
                </tr></thead>
                <tbody>{rows}</tbody>
            </table>
        </section>
    }
}

/// The cause beside the SLO verdict: the stored findings' first (most severe) cause, linking to
/// the requests with that cause; "…" while the findings are being worked out.
fn cause_cell(causes: Option<Vec<String>>, query: &ExplorerQuery) -> AnyView {
    match causes {
        None => view! {
            <span class="muted" title="New data around this request: its findings are being worked out">"…"</span>
        }
        .into_any(),
        // Healthy: the verdict beside it says all.
        Some(list) if list.is_empty() => ().into_any(),
        Some(list) => {
            let first = list[0].clone();
            let href = query.with(|q| q.cause = first.clone()).href();
            // A no-break space: "+1" never goes to a line of its own.
            let more = (list.len() > 1).then(|| format!("\u{a0}+{}", list.len() - 1));
            view! {
                <a class="cause" href=href title=list.join(", ") data-testid="cause">{first.replace('_', " ")}</a>
                {more.map(|m| view! { <span class="muted">{m}</span> })}
            }
            .into_any()
        }
    }
}

/// The tenant cell: the tenant, linking to its requests, and the LoRA adapter under it.
fn slice_cell(
    tenant: Option<String>,
    adapter: Option<String>,
    query: &ExplorerQuery,
) -> impl IntoView + use<> {
    let tenant = match tenant {
        Some(t) => {
            let href = query.with(|q| q.tenant = t.clone()).href();
            view! { <a href=href title="Only this tenant's requests">{t}</a> }.into_any()
        }
        None => view! { <span class="muted">"–"</span> }.into_any(),
    };
    let adapter = adapter.map(|a| {
        let href = query.with(|q| q.adapter = a.clone()).href();
        view! { <a class="adapter muted" href=href title="Only this LoRA adapter's requests">{a}</a> }
    });
    view! { {tenant}{adapter} }
}

fn row(
    r: RequestSummary,
    ttft_slo: f64,
    tpot_slo: f64,
    zone: RwSignal<Zone>,
    query: &ExplorerQuery,
) -> impl IntoView + use<> {
    let ms = |v: Option<f64>| v.map(duration_ms).unwrap_or_else(|| "–".into());
    let ttft_bad = r.ttft_ms.is_some_and(|v| v > ttft_slo);
    let tpot_bad = r.tpot_ms.is_some_and(|v| v > tpot_slo);
    let verdict = match (ttft_bad, tpot_bad) {
        (true, true) => "TTFT+TPOT",
        (true, false) => "TTFT",
        (false, true) => "TPOT",
        (false, false) => "met",
    };
    let wf = waterfall_href(&r.instance, &r.request_id, r.arrival_ns, r.e2e_ms);
    let req = request_href(&r.instance, &r.request_id);
    let arrival = r.arrival_ns;
    let cause = cause_cell(r.causes, query);
    let tenant = slice_cell(r.tenant, r.lora_adapter, query);
    view! {
        <tr data-request=r.request_id.clone()>
            <td class="id"><a href=req.clone() title=format!("{}: open the request page", r.request_id)>{r.request_id.clone()}</a></td>
            <td class="text">{r.instance.clone()}</td>
            <td class="text tenant" data-testid="tenant-cell">{tenant}</td>
            // The arrival is the request's moment: it opens the waterfall there.
            <td class="time"><a href=wf data-testid="waterfall-link" title="Show this request's moment in the waterfall">{move || clock(arrival, &zone.get(), 1_000_000)}</a></td>
            <td class="num" class:bad=ttft_bad>{ms(r.ttft_ms)}</td>
            <td class="num" class:bad=tpot_bad>{ms(r.tpot_ms)}</td>
            <td class="num">{duration_ms(r.e2e_ms)}</td>
            <td class="num">{ms(r.queue_ms)}</td>
            <td class="num">{thousands(r.prompt_tokens.into())}</td>
            <td class="num">{thousands(r.output_tokens.into())}</td>
            <td>{r.finish_reason.as_str()}</td>
            <td class="verdict-cause">
                <span class="verdict" class:bad=verdict != "met">{if verdict == "met" { "met".to_string() } else { format!("{verdict} ▲") }}</span>
                " " {cause}
            </td>
        </tr>
    }
}

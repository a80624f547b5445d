//! Compare (`/compare`): two sets of requests — two windows of one instance, or two instances,
//! models or engines — with the answer to "what changed" in the first line, then overlaid
//! percentile charts, a delta table, overlaid histograms, the diagnosis causes, the tenants'
//! GPU time and the answers' word choice on each side.

mod answers;
mod form;
mod usage;
mod words;

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use super::chart::{LatencyChart, Metric};
use super::fetch::get_json;
use super::format::{duration_ms, thousands};
use super::time::{Zone, date_time};
use crate::api::{CompareSide, Comparison, Delta, HistogramBin};
use crate::query::build;

/// The parameters a comparison is made of, as they stand in the page's URL and the API's.
pub const KEYS: [&str; 18] = [
    "a_instance",
    "a_engine",
    "a_engine_version",
    "a_model",
    "a_tenant",
    "a_adapter",
    "a_fingerprint",
    "a_from",
    "a_to",
    "b_instance",
    "b_engine",
    "b_engine_version",
    "b_model",
    "b_tenant",
    "b_adapter",
    "b_fingerprint",
    "b_from",
    "b_to",
];

/// One-click comparisons: the latest stretch of time against the one before it.
const QUICK: [(&str, &str); 4] = [
    ("600", "last 10 min vs the 10 before"),
    ("3600", "last hour vs the hour before"),
    ("21600", "last 6 h vs the 6 before"),
    ("86400", "last day vs the day before"),
];

#[component]
pub fn Compare() -> impl IntoView {
    let params = use_query_map();
    let pairs = Memo::new(move |_| {
        let p = params.get();
        KEYS.iter()
            .chain(&["span_s"])
            .map(|&k| (k, p.get(k).unwrap_or_default()))
            .collect::<Vec<_>>()
    });
    let data = Resource::new(
        move || pairs.get(),
        |mut pairs| {
            pairs.push(("width_px", "280".into()));
            get_json::<Comparison>(format!("/api/v1/compare{}", build(&pairs)))
        },
    );
    view! {
        <Suspense fallback=|| view! { <section class="panel skeleton-block" aria-busy="true"><div class="bar"></div><div class="row"></div></section> }>
            {move || data.get().map(|r| match r {
                Err(e) => view! { <section class="panel"><form::SideForm current=None/><p class="error" data-testid="compare-error">"Could not compare: " {e}</p></section> }.into_any(),
                Ok(c) => view! { <Report c=c/> }.into_any(),
            })}
        </Suspense>
    }
}

/// Links to the common comparisons, keeping the instance, engine and model filters of B.
#[component]
fn QuickPicks() -> impl IntoView {
    let params = use_query_map();
    move || {
        let p = params.get();
        // Both sides get B's filters: the same population, two stretches of time.
        let keep: Vec<(&str, String)> = [
            ("a_instance", "b_instance"),
            ("a_engine", "b_engine"),
            ("a_engine_version", "b_engine_version"),
            ("a_model", "b_model"),
        ]
        .into_iter()
        .flat_map(|(a, b)| {
            let v = p.get(b).unwrap_or_default();
            [(a, v.clone()), (b, v)]
        })
        .collect();
        let current = p.get("span_s").unwrap_or_default();
        let links = QUICK
            .iter()
            .map(|&(span, label)| {
                let mut q = keep.clone();
                q.push(("span_s", span.into()));
                let on = current == span;
                view! { <a class="chip" class:on=on href=format!("/compare{}", build(&q))>{label}</a> }
            })
            .collect_view();
        view! { <div class="chips quick" data-testid="quick-picks"><span class="field-label">"Quick"</span>{links}</div> }
    }
}

/// The explorer over one side: its filters and window.
fn side_query(s: &CompareSide) -> super::explorer::state::ExplorerQuery {
    super::explorer::state::ExplorerQuery {
        instance: s.instances.join(","),
        engine: s.engine.clone().unwrap_or_default(),
        version: s.engine_version.clone().unwrap_or_default(),
        model: s.model.clone().unwrap_or_default(),
        tenant: s.tenant.clone().unwrap_or_default(),
        adapter: s.lora_adapter.clone().unwrap_or_default(),
        priority: s.priority.map(|p| p.to_string()).unwrap_or_default(),
        fingerprint: s.fingerprint.clone().unwrap_or_default(),
        from: Some(s.from_ns),
        to: Some(s.to_ns),
        ..super::explorer::state::ExplorerQuery::from_lookup(|_| None)
    }
}

/// One side's links into the explorer: what its slow requests have in common, and its prompts
/// grouped by family (the families panel over that side's window and filters).
fn side_links(s: &CompareSide, side: &'static str) -> impl IntoView + use<> {
    let q = side_query(s);
    let slow = q.with(|q| q.common = true).href();
    let families = q.with(|q| q.families = true).href();
    view! {
        " "<a class="hint" href=slow data-testid=format!("{side}-slow-set")>"what its slow requests have in common"</a>
        " · "<a class="hint" href=families data-testid=format!("{side}-families")>"its prompt families"</a>
    }
}

fn side_name(s: &CompareSide, zone: &Zone) -> String {
    let who = [
        (!s.instances.is_empty()).then(|| s.instances.join(", ")),
        s.model.clone(),
        s.engine.clone(),
        s.engine_version.clone(),
        s.tenant.as_ref().map(|t| format!("tenant {t}")),
        s.lora_adapter.as_ref().map(|a| format!("adapter {a}")),
        s.fingerprint.as_ref().map(|f| format!("prompt family {f}")),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>();
    let who = if who.is_empty() {
        "all instances".to_string()
    } else {
        who.join(" · ")
    };
    format!(
        "{who} · {} – {} · {} requests",
        date_time(s.from_ns, zone),
        date_time(s.to_ns, zone),
        thousands(s.requests)
    )
}

#[component]
fn Report(c: Comparison) -> impl IntoView {
    let zone = use_context::<RwSignal<Zone>>().unwrap_or_default();
    let (a, b) = (c.a.clone(), c.b.clone());
    let (a2, b2) = (c.a.clone(), c.b.clone());
    let deltas = delta_table(&c.deltas);
    let causes = causes(&c.a, &c.b);
    let usage = usage::table(&c.a, &c.b);
    let words = words::table(&c.a, &c.b);
    let ttft_hist = histogram(&c.a.ttft_histogram, &c.b.ttft_histogram);
    let tpot_hist = histogram(&c.a.tpot_histogram, &c.b.tpot_histogram);
    view! {
        <section class="panel compare-head">
            <p class="headline" data-testid="headline">{c.headline.clone()}</p>
            <p class="side a"><b>"A"</b>" " {move || side_name(&a, &zone.get())}
                {side_links(&c.a, "a")}</p>
            <p class="side b"><b>"B"</b>" " {move || side_name(&b, &zone.get())}
                <span class="muted">{move || format!(" ({})", zone.get().label())}</span>
                {side_links(&c.b, "b")}</p>
            <form::SideForm current=Some((a2.clone(), b2.clone()))/>
            <QuickPicks/>
        </section>
        <section class="panel charts">
            <div class="chart-head"><h2>"Percentiles over time"</h2>
                <span class="legend"><i class="l-p90"></i>"A p50/p90/p99" <i class="l-b"></i>"B p90/p99 (dashed, aligned by offset from its start)"</span></div>
            <div class="chart-pair">
                <figure><figcaption>"Time to first token"</figcaption>
                    <LatencyChart series=c.a.series.clone() metric=Metric::Ttft overlay=c.b.series.clone()/></figure>
                <figure><figcaption>"Time per output token"</figcaption>
                    <LatencyChart series=c.a.series.clone() metric=Metric::Tpot overlay=c.b.series.clone()/></figure>
            </div>
        </section>
        <div class="compare-grid">
            <section class="panel"><h2>"Percentiles, B against A"</h2>{deltas}</section>
            <section class="panel"><h2>"Diagnosed causes"</h2>{causes}</section>
            <section class="panel"><h2>"GPU time by tenant"</h2>{usage}</section>
            <section class="panel"><h2>"Word choice"</h2>{words}</section>
        </div>
        {c.answers.clone().map(|d| view! { <answers::SamePrompt d=d/> })}
        <section class="panel">
            <h2>"Latency distribution per request"</h2>
            <div class="chart-pair">
                <figure><figcaption>"TTFT"</figcaption>{ttft_hist}</figure>
                <figure><figcaption>"TPOT (mean time per token of each request)"</figcaption>{tpot_hist}</figure>
            </div>
        </section>
    }
}

fn delta_table(deltas: &[Delta]) -> impl IntoView + use<> {
    let rows = deltas
        .iter()
        .map(|d| {
            let worse = d.delta_ms > 0.0 && d.delta_pct.is_some_and(|p| p >= 5.0);
            let better = d.delta_ms < 0.0 && d.delta_pct.is_some_and(|p| p <= -5.0);
            let sign = if d.delta_ms >= 0.0 { "+" } else { "−" };
            let arrow = if worse { " ▲" } else if better { " ▼" } else { "" };
            view! {
                <tr data-metric=format!("{}_{}", d.metric, d.percentile)>
                    <td>{format!("{} {}", d.metric.to_uppercase(), d.percentile)}</td>
                    <td class="num">{duration_ms(d.a_ms)}</td>
                    <td class="num">{duration_ms(d.b_ms)}</td>
                    <td class="num" class:bad=worse class:good=better>{format!("{sign}{}{arrow}", duration_ms(d.delta_ms.abs()))}</td>
                    <td class="num" class:bad=worse class:good=better>{d.delta_pct.map(|p| format!("{}{:.0} %", sign, p.abs())).unwrap_or_else(|| "–".into())}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <table class="grid" data-testid="deltas">
            <thead><tr><th>"Metric"</th><th class="num">"A"</th><th class="num">"B"</th><th class="num">"Δ"</th><th class="num">"Δ %"</th></tr></thead>
            <tbody>{rows}</tbody>
        </table>
    }
}

fn causes(a: &CompareSide, b: &CompareSide) -> impl IntoView + use<> {
    let mut all: Vec<_> = a.causes.iter().chain(&b.causes).map(|c| c.cause).collect();
    all.sort();
    all.dedup();
    let rows = all
        .into_iter()
        .map(|cause| {
            let (ca, cb) = (
                a.causes.iter().find(|c| c.cause == cause),
                b.causes.iter().find(|c| c.cause == cause),
            );
            let n = |c: Option<&crate::api::CauseCount>| c.map_or(0, |c| c.requests);
            let name = cause.name();
            let examples = |c: Option<&crate::api::CauseCount>, s: &CompareSide| {
                let inst = s.instances.first().cloned().unwrap_or_default();
                c.map(|c| {
                    c.examples
                        .iter()
                        .map(|id| view! { <a href=crate::links::request_href(&inst, id)>{id.clone()}</a>" " })
                        .collect_view()
                })
            };
            let grew = n(cb) > n(ca);
            view! {
                <tr data-cause=name>
                    <td>{name.replace('_', " ")}</td>
                    <td class="num">{n(ca)}</td>
                    <td class="num" class:bad=grew>{n(cb)}</td>
                    <td class="examples">{examples(cb.or(ca), if cb.is_some() { b } else { a })}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <table class="grid" data-testid="causes">
            <thead><tr><th>"Cause"</th><th class="num">"A"</th><th class="num">"B"</th><th>"worst examples"</th></tr></thead>
            <tbody>{rows}</tbody>
        </table>
        <p class="muted">{if a.diagnosed == a.requests && b.diagnosed == b.requests {
            format!("Causes of all {} requests of A and {} of B, from their stored findings.", thousands(a.requests), thousands(b.requests))
        } else {
            format!("Diagnosed: the first {} requests of A and {} of B.", thousands(a.diagnosed), thousands(b.diagnosed))
        }}</p>
    }
}

/// Two histograms on shared bins: A as filled bars, B as an outline, each normalised to its own
/// request count so sides of different sizes compare.
fn histogram(a: &[HistogramBin], b: &[HistogramBin]) -> impl IntoView + use<> {
    const W: f64 = 560.0;
    const H: f64 = 140.0;
    let (lo, hi) = a.iter().chain(b).fold((f64::MAX, 0f64), |(lo, hi), x| {
        (lo.min(x.lo_ms), hi.max(x.hi_ms))
    });
    if hi <= 0.0 {
        return view! { <p class="empty">"No latencies on either side."</p> }.into_any();
    }
    let (llo, lhi) = (lo.log2(), hi.log2().max(lo.log2() + 1.0));
    let x = move |v: f64| 10.0 + (v.log2() - llo) / (lhi - llo) * (W - 20.0);
    let share = |bins: &[HistogramBin]| {
        let n: u32 = bins.iter().map(|b| b.requests).sum();
        bins.iter()
            .map(move |b| {
                (
                    b.lo_ms,
                    b.hi_ms,
                    f64::from(b.requests) / f64::from(n.max(1)),
                )
            })
            .collect::<Vec<_>>()
    };
    let (sa, sb) = (share(a), share(b));
    let top = sa.iter().chain(&sb).map(|s| s.2).fold(0.01, f64::max);
    let y = move |s: f64| (H - 20.0) * (1.0 - s / top);
    let bars_a = sa
        .iter()
        .map(|&(l, h, s)| view! { <rect class="hist-a" x=x(l) y=y(s) width=(x(h) - x(l) - 1.0).max(1.0) height=H - 20.0 - y(s)><title>{format!("A: {:.1} % of requests in {}–{}", s * 100.0, duration_ms(l), duration_ms(h))}</title></rect> })
        .collect_view();
    let bars_b = sb
        .iter()
        .map(|&(l, h, s)| view! { <rect class="hist-b" x=x(l) y=y(s) width=(x(h) - x(l) - 1.0).max(1.0) height=H - 20.0 - y(s)><title>{format!("B: {:.1} % of requests in {}–{}", s * 100.0, duration_ms(l), duration_ms(h))}</title></rect> })
        .collect_view();
    let labels = (0..=4)
        .map(|i| {
            let v = 2f64.powf(llo + (lhi - llo) * f64::from(i) / 4.0);
            view! { <text x=x(v) y=H - 6.0 text-anchor="middle">{duration_ms(v)}</text> }
        })
        .collect_view();
    view! {
        <svg class="chart" viewBox=format!("0 0 {W} {H}") role="img" aria-label="latency histogram, A filled and B outlined">
            <g class="axis">{labels}</g>{bars_a}{bars_b}
        </svg>
    }
    .into_any()
}

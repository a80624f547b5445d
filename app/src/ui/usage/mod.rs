//! GPU time (`/usage`): who used the engines over a window — each step's time split across its
//! batch by the tokens each request computed — by tenant, LoRA adapter or model. The first line
//! says who used most; then stacked bars over time, and the table (each group one click from its
//! requests in the explorer, the chart's data as CSV).

mod chart;

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use super::fetch::get_json;
use super::format::{gpu_time, thousands};
use super::time::{Zone, date_time};
use crate::api::{Usage, UsageGroup};
use crate::model::Nanos;
use crate::query::build;
use chart::{StackedChart, colour};

/// The page's URL parameters, as the API takes them.
const KEYS: [&str; 7] = ["by", "instance", "model", "tenant", "adapter", "from", "to"];

/// Windows offered, ending where the shown one ends.
const SPANS: [(Nanos, &str); 4] = [
    (3_600_000_000_000, "1 h"),
    (6 * 3_600_000_000_000, "6 h"),
    (24 * 3_600_000_000_000, "24 h"),
    (7 * 24 * 3_600_000_000_000, "7 d"),
];

/// A group's name as the page shows it (`by`: tenant, adapter or model).
pub(crate) fn label(g: &UsageGroup, by: &str) -> String {
    match (&g.key, g.unstored) {
        (_, true) => "requests not stored yet".into(),
        (Some(k), _) => k.clone(),
        (None, _) => match by {
            "tenant" => "no tenant".into(),
            "adapter" => "base model (no adapter)".into(),
            _ => "unknown model".into(),
        },
    }
}

fn pct(x: f64) -> String {
    format!("{:.0} %", x * 100.0)
}

#[component]
pub fn UsagePage() -> impl IntoView {
    let params = use_query_map();
    let pairs = Memo::new(move |_| {
        let p = params.get();
        KEYS.iter()
            .map(|&k| (k, p.get(k).unwrap_or_default()))
            .collect::<Vec<_>>()
    });
    let data = Resource::new(
        move || pairs.get(),
        |mut pairs| {
            pairs.push(("width_px", "1160".into()));
            get_json::<Usage>(format!("/api/v1/usage{}", build(&pairs)))
        },
    );
    view! {
        <Suspense fallback=|| view! { <section class="panel skeleton-block" aria-busy="true"><div class="bar"></div><div class="row"></div></section> }>
            {move || data.get().map(|r| match r {
                Err(e) => view! { <p class="panel error" data-testid="usage-error">"Could not load GPU time: " {e}</p> }.into_any(),
                Ok(u) => view! { <Report u=u pairs=pairs.get_untracked()/> }.into_any(),
            })}
        </Suspense>
    }
}

/// The first line: who used most of the window's GPU time.
fn answer(u: &Usage, labels: &[String], zone: &Zone) -> String {
    let when = format!(
        "{} – {}",
        date_time(u.from_ns, zone),
        date_time(u.to_ns, zone)
    );
    let Some(first) = u.groups.first() else {
        return format!("No GPU time was recorded {when}.");
    };
    let rest: Vec<String> = u
        .groups
        .iter()
        .zip(labels)
        .skip(1)
        .take(3)
        .map(|(g, l)| format!("{l} {}", pct(g.share)))
        .collect();
    let mut s = format!(
        "{} used {} of {} of GPU time, {when}",
        labels[0],
        pct(first.share),
        gpu_time(u.busy_s)
    );
    if !rest.is_empty() {
        s.push_str("; ");
        s.push_str(&rest.join(", "));
    }
    s.push('.');
    s
}

#[component]
fn Report(u: Usage, pairs: Vec<(&'static str, String)>) -> impl IntoView {
    let zone = use_context::<RwSignal<Zone>>().unwrap_or_default();
    let by = u.by.clone();
    let labels: Vec<String> = u.groups.iter().map(|g| label(g, &by)).collect();
    let get = |k: &str| {
        pairs
            .iter()
            .find(|(p, _)| *p == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    // A link to this view with some parameters changed.
    let with = |changes: &[(&'static str, String)]| {
        let mut q = pairs.clone();
        for (k, v) in changes {
            match q.iter_mut().find(|(p, _)| p == k) {
                Some(p) => p.1 = v.clone(),
                None => q.push((k, v.clone())),
            }
        }
        format!("/usage{}", build(&q))
    };
    let by_chips = ["tenant", "adapter", "model"]
        .into_iter()
        .map(|b| {
            let on = by == b;
            view! { <a class="chip" class:on=on href=with(&[("by", b.into())])>{b}</a> }
        })
        .collect_view();
    let span_now = u.to_ns - u.from_ns;
    let span_chips = SPANS
        .iter()
        .map(|&(span, name)| {
            let href = with(&[
                ("from", (u.to_ns - span).to_string()),
                ("to", u.to_ns.to_string()),
            ]);
            view! { <a class="chip" class:on=span_now == span href=href>{name}</a> }
        })
        .collect_view();
    let estimated = (u.estimated_s > 0.0).then(|| {
        view! {
            <p class="note" data-testid="usage-estimated">
                {format!("{} ({}) of this is estimated from request intervals: those instances sent spans but no engine steps, so their time is shared equally among the requests in service.",
                    gpu_time(u.estimated_s), pct(u.estimated_s / u.busy_s.max(1e-9)))}
            </p>
        }
    });
    let csv = {
        let mut q = pairs.clone();
        q.push(("format", "csv".into()));
        format!("/api/v1/usage{}", build(&q))
    };
    let head = answer(&u, &labels, &zone.get_untracked());
    let window = (u.from_ns, u.to_ns);
    let rows = u
        .groups
        .iter()
        .zip(&labels)
        .enumerate()
        .map(|(k, (g, l))| {
            // The group's requests in the explorer: same window, its slice.
            let explore = (!g.unstored).then(|| {
                let mut q = vec![
                    ("instance", get("instance")),
                    ("model", get("model")),
                    ("tenant", get("tenant")),
                    ("adapter", get("adapter")),
                    ("from", window.0.to_string()),
                    ("to", window.1.to_string()),
                ];
                let key = match by.as_str() {
                    "tenant" => "tenant",
                    "adapter" => "adapter",
                    _ => "model",
                };
                if let (Some(v), Some(slot)) = (&g.key, q.iter_mut().find(|(p, _)| *p == key)) {
                    slot.1 = v.clone();
                }
                format!("/{}", build(&q))
            });
            let name = match explore {
                Some(href) => view! { <a href=href>{l.clone()}</a> }.into_any(),
                None => view! { <span class="muted">{l.clone()}</span> }.into_any(),
            };
            let width = format!("width: {:.1}%", g.share * 100.0);
            let est = (g.estimated_s > 0.0).then(|| format!("{} estimated", gpu_time(g.estimated_s)));
            view! {
                <tr data-testid="usage-row">
                    <td><i class="swatch" style=format!("background: {}", colour(k))></i>{name}</td>
                    <td class="num">{gpu_time(g.gpu_s)}</td>
                    <td class="share"><span class="share-bar"><span style=width></span></span>{pct(g.share)}</td>
                    <td class="num">{thousands(g.prefill_tokens)}</td>
                    <td class="num">{thousands(g.decode_tokens)}</td>
                    <td class="muted">{est}</td>
                </tr>
            }
        })
        .collect_view();
    let chart = (!u.groups.is_empty()).then(|| {
        let (u, labels) = (u.clone(), labels.clone());
        view! { <section class="panel"><StackedChart u=u labels=labels/></section> }
    });
    view! {
        <section class="panel usage-head">
            <h1>{format!("GPU time by {by}")}</h1>
            <p class="headline" data-testid="usage-answer">{head}</p>
            <div class="chips"><span class="field-label">"By"</span>{by_chips}
                <span class="field-label">"Window"</span>{span_chips}</div>
            <form class="usage-filters" method="get" action="/usage">
                <input type="hidden" name="by" value=by.clone()/>
                <input type="hidden" name="from" value=get("from")/>
                <input type="hidden" name="to" value=get("to")/>
                <label>"Instance " <input name="instance" value=get("instance") placeholder="all"/></label>
                <label>"Model " <input name="model" value=get("model") placeholder="all"/></label>
                <label>"Tenant " <input name="tenant" value=get("tenant") placeholder="all"/></label>
                <label>"Adapter " <input name="adapter" value=get("adapter") placeholder="all"/></label>
                <button type="submit">"Apply"</button>
            </form>
            {estimated}
        </section>
        {chart}
        <section class="panel">
            <table class="grid usage-table" data-testid="usage-table">
                <thead><tr>
                    <th>{by.clone()}</th><th class="num">"GPU time"</th><th>"Share"</th>
                    <th class="num">"Prefill tokens"</th><th class="num">"Decode tokens"</th><th></th>
                </tr></thead>
                <tbody>{rows}</tbody>
            </table>
            <p class="note">
                <a href=csv download="" data-testid="usage-csv">"Download CSV"</a>
                " · Each engine step's time is split across its batch by the tokens each request computed in it (its prefill chunk, or its decoded token and verified drafts); steps that overlap count once, so the groups add up to the instances' busy time."
            </p>
        </section>
    }
}

//! The explorer (`/`): filters and range, TTFT/TPOT percentiles over time (drag across to narrow,
//! along the latency axis to pick the slow set), and what the window's slow requests have in
//! common (when asked), and the request table, slowest first, each row linking to its waterfall
//! moment.

mod common;
mod families;
mod filters;
pub mod state;
mod table;

use leptos::prelude::*;
use leptos_router::hooks::{use_navigate, use_query_map};

use super::chart::{Band, LatencyChart, Metric};
use super::fetch::get_json;
use super::live::{Badge, Link};
use super::time::now_ns;
use crate::api::{Fingerprints, InstanceList, LatencySeries, RequestList, SlowSet};
use crate::query::{build, opt};
use state::{ExplorerQuery, PAGE_ROWS};

/// What one URL of the explorer shows: the series (which also settles the window) and a page.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ExplorerData {
    pub series: LatencySeries,
    pub list: RequestList,
    /// What the slow requests have in common, when the panel is open.
    pub slow_set: Option<SlowSet>,
    /// The window's prompt families, when their panel is open.
    pub families: Option<Fingerprints>,
}

async fn load(q: ExplorerQuery) -> Result<ExplorerData, String> {
    let (from, to) = q.window(now_ns());
    let mut params = q.filters();
    params.extend([
        ("from", opt(from)),
        ("to", opt(to)),
        ("width_px", "280".into()),
    ]);
    let series: LatencySeries = get_json(format!("/api/v1/latency{}", build(&params))).await?;
    let mut params = q.filters();
    // A find looks at all time: the id is what the user has, not when it ran.
    if q.find.is_empty() {
        params.extend([
            ("from", series.from_ns.to_string()),
            ("to", series.to_ns.to_string()),
        ]);
    }
    params.extend([
        ("find", q.find.clone()),
        ("slo", q.slo.clone()),
        ("cause", q.cause.clone()),
        ("order", q.order.clone()),
        ("limit", PAGE_ROWS.to_string()),
        ("offset", (q.page * PAGE_ROWS).to_string()),
    ]);
    let list = get_json(format!("/api/v1/requests{}", build(&params))).await?;
    let slow_set = if q.common {
        let mut params = q.filters();
        params.extend([
            ("from", series.from_ns.to_string()),
            ("to", series.to_ns.to_string()),
        ]);
        if !q.slow.is_empty() {
            params.extend([
                ("slow", q.slow.clone()),
                // A range open below starts at nothing.
                (
                    "min_ms",
                    if q.slow_min.is_empty() {
                        "0".into()
                    } else {
                        q.slow_min.clone()
                    },
                ),
                ("max_ms", q.slow_max.clone()),
            ]);
        }
        Some(get_json(format!("/api/v1/slow-set{}", build(&params))).await?)
    } else {
        None
    };
    let families = if q.families {
        let mut params = q.filters();
        params.extend([
            ("from", series.from_ns.to_string()),
            ("to", series.to_ns.to_string()),
        ]);
        Some(get_json(format!("/api/v1/fingerprints{}", build(&params))).await?)
    } else {
        None
    };
    Ok(ExplorerData {
        series,
        list,
        slow_set,
        families,
    })
}

#[component]
pub fn Explorer() -> impl IntoView {
    let params = use_query_map();
    let query = Memo::new(move |_| ExplorerQuery::from_params(&params.get()));
    let instances = Resource::new(
        || (),
        |_| get_json::<InstanceList>("/api/v1/instances".into()),
    );
    let data = Resource::new(move || query.get(), load);
    let navigate = use_navigate();
    let go = Callback::new(move |q: ExplorerQuery| navigate(&q.href(), Default::default()));
    let link = follow_new_data(query, data);
    let pending = RwSignal::new(false);
    // Only the browser marks the view busy. On the server, Transition's effect would write
    // `pending` from another thread while the render reads it for the attributes below, and
    // a read that meets the write lock fails (reactive_graph reports it as "disposed").
    let set_pending = SignalSetter::map(move |busy| {
        if cfg!(feature = "hydrate") {
            pending.set(busy)
        }
    });
    let narrow = Callback::new(move |(from, to)| {
        go.run(query.get_untracked().with(|q| {
            q.range.clear();
            q.from = Some(from);
            q.to = Some(to);
        }))
    });
    // A band dragged along a latency axis is the slow set: open the panel on it.
    let pick = Callback::new(move |b: Band| {
        go.run(query.get_untracked().with(|q| {
            q.common = true;
            q.slow = b.metric.key().into();
            q.slow_min = b.min_ms.to_string();
            q.slow_max = b.max_ms.map(|v| v.to_string()).unwrap_or_default();
        }))
    });
    view! {
        <Suspense fallback=|| view! { <div class="panel skeleton filters-skeleton">"Loading filters…"</div> }>
            {move || instances.get().map(|r| match r {
                Ok(list) => view! { <filters::Filters instances=list.instances q=query.get() go=go/> }.into_any(),
                Err(e) => view! { <p class="panel error">"Could not load the instances: " {e} ". Is the server up? Try reloading."</p> }.into_any(),
            })}
        </Suspense>
        // A transition: while the view reads again (new data, or a new filter), the last
        // picture stays, dimmed and marked busy until the new one arrives.
        <div class="explorer-data" class:stale=move || pending.get() aria-busy=move || pending.get().to_string()>
        <Transition fallback=|| view! { <ExplorerSkeleton/> } set_pending=set_pending>
            {move || data.get().map(|r| match r {
                Err(e) => view! { <p class="panel error" data-testid="explorer-error">"Could not load requests: " {e}</p> }.into_any(),
                Ok(d) => view! {
                    <section class="panel charts" data-testid="latency-charts">
                        <div class="chart-head">
                            <h2>"Latency over time"</h2>
                            <span class="legend">
                                <i class="l-p50"></i>"p50" <i class="l-p90"></i>"p90" <i class="l-p99"></i>"p99"
                                <i class="l-slo"></i>"SLO" <i class="l-breach"></i>"requests over SLO"
                            </span>
                            <span class="hint">"Drag across a chart to narrow the range, along its axis to pick the slow requests"</span>
                            <LiveBadge query=query link=link go=go/>
                        </div>
                        <div class="chart-pair">
                            <figure><figcaption>"Time to first token"</figcaption>
                                <LatencyChart series=d.series.clone() metric=Metric::Ttft brush=narrow band=pick/></figure>
                            <figure><figcaption>"Time per output token"</figcaption>
                                <LatencyChart series=d.series.clone() metric=Metric::Tpot brush=narrow band=pick/></figure>
                        </div>
                        <div class="panel-opens">
                            {(!query.get_untracked().common).then(|| view! { <common::OpenSlowSet query=query.get_untracked()/> })}
                            {(!query.get_untracked().families).then(|| view! { <families::OpenFamilies query=query.get_untracked()/> })}
                        </div>
                    </section>
                    {d.slow_set.clone().map(|set| view! { <common::SlowSetPanel set=set query=query.get_untracked()/> })}
                    {d.families.clone().map(|fp| view! { <families::FamiliesPanel fp=fp query=query.get_untracked()/> })}
                    <table::Requests data=d query=query.get_untracked()/>
                }.into_any(),
            })}
        </Transition>
        </div>
    }
}

/// Reads the view again when new data comes for its instances while it shows the latest
/// requests (no fixed window), at most once per `REREAD`; returns the stream's state.
fn follow_new_data(
    query: Memo<ExplorerQuery>,
    data: Resource<Result<ExplorerData, String>>,
) -> RwSignal<Link> {
    let link = RwSignal::new(Link::Connecting);
    let instances = Memo::new(move |_| query.with(|q| q.instance.clone()));
    #[cfg(feature = "hydrate")]
    {
        use crate::ui::canvas::now_ms;
        const REREAD_MS: f64 = 1000.0;
        // When the view was last read, and whether a read is already waiting for its turn.
        let last = StoredValue::new(0.0f64);
        let waiting = StoredValue::new(false);
        Effect::new(move |_| {
            super::live::follow(&instances.get(), link, move |_| {
                if !query.with_untracked(ExplorerQuery::follows_now) || waiting.get_value() {
                    return;
                }
                let wait = (last.get_value() + REREAD_MS - now_ms()).max(0.0);
                waiting.set_value(true);
                set_timeout(
                    move || {
                        waiting.set_value(false);
                        last.set_value(now_ms());
                        data.refetch();
                    },
                    std::time::Duration::from_millis(wait as u64),
                );
            });
        });
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (instances, data);
    link
}

/// "live" while the view shows the latest requests; else the way back to them.
#[component]
fn LiveBadge(
    query: Memo<ExplorerQuery>,
    link: RwSignal<Link>,
    go: Callback<ExplorerQuery>,
) -> impl IntoView {
    move || {
        let q = query.get();
        if q.follows_now() {
            view! { <Badge link=link title="New requests appear as they are stored"/> }.into_any()
        } else if q.find.is_empty() && q.from.is_some() {
            let back = q.with(|q| {
                q.from = None;
                q.to = None;
            });
            view! { <button class="live off" data-testid="live" title="Show the latest requests, following new ones"
                on:click=move |_| go.run(back.clone())>"▸ back to live"</button> }.into_any()
        } else {
            ().into_any()
        }
    }
}

#[component]
fn ExplorerSkeleton() -> impl IntoView {
    view! {
        <section class="panel charts skeleton-block" aria-busy="true"><div class="bar"></div><div class="bar"></div></section>
        <section class="panel skeleton-block" aria-busy="true">
            {(0..8).map(|_| view! { <div class="row"></div> }).collect_view()}
        </section>
    }
}

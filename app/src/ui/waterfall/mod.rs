//! The waterfall (`/waterfall`): every request of an instance's window on a track, the iteration
//! lane above them, a minimap of the whole window; zoom, pan, hover and select. Bars are drawn
//! on canvas; labels, panel and controls are DOM. Data is fetched for the visible window and rows
//! at the canvas's width, debounced, and the old picture is kept until the new one arrives.

#[cfg(feature = "hydrate")]
mod draw;
pub mod geometry;
#[cfg(feature = "hydrate")]
mod history;
#[cfg(feature = "hydrate")]
mod input;
#[cfg(feature = "hydrate")]
mod interact;
#[cfg(feature = "hydrate")]
mod load;
mod panel;
pub mod state;

use leptos::html;
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use super::fetch::get_json;
use super::format::{duration_ms, thousands};
use super::live::{Badge, Link};
use super::time::{Zone, date_time, span};
use crate::analysis::diagnosis::Diagnosis;
use crate::analysis::waterfall::Waterfall;
use crate::api::{InstanceList, RequestList};
use crate::model::{DraftSums, Nanos};
use crate::query::{build, encode};
use geometry::Viewport;
use state::WaterfallQuery;

pub const ROW_H: f64 = 18.0;
pub const LANE_H: f64 = 56.0;
pub const AXIS_H: f64 = 22.0;
pub const MINIMAP_H: f64 = 34.0;
/// Rows fetched above and below the visible ones, so a scroll seldom shows empty rows.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
const ROW_MARGIN: u32 = 40;

/// `spec: 44 % of drafts accepted · 2.8 tokens a step`, over what the lane holds.
pub fn drafts_line(d: &DraftSums) -> Option<String> {
    Some(format!(
        "{:.0} % of drafts accepted · {:.1} tok/step",
        d.acceptance()? * 100.0,
        d.tokens_per_step()?
    ))
}

/// What the selected request adds to the picture.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selection {
    pub request: Option<String>,
    /// Requests whose prefills the diagnosis blames.
    pub culprits: Vec<String>,
    /// Spans in which the request waited longer than its SLO for its next token (or first).
    pub stalls: Vec<(Nanos, Nanos)>,
    pub token_times: Vec<Nanos>,
    /// Arrival to finish.
    pub extent: Option<(Nanos, Nanos)>,
}

/// The selected request as the panel and the canvas need it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Selected {
    /// The instance whose part of the request is diagnosed: of its parts in view, the one that
    /// finished last (a PD request's decode part, which holds its tokens).
    pub instance: String,
    pub diagnosis: Diagnosis,
    /// Instances not in view where the request also ran (a PD request's other part).
    pub elsewhere: Vec<String>,
}

async fn select(id: String, in_view: Vec<String>) -> Result<Selected, String> {
    let parts: RequestList = get_json(format!(
        "/api/v1/requests{}",
        build(&[
            ("find", id.clone()),
            ("order", "e2e_desc".into()),
            ("limit", "20".into())
        ])
    ))
    .await?;
    let instance = parts
        .requests
        .iter()
        .find(|r| in_view.contains(&r.instance))
        .map(|r| r.instance.clone())
        .ok_or_else(|| format!("no request {id:?} on {}", in_view.join(", ")))?;
    let elsewhere = parts
        .requests
        .iter()
        .map(|r| r.instance.clone())
        .filter(|i| !in_view.contains(i))
        .collect();
    let diagnosis = get_json(format!(
        "/api/v1/requests/{}/diagnosis{}",
        encode(&id),
        build(&[("instance", instance.clone())])
    ))
    .await?;
    Ok(Selected {
        instance,
        diagnosis,
        elsewhere,
    })
}

#[component]
pub fn WaterfallPage() -> impl IntoView {
    let params = use_query_map();
    // A new instance is a new page; the rest of the view the page keeps in step itself.
    let instance = Memo::new(move |_| params.with(|p| p.get("instance").unwrap_or_default()));
    move || {
        if instance.get().is_empty() {
            return view! { <InstancePicker/> }.into_any();
        }
        let q = params.with_untracked(WaterfallQuery::from_params);
        view! { <Waterfall q=q/> }.into_any()
    }
}

/// Without an instance: the instances to choose from.
#[component]
fn InstancePicker() -> impl IntoView {
    let instances = Resource::new(
        || (),
        |_| get_json::<InstanceList>("/api/v1/instances".into()),
    );
    view! {
        <section class="panel">
            <h2>"Waterfall: choose an instance"</h2>
            <Suspense fallback=|| view! { <p class="skeleton">"Loading instances…"</p> }>
                {move || instances.get().map(|r| match r {
                    Err(e) => view! { <p class="error">{e}</p> }.into_any(),
                    Ok(l) if l.instances.is_empty() => view! { <p class="empty">"No engine has reported yet: point its OTLP exporter (--otlp-traces-endpoint) at port 4317 of this server."</p> }.into_any(),
                    Ok(l) => view! { <ul class="instance-list">{l.instances.into_iter().map(|i| {
                        let href = WaterfallQuery { instance: i.instance.clone(), ..Default::default() }.href();
                        view! { <li><a href=href>{i.instance.clone()}</a>" · "{i.engine.as_str()}" · "{i.model.clone()}</li> }
                    }).collect_view()}</ul> }.into_any(),
                })}
            </Suspense>
        </section>
    }
}

/// Everything the interaction code reads and writes.
#[derive(Clone, Copy)]
pub struct Wf {
    pub q: StoredValue<WaterfallQuery>,
    /// The whole window and the visible one (`width` 0 until the canvas is measured).
    pub outer: RwSignal<Option<(Nanos, Nanos)>>,
    pub view: RwSignal<Viewport>,
    pub first_row: RwSignal<u32>,
    pub visible_rows: RwSignal<u32>,
    pub data: RwSignal<Option<Waterfall>>,
    pub minimap: RwSignal<Option<Waterfall>>,
    pub error: RwSignal<Option<String>>,
    pub selected: RwSignal<Option<String>>,
    pub sel: RwSignal<Selection>,
    pub compact: RwSignal<bool>,
    pub pull: RwSignal<bool>,
    pub sort: RwSignal<String>,
    pub tooltip: RwSignal<Option<(f64, f64, Vec<String>)>>,
    pub canvas: NodeRef<html::Canvas>,
    pub mini: NodeRef<html::Canvas>,
    pub scroller: NodeRef<html::Div>,
    /// Following new data (the URL has no window); panning or zooming pins the view.
    pub live: RwSignal<bool>,
    /// How far the instances' data reaches, as the live stream last said.
    pub newest: RwSignal<Option<Nanos>>,
    /// Times new data came while the view was pinned (the "back to live" control says so).
    pub missed: RwSignal<u32>,
    pub link: RwSignal<Link>,
    /// The next load asks the API for its default window (the instance's latest minutes).
    pub ask_default: StoredValue<bool>,
    /// Rows follow the newest request (the view is scrolled to its bottom).
    pub at_bottom: StoredValue<bool>,
}

impl Wf {
    /// The user moved the view: it stays where they put it.
    pub fn steer(self, v: Viewport) {
        self.live.set(false);
        self.view.set(v);
    }

    /// Back to following new data, from the newest the stream has told of (or, before any, the
    /// instance's latest minutes as the API has them).
    pub fn go_live(self) {
        self.live.set(true);
        self.missed.set(0);
        match self.newest.get_untracked() {
            Some(n) => self.follow_to(n),
            None => {
                self.ask_default.set_value(true);
                self.view.update(|_| {});
            }
        }
    }

    /// Moves the live view so that data up to `newest` is in it, keeping its span; the view's
    /// loader then reads it.
    pub fn follow_to(self, newest: Nanos) {
        let v = self.view.get_untracked();
        let span = v.span().max(1);
        let to = (newest + span / 50).max(v.to);
        let (from, to) = (to - span, to);
        self.outer.set(Some((from, to)));
        self.view.set(Viewport::new(from, to, v.width));
    }
}

#[component]
fn Waterfall(q: WaterfallQuery) -> impl IntoView {
    let zone = use_context::<RwSignal<Zone>>().unwrap_or_default();
    let (from, to) = (q.zfrom.or(q.from), q.zto.or(q.to));
    let wf = Wf {
        q: StoredValue::new(q.clone()),
        outer: RwSignal::new(q.from.zip(q.to)),
        view: RwSignal::new(Viewport::new(from.unwrap_or(0), to.unwrap_or(1), 1)),
        first_row: RwSignal::new(0),
        visible_rows: RwSignal::new(30),
        data: RwSignal::new(None),
        minimap: RwSignal::new(None),
        error: RwSignal::new(None),
        selected: RwSignal::new(q.focus.clone()),
        sel: RwSignal::new(Selection::default()),
        compact: RwSignal::new(q.compact),
        pull: RwSignal::new(q.pull),
        sort: RwSignal::new(q.sort.clone()),
        tooltip: RwSignal::new(None),
        canvas: NodeRef::new(),
        mini: NodeRef::new(),
        scroller: NodeRef::new(),
        live: RwSignal::new(from.is_none() && to.is_none()),
        newest: RwSignal::new(None),
        missed: RwSignal::new(0),
        link: RwSignal::new(Link::Connecting),
        ask_default: StoredValue::new(q.from.is_none() || q.to.is_none()),
        at_bottom: StoredValue::new(q.focus.is_none()),
    };
    // The selected request's diagnosis (rendered on the server for a pasted link).
    let view_instances: Vec<String> = q.instance.split(',').map(str::to_string).collect();
    let selected = Resource::new(
        move || wf.selected.get(),
        move |id| {
            let instances = view_instances.clone();
            async move {
                match id {
                    Some(id) => select(id, instances).await.map(Some),
                    None => Ok(None),
                }
            }
        },
    );
    #[cfg(feature = "hydrate")]
    interact::start(wf, selected);
    let rows_total = move || wf.data.with(|d| d.as_ref().map_or(0, |d| d.rows));
    let header_window = move || {
        let z = zone.get();
        let v = wf.view.get();
        if v.width <= 1 && wf.data.with(|d| d.is_none()) {
            return match (from, to) {
                (Some(f), Some(t)) => format!(
                    "{} – {} ({})",
                    date_time(f, &z),
                    date_time(t, &z),
                    z.label()
                ),
                _ => "the last five minutes the instance reported".into(),
            };
        }
        format!(
            "{} – {} · {} ({})",
            date_time(v.from, &z),
            date_time(v.to, &z),
            span(v.span()),
            z.label()
        )
    };
    let explorer = crate::query::build(&[("instance", q.instance.clone())]);
    view! {
        <div class="wf-head panel">
            <div>
                <span class="wf-instance" data-testid="wf-instance">{q.instance.clone()}</span>
                <span class="wf-window" data-testid="wf-window">{header_window}</span>
            </div>
            <div class="wf-controls">
                <span class="muted">{move || {
                    let n = rows_total();
                    format!("{} request{}", thousands(n.into()), if n == 1 { "" } else { "s" })
                }}</span>
                <label>"rows by "
                    <select data-testid="sort" on:change=move |ev| wf.sort.set(event_target_value(&ev))>
                        {[("", "arrival"), ("ttft", "slowest TTFT"), ("tpot", "slowest TPOT"), ("prompt", "longest prompt"), ("duration", "longest")]
                            .into_iter()
                            .map(|(v, label)| view! { <option value=v selected=move || wf.sort.get() == v>{label}</option> })
                            .collect_view()}
                    </select>
                </label>
                <label><input type="checkbox" data-testid="compact" prop:checked=move || wf.compact.get()
                    on:change=move |ev| wf.compact.set(event_target_checked(&ev))/>" compact"</label>
                <label title="Move the selected request's culprits to the rows below it"><input type="checkbox" data-testid="pull"
                    prop:checked=move || wf.pull.get() on:change=move |ev| wf.pull.set(event_target_checked(&ev))/>" culprits next to it"</label>
                <LiveControl wf=wf/>
                <span class="keys" title="W/S zoom at the cursor · A/D pan · F fit selection · Esc clear · wheel zoom · drag pan · double-click opens the request">"W S A D F Esc"</span>
                <a href=format!("/{explorer}")>"explorer"</a>
            </div>
        </div>
        <div class="wf-body">
            <div class="wf-main">
                <div class="wf-minimap-row">
                    <span class="wf-label-col muted">"whole window"</span>
                    <canvas node_ref=wf.mini class="wf-minimap" data-testid="minimap" style=format!("height:{MINIMAP_H}px")></canvas>
                </div>
                {move || wf.error.get().map(|e| view! { <p class="error wf-error" data-testid="wf-error">{e}</p> })}
                <div class="wf-scroll" node_ref=wf.scroller data-testid="wf-scroll">
                    // One row more than there are: the rows drawn are the whole ones that fit, so
                    // without it the last row could never be scrolled into view.
                    <div class="wf-spacer" style=move || format!("height:{}px", LANE_H + AXIS_H + f64::from(rows_total() + 1) * ROW_H)>
                        <div class="wf-sticky">
                            <div class="wf-label-col wf-labels">
                                <div class="wf-lane-label" style=format!("height:{LANE_H}px")>"engine steps"<br/><small><i class="sw-prefill"></i>"prefill "<i class="sw-decode"></i>"decode tok"</small>
                                    {move || wf.data.with(|d| d.as_ref().and_then(|d| drafts_line(&d.lane.drafts()))).map(|l| view! {
                                        <small class="lane-spec" data-testid="lane-spec" title="Speculative decoding in the steps shown: the strip along the lane's top goes from vermillion (few drafts accepted) to green (most)"><i class="sw-spec"></i>{l}</small>
                                    })}
                                </div>
                                <div style=format!("height:{AXIS_H}px")></div>
                                <RowLabels wf=wf/>
                            </div>
                            <canvas node_ref=wf.canvas class="wf-canvas" data-testid="wf-canvas" tabindex="0"></canvas>
                            {move || wf.tooltip.get().map(|(x, y, lines)| view! {
                                <div class="wf-tip" data-testid="wf-tip" style=format!("left:{}px;top:{}px", x + 244.0, y + 14.0)>
                                    {lines.into_iter().map(|l| view! { <div>{l}</div> }).collect_view()}
                                </div>
                            })}
                        </div>
                    </div>
                </div>
                <Legend/>
            </div>
            <panel::Panel wf=wf selected=selected/>
        </div>
    }
}

/// Whether the view follows new data, and the way back to it once pinned.
#[component]
fn LiveControl(wf: Wf) -> impl IntoView {
    move || {
        if wf.live.get() {
            view! { <Badge link=wf.link title="Following new data. Pan or zoom to hold the view still."/> }.into_any()
        } else {
            let missed = wf.missed.get();
            let text = if missed > 0 {
                "▸ back to live · new data"
            } else {
                "▸ back to live"
            };
            view! {
                <button class="live off" data-testid="live" title="The view is held still; follow new data again"
                    on:click=move |_| wf.go_live()>{text}</button>
            }
            .into_any()
        }
    }
}

/// The labels of the visible rows (DOM, so ids are selectable text and links).
#[component]
fn RowLabels(wf: Wf) -> impl IntoView {
    move || {
        let first = wf.first_row.get();
        let last = first + wf.visible_rows.get();
        let sel = wf.sel.get();
        let selected = wf.selected.get();
        wf.data.with(|d| {
            let Some(d) = d else {
                return view! { <div class="skeleton wf-skel">"Loading requests…"</div> }.into_any();
            };
            if d.rows == 0 {
                return view! { <div class="empty wf-empty" data-testid="wf-empty">"No requests in this window. Zoom out (S), or check that the engine's --otlp-traces-endpoint points here."</div> }.into_any();
            }
            let instance = wf.q.with_value(|q| q.instance.clone());
            d.tracks
                .iter()
                .filter(|t| t.row >= first && t.row < last)
                .map(|t| {
                    let top = f64::from(t.row - first) * ROW_H;
                    let id = t.request_id.clone();
                    let is_sel = selected.as_deref() == Some(id.as_str());
                    let culprit = sel.culprits.contains(&id);
                    let part = t.parts.last().unwrap_or(&instance);
                    let href = crate::links::request_href(part, &id);
                    // What broke, if anything; else how long it took.
                    let th = crate::analysis::diagnosis::Thresholds::default();
                    let (note, bad) = match (t.ttft_ms, t.tpot_ms) {
                        (_, Some(v)) if v > th.tpot_ms => (format!("TPOT {} ▲", duration_ms(v)), true),
                        (Some(v), _) if v > th.ttft_ms => (format!("TTFT {} ▲", duration_ms(v)), true),
                        _ => (duration_ms((t.finished_ns - t.arrival_ns) as f64 / 1e6), false),
                    };
                    let title = format!(
                        "{id}: {} → {} tok · TTFT {} · TPOT {}",
                        thousands(t.prompt_tokens.into()),
                        thousands(t.output_tokens.into()),
                        t.ttft_ms.map(duration_ms).unwrap_or_else(|| "–".into()),
                        t.tpot_ms.map(duration_ms).unwrap_or_else(|| "–".into())
                    );
                    view! {
                        <div class="wf-row-label" class:selected=is_sel class:culprit=culprit style=format!("top:{top}px") data-request=id.clone()>
                            {culprit.then(|| view! { <span class="culprit-mark" title="its prefill stalled the selected request">"◆"</span> })}
                            <a href=href title=title>{id.clone()}</a>
                            <span class="muted" class:bad=bad>{note}</span>
                        </div>
                    }
                })
                .collect_view()
                .into_any()
        })
    }
}

#[component]
fn Legend() -> impl IntoView {
    view! {
        <div class="legend wf-legend">
            <i class="sw-queued"></i>"queued" <i class="sw-prefill"></i>"prefill chunk" <i class="sw-decode"></i>"decode"
            <i class="sw-preempted"></i>"preempted" <i class="sw-kv"></i>"KV transfer" <i class="sw-stall"></i>"stall of the selected request"
            <span class="culprit-mark">"◆"</span>"culprit"
        </div>
    }
}

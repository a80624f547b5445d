//! The waterfall in the browser: measures the canvas, fetches what the view needs (debounced;
//! a stale reply never replaces a newer one), draws frames, keeps the URL in step, and turns
//! wheel, drag, keys and clicks into changes of the view. Hydrate builds only.

use std::time::Duration;

use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;

use super::draw::{self, Frame};
use super::geometry::Viewport;
use super::state::WaterfallQuery;
use super::{AXIS_H, LANE_H, MINIMAP_H, ROW_H, ROW_MARGIN, Selected, Selection, Wf, stalls};
use crate::analysis::diagnosis::Thresholds;
use crate::analysis::waterfall::{Lane, Waterfall};
use crate::api::{RequestDetail, StageKind};
use crate::ui::fetch::get_json;
use crate::ui::format::{duration_ms, thousands};
use crate::ui::query::{build, encode, opt};
use crate::ui::time::{Zone, clock};

/// Quiet time after the last change of the view before data is fetched for it.
const DEBOUNCE: Duration = Duration::from_millis(120);

pub fn start(wf: Wf, selected: Resource<Result<Option<Selected>, String>>) {
    let zone = use_context::<RwSignal<Zone>>().unwrap_or_default();
    measure_on_mount_and_resize(wf);
    fetch_view(wf);
    fetch_minimap(wf);
    follow_selection(wf, selected);
    Effect::new(move |_| {
        let z = zone.get();
        paint(wf, &z);
    });
    Effect::new(move |_| paint_minimap(wf));
    Effect::new(move |_| {
        if wf.canvas.get().is_some() {
            listen(wf);
        }
    });
    keys(wf);
    follow_history(wf);
}

/// Back and Forward: the view follows the URL. (The router does not see the entries this page
/// pushes itself, so it would not notice a return to the URL it loaded with.)
fn follow_history(wf: Wf) {
    let handle = window_event_listener(leptos::ev::popstate, move |_| {
        let Some(search) = web_sys::window().and_then(|w| w.location().search().ok()) else {
            return;
        };
        let q =
            WaterfallQuery::from_params(&crate::ui::query::parse(&search).into_iter().collect());
        if q == wf.q.get_value() || q.instance != wf.q.with_value(|c| c.instance.clone()) {
            return;
        }
        let width = wf.view.get_untracked().width;
        if let (Some(from), Some(to)) = (q.zfrom.or(q.from), q.zto.or(q.to)) {
            wf.view.set(Viewport::new(from, to, width));
        }
        wf.selected.set(q.focus.clone());
        wf.compact.set(q.compact);
        wf.pull.set(q.pull);
        wf.sort.set(q.sort.clone());
        wf.q.set_value(q);
    });
    on_cleanup(move || handle.remove());
}

fn measure(wf: Wf) {
    let (Some(c), Some(sc)) = (wf.canvas.get_untracked(), wf.scroller.get_untracked()) else {
        return;
    };
    let width = c.client_width().max(100) as u32;
    let rows = ((f64::from(sc.client_height()) - LANE_H - AXIS_H) / ROW_H)
        .floor()
        .max(1.0) as u32;
    if wf.visible_rows.get_untracked() != rows {
        wf.visible_rows.set(rows);
    }
    let v = wf.view.get_untracked();
    if v.width != width {
        wf.view.set(Viewport::new(v.from, v.to, width));
    }
}

fn measure_on_mount_and_resize(wf: Wf) {
    Effect::new(move |_| {
        if wf.canvas.get().is_some() && wf.scroller.get().is_some() {
            measure(wf);
        }
    });
    let handle = window_event_listener(leptos::ev::resize, move |_| measure(wf));
    on_cleanup(move || handle.remove());
}

/// Data for the visible window and rows, fetched after the view has been still for a moment.
fn fetch_view(wf: Wf) {
    let generation = StoredValue::new(0u64);
    // Until the first reply, a view without a window asks the API for its default.
    let settled = StoredValue::new(wf.q.with_value(|q| q.from.is_some() && q.to.is_some()));
    let scroll_to_focus = StoredValue::new(wf.q.with_value(|q| q.focus.is_some()));
    Effect::new(move |_| {
        let v = wf.view.get();
        let first = wf.first_row.get();
        let visible = wf.visible_rows.get();
        let compact = wf.compact.get();
        let selected = wf.selected.get();
        let pull = wf.pull.get();
        let sort = wf.sort.get();
        let culprits = wf.sel.with(|s| s.culprits.clone());
        if v.width <= 1 {
            return;
        }
        generation.update_value(|g| *g += 1);
        let mine = generation.get_value();
        let instance = wf.q.with_value(|q| q.instance.clone());
        let window = settled.get_value().then_some((v.from, v.to));
        let url = format!(
            "/api/v1/waterfall{}",
            build(&[
                ("instance", instance),
                ("from", opt(window.map(|w| w.0))),
                ("to", opt(window.map(|w| w.1))),
                ("width_px", v.width.to_string()),
                ("first_row", first.saturating_sub(ROW_MARGIN).to_string()),
                ("rows", (visible + 2 * ROW_MARGIN).to_string()),
                (
                    "compact",
                    if compact {
                        "true".into()
                    } else {
                        String::new()
                    }
                ),
                ("focus", selected.clone().unwrap_or_default()),
                (
                    "pull",
                    if pull && !compact {
                        culprits.join(",")
                    } else {
                        String::new()
                    }
                ),
                ("sort", if compact { String::new() } else { sort.clone() }),
            ])
        );
        set_timeout(
            move || {
                if generation.get_value() != mine {
                    return; // the view moved on
                }
                write_url(wf, v, selected, compact, pull, sort);
                spawn_local(async move {
                    let reply = get_json::<Waterfall>(url).await;
                    if generation.get_value() != mine {
                        return;
                    }
                    match reply {
                        Ok(w) => {
                            if !settled.get_value() {
                                settled.set_value(true);
                                wf.outer.set(Some((w.from_ns, w.to_ns)));
                                wf.view.set(Viewport::new(w.from_ns, w.to_ns, v.width));
                            }
                            if let (true, Some(row)) = (scroll_to_focus.get_value(), w.focus_row) {
                                scroll_to_focus.set_value(false);
                                if let Some(sc) = wf.scroller.get_untracked() {
                                    let above = wf.visible_rows.get_untracked() / 3;
                                    sc.set_scroll_top((f64::from(row.saturating_sub(above)) * ROW_H) as i32);
                                }
                            }
                            ARRIVED.with(|a| a.set(Some(now_ms())));
                            wf.error.set(None);
                            wf.data.set(Some(w));
                        }
                        Err(e) => wf.error.set(Some(format!("Could not load the waterfall: {e}. The last picture stays; change the view to try again."))),
                    }
                });
            },
            DEBOUNCE,
        );
    });
}

/// The minimap: the whole window's lane, once the whole window is known.
fn fetch_minimap(wf: Wf) {
    // Only a new width (or window) asks again; the view moving does not.
    let width = Memo::new(move |_| wf.view.with(|v| v.width));
    Effect::new(move |_| {
        let (Some((from, to)), width) = (wf.outer.get(), width.get()) else {
            return;
        };
        if width <= 1 {
            return;
        }
        let url = format!(
            "/api/v1/waterfall{}",
            build(&[
                ("instance", wf.q.with_value(|q| q.instance.clone())),
                ("from", from.to_string()),
                ("to", to.to_string()),
                ("width_px", width.to_string()),
                ("rows", "1".into()),
            ])
        );
        spawn_local(async move {
            if let Ok(m) = get_json::<Waterfall>(url).await {
                wf.minimap.set(Some(m));
            }
        });
    });
}

/// The URL is the view: replaced while the user pans and zooms, so Back leaves the page rather
/// than replaying every frame; a change of selection is pushed, so Back returns to the last one.
fn write_url(
    wf: Wf,
    v: Viewport,
    selected: Option<String>,
    compact: bool,
    pull: bool,
    sort: String,
) {
    let Some(window) = web_sys::window() else {
        return;
    };
    let (outer, q) = (wf.outer.get_untracked(), wf.q.get_value());
    let zoomed = outer.is_some_and(|o| o != (v.from, v.to));
    let next = WaterfallQuery {
        from: outer.map(|o| o.0),
        to: outer.map(|o| o.1),
        zfrom: zoomed.then_some(v.from),
        zto: zoomed.then_some(v.to),
        focus: selected.clone(),
        compact,
        pull,
        sort,
        ..q.clone()
    };
    if next == q {
        return;
    }
    let href = next.href();
    if let Ok(h) = window.history() {
        let _ = if q.focus != selected {
            h.push_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&href))
        } else {
            h.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&href))
        };
    }
    wf.q.set_value(next);
}

/// What the selected request adds to the picture: its stalls and token times (from its
/// detail) and its culprits (from its diagnosis).
fn follow_selection(wf: Wf, selected: Resource<Result<Option<Selected>, String>>) {
    Effect::new(move |_| {
        let Some(Ok(Some(info))) = selected.get() else {
            wf.sel.set(Selection::default());
            return;
        };
        let id = info.diagnosis.request_id.clone();
        let mut culprits: Vec<String> = info
            .diagnosis
            .findings
            .iter()
            .flat_map(|f| f.culprits.clone())
            .collect();
        culprits.sort();
        culprits.dedup();
        wf.sel.set(Selection {
            request: Some(id.clone()),
            culprits,
            ..Selection::default()
        });
        let url = format!(
            "/api/v1/requests/{}{}",
            encode(&id),
            build(&[("instance", info.instance.clone())])
        );
        spawn_local(async move {
            let Ok(d) = get_json::<RequestDetail>(url).await else {
                return;
            };
            if wf.selected.get_untracked().as_deref() != Some(d.summary.request_id.as_str()) {
                return;
            }
            let th = Thresholds::default();
            wf.sel.update(|s| {
                s.stalls = stalls(&d, th.ttft_ms, th.tpot_ms);
                s.token_times = d.tokens.iter().filter_map(|t| t.emitted_ns).collect();
                // The whole request, all its parts: what F fits.
                let track = wf.data.with_untracked(|w| {
                    w.as_ref()
                        .and_then(|w| {
                            w.tracks
                                .iter()
                                .find(|t| t.request_id == d.summary.request_id)
                        })
                        .map(|t| (t.arrival_ns, t.finished_ns))
                });
                s.extent = Some(track.unwrap_or((d.summary.arrival_ns, d.finished_ns)));
            });
        });
    });
}

thread_local! {
    /// When the latest reply arrived (ms on the page's clock), until it is first painted.
    static ARRIVED: std::cell::Cell<Option<f64>> = const { std::cell::Cell::new(None) };
}

fn now_ms() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now())
}

/// Appends `v` to the page's `window[name]` array: what the browser benchmark reads.
fn record(name: &str, v: f64) {
    let Some(w) = web_sys::window() else { return };
    let key = wasm_bindgen::JsValue::from_str(name);
    let arr = js_sys::Reflect::get(&w, &key)
        .ok()
        .and_then(|a| a.dyn_into::<js_sys::Array>().ok())
        .unwrap_or_else(|| {
            let a = js_sys::Array::new();
            let _ = js_sys::Reflect::set(&w, &key, &a);
            a
        });
    arr.push(&v.into());
}

fn paint(wf: Wf, zone: &Zone) {
    let v = wf.view.get();
    let first_row = wf.first_row.get();
    let visible_rows = wf.visible_rows.get();
    let mut sel = wf.sel.get();
    sel.request = wf.selected.get();
    let Some(canvas) = wf.canvas.get() else {
        return;
    };
    wf.data.with(|data| {
        let Some(data) = data else { return };
        let start = now_ms();
        let h = (LANE_H + AXIS_H + f64::from(visible_rows) * ROW_H) as u32;
        let Some(ctx) = draw::context(&canvas, v.width, h) else {
            return;
        };
        draw::frame(
            &ctx,
            &Frame {
                v,
                data,
                first_row,
                visible_rows,
                sel: &sel,
                zone,
            },
        );
        let end = now_ms();
        record("__tsFrameMs", end - start);
        if let Some(arrived) = ARRIVED.with(|a| a.take()) {
            record("__tsPaintAfterDataMs", end - arrived);
        }
    });
}

fn paint_minimap(wf: Wf) {
    let v = wf.view.get();
    let (Some(canvas), Some((from, to))) = (wf.mini.get(), wf.outer.get()) else {
        return;
    };
    wf.minimap.with(|m| {
        let Some(m) = m else { return };
        let outer = Viewport::new(from, to, v.width);
        if let Some(ctx) = draw::context(&canvas, v.width, MINIMAP_H as u32) {
            draw::minimap(&ctx, &outer, &m.lane, &v, MINIMAP_H);
        }
    });
}

/// What is under the pointer: a request's segment (or a cluster), or an engine step.
fn hover_lines(wf: Wf, x: f64, y: f64) -> Option<Vec<String>> {
    let v = wf.view.get_untracked();
    let t = v.t(x);
    let tol = (3.0 * v.px_ns()) as i64;
    let zone = use_context::<RwSignal<Zone>>()
        .map(|z| z.get_untracked())
        .unwrap_or_default();
    let when = |a: i64, b: i64| {
        let step = ((b - a) / 4).max(1_000);
        format!(
            "{} – {} · {}",
            clock(a, &zone, step),
            clock(b, &zone, step),
            duration_ms((b - a) as f64 / 1e6)
        )
    };
    wf.data.with_untracked(|d| {
        let d = d.as_ref()?;
        let step_at =
            |t: i64| match &d.lane {
                Lane::Steps { steps } => steps
                    .iter()
                    .find(|s| s.start_ns <= t && t <= s.end_ns)
                    .map(|s| {
                        format!(
                            "engine step: batch of {} · {} prefill + {} decode tok",
                            s.batch_size,
                            thousands(s.prefill_tokens.into()),
                            thousands(s.decode_tokens.into())
                        )
                    }),
                Lane::Buckets { buckets, .. } => buckets
                    .iter()
                    .find(|b| b.start_ns <= t && t < b.start_ns + (b.end_ns - b.start_ns).max(1))
                    .map(|b| {
                        format!(
                            "{} engine steps · max batch {} · {} prefill + {} decode tok",
                            b.steps,
                            b.max_batch_size,
                            thousands(b.prefill_tokens),
                            thousands(b.decode_tokens)
                        )
                    }),
            };
        if y < LANE_H {
            return step_at(t).map(|s| vec![s, clock(t, &zone, 1_000_000)]);
        }
        let row =
            wf.first_row.get_untracked() + ((y - LANE_H - AXIS_H) / ROW_H).floor().max(0.0) as u32;
        if y < LANE_H + AXIS_H {
            return None;
        }
        if let Some(tr) = d
            .tracks
            .iter()
            .find(|tr| tr.row == row && tr.arrival_ns - tol <= t && t <= tr.finished_ns + tol)
        {
            let mut lines = vec![
                tr.request_id.clone(),
                format!(
                    "{} → {} tok · TTFT {} · TPOT {}",
                    thousands(tr.prompt_tokens.into()),
                    thousands(tr.output_tokens.into()),
                    tr.ttft_ms.map(duration_ms).unwrap_or_else(|| "–".into()),
                    tr.tpot_ms.map(duration_ms).unwrap_or_else(|| "–".into())
                ),
            ];
            if !tr.parts.is_empty() {
                lines.push(format!("ran on {}", tr.parts.join(" → ")));
            }
            if let Some(s) = tr
                .segments
                .iter()
                .find(|s| s.start_ns - tol <= t && t <= s.end_ns + tol)
            {
                let phase = match s.kind {
                    StageKind::Queued => "queued",
                    StageKind::Prefill => "prefill chunk",
                    StageKind::Decode => "decode",
                    StageKind::Preempted => "preempted",
                    StageKind::KvTransfer => "KV transfer",
                };
                let mut what = phase.to_string();
                if let Some(n) = s.tokens {
                    what.push_str(&format!(" · {} tok", thousands(n.into())));
                }
                if let Some(i) = s.iteration {
                    what.push_str(&format!(" · iteration {i}"));
                }
                lines.push(what);
                lines.push(when(s.start_ns, s.end_ns));
            } else {
                lines.push(when(tr.arrival_ns, tr.finished_ns));
            }
            lines.extend(step_at(t));
            return Some(lines);
        }
        d.clusters
            .iter()
            .find(|c| c.row == row && c.start_ns - tol <= t && t <= c.end_ns + tol)
            .map(|c| {
                vec![
                    format!(
                        "{} short requests, too close to draw one by one",
                        c.requests
                    ),
                    when(c.start_ns, c.end_ns),
                    format!(
                        "queued {} · prefill {} · decode {} in all — zoom in (W) to see them",
                        duration_ms(c.queued_ns as f64 / 1e6),
                        duration_ms(c.prefill_ns as f64 / 1e6),
                        duration_ms(c.decode_ns as f64 / 1e6)
                    ),
                ]
            })
    })
}

/// The request whose track is under the pointer, and the instance of its last part when the
/// view joins several instances.
fn track_at(wf: Wf, x: f64, y: f64) -> Option<(String, Option<String>)> {
    if y < LANE_H + AXIS_H {
        return None;
    }
    let v = wf.view.get_untracked();
    let (t, tol) = (v.t(x), (3.0 * v.px_ns()) as i64);
    let row = wf.first_row.get_untracked() + ((y - LANE_H - AXIS_H) / ROW_H) as u32;
    wf.data.with_untracked(|d| {
        d.as_ref()?
            .tracks
            .iter()
            .find(|tr| tr.row == row && tr.arrival_ns - tol <= t && t <= tr.finished_ns + tol)
            .map(|tr| (tr.request_id.clone(), tr.parts.last().cloned()))
    })
}

thread_local! {
    /// Mouse x within the canvas, for zooming at the cursor from the keyboard.
    static POINTER_X: std::cell::Cell<Option<f64>> = const { std::cell::Cell::new(None) };
}

fn on<E: JsCast + 'static>(target: &web_sys::EventTarget, name: &str, f: impl FnMut(E) + 'static) {
    let mut f = f;
    let cb = Closure::<dyn FnMut(web_sys::Event)>::new(move |e: web_sys::Event| {
        if let Ok(e) = e.dyn_into::<E>() {
            f(e)
        }
    });
    let _ = target.add_event_listener_with_callback(name, cb.as_ref().unchecked_ref());
    // The listener lives as long as the element; the element goes with the page.
    cb.forget();
}

fn local_xy(canvas: &web_sys::HtmlCanvasElement, e: &web_sys::MouseEvent) -> (f64, f64) {
    let r = canvas.get_bounding_client_rect();
    (
        f64::from(e.client_x()) - r.left(),
        f64::from(e.client_y()) - r.top(),
    )
}

fn listen(wf: Wf) {
    let (Some(canvas), Some(mini), Some(scroller)) = (
        wf.canvas.get_untracked(),
        wf.mini.get_untracked(),
        wf.scroller.get_untracked(),
    ) else {
        return;
    };
    let drag = StoredValue::new(None::<(f64, Viewport, bool)>);
    let c = canvas.clone();
    on(&canvas, "wheel", move |e: web_sys::WheelEvent| {
        e.prevent_default();
        let (x, _) = local_xy(&c, &e);
        let (dx, dy) = (e.delta_x(), e.delta_y());
        let v = wf.view.get_untracked();
        if e.ctrl_key() || (dy.abs() >= dx.abs() && !e.shift_key()) {
            // A trackpad pinch arrives as ctrl+wheel with small deltas.
            let k = if e.ctrl_key() { 0.01 } else { 0.0025 };
            wf.view.set(v.zoom((dy * k).clamp(-1.0, 1.0).exp(), x));
        } else {
            wf.view.set(v.pan(if dx != 0.0 { dx } else { dy }));
        }
    });
    let c = canvas.clone();
    on(&canvas, "mousedown", move |e: web_sys::MouseEvent| {
        let (x, _) = local_xy(&c, &e);
        drag.set_value(Some((x, wf.view.get_untracked(), false)));
    });
    let c = canvas.clone();
    on(&canvas, "mousemove", move |e: web_sys::MouseEvent| {
        let (x, y) = local_xy(&c, &e);
        POINTER_X.with(|p| p.set(Some(x)));
        if let Some((x0, v0, moved)) = drag.get_value()
            && (moved || (x - x0).abs() > 3.0)
        {
            drag.set_value(Some((x0, v0, true)));
            wf.view.set(v0.pan(x0 - x));
            wf.tooltip.set(None);
            return;
        }
        wf.tooltip.set(hover_lines(wf, x, y).map(|l| (x, y, l)));
    });
    on(&canvas, "mouseleave", move |_: web_sys::MouseEvent| {
        drag.set_value(None);
        wf.tooltip.set(None);
    });
    let c = canvas.clone();
    on(&canvas, "mouseup", move |e: web_sys::MouseEvent| {
        let was = drag.get_value();
        drag.set_value(None);
        if let Some((_, _, false)) = was {
            let (x, y) = local_xy(&c, &e);
            if let Some((id, _)) = track_at(wf, x, y) {
                wf.selected.set(Some(id));
            }
        }
    });
    let c = canvas.clone();
    on(&canvas, "dblclick", move |e: web_sys::MouseEvent| {
        let (x, y) = local_xy(&c, &e);
        if let Some((id, part)) = track_at(wf, x, y) {
            let instance = part.unwrap_or_else(|| wf.q.with_value(|q| q.instance.clone()));
            let href = crate::ui::explorer::table::request_href(&instance, &id);
            let _ = web_sys::window().map(|w| w.location().set_href(&href));
        }
    });
    let sc = scroller.clone();
    on(&scroller, "scroll", move |_: web_sys::Event| {
        let row = (f64::from(sc.scroll_top()) / ROW_H).floor() as u32;
        if wf.first_row.get_untracked() != row {
            wf.first_row.set(row);
        }
    });
    // The minimap: press or drag to center the view there.
    let mini_drag = StoredValue::new(false);
    let m = mini.clone();
    let center = move |e: &web_sys::MouseEvent| {
        let (Some((from, to)), v) = (wf.outer.get_untracked(), wf.view.get_untracked()) else {
            return;
        };
        let (x, _) = local_xy(&m, e);
        let t = Viewport::new(from, to, v.width).t(x);
        wf.view
            .set(Viewport::new(t - v.span() / 2, t + v.span() / 2, v.width));
    };
    let c1 = center.clone();
    on(&mini, "mousedown", move |e: web_sys::MouseEvent| {
        mini_drag.set_value(true);
        c1(&e);
    });
    on(&mini, "mousemove", move |e: web_sys::MouseEvent| {
        if mini_drag.get_value() {
            center(&e);
        }
    });
    for name in ["mouseup", "mouseleave"] {
        on(&mini, name, move |_: web_sys::MouseEvent| {
            mini_drag.set_value(false)
        });
    }
}

/// W/S zoom at the cursor, A/D pan, F fits the selection, Esc clears it (as in Perfetto).
fn keys(wf: Wf) {
    let handle = window_event_listener(leptos::ev::keydown, move |e| {
        let typing = e
            .target()
            .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
            .is_some_and(|el| matches!(el.tag_name().as_str(), "INPUT" | "SELECT" | "TEXTAREA"));
        if typing || e.ctrl_key() || e.meta_key() || e.alt_key() {
            return;
        }
        let v = wf.view.get_untracked();
        let at = POINTER_X
            .with(|p| p.get())
            .unwrap_or(f64::from(v.width) / 2.0);
        let next = match e.key().as_str() {
            "w" | "W" => Some(v.zoom(0.8, at)),
            "s" | "S" => Some(v.zoom(1.25, at)),
            "a" | "A" => Some(v.pan(-f64::from(v.width) * 0.2)),
            "d" | "D" => Some(v.pan(f64::from(v.width) * 0.2)),
            "f" | "F" => wf
                .sel
                .with_untracked(|s| s.extent)
                .map(|(a, b)| Viewport::fit(a, b, v.width)),
            "Escape" => {
                wf.selected.set(None);
                None
            }
            _ => return,
        };
        e.prevent_default();
        if let Some(n) = next {
            wf.view.set(n);
        }
    });
    on_cleanup(move || handle.remove());
}

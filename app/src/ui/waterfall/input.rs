//! Input on the waterfall: wheel and pinch zoom at the cursor, drag and horizontal wheel pan,
//! hover (what is under the pointer), click to select, double-click to open, the minimap, and
//! the keys (W/S zoom, A/D pan, F fit, Esc clear, as in Perfetto). Hydrate builds only.

use leptos::prelude::*;
use wasm_bindgen::JsCast;

use super::geometry::Viewport;
use super::{AXIS_H, LANE_H, ROW_H, Wf};
use crate::analysis::waterfall::Lane;
use crate::api::StageKind;
use crate::model::DraftSums;
use crate::ui::canvas::{local_xy, on};
use crate::ui::format::{duration_ms, thousands};
use crate::ui::time::{Zone, clock};

/// `tenant acme · LoRA sql-adapter · priority 3 · 1,024 of 1,360 prompt tokens from the cache`,
/// when the track carries any of it.
fn who(tr: &crate::analysis::waterfall::Track) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(t) = &tr.tenant {
        parts.push(format!("tenant {t}"));
    }
    if let Some(l) = &tr.lora_adapter {
        parts.push(format!("LoRA {l}"));
    }
    if let Some(p) = tr.priority.filter(|&p| p != 0) {
        parts.push(format!("priority {p}"));
    }
    if tr.cached_tokens > 0 {
        parts.push(format!(
            "{} of {} prompt tokens from the cache",
            thousands(tr.cached_tokens.into()),
            thousands(tr.prompt_tokens.into())
        ));
    }
    (!parts.is_empty()).then(|| parts.join(" · "))
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / f64::from(1u32 << 30)),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20)),
        n => format!("{:.1} KiB", n as f64 / 1024.0),
    }
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
                            "engine step: batch of {} · {} prefill + {} decode tok{}",
                            s.batch_size,
                            thousands(s.prefill_tokens.into()),
                            thousands(s.decode_tokens.into()),
                            drafts_tip(&s.drafts)
                        )
                    }),
                Lane::Buckets { buckets, .. } => buckets
                    .iter()
                    .find(|b| b.start_ns <= t && t < b.start_ns + (b.end_ns - b.start_ns).max(1))
                    .map(|b| {
                        format!(
                            "{} engine steps · max batch {} · {} prefill + {} decode tok{}",
                            b.steps,
                            b.max_batch_size,
                            thousands(b.prefill_tokens),
                            thousands(b.decode_tokens),
                            drafts_tip(&b.drafts)
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
            lines.extend(who(tr));
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
                if let Some(b) = s.blocks {
                    what.push_str(&format!(" · {} blocks", thousands(b.into())));
                }
                if let Some(b) = s.bytes {
                    what.push_str(&format!(" · {}", bytes(b)));
                }
                lines.push(what);
                if let Some(by) = &s.by {
                    lines.push(format!("to make room for {by}"));
                }
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

pub(super) fn listen(wf: Wf) {
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
            wf.steer(v.zoom((dy * k).clamp(-1.0, 1.0).exp(), x));
        } else {
            wf.steer(v.pan(if dx != 0.0 { dx } else { dy }));
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
            wf.steer(v0.pan(x0 - x));
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
            let href = crate::links::request_href(&instance, &id);
            let _ = web_sys::window().map(|w| w.location().set_href(&href));
        }
    });
    let sc = scroller.clone();
    on(&scroller, "scroll", move |_: web_sys::Event| {
        let row = (f64::from(sc.scroll_top()) / ROW_H).floor() as u32;
        // Within a row of the end: new requests keep the rows at their end.
        wf.at_bottom.set_value(
            f64::from(sc.scroll_top() + sc.client_height())
                >= f64::from(sc.scroll_height()) - ROW_H,
        );
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
        wf.steer(Viewport::new(t - v.span() / 2, t + v.span() / 2, v.width));
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
pub(super) fn keys(wf: Wf) {
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
            wf.steer(n);
        }
    });
    on_cleanup(move || handle.remove());
}

/// ` · drafts: 87 of 124 accepted (70 %), 3.8 tok/step` when the step speculated, else nothing.
fn drafts_tip(d: &DraftSums) -> String {
    match (d.acceptance(), d.tokens_per_step()) {
        (Some(a), Some(t)) => format!(
            " · drafts: {} of {} accepted ({:.0} %), {t:.1} tok/step",
            thousands(d.accepted),
            thousands(d.proposed),
            a * 100.0
        ),
        _ => String::new(),
    }
}

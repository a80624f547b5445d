//! The waterfall in the browser: starts the parts that keep the page live — loading data for the
//! view (`load`), following the URL (`history`), input (`input`) — and paints the canvases when
//! what they show changes. Hydrate builds only.

use super::draw::{self, Frame};
use super::geometry::Viewport;
use super::{AXIS_H, LANE_H, MINIMAP_H, ROW_H, Selected, Wf, history, input, load};
use crate::ui::canvas::{context, now_ms, record};
use crate::ui::time::Zone;
use leptos::prelude::*;

pub fn start(wf: Wf, selected: Resource<Result<Option<Selected>, String>>) {
    let zone = use_context::<RwSignal<Zone>>().unwrap_or_default();
    measure_on_mount_and_resize(wf);
    load::view(wf);
    load::minimap(wf);
    load::selection(wf, selected);
    Effect::new(move |_| {
        let z = zone.get();
        paint(wf, &z);
    });
    Effect::new(move |_| paint_minimap(wf));
    Effect::new(move |_| {
        if wf.canvas.get().is_some() {
            input::listen(wf);
        }
    });
    input::keys(wf);
    history::follow(wf);
    let instances = wf.q.with_value(|q| q.instance.clone());
    crate::ui::live::follow(&instances, wf.link, move |newest| {
        if newest.is_some() {
            wf.newest.set(newest);
        }
        match (wf.live.get_untracked(), newest) {
            (true, Some(n)) => wf.follow_to(n),
            // Nothing heard of yet, but the page may have missed news: read the view again.
            (true, None) => wf.view.update(|_| {}),
            (false, _) => wf.missed.update(|m| *m += 1),
        }
    });
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

thread_local! {
    /// When the latest reply arrived (ms on the page's clock), until it is first painted.
    pub(super) static ARRIVED: std::cell::Cell<Option<f64>> = const { std::cell::Cell::new(None) };
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
        let Some(ctx) = context(&canvas, v.width, h) else {
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
        if wf.live.get_untracked() {
            seen(data, &v, first_row, visible_rows);
        }
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
        if let Some(ctx) = context(&canvas, v.width, MINIMAP_H as u32) {
            draw::minimap(&ctx, &outer, &m.lane, &v, MINIMAP_H);
        }
    });
}

/// Notes when each request first reached the screen of a live page (`window.__tsSeen[id]`,
/// milliseconds since the epoch, comparable with the sender's clock): what the live benchmark
/// reads for ingest-to-pixel latency.
fn seen(data: &crate::analysis::waterfall::Waterfall, v: &Viewport, first_row: u32, rows: u32) {
    use wasm_bindgen::JsValue;
    let Some(w) = web_sys::window() else { return };
    let key = JsValue::from_str("__tsSeen");
    let map = js_sys::Reflect::get(&w, &key)
        .ok()
        .filter(|m| m.is_object())
        .unwrap_or_else(|| {
            let m: JsValue = js_sys::Object::new().into();
            let _ = js_sys::Reflect::set(&w, &key, &m);
            m
        });
    let now = JsValue::from_f64(js_sys::Date::now());
    for t in &data.tracks {
        let on_screen = t.row >= first_row
            && t.row < first_row + rows
            && t.finished_ns >= v.from
            && t.arrival_ns <= v.to;
        let id = JsValue::from_str(&t.request_id);
        if on_screen && !js_sys::Reflect::has(&map, &id).unwrap_or(true) {
            let _ = js_sys::Reflect::set(&map, &id, &now);
        }
    }
}

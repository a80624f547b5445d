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

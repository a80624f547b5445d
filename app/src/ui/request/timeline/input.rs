//! The token timeline in the browser: measures the canvas, paints when what it shows changes
//! (columns recomputed only when the width changes), and turns the pointer into hover, a click
//! (select a token) or a drag (brush a range). Hydrate builds only.

use leptos::prelude::*;

use super::draw::{self, Frame};
use super::geometry::{Column, Layout, Slo, YScale, columns};
use super::{HEIGHT, LEFT};
use crate::ui::canvas::{context, local_xy, now_ms, on, record};
use crate::ui::request::Rq;

pub fn start(rq: Rq) {
    let width = RwSignal::new(0u32);
    let measure = move || {
        if let Some(c) = rq.canvas.get_untracked() {
            let w = c.client_width().max(200) as u32;
            if width.get_untracked() != w {
                width.set(w);
            }
        }
    };
    Effect::new(move |_| {
        if rq.canvas.get().is_some() {
            measure();
            listen(rq);
        }
    });
    let handle = window_event_listener(leptos::ev::resize, move |_| measure());
    on_cleanup(move || handle.remove());
    let cols: StoredValue<(u32, Vec<Column>)> = StoredValue::new((0, Vec::new()));
    let first = StoredValue::new(true);
    Effect::new(move |_| {
        let w = width.get();
        let (log, range, tok) = (rq.log.get(), rq.range.get(), rq.tok.get());
        let hover = rq.hover.get().map(|h| h.2);
        let Some(canvas) = rq.canvas.get_untracked() else {
            return;
        };
        if w == 0 {
            return;
        }
        let start = now_ms();
        let slo = rq.th.with_value(|t| t.tpot_ms);
        let plot_w = f64::from(w) - LEFT;
        if cols.with_value(|c| c.0) != w {
            let slos = rq.th.with_value(Slo::of);
            let c = rq.d.with_value(|d| columns(&d.tokens, plot_w, slos));
            cols.set_value((w, c));
        }
        let scale = rq.d.with_value(|d| YScale::new(&d.tokens, slo, log));
        let Some(ctx) = context(&canvas, w, HEIGHT as u32) else {
            return;
        };
        cols.with_value(|(_, c)| {
            draw::frame(
                &ctx,
                &Frame {
                    width: f64::from(w),
                    cols: c,
                    layout: Layout {
                        n: rq.tokens_len(),
                        width: plot_w,
                    },
                    scale,
                    slo_ms: slo,
                    range,
                    tok,
                    hover,
                },
            )
        });
        let end = now_ms();
        record("__tsFrameMs", end - start);
        if first.get_value() {
            first.set_value(false);
            // Since the navigation started: what the request page's benchmark reads.
            record("__tsTimelinePaintMs", end);
        }
    });
    keys(rq);
}

fn layout(rq: Rq, canvas: &web_sys::HtmlCanvasElement) -> Layout {
    Layout {
        n: rq.tokens_len(),
        width: f64::from(canvas.client_width()) - LEFT,
    }
}

/// Setting a signal notifies even when the value is the same: only clear what is set.
fn clear_hover(rq: Rq) {
    if rq.hover.get_untracked().is_some() {
        rq.hover.set(None);
    }
}

fn listen(rq: Rq) {
    let Some(canvas) = rq.canvas.get_untracked() else {
        return;
    };
    // Where a press started (token index and x), while the button is down.
    let press = StoredValue::new(None::<(u32, f64)>);
    let c = canvas.clone();
    on(&canvas, "mousedown", move |e: web_sys::MouseEvent| {
        let (x, _) = local_xy(&c, &e);
        if x < LEFT {
            return;
        }
        e.prevent_default();
        press.set_value(Some((layout(rq, &c).index(x - LEFT), x)));
    });
    let c = canvas.clone();
    on(&canvas, "mousemove", move |e: web_sys::MouseEvent| {
        let (x, y) = local_xy(&c, &e);
        let l = layout(rq, &c);
        let i = l.index(x - LEFT);
        if let Some((a, x0)) = press.get_value()
            && (rq.brushing.get_untracked() || (x - x0).abs() > 3.0)
        {
            if !rq.brushing.get_untracked() {
                rq.brushing.set(true);
            }
            let r = Some((a.min(i), a.max(i)));
            if rq.range.get_untracked() != r {
                rq.range.set(r);
            }
            clear_hover(rq);
            return;
        }
        if x < LEFT {
            clear_hover(rq);
            return;
        }
        if rq.hover.get_untracked().map(|h| h.2) != Some(i) {
            rq.hover.set(Some((x, y, i)));
        }
    });
    on(&canvas, "mouseleave", move |_: web_sys::MouseEvent| {
        clear_hover(rq)
    });
    let up = move |e: web_sys::MouseEvent| {
        let Some((a, _)) = press.get_value() else {
            return;
        };
        press.set_value(None);
        if rq.brushing.get_untracked() {
            rq.brushing.set(false);
            // The brushed tokens in the word-choice view: show the first.
            if let Some((first, _)) = rq.range.get_untracked() {
                super::super::words::reveal(rq, first);
            }
        } else if e.button() == 0 {
            rq.tok.set(Some(a));
            super::super::words::reveal(rq, a);
        }
    };
    let handle = window_event_listener(leptos::ev::mouseup, up);
    on_cleanup(move || handle.remove());
}

/// Esc clears the brush (then the selection).
fn keys(rq: Rq) {
    let handle = window_event_listener(leptos::ev::keydown, move |e| {
        if e.key() == "Escape" {
            if rq.range.get_untracked().is_some() {
                rq.range.set(None);
            } else {
                rq.tok.set(None);
            }
        }
    });
    on_cleanup(move || handle.remove());
}

//! Paints the token timeline: latency grid and SLO line, one bar per column split into waiting
//! and computing, the "others prefilled meanwhile" strip, the batch and queue lines, the token
//! axis, and the brushed range, selected and hovered token. Browser only.

use web_sys::CanvasRenderingContext2d;

use super::geometry::{Column, Layout, YScale};
use super::{BARS_H, LEFT, LOAD_H, MARK_H, TOP};
use crate::ui::format::{duration_ms, thousands};

const DECODE: &str = "#0072b2";
const WAIT: &str = "#9aa3ad";
const STALL: &str = "#d55e00";
const PREFILL: &str = "#e69f00";
/// An accepted draft token (speculative decoding), as the word flow marks it.
const DRAFT: &str = "#56b4e9";
const BATCH: &str = "#1d2430";
const QUEUE: &str = "#cc79a7";
const GRID: &str = "#edf0f3";
const LABEL: &str = "#5b6473";

pub struct Frame<'a> {
    pub width: f64,
    pub cols: &'a [Column],
    pub layout: Layout,
    pub scale: YScale,
    pub slo_ms: f64,
    pub range: Option<(u32, u32)>,
    pub tok: Option<u32>,
    pub hover: Option<u32>,
}

pub fn frame(ctx: &CanvasRenderingContext2d, f: &Frame) {
    let base = TOP + BARS_H;
    let y = |ms: f64| base - BARS_H * f.scale.frac(ms);
    ctx.set_font("10px system-ui, sans-serif");
    // Latency grid and its labels.
    ctx.set_text_align("right");
    ctx.set_text_baseline("middle");
    for v in f.scale.ticks() {
        let yy = y(v).round() + 0.5;
        ctx.set_fill_style_str(GRID);
        ctx.fill_rect(LEFT, yy, f.width - LEFT, 1.0);
        ctx.set_fill_style_str(LABEL);
        let _ = ctx.fill_text(&duration_ms(v), LEFT - 6.0, yy);
    }
    // The brushed range, under the bars.
    if let Some((a, b)) = f.range {
        let (x0, x1) = (LEFT + f.layout.x(a), LEFT + f.layout.x(b + 1));
        ctx.set_fill_style_str("rgba(0, 114, 178, 0.12)");
        ctx.fill_rect(
            x0,
            TOP - 6.0,
            (x1 - x0).max(1.0),
            BARS_H + 6.0 + MARK_H + LOAD_H,
        );
    }
    bars(ctx, f, &y);
    // The SLO line.
    let slo_y = y(f.slo_ms).round() + 0.5;
    ctx.set_fill_style_str(STALL);
    let mut x = LEFT;
    while x < f.width {
        ctx.fill_rect(x, slo_y, 4.0, 1.0);
        x += 7.0;
    }
    // At the right end: the first token's bar, usually the tallest, is at the left.
    ctx.set_text_align("right");
    ctx.set_text_baseline("bottom");
    let _ = ctx.fill_text(
        &format!("TPOT SLO {}", duration_ms(f.slo_ms)),
        f.width - 4.0,
        slo_y - 2.0,
    );
    load(ctx, f);
    axis(ctx, f);
    // The selected and the hovered token.
    for (i, colour, w) in [
        (f.tok, "#1d2430", 2.0),
        (f.hover, "rgba(29, 36, 48, 0.35)", 1.0),
    ] {
        if let Some(i) = i {
            let x = LEFT + (f.layout.x(i) + f.layout.x(i + 1)) / 2.0;
            ctx.set_fill_style_str(colour);
            ctx.fill_rect(x - w / 2.0, TOP - 6.0, w, BARS_H + 6.0 + MARK_H + LOAD_H);
        }
    }
}

fn bars(ctx: &CanvasRenderingContext2d, f: &Frame, y: &dyn Fn(f64) -> f64) {
    let base = TOP + BARS_H;
    for c in f.cols {
        let w = c.x1 - c.x0;
        let (x, w) = (LEFT + c.x0, if w > 3.0 { w - 1.0 } else { w.max(1.0) });
        let top = y(c.latency_ms);
        let h = base - top;
        match c.wait_ms {
            Some(wait) if c.latency_ms > 0.0 => {
                let wait_h = h * (wait / c.latency_ms).clamp(0.0, 1.0);
                ctx.set_fill_style_str(DECODE);
                ctx.fill_rect(x, top + wait_h, w, h - wait_h);
                ctx.set_fill_style_str(if c.breach { STALL } else { WAIT });
                ctx.fill_rect(x, top, w, wait_h);
            }
            _ => {
                ctx.set_fill_style_str(if c.breach { STALL } else { DECODE });
                ctx.fill_rect(x, top, w, h);
            }
        }
        if f.scale.clipped(c.latency_ms) {
            // A break in the bar: it goes on above the plot.
            ctx.set_fill_style_str("#ffffff");
            ctx.fill_rect(x, TOP + 4.0, w, 2.0);
            if c.token == 0 {
                ctx.set_fill_style_str(LABEL);
                ctx.set_text_align("left");
                ctx.set_text_baseline("top");
                let _ = ctx.fill_text(
                    &format!("first token {}", duration_ms(c.latency_ms)),
                    x + w + 3.0,
                    TOP,
                );
            }
        }
        if c.interrupted {
            ctx.set_fill_style_str(PREFILL);
            ctx.fill_rect(x, base + 2.0, w, MARK_H - 3.0);
        }
        if c.drafted {
            ctx.set_fill_style_str(DRAFT);
            ctx.fill_rect(x, base - 3.0, w, 3.0);
        }
    }
}

/// Batch size and queue length of each column's step, each scaled to its own maximum.
fn load(ctx: &CanvasRenderingContext2d, f: &Frame) {
    let top = TOP + BARS_H + MARK_H;
    let batch_max = f.cols.iter().filter_map(|c| c.batch).max().unwrap_or(0);
    let queue_max = f.cols.iter().filter_map(|c| c.waiting).max().unwrap_or(0);
    ctx.set_fill_style_str(GRID);
    ctx.fill_rect(LEFT, top + LOAD_H - 0.5, f.width - LEFT, 1.0);
    for (get, max, colour) in [
        (
            &(|c: &Column| c.batch) as &dyn Fn(&Column) -> Option<u32>,
            batch_max,
            BATCH,
        ),
        (&|c: &Column| c.waiting, queue_max, QUEUE),
    ] {
        if max == 0 {
            continue;
        }
        ctx.set_stroke_style_str(colour);
        ctx.set_line_width(1.0);
        ctx.begin_path();
        let mut started = false;
        for c in f.cols {
            let Some(v) = get(c) else {
                started = false;
                continue;
            };
            let (x, yy) = (
                LEFT + (c.x0 + c.x1) / 2.0,
                top + LOAD_H - 2.0 - (LOAD_H - 6.0) * f64::from(v) / f64::from(max),
            );
            if started {
                ctx.line_to(x, yy);
            } else {
                ctx.move_to(x, yy);
                started = true;
            }
        }
        ctx.stroke();
    }
    ctx.set_text_align("right");
    ctx.set_text_baseline("middle");
    ctx.set_fill_style_str(BATCH);
    let _ = ctx.fill_text(&format!("batch {batch_max}"), LEFT - 6.0, top + 10.0);
    ctx.set_fill_style_str(QUEUE);
    let _ = ctx.fill_text(&format!("queue {queue_max}"), LEFT - 6.0, top + 26.0);
}

/// Token numbers along the bottom.
fn axis(ctx: &CanvasRenderingContext2d, f: &Frame) {
    let n = f.layout.n.max(1);
    let plot_w = f.width - LEFT;
    let raw = f64::from(n) * 80.0 / plot_w.max(1.0);
    let mag = 10f64.powf(raw.max(1.0).log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(mag * 10.0)
        .max(1.0) as u32;
    let yy = TOP + BARS_H + MARK_H + LOAD_H + 3.0;
    ctx.set_fill_style_str(LABEL);
    ctx.set_text_align("center");
    ctx.set_text_baseline("top");
    let mut i = 0;
    while i < n {
        let x = LEFT + (f.layout.x(i) + f.layout.x(i + 1)) / 2.0;
        ctx.fill_rect(x, yy - 3.0, 1.0, 3.0);
        let _ = ctx.fill_text(&thousands(i.into()), x, yy);
        i += step;
    }
    ctx.set_text_align("right");
    let _ = ctx.fill_text("token", LEFT - 6.0, yy);
}

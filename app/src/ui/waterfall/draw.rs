//! Paints the waterfall on its canvases: iteration lane, time axis, request tracks, clusters,
//! the selection's stalls and culprits, and the minimap. Browser only.

use wasm_bindgen::JsCast;
use web_sys::{CanvasRenderingContext2d, HtmlCanvasElement};

use super::geometry::Viewport;
use super::{AXIS_H, LANE_H, ROW_H, Selection};
use crate::analysis::waterfall::{Lane, Waterfall};
use crate::api::StageKind;
use crate::model::{DraftSums, Nanos};
use crate::ui::time::{Zone, clock, tick_step, ticks};

pub const QUEUED: &str = "#bbbbbb";
pub const PREFILL: &str = "#e69f00";
pub const DECODE: &str = "#0072b2";
pub const STALL: &str = "#d55e00";
pub const PREEMPTED: &str = "#cc79a7";
pub const KV: &str = "#009e73";

pub fn colour(kind: StageKind) -> &'static str {
    match kind {
        StageKind::Queued => QUEUED,
        StageKind::Prefill => PREFILL,
        StageKind::Decode => DECODE,
        StageKind::Preempted => PREEMPTED,
        StageKind::KvTransfer => KV,
    }
}

/// What one frame shows.
pub struct Frame<'a> {
    pub v: Viewport,
    pub data: &'a Waterfall,
    pub first_row: u32,
    pub visible_rows: u32,
    pub sel: &'a Selection,
    pub zone: &'a Zone,
}

pub fn frame(ctx: &CanvasRenderingContext2d, f: &Frame) {
    let w = f64::from(f.v.width);
    let tracks_h = f64::from(f.visible_rows) * ROW_H;
    let top = LANE_H + AXIS_H;
    lane(ctx, &f.v, &f.data.lane, 0.0, LANE_H - 4.0);
    axis(ctx, &f.v, f.zone, LANE_H, tracks_h);
    // Stalled gaps of the selected request, across the full height, under everything else.
    ctx.set_fill_style_str("rgba(213, 94, 0, 0.13)");
    for &(a, b) in &f.sel.stalls {
        let (x0, x1) = (f.v.x(a).max(0.0), f.v.x(b).min(w));
        if x1 > x0 {
            ctx.fill_rect(x0, 0.0, (x1 - x0).max(1.0), top + tracks_h);
        }
    }
    let row_y = |row: u32| top + f64::from(row.saturating_sub(f.first_row)) * ROW_H;
    let shown = |row: u32| row >= f.first_row && row < f.first_row + f.visible_rows;
    for c in f.data.clusters.iter().filter(|c| shown(c.row)) {
        let (x0, x1) = (f.v.x(c.start_ns), f.v.x(c.end_ns));
        let total = (c.queued_ns + c.prefill_ns + c.decode_ns).max(1) as f64;
        let y = row_y(c.row) + 3.0;
        let h = ROW_H - 6.0;
        let mut yy = y;
        // Density drawn as one block with the phases' shares of its time as bands.
        for (ns, col) in [
            (c.prefill_ns, PREFILL),
            (c.decode_ns, DECODE),
            (c.queued_ns, QUEUED),
        ] {
            let bh = h * ns as f64 / total;
            ctx.set_fill_style_str(col);
            ctx.set_global_alpha(0.45 + 0.5 * (f64::from(c.requests).ln() / 5.0).min(1.0));
            ctx.fill_rect(x0, yy, (x1 - x0).max(1.0), bh);
            yy += bh;
        }
        ctx.set_global_alpha(1.0);
    }
    for t in f.data.tracks.iter().filter(|t| shown(t.row)) {
        let y = row_y(t.row);
        let selected = f.sel.request.as_deref() == Some(t.request_id.as_str());
        let culprit = f.sel.culprits.contains(&t.request_id);
        if selected || culprit {
            ctx.set_fill_style_str(if selected {
                "rgba(0, 114, 178, 0.10)"
            } else {
                "rgba(213, 94, 0, 0.10)"
            });
            ctx.fill_rect(0.0, y, w, ROW_H);
        }
        for s in &t.segments {
            let (x0, x1) = (f.v.x(s.start_ns), f.v.x(s.end_ns));
            if x1 < 0.0 || x0 > w {
                continue;
            }
            let (x0, x1) = (x0.max(-1.0), x1.min(w + 1.0));
            if s.kind == StageKind::Queued {
                set_queued_fill(ctx);
            } else {
                ctx.set_fill_style_str(colour(s.kind));
            }
            let (pad, gap) = if s.kind == StageKind::Queued {
                (5.0, 0.0)
            } else {
                (3.0, 1.0)
            };
            // Prefill chunks keep a pixel between them, so each chunk is its own block.
            let bw = if s.kind == StageKind::Prefill && x1 - x0 > 3.0 {
                x1 - x0 - gap
            } else {
                (x1 - x0).max(1.0)
            };
            ctx.fill_rect(x0, y + pad, bw, ROW_H - 2.0 * pad);
        }
        if selected && t.token_ns.is_empty() {
            token_ticks(ctx, f, &f.sel.token_times, y);
        } else {
            token_ticks(ctx, f, &t.token_ns, y);
        }
        if selected || culprit {
            let x0 = f.v.x(t.arrival_ns).max(0.0);
            let x1 = f.v.x(t.finished_ns).min(w);
            ctx.set_stroke_style_str(if selected { "#1d2430" } else { STALL });
            ctx.set_line_width(if selected { 1.5 } else { 1.0 });
            ctx.stroke_rect(x0 - 1.5, y + 1.5, (x1 - x0 + 3.0).max(3.0), ROW_H - 3.0);
        }
        if culprit {
            // A marker at the track's start: this request's prefill stalled the selected one.
            let x = f.v.x(t.arrival_ns).clamp(6.0, w - 6.0);
            ctx.set_fill_style_str(STALL);
            ctx.begin_path();
            ctx.move_to(x - 5.0, y + ROW_H / 2.0);
            ctx.line_to(x, y + 2.0);
            ctx.line_to(x + 5.0, y + ROW_H / 2.0);
            ctx.line_to(x, y + ROW_H - 2.0);
            ctx.close_path();
            ctx.fill();
        }
    }
}

thread_local! {
    /// The hatch of queued time, made once per page.
    static HATCH: std::cell::OnceCell<Option<web_sys::CanvasPattern>> = const { std::cell::OnceCell::new() };
}

/// Queued time is hatched grey, so waiting reads differently from work at a glance.
fn set_queued_fill(ctx: &CanvasRenderingContext2d) {
    let pattern = HATCH.with(|h| h.get_or_init(|| hatch(ctx)).clone());
    match pattern {
        Some(p) => ctx.set_fill_style_canvas_pattern(&p),
        None => ctx.set_fill_style_str(QUEUED),
    }
}

fn hatch(ctx: &CanvasRenderingContext2d) -> Option<web_sys::CanvasPattern> {
    let doc = web_sys::window()?.document()?;
    let tile: HtmlCanvasElement = doc.create_element("canvas").ok()?.dyn_into().ok()?;
    tile.set_width(6);
    tile.set_height(6);
    let t: CanvasRenderingContext2d = tile.get_context("2d").ok()??.dyn_into().ok()?;
    t.set_fill_style_str("#e4e4e4");
    t.fill_rect(0.0, 0.0, 6.0, 6.0);
    t.set_stroke_style_str(QUEUED);
    t.set_line_width(1.5);
    t.begin_path();
    t.move_to(0.0, 6.0);
    t.line_to(6.0, 0.0);
    t.stroke();
    ctx.create_pattern_with_html_canvas_element(&tile, "repeat")
        .ok()?
}

/// One tick per token, once tokens are far enough apart to tell.
fn token_ticks(ctx: &CanvasRenderingContext2d, f: &Frame, times: &[Nanos], y: f64) {
    if times.len() < 2 {
        return;
    }
    let span = times[times.len() - 1] - times[0];
    if f.v.x(times[0] + span) - f.v.x(times[0]) < 3.0 * times.len() as f64 {
        return;
    }
    ctx.set_fill_style_str("#ffffff");
    for &t in times {
        let x = f.v.x(t);
        if (0.0..=f64::from(f.v.width)).contains(&x) {
            ctx.fill_rect(x - 0.5, y + 3.0, 1.0, ROW_H - 6.0);
        }
    }
}

/// The iteration lane: per step (or per bucket) prefill tokens stacked under decode tokens; with
/// speculative decoding, a strip along its top coloured by the share of drafts accepted.
pub fn lane(ctx: &CanvasRenderingContext2d, v: &Viewport, lane: &Lane, y: f64, h: f64) {
    let bars: Vec<(Nanos, Nanos, f64, f64, DraftSums)> = match lane {
        Lane::Steps { steps } => steps
            .iter()
            .map(|s| {
                (
                    s.start_ns,
                    s.end_ns,
                    f64::from(s.prefill_tokens),
                    f64::from(s.decode_tokens),
                    s.drafts,
                )
            })
            .collect(),
        // Buckets sum many steps: tokens per unit of time, so wide and narrow buckets compare.
        Lane::Buckets { bucket_ns, buckets } => buckets
            .iter()
            .map(|b| {
                let per = *bucket_ns as f64 / 1e6;
                (
                    b.start_ns,
                    b.start_ns + bucket_ns,
                    b.prefill_tokens as f64 / per,
                    b.decode_tokens as f64 / per,
                    b.drafts,
                )
            })
            .collect(),
    };
    let strip = if lane.drafts().is_empty() {
        0.0
    } else {
        SPEC_STRIP_H
    };
    let (y, h) = (y + strip, h - strip);
    let max = bars.iter().map(|b| b.2 + b.3).fold(1.0, f64::max);
    ctx.set_fill_style_str("#f3f5f8");
    ctx.fill_rect(0.0, y - strip, f64::from(v.width), h + strip);
    for (s, e, p, d, drafts) in bars {
        let (x0, x1) = (v.x(s), v.x(e));
        if x1 < 0.0 || x0 > f64::from(v.width) {
            continue;
        }
        let bw = (x1 - x0 - 0.5).max(1.0);
        // A part that is there keeps two pixels, so a step's few decode tokens stay visible
        // beside a prefill of thousands.
        let part = |v: f64| if v > 0.0 { (h * v / max).max(2.0) } else { 0.0 };
        let (ph, dh) = (part(p), part(d));
        ctx.set_fill_style_str(PREFILL);
        ctx.fill_rect(x0, y + h - ph, bw, ph);
        ctx.set_fill_style_str(DECODE);
        ctx.fill_rect(x0, y + h - ph - dh, bw, dh);
        if let Some(a) = drafts.acceptance() {
            ctx.set_fill_style_str(&acceptance_colour(a));
            ctx.fill_rect(x0, y - strip, bw, strip - 2.0);
        }
    }
}

/// Height of the lane's speculation strip, when the steps speculate.
pub const SPEC_STRIP_H: f64 = 8.0;

/// Drafts accepted, from none (vermillion: speculation costs more than it saves) through half
/// (amber) to all (bluish green), on the Okabe–Ito colours the phases use.
pub fn acceptance_colour(a: f64) -> String {
    let (lo, mid, hi) = ((213.0, 94.0, 0.0), (230.0, 159.0, 0.0), (0.0, 158.0, 115.0));
    let a = a.clamp(0.0, 1.0);
    let (from, to, t) = if a < 0.5 {
        (lo, mid, a * 2.0)
    } else {
        (mid, hi, a * 2.0 - 1.0)
    };
    let mix = |x: f64, y: f64| (x + (y - x) * t).round() as u8;
    format!(
        "rgb({},{},{})",
        mix(from.0, to.0),
        mix(from.1, to.1),
        mix(from.2, to.2)
    )
}

fn axis(ctx: &CanvasRenderingContext2d, v: &Viewport, zone: &Zone, y: f64, tracks_h: f64) {
    let step = tick_step(v.span(), (v.width / 90).max(2));
    ctx.set_font("11px system-ui, sans-serif");
    let w = f64::from(v.width);
    for t in ticks(v.from, v.to, step, zone) {
        let x = v.x(t).round() + 0.5;
        ctx.set_fill_style_str("#e3e7ec");
        ctx.fill_rect(x, y + AXIS_H - 4.0, 1.0, tracks_h + 4.0);
        ctx.set_fill_style_str("#5b6473");
        // Labels at the edges stay inside the canvas.
        ctx.set_text_align(if x < 36.0 {
            "left"
        } else if x > w - 36.0 {
            "right"
        } else {
            "center"
        });
        let _ = ctx.fill_text(&clock(t, zone, step), x, y + 14.0);
    }
}

/// The minimap: the whole window's lane with the visible part outlined.
pub fn minimap(
    ctx: &CanvasRenderingContext2d,
    outer: &Viewport,
    lane_data: &Lane,
    visible: &Viewport,
    h: f64,
) {
    self::lane(ctx, outer, lane_data, 2.0, h - 4.0);
    let (x0, x1) = (
        outer.x(visible.from).max(0.0),
        outer.x(visible.to).min(f64::from(outer.width)),
    );
    ctx.set_fill_style_str("rgba(29, 36, 48, 0.10)");
    ctx.fill_rect(0.0, 0.0, x0, h);
    ctx.fill_rect(x1, 0.0, f64::from(outer.width) - x1, h);
    ctx.set_stroke_style_str("#1d2430");
    ctx.set_line_width(1.5);
    ctx.stroke_rect(x0 + 0.75, 0.75, (x1 - x0 - 1.5).max(2.0), h - 1.5);
}

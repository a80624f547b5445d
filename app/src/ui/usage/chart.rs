//! GPU time over the window as stacked bars (SVG, so it renders on the server): a bar per
//! bucket, a segment per group in the table's order, the biggest groups in their own colour and
//! the rest together in grey.

use leptos::prelude::*;

use super::super::chart::nice_max;
use super::super::format::gpu_time;
use super::super::time::{Zone, clock, tick_step, ticks};
use crate::api::Usage;
use crate::model::Nanos;

const W: f64 = 1160.0;
const H: f64 = 190.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 24.0;

/// Okabe–Ito (colour-blind safe) for the first groups; `OTHER` for the rest.
pub const COLOURS: [&str; 7] = [
    "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442",
];
pub const OTHER: &str = "#9aa3ad";

pub fn colour(rank: usize) -> &'static str {
    COLOURS.get(rank).copied().unwrap_or(OTHER)
}

#[component]
pub fn StackedChart(u: Usage, labels: Vec<String>) -> impl IntoView {
    let zone = use_context::<RwSignal<Zone>>().unwrap_or_default();
    let (from, to) = (u.from_ns, u.to_ns.max(u.from_ns + 1));
    let span = (to - from) as f64;
    let x = move |t: Nanos| LEFT + (t - from) as f64 / span * (W - LEFT - RIGHT);
    // Busy seconds per second of the bucket: 1.0 is one instance busy all the time.
    let per_s = u.bucket_ns as f64 / 1e9;
    let top = u
        .buckets
        .iter()
        .map(|b| b.gpu_s.iter().sum::<f64>() / per_s)
        .fold(0.0, f64::max);
    let y_max = nice_max(top.max(0.01));
    let y = move |v: f64| TOP + (1.0 - v / y_max) * (H - TOP - BOTTOM);
    let bw = (x(from + u.bucket_ns) - x(from) - 1.0).max(1.0);
    let bars: Vec<_> = u
        .buckets
        .iter()
        .flat_map(|b| {
            let bx = x(b.start_ns);
            let mut base = 0.0;
            // Biggest groups at the bottom, where their height is easiest to read.
            b.gpu_s
                .iter()
                .enumerate()
                .filter(|(_, s)| **s > 0.0)
                .map(|(k, &s)| {
                    let v = s / per_s;
                    let (y0, y1) = (y(base), y(base + v));
                    base += v;
                    let label = labels.get(k).cloned().unwrap_or_default();
                    let title = format!("{label}: {} of GPU time", gpu_time(s));
                    view! { <rect x=bx y=y1 width=bw height=(y0 - y1).max(0.5) fill=colour(k)><title>{title}</title></rect> }
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let y_ticks: Vec<_> = [0.0, 0.5, 1.0]
        .into_iter()
        .map(|f| f * y_max)
        .map(|v| {
            view! {
                <line x1=LEFT x2=W - RIGHT y1=y(v) y2=y(v) class="grid"/>
                <text x=LEFT - 4.0 y=y(v) + 3.5 text-anchor="end">{format!("{v:.2}")}</text>
            }
        })
        .collect();
    let x_ticks = move || {
        let z = zone.get();
        let step = tick_step(to - from, 8);
        ticks(from, to, step, &z)
            .into_iter()
            .map(|t| view! { <text x=x(t) y=H - BOTTOM + 14.0 text-anchor="middle">{clock(t, &z, step)}</text> })
            .collect_view()
    };
    view! {
        <svg class="chart usage-chart" viewBox=format!("0 0 {W} {H}") role="img"
            aria-label="GPU time over the window, stacked by group" data-testid="usage-chart">
            <g class="axis">{y_ticks}{x_ticks}
                <text x=LEFT + 4.0 y=TOP + 10.0 class="unit">"instances busy (GPU-seconds per second)"</text></g>
            {bars}
        </svg>
    }
}

//! Percentile charts over time (SVG, so they render on the server): TTFT or TPOT p50/p90/p99 per
//! bucket, the SLO as a line, SLO breaches as marks along the bottom, and two brushes: one
//! reports the span of time dragged across the plot, the other the band of latency dragged along
//! the latency axis (which requests count as slow).

use leptos::prelude::*;

use super::format::duration_ms;
use super::time::{Zone, clock, tick_step, ticks};
use crate::api::{LatencyBucket, LatencySeries, Percentiles};
use crate::model::Nanos;

pub const W: f64 = 560.0;
pub const H: f64 = 170.0;
const LEFT: f64 = 52.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 30.0;

/// Side B of a comparison: reddish purple, apart from the SLO's vermillion (Okabe–Ito).
pub const B_COLOUR: &str = "#cc79a7";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    Ttft,
    Tpot,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::Ttft => "TTFT",
            Metric::Tpot => "TPOT",
        }
    }
    /// Its name in URLs (`slow=ttft`).
    pub fn key(self) -> &'static str {
        match self {
            Metric::Ttft => "ttft",
            Metric::Tpot => "tpot",
        }
    }
    fn of(self, b: &LatencyBucket) -> Option<Percentiles> {
        match self {
            Metric::Ttft => b.ttft_ms,
            Metric::Tpot => b.tpot_ms,
        }
    }
    fn over(self, b: &LatencyBucket) -> u32 {
        match self {
            Metric::Ttft => b.ttft_over_slo,
            Metric::Tpot => b.tpot_over_slo,
        }
    }
    fn slo(self, s: &LatencySeries) -> f64 {
        match self {
            Metric::Ttft => s.ttft_slo_ms,
            Metric::Tpot => s.tpot_slo_ms,
        }
    }
}

/// A round upper bound for the y axis: 1, 2 or 5 times a power of ten.
pub fn nice_max(v: f64) -> f64 {
    let p = 10f64.powf(v.max(1e-3).log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&x| x >= v)
        .unwrap_or(10.0 * p)
}

/// One line of the chart: a path through the buckets that have the value, broken where buckets
/// are missing (no requests arrived then).
fn path(
    series: &LatencySeries,
    x: impl Fn(Nanos) -> f64,
    y: impl Fn(f64) -> f64,
    value: impl Fn(&LatencyBucket) -> Option<f64>,
) -> String {
    let mut d = String::new();
    let mut last: Option<Nanos> = None;
    for b in &series.buckets {
        let Some(v) = value(b) else {
            last = None;
            continue;
        };
        let joined = last.is_some_and(|l| b.start_ns - l <= series.bucket_ns);
        let (px, py) = (x(b.start_ns + series.bucket_ns / 2), y(v));
        d.push_str(&format!(
            "{}{px:.1},{py:.1} ",
            if joined { "L" } else { "M" }
        ));
        last = Some(b.start_ns);
    }
    d
}

/// A band of latency picked on the axis: from `min_ms`, up to `max_ms` (`None`: dragged to the
/// top, open above).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Band {
    pub metric: Metric,
    pub min_ms: f64,
    pub max_ms: Option<f64>,
}

/// What a drag is picking: a span of time (across the plot) or a band of latency (along the
/// axis), as the two ends in SVG units.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Drag {
    Time(f64, f64),
    Latency(f64, f64),
}

/// Two significant digits: a dragged 512.3 ms is 510 ms in the URL and the panel.
pub fn round2(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 0.0;
    }
    // Dividing by a whole power of ten keeps 0.073 the double that "0.073" parses to.
    let e = v.log10().floor() as i32 - 1;
    if e >= 0 {
        (v / 10f64.powi(e)).round() * 10f64.powi(e)
    } else {
        (v * 10f64.powi(-e)).round() / 10f64.powi(-e)
    }
}

/// The chart of one metric. `brush` receives the dragged span (from, to) when there is one;
/// `band`, the latency band dragged along the axis.
#[component]
pub fn LatencyChart(
    series: LatencySeries,
    metric: Metric,
    /// A second, dashed series (side B of a comparison), drawn on A's time axis by offset.
    #[prop(optional)]
    overlay: Option<LatencySeries>,
    #[prop(optional)] brush: Option<Callback<(Nanos, Nanos)>>,
    #[prop(optional)] band: Option<Callback<Band>>,
) -> impl IntoView {
    let zone = use_context::<RwSignal<Zone>>().unwrap_or_default();
    let (from, to) = (series.from_ns, series.to_ns.max(series.from_ns + 1));
    let span = (to - from) as f64;
    let x = move |t: Nanos| LEFT + (t - from) as f64 / span * (W - LEFT - RIGHT);
    let t_at = move |px: f64| from + ((px - LEFT) / (W - LEFT - RIGHT) * span) as Nanos;
    let slo = metric.slo(&series);
    // Latencies span decades (10 ms tokens, 10 s prompts): a log scale keeps the SLO line, the
    // typical request and the outliers all readable.
    let values = || {
        series
            .buckets
            .iter()
            .chain(overlay.iter().flat_map(|o| &o.buckets))
            .filter_map(|b| metric.of(b))
    };
    let y_max = nice_max(values().map(|p| p.p99).fold(slo * 1.15, f64::max));
    let low = values().map(|p| p.p50).fold(slo / 2.0, f64::min);
    let y_min = 10f64.powf(low.max(1e-3).log10().floor());
    let (lmin, lmax) = (y_min.ln(), y_max.ln());
    let y =
        move |v: f64| TOP + (1.0 - (v.max(y_min).ln() - lmin) / (lmax - lmin)) * (H - TOP - BOTTOM);
    let v_at =
        move |py: f64| (lmin + (1.0 - (py - TOP) / (H - TOP - BOTTOM)) * (lmax - lmin)).exp();
    let lines = [
        ("p50", "p50", "#56b4e9", "", 1.5),
        ("p90", "p90", "#0072b2", "", 1.8),
        ("p99", "p99", "#1d2430", "4 3", 1.2),
    ];
    let pick = |p: &Percentiles, which: &str| match which {
        "p50" => p.p50,
        "p90" => p.p90,
        _ => p.p99,
    };
    let a_paths: Vec<_> = lines
        .iter()
        .map(|&(label, which, colour, dash, w)| {
            let d = path(&series, x, y, |b| metric.of(b).map(|p| pick(&p, which)));
            view! { <path d=d stroke=colour stroke-dasharray=dash stroke-width=w fill="none"><title>{format!("{} {label}", metric.name())}</title></path> }
        })
        .collect();
    // Side B by offset from its own start, so two windows line up.
    let b_paths: Vec<_> = overlay
        .iter()
        .flat_map(|o| {
            let shift = o.from_ns - from;
            let xb = move |t: Nanos| x(t - shift);
            lines.iter().filter(|l| l.1 != "p50").map(move |&(label, which, _, _, w)| {
                let d = path(o, xb, y, |b| metric.of(b).map(|p| pick(&p, which)));
                view! { <path d=d stroke=B_COLOUR stroke-dasharray="5 3" stroke-width=w fill="none"><title>{format!("B {} {label}", metric.name())}</title></path> }
            })
        })
        .collect();
    let breaches: Vec<_> = series
        .buckets
        .iter()
        .filter(|b| metric.over(b) > 0)
        .map(|b| {
            let n = metric.over(b);
            let h = 4.0 + (f64::from(n)).log2().min(8.0);
            let bx = x(b.start_ns);
            let bw = (x(b.start_ns + series.bucket_ns) - bx).max(1.5);
            let title = format!("{n} of {} requests over the {} SLO", b.requests, metric.name());
            view! { <rect class="breach" x=bx y=H - BOTTOM - h width=bw height=h><title>{title}</title></rect> }
        })
        .collect();
    let y_ticks: Vec<_> = log_ticks(y_min, y_max)
        .into_iter()
        .map(|v| {
            view! {
                <line x1=LEFT x2=W - RIGHT y1=y(v) y2=y(v) class="grid"/>
                <text x=LEFT - 4.0 y=y(v) + 3.5 text-anchor="end">{duration_ms(v)}</text>
            }
        })
        .collect();
    let x_ticks = move || {
        let z = zone.get();
        let step = tick_step(to - from, 5);
        ticks(from, to, step, &z)
            .into_iter()
            .map(|t| {
                // Labels at the edges stay inside the picture.
                let anchor = if x(t) > W - RIGHT - 24.0 { "end" } else if x(t) < LEFT + 24.0 { "start" } else { "middle" };
                view! { <text x=x(t) y=H - BOTTOM + 14.0 text-anchor=anchor>{clock(t, &z, step)}</text> }
            })
            .collect_view()
    };
    let drag = RwSignal::new(None::<Drag>);
    // Where the pointer is in SVG units.
    let at = |ev: &leptos::ev::MouseEvent| -> Option<(f64, f64)> {
        #[cfg(feature = "hydrate")]
        {
            use wasm_bindgen::JsCast;
            let el: web_sys::Element = ev.current_target()?.dyn_into().ok()?;
            let r = el.get_bounding_client_rect();
            Some((
                (f64::from(ev.client_x()) - r.left()) / r.width() * W,
                (f64::from(ev.client_y()) - r.top()) / r.height() * H,
            ))
        }
        #[cfg(not(feature = "hydrate"))]
        {
            let _ = ev;
            None
        }
    };
    let start = move |(px, py): (f64, f64)| {
        if px < LEFT && band.is_some() {
            drag.set(Some(Drag::Latency(py, py)));
        } else if brush.is_some() {
            drag.set(Some(Drag::Time(px, px)));
        }
    };
    let extend = move |(px, py): (f64, f64)| match drag.get_untracked() {
        Some(Drag::Time(a, _)) => drag.set(Some(Drag::Time(a, px))),
        Some(Drag::Latency(a, _)) => drag.set(Some(Drag::Latency(a, py))),
        None => {}
    };
    // The band between two drag ends: its top and bottom in SVG units, and its latencies (a band
    // dragged to the top of the plot is open above).
    let band_between = move |a: f64, b: f64| {
        let (top, bottom) = (a.min(b).max(TOP), a.max(b).min(H - BOTTOM));
        let max_ms = (top > TOP + 2.0).then(|| round2(v_at(top)));
        (top, bottom, round2(v_at(bottom)), max_ms)
    };
    let finish = move || match (drag.get_untracked(), brush, band) {
        (Some(Drag::Time(a, b)), Some(cb), _) => {
            drag.set(None);
            let (l, r) = (a.min(b).max(LEFT), a.max(b).min(W - RIGHT));
            if r - l >= 4.0 {
                cb.run((t_at(l), t_at(r)))
            }
        }
        (Some(Drag::Latency(a, b)), _, Some(cb)) => {
            drag.set(None);
            let (top, bottom, min_ms, max_ms) = band_between(a, b);
            if bottom - top >= 4.0 {
                cb.run(Band {
                    metric,
                    min_ms,
                    max_ms,
                })
            }
        }
        _ => drag.set(None),
    };
    let slo_y = y(slo);
    let band_title = format!(
        "Drag along the {} axis to call the requests in that band slow and see what they have in common",
        metric.name()
    );
    view! {
        <svg class="chart" viewBox=format!("0 0 {W} {H}") role="img"
            aria-label=format!("{} p50, p90 and p99 over time", metric.name())
            data-metric=metric.key()
            on:mousedown=move |ev| if let Some(p) = at(&ev) { start(p) }
            on:mousemove=move |ev| if let Some(p) = at(&ev) { extend(p) }
            on:mouseleave=move |_| drag.set(None)
            on:mouseup=move |_| finish()>
            <g class="axis">{y_ticks}{x_ticks}</g>
            {band.is_some().then(|| view! {
                <rect class="band-handle" data-testid="latency-axis" x=0 y=TOP width=LEFT height=H - TOP - BOTTOM><title>{band_title}</title></rect>
            })}
            <line class="slo" x1=LEFT x2=W - RIGHT y1=slo_y y2=slo_y/>
            <text class="slo-label" x=W - RIGHT - 2.0 y=slo_y - 3.0 text-anchor="end">{format!("SLO {}", duration_ms(slo))}</text>
            {breaches}
            {a_paths}
            {b_paths}
            {move || drag.get().map(|d| match d {
                Drag::Time(a, b) => view! { <rect class="brush" x=a.min(b) y=TOP width=(a - b).abs() height=H - TOP - BOTTOM/> }.into_any(),
                Drag::Latency(a, b) => {
                    let (top, bottom, min_ms, max_ms) = band_between(a, b);
                    let label = format!("{} – {}", duration_ms(min_ms), max_ms.map_or("any".into(), duration_ms));
                    view! {
                        <rect class="brush band" x=LEFT y=top width=W - LEFT - RIGHT height=bottom - top/>
                        <text class="band-label" x=LEFT + 4.0 y=top + 11.0>{label}</text>
                    }.into_any()
                }
            })}
        </svg>
    }
}

/// Ticks of a log axis: 1, 2 and 5 times each power of ten in range, thinned to the powers
/// alone when that would be more than eight.
fn log_ticks(min: f64, max: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut p = min;
    while p <= max * 1.0001 {
        out.extend(
            [p, 2.0 * p, 5.0 * p]
                .into_iter()
                .filter(|&v| v <= max * 1.0001),
        );
        p *= 10.0;
    }
    if out.len() > 8 {
        out.retain(|v| (v.log10() - v.log10().round()).abs() < 1e-9);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{log_ticks, nice_max, round2};

    #[test]
    fn dragged_latencies_are_round() {
        assert_eq!(round2(512.3), 510.0);
        assert_eq!(round2(2_049.0), 2_000.0);
        assert_eq!(round2(0.0734).to_string(), "0.073");
        assert_eq!(round2(0.0), 0.0);
    }

    #[test]
    fn log_ticks_are_round_and_few() {
        assert_eq!(log_ticks(10.0, 100.0), vec![10.0, 20.0, 50.0, 100.0]);
        let wide = log_ticks(0.1, 10_000.0);
        assert_eq!(wide.len(), 6, "{wide:?}");
    }

    #[test]
    fn y_axis_tops_are_round() {
        assert_eq!(nice_max(57.5), 100.0);
        assert_eq!(nice_max(2300.0), 5000.0);
        assert_eq!(nice_max(0.4), 0.5);
        assert_eq!(nice_max(10.0), 10.0);
    }
}

//! The request's own timeline as one strip: queued, each prefill chunk, decode, preemptions, KV
//! transfer, with the stalled stretches hatched; then the time each kind took in words. Positioned
//! boxes in percent, so the strip is crisp at any width and rendered on the server.

use leptos::prelude::*;

use super::Rq;
use crate::api::StageKind;
use crate::model::Nanos;
use crate::ui::format::{duration_ms, thousands};

fn class(k: StageKind) -> &'static str {
    match k {
        StageKind::Queued => "st st-queued",
        StageKind::Prefill => "st st-prefill",
        StageKind::Decode => "st st-decode",
        StageKind::Preempted => "st st-preempted",
        StageKind::KvTransfer => "st st-kv",
    }
}

/// Time per kind of stage, in the order a request lives them, with counts and tokens.
fn totals(stages: &[crate::api::Stage]) -> Vec<String> {
    [
        StageKind::Queued,
        StageKind::KvTransfer,
        StageKind::Prefill,
        StageKind::Decode,
        StageKind::Preempted,
    ]
    .into_iter()
    .filter_map(|k| {
        let of: Vec<_> = stages.iter().filter(|s| s.kind == k).collect();
        if of.is_empty() {
            return None;
        }
        let ns: Nanos = of.iter().map(|s| s.end_ns - s.start_ns).sum();
        let tokens: u32 = of.iter().filter_map(|s| s.tokens).sum();
        let mut t = format!("{} {}", k.label(), duration_ms(ns as f64 / 1e6));
        match (k, of.len()) {
            (StageKind::Prefill, n) => t.push_str(&format!(
                " ({n} chunk{}, {} tokens)",
                if n == 1 { "" } else { "s" },
                thousands(tokens.into())
            )),
            (StageKind::Decode, _) if tokens > 0 => {
                t.push_str(&format!(" ({} tokens)", thousands(tokens.into())))
            }
            (_, n) if n > 1 => t.push_str(&format!(" ({n}×)")),
            _ => {}
        }
        Some(t)
    })
    .collect()
}

/// A bar's hover: its kind and length, and what it carried (a chunk's tokens; what a preemption
/// made room for and will compute again; a KV transfer's size).
fn title(s: &crate::api::Stage) -> String {
    let mut t = format!(
        "{} {}",
        s.kind.label(),
        duration_ms((s.end_ns - s.start_ns) as f64 / 1e6)
    );
    match s.kind {
        StageKind::Preempted => {
            if let Some(by) = &s.by {
                t.push_str(&format!(" · to make room for {by}"));
            }
            if let Some(n) = s.tokens {
                t.push_str(&format!(
                    " · {} tokens to compute again",
                    thousands(n.into())
                ));
            }
        }
        StageKind::KvTransfer => {
            if let Some(b) = s.blocks {
                t.push_str(&format!(" · {} blocks", thousands(b.into())));
            }
            if let Some(b) = s.bytes {
                t.push_str(&format!(" · {:.1} MB", b as f64 / 1e6));
            }
        }
        _ => {
            if let Some(n) = s.tokens {
                t.push_str(&format!(" · {} tokens", thousands(n.into())));
            }
        }
    }
    t
}

/// `Preempted to make room for X (1,200 tokens to compute again)`, each aggressor linked.
fn aggressors(
    stages: &[crate::api::Stage],
    instance: &str,
    live: bool,
) -> Option<impl IntoView + use<>> {
    let items: Vec<_> = stages
        .iter()
        .filter(|s| s.kind == StageKind::Preempted)
        .filter_map(|s| Some((s, s.by.clone()?)))
        .map(|(s, by)| {
            let name = if live {
                view! { <a href=crate::links::request_href(instance, &by)>{by.clone()}</a> }
                    .into_any()
            } else {
                view! { <b>{by.clone()}</b> }.into_any()
            };
            let again = s
                .tokens
                .map(|n| format!(" ({} tokens to compute again)", thousands(n.into())))
                .unwrap_or_default();
            view! { <li>"Preempted to make room for "{name}{again}</li> }
        })
        .collect();
    (!items.is_empty())
        .then(|| view! { <ul class="muted preempted-by" data-testid="preempted-by">{items}</ul> })
}

#[component]
pub fn Strip(rq: Rq) -> impl IntoView {
    let th = rq.th.get_value();
    rq.d.with_value(|d| {
        if d.stages.is_empty() {
            return ().into_any();
        }
        let (t0, t1) = (d.summary.arrival_ns, d.finished_ns.max(d.summary.arrival_ns + 1));
        let pct = |ns: Nanos| ((ns - t0) as f64 / (t1 - t0) as f64 * 100.0).clamp(0.0, 100.0);
        let boxes = d
            .stages
            .iter()
            .map(|s| {
                let (l, r) = (pct(s.start_ns), pct(s.end_ns));
                let title = title(s);
                view! { <div class=class(s.kind) style=format!("left:{l:.3}%;width:{:.3}%", (r - l).max(0.15)) title=title></div> }
            })
            .collect_view();
        let stalled = d.stalls(th.ttft_ms, th.tpot_ms)
            .into_iter()
            .map(|(a, b)| {
                let (l, r) = (pct(a), pct(b));
                view! { <div class="st st-stall" style=format!("left:{l:.3}%;width:{:.3}%", (r - l).max(0.3)) title=format!("stalled {}", duration_ms((b - a) as f64 / 1e6))></div> }
            })
            .collect_view();
        view! {
            <section class="panel rq-stages">
                <div class="section-head"><h2>"Stages"</h2>
                    <span class="legend"><i class="sw-queued"></i>"queued"<i class="sw-prefill"></i>"prefill"<i class="sw-decode"></i>"decode"<i class="sw-preempted"></i>"preempted"<i class="sw-kv"></i>"KV transfer"<i class="sw-stall-hatch"></i>"stalled past the SLO"</span>
                </div>
                <div class="strip" data-testid="stage-strip">{boxes}{stalled}</div>
                <div class="strip-axis muted"><span>"0"</span><span>{duration_ms((t1 - t0) as f64 / 1e6)}</span></div>
                <p class="muted strip-totals">{totals(&d.stages).join(" · ")}</p>
                {aggressors(&d.stages, &d.summary.instance, rq.live)}
            </section>
        }
        .into_any()
    })
}

//! Prompt families: the window's requests grouped by the block-hash chains of their prompts
//! (a system prompt, a template nested in it, a conversation), each with how often the prefix
//! cache served its prefix over the window, the TTFT with and without, and — for the requests
//! that computed it although it was warm — why, in a sentence. A family is one click from the
//! explorer's filter.

use std::cmp::Reverse;

use leptos::prelude::*;

use super::state::ExplorerQuery;
use crate::api::{Family, Fingerprints, MissWhy, WarmMiss};
use crate::links::request_href;
use crate::ui::format::{duration_ms, thousands};

/// Families shown in the table (the API lists more).
const ROWS: usize = 12;

fn short(fingerprint: &str) -> String {
    fingerprint.chars().take(8).collect()
}

fn percent(part: u64, all: u64) -> String {
    format!("{:.0} %", part as f64 * 100.0 / all.max(1) as f64)
}

/// The panel when open: the answer first (the family whose warm misses cost the most), then
/// the families, then the warm misses of those shown.
#[component]
pub fn FamiliesPanel(fp: Fingerprints, query: ExplorerQuery) -> impl IntoView {
    let close = query.with(|q| q.families = false).href();
    let shown: Vec<&Family> = fp.families.iter().take(ROWS).collect();
    let read = if fp.truncated {
        format!(
            "The latest {} requests with a fingerprint in this window.",
            thousands(fp.requests)
        )
    } else {
        format!(
            "{} requests with a fingerprint in this window.",
            thousands(fp.requests)
        )
    };
    let lead = fp
        .families
        .iter()
        .filter(|f| f.warm_misses > 0)
        .min_by_key(|f| (Reverse(f.warm_misses), Reverse(f.requests)))
        .or(fp.families.first())
        .map(lead);
    let body = if shown.is_empty() {
        view! { <p class="empty">"No two requests in this window start with the same prompt blocks (or the engines sent no block hashes: see docs/CAPTURE.md)."</p> }
            .into_any()
    } else {
        let rows = shown.iter().map(|f| row(f, &query)).collect_view();
        view! {
            <table class="common-table families-table">
                <thead><tr>
                    <th>"Family (shared prefix)"</th><th class="num">"Requests"</th>
                    <th>"Prefix from cache"</th><th>"Hits over its span"</th>
                    <th class="num">"TTFT p50 hit / computed"</th><th class="num">"Warm misses"</th>
                </tr></thead>
                <tbody>{rows}</tbody>
            </table>
        }
        .into_any()
    };
    let misses: Vec<(String, WarmMiss)> = shown
        .iter()
        .flat_map(|f| f.misses.iter().map(|m| (short(&f.fingerprint), m.clone())))
        .collect();
    let misses = (!misses.is_empty()).then(|| {
        let items = misses
            .into_iter()
            .map(|(family, m)| miss(&family, &m))
            .collect_view();
        view! {
            <h3 class="families-sub">"Why warm families missed"</h3>
            <ul class="warm-misses" data-testid="warm-misses">{items}</ul>
        }
    });
    view! {
        <section class="panel common families" data-testid="families">
            <div class="chart-head">
                <h2>"Prompt families"</h2>
                <span class="hint">"Requests whose prompts start with the same KV blocks (by the engines' block hashes; no prompt text is read)"</span>
                <a class="hint" href=close>"hide"</a>
            </div>
            {lead}
            <p class="common-head">{read}</p>
            {body}
            {misses}
        </section>
    }
}

fn lead(f: &Family) -> impl IntoView + use<> {
    let mut text = format!(
        " {} requests share its {}-token prefix; {} were served it from the cache",
        thousands(f.requests),
        thousands(f.tokens.into()),
        percent(f.hits, f.requests),
    );
    if f.warm_misses > 0 {
        text.push_str(&format!(
            ", and {} computed it again although it was warm (below: why)",
            thousands(f.warm_misses)
        ));
    }
    if let (Some(hit), Some(miss)) = (f.ttft_hit_ms, f.ttft_miss_ms) {
        text.push_str(&format!(
            ". TTFT p50 {} with the cached prefix, {} without.",
            duration_ms(hit),
            duration_ms(miss)
        ));
    } else {
        text.push('.');
    }
    view! {
        <p class="common-lead" data-testid="families-lead">
            <b>{format!("Family {}", short(&f.fingerprint))}</b>{text}
        </p>
    }
}

fn row(f: &Family, query: &ExplorerQuery) -> impl IntoView + use<> {
    let filter = query.with(|q| q.fingerprint = f.fingerprint.clone()).href();
    let nested = f.parent.is_some();
    let name = format!(
        "{} · {} tokens",
        short(&f.fingerprint),
        thousands(f.tokens.into())
    );
    let within = f
        .parent
        .as_ref()
        .map(|p| format!("after family {}", short(p)));
    let instances = f.instances.join(", ");
    let hit_w = format!(
        "width:{:.1}%",
        f.hits as f64 * 100.0 / f.requests.max(1) as f64
    );
    let ttft = format!(
        "{} / {}",
        f.ttft_hit_ms.map_or("–".into(), duration_ms),
        f.ttft_miss_ms.map_or("–".into(), duration_ms)
    );
    view! {
        <tr data-testid="family-row" data-fingerprint=f.fingerprint.clone() class:nested=nested>
            <td class="value">
                <a href=filter title="Show only this family's requests">{name}</a>
                {within.map(|w| view! { <span class="sure">{w}</span> })}
            </td>
            <td class="num" title=instances.clone()>{thousands(f.requests)}
                <span class="sure">{format!("on {}", instances)}</span></td>
            <td class="shares">
                <div class="share hit" title="Requests served the whole prefix from the cache"><i style=hit_w></i></div>
                <span class="sure">{format!("{} of {} ({})", thousands(f.hits), thousands(f.requests), percent(f.hits, f.requests))}</span>
            </td>
            <td>{cells(f)}</td>
            <td class="num">{ttft}</td>
            <td class="num">{thousands(f.warm_misses)}</td>
        </tr>
    }
}

/// Hits (green) and misses (orange) per cell of the window, as stacked columns.
fn cells(f: &Family) -> impl IntoView + use<> {
    let cells = &f.cells;
    let (w, h) = (120.0, 22.0);
    let most = cells
        .iter()
        .map(|c| c.hits + c.misses)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let step = w / cells.len().max(1) as f64;
    let bars = cells
        .iter()
        .enumerate()
        .flat_map(|(k, c)| {
            let x = k as f64 * step;
            let hit = f64::from(c.hits) / most * h;
            let miss = f64::from(c.misses) / most * h;
            [
                (x, h - hit, hit, "hit"),
                (x, h - hit - miss, miss, "miss"),
            ]
        })
        .filter(|b| b.2 > 0.0)
        .map(|(x, y, bh, class)| {
            view! { <rect class=class x=format!("{x:.1}") y=format!("{y:.1}") width=format!("{:.1}", (step - 1.0).max(1.0)) height=format!("{bh:.1}")/> }
        })
        .collect_view();
    let span = duration_ms((f.last_ns - f.first_ns) as f64 / 1e6);
    let title = format!(
        "Requests served the prefix (green) or computing it (orange), from the family's first request to its last ({span}) in {} steps",
        cells.len()
    );
    let label = title.clone();
    view! {
        <svg class="hit-cells" width=w height=h viewBox=format!("0 0 {w} {h}") role="img" aria-label=label>
            <title>{title}</title>
            {bars}
        </svg>
        <span class="sure">{format!("over {span}")}</span>
    }
}

fn miss(family: &str, m: &WarmMiss) -> impl IntoView + use<> {
    let href = request_href(&m.instance, &m.request_id);
    let why = match &m.why {
        MissWhy::ColdInstance { warm_on } => format!(
            "{} had never computed it, though {} had: a cold instance.",
            m.instance, warm_on
        ),
        MissWhy::InFlight { earlier } => format!(
            "{} on {} was still computing it when this one arrived.",
            earlier, m.instance
        ),
        MissWhy::Evicted {
            last_by,
            last_ns,
            since,
        } => {
            let ago = duration_ms((m.arrival_ns - last_ns) as f64 / 1e6);
            let mut s = format!(
                "{} had it ({} computed it {} before) and no longer did: evicted.",
                m.instance, last_by, ago
            );
            if let Some(p) = since {
                let top = p
                    .top
                    .iter()
                    .map(|(id, n)| format!("{id} ({})", thousands(*n)))
                    .collect::<Vec<_>>()
                    .join(", ");
                s.push_str(&format!(
                    " Since then it computed {} prompt tokens for {} requests, the most for {}.",
                    thousands(p.tokens),
                    thousands(p.requests),
                    top
                ));
            }
            s
        }
    };
    let kind = match m.why {
        MissWhy::ColdInstance { .. } => "cold",
        MissWhy::InFlight { .. } => "in-flight",
        MissWhy::Evicted { .. } => "evicted",
    };
    view! {
        <li data-testid="warm-miss" data-kind=kind>
            <span class="sure">{format!("family {family}")}</span>" "
            <a href=href>{m.request_id.clone()}</a>
            {format!(" computed {}: ", if m.cached_tokens > 0 { "part of it" } else { "it" })}
            <span class="why">{why}</span>
        </li>
    }
}

/// The button that opens the panel.
#[component]
pub fn OpenFamilies(query: ExplorerQuery) -> impl IntoView {
    let open = query.with(|q| q.families = true).href();
    view! {
        <a class="common-open" href=open data-testid="families-open">"Which prompts share a prefix, and did the cache serve it?"</a>
    }
}

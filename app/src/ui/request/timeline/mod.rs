//! The token timeline: one bar per output token (height = its latency, split into waiting to be
//! scheduled and computing), the SLO line, the batch and queue of each token's step below, and
//! a strip marking tokens that waited while other requests prefilled. Bars on canvas; the stalled
//! tokens and their culprits are also listed as DOM (links, and readable without the canvas).
//! Drag to brush a range of tokens (selected in the word-choice view), click to select one.

#[cfg(feature = "hydrate")]
mod draw;
pub mod geometry;
#[cfg(feature = "hydrate")]
mod input;

use leptos::prelude::*;

use super::Rq;
use super::token_text::plain;
use crate::api::TokenView;
use crate::ui::format::{duration_ms, thousands};

/// CSS heights of the canvas's parts.
pub const BARS_H: f64 = 150.0;
pub const MARK_H: f64 = 8.0;
pub const LOAD_H: f64 = 40.0;
pub const AXIS_H: f64 = 18.0;
pub const TOP: f64 = 10.0;
/// Room for the latency labels left of the bars.
pub const LEFT: f64 = 64.0;
pub const HEIGHT: f64 = TOP + BARS_H + MARK_H + LOAD_H + AXIS_H;

/// The tokens whose wait broke an SLO while other requests prefilled: the story in words.
fn stalled(tokens: &[TokenView], slo: geometry::Slo) -> Vec<&TokenView> {
    tokens
        .iter()
        .filter(|t| !t.prefilled_meanwhile.is_empty() && geometry::is_breach(t, slo))
        .collect()
}

#[component]
pub fn Timeline(rq: Rq) -> impl IntoView {
    let th = rq.th.get_value();
    #[cfg(feature = "hydrate")]
    input::start(rq);
    let (list, total, breaches) = rq.d.with_value(|d| {
        let all = stalled(&d.tokens, geometry::Slo::of(&th));
        let breaches = d
            .tokens
            .iter()
            .skip(1)
            .filter(|t| t.latency_ms.is_some_and(|l| l > th.tpot_ms))
            .count();
        let instance = d.summary.instance.clone();
        let list = all
            .iter()
            .take(8)
            .map(|t| {
                let i = t.index;
                let who = t.prefilled_meanwhile.len();
                let culprits = t
                    .prefilled_meanwhile
                    .iter()
                    .take(6)
                    .map(|c| crate::ui::finding::culprit(&instance, c))
                    .collect_view();
                view! {
                    <li data-token=i>
                        <button class="link" on:click=move |_| rq.tok.set(Some(i))>{format!("token #{i}")}</button>
                        <code>{plain(t)}</code>
                        {format!(" waited {} while {} request{} prefilled {} prompt tokens: ",
                            duration_ms(t.latency_ms.unwrap_or(0.0)), who, if who == 1 { "" } else { "s" },
                            thousands(t.prefill_tokens_meanwhile.into()))}
                        <span class="culprits inline">{culprits}</span>{(who > 6).then(|| format!(" and {} more", who - 6))}
                    </li>
                }
            })
            .collect_view();
        (list, all.len(), breaches)
    });
    let n = rq.tokens_len();
    let readout = move || {
        let sel = rq.range.get();
        match sel {
            Some((a, b)) => format!(
                "tokens {a}–{b} selected ({} of {}) · Esc clears",
                b - a + 1,
                thousands(n.into())
            ),
            None => "drag across the bars to select tokens; click one to inspect it".into(),
        }
    };
    let drafted =
        rq.d.with_value(|d| d.tokens.iter().any(|t| t.accepted_draft == Some(true)));
    view! {
        <section class="panel rq-timeline">
            <div class="section-head">
                <h2>"Token latency"</h2>
                <span class="muted">{format!("{} tokens · {} over the {} TPOT SLO", thousands(n.into()), breaches, duration_ms(th.tpot_ms))}</span>
                <span class="legend"><i class="sw-decode"></i>"computing"<i class="sw-wait"></i>"waiting to be scheduled"<i class="sw-over"></i>"over the SLO"<i class="sw-prefill"></i>"others prefilled meanwhile"<i class="l-batch"></i>"batch"<i class="l-waiting"></i>"queue"
                    {drafted.then(|| view! { <i class="sw-draft"></i>"accepted draft" })}</span>
                <label class="toggle"><input type="checkbox" data-testid="log-scale" prop:checked=move || rq.log.get()
                    on:change=move |ev| rq.log.set(event_target_checked(&ev))/>" log scale"</label>
            </div>
            <div class="tl-wrap">
                <canvas node_ref=rq.canvas class="tl-canvas" data-testid="token-timeline" tabindex="0"
                    style=format!("height:{HEIGHT}px")></canvas>
                // One element kept and rewritten: a pointer move changes a text and a style,
                // never the page's structure.
                <div class="wf-tip tl-tip" data-testid="tl-tip"
                    style=move || match rq.hover.get() {
                        Some((x, y, _)) => format!("left:{}px;top:{}px", x + 14.0, y + 12.0),
                        None => "display:none".into(),
                    }>
                    {move || rq.hover.get().map(|h| tooltip_lines(rq, h.2).join("\n")).unwrap_or_default()}
                </div>
            </div>
            <p class="muted tl-readout" data-testid="range-readout">{readout}</p>
            {(total > 0).then(|| view! {
                <div class="tl-stalls">
                    <h3>"Stalled while others prefilled"</h3>
                    <ul data-testid="stalled-tokens">{list}</ul>
                    {(total > 8).then(|| view! { <p class="muted">{format!("and {} more tokens", total - 8)}</p> })}
                </div>
            })}
        </section>
    }
}

fn tooltip_lines(rq: Rq, i: u32) -> Vec<String> {
    rq.d.with_value(|d| {
        let Some(t) = d.tokens.get(i as usize) else {
            return Vec::new();
        };
        let mut lines = vec![format!("#{i}  {}", plain(t))];
        if let Some(l) = t.latency_ms {
            let what = if i == 0 {
                "first token after"
            } else {
                "after the previous"
            };
            let split = match (t.wait_ms, t.compute_ms) {
                (Some(w), Some(c)) => {
                    format!(" (waited {}, computed {})", duration_ms(w), duration_ms(c))
                }
                _ => String::new(),
            };
            lines.push(format!("{} {what}{split}", duration_ms(l)));
        }
        if t.batch_size.is_some() || t.waiting.is_some() {
            lines.push(format!(
                "step: batch {} · queue {}{}",
                t.batch_size.map_or("–".into(), |b| b.to_string()),
                t.waiting.map_or("–".into(), |b| b.to_string()),
                t.step_prefill_tokens
                    .filter(|p| *p > 0)
                    .map(|p| format!(" · {} prefill tokens", thousands(p.into())))
                    .unwrap_or_default()
            ));
        }
        if !t.prefilled_meanwhile.is_empty() {
            let n = t.prefilled_meanwhile.len();
            lines.push(format!(
                "meanwhile prefilled: {}{}",
                t.prefilled_meanwhile
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
                if n > 3 {
                    format!(" +{}", n - 3)
                } else {
                    String::new()
                }
            ));
        }
        if let Some(p) = t.probability {
            lines.push(format!(
                "p {:.3}{}",
                p,
                t.rank.map(|r| format!(" · rank {r}")).unwrap_or_default()
            ));
        }
        lines
    })
}

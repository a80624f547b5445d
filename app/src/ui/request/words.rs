//! Word choice: the answer token by token, tinted by how likely each chosen token was; special
//! tokens as chips, invisible characters as escapes, whitespace drawable. Click a token (or press
//! ←/→) to inspect it; the brushed range of the timeline is highlighted here when the brush ends.
//! The text is rendered once; selection and range are classes on the spans that change, so
//! nothing re-renders the 8,000 spans.

use leptos::prelude::*;

use super::token_text::{Piece, chip, pieces};
use super::{Rq, flagged, token_panel};
use crate::api::TokenView;

fn tint(t: &TokenView) -> &'static str {
    match t.probability {
        Some(p) if p < 0.5 => " p-lo",
        Some(p) if p < 0.9 => " p-mid",
        _ => "",
    }
}

/// Word-choice flags (not latency): the ones the list steps through.
pub fn word_flagged(t: &TokenView) -> bool {
    t.flags
        .iter()
        .any(|f| f == "low_probability_eos" || f == "far_from_top")
}

fn span(t: &TokenView, ws: bool) -> impl IntoView + use<> {
    let mut class = String::from("tk");
    class.push_str(tint(t));
    if word_flagged(t) {
        class.push_str(" flag");
    }
    if t.flags.iter().any(|f| f == "slo_breach") {
        class.push_str(" slow");
    }
    if t.accepted_draft == Some(true) {
        class.push_str(" draft");
    }
    if t.flags.iter().any(|f| f == "repeated") {
        class.push_str(" loop");
    }
    let body = match chip(t) {
        Some(c) => {
            class.push_str(" special");
            view! { {c} }.into_any()
        }
        None => pieces(t.text.as_deref().unwrap_or(""), ws)
            .into_iter()
            .map(|p| match p {
                Piece::Text(s) => view! { {s} }.into_any(),
                Piece::Odd(s) => view! { <span class="odd">{s}</span> }.into_any(),
            })
            .collect_view()
            .into_any(),
    };
    view! { <span class=class data-i=t.index>{body}</span> }
}

/// `Speculative decoding: 87 of 124 draft tokens accepted (70 %) over 31 steps, 3.8 tokens a
/// step` when the steps that made the tokens verified drafts.
fn speculation(tokens: &[TokenView]) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    let (mut proposed, mut accepted, mut steps, mut made) = (0u64, 0u64, 0u64, 0u64);
    for t in tokens {
        let Some(d) = t.step_draft else { continue };
        made += 1;
        if seen.insert(t.iteration) {
            steps += 1;
            proposed += u64::from(d.proposed);
            accepted += u64::from(d.accepted);
        }
    }
    (proposed > 0).then(|| {
        format!(
            "Speculative decoding: {accepted} of {proposed} draft tokens accepted ({:.0} %) over {steps} steps, {:.1} tokens a step",
            accepted as f64 * 100.0 / proposed as f64,
            made as f64 / steps as f64
        )
    })
}

#[component]
pub fn Words(rq: Rq) -> impl IntoView {
    #[cfg(feature = "hydrate")]
    live::start(rq);
    let click = move |ev: leptos::ev::MouseEvent| {
        #[cfg(feature = "hydrate")]
        if let Some(i) = live::token_at(&ev) {
            rq.tok.set(Some(i));
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = ev;
    };
    let flow = move || {
        let ws = rq.ws.get();
        rq.d.with_value(|d| d.tokens.iter().map(|t| span(t, ws)).collect_view())
    };
    let n = rq.tokens_len();
    let spec = rq.d.with_value(|d| speculation(&d.tokens));
    let looped = rq.d.with_value(|d| {
        d.tokens
            .iter()
            .any(|t| t.flags.iter().any(|f| f == "repeated"))
    });
    // Timing-only sources (TensorRT-LLM perf metrics) send no text, id or probability: there is
    // no answer to show, only a row of empty chips.
    let has_words = rq.d.with_value(|d| {
        d.tokens
            .iter()
            .any(|t| t.text.is_some() || t.token_id.is_some() || t.logprob.is_some())
    });
    view! {
        <section class="panel rq-words">
            <div class="section-head">
                <h2>"Word choice"</h2>
                <span class="legend">"probability of the chosen token: "<i class="sw-p-hi"></i>"≥ 0.9"<i class="sw-p-mid"></i>"0.5–0.9"<i class="sw-p-lo"></i>"< 0.5"
                    <span class="flag-mark">"⚑"</span>"flagged"<span class="slow-mark">"┈"</span>"slow token"
                    {spec.is_some().then(|| view! { <span class="draft-mark">"▔"</span>"accepted draft" })}
                    {looped.then(|| view! { <span class="loop-mark">"〰"</span>"repeats a span (a loop)" })}</span>
                <label class="toggle"><input type="checkbox" data-testid="show-ws" prop:checked=move || rq.ws.get()
                    on:change=move |ev| rq.ws.set(event_target_checked(&ev))/>" show whitespace"</label>
            </div>
            {spec.map(|s| view! { <p class="spec-summary" data-testid="spec-summary">{s}</p> })}
            <div class="words-body">
                {if n == 0 {
                    view! { <p class="empty">"No output tokens were reported for this request."</p> }.into_any()
                } else if !has_words {
                    view! { <p class="empty" data-testid="no-words">{format!("This source reports the {n} tokens' times but not their text, ids or probabilities (TensorRT-LLM's perf metrics do not carry them). Send logprobs (an OpenAI-style response, or the engine's token events) to see the word choice.")}</p> }.into_any()
                } else {
                    view! { <div class="flow" node_ref=rq.flow data-testid="word-flow" on:click=click>{flow}</div> }.into_any()
                }}
                <aside class="token-side">
                    <token_panel::TokenPanel rq=rq/>
                    <flagged::Flagged rq=rq/>
                </aside>
            </div>
        </section>
    }
}

/// Scrolls the flow so token `i` is in view (after a click on the timeline).
#[cfg(feature = "hydrate")]
pub fn reveal(rq: Rq, i: u32) {
    live::reveal(rq, i);
}

#[cfg(feature = "hydrate")]
mod live {
    use leptos::prelude::*;
    use wasm_bindgen::JsCast;

    use super::super::Rq;

    fn span(rq: Rq, i: u32) -> Option<web_sys::HtmlElement> {
        rq.flow.get_untracked()?.children().item(i)?.dyn_into().ok()
    }

    pub fn token_at(ev: &leptos::ev::MouseEvent) -> Option<u32> {
        ev.target()?
            .dyn_into::<web_sys::Element>()
            .ok()?
            .closest("[data-i]")
            .ok()??
            .get_attribute("data-i")?
            .parse()
            .ok()
    }

    pub fn reveal(rq: Rq, i: u32) {
        let (Some(flow), Some(el)) = (rq.flow.get_untracked(), span(rq, i)) else {
            return;
        };
        let (top, h) = (el.offset_top(), flow.client_height());
        if top < flow.scroll_top() || top > flow.scroll_top() + h - 24 {
            flow.set_scroll_top((top - h / 3).max(0));
        }
    }

    fn set(rq: Rq, i: u32, class: &str, on: bool) {
        if let Some(el) = span(rq, i) {
            let list = el.class_list();
            let _ = if on {
                list.add_1(class)
            } else {
                list.remove_1(class)
            };
        }
    }

    /// A class on each span that enters or leaves the range. (A CSS custom highlight moves
    /// cheaper, but makes every later frame repaint thousands of highlighted fragments: 33–50 ms
    /// a frame in Chromium for 5,000 tokens, against a one-time 26 ms for the classes.)
    fn mark_by_class(rq: Rq, old: Option<(u32, u32)>, new: Option<(u32, u32)>) {
        let inside = |r: Option<(u32, u32)>, i: u32| r.is_some_and(|(a, b)| a <= i && i <= b);
        if let Some((a, b)) = old {
            for i in (a..=b).filter(|i| !inside(new, *i)) {
                set(rq, i, "in-range", false);
            }
        }
        if let Some((a, b)) = new {
            for i in (a..=b).filter(|i| !inside(old, *i)) {
                set(rq, i, "in-range", true);
            }
        }
    }

    pub fn start(rq: Rq) {
        // What is marked now; after the text re-renders (whitespace toggled) nothing is.
        let marked = StoredValue::new((None::<u32>, None::<(u32, u32)>));
        Effect::new(move |prev_ws: Option<bool>| {
            let ws = rq.ws.get();
            let (tok, range) = (rq.tok.get(), rq.range.get());
            let Some(flow) = rq.flow.get() else {
                return ws;
            };
            // A brush in progress moves only the timeline; the words follow when it ends (one
            // restyle of the text rather than one per pointer move).
            if rq.brushing.get() {
                return ws;
            }
            if prev_ws.is_some_and(|p| p != ws) {
                marked.set_value((None, None));
            }
            let (old_tok, old_range) = marked.get_value();
            if old_tok != tok {
                if let Some(i) = old_tok {
                    set(rq, i, "sel", false);
                }
                if let Some(i) = tok {
                    set(rq, i, "sel", true);
                }
            }
            if old_range != range {
                mark_by_class(rq, old_range, range);
                // For tests and tools: which tokens are marked, without reading the highlight.
                let _ = flow.set_attribute(
                    "data-range",
                    &range.map(|(a, b)| format!("{a}-{b}")).unwrap_or_default(),
                );
            }
            marked.set_value((tok, range));
            ws
        });
        // The first paint of a linked token: bring it into view.
        Effect::new(move |done: Option<bool>| {
            if done == Some(true) || rq.flow.get().is_none() {
                return true;
            }
            if let Some(i) = rq
                .tok
                .get_untracked()
                .or(rq.range.get_untracked().map(|r| r.0))
            {
                reveal(rq, i);
            }
            true
        });
        keys(rq);
    }

    /// ←/→ previous and next token; N/P next and previous flagged token (as in a review tool).
    fn keys(rq: Rq) {
        let handle = window_event_listener(leptos::ev::keydown, move |e| {
            let typing = e
                .target()
                .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
                .is_some_and(|el| {
                    matches!(el.tag_name().as_str(), "INPUT" | "TEXTAREA" | "SELECT")
                });
            if typing || e.ctrl_key() || e.meta_key() || e.alt_key() {
                return;
            }
            let n = rq.tokens_len();
            let cur = rq.tok.get_untracked();
            let next = match e.key().as_str() {
                "ArrowRight" => Some(cur.map_or(0, |i| (i + 1).min(n.saturating_sub(1)))),
                "ArrowLeft" => Some(cur.map_or(0, |i| i.saturating_sub(1))),
                "n" | "N" => {
                    rq.d.with_value(|d| super::super::flagged::step(&d.tokens, cur, true))
                }
                "p" | "P" => {
                    rq.d.with_value(|d| super::super::flagged::step(&d.tokens, cur, false))
                }
                _ => return,
            };
            if let Some(i) = next.filter(|_| n > 0) {
                e.prevent_default();
                rq.tok.set(Some(i));
                reveal(rq, i);
            }
        });
        on_cleanup(move || handle.remove());
    }
}

//! Compare's "same prompt, different answer": for the prompts both sides were asked (by the
//! engines' prompt fingerprints), how often B answered differently from A and where the answers
//! first parted, against the control (A answering a prompt it was asked twice), with one pair of
//! answers side by side at the token where they part.

use leptos::prelude::*;

use crate::api::{AnswerDrift, AnswerPair, AnswerRef};
use crate::links::request_href;
use crate::ui::format::thousands;

fn share(part: u64, all: u64) -> String {
    format!("{:.0} %", part as f64 * 100.0 / all.max(1) as f64)
}

/// The sentence: how often, where, against the control.
fn lead(d: &AnswerDrift) -> String {
    if d.prompts_both == 0 {
        return "No prompt was asked on both sides (by the engines' prompt fingerprints), so no answers can be set side by side.".into();
    }
    let mut s = format!(
        "For {} of the {} prompts both sides were asked{}, B's answer differed from A's",
        thousands(d.differ),
        thousands(d.compared),
        if d.compared < d.prompts_both {
            format!(" (of {} in all)", thousands(d.prompts_both))
        } else {
            String::new()
        }
    );
    if let Some([q1, q2, q3]) = d.position {
        s.push_str(&format!(
            ": they part at token {q2} (median; half between {q1} and {q3})"
        ));
        if let Some(f) = d.position_share {
            s.push_str(&format!(", {:.0} % into A's answer", f * 100.0));
        }
    }
    s.push('.');
    if d.within_a_compared > 0 {
        s.push_str(&format!(
            " A, asked the same prompt twice, answered differently {} of {} times ({}){}",
            thousands(d.within_a_differ),
            thousands(d.within_a_compared),
            share(d.within_a_differ, d.within_a_compared),
            if d.within_a_differ == 0 && d.differ > 0 {
                ": the difference is B's."
            } else {
                "."
            }
        ));
    }
    s
}

#[component]
pub fn SamePrompt(d: AnswerDrift) -> impl IntoView {
    let text = lead(&d);
    let example = d.example.clone().map(|e| pair(&e));
    view! {
        <section class="panel same-prompt" data-testid="same-prompt">
            <h2>"Same prompt, different answer"</h2>
            <p class="lead" data-testid="same-prompt-lead">{text}</p>
            {example}
        </section>
    }
}

fn pair(e: &AnswerPair) -> impl IntoView + use<> {
    let at = e.position.saturating_sub(e.context_from) as usize;
    view! {
        <p class="muted">{format!("The answers of one prompt, from token {} on; they part at token {}:", e.context_from, e.position)}</p>
        <div class="answer-pair" data-testid="answer-pair">
            {side("A", &e.a, &e.a_context, at)}
            {side("B", &e.b, &e.b_context, at)}
        </div>
    }
}

fn side(name: &'static str, r: &AnswerRef, words: &[String], at: usize) -> impl IntoView + use<> {
    let href = request_href(&r.instance, &r.request_id);
    let tokens = words
        .iter()
        .enumerate()
        .map(|(k, w)| {
            let class = if k == at {
                "tk part"
            } else if k > at {
                "tk after"
            } else {
                "tk"
            };
            view! { <span class=class>{w.clone()}</span> }
        })
        .collect_view();
    let ended = (words.len() <= at).then(|| view! { <span class="tk part ended">"(ended)"</span> });
    view! {
        <div class="answer" data-side=name>
            <div class="who"><b>{name}</b>" "<a href=href>{r.request_id.clone()}</a>
                <span class="muted">{format!(" on {} · {} tokens", r.instance, thousands(r.tokens.into()))}</span></div>
            <div class="words">"…"{tokens}{ended}</div>
        </div>
    }
}

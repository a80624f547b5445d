//! The selected token: its word choice (probability, logprob, rank, entropy, margin, the
//! candidates as a table with bars, their bytes when the text hides them) and its timing (the
//! latency split, its step's batch and queue, who prefilled while it waited).

use leptos::prelude::*;

use super::Rq;
use super::token_text::{Piece, candidate, pieces, plain};
use crate::api::TokenView;
use crate::ui::format::{duration_ms, thousands};

/// UTF-8 bytes in hex, for text whose characters do not show what they are.
fn bytes_if_odd(text: Option<&str>) -> Option<String> {
    let text = text?;
    let odd = !text.is_ascii()
        || pieces(text, false)
            .iter()
            .any(|p| matches!(p, Piece::Odd(_)));
    odd.then(|| {
        text.bytes()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    })
}

fn num(v: Option<f32>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

fn candidates(t: &TokenView) -> impl IntoView + use<> {
    if t.candidates.is_empty() {
        return view! { <p class="muted">"The source sent no alternatives for this token (ask for top_logprobs)."</p> }.into_any();
    }
    let chosen = |c: &crate::api::CandidateView| match (c.token_id, t.token_id) {
        (Some(a), Some(b)) => a == b,
        _ => c.text.is_some() && c.text == t.text,
    };
    let listed = t.candidates.iter().any(chosen);
    let rows = t
        .candidates
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let p = c.logprob.exp();
            let is = chosen(c);
            view! {
                <tr class:chosen=is>
                    <td class="num">{k + 1}</td>
                    <td><code>{candidate(c.text.as_deref(), c.token_id)}</code>
                        {bytes_if_odd(c.text.as_deref()).map(|b| view! { <small class="bytes">{b}</small> })}</td>
                    <td class="bar-cell"><i class="pbar" style=format!("width:{:.1}%", p * 100.0)></i></td>
                    <td class="num">{format!("{p:.3}")}</td>
                    <td class="num">{format!("{:.2}", c.logprob)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <table class="grid cands" data-testid="candidates">
            <thead><tr><th class="num">"rank"</th><th>"token"</th><th></th><th class="num">"p"</th><th class="num">"logprob"</th></tr></thead>
            <tbody>{rows}</tbody>
        </table>
        {(!listed).then(|| view! { <p class="muted">"The chosen token is not among these candidates."</p> })}
    }
    .into_any()
}

fn timing(t: &TokenView, instance: &str) -> impl IntoView + use<> {
    let Some(l) = t.latency_ms else {
        return ().into_any();
    };
    let split = match (t.wait_ms, t.compute_ms) {
        (Some(w), Some(c)) => format!(
            ": waited {} to be scheduled, computed {}",
            duration_ms(w),
            duration_ms(c)
        ),
        _ => String::new(),
    };
    let what = if t.index == 0 {
        "since arrival"
    } else {
        "since the previous token"
    };
    let n = t.prefilled_meanwhile.len();
    let culprits = t
        .prefilled_meanwhile
        .iter()
        .take(12)
        .map(|c| crate::ui::finding::culprit(instance, c))
        .collect_view();
    view! {
        <div class="tp-timing">
            <p><b>{duration_ms(l)}</b>{format!(" {what}{split}")}</p>
            {t.step_draft.map(|d| view! {
                <p data-testid="tp-draft">{match t.accepted_draft {
                    Some(true) => format!("An accepted draft token: its step verified {} drafts for this request and kept {}.", d.proposed, d.accepted),
                    _ => format!("Sampled by the target model, after {} of the step's {} drafts were accepted.", d.accepted, d.proposed),
                }}</p>
            })}
            {(t.batch_size.is_some() || t.iteration.is_some()).then(|| view! {
                <p class="muted">{format!("step {} · batch {} · queue {} · {} prefill + {} decode tokens",
                    t.iteration.map_or("–".into(), |i| i.to_string()),
                    t.batch_size.map_or("–".into(), |b| b.to_string()),
                    t.waiting.map_or("–".into(), |b| b.to_string()),
                    thousands(t.step_prefill_tokens.unwrap_or(0).into()),
                    thousands(t.step_decode_tokens.unwrap_or(0).into()))}</p>
            })}
            {(n > 0).then(|| view! {
                <p data-testid="prefilled-meanwhile">{format!("Meanwhile {n} other request{} prefilled {} prompt tokens: ",
                    if n == 1 { "" } else { "s" }, thousands(t.prefill_tokens_meanwhile.into()))}
                    <span class="culprits">{culprits}</span>{(n > 12).then(|| format!(" and {} more", n - 12))}</p>
            })}
        </div>
    }
    .into_any()
}

#[component]
pub fn TokenPanel(rq: Rq) -> impl IntoView {
    let instance = rq.d.with_value(|d| d.summary.instance.clone());
    move || {
        let Some(i) = rq.tok.get() else {
            return view! { <div class="token-panel muted" data-testid="token-panel">"Click a token (or press → / N) to see the candidates the model chose from and what its step was doing."</div> }.into_any();
        };
        rq.d.with_value(|d| {
            let Some(t) = d.tokens.get(i as usize) else {
                return ().into_any();
            };
            let flags = t.flags.iter().map(|f| view! { <span class="badge">{f.replace('_', " ")}</span> }).collect_view();
            view! {
                <div class="token-panel" data-testid="token-panel">
                    <h3>{format!("Token #{i} ")}<code class="tp-text">{plain(t)}</code>
                        {t.token_id.map(|id| view! { <small class="muted">{format!(" id {id}")}</small> })}</h3>
                    {bytes_if_odd(t.text.as_deref()).map(|b| view! { <p class="bytes">"bytes: "{b}</p> })}
                    <div class="flags">{flags}</div>
                    <dl class="tp-stats">
                        <dt>"probability"</dt><dd data-testid="tp-probability">{num(t.probability, 3)}</dd>
                        <dt>"rank"</dt><dd data-testid="tp-rank">{t.rank_text().unwrap_or_else(|| "–".into())}</dd>
                        <dt>"logprob"</dt><dd>{num(t.logprob, 3)}</dd>
                        <dt>"entropy"</dt><dd title="of the candidates, in nats">{num(t.entropy, 2)}</dd>
                        <dt>"margin"</dt><dd title="chosen probability minus the best other candidate's">{num(t.margin, 3)}</dd>
                    </dl>
                    {candidates(t)}
                    {timing(t, &instance)}
                </div>
            }
            .into_any()
        })
    }
}

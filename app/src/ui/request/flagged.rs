//! The flagged tokens of the word-choice view (an EOS the model thought unlikely, samples far
//! from the top candidate) as a list to step through: N next, P previous.

use leptos::prelude::*;

use super::Rq;
use super::token_text::plain;
use super::words::word_flagged;
use crate::api::TokenView;

/// The next (or previous) flagged token after `from`, wrapping around; the first (or last)
/// when nothing is selected.
pub fn step(tokens: &[TokenView], from: Option<u32>, forward: bool) -> Option<u32> {
    let flagged: Vec<u32> = tokens
        .iter()
        .filter(|t| word_flagged(t))
        .map(|t| t.index)
        .collect();
    let (first, last) = (*flagged.first()?, *flagged.last()?);
    Some(match (from, forward) {
        (None, true) => first,
        (None, false) => last,
        (Some(i), true) => flagged.iter().copied().find(|&k| k > i).unwrap_or(first),
        (Some(i), false) => flagged
            .iter()
            .rev()
            .copied()
            .find(|&k| k < i)
            .unwrap_or(last),
    })
}

fn why(t: &TokenView) -> String {
    let p = t
        .probability
        .map(|p| format!("p {p:.2}"))
        .unwrap_or_default();
    let rank = t
        .rank_text()
        .map(|r| format!(", rank {r}"))
        .unwrap_or_default();
    let what = if t.flags.iter().any(|f| f == "low_probability_eos") {
        "unlikely end of answer"
    } else {
        "sampled far from the top"
    };
    format!("{what} ({p}{rank})")
}

const SHOWN: usize = 50;

#[component]
pub fn Flagged(rq: Rq) -> impl IntoView {
    let (items, total) = rq.d.with_value(|d| {
        let all: Vec<&TokenView> = d.tokens.iter().filter(|t| word_flagged(t)).collect();
        let items = all
            .iter()
            .take(SHOWN)
            .map(|t| {
                let i = t.index;
                view! {
                    <li class:on=move || rq.tok.get() == Some(i) data-token=i>
                        <button class="link" on:click=move |_| {
                            rq.tok.set(Some(i));
                            #[cfg(feature = "hydrate")]
                            super::words::reveal(rq, i);
                        }>
                            <span class="flag-mark">"⚑"</span>{format!("#{i} ")}<code>{plain(t)}</code>
                        </button>
                        <span class="muted">{format!(" {}", why(t))}</span>
                    </li>
                }
            })
            .collect_view();
        (items, all.len())
    });
    let go = move |forward: bool| {
        let next =
            rq.d.with_value(|d| step(&d.tokens, rq.tok.get_untracked(), forward));
        if let Some(i) = next {
            rq.tok.set(Some(i));
            #[cfg(feature = "hydrate")]
            super::words::reveal(rq, i);
        }
    };
    view! {
        <div class="flagged">
            <div class="flagged-head">
                <h3>{format!("Flagged tokens ({total})")}</h3>
                {(total > 0).then(|| view! {
                    <button title="previous flagged token (P)" data-testid="flag-prev" on:click=move |_| go(false)>"‹ P"</button>
                    <button title="next flagged token (N)" data-testid="flag-next" on:click=move |_| go(true)>"N ›"</button>
                })}
            </div>
            {if total == 0 {
                view! { <p class="muted">"No unlikely end of answer, no sample far from the top candidate."</p> }.into_any()
            } else {
                view! { <ol data-testid="flagged">{items}</ol> }.into_any()
            }}
            {(total > SHOWN).then(|| view! { <p class="muted">{format!("and {} more: N steps through all", total - SHOWN)}</p> })}
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(flagged: &[u32]) -> Vec<TokenView> {
        (0..10)
            .map(|i| TokenView {
                index: i,
                flags: if flagged.contains(&i) {
                    vec!["far_from_top".into()]
                } else {
                    vec!["slo_breach".into()]
                },
                ..TokenView::default()
            })
            .collect()
    }

    #[test]
    fn steps_wrap_around_the_flagged_tokens() {
        let t = tokens(&[2, 5, 8]);
        assert_eq!(step(&t, None, true), Some(2));
        assert_eq!(step(&t, None, false), Some(8));
        assert_eq!(step(&t, Some(2), true), Some(5));
        assert_eq!(step(&t, Some(3), true), Some(5));
        assert_eq!(step(&t, Some(8), true), Some(2));
        assert_eq!(step(&t, Some(2), false), Some(8));
        assert_eq!(
            step(&tokens(&[]), None, true),
            None,
            "slow tokens are not word flags"
        );
    }
}

//! Compare's word choice: what the answers said on each side (the data-plane A/B of a new engine
//! version or quantisation), beside how fast they came.

use leptos::prelude::*;

use crate::api::{CompareSide, WordChoice};
use crate::ui::format::thousands;

/// One row: its name, how each side reads, and B against A.
struct Row {
    name: &'static str,
    a: String,
    b: String,
    delta: String,
    /// A move worth the reader's eye.
    notable: bool,
}

fn rows(a: &WordChoice, b: &WordChoice) -> Vec<Row> {
    let pts = |x: f64, y: f64| {
        format!(
            "{}{:.0} pts",
            if y >= x { "+" } else { "−" },
            ((y - x) * 100.0).abs()
        )
    };
    let pct = |x: f64, y: f64| {
        let p = (y / x.max(1e-9) - 1.0) * 100.0;
        format!("{}{:.0} %", if p >= 0.0 { "+" } else { "−" }, p.abs())
    };
    let diff = |x: f64, y: f64, digits: usize| {
        format!(
            "{}{:.*}",
            if y >= x { "+" } else { "−" },
            digits,
            (y - x).abs()
        )
    };
    let mut out = vec![
        Row {
            name: "answers ending on EOS",
            a: format!("{:.0} %", a.eos_rate * 100.0),
            b: format!("{:.0} %", b.eos_rate * 100.0),
            delta: pts(a.eos_rate, b.eos_rate),
            notable: (b.eos_rate - a.eos_rate).abs() >= 0.05,
        },
        Row {
            name: "mean answer length",
            a: format!("{:.0} tokens", a.mean_answer_tokens),
            b: format!("{:.0} tokens", b.mean_answer_tokens),
            delta: pct(a.mean_answer_tokens, b.mean_answer_tokens),
            notable: (b.mean_answer_tokens / a.mean_answer_tokens.max(1e-9) - 1.0).abs() >= 0.05,
        },
        Row {
            name: "chosen-token probability (mean)",
            a: format!("{:.3}", a.mean_probability),
            b: format!("{:.3}", b.mean_probability),
            delta: diff(a.mean_probability, b.mean_probability, 3),
            notable: (b.mean_probability - a.mean_probability).abs() >= 0.02,
        },
        Row {
            name: "tokens far from the top, per 1,000",
            a: format!("{:.1}", a.unlikely_per_1k),
            b: format!("{:.1}", b.unlikely_per_1k),
            delta: diff(a.unlikely_per_1k, b.unlikely_per_1k, 1),
            notable: false,
        },
    ];
    if let (Some(ea), Some(eb)) = (a.mean_entropy, b.mean_entropy) {
        out.insert(
            3,
            Row {
                name: "candidates' entropy (mean, nats)",
                a: format!("{ea:.3}"),
                b: format!("{eb:.3}"),
                delta: diff(ea, eb, 3),
                notable: false,
            },
        );
    }
    out
}

pub fn table(a: &CompareSide, b: &CompareSide) -> impl IntoView + use<> {
    let (Some(wa), Some(wb)) = (a.words, b.words) else {
        return view! { <p class="empty" data-testid="compare-words-none">"The engines did not report token probabilities on both sides, so their word choice cannot be compared."</p> }.into_any();
    };
    let body = rows(&wa, &wb)
        .into_iter()
        .map(|r| {
            view! {
                <tr data-metric=r.name>
                    <td>{r.name}</td>
                    <td class="num">{r.a}</td>
                    <td class="num">{r.b}</td>
                    <td class="num" class:bad=r.notable>{r.delta}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <table class="grid" data-testid="compare-words">
            <thead><tr><th>"What the answers said"</th><th class="num">"A"</th><th class="num">"B"</th><th class="num">"B − A"</th></tr></thead>
            <tbody>{body}</tbody>
            <tfoot><tr><td>"answers with probabilities"</td><td class="num">{thousands(wa.answers)}</td><td class="num">{thousands(wb.answers)}</td><td></td></tr></tfoot>
        </table>
    }
    .into_any()
}

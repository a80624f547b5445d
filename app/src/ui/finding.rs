//! A diagnosis finding as a list item: its cause, the sentence, the culprits linked to their
//! request pages on the same instance, and the speed and word verdicts beside them. The request,
//! waterfall and incident pages show them alike.

use leptos::prelude::*;

use crate::analysis::diagnosis::Finding;
use crate::links::request_href;

/// `label` follows the cause's name (what the caller adds: "inferred from spans", the victim),
/// in its own case: request ids are case-sensitive.
pub fn item(f: Finding, instance: &str, label: String) -> impl IntoView + use<> {
    let culprits = f
        .culprits
        .iter()
        .map(|c| culprit(instance, c))
        .collect_view();
    view! {
        <li class="finding" data-cause=f.cause.name()>
            <span class="cause">{f.cause.name().replace('_', " ")}<span class="label">{label}</span></span>
            <p>{f.summary}</p>
            <div class="culprits">{culprits}</div>
        </li>
    }
}

/// A culprit: a link to its request page, or (another tenant's request, shown to a reader scoped
/// to tenants under an alias) its alias as text.
pub fn culprit(instance: &str, id: &str) -> AnyView {
    if crate::links::is_alias(id) {
        view! { <span class="culprit alias">"◆ "{id.to_string()}</span> }.into_any()
    } else {
        view! { <a class="culprit" href=request_href(instance, id)>"◆ "{id.to_string()}</a> }
            .into_any()
    }
}

/// Two verdicts, one for speed and one for words: a request can be fast and oddly worded, or
/// slow and well worded, and an SRE reads for the first while a customer may ask about the second.
pub fn verdicts(slow: bool, odd: bool, timed: bool) -> impl IntoView {
    let speed = match (timed, slow) {
        (false, _) => "speed: no times",
        (true, true) => "speed: slow",
        (true, false) => "speed: met SLOs",
    };
    view! {
        <span class="verdict" class:bad=slow data-testid="verdict-speed">{speed}</span>
        <span class="verdict" class:bad=odd data-testid="verdict-words">{if odd { "words: odd" } else { "words: as expected" }}</span>
    }
}

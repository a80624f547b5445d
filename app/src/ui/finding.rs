//! A diagnosis finding as a list item: its cause, the sentence, the culprits linked to their
//! request pages on the same instance. The request page and the incident page list them alike.

use leptos::prelude::*;

use crate::analysis::diagnosis::Finding;
use crate::links::request_href;

/// `label` follows the cause's name (what the caller adds: "inferred from spans", the victim),
/// in its own case: request ids are case-sensitive.
pub fn item(f: Finding, instance: &str, label: String) -> impl IntoView + use<> {
    let culprits = f
        .culprits
        .iter()
        .map(|c| view! { <a class="culprit" href=request_href(instance, c)>"◆ "{c.clone()}</a> })
        .collect_view();
    view! {
        <li class="finding" data-cause=f.cause.name()>
            <span class="cause">{f.cause.name().replace('_', " ")}<span class="label">{label}</span></span>
            <p>{f.summary}</p>
            <div class="culprits">{culprits}</div>
        </li>
    }
}

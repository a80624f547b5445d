//! The side panel: the selected request's diagnosis in sentences, its culprits (click to select
//! one), a link to its request page, and to its other part when it ran on another instance too;
//! "Create incident" freezes it (with the waterfall around it) into a link.

use leptos::prelude::*;

use super::state::WaterfallQuery;
use super::{Selected, Wf};
use crate::analysis::diagnosis::Verdict;
use crate::links::request_href;

#[component]
pub fn Panel(wf: Wf, selected: Resource<Result<Option<Selected>, String>>) -> impl IntoView {
    view! {
        <aside class="wf-panel panel" data-testid="wf-panel">
            <Suspense fallback=|| view! { <p class="skeleton">"Diagnosing…"</p> }>
                {move || selected.get().map(|r| match r {
                    Err(e) => view! { <p class="error">"Could not diagnose: " {e}</p> }.into_any(),
                    Ok(None) => view! {
                        <h3>"No request selected"</h3>
                        <p class="muted">"Click a track to see why it was slow: its stalls are shaded across every track, and the requests whose prefills caused them are marked ◆."</p>
                    }.into_any(),
                    Ok(Some(s)) => findings(wf, s).into_any(),
                })}
            </Suspense>
        </aside>
    }
}

fn findings(wf: Wf, s: Selected) -> impl IntoView {
    let d = s.diagnosis;
    let slow = d.speed == Verdict::Degraded;
    let odd = d.words == Verdict::Degraded;
    let noted_words = d.findings.iter().any(|f| f.cause.is_word_choice());
    let suggested = crate::ui::incident::create::suggested_title(&d, &s.instance);
    let href = request_href(&s.instance, &d.request_id);
    // A PD request's other part: the same view with that instance added, its parts joined.
    let joined = (!s.elsewhere.is_empty()).then(|| {
        let q = wf.q.get_value();
        let instance = format!("{},{}", q.instance, s.elsewhere.join(","));
        let href = WaterfallQuery { instance, ..q }.href();
        view! {
            <p class="joined" data-testid="show-joined">"Also ran on " {s.elsewhere.join(", ")} ": "
                <a href=href rel="external">"show its parts joined"</a></p>
        }
    });
    let list = d
        .findings
        .into_iter()
        .map(|f| {
            let culprits = f
                .culprits
                .iter()
                .map(|c| {
                    let id = c.clone();
                    view! { <button class="link culprit" data-testid="culprit" on:click=move |_| wf.selected.set(Some(id.clone()))>"◆ "{c.clone()}</button> }
                })
                .collect_view();
            let cause = f.cause.name();
            view! {
                <li class="finding" data-cause=cause>
                    <span class="cause">{cause.replace('_', " ")}{if f.inferred { " (inferred from spans)" } else { "" }}</span>
                    <p>{f.summary}</p>
                    <div class="culprits">{culprits}</div>
                </li>
            }
        })
        .collect_view();
    view! {
        <h3 class="sel-id" data-testid="selected-request">{d.request_id.clone()}</h3>
        {crate::ui::finding::verdicts(slow, odd, true)}
        <span class="muted">" on " {s.instance.clone()}</span>
        {joined}
        {(!slow).then(|| view! { <p class="muted">{if noted_words { "Met its SLOs." } else { "Met its SLOs; nothing unusual in its word choice." }}</p> })}
        <ul class="findings" data-testid="findings">{list}</ul>
        <p class="panel-links"><a href=href>"open the request page"</a>" · "<span class="muted">"F zooms to it"</span></p>
        <p class="panel-links"><crate::ui::incident::create::CreateIncident instance=s.instance.clone()
            request_id=d.request_id.clone() suggested=suggested/></p>
    }
}

//! `/incidents?q=`: every incident, newest first, searchable by title, story, note, instance or
//! request id.

use leptos::prelude::*;
use leptos_router::hooks::{use_navigate, use_query_map};

use crate::api::IncidentList as List;
use crate::query::build;
use crate::ui::fetch::get_json;
use crate::ui::time::{Zone, date_time};

#[component]
pub fn IncidentList() -> impl IntoView {
    let query = use_query_map();
    let q = move || query.with(|p| p.get("q").unwrap_or_default());
    let data = Resource::new(q, |q| {
        get_json::<List>(format!("/api/v1/incidents{}", build(&[("q", q)])))
    });
    let zone = use_context::<RwSignal<Zone>>().unwrap_or_default();
    let navigate = use_navigate();
    let search = RwSignal::new(query.with_untracked(|p| p.get("q").unwrap_or_default()));
    let go = move || {
        navigate(
            &format!("/incidents{}", build(&[("q", search.get_untracked())])),
            Default::default(),
        )
    };
    view! {
        <section class="panel">
            <div class="section-head">
                <h1 class="page-title">"Incidents"</h1>
                <form class="find" on:submit=move |ev| { ev.prevent_default(); go(); }>
                    <input type="search" data-testid="incident-search" placeholder="title, request id, instance…"
                        prop:value=move || search.get() on:input=move |ev| search.set(event_target_value(&ev))/>
                    <button type="submit">"search"</button>
                </form>
            </div>
            <Suspense fallback=|| view! { <p class="skeleton">"Loading incidents…"</p> }>
                {move || data.get().map(|r| match r {
                    Err(e) => view! { <p class="error">{e}</p> }.into_any(),
                    Ok(l) if l.incidents.is_empty() => view! {
                        <p class="empty" data-testid="incidents-empty">"No incident yet. Open a request (from the explorer or the waterfall) and press “Create incident” to freeze it into a link for a ticket."</p>
                    }.into_any(),
                    Ok(l) => view! {
                        <table class="grid" data-testid="incidents">
                            <thead><tr><th>"title"</th><th>"frozen"</th><th>"what happened"</th><th>"instance"</th><th>"victims"</th></tr></thead>
                            <tbody>{l.incidents.into_iter().map(|i| {
                                let created = i.created_ns;
                                view! {
                                    <tr class:muted=i.revoked>
                                        <td class="text">{if i.revoked {
                                            view! { <span>{i.title.clone()}" (revoked)"</span> }.into_any()
                                        } else {
                                            view! { <a href=format!("/incidents/{}", i.slug)>{i.title.clone()}</a> }.into_any()
                                        }}</td>
                                        <td class="time">{move || date_time(created, &zone.get())}</td>
                                        <td class="story">{i.headline.clone()}</td>
                                        <td class="text">{i.instances.join(", ")}</td>
                                        <td class="id">{i.victims.join(", ")}</td>
                                    </tr>
                                }
                            }).collect_view()}</tbody>
                        </table>
                    }.into_any(),
                })}
            </Suspense>
        </section>
    }
}

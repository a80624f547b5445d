//! Incidents: `/incidents/{slug}` shows a frozen view — the story in sentences, the waterfall of
//! the window with victims and culprits marked, each victim's request page — all from the
//! incident's snapshot, so the link works after retention dropped the raw traces. Its head
//! carries Open Graph and Twitter card tags so chat and ticket tools unfurl it with its preview.
//! `/incidents` lists and searches them; `create` is the button on a request page.

pub mod create;
mod list;

use leptos::prelude::*;
use leptos_meta::{Meta, Title};
use leptos_router::hooks::use_params_map;

pub use list::IncidentList;

use crate::api::Incident;
use crate::query::encode;
use crate::ui::fetch::get_json;
use crate::ui::request::state::RequestQuery;
use crate::ui::time::{Zone, date_time, span};

/// `scheme://host` of the page as the viewer reached it: previews need absolute links.
fn base_url() -> String {
    #[cfg(feature = "ssr")]
    {
        use_context::<http::request::Parts>()
            .and_then(|p| {
                crate::links::origin(|n| {
                    p.headers
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string)
                })
            })
            .unwrap_or_default()
    }
    #[cfg(all(feature = "hydrate", not(feature = "ssr")))]
    {
        web_sys::window()
            .and_then(|w| w.location().origin().ok())
            .unwrap_or_default()
    }
    #[cfg(not(any(feature = "ssr", feature = "hydrate")))]
    {
        String::new()
    }
}

#[component]
pub fn IncidentPage() -> impl IntoView {
    let params = use_params_map();
    let data = Resource::new(
        move || params.get().get("slug").unwrap_or_default(),
        |slug| get_json::<Incident>(format!("/api/v1/incidents/{}", encode(&slug))),
    );
    view! {
        <Suspense fallback=|| view! { <section class="panel skeleton-block" aria-busy="true"><div class="row"></div><div class="bar"></div></section> }>
            {move || data.get().map(|r| match r {
                Err(e) => view! {
                    <section class="panel"><h2>"Incident not shown"</h2><p class="error" data-testid="incident-error">{e}</p>
                        <p><a href="/incidents">"All incidents"</a></p></section>
                }.into_any(),
                Ok(i) => page(i, base_url()).into_any(),
            })}
        </Suspense>
    }
}

fn head(i: &Incident, base: &str) -> impl IntoView + use<> {
    let s = &i.summary;
    let page = format!("{base}/incidents/{}", s.slug);
    let image = format!("{page}/preview.png");
    let description = s.headline.clone();
    view! {
        <Title text=format!("{} · tokenscope incident", s.title)/>
        <Meta name="description" content=description.clone()/>
        <Meta property="og:type" content="article"/>
        <Meta property="og:site_name" content="tokenscope"/>
        <Meta property="og:title" content=s.title.clone()/>
        <Meta property="og:description" content=description.clone()/>
        <Meta property="og:url" content=page/>
        <Meta property="og:image" content=image.clone()/>
        <Meta property="og:image:width" content="1200"/>
        <Meta property="og:image:height" content="630"/>
        <Meta property="og:image:alt" content=format!("Waterfall of {} around {}", s.instances.join(", "), s.victims.join(", "))/>
        <Meta name="twitter:card" content="summary_large_image"/>
        <Meta name="twitter:title" content=s.title.clone()/>
        <Meta name="twitter:description" content=description/>
        <Meta name="twitter:image" content=image/>
    }
}

fn page(i: Incident, base: String) -> impl IntoView {
    let zone = use_context::<RwSignal<Zone>>().unwrap_or_default();
    let meta = head(&i, &base);
    let note = i.note.clone();
    let can_revoke = i.can_revoke;
    let s = i.summary.clone();
    let slug = s.slug.clone();
    let instance = s.instances.first().cloned().unwrap_or_default();
    let story =
        i.snapshot
            .requests
            .iter()
            .flat_map(|r| {
                let id = r.detail.summary.request_id.clone();
                let instance = instance.clone();
                r.diagnosis.findings.iter().map(move |f| {
                    crate::ui::finding::item(f.clone(), &instance, format!(" · {id}"))
                })
            })
            .collect_view();
    let victims = i
        .snapshot
        .requests
        .into_iter()
        .map(|r| {
            let q = RequestQuery {
                instance: r.detail.summary.instance.clone(),
                ..RequestQuery::default()
            };
            view! {
                <h2 class="victim-head">"Victim "{r.detail.summary.request_id.clone()}<small class="muted">" · as frozen"</small></h2>
                {crate::ui::request::frozen(r.detail, r.diagnosis, q)}
            }
        })
        .collect_view();
    let created = s.created_ns;
    let (from, to) = (s.from_ns, s.to_ns);
    view! {
        {meta}
        <section class="panel incident-head" data-testid="incident">
            <div class="rq-title">
                <h1 data-testid="incident-title">{s.title.clone()}</h1>
                <span class="verdict bad">"incident"</span>
            </div>
            <p class="muted rq-meta">
                {move || {
                    let z = zone.get();
                    format!("frozen {} ({}) · {} · window {} – {} ({})", date_time(created, &z), z.label(),
                        s.instances.join(", "), date_time(from, &z), date_time(to, &z), span(to - from))
                }}
            </p>
            {(!note.trim().is_empty()).then(|| view! { <p class="incident-note" data-testid="incident-note">{note.clone()}</p> })}
            <div class="rq-links">
                <create::CopyForTicket slug=slug.clone()/>
                <a href=format!("/incidents/{slug}/preview.png") target="_blank">"preview image"</a>
                <a href="/incidents">"all incidents"</a>
                {can_revoke.then(|| view! { <create::Revoke slug=slug.clone()/> })}
            </div>
        </section>
        <section class="panel">
            <h2>"What happened"</h2>
            <ul class="findings" data-testid="incident-story">{story}</ul>
            <img class="incident-preview" data-testid="incident-waterfall" src=format!("/incidents/{slug}/preview.svg")
                alt="The window's waterfall as frozen: the victim's row shaded, culprits marked ◆, stalls in red" width="1200" height="630"/>
        </section>
        {victims}
    }
}

//! The incident actions in the browser: create one from a request page (title, then the link),
//! copy its Markdown for a ticket, revoke it.

use leptos::prelude::*;

use crate::analysis::diagnosis::Diagnosis;
use crate::api::NewIncident;

/// An incident's default title: what broke, where, to whom.
pub fn suggested_title(d: &Diagnosis, instance: &str) -> String {
    match d.findings.first() {
        Some(f) => format!(
            "{} on {instance} ({})",
            f.cause.name().replace('_', " "),
            d.request_id
        ),
        None => format!("{} on {instance}", d.request_id),
    }
}

/// What an action is doing, for its label.
#[derive(Clone, Debug, PartialEq)]
pub enum State {
    Idle,
    Busy,
    Done(String),
    Failed(String),
}

fn status(state: RwSignal<State>) -> impl IntoView {
    move || match state.get() {
        State::Failed(e) => view! { <span class="error">{e}</span> }.into_any(),
        State::Done(m) => view! { <span class="good">{m}</span> }.into_any(),
        _ => ().into_any(),
    }
}

/// "Create incident" on a request page: a title (prefilled with what happened), then the
/// incident's page.
#[component]
pub fn CreateIncident(instance: String, request_id: String, suggested: String) -> impl IntoView {
    let open = RwSignal::new(false);
    let title = RwSignal::new(suggested);
    let note = RwSignal::new(String::new());
    let state = RwSignal::new(State::Idle);
    #[cfg(feature = "hydrate")]
    let navigate = leptos_router::hooks::use_navigate();
    let submit = move || {
        let new = NewIncident {
            title: title.get_untracked(),
            note: note.get_untracked(),
            instance: instance.clone(),
            requests: vec![request_id.clone()],
            from_ns: None,
            to_ns: None,
        };
        state.set(State::Busy);
        #[cfg(feature = "hydrate")]
        {
            let navigate = navigate.clone();
            leptos::task::spawn_local(async move {
                let body = serde_json::to_string(&new).unwrap_or_default();
                match crate::ui::fetch::post_json::<crate::api::CreatedIncident>(
                    "/api/v1/incidents".into(),
                    body,
                )
                .await
                {
                    Ok(c) => navigate(&c.path, Default::default()),
                    Err(e) => state.set(State::Failed(e)),
                }
            });
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = new;
    };
    view! {
        <span class="create-incident">
            {move || if open.get() {
                let submit = submit.clone();
                view! {
                    <input type="text" data-testid="incident-title-input" maxlength="200" prop:value=move || title.get()
                        on:input=move |ev| title.set(event_target_value(&ev))/>
                    <input type="text" data-testid="incident-note-input" placeholder="note (optional): who saw it, the ticket" maxlength="10000"
                        prop:value=move || note.get() on:input=move |ev| note.set(event_target_value(&ev))/>
                    <button class="primary" data-testid="incident-create" disabled=move || state.get() == State::Busy
                        on:click=move |_| submit()>"Freeze into a link"</button>
                    <button class="link" on:click=move |_| open.set(false)>"cancel"</button>
                }.into_any()
            } else {
                view! { <button data-testid="incident-open" title="Freeze this request, its diagnosis and the waterfall around it into a link for a ticket"
                    on:click=move |_| open.set(true)>"Create incident"</button> }.into_any()
            }}
            {status(state)}
        </span>
    }
}

/// Copies the incident's Markdown (title, the findings' sentences, the link) to the clipboard.
#[component]
pub fn CopyForTicket(slug: String) -> impl IntoView {
    let state = RwSignal::new(State::Idle);
    let copy = move |_| {
        #[cfg(feature = "hydrate")]
        {
            let url = format!("/api/v1/incidents/{slug}/markdown");
            leptos::task::spawn_local(async move {
                match crate::ui::fetch::get_text(url).await {
                    Ok(md) => {
                        if let Some(w) = web_sys::window() {
                            let _ = w.navigator().clipboard().write_text(&md);
                            // Tests and curious users read what was copied here as well.
                            let _ = js_sys::Reflect::set(&w, &"__tsCopied".into(), &md.into());
                        }
                        state.set(State::Done("copied".into()));
                    }
                    Err(e) => state.set(State::Failed(e)),
                }
            });
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = &slug;
    };
    view! {
        <span><button data-testid="copy-for-ticket" on:click=copy title="Markdown: title, what happened, the link">"copy for ticket"</button>" "{status(state)}</span>
    }
}

/// Revokes the link (after a confirmation); the page then says it is gone.
#[component]
pub fn Revoke(slug: String) -> impl IntoView {
    let state = RwSignal::new(State::Idle);
    let revoke = move |_| {
        #[cfg(feature = "hydrate")]
        {
            let ok = web_sys::window()
                .and_then(|w| {
                    w.confirm_with_message(
                        "Revoke this incident? Its link will stop working for everyone.",
                    )
                    .ok()
                })
                .unwrap_or(false);
            if !ok {
                return;
            }
            let url = format!("/api/v1/incidents/{slug}");
            let page = format!("/incidents/{slug}");
            leptos::task::spawn_local(async move {
                match crate::ui::fetch::send("DELETE", url).await {
                    Ok(_) => {
                        let _ = web_sys::window().map(|w| w.location().set_href(&page));
                    }
                    Err(e) => state.set(State::Failed(e)),
                }
            });
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = &slug;
    };
    view! { <span><button class="link danger" data-testid="incident-revoke" on:click=revoke>"revoke link"</button>" "{status(state)}</span> }
}

//! The request page (`/requests/{id}`): who, how fast against the SLOs, the diagnosis in sentences
//! with its culprits; the request's own stages; each token's latency with the load of its step
//! (canvas); the answer token by token with the word choice behind each. Server-rendered with
//! its data, then hydrated; the selected token, brushed range and toggles are in the URL.

mod flagged;
mod prompt;
mod stages;
pub mod state;
mod summary;
pub mod timeline;
mod token_panel;
pub mod token_text;
mod words;

use leptos::html;
use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::analysis::diagnosis::{Diagnosis, Thresholds};
use crate::api::{RequestDetail, RequestList, RequestSummary, VictimList};
use crate::query::{build, encode};
use crate::ui::fetch::get_json;
use state::RequestQuery;

/// Why the page has no request to show.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Missing {
    /// What the API said.
    Error(String),
    /// The id names requests on several instances (and the link said none): which to open.
    Several(Vec<RequestSummary>),
}

type Loaded = (RequestDetail, Diagnosis, VictimList);

async fn load(id: String, instance: String) -> Result<Loaded, Missing> {
    let q = build(&[("instance", instance.clone())]);
    let path = encode(&id);
    let d: RequestDetail = match get_json(format!("/api/v1/requests/{path}{q}")).await {
        Ok(d) => d,
        Err(e) if instance.is_empty() => {
            let found: Result<RequestList, String> = get_json(format!(
                "/api/v1/requests{}",
                build(&[("find", id), ("limit", "20".into())])
            ))
            .await;
            return Err(match found {
                Ok(l) if l.requests.len() > 1 => Missing::Several(l.requests),
                _ => Missing::Error(e),
            });
        }
        Err(e) => return Err(Missing::Error(e)),
    };
    let dx: Diagnosis = get_json(format!("/api/v1/requests/{path}/diagnosis{q}"))
        .await
        .map_err(Missing::Error)?;
    let hurt: VictimList = get_json(format!("/api/v1/requests/{path}/victims{q}"))
        .await
        .map_err(Missing::Error)?;
    Ok((d, dx, hurt))
}

fn missing(m: Missing) -> impl IntoView {
    let body = match m {
        Missing::Error(e) => view! { <p class="error" data-testid="request-error">{e}</p> }.into_any(),
        Missing::Several(parts) => view! {
            <p data-testid="request-several">"This id names requests on several instances (a PD request has a prefill and a decode part). Open one:"</p>
            <ul>{parts.into_iter().map(|r| view! {
                <li><a href=crate::links::request_href(&r.instance, &r.request_id)>{r.instance.clone()}</a>
                    {format!(" · {} → {} tokens", r.prompt_tokens, r.output_tokens)}</li>
            }).collect_view()}</ul>
        }.into_any(),
    };
    view! {
        <section class="panel"><h2>"Request not shown"</h2>{body}
            <p><a href="/">"Find it in the explorer"</a>" or "<a href="/upload">"upload a response"</a></p></section>
    }
}

/// Everything the page's parts read and write.
#[derive(Clone, Copy)]
pub struct Rq {
    pub d: StoredValue<RequestDetail>,
    pub th: StoredValue<Thresholds>,
    /// The request as it is in the store (else frozen in an incident: its URL is not this
    /// page's, and exports and the waterfall may be gone).
    pub live: bool,
    pub tok: RwSignal<Option<u32>>,
    pub range: RwSignal<Option<(u32, u32)>>,
    pub log: RwSignal<bool>,
    pub ws: RwSignal<bool>,
    /// A brush in progress: the URL waits for its end.
    pub brushing: RwSignal<bool>,
    /// Pointer position over the timeline (CSS px) and the token under it.
    pub hover: RwSignal<Option<(f64, f64, u32)>>,
    pub canvas: NodeRef<html::Canvas>,
    pub flow: NodeRef<html::Div>,
}

impl Rq {
    pub fn tokens_len(&self) -> u32 {
        self.d.with_value(|d| d.tokens.len() as u32)
    }
}

#[component]
pub fn RequestPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let data = Resource::new(
        move || {
            (
                params.get().get("id").unwrap_or_default(),
                query.with(|q| q.get("instance").unwrap_or_default()),
            )
        },
        |(id, instance)| load(id, instance),
    );
    view! {
        <Suspense fallback=|| view! { <section class="panel skeleton-block" aria-busy="true"><div class="row"></div><div class="row"></div><div class="bar"></div></section> }>
            {move || data.get().map(|r| match r {
                Err(m) => missing(m).into_any(),
                Ok((d, dx, hurt)) => {
                    let q = query.with_untracked(|p| RequestQuery::from_lookup(|k| p.get(k)));
                    page(d, dx, hurt, q, true).into_any()
                }
            })}
        </Suspense>
    }
}

/// A request's page from data already at hand (an incident's snapshot): no live links, no
/// "create incident".
pub fn frozen(d: RequestDetail, dx: Diagnosis, q: RequestQuery) -> impl IntoView {
    page(d, dx, VictimList::default(), q, false)
}

fn page(
    d: RequestDetail,
    dx: Diagnosis,
    hurt: VictimList,
    q: RequestQuery,
    live: bool,
) -> impl IntoView {
    let n = d.tokens.len() as u32;
    let timed = d.tokens.iter().any(|t| t.latency_ms.is_some());
    let log_auto = timeline::geometry::wants_log(&d.tokens);
    // When what went wrong is the words, the words come first, their first flag selected.
    let words_first = !timed
        || (dx.findings.iter().any(|f| f.cause.is_word_choice())
            && dx.findings.iter().all(|f| f.cause.is_word_choice()));
    let first_flag = words_first
        .then(|| flagged::step(&d.tokens, None, true))
        .flatten();
    let rq = Rq {
        d: StoredValue::new(d),
        th: StoredValue::new(Thresholds::default()),
        live,
        tok: RwSignal::new(q.tok.filter(|t| *t < n).or(first_flag)),
        range: RwSignal::new(q.range.filter(|r| r.1 < n)),
        log: RwSignal::new(q.log.unwrap_or(log_auto)),
        ws: RwSignal::new(q.ws),
        brushing: RwSignal::new(false),
        hover: RwSignal::new(None),
        canvas: NodeRef::new(),
        flow: NodeRef::new(),
    };
    #[cfg(feature = "hydrate")]
    if live {
        follow_url(rq, q.instance.clone(), log_auto);
    }
    let words = view! { <words::Words rq=rq/> };
    view! {
        <div class="rq" data-testid="request-page">
            <summary::Head rq=rq dx=dx hurt=hurt/>
            {match (timed, words_first) {
                (true, false) => view! { <stages::Strip rq=rq/> <timeline::Timeline rq=rq/> {words} }.into_any(),
                (true, true) => view! { {words} <stages::Strip rq=rq/> <timeline::Timeline rq=rq/> }.into_any(),
                (false, _) => view! {
                    {words}
                    <stages::Strip rq=rq/>
                    <section class="panel"><h2>"Token latency"</h2>
                        <p class="empty" data-testid="no-timeline">{if n == 0 {
                            "The request produced no output tokens."
                        } else {
                            "This source reports no per-token times (an OpenAI-style response carries word choice only). Send the engine's traces over OTLP or the native format to see each token's latency and its step's batch."
                        }}</p>
                    </section>
                }.into_any(),
            }}
        </div>
    }
}

/// Keeps the URL in step with the view: replaced, so Back leaves the page rather than replaying
/// every click; a brush writes once, when it ends.
#[cfg(feature = "hydrate")]
fn follow_url(rq: Rq, instance: String, log_auto: bool) {
    Effect::new(move |_| {
        let q = RequestQuery {
            instance: instance.clone(),
            tok: rq.tok.get(),
            range: rq.range.get(),
            log: Some(rq.log.get()).filter(|l| *l != log_auto),
            ws: rq.ws.get(),
        };
        if rq.brushing.get() {
            return;
        }
        let Some(w) = web_sys::window() else { return };
        let path = w.location().pathname().unwrap_or_default();
        if let Ok(h) = w.history() {
            let _ = h.replace_state_with_url(
                &wasm_bindgen::JsValue::NULL,
                "",
                Some(&format!("{path}{}", q.query())),
            );
        }
    });
}

//! The request page (`/requests/{id}`): who, how fast against the SLOs, and the diagnosis in
//! sentences with its culprits, linked to the waterfall. (Token timeline and word choice come
//! with the high-magnification views.)

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::analysis::diagnosis::{Diagnosis, Verdict};
use crate::api::RequestDetail;
use crate::ui::fetch::get_json;
use crate::ui::format::{duration_ms, thousands};
use crate::ui::links::{request_href, waterfall_href};
use crate::ui::query::{build, encode};

async fn load(id: String, instance: String) -> Result<(RequestDetail, Diagnosis), String> {
    let q = build(&[("instance", instance)]);
    let id = encode(&id);
    let d: RequestDetail = get_json(format!("/api/v1/requests/{id}{q}")).await?;
    let dx: Diagnosis = get_json(format!("/api/v1/requests/{id}/diagnosis{q}")).await?;
    Ok((d, dx))
}

#[component]
pub fn RequestPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let data = Resource::new(
        move || {
            (
                params.get().get("id").unwrap_or_default(),
                query.get().get("instance").unwrap_or_default(),
            )
        },
        |(id, instance)| load(id, instance),
    );
    view! {
        <Suspense fallback=|| view! { <section class="panel skeleton-block" aria-busy="true"><div class="row"></div><div class="row"></div></section> }>
            {move || data.get().map(|r| match r {
                Err(e) => view! { <section class="panel"><h2>"Request not shown"</h2><p class="error" data-testid="request-error">{e}</p>
                    <p><a href="/">"Find it in the explorer"</a></p></section> }.into_any(),
                Ok((d, dx)) => page(d, dx).into_any(),
            })}
        </Suspense>
    }
}

fn page(d: RequestDetail, dx: Diagnosis) -> impl IntoView {
    let s = d.summary;
    let ms = |v: Option<f64>| v.map(duration_ms).unwrap_or_else(|| "–".into());
    let wf = waterfall_href(&s.instance, &s.request_id, s.arrival_ns, s.e2e_ms);
    let instance = s.instance.clone();
    let findings = dx
        .findings
        .into_iter()
        .map(|f| {
            let culprits = f
                .culprits
                .iter()
                .map(|c| view! { <a class="culprit" href=request_href(&instance, c)>"◆ "{c.clone()}</a>" " })
                .collect_view();
            view! { <li class="finding"><p>{f.summary}</p><div class="culprits">{culprits}</div></li> }
        })
        .collect_view();
    let degraded = dx.verdict == Verdict::Degraded;
    view! {
        <section class="panel" data-testid="request-page">
            <h2 class="sel-id">{s.request_id.clone()}</h2>
            <p class="muted">{format!("{} · {} · {} · {}", s.engine.as_str(), s.model, s.instance, d.role.as_str())}</p>
            <div class="kpis">
                <div class="kpi"><span>"TTFT"</span><b>{ms(s.ttft_ms)}</b></div>
                <div class="kpi"><span>"TPOT"</span><b>{ms(s.tpot_ms)}</b></div>
                <div class="kpi"><span>"E2E"</span><b>{duration_ms(s.e2e_ms)}</b></div>
                <div class="kpi"><span>"Queue"</span><b>{ms(s.queue_ms)}</b></div>
                <div class="kpi"><span>"Tokens"</span><b>{format!("{} → {}", thousands(s.prompt_tokens.into()), thousands(s.output_tokens.into()))}</b></div>
                <span class="verdict" class:bad=degraded>{if degraded { "degraded" } else { "healthy" }}</span>
            </div>
            <ul class="findings">{findings}</ul>
            <p><a href=wf data-testid="show-in-waterfall">"show in waterfall"</a></p>
        </section>
    }
}

//! The explorer page (`/`): instances seen and the most recent requests.

use leptos::prelude::*;

use super::fetch::get_json;
use super::format::{duration_ms, thousands};
use crate::api::{InstanceList, RequestList, RequestSummary};

#[component]
pub fn Explorer() -> impl IntoView {
    let instances = LocalResource::new(|| get_json::<InstanceList>("/api/v1/instances"));
    let requests =
        LocalResource::new(|| get_json::<RequestList>("/api/v1/requests?order=recent&limit=100"));
    view! {
        <section class="panel">
            <h2>"Instances"</h2>
            <Suspense fallback=|| view! { <p class="skeleton">"Loading instances…"</p> }>
                {move || {
                    instances
                        .get()
                        .map(|r| match r {
                            Err(e) => view! { <p class="error">"Could not load instances: " {e}</p> }.into_any(),
                            Ok(list) if list.instances.is_empty() => {
                                view! {
                                    <p class="empty" data-testid="no-instances">
                                        "No engine has reported yet. Point an engine's trace exporter at this server "
                                        "(gRPC on port 4317, or POST /api/v1/traces) and its instances appear here."
                                    </p>
                                }
                                    .into_any()
                            }
                            Ok(list) => {
                                view! {
                                    <table class="grid" data-testid="instances">
                                        <thead><tr><th>"Instance"</th><th>"Engine"</th><th>"Model"</th><th>"Role"</th><th>"Host"</th></tr></thead>
                                        <tbody>
                                            {list.instances.into_iter().map(|i| view! {
                                                <tr>
                                                    <td>{i.instance}</td>
                                                    <td>{format!("{} {}", i.engine.as_str(), i.engine_version)}</td>
                                                    <td>{i.model}</td>
                                                    <td>{i.role.as_str()}</td>
                                                    <td>{i.host}</td>
                                                </tr>
                                            }).collect_view()}
                                        </tbody>
                                    </table>
                                }
                                    .into_any()
                            }
                        })
                }}
            </Suspense>
        </section>
        <section class="panel">
            <h2>"Recent requests"</h2>
            <Suspense fallback=|| view! { <p class="skeleton">"Loading requests…"</p> }>
                {move || {
                    requests
                        .get()
                        .map(|r| match r {
                            Err(e) => view! { <p class="error">"Could not load requests: " {e}</p> }.into_any(),
                            Ok(list) if list.requests.is_empty() => {
                                view! { <p class="empty">"No requests stored yet."</p> }.into_any()
                            }
                            Ok(list) => request_table(list.requests).into_any(),
                        })
                }}
            </Suspense>
        </section>
    }
}

fn request_table(rows: Vec<RequestSummary>) -> impl IntoView {
    let ms = |v: Option<f64>| v.map(duration_ms).unwrap_or_else(|| "–".into());
    view! {
        <table class="grid" data-testid="requests">
            <thead>
                <tr>
                    <th>"Request"</th><th>"Instance"</th><th class="num">"TTFT"</th><th class="num">"TPOT"</th>
                    <th class="num">"E2E"</th><th class="num">"Queue"</th><th class="num">"Prompt"</th>
                    <th class="num">"Output"</th><th>"Finish"</th>
                </tr>
            </thead>
            <tbody>
                {rows.into_iter().map(|r| view! {
                    <tr>
                        <td class="id">{r.request_id}</td>
                        <td>{r.instance}</td>
                        <td class="num">{ms(r.ttft_ms)}</td>
                        <td class="num">{ms(r.tpot_ms)}</td>
                        <td class="num">{duration_ms(r.e2e_ms)}</td>
                        <td class="num">{ms(r.queue_ms)}</td>
                        <td class="num">{thousands(r.prompt_tokens.into())}</td>
                        <td class="num">{thousands(r.output_tokens.into())}</td>
                        <td>{r.finish_reason.as_str()}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
}

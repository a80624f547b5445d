//! Upload (`/upload`): a customer pastes or drops what their engine returned — an OpenAI-style
//! chat/completions response with logprobs (or JSONL of them), a TensorRT-LLM `/perf_metrics`
//! body — and lands on the request's page. The server tells the format apart and names the line
//! and field of anything it refused.

use leptos::prelude::*;

use crate::api::ImportReply;
use crate::links::request_href;

/// A response to try the page with: an answer cut short by an end-of-text token the model
/// gave 12 %.
const EXAMPLE: &str = r#"{"id": "chatcmpl-example", "object": "chat.completion", "created": 1796000000, "model": "example-8b",
 "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Paris is the capital"},
  "logprobs": {"content": [
   {"token": "Paris", "logprob": -0.02, "top_logprobs": [{"token": "Paris", "logprob": -0.02}, {"token": "The", "logprob": -4.1}]},
   {"token": " is", "logprob": -0.11, "top_logprobs": [{"token": " is", "logprob": -0.11}, {"token": ",", "logprob": -2.4}]},
   {"token": " the", "logprob": -0.05, "top_logprobs": [{"token": " the", "logprob": -0.05}, {"token": " France", "logprob": -3.3}]},
   {"token": " capital", "logprob": -0.01, "top_logprobs": [{"token": " capital", "logprob": -0.01}, {"token": " largest", "logprob": -5.0}]},
   {"token": "<|eot_id|>", "logprob": -2.12, "top_logprobs": [{"token": " of", "logprob": -0.14}, {"token": "<|eot_id|>", "logprob": -2.12}]}
  ]}}],
 "usage": {"prompt_tokens": 14, "completion_tokens": 5}}"#;

/// What the last import said.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Idle,
    Sending,
    Failed(String),
    /// Several requests (or refusals): listed rather than jumped to.
    Done(ImportReply),
}

#[component]
pub fn Upload() -> impl IntoView {
    let text = RwSignal::new(String::new());
    let instance = RwSignal::new(String::new());
    let outcome = RwSignal::new(Outcome::Idle);
    let over = RwSignal::new(false);
    #[cfg(feature = "hydrate")]
    let navigate = leptos_router::hooks::use_navigate();
    let submit = move || {
        #[cfg(feature = "hydrate")]
        live::send(
            text.get_untracked(),
            instance.get_untracked(),
            outcome,
            navigate.clone(),
        );
    };
    let drop = move |ev: leptos::ev::DragEvent| {
        ev.prevent_default();
        over.set(false);
        #[cfg(feature = "hydrate")]
        live::read_dropped(&ev, text);
    };
    let pick = move |ev: leptos::ev::Event| {
        #[cfg(feature = "hydrate")]
        live::read_picked(&ev, text);
        #[cfg(not(feature = "hydrate"))]
        let _ = ev;
    };
    view! {
        <section class="panel upload">
            <h1>"Upload a response"</h1>
            <p class="muted">"See how your answer was chosen, token by token: paste or drop what the engine returned. tokenscope reads "
                <b>"OpenAI chat or completions responses"</b>" with "<code>"logprobs"</code>" (and "<code>"top_logprobs"</code>" for the candidates), one JSON or JSON Lines of many (vLLM, SGLang and OpenAI return this shape), and "
                <b>"TensorRT-LLM "<code>"/perf_metrics"</code></b>" bodies or perf-time-event logs."</p>
            <div class="dropzone" class:over=move || over.get()
                on:dragover=move |ev: leptos::ev::DragEvent| { ev.prevent_default(); over.set(true); }
                on:dragleave=move |_| over.set(false)
                on:drop=drop>
                <textarea data-testid="upload-text" spellcheck="false"
                    placeholder="Paste a response here, or drop a .json / .jsonl file on this box"
                    prop:value=move || text.get()
                    on:input=move |ev| text.set(event_target_value(&ev))></textarea>
            </div>
            <div class="upload-row">
                <label class="field">"file "<input type="file" accept=".json,.jsonl,.txt,application/json" data-testid="upload-file" on:change=pick/></label>
                <button data-testid="upload-example" on:click=move |_| text.set(EXAMPLE.into())>"paste an example"</button>
                <label class="field">"instance "<input type="text" placeholder="default: openai-import / trtllm-import" data-testid="upload-instance"
                    prop:value=move || instance.get() on:input=move |ev| instance.set(event_target_value(&ev))/></label>
                <button class="primary" data-testid="upload-submit"
                    disabled=move || text.with(|t| t.trim().is_empty()) || outcome.get() == Outcome::Sending
                    on:click=move |_| submit()>{move || if outcome.get() == Outcome::Sending { "Importing…" } else { "Import and open" }}</button>
                <span class="muted">{move || text.with(|t| if t.is_empty() { String::new() } else { format!("{} KB", t.len().div_ceil(1024)) })}</span>
            </div>
            {move || match outcome.get() {
                Outcome::Idle | Outcome::Sending => ().into_any(),
                Outcome::Failed(e) => view! { <p class="error" data-testid="upload-error">{e}</p> }.into_any(),
                Outcome::Done(r) => report(r).into_any(),
            }}
        </section>
    }
}

/// The requests of an import that did not jump straight to one, and what was refused.
fn report(r: ImportReply) -> impl IntoView {
    let links = r
        .requests
        .iter()
        .map(|q| view! { <li><a href=request_href(&q.instance, &q.request_id)>{q.request_id.clone()}</a>" on "{q.instance.clone()}</li> })
        .collect_view();
    let refused = r
        .rejections
        .iter()
        .map(|x| view! { <li><b>{x.item.clone()}</b>": "<code>{x.field.clone()}</code>" "{x.message.clone()}</li> })
        .collect_view();
    view! {
        <div class="upload-report" data-testid="upload-report">
            <p>{format!("Read as {}: {} new, {} already here, {} refused.", r.format, r.accepted_requests, r.duplicate_requests, r.rejected_requests)}</p>
            <ul>{links}</ul>
            {(!r.rejections.is_empty()).then(|| view! { <h3>"Refused"</h3><ul class="error">{refused}</ul> })}
            {r.warnings.iter().map(|w| view! { <p class="muted">{w.clone()}</p> }).collect_view()}
        </div>
    }
}

#[cfg(feature = "hydrate")]
mod live {
    use leptos::prelude::*;
    use leptos::task::spawn_local;
    use wasm_bindgen::JsCast;
    use wasm_bindgen_futures::JsFuture;

    use super::Outcome;
    use crate::api::ImportReply;
    use crate::links::request_href;
    use crate::query::build;
    use crate::ui::fetch::post_json;

    pub fn send(
        text: String,
        instance: String,
        outcome: RwSignal<Outcome>,
        navigate: impl Fn(&str, leptos_router::NavigateOptions) + 'static,
    ) {
        outcome.set(Outcome::Sending);
        spawn_local(async move {
            let url = format!(
                "/api/v1/import{}",
                build(&[
                    ("format", "auto".into()),
                    ("instance", instance.trim().to_string())
                ])
            );
            match post_json::<ImportReply>(url, text).await {
                Err(e) => outcome.set(Outcome::Failed(e)),
                Ok(r) if r.requests.len() == 1 && r.rejections.is_empty() => {
                    let q = &r.requests[0];
                    let href = request_href(&q.instance, &q.request_id);
                    navigate(&href, Default::default());
                }
                Ok(r) => outcome.set(Outcome::Done(r)),
            }
        });
    }

    fn read(file: web_sys::File, text: RwSignal<String>) {
        spawn_local(async move {
            if let Ok(v) = JsFuture::from(file.text()).await {
                text.set(v.as_string().unwrap_or_default());
            }
        });
    }

    pub fn read_dropped(ev: &leptos::ev::DragEvent, text: RwSignal<String>) {
        if let Some(f) = ev
            .data_transfer()
            .and_then(|d| d.files())
            .and_then(|l| l.get(0))
        {
            read(f, text);
        }
    }

    pub fn read_picked(ev: &leptos::ev::Event, text: RwSignal<String>) {
        if let Some(f) = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok())
            .and_then(|i| i.files())
            .and_then(|l| l.get(0))
        {
            read(f, text);
        }
    }
}

//! The head of the request page: who (id, engine, model, instance, role, sampling), how fast
//! against the SLOs, the verdict, and the diagnosis as sentences with its culprits linked.

use leptos::prelude::*;

use super::Rq;
use crate::analysis::diagnosis::{Diagnosis, Verdict};
use crate::api::{RequestDetail, StageKind, VictimList};
use crate::links::{request_href, waterfall_href};
use crate::model::{FinishReason, Role, SamplingParams, ms};
use crate::query::{build, encode};
use crate::ui::format::{duration_ms, thousands};
use crate::ui::time::{Zone, date_time};

fn sampling_text(s: &SamplingParams) -> String {
    let mut parts = Vec::new();
    if let Some(v) = s.temperature {
        parts.push(format!("temperature {v}"));
    }
    if let Some(v) = s.top_p {
        parts.push(format!("top_p {v}"));
    }
    if let Some(v) = s.top_k {
        parts.push(format!("top_k {v}"));
    }
    if let Some(v) = s.max_tokens {
        parts.push(format!("max_tokens {v}"));
    }
    if let Some(v) = s.seed {
        parts.push(format!("seed {v}"));
    }
    if parts.is_empty() {
        "sampling parameters not reported".into()
    } else {
        parts.join(" · ")
    }
}

/// One figure against its SLO: `1.21 s` over `SLO 2 s`, red when broken.
#[component]
fn Kpi(label: &'static str, value: Option<f64>, slo: Option<f64>) -> impl IntoView {
    let over = value.zip(slo).is_some_and(|(v, s)| v > s);
    view! {
        <div class="kpi" class:over=over data-testid=format!("kpi-{}", label.to_lowercase())>
            <span>{label}</span>
            <b>{value.map(duration_ms).unwrap_or_else(|| "–".into())}</b>
            {slo.map(|s| view! { <small class="muted">{format!("SLO {}", duration_ms(s))}{if over { " ▲" } else { "" }}</small> })}
        </div>
    }
}

/// Who asked and through what (LoRA adapter, tenant, priority), and what the prefix cache served
/// with the prompt's fingerprint: the start of its block-hash chain, which requests sharing a
/// prompt's start share. None when the engine reported none of it.
fn who_line(d: &RequestDetail) -> Option<impl IntoView + use<>> {
    let (s, mut parts) = (&d.served, Vec::new());
    if let Some(l) = &s.lora_adapter {
        parts.push(format!("LoRA {l}"));
    }
    if let Some(t) = &s.tenant {
        parts.push(format!("tenant {t}"));
    }
    match s.priority {
        Some(p) if p != 0 => parts.push(format!("priority {p}")),
        _ => {}
    }
    if let Some(p) = &s.prefix_cache {
        let tiers: Vec<String> = [
            ("GPU", p.gpu_tokens),
            ("CPU", p.cpu_tokens),
            ("external", p.external_tokens),
        ]
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .map(|(tier, n)| format!("{tier} {}", thousands(n.into())))
        .collect();
        parts.push(format!(
            "prefix cache: {} of {} prompt tokens{}",
            thousands(d.cached_tokens.into()),
            thousands(d.summary.prompt_tokens.into()),
            if tiers.is_empty() {
                String::new()
            } else {
                format!(" ({})", tiers.join(", "))
            }
        ));
        if let Some(first) = p.block_hashes.first() {
            parts.push(format!(
                "prompt fingerprint {first:016x}… ({} blocks of {})",
                p.blocks, p.block_size
            ));
        }
    }
    (!parts.is_empty())
        .then(|| view! { <p class="muted rq-meta" data-testid="who">{parts.join(" · ")}</p> })
}

/// A PD request's parts in one line: where it was prefilled, the KV transfer, where it was
/// decoded; each part opens as that instance stored it.
fn parts_line(d: &RequestDetail, live: bool) -> Option<impl IntoView + use<>> {
    if d.parts.is_empty() {
        return None;
    }
    let transfer = d
        .stages
        .iter()
        .find(|s| s.kind == StageKind::KvTransfer)
        .map(|s| ms(s.end_ns - s.start_ns));
    let id = d.summary.request_id.clone();
    let n = d.parts.len();
    let items = d
        .parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let what = match p.role {
                Role::Prefill => "prefilled on ",
                Role::Decode => "decoded on ",
                Role::Colocated => "ran on ",
            };
            let name = if live {
                view! { <a href=request_href(&p.instance, &id) title="this part as its instance stored it">{p.instance.clone()}</a> }.into_any()
            } else {
                view! { <b>{p.instance.clone()}</b> }.into_any()
            };
            // Between a prefill part and the next, the KV cache moved.
            let after = match (i + 1 < n, p.role, transfer) {
                (false, ..) => None,
                (true, Role::Prefill, Some(t)) => {
                    Some(format!(" → KV transfer {} → ", duration_ms(t)))
                }
                (true, ..) => Some(" → ".to_string()),
            };
            view! { {what}{name}{after} }
        })
        .collect_view();
    let notes = d
        .notes
        .iter()
        .map(|n| view! { <p class="rq-meta rq-note" data-testid="note">{n.clone()}</p> })
        .collect_view();
    Some(view! {
        <p class="rq-meta rq-parts" data-testid="pd-parts"><b>"PD request: "</b>{items}</p>
        {notes}
    })
}

fn links(d: &RequestDetail) -> impl IntoView + use<> {
    let s = &d.summary;
    let q = build(&[("instance", s.instance.clone())]);
    let id = encode(&s.request_id);
    let wf = waterfall_href(&s.instance, &s.request_id, s.arrival_ns, s.e2e_ms);
    let trace = d.trace_id.clone().map(|t| {
        view! { <a href=format!("/{}", build(&[("find", t.clone())])) title="every part of this trace (PD: prefill and decode instances)">"trace "{t[..8.min(t.len())].to_string()}"…"</a> }
    });
    view! {
        <div class="rq-links">
            <a href=wf data-testid="show-in-waterfall">"show in waterfall"</a>
            <a href=format!("/api/v1/requests/{id}/tokens.csv{q}") data-testid="export-csv" download="">"tokens as CSV"</a>
            <a href=format!("/api/v1/requests/{id}/trace.json{q}") data-testid="export-trace" download="" title="Chrome trace JSON: open it in ui.perfetto.dev">"Chrome trace (Perfetto)"</a>
            {trace}
        </div>
    }
}

/// What a request without findings says: an abort the engine does not explain is not "as expected".
fn nothing_to_explain(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Abort => {
            "Aborted, and nothing in the engine explains it: its client went away, or a limit refused it."
        }
        _ => "Nothing to explain: within the SLOs, and the answer ended as expected.",
    }
}

/// At most this many of the requests it held up are named.
const HURT_SHOWN: usize = 8;

/// "Held up 6 other requests": the requests whose findings name this one as a culprit, most
/// held first, each linked.
fn held_up(hurt: VictimList) -> Option<impl IntoView> {
    let n = hurt.victims.len();
    (n > 0).then(|| {
        let items = hurt
            .victims
            .into_iter()
            .take(HURT_SHOWN)
            .map(|v| {
                let href = request_href(&v.instance, &v.request_id);
                let why = v.causes.join(", ").replace('_', " ");
                view! {
                    <li><a href=href>{v.request_id.clone()}</a>
                        {format!(" {} ({why})", duration_ms(v.held_ms))}</li>
                }
            })
            .collect_view();
        let more = n.saturating_sub(HURT_SHOWN);
        view! {
            <div class="held-up" data-testid="held-up">
                <p><b>{format!("Held up {n} other request{}", if n == 1 { "" } else { "s" })}</b>
                    " (their findings name this one; time its prefill held the engine in their wait):"</p>
                <ul>{items}{(more > 0).then(|| view! { <li class="muted">{format!("and {more} more")}</li> })}</ul>
            </div>
        }
    })
}

#[component]
pub fn Head(rq: Rq, dx: Diagnosis, hurt: VictimList) -> impl IntoView {
    let zone = use_context::<RwSignal<Zone>>().unwrap_or_default();
    let th = rq.th.get_value();
    rq.d.with_value(|d| {
        let s = d.summary.clone();
        let slow = dx.speed == Verdict::Degraded;
        let odd = dx.words == Verdict::Degraded;
        let quiet = dx.findings.is_empty();
        // Word-choice-only sources (OpenAI responses) say nothing about time.
        let timed = s.e2e_ms > 0.0 || s.ttft_ms.is_some();
        let findings = dx
            .findings
            .iter()
            .map(|f| {
                let label = if f.inferred { " (inferred from spans)" } else { "" };
                crate::ui::finding::item(f.clone(), &s.instance, label.into())
            })
            .collect_view();
        let suggested = crate::ui::incident::create::suggested_title(&dx, &s.instance);
        let arrival = s.arrival_ns;
        let id = s.request_id.clone();
        let copy = move |_| {
            #[cfg(feature = "hydrate")]
            if let Some(w) = web_sys::window() {
                let _ = w.navigator().clipboard().write_text(&id);
            }
            #[cfg(not(feature = "hydrate"))]
            let _ = &id;
        };
        view! {
            <section class="panel rq-head">
                <div class="rq-title">
                    <h1 class="sel-id" data-testid="request-id">{s.request_id.clone()}</h1>
                    <button class="copy" title="Copy the request id" data-testid="copy-id" on:click=copy>"copy"</button>
                    {crate::ui::finding::verdicts(slow, odd, timed)}
                </div>
                <p class="muted rq-meta">
                    {format!("{} · {} · {} · {} · finished: {} · ", s.engine.as_str(), s.model, s.instance,
                        if d.parts.is_empty() { d.role.as_str() } else { "prefill → decode" }, s.finish_reason.as_str())}
                    <span class="time">{move || { let z = zone.get(); format!("arrived {} ({})", date_time(arrival, &z), z.label()) }}</span>
                </p>
                {parts_line(d, rq.live)}
                {who_line(d)}
                {super::prompt::strip(d)}
                <p class="muted rq-meta" data-testid="sampling">{sampling_text(&d.sampling)}</p>
                <div class="kpis">
                    <Kpi label="TTFT" value=s.ttft_ms slo=Some(th.ttft_ms)/>
                    <Kpi label="TPOT" value=s.tpot_ms slo=Some(th.tpot_ms)/>
                    <Kpi label="E2E" value=timed.then_some(s.e2e_ms) slo=None/>
                    <Kpi label="Queue" value=s.queue_ms slo=None/>
                    <div class="kpi"><span>"Tokens"</span><b>{format!("{} → {}", thousands(s.prompt_tokens.into()), thousands(s.output_tokens.into()))}</b>
                        <small class="muted">{if d.cached_tokens > 0 { format!("{} cached", thousands(d.cached_tokens.into())) } else { "prompt → output".into() }}</small></div>
                    {(d.preemptions > 0).then(|| view! { <div class="kpi over"><span>"Preempted"</span><b>{d.preemptions}" ×"</b></div> })}
                </div>
                <ul class="findings" data-testid="findings">
                    {findings}
                    {quiet.then(|| view! { <li class="muted">{nothing_to_explain(s.finish_reason)}</li> })}
                </ul>
                {held_up(hurt)}
                {if rq.live {
                    view! {
                        {links(d)}
                        <div class="rq-links"><crate::ui::incident::create::CreateIncident instance=s.instance.clone()
                            request_id=s.request_id.clone() suggested=suggested.clone()/></div>
                    }.into_any()
                } else {
                    view! { <p class="muted">"Frozen in this incident: the numbers, stages, tokens and diagnosis as they were."</p> }.into_any()
                }}
            </section>
        }
    })
}

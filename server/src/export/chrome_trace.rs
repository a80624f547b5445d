//! A request as Chrome trace JSON (the Trace Event Format that Perfetto UI and chrome://tracing
//! open): its stages as complete events on one track, each token as an instant on a second, and
//! the batch and queue of each token's step as counters.
//!
//! Times are microseconds since the request arrived (absolute nanoseconds do not survive a
//! double's precision in microseconds); the arrival itself is in the metadata.

use serde::Serialize;

use tokenscope_core::api::{RequestDetail, StageKind};
use tokenscope_core::model::Nanos;

/// One event of the Trace Event Format (`ph`: `X` complete, `i` instant, `C` counter,
/// `M` metadata).
#[derive(Serialize)]
struct Event<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    cat: &'a str,
    ph: &'static str,
    ts: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    tid: u32,
    /// Scope of an instant event: `t`, the thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    args: serde_json::Value,
}

#[derive(Serialize)]
struct Trace<'a> {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<Event<'a>>,
    #[serde(rename = "displayTimeUnit")]
    display_time_unit: &'static str,
    metadata: serde_json::Value,
}

const PID: u32 = 1;
const STAGES: u32 = 1;
const TOKENS: u32 = 2;

fn stage_name(k: StageKind) -> &'static str {
    match k {
        StageKind::Queued => "queued",
        StageKind::Prefill => "prefill",
        StageKind::Decode => "decode",
        StageKind::Preempted => "preempted",
        StageKind::KvTransfer => "kv transfer",
    }
}

fn meta<'a>(name: &'a str, tid: u32, value: &str) -> Event<'a> {
    Event {
        name,
        cat: "",
        ph: "M",
        ts: 0.0,
        dur: None,
        pid: PID,
        tid,
        s: None,
        args: serde_json::json!({ "name": value }),
    }
}

pub fn chrome_trace(d: &RequestDetail) -> String {
    let s = &d.summary;
    let us = |ns: Nanos| (ns - s.arrival_ns) as f64 / 1000.0;
    let mut events = vec![
        meta(
            "process_name",
            STAGES,
            &format!("{} ({})", s.instance, s.engine.as_str()),
        ),
        meta("thread_name", STAGES, &format!("request {}", s.request_id)),
        meta("thread_name", TOKENS, "tokens"),
    ];
    events.extend(d.stages.iter().map(|st| Event {
        name: stage_name(st.kind),
        cat: "stage",
        ph: "X",
        ts: us(st.start_ns),
        dur: Some((st.end_ns - st.start_ns) as f64 / 1000.0),
        pid: PID,
        tid: STAGES,
        s: None,
        args: serde_json::json!({ "tokens": st.tokens, "iteration": st.iteration }),
    }));
    for t in &d.tokens {
        let Some(at) = t.emitted_ns else { continue };
        events.push(Event {
            name: t.text.as_deref().unwrap_or("(no text)"),
            cat: "token",
            ph: "i",
            ts: us(at),
            dur: None,
            pid: PID,
            tid: TOKENS,
            s: Some("t"),
            args: serde_json::json!({
                "index": t.index, "token_id": t.token_id, "special": t.special.as_str(),
                "latency_ms": t.latency_ms, "wait_ms": t.wait_ms, "compute_ms": t.compute_ms,
                "iteration": t.iteration, "logprob": t.logprob, "rank": t.rank,
                "flags": t.flags, "prefilled_meanwhile": t.prefilled_meanwhile,
            }),
        });
        if t.batch_size.is_some() || t.waiting.is_some() {
            events.push(Event {
                name: "step load",
                cat: "",
                ph: "C",
                ts: us(at),
                dur: None,
                pid: PID,
                tid: TOKENS,
                s: None,
                args: serde_json::json!({ "batch": t.batch_size, "waiting": t.waiting }),
            });
        }
    }
    let trace = Trace {
        trace_events: events,
        display_time_unit: "ms",
        metadata: serde_json::json!({
            "request_id": s.request_id, "instance": s.instance, "model": s.model,
            "arrival_unix_ns": s.arrival_ns, "ttft_ms": s.ttft_ms, "tpot_ms": s.tpot_ms,
            "e2e_ms": s.e2e_ms, "source": "tokenscope",
        }),
    };
    serde_json::to_string(&trace).unwrap_or_default()
}

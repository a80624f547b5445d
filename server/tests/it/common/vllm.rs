//! The simulator's requests as vLLM exports them today: one `llm_request` span per request with
//! its queue, prefill, first-token and end-to-end times and token counts; no iteration records,
//! no per-token events, no chunk spans.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value::Value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use tokenscope_core::model::RequestTrace;
use tokenscope_sim::scenarios::InstanceRun;

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..KeyValue::default()
    }
}

fn seconds(ns: i64) -> Value {
    Value::DoubleValue(ns as f64 / 1e9)
}

fn span(r: &RequestTrace, n: u64, model: &str) -> Span {
    let scheduled = r.first_scheduled_at().unwrap_or(r.arrival_ns);
    let first = r.first_token_at().unwrap_or(r.finished_ns);
    let mut trace_id = [0u8; 16];
    trace_id[..8].copy_from_slice(&(n + 1).to_be_bytes());
    Span {
        trace_id: trace_id.to_vec(),
        span_id: (n + 1).to_be_bytes().to_vec(),
        name: "llm_request".into(),
        kind: 3,
        start_time_unix_nano: r.arrival_ns as u64,
        end_time_unix_nano: r.finished_ns as u64,
        attributes: vec![
            kv(
                "gen_ai.request.id",
                Value::StringValue(r.request_id.clone()),
            ),
            kv(
                "gen_ai.latency.time_in_queue",
                seconds(scheduled - r.arrival_ns),
            ),
            kv(
                "gen_ai.latency.time_in_model_prefill",
                seconds(first - scheduled),
            ),
            kv(
                "gen_ai.latency.time_to_first_token",
                seconds(first - r.arrival_ns),
            ),
            kv("gen_ai.latency.e2e", seconds(r.finished_ns - r.arrival_ns)),
            kv(
                "gen_ai.usage.prompt_tokens",
                Value::IntValue(r.prompt_tokens.into()),
            ),
            kv(
                "gen_ai.usage.completion_tokens",
                Value::IntValue(r.tokens.len() as i64),
            ),
            kv(
                "gen_ai.response.finish_reasons",
                Value::ArrayValue(ArrayValue {
                    values: vec![AnyValue {
                        value: Some(Value::StringValue("stop".into())),
                    }],
                }),
            ),
            kv("gen_ai.response.model", Value::StringValue(model.into())),
        ],
        ..Span::default()
    }
}

/// One export with a resource per instance, served by Llama-3.1-8B (the simulated model).
pub fn vllm_export(runs: &[InstanceRun]) -> ExportTraceServiceRequest {
    vllm_export_serving(runs, "meta-llama/Llama-3.1-8B-Instruct")
}

/// [`vllm_export`] with every response naming `model`.
pub fn vllm_export_serving(runs: &[InstanceRun], model: &str) -> ExportTraceServiceRequest {
    let mut n = 0;
    ExportTraceServiceRequest {
        resource_spans: runs
            .iter()
            .map(|run| ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![
                        kv("service.name", Value::StringValue("vllm".into())),
                        kv(
                            "service.instance.id",
                            Value::StringValue(run.resource.instance_id.clone()),
                        ),
                    ],
                    ..Resource::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "vllm.llm_engine".into(),
                        ..InstrumentationScope::default()
                    }),
                    spans: run
                        .output
                        .requests
                        .iter()
                        .map(|r| {
                            n += 1;
                            span(r, n, model)
                        })
                        .collect(),
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            })
            .collect(),
    }
}

//! vLLM-shaped OTLP exports for the benches: `llm_request` spans of 256 tokens with LoongSuite
//! per-token arrays (emission and schedule times, batch, queue) and top-5 candidates whose
//! `per_position_*` arrays arrive as JSON strings, the way the LoongSuite exporter sends them;
//! 16 spans an export, four instances.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, any_value::Value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use tokenscope::fixtures::{Rng, token_text};

pub const TOKENS: usize = 256;
pub const TOP_K: usize = 5;
pub const SPANS_PER_EXPORT: usize = 16;
const T0: i64 = 1_796_022_000_000_000_000;

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..KeyValue::default()
    }
}

fn array(values: impl Iterator<Item = Value>) -> Value {
    Value::ArrayValue(ArrayValue {
        values: values.map(|v| AnyValue { value: Some(v) }).collect(),
    })
}

fn span(n: usize, rng: &mut Rng) -> Span {
    let arrival = T0 + n as i64 * 40_000_000;
    let step = 0.03;
    let ttft = 0.12;
    let ids: Vec<Vec<u32>> = (0..TOKENS)
        .map(|_| (0..TOP_K).map(|_| rng.below(100_000) as u32).collect())
        .collect();
    let texts: Vec<Vec<String>> = ids
        .iter()
        .map(|c| c.iter().map(|&id| token_text(id)).collect())
        .collect();
    let logprobs: Vec<Vec<f64>> = (0..TOKENS)
        .map(|_| {
            let mut l: Vec<f64> = (0..TOP_K)
                .map(|_| -(rng.below(8000) as f64) / 1000.0)
                .collect();
            l.sort_by(|a, b| b.total_cmp(a));
            l
        })
        .collect();
    let json = |v: &dyn erased::Json| Value::StringValue(v.to_json());
    let e2e = ttft + step * (TOKENS - 1) as f64;
    Span {
        trace_id: (n as u128 + 1).to_be_bytes().to_vec(),
        span_id: (n as u64 + 1).to_be_bytes().to_vec(),
        name: "llm_request".into(),
        start_time_unix_nano: arrival as u64,
        end_time_unix_nano: (arrival + (e2e * 1e9) as i64) as u64,
        attributes: vec![
            kv(
                "gen_ai.request.id",
                Value::StringValue(format!("cmpl-{n:032x}-0")),
            ),
            kv(
                "gen_ai.latency.time_to_first_token",
                Value::DoubleValue(ttft),
            ),
            kv("gen_ai.latency.e2e", Value::DoubleValue(e2e)),
            kv("gen_ai.latency.time_in_queue", Value::DoubleValue(0.015)),
            kv(
                "gen_ai.latency.time_in_model_prefill",
                Value::DoubleValue(0.09),
            ),
            kv("gen_ai.usage.prompt_tokens", Value::IntValue(812)),
            kv(
                "gen_ai.usage.completion_tokens",
                Value::IntValue(TOKENS as i64),
            ),
            kv(
                "gen_ai.response.model",
                Value::StringValue("meta-llama/Llama-3.1-8B-Instruct".into()),
            ),
            kv(
                "gen_ai.response.finish_reasons",
                array(std::iter::once(Value::StringValue("length".into()))),
            ),
            kv(
                "gen_ai.response.per_token_time_to_generate",
                array((0..TOKENS).map(|k| Value::DoubleValue(ttft + step * k as f64))),
            ),
            kv(
                "gen_ai.response.per_token_time_to_schedule",
                array((0..TOKENS).map(|k| Value::DoubleValue(ttft - 0.025 + step * k as f64))),
            ),
            kv(
                "gen_ai.iteration.per_token_batch_size",
                array((0..TOKENS).map(|k| Value::IntValue(24 + (k % 8) as i64))),
            ),
            kv(
                "gen_ai.iteration.per_token_waiting_requests",
                array((0..TOKENS).map(|k| Value::IntValue((k % 4) as i64))),
            ),
            kv(
                "gen_ai.response.candidate.per_position_token_ids",
                json(&ids),
            ),
            kv(
                "gen_ai.response.candidate.per_position_decoded_tokens",
                json(&texts),
            ),
            kv(
                "gen_ai.response.candidate.per_position_logprobs",
                json(&logprobs),
            ),
        ],
        ..Span::default()
    }
}

mod erased {
    pub trait Json {
        fn to_json(&self) -> String;
    }
    impl<T: serde::Serialize> Json for T {
        fn to_json(&self) -> String {
            serde_json::to_string(self).unwrap_or_default()
        }
    }
}

pub fn export(e: usize, rng: &mut Rng) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", Value::StringValue("vllm".into())),
                    kv(
                        "service.instance.id",
                        Value::StringValue(format!("gpu-{}", e % 4)),
                    ),
                ],
                ..Resource::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: (0..SPANS_PER_EXPORT)
                    .map(|k| span(e * SPANS_PER_EXPORT + k, rng))
                    .collect(),
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
}

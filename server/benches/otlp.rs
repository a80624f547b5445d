//! OTLP ingest without the database, per core: vLLM-shaped `llm_request` spans of 256 tokens with
//! LoongSuite per-token arrays (times, batch, queue) and top-5 candidates whose `per_position_*`
//! arrays arrive as JSON strings (about 64 KB a span), in exports of 16 spans. Times protobuf
//! decode, the mapping to the model (validation included), and the token-block encoding the store
//! writes, on one thread. Prints figures; asserts nothing. `cargo bench -p tokenscope --bench otlp`
//! (also run by `scripts/bench ingest`).

use std::time::Instant;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, any_value::Value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

use tokenscope::fixtures::{Rng, token_text};
use tokenscope::ingest::otlp::{self, assemble::Assembler};
use tokenscope::store::token_block;

const TOKENS: usize = 256;
const TOP_K: usize = 5;
const SPANS_PER_EXPORT: usize = 16;
const EXPORTS: usize = 96;
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

fn export(e: usize, rng: &mut Rng) -> ExportTraceServiceRequest {
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

fn main() {
    let mut rng = Rng::new(3);
    let wire: Vec<Vec<u8>> = (0..EXPORTS)
        .map(|e| export(e, &mut rng).encode_to_vec())
        .collect();
    let bytes: usize = wire.iter().map(Vec::len).sum();
    let spans = EXPORTS * SPANS_PER_EXPORT;
    let tokens = spans * TOKENS;
    let assembler = Assembler::default();
    // Warm up, then three timed passes; the best is reported (the machine is shared).
    let mut best = [f64::INFINITY; 3];
    for pass in 0..4 {
        let (mut decode, mut map, mut encode) = (0.0, 0.0, 0.0);
        let mut mapped_tokens = 0;
        for w in &wire {
            let t = Instant::now();
            let export = ExportTraceServiceRequest::decode(w.as_slice()).expect("valid protobuf");
            let t1 = Instant::now();
            let m = otlp::decode(export, None, &assembler);
            let t2 = Instant::now();
            for b in &m.decoded.batches {
                for r in &b.requests {
                    let block = token_block::encode(&r.value.tokens, r.value.arrival_ns, |_| None);
                    mapped_tokens += r.value.tokens.len();
                    std::hint::black_box(block);
                }
            }
            let t3 = Instant::now();
            decode += (t1 - t).as_secs_f64();
            map += (t2 - t1).as_secs_f64();
            encode += (t3 - t2).as_secs_f64();
        }
        assert_eq!(mapped_tokens, tokens, "every span maps");
        if pass > 0 {
            for (b, v) in best.iter_mut().zip([decode, map, encode]) {
                *b = b.min(v);
            }
        }
    }
    let total: f64 = best.iter().sum();
    let rate = |s: f64| tokens as f64 / s;
    println!(
        "otlp (no database): {spans} vLLM spans × {TOKENS} tokens, top-{TOP_K} as JSON strings, {:.1} KB a span, one thread",
        bytes as f64 / spans as f64 / 1024.0
    );
    println!(
        "  protobuf decode {:>7.0} ms   map {:>7.0} ms   token-block encode {:>7.0} ms",
        best[0] * 1e3,
        best[1] * 1e3,
        best[2] * 1e3
    );
    println!(
        "  decode + map + encode: {:.0}k tokens/s per core ({:.0} µs a span; map alone {:.0}k tokens/s)",
        rate(total) / 1e3,
        total / spans as f64 * 1e6,
        rate(best[1]) / 1e3
    );
}

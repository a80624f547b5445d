//! OTLP ingest: golden fixtures mapped to the model (snapshots), and real OTLP exports over
//! gRPC and HTTP read back through the query API.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, trace_service_client::TraceServiceClient,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
use prost::Message;
use tokenscope::access::Grant;
use tokenscope::ingest::otlp;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn load_any(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn load(rel: &str) -> ExportTraceServiceRequest {
    let text = std::fs::read_to_string(fixtures().join(rel)).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every `*.otlp.json` maps to exactly its snapshot beside it, `*.snap` (insta: `cargo insta
/// review`, or `INSTA_UPDATE=always` to rewrite, then read the diff).
#[test]
fn golden_fixtures_map_to_their_snapshots() {
    let mut checked = 0;
    for engine in std::fs::read_dir(fixtures()).unwrap() {
        for file in std::fs::read_dir(engine.unwrap().path()).unwrap() {
            let path = file.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            let Some(stem) = name.strip_suffix(".otlp.json") else {
                continue;
            };
            // A file holds one export, or an array of exports sent one after another.
            let exports: Vec<ExportTraceServiceRequest> = match load_any(&path) {
                serde_json::Value::Array(items) => items
                    .iter()
                    .map(|v| serde_json::from_str(&v.to_string()).unwrap())
                    .collect(),
                one => vec![serde_json::from_str(&one.to_string()).unwrap()],
            };
            let assembler = otlp::assemble::Assembler::default();
            let steps: Vec<serde_json::Value> = exports
                .into_iter()
                .map(|export| {
                    let mapped = otlp::decode(export, None, &assembler, &Grant::All, &Default::default());
                    serde_json::json!({
                        "batches": mapped.decoded.batches.iter().map(|b| serde_json::json!({
                            "resource": b.resource,
                            "requests": b.requests.iter().map(|r| &r.value).collect::<Vec<_>>(),
                        })).collect::<Vec<_>>(),
                        "rejections": mapped.decoded.rejections.iter()
                            .map(|r| format!("{}: {}: {}", r.item, r.field, r.message)).collect::<Vec<_>>(),
                        "warnings": mapped.warnings,
                        "ignored_spans": mapped.ignored_spans,
                        "held_spans_after": assembler.held_spans(),
                    })
                })
                .collect();
            let actual = if steps.len() == 1 {
                steps.into_iter().next().unwrap()
            } else {
                serde_json::Value::Array(steps)
            };
            insta::with_settings!({
                snapshot_path => path.parent().unwrap(),
                prepend_module_to_snapshot => false,
                description => format!("{name} mapped to the model"),
            }, {
                insta::assert_json_snapshot!(stem, actual);
            });
            checked += 1;
        }
    }
    assert!(checked >= 3, "fixtures were found ({checked})");
}

async fn check_vllm_request(app: &TestApp, id: &str) {
    let d = app.get_json(&format!("/api/v1/requests/{id}")).await;
    assert_eq!(d["engine"], "vllm");
    assert_eq!(d["instance"], "gpu-7");
    assert_eq!(d["model"], "meta-llama/Llama-3.1-8B-Instruct");
    assert_eq!(d["ttft_ms"], 120.0);
    assert_eq!(d["tpot_ms"], 30.0);
    assert_eq!(d["queue_ms"], 15.0);
    assert_eq!(d["e2e_ms"], 210.0);
    assert_eq!(d["prompt_tokens"], 812);
    assert_eq!(d["output_tokens"], 4);
    assert_eq!(d["finish_reason"], "stop");
    let tokens = d["tokens"].as_array().unwrap();
    assert_eq!(latencies_ms(&d), [120.0, 30.0, 30.0, 30.0]);
    assert_eq!(tokens[1]["batch_size"], 25);
    assert_eq!(tokens[1]["waiting"], 3);
    assert_eq!(tokens[1]["scheduled_ns"], T0 + 125_000_000);
    // The latency splits into waiting to be scheduled and computing.
    assert_eq!(tokens[1]["wait_ms"], 5.0);
    assert_eq!(tokens[1]["compute_ms"], 25.0);
    // Emitted-first candidates come back in rank order, with the chosen token's rank.
    let eos = &tokens[3];
    assert_eq!(eos["is_special"], true);
    assert_eq!(eos["special"], "eos");
    assert_eq!(eos["rank"], 2);
    assert_eq!(eos["flags"], serde_json::json!(["low_probability_eos"]));
    assert!(
        eos["margin"].as_f64().unwrap() < -0.7,
        "a much likelier token existed: {}",
        eos["margin"]
    );
    let p = (eos["logprob"].as_f64().unwrap()).exp();
    assert!((p - 0.1).abs() < 0.001, "EOS sampled at p≈0.1, got {p}");
    let cand_ids: Vec<u64> = eos["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["token_id"].as_u64().unwrap())
        .collect();
    assert_eq!(cand_ids, [220, 128009]);
    assert_eq!(tokens[0]["rank"], 1);
    assert_eq!(tokens[0]["candidates"][0]["text"], "The");
}

#[tokio::test]
async fn vllm_span_with_token_events_over_otlp_http_json() {
    let app = spawn_app().await;
    let body = std::fs::read_to_string(fixtures().join("vllm/llm_request_token_events.otlp.json"))
        .unwrap();
    let resp = app.post_json("/v1/traces", body).await;
    assert_eq!(resp.status(), 200);
    let reply: serde_json::Value = resp.json().await.unwrap();
    assert!(
        reply.get("partialSuccess").is_none_or(|p| p.is_null()),
        "{reply}"
    );
    check_vllm_request(&app, "cmpl-3f2a9c1e").await;
}

#[tokio::test]
async fn vllm_span_with_token_arrays_over_otlp_http_protobuf() {
    let app = spawn_app().await;
    let body = load("vllm/llm_request_token_arrays.otlp.json").encode_to_vec();
    let resp = app
        .client
        .post(format!("{}/v1/traces", app.http))
        .header("content-type", "application/x-protobuf")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-protobuf");
    check_vllm_request(&app, "cmpl-arrays").await;
}

fn set_attr(span: &mut opentelemetry_proto::tonic::trace::v1::Span, key: &str, value: Value) {
    span.attributes.retain(|kv| kv.key != key);
    span.attributes.push(KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    });
}

/// A request's tenant comes from the span attribute the server was told to read (a gateway's
/// own), before OpenTelemetry's `user.id`; without the setting, from `user.id`.
#[tokio::test]
async fn the_tenant_comes_from_the_configured_span_attribute_first() {
    let export = |id: &str| {
        let mut e = load("vllm/llm_request_token_arrays.otlp.json");
        let span = &mut e.resource_spans[0].scope_spans[0].spans[0];
        set_attr(span, "gen_ai.request.id", Value::StringValue(id.into()));
        set_attr(span, "user.id", Value::StringValue("user-7".into()));
        set_attr(span, "org.tenant", Value::StringValue("acme".into()));
        e
    };
    for (configured, want) in [(vec!["org.tenant".to_string()], "acme"), (vec![], "user-7")] {
        let app = spawn_app_with(|c| c.otlp_tenant_attributes = configured).await;
        let mut client = TraceServiceClient::connect(format!("http://{}", app.running.grpc_addr))
            .await
            .unwrap();
        let reply = client
            .export(export("tenanted"))
            .await
            .expect("export succeeds")
            .into_inner();
        assert!(reply.partial_success.is_none(), "{reply:?}");
        let d = app.get_json("/api/v1/requests/tenanted").await;
        assert_eq!(d["tenant"], want, "{d}");
    }
}

#[tokio::test]
async fn malformed_spans_are_rejected_one_by_one_over_grpc() {
    let app = spawn_app().await;
    let mut export = load("vllm/llm_request_token_events.otlp.json");
    let good = export.resource_spans[0].scope_spans[0].spans[0].clone();
    let spans = &mut export.resource_spans[0].scope_spans[0].spans;
    let mut variant =
        |id: &str, change: &dyn Fn(&mut opentelemetry_proto::tonic::trace::v1::Span)| {
            let mut s = good.clone();
            set_attr(&mut s, "gen_ai.request.id", Value::StringValue(id.into()));
            change(&mut s);
            spans.push(s);
        };
    variant("wrong-type", &|s| {
        set_attr(s, "gen_ai.latency.e2e", Value::StringValue("fast".into()))
    });
    variant("absurd-time", &|s| s.start_time_unix_nano = 1_796_022_000); // seconds, not ns
    variant("mismatched", &|s| {
        s.events.retain(|e| {
            e.name != "gen_ai.token.generated" || e.time_unix_nano != (T0 + 150_000_000) as u64
        });
        let e = s
            .events
            .iter_mut()
            .find(|e| e.name == "gen_ai.token.generated")
            .unwrap();
        e.attributes
            .retain(|kv| kv.key != "gen_ai.response.candidate.logprobs");
        e.attributes.push(KeyValue {
            key: "gen_ai.response.candidate.logprobs".into(),
            value: Some(AnyValue {
                value: Some(Value::DoubleValue(-0.1)),
            }),
            ..Default::default()
        });
    });
    let mut client = TraceServiceClient::connect(format!("http://{}", app.running.grpc_addr))
        .await
        .unwrap();
    let reply = client.export(export).await.unwrap().into_inner();
    let partial = reply.partial_success.expect("partial success is reported");
    assert_eq!(partial.rejected_spans, 3, "{}", partial.error_message);
    for needle in [
        "\"gen_ai.latency.e2e\"",
        "expected a number, got the string \"fast\"",
        "start_time_unix_nano: 1796022000 is not nanoseconds",
        "expected an array",
    ] {
        assert!(
            partial.error_message.contains(needle),
            "{needle} in {}",
            partial.error_message
        );
    }
    check_vllm_request(&app, "cmpl-3f2a9c1e").await;
    assert_eq!(app.get("/api/v1/requests/wrong-type").await.status(), 404);
}

#[tokio::test]
async fn exports_far_above_four_mib_are_accepted_over_grpc() {
    let app = spawn_app().await;
    let mut export = load("vllm/llm_request_token_events.otlp.json");
    let template = export.resource_spans[0].scope_spans[0].spans[0].clone();
    let spans = &mut export.resource_spans[0].scope_spans[0].spans;
    spans.clear();
    for k in 0..6000 {
        let mut s = template.clone();
        set_attr(
            &mut s,
            "gen_ai.request.id",
            Value::StringValue(format!("big-{k}")),
        );
        spans.push(s);
    }
    let size = export.encoded_len();
    assert!(size > 12 << 20, "export is {size} bytes");
    let mut client = TraceServiceClient::connect(format!("http://{}", app.running.grpc_addr))
        .await
        .unwrap()
        .max_encoding_message_size(64 << 20);
    let reply = client
        .export(export)
        .await
        .expect("a large export is accepted")
        .into_inner();
    assert!(reply.partial_success.is_none());
    let list = app.get_json("/api/v1/requests?limit=10000").await;
    assert_eq!(list["requests"].as_array().unwrap().len(), 6000);
}

fn load_sequence(rel: &str) -> Vec<ExportTraceServiceRequest> {
    match load_any(&fixtures().join(rel)) {
        serde_json::Value::Array(items) => items
            .iter()
            .map(|v| serde_json::from_str(&v.to_string()).unwrap())
            .collect(),
        _ => panic!("{rel} is not a sequence of exports"),
    }
}

#[tokio::test]
async fn sglang_request_assembled_from_three_exports() {
    let app = spawn_app().await;
    let mut client = TraceServiceClient::connect(format!("http://{}", app.running.grpc_addr))
        .await
        .unwrap();
    let exports = load_sequence("sglang/request_in_three_exports.otlp.json");
    for (k, export) in exports.into_iter().enumerate() {
        let reply = client.export(export).await.unwrap().into_inner();
        assert!(
            reply.partial_success.is_none(),
            "export {k}: {:?}",
            reply.partial_success
        );
        let status = app.get("/api/v1/requests/5d1e7a0c9b8f4e2a").await.status();
        assert_eq!(status, if k < 2 { 404 } else { 200 }, "after export {k}");
    }
    let d = app.get_json("/api/v1/requests/5d1e7a0c9b8f4e2a").await;
    assert_eq!(d["engine"], "sglang");
    assert_eq!(d["instance"], "sglang@node-7");
    assert_eq!(d["model"], "Qwen/Qwen3-8B");
    assert_eq!(d["ttft_ms"], 420.0);
    assert_eq!(d["queue_ms"], 248.0);
    assert_eq!(d["tpot_ms"], 24.5);
    assert_eq!(d["e2e_ms"], 1400.0);
    assert_eq!(d["preemptions"], 1);
    let kinds = stage_kinds(&d, "stages");
    assert_eq!(
        kinds,
        [
            "queued",
            "prefill",
            "prefill",
            "prefill",
            "decode",
            "preempted"
        ],
        "TP 1 duplicates are not counted"
    );
}

#[tokio::test]
async fn sglang_stages_without_a_root_are_stored_after_the_timeout() {
    let app = spawn_app().await; // assembly timeout: 2 s
    let mut client = TraceServiceClient::connect(format!("http://{}", app.running.grpc_addr))
        .await
        .unwrap();
    for export in load_sequence("sglang/request_in_three_exports.otlp.json")
        .into_iter()
        .take(2)
    {
        client.export(export).await.unwrap();
    }
    let id = "sglang-2222222222222222";
    let mut found = false;
    for _ in 0..50 {
        if app.get(&format!("/api/v1/requests/{id}")).await.status() == 200 {
            found = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(
        found,
        "the held stages were stored under the missing root's id"
    );
    let d = app.get_json(&format!("/api/v1/requests/{id}")).await;
    assert_eq!(d["queue_ms"], 248.0);
    assert_eq!(
        d["ttft_ms"], 420.0,
        "without the root, arrival is the start of the earliest span"
    );
    assert_eq!(d["output_tokens"], 0, "counts lived on the missing root");
}

//! File imports over HTTP and from the command line: TensorRT-LLM perf metrics and perf-time-events
//! logs, and OpenAI-style responses, read back through the query API.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// The fixtures' steady clock starts at 5,000 s; this offset puts it at T0.
const OFFSET: &str = "1796017000";

async fn import(app: &TestApp, query: &str, rel: &str) -> reqwest::Response {
    import_body(app, query, std::fs::read(fixture(rel)).unwrap()).await
}

async fn import_body(
    app: &TestApp,
    query: &str,
    body: impl Into<reqwest::Body>,
) -> reqwest::Response {
    app.client
        .post(format!("{}/api/v1/import?{query}", app.http))
        .body(body)
        .send()
        .await
        .unwrap()
}

fn close(v: &serde_json::Value, want: f64) -> bool {
    v.as_f64().is_some_and(|x| (x - want).abs() < 1e-6)
}

#[tokio::test]
async fn trtllm_perf_metrics_over_http() {
    let app = spawn_app().await;
    let resp = import(
        &app,
        &format!("format=trtllm-perf-metrics&instance=gen-3&model=llama&clock_offset_s={OFFSET}"),
        "trtllm/perf_metrics.json",
    )
    .await;
    assert_eq!(resp.status(), 200);
    let reply: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(reply["accepted_requests"], 2, "{reply}");
    assert_eq!(reply["rejected_requests"], 1);
    assert_eq!(
        reply["rejections"][0]["field"],
        "timing_metrics.arrival_time"
    );
    assert!(
        reply["warnings"][0]
            .as_str()
            .unwrap()
            .contains("1 requests have no per-step metrics"),
        "{reply}"
    );
    assert_eq!(
        reply["accepted_iterations"], 10,
        "two context chunks and eight decode steps"
    );

    let d = app.get_json("/api/v1/requests/1001?instance=gen-3").await;
    assert_eq!(d["engine"], "trtllm");
    assert_eq!(d["arrival_ns"], T0);
    assert!(close(&d["ttft_ms"], 152.0), "{}", d["ttft_ms"]);
    assert!(close(&d["tpot_ms"], 30.0), "{}", d["tpot_ms"]);
    assert!(close(&d["queue_ms"], 50.0), "{}", d["queue_ms"]);
    assert_eq!(d["output_tokens"], 9);
    assert_eq!(d["prompt_tokens"], 3048);
    let tokens = d["tokens"].as_array().unwrap();
    let latencies = latencies_ms(&d);
    assert!(
        close(&latencies[0].into(), 152.0)
            && latencies[1..].iter().all(|l| (l - 30.0).abs() < 1e-6),
        "{latencies:?}"
    );
    assert!(
        tokens[0]["token_id"].is_null(),
        "TensorRT-LLM reports no token ids"
    );
    assert_eq!(tokens[3]["batch_size"], 6, "batch size at that step");
    assert_eq!(tokens[3]["iteration"], 14);
    let prefill = stages_of(&d, "prefill");
    assert_eq!(prefill.len(), 2);
    assert_eq!(prefill[1]["tokens"], 1000);

    let d = app.get_json("/api/v1/requests/1002").await;
    assert_eq!(
        d["output_tokens"], 20,
        "estimated from first_iter/last_iter"
    );
    assert!(
        close(&d["tpot_ms"], 30.0),
        "(730 − 160) / 19 = 30 ms: {}",
        d["tpot_ms"]
    );
    let kinds = stage_kinds(&d, "stages");
    assert!(kinds.iter().any(|k| k == "kv_transfer"), "{kinds:?}");
}

/// A worker record as current TensorRT-LLM writes it: steps in `time_breakdown_metrics` beside
/// `perf_metrics`, on the worker's own clock (here 300,000 s ahead of `timing_metrics`).
#[tokio::test]
async fn trtllm_worker_record_with_steps_beside_perf_metrics_on_another_clock() {
    let app = spawn_app().await;
    let resp = import(
        &app,
        &format!("format=trtllm-perf-metrics&instance=gen-4&model=llama&clock_offset_s={OFFSET}"),
        "trtllm/perf_metrics_worker_record.json",
    )
    .await;
    assert_eq!(resp.status(), 200);
    let reply: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(reply["accepted_requests"], 1, "{reply}");
    assert!(
        reply["warnings"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .contains("1 requests report their steps on another clock")),
        "{reply}"
    );
    let d = app.get_json("/api/v1/requests/2001?instance=gen-4").await;
    assert_eq!(d["arrival_ns"], T0);
    assert_eq!(
        d["output_tokens"], 5,
        "the context phase's token and four steps"
    );
    assert!(close(&d["ttft_ms"], 60.0), "{}", d["ttft_ms"]);
    assert!(close(&d["tpot_ms"], 30.0), "{}", d["tpot_ms"]);
    let latencies = latencies_ms(&d);
    assert!(
        latencies[1..].iter().all(|l| (l - 30.0).abs() < 1e-3),
        "{latencies:?}"
    );
    let prefill = stages_of(&d, "prefill");
    assert_eq!(prefill.len(), 1);
    assert_eq!(
        prefill[0]["start_ns"],
        T0 + 10_000_000,
        "the chunk moved onto the request's clock: {prefill:?}"
    );
    // It has `time_breakdown_metrics` like a perf-time-events line, and is still told apart.
    let reply: serde_json::Value = import(
        &app,
        &format!("instance=gen-5&clock_offset_s={OFFSET}"),
        "trtllm/perf_metrics_worker_record.json",
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(reply["format"], "trtllm-perf-metrics", "{reply}");
    assert_eq!(reply["accepted_requests"], 1, "{reply}");
}

/// The disaggregated server's records: each request's context part on its context worker and
/// its generation part on its generation worker, with the KV transfer between, under one id.
#[tokio::test]
async fn trtllm_disaggregated_records_import_as_prefill_and_decode_parts() {
    let app = spawn_app().await;
    let resp = import(
        &app,
        &format!("model=llama&clock_offset_s={OFFSET}"),
        "trtllm/perf_metrics_disagg.json",
    )
    .await;
    assert_eq!(resp.status(), 200);
    let reply: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(reply["format"], "trtllm-perf-metrics", "{reply}");
    assert_eq!(
        reply["accepted_requests"], 4,
        "two requests, two parts each: {reply}"
    );
    assert_eq!(reply["rejected_requests"], 0, "{reply}");

    let ctx = app
        .get_json("/api/v1/requests/7001?instance=ctx-0:8001")
        .await;
    assert_eq!(ctx["role"], "prefill", "{ctx}");
    assert_eq!(
        ctx["arrival_ns"], T0,
        "the client's arrival at the disaggregated server"
    );
    assert!(close(&ctx["ttft_ms"], 70.0), "{}", ctx["ttft_ms"]);
    let decode = app
        .get_json("/api/v1/requests/7001?instance=gen-0:8002")
        .await;
    assert_eq!(decode["role"], "decode", "{decode}");
    assert_eq!(decode["arrival_ns"], T0);
    assert_eq!(decode["output_tokens"], 5, "{decode}");
    assert!(close(&decode["tpot_ms"], 30.0), "{}", decode["tpot_ms"]);
    let kinds = stage_kinds(&decode, "stages");
    assert!(kinds.iter().any(|k| k == "kv_transfer"), "{kinds:?}");
    assert!(
        !kinds.iter().any(|k| k == "prefill"),
        "the decode part ran no prefill: {kinds:?}"
    );
    assert!(
        decode["queue_ms"].as_f64().unwrap() < 5.0,
        "the wait was the KV transfer's, not the queue's: {}",
        decode["queue_ms"]
    );
    assert!(
        !reply["warnings"].to_string().contains("estimated"),
        "a context part's single token is not an estimate: {reply}"
    );

    let causes = |d: serde_json::Value| -> Vec<String> {
        d["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["cause"].as_str().unwrap().to_string())
            .collect()
    };
    let slow = app
        .get_json("/api/v1/requests/7001/diagnosis?instance=gen-0:8002")
        .await;
    assert!(
        causes(slow.clone()).contains(&"kv_transfer_slow".to_string()),
        "{slow}"
    );
    let fast = app
        .get_json("/api/v1/requests/7002/diagnosis?instance=gen-0:8002")
        .await;
    assert!(
        !causes(fast.clone()).contains(&"kv_transfer_slow".to_string()),
        "{fast}"
    );

    // Asked for without an instance, the id is the request the client saw: both parts joined.
    let joined = app.get_json("/api/v1/requests/7001").await;
    assert_eq!(joined["instance"], "ctx-0:8001,gen-0:8002", "{joined}");
    let parts: Vec<(String, String)> = joined["parts"]
        .as_array()
        .expect("a PD request lists its parts")
        .iter()
        .map(|p| (p["instance"].to_string(), p["role"].to_string()))
        .collect();
    assert_eq!(
        parts,
        [
            (r#""ctx-0:8001""#.into(), r#""prefill""#.into()),
            (r#""gen-0:8002""#.into(), r#""decode""#.into())
        ]
    );
    let kinds = stage_kinds(&joined, "stages");
    let at = |k: &str| kinds.iter().position(|x| x == k).unwrap_or(usize::MAX);
    assert!(
        at("prefill") < at("kv_transfer") && at("kv_transfer") < at("decode"),
        "prefill, then the transfer, then decode: {kinds:?}"
    );
    assert_eq!(joined["arrival_ns"], T0);
    assert_eq!(joined["output_tokens"], decode["output_tokens"]);
    assert_eq!(
        joined["tokens"].as_array().unwrap().len(),
        decode["tokens"].as_array().unwrap().len(),
        "the answer is the decode part's"
    );
    assert_eq!(
        joined["ttft_ms"], decode["ttft_ms"],
        "the client's first token"
    );
    // The same with the instances named, as the waterfall's PD link names them.
    let named = app
        .get_json("/api/v1/requests/7001?instance=ctx-0:8001,gen-0:8002")
        .await;
    assert_eq!(named["parts"], joined["parts"]);
    let dx = app.get_json("/api/v1/requests/7001/diagnosis").await;
    assert!(
        causes(dx.clone()).contains(&"kv_transfer_slow".to_string()),
        "the joined request's diagnosis has its parts' findings: {dx}"
    );

    // A record that names its servers but lacks the rest says what is wrong.
    let resp = import_body(
        &app,
        "format=trtllm-perf-metrics",
        r#"[{"ctx_server": "a", "gen_server": "b"}]"#,
    )
    .await;
    let reply: serde_json::Value = resp.json().await.unwrap();
    assert!(
        reply.to_string().contains("disagg_server_arrival_time"),
        "{reply}"
    );
}

/// The records are read as the schema declares them: a field of the wrong type refuses its
/// record, naming the field, and the other records are stored.
#[tokio::test]
async fn trtllm_record_of_the_wrong_shape_names_its_field() {
    let app = spawn_app().await;
    let body = r#"[
      {"request_id": 1, "perf_metrics": {"timing_metrics": {"arrival_time": "soon", "last_token_time": 2.0}}},
      {"request_id": 2, "perf_metrics": {"timing_metrics": {"arrival_time": 1.0, "first_token_time": 1.5, "last_token_time": 2.0}}}
    ]"#;
    let query = format!("format=trtllm-perf-metrics&clock_offset_s={OFFSET}");
    let resp = import_body(&app, &query, body).await;
    let reply: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(reply["accepted_requests"], 1, "{reply}");
    assert_eq!(reply["rejected_requests"], 1, "{reply}");
    assert_eq!(
        reply["rejections"][0]["field"], "perf_metrics.timing_metrics.arrival_time",
        "{reply}"
    );
    assert!(
        reply["rejections"][0]["message"]
            .as_str()
            .unwrap()
            .contains("WorkerPerfMetrics"),
        "{reply}"
    );
}

#[tokio::test]
async fn trtllm_iteration_log_from_the_command_line() {
    let app = spawn_app().await;
    let file = fixture("trtllm/time_events_rank0_pid4242.jsonl");
    let args = [
        "import",
        "--format",
        "trtllm-iteration-log",
        "--instance",
        "gen-4",
        "--clock-offset-s",
        OFFSET,
    ];
    let stdout = run_cli(
        args.iter()
            .map(std::ffi::OsStr::new)
            .chain([file.as_os_str()]),
        Some(&app.database_url),
    );
    let reply: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(
        reply["accepted_requests"], 1,
        "rank 1's copy of the request is not stored twice: {reply}"
    );
    let d = app.get_json("/api/v1/requests/1001").await;
    assert_eq!(d["instance"], "gen-4");
    assert!(
        close(&d["ttft_ms"], 150.0),
        "arrival is the executor's here: {}",
        d["ttft_ms"]
    );
    assert_eq!(d["tokens"].as_array().unwrap().len(), 9);
}

#[tokio::test]
async fn openai_responses_give_word_choice() {
    let app = spawn_app().await;
    let resp = import(&app, "format=openai", "openai/chat_logprobs.json").await;
    assert_eq!(resp.status(), 200);
    let d = app.get_json("/api/v1/requests/chatcmpl-8d1f").await;
    assert_eq!(d["instance"], "openai-import");
    assert_eq!(d["model"], "meta-llama/Llama-3.1-8B-Instruct");
    let t = d["tokens"].as_array().unwrap();
    assert_eq!(t[0]["rank"], 1);
    assert_eq!(t[1]["rank"], 2, "rank derived from the candidates by text");
    assert_eq!(t[1]["special"], "eos");
    assert!((t[1]["logprob"].as_f64().unwrap().exp() - 0.1).abs() < 0.001);
    assert_eq!(t[1]["candidates"][0]["text"], ",");

    let resp = import(&app, "format=openai", "openai/completions.jsonl").await;
    let reply: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(reply["accepted_requests"], 1, "{reply}");
    assert_eq!(reply["rejected_requests"], 1);
    assert_eq!(reply["rejections"][0]["field"], "choices[0].logprobs");
    let d = app.get_json("/api/v1/requests/cmpl-77").await;
    assert_eq!(
        d["tokens"][0]["token_id"], 12366,
        "vLLM's token_id:N form gives the id"
    );
    assert_eq!(d["tokens"][0]["rank"], 1);
    assert_eq!(d["finish_reason"], "length");
}

#[tokio::test]
async fn formats_are_told_apart_and_the_reply_says_where_to_open() {
    let app = spawn_app().await;
    for (rel, format, first) in [
        ("openai/chat_logprobs.json", "openai", "chatcmpl-8d1f"),
        ("openai/completions.jsonl", "openai", "cmpl-77"),
    ] {
        let reply: serde_json::Value = import(&app, "", rel).await.json().await.unwrap();
        assert_eq!(reply["format"], format, "{rel}: {reply}");
        assert_eq!(reply["requests"][0]["request_id"], first, "{rel}");
        assert_eq!(reply["requests"][0]["instance"], "openai-import", "{rel}");
    }
    // The refused response of the JSON Lines file is named by its line.
    let reply: serde_json::Value = import(&app, "format=openai", "openai/completions.jsonl")
        .await
        .json()
        .await
        .unwrap();
    assert!(
        reply["rejections"][0]["item"]
            .as_str()
            .unwrap()
            .starts_with("line 2 "),
        "{reply}"
    );
    let reply: serde_json::Value = import(
        &app,
        &format!("clock_offset_s={OFFSET}"),
        "trtllm/perf_metrics.json",
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(reply["format"], "trtllm-perf-metrics", "{reply}");
}

#[tokio::test]
async fn bad_imports_say_what_is_wrong() {
    let app = spawn_app().await;
    for (query, body, needle) in [
        ("format=csv", "x", "format=\"csv\""),
        (
            "format=openai",
            "{\"id\": 1\nnot json",
            "not JSON: expected",
        ),
        ("format=openai", "{\"id\": 1}\nnot json", "line 2: not JSON"),
        ("", "{\"hello\": 1}", "not a format tokenscope reads"),
        (
            "format=trtllm-perf-metrics&clock_offset_s=soon",
            "[]",
            "clock_offset_s=\"soon\"",
        ),
    ] {
        let resp = import_body(&app, query, body).await;
        assert_eq!(resp.status(), 400, "{query}");
        let reply: serde_json::Value = resp.json().await.unwrap();
        assert!(
            reply["error"].as_str().unwrap().contains(needle),
            "{query}: {reply}"
        );
    }
}

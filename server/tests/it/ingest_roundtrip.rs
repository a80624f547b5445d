//! A request with 2,000 tokens and top-5 candidates goes in over gRPC and over JSON and comes back
//! through the query API with every field intact.

use crate::common;

use common::*;
use tokenscope::fixtures;
use tokenscope_core::analysis::stages::StageKind;
use tokenscope_core::api::RequestDetail;
use tokenscope_core::model::{Preemption, PrefixCache, RequestTrace, ms};

/// What the engine plugins send beyond the tokens: who asked (LoRA adapter, priority, tenant),
/// the prefix cache with the prompt's block-hash chain (a u64 past a JSON number's precision
/// among them), and a preemption with the request it made room for.
fn with_signals(r: &mut RequestTrace) {
    r.served.lora_adapter = Some("sql-adapter".into());
    r.served.priority = Some(-2);
    r.served.tenant = Some("acme".into());
    r.served.prefix_cache = Some(PrefixCache {
        gpu_tokens: r.cached_tokens,
        block_size: 16,
        block_hashes: vec![u64::MAX, 0x0123_4567_89ab_cdef, 1],
        blocks: r.prompt_tokens / 16,
        ..PrefixCache::default()
    });
    let (a, b) = (
        r.tokens[10].emitted_ns.unwrap(),
        r.tokens[11].emitted_ns.unwrap(),
    );
    r.preemptions.push(Preemption {
        at_ns: a + 1,
        resumed_ns: Some(b - 1),
        recompute: true,
        aggressor: Some("req-big".into()),
        recompute_tokens: Some(1234),
    });
}

/// Checks the API's view of a request against the trace that was sent, field by field.
fn assert_same(detail: &RequestDetail, sent: &RequestTrace, batch_size: u32, waiting: u32) {
    assert_eq!(detail.summary.request_id, sent.request_id);
    assert_eq!(detail.summary.arrival_ns, sent.arrival_ns);
    assert_eq!(detail.finished_ns, sent.finished_ns);
    assert_eq!(detail.summary.output_tokens as usize, sent.tokens.len());
    assert_eq!(detail.summary.prompt_tokens, sent.prompt_tokens);
    assert_eq!(detail.cached_tokens, sent.cached_tokens);
    assert_eq!(detail.trace_id, sent.trace_id);
    assert_eq!(detail.parent_span_id, sent.parent_span_id);
    assert_eq!(detail.sampling, sent.sampling);
    assert_eq!(detail.served, sent.served);
    let preempted: Vec<_> = detail
        .stages
        .iter()
        .filter(|s| s.kind == StageKind::Preempted)
        .map(|s| (s.by.clone(), s.tokens))
        .collect();
    let want: Vec<_> = sent
        .preemptions
        .iter()
        .map(|p| (p.aggressor.clone(), p.recompute_tokens))
        .collect();
    assert_eq!(preempted, want);
    let first = sent.tokens[0].emitted_ns.unwrap();
    assert_eq!(detail.summary.ttft_ms, Some(ms(first - sent.arrival_ns)));
    let tpot = (sent.finished_ns - first) / (sent.tokens.len() as i64 - 1);
    assert_eq!(detail.summary.tpot_ms, Some(ms(tpot)));
    assert_eq!(detail.tokens.len(), sent.tokens.len());
    let mut previous = sent.arrival_ns;
    for (i, (got, want)) in detail.tokens.iter().zip(&sent.tokens).enumerate() {
        assert_eq!(got.index as usize, i);
        assert_eq!(got.token_id, want.token_id, "token {i}");
        assert_eq!(got.text, want.text, "token {i}");
        assert_eq!(got.is_special, want.special.is_special(), "token {i}");
        assert_eq!(got.special, want.special, "token {i}");
        assert_eq!(
            got.emitted_ns, want.emitted_ns,
            "token {i}: nanosecond timestamps survive"
        );
        assert_eq!(
            got.latency_ms,
            Some(ms(want.emitted_ns.unwrap() - previous)),
            "token {i}"
        );
        previous = want.emitted_ns.unwrap();
        assert_eq!(got.iteration, want.iteration, "token {i}");
        assert_eq!(got.logprob, want.logprob, "token {i}");
        assert_eq!(got.rank, want.rank, "token {i}");
        assert_eq!(got.batch_size, Some(batch_size), "token {i}");
        assert_eq!(got.waiting, Some(waiting), "token {i}");
        let cands: Vec<_> = got
            .candidates
            .iter()
            .map(|c| (c.token_id, c.text.clone(), c.logprob))
            .collect();
        let want_cands: Vec<_> = want
            .candidates
            .iter()
            .map(|c| (c.token_id, c.text.clone(), c.logprob))
            .collect();
        assert_eq!(cands, want_cands, "token {i}: candidates in rank order");
    }
    let last = detail.tokens.last().unwrap();
    assert!(
        last.is_special && last.text.as_deref() == Some("<|eot_id|>"),
        "EOS is flagged, not invisible"
    );
}

#[tokio::test]
async fn two_thousand_tokens_round_trip_over_grpc() {
    let app = spawn_app().await;
    let mut sent = fixtures::request("req-grpc", T0, 2000, 5, 1000, 7);
    with_signals(&mut sent);
    let its = fixtures::iterations_for(&sent, 12, 3);
    let reply = app
        .grpc()
        .await
        .export(export(
            &fixtures::resource("gpu-0"),
            std::slice::from_ref(&sent),
            &its,
        ))
        .await
        .expect("export succeeds")
        .into_inner();
    assert_eq!((reply.accepted_requests, reply.rejected_requests), (1, 0));
    assert_eq!(reply.accepted_iterations, 2000);

    let detail: RequestDetail =
        serde_json::from_value(app.get_json("/api/v1/requests/req-grpc").await).unwrap();
    assert_same(&detail, &sent, 12, 3);
    assert_eq!(detail.summary.instance, "gpu-0");
    assert_eq!(detail.summary.model, "meta-llama/Llama-3.1-8B-Instruct");

    // The waterfall's track carries what its hover shows: who asked, what the cache served, and
    // (zoomed in on it) the request its preemption made room for.
    let (from, to) = (
        sent.tokens[10].emitted_ns.unwrap() - 50_000_000,
        sent.tokens[11].emitted_ns.unwrap() + 50_000_000,
    );
    let wf = app
        .get_json(&format!(
            "/api/v1/waterfall?instance=gpu-0&from={from}&to={to}&width_px=1000"
        ))
        .await;
    let track = &wf["tracks"][0];
    assert_eq!(track["request_id"], "req-grpc", "{wf}");
    assert_eq!(
        (&track["tenant"], &track["lora_adapter"], &track["priority"]),
        (&"acme".into(), &"sql-adapter".into(), &(-2).into()),
        "{track}"
    );
    assert_eq!(track["cached_tokens"], sent.cached_tokens, "{track}");
    let preempted = track["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "preempted")
        .unwrap_or_else(|| panic!("{track}"));
    assert_eq!(preempted["by"], "req-big");
}

#[tokio::test]
async fn two_thousand_tokens_round_trip_over_json() {
    let app = spawn_app().await;
    let mut sent = fixtures::request("req-json", T0, 2000, 5, 5000, 11);
    with_signals(&mut sent);
    let its = fixtures::iterations_for(&sent, 4, 0);
    // pbjson writes the proto3 JSON mapping: camelCase names, 64-bit integers as strings.
    let body = serde_json::to_string(&export(
        &fixtures::resource("gpu-1"),
        std::slice::from_ref(&sent),
        &its,
    ))
    .unwrap();
    assert!(
        body.contains("\"arrivalNs\":\"1796022000000000000\""),
        "proto3 JSON encodes int64 as strings"
    );
    let resp = app.post_json("/api/v1/traces", body).await;
    assert_eq!(resp.status(), 200);
    let reply: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(reply["acceptedRequests"], "1");

    let detail: RequestDetail =
        serde_json::from_value(app.get_json("/api/v1/requests/req-json").await).unwrap();
    assert_same(&detail, &sent, 4, 0);
}

#[tokio::test]
async fn hand_written_json_with_original_field_names_is_accepted() {
    let app = spawn_app().await;
    // What a user types with curl: snake_case names, plain numbers, enums by name.
    let body = r#"{"resource_traces": [{
        "resource": {"engine": "ENGINE_KIND_SGLANG", "model": "qwen3-8b", "instance_id": "node-a", "role": "ROLE_PREFILL"},
        "requests": [{
            "request_id": "hello", "arrival_ns": 1796022000000000000, "first_token_ns": 1796022000050000000,
            "finished_ns": 1796022000090000000, "finish_reason": "FINISH_REASON_STOP", "prompt_tokens": 12,
            "tokens": {"token_id": [9906, 2], "emitted_ns": [1796022000050000000, 1796022000090000000],
                       "text": ["Hello", ""], "special": ["SPECIAL_TOKEN_NONE", "SPECIAL_TOKEN_EOS"],
                       "candidate_count": [2, 0], "candidate_token_id": [13347, 9906],
                       "candidate_logprob": [-0.25, -1.5]}
        }]
    }]}"#;
    let resp = app.post_json("/api/v1/traces", body).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let d = app.get_json("/api/v1/requests/hello").await;
    assert_eq!(d["engine"], "sglang");
    assert_eq!(d["role"], "prefill");
    assert_eq!(d["ttft_ms"], 50.0);
    assert_eq!(d["tpot_ms"], 40.0);
    assert_eq!(d["output_tokens"], 2);
    assert_eq!(
        d["tokens"][0]["rank"], 2,
        "rank derived from the candidates"
    );
    assert_eq!(d["tokens"][1]["is_special"], true);
    assert_eq!(d["tokens"][1]["special"], "eos");
    assert_eq!(d["tokens"][1]["latency_ms"], 40.0);
}

//! `GET /metrics`: what ingest stored and refused, by source, as Prometheus reads it.

use crate::common::*;
use tokenscope::fixtures;

#[tokio::test]
async fn ingest_is_counted_by_source_and_reason() {
    let app = spawn_app().await;
    let before = app.metrics().await;
    assert_eq!(
        before["tokenscope_ingest_requests_total{source=\"native_grpc\"}"],
        0.0
    );

    let good = fixtures::request("good", T0, 12, 2, 1, 1);
    let other = fixtures::request("other", T0, 7, 2, 40, 2);
    let bad = fixtures::request("bad", T0, 10, 2, 20, 3);
    let its = fixtures::shared_iterations(std::slice::from_ref(&good), 2);
    let mut batch = export(&fixtures::resource("gpu-0"), &[good, other, bad], &its);
    // Mismatched column: one emitted time missing.
    let bad_tokens = batch.resource_traces[0].requests[2]
        .tokens
        .as_mut()
        .unwrap();
    bad_tokens.emitted_ns.pop();
    app.grpc().await.export(batch.clone()).await.unwrap();
    // The same batch again, as JSON: the good ones are resends now.
    let resp = app
        .post_json("/api/v1/traces", serde_json::to_string(&batch).unwrap())
        .await;
    assert_eq!(resp.status(), 200);

    let m = app.metrics().await;
    let grpc = |name: &str| m[&format!("{name}{{source=\"native_grpc\"}}")];
    assert_eq!(grpc("tokenscope_ingest_requests_total"), 2.0);
    assert_eq!(
        grpc("tokenscope_ingest_tokens_total"),
        19.0,
        "12 + 7 tokens"
    );
    assert_eq!(grpc("tokenscope_ingest_iterations_total"), its.len() as f64);
    let rejected = |source: &str, reason: &str| {
        m[&format!("tokenscope_ingest_rejected_total{{source=\"{source}\",reason=\"{reason}\"}}")]
    };
    assert_eq!(rejected("native_grpc", "invalid_request"), 1.0);
    assert_eq!(rejected("native_grpc", "duplicate_request"), 0.0);
    assert_eq!(rejected("native_http", "invalid_request"), 1.0);
    assert_eq!(rejected("native_http", "duplicate_request"), 2.0);
    assert_eq!(
        m["tokenscope_ingest_requests_total{source=\"native_http\"}"],
        0.0
    );
    assert_eq!(m["tokenscope_ingest_commit_seconds_count"], 2.0);
    assert_eq!(
        m["tokenscope_ingest_commit_seconds_bucket{le=\"+Inf\"}"],
        2.0
    );
    assert!(m["tokenscope_ingest_commit_seconds_sum"] > 0.0);
    assert!(m.contains_key("tokenscope_db_pool_connections{state=\"idle\"}"));
    assert_eq!(m["tokenscope_otlp_assembler_held_spans"], 0.0);
}

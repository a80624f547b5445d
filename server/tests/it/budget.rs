//! Backpressure: ingest bodies in flight are held to `--ingest-budget-mib` across both ports;
//! past it HTTP answers 429 with Retry-After and gRPC RESOURCE_EXHAUSTED, and nothing refused is
//! half stored.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::common::*;
use tokenscope::fixtures;
use tokenscope::server::{self, Config};

const MIB: usize = 1 << 20;
/// What the stalled upload declares: most of the 1 MiB budget.
const HELD: usize = 900 * 1024;

async fn budget_in_use(app: &TestApp) -> f64 {
    app.metrics().await["tokenscope_ingest_budget_bytes{state=\"in_use\"}"]
}

/// Waits until the budget in use satisfies `ok` (the server sees the stalled upload's header, or
/// its end, a moment after the client sends it).
async fn until(app: &TestApp, ok: impl Fn(f64) -> bool) -> f64 {
    for _ in 0..100 {
        let v = budget_in_use(app).await;
        if ok(v) {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    budget_in_use(app).await
}

#[tokio::test]
async fn past_the_budget_ingest_is_refused_on_both_ports_and_resumes_after() {
    let app = spawn_app_with(|c| {
        c.max_message_bytes = MIB;
        c.ingest_budget_bytes = MIB;
    })
    .await;

    // A client that declares a big body and stalls half way holds the budget.
    let mut stalled = TcpStream::connect(app.running.http_addr).await.unwrap();
    let head = format!(
        "POST /api/v1/traces HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {HELD}\r\n\r\n"
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    stalled.write_all(&vec![b' '; HELD / 2]).await.unwrap();
    let held = until(&app, |v| v >= HELD as f64).await;
    assert!(
        held >= HELD as f64,
        "the stalled upload holds its bytes: {held}"
    );

    // HTTP: a declared length past what is left is refused before its body is read.
    let batch = export(
        &fixtures::resource("gpu-0"),
        &[fixtures::request("http-1", T0, 600, 5, 1, 1)],
        &[],
    );
    let json = serde_json::to_string(&batch).unwrap();
    assert!(
        json.len() > MIB - HELD,
        "the body does not fit what is left"
    );
    let resp = app.post_json("/api/v1/traces", json.clone()).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body: serde_json::Value = resp.json().await.unwrap();
    let message = body["error"].as_str().unwrap();
    assert!(message.contains("--ingest-budget-mib"), "{message}");

    // gRPC: no declared length; refused as the bytes arrive past the budget.
    let grpc_batch = export(
        &fixtures::resource("gpu-0"),
        &[fixtures::request("grpc-1", T0, 3000, 5, 1, 2)],
        &[],
    );
    let size = prost::Message::encoded_len(&grpc_batch);
    assert!(
        size > MIB - HELD && size < MIB,
        "{size} bytes: past what is left, within the largest message"
    );
    let status = app
        .grpc()
        .await
        .export(grpc_batch.clone())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("budget"), "{}", status.message());
    assert_eq!(app.get("/api/v1/requests/http-1").await.status(), 404);
    assert_eq!(app.get("/api/v1/requests/grpc-1").await.status(), 404);

    // The stalled client goes away: its bytes return to the budget, and retries get through.
    drop(stalled);
    let left = until(&app, |v| v == 0.0).await;
    assert_eq!(left, 0.0, "the budget is released");
    let reply = app.grpc().await.export(grpc_batch).await.unwrap();
    assert_eq!(reply.into_inner().accepted_requests, 1);
    let resp = app.post_json("/api/v1/traces", json).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(app.get("/api/v1/requests/http-1").await.status(), 200);
    assert_eq!(app.get("/api/v1/requests/grpc-1").await.status(), 200);

    // A body larger than the budget could never be admitted: it hears "too large", not "later".
    let resp = app.post_json("/api/v1/traces", vec![b' '; 2 * MIB]).await;
    assert_eq!(resp.status(), 413);

    assert_eq!(
        app.metrics().await["tokenscope_ingest_over_budget_total"],
        2.0
    );
    assert_eq!(
        budget_in_use(&app).await,
        0.0,
        "every reply released its bytes"
    );
}

#[tokio::test]
async fn a_budget_smaller_than_the_largest_message_is_refused_at_start() {
    let err = server::start(Config {
        max_message_bytes: 64 * MIB,
        ingest_budget_bytes: 16 * MIB,
        ..spawn_config("postgres://unused".into())
    })
    .await
    .err()
    .expect("refused");
    assert!(err.to_string().contains("--max-message-mib"), "{err}");
}

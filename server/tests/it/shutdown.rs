//! Stopping (SIGTERM): the ports stop accepting, a batch in flight is still stored and
//! acknowledged, then the server returns.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::*;
use tokenscope::fixtures;

#[tokio::test]
async fn a_stopping_server_finishes_the_batch_in_flight() {
    let app = spawn_app().await;
    let addr = app.running.http_addr;
    let batch = export(
        &fixtures::resource("gpu-0"),
        &[fixtures::request("in-flight", T0, 50, 2, 1, 1)],
        &[],
    );
    let body = serde_json::to_vec(&batch).unwrap();
    let (first, rest) = body.split_at(body.len() / 2);

    // Half of a batch is on its way when the server is told to stop.
    let mut upload = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /api/v1/traces HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    upload.write_all(head.as_bytes()).await.unwrap();
    upload.write_all(first).await.unwrap();
    // The server has the upload's header once its declared length counts against the budget.
    for _ in 0..100 {
        if app.metrics().await["tokenscope_ingest_budget_bytes{state=\"in_use\"}"] > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let TestApp {
        running,
        database_url,
        ..
    } = app;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(running.serve_until(async {
        let _ = stopped.await;
    }));
    stop.send(()).unwrap();

    // New connections are refused once it stops accepting.
    let mut refused = false;
    for _ in 0..100 {
        if TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused, "the port stops accepting");
    assert!(!serving.is_finished(), "it waits for the batch in flight");

    // The rest of the batch arrives: stored and acknowledged.
    upload.write_all(rest).await.unwrap();
    let mut reply = Vec::new();
    upload.read_to_end(&mut reply).await.unwrap();
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("\"acceptedRequests\":\"1\""), "{reply}");
    tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .expect("the server returns once drained")
        .unwrap()
        .expect("a clean stop");

    // What it acknowledged is in the database.
    let again = spawn_on(database_url, |_| {}).await;
    assert_eq!(again.get("/api/v1/requests/in-flight").await.status(), 200);
}

//! Structured logs: with `--log-format json` every line is a JSON object, and a request's lines
//! carry the id its reply returned in `x-request-id` (HTTP and gRPC alike).

use std::time::Duration;

use tonic::Code;

use crate::common::process::ServerProcess;
use crate::common::*;
use tokenscope_proto::v1::trace_ingest_client::TraceIngestClient;

/// The log's JSON lines whose span has `request_id`.
fn lines_of(log: &str, request_id: &str) -> Vec<serde_json::Value> {
    log.lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"))
        })
        .filter(|v| v["span"]["request_id"] == request_id)
        .collect()
}

#[tokio::test]
async fn json_logs_name_each_request_by_the_id_its_reply_carries() {
    let keys = temp_file("prod 0123456789abcdef0123 *\n");
    let db = fresh_database().await;
    let server = ServerProcess::start_logging(
        &db,
        &[
            "--log-format",
            "json",
            "--ingest-keys",
            keys.0.to_str().unwrap(),
        ],
        "info",
    )
    .await;

    // HTTP: an ingest without a key is refused and logged in its request's span.
    let resp = reqwest::Client::new()
        .post(format!(
            "http://127.0.0.1:{}/api/v1/traces",
            server.http_port
        ))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let http_id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(http_id.len(), 16);

    // gRPC, the same.
    let mut grpc = TraceIngestClient::connect(server.grpc_url()).await.unwrap();
    let err = grpc
        .export(tokenscope_proto::v1::ExportRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let grpc_id = err
        .metadata()
        .get("x-request-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert_ne!(grpc_id, http_id);

    // A proxy's own id is kept.
    let resp = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{}/healthz", server.http_port))
        .header("x-request-id", "from-the-proxy-1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-request-id"], "from-the-proxy-1");

    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = std::fs::read_to_string(&server.log).unwrap();
    let http = lines_of(&log, &http_id);
    assert!(
        http.iter().any(|l| l["fields"]["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("ingest refused")),
        "{log}"
    );
    assert_eq!(http[0]["span"]["path"], "/api/v1/traces");
    assert_eq!(http[0]["span"]["method"], "POST");
    let grpc = lines_of(&log, &grpc_id);
    assert_eq!(
        grpc[0]["span"]["path"], "/tokenscope.v1.TraceIngest/Export",
        "{log}"
    );
    assert!(
        !log.contains("0123456789abcdef0123"),
        "keys are never logged"
    );
}

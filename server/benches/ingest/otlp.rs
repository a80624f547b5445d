//! OTLP/HTTP ingest: vLLM `llm_request` spans with per-token arrays and top-5 candidates as JSON
//! strings (`support/vllm_spans.rs`), 16 spans an export, posted as protobuf to `/v1/traces`.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;

use tokenscope::fixtures::Rng;

use super::common::TestApp;
use super::drive::drive;
use super::vllm_spans::{SPANS_PER_EXPORT, TOKENS, export};
use super::{Run, senders};

const EXPORTS: usize = 480;
/// Exports sent first, timed apart: candidate ids are uniform over 100k, and after 40 exports
/// (820k draws) practically every id is in the vocabulary.
const WARMUP: usize = 40;

/// Sends `WARMUP` exports to a server that has not seen the model's vocabulary (cold), then
/// `EXPORTS` more (warm).
pub async fn run(app: &TestApp) -> (Run, Run) {
    let mut rng = Rng::new(11);
    let url = format!("{}/v1/traces", app.http);
    let cold = send(&url, 0..WARMUP, &mut rng).await;
    let warm = send(&url, WARMUP..WARMUP + EXPORTS, &mut rng).await;
    let (_, stored) = app.running.store.token_storage().await.unwrap();
    assert_eq!(
        stored as usize,
        cold.tokens + warm.tokens,
        "every token sent was stored"
    );
    (cold, warm)
}

async fn send(url: &str, exports: std::ops::Range<usize>, rng: &mut Rng) -> Run {
    let tokens = exports.len() * SPANS_PER_EXPORT * TOKENS;
    let bodies: Vec<Vec<u8>> = exports.map(|e| export(e, rng).encode_to_vec()).collect();
    let url = url.to_string();
    drive(
        tokens,
        bodies,
        senders(),
        reqwest::Client::new,
        move |client, body| {
            let url = url.clone();
            async move {
                let reply = client
                    .post(&url)
                    .header("content-type", "application/x-protobuf")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                assert!(reply.status().is_success(), "{}", reply.status());
                let reply =
                    ExportTraceServiceResponse::decode(reply.bytes().await.unwrap()).unwrap();
                assert!(reply.partial_success.is_none(), "{reply:?}");
                client
            }
        },
    )
    .await
}

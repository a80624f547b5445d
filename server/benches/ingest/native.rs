//! Native gRPC ingest: 120 exports of 32 requests × 512 tokens with top-5 candidates (texts by
//! id, and ids), every 16 requests sharing one iteration record per step, over one instance per
//! sender (four unless `TOKENSCOPE_BENCH_SENDERS` says otherwise); then as many tokens in the
//! `SERVING` shape (decode batches of 64, Zipf-distributed ids), and in the first shape with a
//! text sent with every token.

use prost::Message;
use tonic::codegen::Bytes;
use tonic::transport::Channel;

use tokenscope_sim::encoded;

use super::common::TestApp;
use super::drive::drive;
use super::native_exports::{
    BENCH, GROUP, SERVING, Shape, TEXTS_PER_TOKEN, TOKENS_PER_REQUEST, TOP_K, exports,
};
use super::{Run, connect, relation_bytes, senders};

const BATCHES: usize = 120;
/// Batches sent first, untimed apart: token ids are uniform over a 128k vocabulary, and after
/// eight batches (780k draws) practically every id has been seen.
const WARMUP: usize = 8;

/// Sends `WARMUP` batches while the server has not seen the model's vocabulary yet (cold), then
/// `BATCHES` more (warm, the steady state of a server that has run a while).
pub async fn run(app: &TestApp) -> (Run, Run) {
    let url = format!("http://{}", app.running.grpc_addr);
    let cold = send(&url, 0..WARMUP, &BENCH).await;
    let warm = send(&url, WARMUP..WARMUP + BATCHES, &BENCH).await;
    let (_, stored) = app.running.store.token_storage().await.unwrap();
    assert_eq!(
        stored as usize,
        cold.tokens + warm.tokens,
        "every token sent was stored"
    );
    (cold, warm)
}

/// `BATCHES` exports in the `SERVING` shape, to a server whose vocabulary is warm (after `run`).
pub async fn run_serving(app: &TestApp) -> Run {
    let url = format!("http://{}", app.running.grpc_addr);
    send(&url, 0..BATCHES, &SERVING).await
}

/// `BATCHES` exports in the first shape with a text sent with every token, to a server whose
/// vocabulary is warm (after `run`).
pub async fn run_texts_per_token(app: &TestApp) -> Run {
    let url = format!("http://{}", app.running.grpc_addr);
    send(&url, WARMUP..WARMUP + BATCHES, &TEXTS_PER_TOKEN).await
}

async fn send(url: &str, batches: std::ops::Range<usize>, shape: &'static Shape) -> Run {
    let tokens = batches.len() * shape.requests * shape.tokens;
    let bodies: Vec<Bytes> = exports(batches, shape, senders())
        .iter()
        .map(|e| Bytes::from(e.encode_to_vec()))
        .collect();
    drive(
        tokens,
        bodies,
        senders(),
        || {
            Channel::from_shared(url.to_string())
                .unwrap()
                .connect_lazy()
        },
        move |channel, body| async move {
            let reply = encoded::export(channel.clone(), body).await.unwrap();
            assert_eq!(reply.accepted_requests as usize, shape.requests);
            channel
        },
    )
    .await
}

/// Bytes per token and per iteration of what the native run stored.
pub struct Storage {
    tokens: f64,
    block_bytes: f64,
    table_bytes: f64,
    iteration_bytes: f64,
    key_bytes: f64,
}

pub async fn storage(app: &TestApp, tokens: usize) -> Storage {
    let (block_bytes, _) = app.running.store.token_storage().await.unwrap();
    let mut conn = connect(&app.database_url).await;
    Storage {
        tokens: tokens as f64,
        block_bytes: block_bytes as f64,
        table_bytes: relation_bytes(&mut conn, "requests").await as f64,
        iteration_bytes: relation_bytes(&mut conn, "iteration_blocks").await as f64,
        key_bytes: relation_bytes(&mut conn, "request_keys").await as f64,
    }
}

impl Storage {
    pub fn print(&self) {
        println!(
            "storage of the native run, top-{TOP_K} candidates and token texts (vocabulary shared per model):"
        );
        println!(
            "  token blocks          {:>10.2} bytes/token",
            self.block_bytes / self.tokens
        );
        println!(
            "  requests table total  {:>10.2} bytes/token (rows, TOAST, indexes)",
            self.table_bytes / self.tokens
        );
        let iterations = self.tokens / GROUP as f64;
        println!(
            "  steps (blocks)        {:>10.0} bytes/iteration (batch of {GROUP}; {:.2} bytes/token)",
            self.iteration_bytes / iterations,
            self.iteration_bytes / self.tokens
        );
        println!(
            "  request keys          {:>10.0} bytes/request (the ids iteration batches refer to)",
            self.key_bytes / (self.tokens / TOKENS_PER_REQUEST as f64)
        );
    }
}

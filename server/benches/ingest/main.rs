//! Ingest benchmark, end to end: the raw-COPY limit of this machine's Postgres, then native gRPC
//! and OTLP/HTTP ingest into the real server against it (acknowledged = committed, fsync on), as
//! tokens/s and as a share of the limit; stored bytes per token; the token-block codec per core.
//! Prints figures; asserts only that everything sent was stored.
//!
//! Run with `scripts/bench` (starts a throwaway durable Postgres), or `cargo bench -p tokenscope
//! --bench ingest` with TOKENSCOPE_TEST_DATABASE_URL pointing at a cluster where databases may be
//! created. The server is started the way the integration tests start it (`tests/it/common`).
//! Clients send bodies encoded beforehand, so the machine's cores go to the server and Postgres,
//! as they would with the senders on other machines.

#[path = "../../tests/it/common/mod.rs"]
#[allow(dead_code)] // the benches use only part of the test harness
mod common;
#[path = "../support/native_exports.rs"]
mod native_exports;
#[path = "../support/vllm_spans.rs"]
mod vllm_spans;

/// The allocator the `tokenscope` binary runs with (`server/src/main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod copy_limit;
mod cpu;
mod drive;
mod native;
mod otlp;

use std::time::Duration;

use sqlx::{Connection, PgConnection};
use tokenscope::fixtures;
use tokenscope::store::token_block;

const TOP_K: usize = 5;
const T0: i64 = 1_796_022_000_000_000_000;
/// Senders in flight at once, unless `TOKENSCOPE_BENCH_SENDERS` says otherwise: with four, the
/// machine idles while commits wait on a slow disk; more fill it (the native runs then use as
/// many instances, one sender each).
const CONCURRENCY: usize = 4;

fn senders() -> usize {
    std::env::var("TOKENSCOPE_BENCH_SENDERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(CONCURRENCY)
}

/// What one end-to-end run achieved.
pub struct Run {
    pub tokens: usize,
    pub elapsed: Duration,
    pub latencies: Vec<Duration>,
    /// CPU time of this process (server and senders) and of Postgres during the run.
    pub cpu: (Duration, Duration),
}

impl Run {
    pub fn tokens_per_s(&self) -> f64 {
        self.tokens as f64 / self.elapsed.as_secs_f64()
    }

    fn print(&self, name: &str, limit: f64) {
        let mut l = self.latencies.clone();
        l.sort();
        println!(
            "  {name:<34} {:>10.0} tokens/s  {:>5.1} % of the COPY limit  ({} tokens in {:.2} s; batch p50 {:.0} ms, p99 {:.0} ms)",
            self.tokens_per_s(),
            100.0 * self.tokens_per_s() / limit,
            self.tokens,
            self.elapsed.as_secs_f64(),
            ms(l[l.len() / 2]),
            ms(l[l.len() * 99 / 100]),
        );
        let per_token = |d: Duration| d.as_secs_f64() * 1e6 / self.tokens as f64;
        println!(
            "  {:<34} CPU per token: server and senders {:.2} µs, Postgres {:.2} µs (machine: {:.2} µs of 2 cores)",
            "",
            per_token(self.cpu.0),
            per_token(self.cpu.1),
            2.0 * per_token(self.elapsed),
        );
    }
}

fn codec() {
    let r = fixtures::request("codec", T0, 2000, TOP_K, 1, 42);
    let rounds = 200;
    let start = std::time::Instant::now();
    let mut block = Vec::new();
    for _ in 0..rounds {
        block = token_block::encode(
            &r.tokens,
            r.arrival_ns,
            token_block::own_texts(|_, _| false),
        );
    }
    let enc = start.elapsed();
    let start = std::time::Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(token_block::decode(&block, r.arrival_ns).unwrap());
    }
    let dec = start.elapsed();
    let tokens = (rounds * r.tokens.len()) as f64;
    println!(
        "token block codec, 2,000 tokens with top-{TOP_K} candidates and texts inline (no vocabulary):"
    );
    println!(
        "  block size            {:>10.1} bytes/token",
        block.len() as f64 / r.tokens.len() as f64
    );
    println!(
        "  encode                {:>10.0} tokens/s (one core)",
        tokens / enc.as_secs_f64()
    );
    println!(
        "  decode                {:>10.0} tokens/s (one core)",
        tokens / dec.as_secs_f64()
    );
}

/// Whether this part was asked for: `cargo bench --bench ingest -- native` runs only that part
/// (codec, copy, native, otlp); no name runs them all.
fn wants(part: &str) -> bool {
    let parts = ["codec", "copy", "native", "otlp"];
    let asked: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| parts.contains(&a.as_str()))
        .collect();
    asked.is_empty() || asked.iter().any(|a| a == part)
}

async fn end_to_end() {
    let limit = copy_limit::run().await;
    println!(
        "end to end on this machine (server, Postgres and {} senders share its cores; fsync on):",
        senders()
    );
    limit.print("raw COPY, 24 bytes a token", limit.tokens_per_s());
    let limit = limit.tokens_per_s();

    let mut storage = None;
    if wants("native") {
        let app = common::spawn_app().await;
        let (cold, warm) = native::run(&app).await;
        cold.print("native gRPC, vocabulary cold", limit);
        warm.print("native gRPC, texts by id", limit);
        storage = Some(native::storage(&app, cold.tokens + warm.tokens).await);
        native::run_serving(&app)
            .await
            .print("native, batch 64, Zipf ids", limit);
        native::run_texts_per_token(&app)
            .await
            .print("native, texts per token", limit);
    }
    if wants("otlp") {
        let app = common::spawn_app().await;
        let (cold, warm) = otlp::run(&app).await;
        cold.print("OTLP/HTTP vLLM spans, vocabulary cold", limit);
        warm.print("OTLP/HTTP vLLM spans (top-5 JSON)", limit);
    }
    if let Some(s) = storage {
        s.print();
    }
}

/// On-disk size of a partitioned table: all partitions with their TOAST and indexes.
async fn relation_bytes(conn: &mut PgConnection, table: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_inherits i \
         JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = $1",
    )
    .bind(table)
    .fetch_one(conn)
    .await
    .unwrap()
}

async fn connect(url: &str) -> PgConnection {
    PgConnection::connect(url).await.unwrap()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    if wants("codec") {
        codec();
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(end_to_end());
}

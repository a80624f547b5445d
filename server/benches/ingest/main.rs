//! Ingest benchmark: stored bytes per token (top-5 candidates), token-block codec speed, and
//! end-to-end ingest tokens/s over real gRPC into a real Postgres. Prints figures; asserts nothing.
//!
//! Run with `scripts/bench` (starts a throwaway Postgres), or `cargo bench -p tokenscope --bench
//! ingest` with TOKENSCOPE_TEST_DATABASE_URL pointing at a cluster where databases may be created.
//! The server is started the way the integration tests start it (`tests/common`).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};
use tokenscope::fixtures;
use tokenscope::ingest::native::to_wire;
use tokenscope::proto::v1::{self, trace_ingest_client::TraceIngestClient};
use tokenscope::store::token_block;

const TOKENS_PER_REQUEST: usize = 512;
const TOP_K: usize = 5;
const REQUESTS_PER_BATCH: usize = 32;
const BATCHES: usize = 120;
const CONCURRENCY: usize = 4;
/// Requests decoded together, sharing iterations (a realistic decode batch).
const GROUP: usize = 16;
const T0: i64 = 1_796_022_000_000_000_000;

fn batch(b: usize) -> v1::ExportRequest {
    let requests: Vec<_> = (0..REQUESTS_PER_BATCH)
        .map(|i| {
            let n = b * REQUESTS_PER_BATCH + i;
            let arrival = T0 + n as i64 * 37_000_000;
            let first_iteration = (n / GROUP) as u64 * 1000;
            // Shaped like vLLM's ids ("cmpl-" + 32 hex digits + "-0"): their length is what
            // iteration batches would pay for every member of every step.
            let id = format!(
                "cmpl-{:032x}-0",
                (n as u128 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)
            );
            fixtures::request(
                &id,
                arrival,
                TOKENS_PER_REQUEST,
                TOP_K,
                first_iteration,
                n as u64,
            )
        })
        .collect();
    let iterations: Vec<_> = requests
        .chunks(GROUP)
        .flat_map(|g| fixtures::shared_iterations(g, 2))
        .collect();
    let instance = format!("bench-gpu-{}", b % CONCURRENCY);
    v1::ExportRequest {
        resource_traces: vec![to_wire(
            &fixtures::resource(&instance),
            &requests,
            &iterations,
        )],
    }
}

fn codec() {
    let r = fixtures::request("codec", T0, 2000, TOP_K, 1, 42);
    let rounds = 200;
    let start = Instant::now();
    let mut block = Vec::new();
    for _ in 0..rounds {
        block = token_block::encode(&r.tokens, r.arrival_ns, |_| None);
    }
    let enc = start.elapsed();
    let start = Instant::now();
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

async fn end_to_end() {
    let app = common::spawn_app().await;
    let (running, database_url) = (&app.running, app.database_url.clone());

    print!(
        "preparing {BATCHES} batches of {REQUESTS_PER_BATCH} requests × {TOKENS_PER_REQUEST} tokens … "
    );
    let batches: Vec<_> = (0..BATCHES).map(batch).collect();
    println!("done");
    let url = format!("http://{}", running.grpc_addr);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..CONCURRENCY {
        let mine: Vec<_> = batches
            .iter()
            .skip(worker)
            .step_by(CONCURRENCY)
            .cloned()
            .collect();
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = TraceIngestClient::connect(url)
                .await
                .unwrap()
                .max_encoding_message_size(256 << 20);
            let mut latencies = Vec::new();
            for b in mine {
                let t = Instant::now();
                let reply = client.export(b).await.unwrap().into_inner();
                assert_eq!(reply.accepted_requests as usize, REQUESTS_PER_BATCH);
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut latencies: Vec<Duration> = Vec::new();
    for t in tasks {
        latencies.extend(t.await.unwrap());
    }
    let elapsed = start.elapsed();
    latencies.sort();
    let tokens = (BATCHES * REQUESTS_PER_BATCH * TOKENS_PER_REQUEST) as f64;
    let (block_bytes, stored_tokens) = running.store.token_storage().await.unwrap();
    let mut conn = PgConnection::connect(&database_url).await.unwrap();
    let table_bytes = relation_bytes(&mut conn, "requests").await;
    let iteration_bytes = relation_bytes(&mut conn, "iterations").await;
    let key_bytes = relation_bytes(&mut conn, "request_keys").await;
    assert_eq!(stored_tokens as f64, tokens);
    println!(
        "end-to-end ingest over gRPC into Postgres ({CONCURRENCY} concurrent clients, client + server + Postgres on this machine):"
    );
    println!("  tokens                {:>10.0}", tokens);
    println!("  elapsed               {:>10.2} s", elapsed.as_secs_f64());
    println!(
        "  throughput            {:>10.0} tokens/s",
        tokens / elapsed.as_secs_f64()
    );
    println!(
        "  batch latency p50/p99 {:>7.0} / {:.0} ms",
        ms(latencies[latencies.len() / 2]),
        ms(latencies[latencies.len() * 99 / 100])
    );
    println!("storage with top-{TOP_K} candidates and token texts (vocabulary shared per model):");
    println!(
        "  token blocks          {:>10.2} bytes/token",
        block_bytes as f64 / tokens
    );
    println!(
        "  requests table total  {:>10.2} bytes/token (rows, TOAST, indexes)",
        table_bytes as f64 / tokens
    );
    let iterations = (BATCHES * REQUESTS_PER_BATCH / GROUP * TOKENS_PER_REQUEST) as f64;
    println!(
        "  iterations table      {:>10.0} bytes/iteration (batch of {GROUP}; {:.2} bytes/token)",
        iteration_bytes as f64 / iterations,
        iteration_bytes as f64 / tokens
    );
    println!(
        "  request keys          {:>10.0} bytes/request (the ids iteration batches refer to)",
        key_bytes as f64 / (BATCHES * REQUESTS_PER_BATCH) as f64
    );
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    codec();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(end_to_end());
}

//! Findings benchmark: an hour of traffic on four simulated instances (100,000 requests by
//! default, `TOKENSCOPE_FINDINGS_REQUESTS` to change), stored, then diagnosed by the findings
//! worker's code as it runs in the server (how many requests a second it keeps up with), then the
//! reads that use the stored findings, timed over HTTP: the hour's window diagnosis, compare of
//! its two halves (with their answers to the same prompts), the explorer filtered by a cause, the
//! slow set of the hour, the hour's prompt families, and a culprit's victims. Clients ask from a
//! pool of prompts in families (see `ask_from_families`), so families and repeats exist.
//!
//! `scripts/bench findings`, or `cargo bench -p tokenscope --bench findings` with
//! TOKENSCOPE_TEST_DATABASE_URL set.

/// The allocator the `tokenscope` binary runs with (`server/src/main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../tests/it/common/mod.rs"]
#[allow(dead_code)] // the benches use only part of the test harness
mod common;
#[path = "support/timed_reads.rs"]
mod timed_reads;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sqlx::Connection;

use tokenscope_sim as sim;

const INSTANCES: usize = 4;
const HOUR_S: f64 = 3600.0;
const RUNS: usize = 20;

#[tokio::main]
async fn main() {
    let wanted: f64 = std::env::var("TOKENSCOPE_FINDINGS_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000.0);
    let app = common::spawn_app().await;
    let running = &app.running;
    let start = 1_796_022_000_000_000_000i64;
    let end = start + (HOUR_S * 1e9) as i64;

    // Bursty Poisson traffic (three times the rate every other 10 s) on each instance.
    let t = Instant::now();
    let profile = sim::cost::profile("llama-8b-h100").unwrap();
    let mut pool = HashMap::new();
    let runs: Vec<_> = (0..INSTANCES)
        .map(|k| {
            let mut rng = tokenscope::fixtures::Rng::new(11 + k as u64);
            let name = format!("gpu-{k}");
            let rate = wanted / INSTANCES as f64 / HOUR_S / 2.0;
            let mut reqs = sim::load::poisson(&name, start, rate, HOUR_S, true, &mut rng);
            ask_from_families(&mut reqs, &mut pool, &mut rng);
            sim::traffic(&name, profile, reqs, 11 + k as u64)
        })
        .collect();
    let requests: usize = runs.iter().map(|r| r.output.requests.len()).sum();
    let tokens: u64 = runs
        .iter()
        .flat_map(|r| &r.output.requests)
        .map(|r| u64::from(r.output_tokens))
        .sum();
    println!(
        "findings over {requests} requests ({tokens} output tokens) in an hour on {INSTANCES} instances (simulated in {:.0} s)",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    sim::deliver::send(
        &format!("http://{}", running.grpc_addr),
        sim::deliver::batches(&runs),
        f64::INFINITY,
        false,
    )
    .await
    .unwrap();
    let ingest = t.elapsed().as_secs_f64();
    let mut db = sqlx::PgConnection::connect(&app.database_url)
        .await
        .unwrap();
    sqlx::query("VACUUM ANALYZE")
        .execute(&mut db)
        .await
        .unwrap();
    println!(
        "  stored in {ingest:.0} s ({:.0} requests/s, {:.0} tokens/s)",
        requests as f64 / ingest,
        tokens as f64 / ingest
    );

    // The worker's code, on one task as the server runs it.
    let t = Instant::now();
    let (mut diagnosed, folds) = (0, Default::default());
    while let Some(n) = tokenscope::query::findings::drain(&running.store, &folds, Duration::ZERO)
        .await
        .unwrap()
    {
        diagnosed += n;
    }
    let took = t.elapsed().as_secs_f64();
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM diagnoses")
        .fetch_one(&mut db)
        .await
        .unwrap();
    println!(
        "  worker: {diagnosed} requests diagnosed and stored in {took:.0} s ({:.0} requests/s, {:.0} output tokens/s); {rows} not healthy",
        diagnosed as f64 / took,
        tokens as f64 / took
    );
    // GPU time alone: the same hour of every instance accounted again (the worker does this
    // for each stretch it diagnoses, above).
    let ids: Vec<i32> = sqlx::query_scalar("SELECT id FROM instances")
        .fetch_all(&mut db)
        .await
        .unwrap();
    let t = Instant::now();
    for id in &ids {
        tokenscope::query::usage::account(&running.store, &Default::default(), *id, start, end)
            .await
            .unwrap();
    }
    let took = t.elapsed().as_secs_f64();
    let cells: i64 = sqlx::query_scalar("SELECT count(*) FROM usage_cells")
        .fetch_one(&mut db)
        .await
        .unwrap();
    println!(
        "  GPU time: the hour of {} instances accounted in {took:.1} s ({:.0} requests/s); {cells} cells",
        ids.len(),
        requests as f64 / took
    );
    sqlx::query("VACUUM ANALYZE")
        .execute(&mut db)
        .await
        .unwrap();

    let base = format!("http://{}", running.http_addr);
    let half = start + (end - start) / 2;
    // The request named as a culprit most often (a smaller hour may have none).
    let culprit: Option<(String, String)> = sqlx::query_as(
        "SELECT c, i.instance_key FROM (SELECT c FROM diagnoses, unnest(culprits) AS c
                GROUP BY c ORDER BY count(*) DESC LIMIT 1) top
           JOIN requests r ON r.request_id = top.c JOIN instances i ON i.id = r.instance_id LIMIT 1",
    )
    .fetch_optional(&mut db)
    .await
    .unwrap();
    let cases = [
        (
            "window diagnosis of the hour (limit 500)",
            format!("{base}/api/v1/diagnosis?from={start}&to={end}&limit=500"),
        ),
        (
            "window diagnosis of the hour (limit 5,000)",
            format!("{base}/api/v1/diagnosis?from={start}&to={end}&limit=5000"),
        ),
        (
            "compare of the two half-hours",
            format!("{base}/api/v1/compare?a_from={start}&a_to={half}&b_from={half}&b_to={end}"),
        ),
        (
            "explorer page, cause filter",
            format!(
                "{base}/api/v1/requests?from={start}&to={end}&cause=prefill_interrupted_decode&limit=100"
            ),
        ),
        (
            "GPU time of the hour by tenant",
            format!("{base}/api/v1/usage?from={start}&to={end}&width_px=1160"),
        ),
        (
            "GPU time of the hour by model, CSV",
            format!("{base}/api/v1/usage?from={start}&to={end}&by=model&format=csv"),
        ),
        (
            "slow set of the hour (SLO breaches against the rest)",
            format!("{base}/api/v1/slow-set?from={start}&to={end}"),
        ),
        (
            "slow set of the hour, brushed TTFT range",
            format!("{base}/api/v1/slow-set?from={start}&to={end}&slow=ttft&min_ms=500"),
        ),
        (
            "prompt families of the hour",
            format!("{base}/api/v1/fingerprints?from={start}&to={end}"),
        ),
    ];
    let victims = culprit.map(|(id, instance)| {
        (
            "a culprit's victims",
            format!("{base}/api/v1/requests/{id}/victims?instance={instance}"),
        )
    });
    for (name, url) in cases.iter().chain(&victims) {
        measure(&app.client, name, url).await;
    }
    // Before stored findings: the first 5,000 requests diagnosed on the spot (other thresholds
    // take that path).
    measure(
        &app.client,
        "on the spot, first 5,000 (ttft_ms=2001)",
        &format!("{base}/api/v1/diagnosis?from={start}&to={end}&limit=5000&ttft_ms=2001"),
    )
    .await;
}

/// Families of prompts the clients ask (a system prompt each family shares, 32 blocks), and
/// prompts in them (the family's blocks, then the prompt's own), each asked many times.
const FAMILIES: u64 = 30;
const PROMPTS: u64 = 600;

/// Gives each request one of the [`PROMPTS`]: its block chain, and the prompt and answer lengths
/// of the first request that drew it (so lengths keep the generator's spread, and a prompt asked
/// again is the same prompt). `pool` holds those lengths across instances.
fn ask_from_families(
    reqs: &mut [sim::engine::SimRequest],
    pool: &mut HashMap<u64, (u32, u32)>,
    rng: &mut sim::Rng,
) {
    const SHARED: u64 = 32;
    for r in reqs {
        let k = rng.below(PROMPTS);
        let (prompt, output) = *pool
            .entry(k)
            .or_insert((r.prompt_tokens.max(33 * 16), r.output_tokens));
        let family = k % FAMILIES;
        let own = u64::from(prompt / 16) - SHARED;
        r.prompt_blocks = (0..SHARED)
            .map(|j| ((family + 1) << 32) | j)
            .chain((0..own).map(|j| ((k + 1) << 48) | j))
            .collect();
        r.prompt_tokens = prompt;
        r.output_tokens = output;
    }
}

/// The query `RUNS` times (5 for the slow one).
async fn measure(client: &reqwest::Client, name: &str, url: &str) {
    let runs = if url.contains("ttft_ms=") { 5 } else { RUNS };
    timed_reads::measure(client, name, url, runs).await;
}

//! Waterfall benchmark: a window of about 10,000 requests and 200,000 engine iterations from the
//! simulator, queried at a 1,200 px width over HTTP the way a user browses it (open, scroll,
//! pack, zoom). Prints latency percentiles and the largest reply per kind of query.
//!
//! Run with `scripts/bench` (it runs every bench) or `cargo bench -p tokenscope --bench waterfall`
//! with TOKENSCOPE_TEST_DATABASE_URL set.

/// The allocator the `tokenscope` binary runs with (`server/src/main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../tests/it/common/mod.rs"]
#[allow(dead_code)] // the benches use only part of the test harness
mod common;

use std::time::{Duration, Instant};

use sqlx::Connection;

use tokenscope_sim as sim;

const QUERIES: usize = 200;

#[tokio::main]
async fn main() {
    let app = common::spawn_app().await;
    let running = &app.running;

    // Four requests a second for 2,500 s on one simulated 8B/H100 instance.
    let start = 1_796_022_000_000_000_000i64;
    let mut rng = tokenscope::fixtures::Rng::new(7);
    let reqs = sim::load::poisson("wf", start, 4.0, 2500.0, false, &mut rng);
    let profile = sim::cost::profile("llama-8b-h100").unwrap();
    let run = sim::traffic("bench-gpu", profile, reqs, 7);
    let (requests, iterations) = (run.output.requests.len(), run.output.iterations.len());
    let end = run
        .output
        .requests
        .iter()
        .map(|r| r.finished_ns)
        .max()
        .unwrap();
    sim::deliver::send(
        &format!("http://{}", running.grpc_addr),
        sim::deliver::batches(&[run]),
        f64::INFINITY,
        false,
    )
    .await
    .unwrap();

    let base = format!(
        "http://{}/api/v1/waterfall?instance=bench-gpu&width_px=1200",
        running.http_addr
    );
    println!(
        "waterfall over {requests} requests and {iterations} iterations, width 1,200 px, {QUERIES} queries each:"
    );
    let whole = format!("{base}&from={start}&to={end}");
    // What a user does: open the whole window, scroll its rows, pack it, zoom into a minute.
    let urls = |f: &dyn Fn(usize) -> String| (0..QUERIES).map(f).collect::<Vec<_>>();
    let minute = 60_000_000_000;
    let mixes = [
        ("whole window, top rows", urls(&|_| whole.clone())),
        (
            "whole window, scrolled",
            urls(&|k| format!("{whole}&first_row={}", k * 47 % 9_500)),
        ),
        (
            "whole window, compact",
            urls(&|_| format!("{whole}&compact=true")),
        ),
        (
            "one-minute zoom, anywhere",
            urls(&|k| {
                let from = start + (k as i64 * 7_919_000_000) % (end - start - minute);
                format!("{base}&from={from}&to={}", from + minute)
            }),
        ),
    ];
    let client = &app.client;
    // Straight after a bulk load Postgres is still vacuuming and analysing the new rows on the
    // same two cores; a live system reaches the settled state minutes after the data arrives.
    let (name, urls) = &mixes[0];
    measure(client, &format!("{name} (just loaded)"), urls).await;
    let mut db = sqlx::PgConnection::connect(&app.database_url)
        .await
        .unwrap();
    sqlx::query("VACUUM ANALYZE")
        .execute(&mut db)
        .await
        .unwrap();
    for (name, urls) in &mixes {
        measure(client, name, urls).await;
    }
    println!("  (500 visible rows per reply; the lane is at most 1,200 steps or buckets)");

    // The explorer's chart: TTFT/TPOT percentiles over the window, 600 buckets.
    let url = format!(
        "http://{}/api/v1/latency?instance=bench-gpu&from={start}&to={end}&width_px=600",
        running.http_addr
    );
    measure(
        client,
        "latency percentiles, 600 buckets",
        &vec![url; QUERIES],
    )
    .await;

    // The window's diagnosis reads its requests' tokens and surroundings page by page.
    let url = format!(
        "http://{}/api/v1/diagnosis?instance=bench-gpu&from={start}&to={end}&limit=5000",
        running.http_addr
    );
    let mut times = Vec::new();
    let mut degraded = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let reply: serde_json::Value = client.get(&url).send().await.unwrap().json().await.unwrap();
        times.push(t.elapsed());
        degraded = reply["diagnoses"].as_array().map_or(0, Vec::len);
    }
    times.sort();
    println!(
        "diagnosis of 5,000 requests in the window: median {:.0} ms over 5 runs ({degraded} degraded)",
        times[2].as_secs_f64() * 1000.0
    );
}

/// Runs the queries one after another; prints latency percentiles and the largest reply.
async fn measure(client: &reqwest::Client, name: &str, urls: &[String]) {
    let mut times = Vec::with_capacity(urls.len());
    let mut bytes = 0;
    for url in urls {
        let t = Instant::now();
        let response = client.get(url).send().await.unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        let body = response.bytes().await.unwrap();
        times.push(t.elapsed());
        bytes = bytes.max(body.len());
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let n = times.len();
    println!(
        "  {name:<38} p50 / p99 / max  {:>5.1} / {:>5.1} / {:>5.1} ms   largest reply {:.2} MB",
        ms(times[n / 2]),
        ms(times[n * 99 / 100]),
        ms(times[n - 1]),
        bytes as f64 / 1e6
    );
}

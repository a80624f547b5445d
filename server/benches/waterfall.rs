//! Waterfall benchmark: a window of about 10,000 requests and 100,000 engine iterations from the
//! simulator, queried at a 1,200 px width over HTTP. Prints latency percentiles and payload size.
//!
//! Run with `scripts/bench` (it runs every bench) or `cargo bench -p tokenscope --bench waterfall`
//! with TOKENSCOPE_TEST_DATABASE_URL set.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use tokenscope::sim;

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

    let url = format!(
        "http://{}/api/v1/waterfall?instance=bench-gpu&from={start}&to={end}&width_px=1200",
        running.http_addr
    );
    let client = &app.client;
    let mut times = Vec::with_capacity(QUERIES);
    let mut bytes = 0;
    for _ in 0..QUERIES {
        let t = Instant::now();
        let body = client
            .get(&url)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        times.push(t.elapsed());
        bytes = body.len();
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "waterfall over {requests} requests and {iterations} iterations, width 1,200 px, {QUERIES} queries (whole window):"
    );
    println!(
        "  latency p50 / p99 / max  {:.1} / {:.1} / {:.1} ms",
        ms(times[QUERIES / 2]),
        ms(times[QUERIES * 99 / 100]),
        ms(times[QUERIES - 1])
    );
    println!(
        "  payload                  {:.2} MB (500 visible rows; the lane is at most 1,200 buckets)",
        bytes as f64 / 1e6
    );
}

//! Timing a read over HTTP the way the findings and fleet benchmarks report it.

use std::time::{Duration, Instant};

/// The query `runs` times; prints p50 / p95 and the reply's size.
pub async fn measure(client: &reqwest::Client, name: &str, url: &str, runs: usize) {
    let runs = runs.max(1);
    let mut times = Vec::with_capacity(runs);
    let mut bytes = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let response = client.get(url).send().await.unwrap();
        assert!(
            response.status().is_success(),
            "{url}: {}",
            response.status()
        );
        bytes = response.bytes().await.unwrap().len();
        times.push(t.elapsed());
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "  {name:<44} p50 / p95  {:>7.1} / {:>7.1} ms   reply {:.2} MB",
        ms(times[runs / 2]),
        ms(times[(runs * 95 / 100).min(runs - 1)]),
        bytes as f64 / 1e6
    );
}

//! Latency over time against the request list: per-bucket nearest-rank percentiles and SLO
//! breaches equal what the listed requests' own TTFT and TPOT give, filters apply, and bad
//! parameters are refused with a message.

use crate::common;

use common::*;
use tokenscope_sim as sim;

/// Nearest rank: the smallest value with at least `p` of the values at or below it.
fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.max(1) - 1]
}

#[tokio::test]
async fn buckets_agree_with_the_requests_they_hold() {
    let app = spawn_app().await;
    let profile = sim::cost::profile("llama-8b-h100").unwrap();
    let mut rng = tokenscope::fixtures::Rng::new(9);
    let runs: Vec<_> = ["lat-a", "lat-b"]
        .into_iter()
        .map(|name| {
            let reqs = sim::load::poisson(name, T0, 12.0, 30.0, true, &mut rng);
            sim::traffic(name, profile, reqs, 9)
        })
        .collect();
    app.send_sim(&runs).await;

    let (from, to, width) = (T0, T0 + 30_000_000_000, 6);
    let (ttft_slo, tpot_slo) = (80.0, 12.0);
    let series = app
        .get_json(&format!(
            "/api/v1/latency?instance=lat-a&from={from}&to={to}&width_px={width}&ttft_ms={ttft_slo}&tpot_ms={tpot_slo}"
        ))
        .await;
    let bucket = series["bucket_ns"].as_i64().unwrap();
    assert_eq!(bucket, 5_000_000_000);
    let listed = app
        .get_json(&format!(
            "/api/v1/requests?instance=lat-a&from={from}&to={to}&limit=10000"
        ))
        .await;
    let listed = listed["requests"].as_array().unwrap();
    let buckets = series["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), width as usize);
    let mut total = 0;
    for b in buckets {
        let start = b["start_ns"].as_i64().unwrap();
        let inside: Vec<&serde_json::Value> = listed
            .iter()
            .filter(|r| (start..start + bucket).contains(&r["arrival_ns"].as_i64().unwrap()))
            .collect();
        assert_eq!(b["requests"].as_u64().unwrap() as usize, inside.len());
        total += inside.len();
        for (field, slo, over) in [
            ("ttft_ms", ttft_slo, "ttft_over_slo"),
            ("tpot_ms", tpot_slo, "tpot_over_slo"),
        ] {
            let mut v: Vec<f64> = inside.iter().filter_map(|r| r[field].as_f64()).collect();
            v.sort_by(f64::total_cmp);
            assert_eq!(
                b[over].as_u64().unwrap() as usize,
                v.iter().filter(|&&x| x > slo).count(),
                "{field} at {start}"
            );
            for p in [0.5, 0.9, 0.99] {
                let key = format!("p{}", (p * 100.0) as u32);
                assert_eq!(
                    b[field][&key].as_f64().unwrap(),
                    nearest_rank(&v, p),
                    "{field} {key} at {start}"
                );
            }
        }
    }
    assert_eq!(total, listed.len(), "every request is in a bucket");
    assert!(
        buckets
            .iter()
            .any(|b| b["ttft_over_slo"].as_u64().unwrap() > 0),
        "the bursts break the TTFT SLO somewhere: {series}"
    );

    // Both instances together hold more requests than one.
    let both = app
        .get_json(&format!(
            "/api/v1/latency?from={from}&to={to}&width_px={width}"
        ))
        .await;
    let count = |s: &serde_json::Value| -> u64 {
        s["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["requests"].as_u64().unwrap())
            .sum()
    };
    assert!(count(&both) > count(&series));
    // Without a window: the hour before the newest request.
    let recent = app.get_json("/api/v1/latency?instance=lat-a").await;
    assert_eq!(count(&recent), listed.len() as u64);

    for bad in [
        "width_px=0",
        "ttft_ms=-1",
        "from=5&to=5",
        "engine=vllm&order=sideways",
    ] {
        let resp = app.get(&format!("/api/v1/latency?{bad}")).await;
        assert_eq!(resp.status(), 400, "{bad}");
        assert!(!resp.text().await.unwrap().is_empty(), "{bad}");
    }
}

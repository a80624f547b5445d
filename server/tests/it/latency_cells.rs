//! Latency cells: once the findings worker has counted a fleet's minutes, a wide window's chart
//! and compare read the cells. Their counts (requests, SLO breaches, compare's histogram) equal
//! what the simulated engines did, their percentiles are within a bin of the exact ones, and
//! data the worker has not counted yet is in the chart all the same.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common;

use common::*;
use tokenscope::store::Store;
use tokenscope_core::model::Nanos;
use tokenscope_core::model::latency_cells::BINS_PER_OCTAVE;
use tokenscope_core::model::metrics::request_metrics;
use tokenscope_sim::fleet;
use tokenscope_sim::scenarios::{self, InstanceRun};

const MIN: Nanos = 60_000_000_000;

/// A bin's width: how far a percentile read from cells may be from the exact one.
fn bin_ratio() -> f64 {
    (1.0 / f64::from(BINS_PER_OCTAVE)).exp2() * 1.000_001
}

async fn settled(store: &Store) {
    findings_settled(store, Duration::from_secs(180)).await;
}

/// What the engines did: each request's arrival, TTFT and TPOT (ns), on which instance and
/// release.
struct Truth {
    arrival: Nanos,
    ttft: Option<Nanos>,
    tpot: Option<Nanos>,
    instance: String,
    version: String,
}

fn truth(runs: &[InstanceRun]) -> Vec<Truth> {
    runs.iter()
        .flat_map(|run| {
            run.output.requests.iter().map(|r| {
                let m = request_metrics(r);
                Truth {
                    arrival: r.arrival_ns,
                    ttft: m.ttft_ns,
                    tpot: m.tpot_ns,
                    instance: run.resource.instance_id.clone(),
                    version: run.resource.engine_version.clone(),
                }
            })
        })
        .collect()
}

/// `percentile_disc` of `values`.
fn disc(values: &mut [Nanos], q: f64) -> Option<f64> {
    values.sort_unstable();
    let n = values.len();
    (n > 0).then(|| values[((q * n as f64).ceil() as usize).clamp(1, n) - 1] as f64 / 1e6)
}

fn within_a_bin(got: &serde_json::Value, want: Option<f64>, what: &str) {
    match want {
        None => assert!(got.is_null(), "{what}: {got} with nothing to rank"),
        Some(want) => {
            let got = got.as_f64().unwrap_or_else(|| panic!("{what}: {got}"));
            assert!(
                got / want < bin_ratio() && want / got < bin_ratio(),
                "{what}: {got} ms against {want} ms"
            );
        }
    }
}

/// The chart of `query` over `[from, to)` read from cells, checked bucket by bucket against
/// the requests `truth` keeps.
async fn chart_is_the_truth(
    app: &TestApp,
    query: &str,
    (from, to): (Nanos, Nanos),
    truth: &[&Truth],
) {
    let s = app
        .get_json(&format!(
            "/api/v1/latency?{query}&from={from}&to={to}&width_px=60"
        ))
        .await;
    let bucket = s["bucket_ns"].as_i64().unwrap();
    assert_eq!(
        bucket % MIN,
        0,
        "{query}: whole minutes, as cells give: {bucket}"
    );
    let mut want: BTreeMap<Nanos, Vec<&Truth>> = BTreeMap::new();
    // Buckets of whole minutes from the minute the window starts in.
    let origin = from - from.rem_euclid(MIN);
    for t in truth.iter().filter(|t| t.arrival >= from && t.arrival < to) {
        want.entry(origin + (t.arrival - origin).div_euclid(bucket) * bucket)
            .or_default()
            .push(t);
    }
    let buckets = s["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), want.len(), "{query}: buckets with requests");
    for (b, (start, reqs)) in buckets.iter().zip(&want) {
        let what = format!("{query} bucket {start}");
        assert_eq!(b["start_ns"].as_i64().unwrap(), *start, "{what}");
        assert_eq!(
            b["requests"].as_u64().unwrap() as usize,
            reqs.len(),
            "{what}"
        );
        let over = |f: fn(&Truth) -> Option<Nanos>, slo: Nanos| {
            reqs.iter()
                .filter(|t| f(t).is_some_and(|v| v > slo))
                .count() as u64
        };
        assert_eq!(
            b["ttft_over_slo"].as_u64().unwrap(),
            over(|t| t.ttft, 2_000_000_000),
            "{what}"
        );
        assert_eq!(
            b["tpot_over_slo"].as_u64().unwrap(),
            over(|t| t.tpot, 50_000_000),
            "{what}"
        );
        for (metric, f) in [
            (
                "ttft_ms",
                (|t: &Truth| t.ttft) as fn(&Truth) -> Option<Nanos>,
            ),
            ("tpot_ms", |t: &Truth| t.tpot),
        ] {
            let mut values: Vec<Nanos> = reqs.iter().filter_map(|t| f(t)).collect();
            for (p, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)] {
                within_a_bin(
                    &b[metric][p],
                    disc(&mut values, q),
                    &format!("{what} {metric} {p}"),
                );
            }
        }
    }
}

#[tokio::test]
async fn wide_windows_read_cells_that_count_what_the_engines_did() {
    let app = spawn_app_with(|c| c.findings_settle = Some(Duration::from_secs(2))).await;
    let store = &app.running.store;
    // Four instances on two releases for two and a half hours, counted by the worker.
    let runs = fleet::regression(T0, 0.05, 9_000.0);
    app.send_sim(&runs).await;
    settled(store).await;
    let known = truth(&runs);
    let all: Vec<&Truth> = known.iter().collect();
    let window = (T0 - 90 * 1_000_000_000, T0 + 9_000 * 1_000_000_000);
    chart_is_the_truth(&app, "", window, &all).await;
    let one: Vec<&Truth> = known.iter().filter(|t| t.instance == "fleet-1").collect();
    chart_is_the_truth(&app, "instance=fleet-1", window, &one).await;
    let rc: Vec<&Truth> = known
        .iter()
        .filter(|t| t.version == fleet::SLOW_VERSION)
        .collect();
    chart_is_the_truth(
        &app,
        &format!("engine_version={}", fleet::SLOW_VERSION),
        window,
        &rc,
    )
    .await;

    // Compare, a release a side: counts and compare's histogram exact, percentiles within a bin.
    let (from, to) = window;
    let c = app
        .get_json(&format!(
            "/api/v1/compare?a_engine_version={}&b_engine_version={}&a_from={from}&a_to={to}&b_from={from}&b_to={to}",
            runs[0].resource.engine_version,
            fleet::SLOW_VERSION
        ))
        .await;
    for (side, version) in [
        ("a", runs[0].resource.engine_version.as_str()),
        ("b", fleet::SLOW_VERSION),
    ] {
        let reqs: Vec<&Truth> = known.iter().filter(|t| t.version == version).collect();
        let s = &c[side];
        assert_eq!(
            s["requests"].as_u64().unwrap() as usize,
            reqs.len(),
            "{side}"
        );
        let mut ttft: Vec<Nanos> = reqs.iter().filter_map(|t| t.ttft).collect();
        let mut tpot: Vec<Nanos> = reqs.iter().filter_map(|t| t.tpot).collect();
        for (p, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)] {
            within_a_bin(
                &s["ttft_ms"][p],
                disc(&mut ttft, q),
                &format!("{side} ttft {p}"),
            );
            within_a_bin(
                &s["tpot_ms"][p],
                disc(&mut tpot, q),
                &format!("{side} tpot {p}"),
            );
        }
        // Compare's bins: four to an octave from 1 ms.
        let mut bins: BTreeMap<i64, u64> = BTreeMap::new();
        for v in &tpot {
            let k = (4.0 * (*v.max(&1000) as f64 / 1e6).log2()).floor() as i64;
            *bins.entry(k).or_default() += 1;
        }
        let got: BTreeMap<i64, u64> = s["tpot_histogram"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                let k = (4.0 * b["lo_ms"].as_f64().unwrap().log2()).round() as i64;
                (k, b["requests"].as_u64().unwrap())
            })
            .collect();
        assert_eq!(got, bins, "{side}: TPOT histogram");
    }
}

#[tokio::test]
async fn data_the_worker_has_not_counted_is_in_the_chart() {
    // No worker: the test counts what is queued, then a late batch waits uncounted.
    let app = spawn_app().await;
    let store = &app.running.store;
    let runs = fleet::regression(T0, 0.05, 9_000.0);
    app.send_sim(&runs).await;
    while tokenscope::query::findings::drain(store, &Default::default(), Duration::ZERO)
        .await
        .unwrap()
        .is_some()
    {}
    let late =
        scenarios::build("prefill-interrupts-decode", T0 + 8_000 * 1_000_000_000, 1).unwrap();
    app.send_sim(&late.runs).await;
    assert!(
        store.diagnosis_backlog().await.unwrap().1 > 0,
        "the late batch waits"
    );
    let mut known = truth(&runs);
    known.extend(truth(&late.runs));
    let all: Vec<&Truth> = known.iter().collect();
    chart_is_the_truth(
        &app,
        "",
        (T0 - 90 * 1_000_000_000, T0 + 9_000 * 1_000_000_000),
        &all,
    )
    .await;
}

//! Who used the GPU: the worker's usage cells add up to each instance's busy time as the
//! simulated engine ran it (the union of its steps), tokens per tenant are what the tenant's
//! requests computed, steps whose requests come late move to their tenant, an instance that sent
//! spans only is estimated (and says so), and the CSV is the chart's data.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common;

use common::*;
use tokenscope_core::model::{Nanos, RequestTrace};
use tokenscope_sim as sim;
use tokenscope_sim::scenarios::InstanceRun;

const SETTLE: Duration = Duration::from_millis(300);
const HOUR: Nanos = 3_600_000_000_000;

/// Waits until the worker has accounted everything queued.
async fn settled(app: &TestApp) {
    findings_settled(&app.running.store, Duration::from_secs(120)).await;
}

/// The length of the union of intervals.
fn union(mut spans: Vec<(Nanos, Nanos)>) -> Nanos {
    spans.sort_unstable();
    let (mut total, mut covered) = (0, Nanos::MIN);
    for (from, to) in spans {
        let from = from.max(covered);
        if to > from {
            total += to - from;
        }
        covered = covered.max(to);
    }
    total
}

fn busy_s(run: &InstanceRun) -> f64 {
    let steps = run.output.iterations.iter().map(|s| (s.start_ns, s.end_ns));
    union(steps.collect()) as f64 / 1e9
}

fn groups(v: &serde_json::Value) -> BTreeMap<String, serde_json::Value> {
    v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let key = match (g["key"].as_str(), g["unstored"] == true) {
                (_, true) => "(not stored)".to_string(),
                (Some(k), _) => k.to_string(),
                (None, _) => "(none)".to_string(),
            };
            (key, g.clone())
        })
        .collect()
}

fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= want * 0.001 + 1e-6,
        "{what}: {got} s, the engine was busy {want} s"
    );
}

#[tokio::test]
async fn gpu_time_by_tenant_adds_up_to_the_busy_time_the_engine_had() {
    let app = spawn_app_with(|c| c.findings_settle = Some(SETTLE)).await;
    let profile = sim::cost::profile("llama-8b-h100").unwrap();
    let mut rng = tokenscope::fixtures::Rng::new(9);
    let mut run = |name: &str| {
        let reqs = sim::load::poisson(name, T0 + 20_000_000_000, 4.0, 60.0, false, &mut rng);
        sim::traffic(name, profile, reqs, 4)
    };
    let (a, b, spans) = (run("us-a"), run("us-b"), run("us-spans"));
    let window = format!("from={T0}&to={}", T0 + HOUR);

    // The steps first, their requests still running (not stored): their time is nobody's yet.
    let steps_only = |r: &InstanceRun| {
        let mut r = r.clone();
        r.output.requests.clear();
        r
    };
    app.send_sim(&[steps_only(&a), steps_only(&b)]).await;
    settled(&app).await;
    let v = app
        .get_json(&format!("/api/v1/usage?{window}&instance=us-a"))
        .await;
    close(
        v["busy_s"].as_f64().unwrap(),
        busy_s(&a),
        "us-a before its requests",
    );
    assert_eq!(
        groups(&v).keys().collect::<Vec<_>>(),
        ["(not stored)"],
        "{v}"
    );

    // Then the requests (and, for the third instance, requests with no steps at all).
    let requests_only = |r: &InstanceRun| {
        let mut r = r.clone();
        r.output.iterations.clear();
        r
    };
    app.send_sim(&[requests_only(&a), requests_only(&b), requests_only(&spans)])
        .await;
    settled(&app).await;

    for run in [&a, &b] {
        let name = &run.resource.instance_id;
        let v = app
            .get_json(&format!("/api/v1/usage?{window}&instance={name}&by=tenant"))
            .await;
        close(v["busy_s"].as_f64().unwrap(), busy_s(run), name);
        assert_eq!(v["estimated_s"], 0.0, "{name} reported its steps");
        let g = groups(&v);
        assert!(!g.contains_key("(not stored)"), "{name}: {v}");
        let sum: f64 = g.values().map(|g| g["gpu_s"].as_f64().unwrap()).sum();
        close(sum, busy_s(run), &format!("{name}: the tenants' sum"));

        // Tokens per tenant are what its requests computed: their uncached prompt, and every
        // token after the first (which the last prefill step samples).
        let sent: Vec<&RequestTrace> = run.output.requests.iter().collect();
        assert!(
            sent.iter().all(|r| r.preemptions.is_empty()),
            "no recompute"
        );
        for (tenant, group) in &g {
            let mine = sent
                .iter()
                .filter(|r| r.served.tenant.as_deref().unwrap_or("(none)") == tenant);
            let prefill: u64 = mine
                .clone()
                .map(|r| u64::from(r.prompt_tokens - r.cached_tokens))
                .sum();
            let decode: u64 = mine.map(|r| u64::from(r.output_tokens - 1)).sum();
            assert_eq!(group["prefill_tokens"], prefill, "{name} {tenant}");
            assert_eq!(group["decode_tokens"], decode, "{name} {tenant}");
        }
        assert!(g.len() >= 3, "the simulator's tenants: {v}");
    }

    // Spans only: estimated from the requests' intervals, which it says; busy while any ran.
    let v = app
        .get_json(&format!("/api/v1/usage?{window}&instance=us-spans"))
        .await;
    let served = spans
        .output
        .requests
        .iter()
        .map(|r| (r.first_scheduled_ns.unwrap_or(r.arrival_ns), r.finished_ns));
    let want = union(served.collect()) as f64 / 1e9;
    close(v["busy_s"].as_f64().unwrap(), want, "us-spans");
    close(
        v["estimated_s"].as_f64().unwrap(),
        want,
        "us-spans estimated",
    );

    // By adapter and by model, the same time; the CSV is the chart, row for row.
    let all = app.get_json(&format!("/api/v1/usage?{window}")).await;
    let total = busy_s(&a) + busy_s(&b) + want;
    close(all["busy_s"].as_f64().unwrap(), total, "all instances");
    for by in ["adapter", "model"] {
        let v = app
            .get_json(&format!("/api/v1/usage?{window}&by={by}"))
            .await;
        close(v["busy_s"].as_f64().unwrap(), total, by);
    }
    let csv = app
        .get_text(&format!("/api/v1/usage?{window}&format=csv"))
        .await;
    let mut from_csv: BTreeMap<String, f64> = BTreeMap::new();
    for line in csv.lines().skip(1) {
        let cells: Vec<&str> = line.split(',').collect();
        let key = if cells[3] == "true" {
            "(not stored)".to_string()
        } else if cells[2].is_empty() {
            "(none)".to_string()
        } else {
            cells[2].to_string()
        };
        *from_csv.entry(key).or_default() += cells[4].parse::<f64>().unwrap();
    }
    for (key, g) in groups(&all) {
        let want = g["gpu_s"].as_f64().unwrap();
        assert!((from_csv[&key] - want).abs() < 1e-3, "{key}: {csv}");
    }
    let chart: f64 = all["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|b| b["gpu_s"].as_array().unwrap().clone())
        .map(|x| x.as_f64().unwrap())
        .sum();
    close(chart, total, "the chart's bars");

    // A tenant's filter keeps its time only; compare shows each side's tenants.
    let acme = app
        .get_json(&format!("/api/v1/usage?{window}&tenant=acme"))
        .await;
    assert_eq!(groups(&acme).keys().collect::<Vec<_>>(), ["acme"]);
    assert_eq!(acme["groups"][0]["gpu_s"], groups(&all)["acme"]["gpu_s"]);
    let c = app
        .get_json(&format!(
            "/api/v1/compare?a_instance=us-a&b_instance=us-b&a_from={T0}&a_to={}&b_from={T0}&b_to={}",
            T0 + HOUR,
            T0 + HOUR
        ))
        .await;
    close(c["a"]["busy_s"].as_f64().unwrap(), busy_s(&a), "compare A");
    assert!(c["b"]["usage"].as_array().unwrap().len() >= 3, "{}", c["b"]);

    // Bad parameters are named.
    for (q, says) in [
        ("by=colour", "is not tenant, adapter or model"),
        ("priority=1", "priority does not apply to GPU time"),
        ("format=xml", "is not json or csv"),
    ] {
        let r = app.get(&format!("/api/v1/usage?{q}")).await;
        assert_eq!(r.status(), 400, "{q}");
        assert!(r.text().await.unwrap().contains(says), "{q}");
    }
}

/// The worker keeps each instance's accounting of a minute between its passes and reads only
/// the steps stored since (`query::usage::Folds`). Steps sent in three parts, each accounted
/// before the next arrives: the first third, then the last (carried on), then the middle, late,
/// among steps already counted (counted again from the start). The minute's GPU time and tokens
/// are still what the engine did.
#[tokio::test]
async fn steps_stored_late_among_counted_ones_are_counted() {
    let app = spawn_app_with(|c| c.findings_settle = Some(SETTLE)).await;
    let profile = sim::cost::profile("llama-8b-h100").unwrap();
    let mut rng = tokenscope::fixtures::Rng::new(11);
    // Inside one minute (T0 is on a minute), so every part's stretch accounts the same cells.
    let reqs = sim::load::poisson("us-late", T0 + 5_000_000_000, 4.0, 40.0, false, &mut rng);
    let run = sim::traffic("us-late", profile, reqs, 4);
    let last_end = run
        .output
        .iterations
        .iter()
        .map(|s| s.end_ns)
        .max()
        .unwrap();
    assert!(
        last_end < T0 + 60_000_000_000,
        "the traffic fits its minute"
    );

    let mut requests = run.clone();
    requests.output.iterations.clear();
    app.send_sim(&[requests]).await;
    settled(&app).await;
    let n = run.output.iterations.len();
    for part in [0..n / 3, 2 * n / 3..n, n / 3..2 * n / 3] {
        let mut steps = run.clone();
        steps.output.requests.clear();
        steps.output.iterations = run.output.iterations[part].to_vec();
        app.send_sim(&[steps]).await;
        settled(&app).await;
    }

    let v = app
        .get_json(&format!(
            "/api/v1/usage?from={T0}&to={}&instance=us-late",
            T0 + HOUR
        ))
        .await;
    close(v["busy_s"].as_f64().unwrap(), busy_s(&run), "us-late");
    let g = groups(&v);
    assert!(!g.contains_key("(not stored)"), "{v}");
    let (prefill, decode) = g.values().fold((0, 0), |(p, d), g| {
        (
            p + g["prefill_tokens"].as_u64().unwrap(),
            d + g["decode_tokens"].as_u64().unwrap(),
        )
    });
    let sent = &run.output.requests;
    assert!(
        sent.iter().all(|r| r.preemptions.is_empty()),
        "no recompute"
    );
    let want_prefill: u64 = sent
        .iter()
        .map(|r| u64::from(r.prompt_tokens - r.cached_tokens))
        .sum();
    let want_decode: u64 = sent.iter().map(|r| u64::from(r.output_tokens - 1)).sum();
    assert_eq!((prefill, decode), (want_prefill, want_decode), "{v}");
}

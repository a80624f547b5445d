//! What the slow requests have in common: four instances share the traffic, two of them run an
//! engine version whose steps are slower (`sim::fleet::regression`).
//! Which requests were slow is read from the simulated engine's own output; the ranking must
//! put that engine version first, above each of its two instances alone, with the counts the
//! engine's requests give. A brushed range and a scoped reader read the same way.

use std::collections::BTreeMap;

use crate::common;

use common::*;
use tokenscope_core::model::metrics::request_metrics;
use tokenscope_sim::fleet::{self, SLOW_VERSION};

/// The default TPOT SLO (`Thresholds::default`).
const TPOT_SLO_MS: f64 = 50.0;

#[tokio::test]
async fn the_engine_version_that_slowed_decode_ranks_first() {
    let app = spawn_app().await;
    let runs = fleet::regression(T0, 2.0, 90.0);
    app.send_sim(&runs).await;

    // The truth: which requests the engine made slow, from its own output.
    let mut slow_by_version: BTreeMap<String, u64> = BTreeMap::new();
    let mut all = 0u64;
    for run in &runs {
        for r in &run.output.requests {
            all += 1;
            let tpot = request_metrics(r).tpot_ns.unwrap_or(0) as f64 / 1e6;
            if tpot > TPOT_SLO_MS {
                *slow_by_version
                    .entry(run.resource.engine_version.clone())
                    .or_default() += 1;
            }
        }
    }
    let slow: u64 = slow_by_version.values().sum();
    let on_slow_version = slow_by_version[SLOW_VERSION];
    assert!(
        on_slow_version as f64 > 0.9 * slow as f64 && slow > 50,
        "the scenario plants its effect: {slow_by_version:?} of {all}"
    );

    // TTFT's SLO high enough that only TPOT decides.
    let window = format!("from={}&to={}", T0 - 1, T0 + 3_600_000_000_000);
    let q = format!("/api/v1/slow-set?{window}&ttft_ms=600000");
    let s = app.get_json(&q).await;
    assert_eq!(s["slow"], slow, "{s}");
    assert_eq!(
        s["slow"].as_u64().unwrap() + s["rest"].as_u64().unwrap(),
        all
    );
    assert_eq!(s["definition"], "TTFT over 600000 ms or TPOT over 50 ms");
    let top = &s["separators"][0];
    assert_eq!(top["attribute"], "engine_version", "{s}");
    assert_eq!(top["value"], SLOW_VERSION);
    assert_eq!(top["slow"], on_slow_version);
    assert!(top["low"].as_f64().unwrap() > 0.5, "{top}");
    // Each slow instance separates too, less surely than the version they share.
    let seps = s["separators"].as_array().unwrap();
    let instance_low = |name: &str| {
        seps.iter()
            .find(|x| x["attribute"] == "instance" && x["value"] == name)
            .map(|x| x["low"].as_f64().unwrap())
    };
    for name in ["fleet-2", "fleet-3"] {
        let low = instance_low(name).unwrap_or_else(|| panic!("{name} in {s}"));
        assert!(low < top["low"].as_f64().unwrap(), "{name}");
    }
    assert!(instance_low("fleet-0").is_none() && instance_low("fleet-1").is_none());

    // A brushed range reads the same set: TPOT above the SLO.
    let brushed = app
        .get_json(&format!(
            "/api/v1/slow-set?{window}&slow=tpot&min_ms={}",
            TPOT_SLO_MS + 0.000_001
        ))
        .await;
    assert_eq!(brushed["slow"], slow, "{brushed}");
    assert_eq!(brushed["separators"][0]["value"], SLOW_VERSION);

    // Narrowed to the fast version, nothing is left to separate by version.
    let fast = app
        .get_json(&format!("{q}&engine_version=tokenscope-sim"))
        .await;
    assert_eq!(fast["slow"], slow - on_slow_version);
    assert!(
        fast["separators"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["value"] != SLOW_VERSION)
    );

    // Bad input names what was wrong.
    for (path, says) in [
        (
            format!("/api/v1/slow-set?{window}&slow=fast"),
            "is not slo, ttft, tpot or e2e",
        ),
        (
            format!("/api/v1/slow-set?{window}&slow=ttft"),
            "needs min_ms",
        ),
        (
            format!("/api/v1/slow-set?{window}&slow=ttft&min_ms=5&max_ms=1"),
            "needs min_ms",
        ),
        ("/api/v1/slow-set?from=x".to_string(), "is not an integer"),
    ] {
        let r = app.get(&path).await;
        assert_eq!(r.status(), 400, "{path}");
        let body = r.text().await.unwrap();
        assert!(body.contains(says), "{path}: {body}");
    }
}

/// Every attribute value the slow set tallies is one click from a filter: the request list
/// narrowed by the value's parameters (`Attribute::filter`) holds exactly the requests the tally
/// counted; and the buckets select what the engines did (prompt lengths, cached share, hour and
/// the largest batch in the second of arrival, counted here from the engines' own output).
#[tokio::test]
async fn each_tallied_value_is_one_filter_away() {
    use tokenscope_core::analysis::slow_set::{Attribute, BATCH_EDGES, PROMPT_EDGES};

    let app = spawn_app().await;
    let runs = fleet::regression(T0, 2.0, 90.0);
    app.send_sim(&runs).await;
    let window = format!("from={}&to={}", T0 - 1, T0 + 3_600_000_000_000);
    let total = |extra: String| {
        let app = &app;
        let q = format!("/api/v1/requests?{window}&limit=1{extra}");
        async move { app.get_json(&q).await["total"].as_u64().unwrap() }
    };
    // Every value that sets slow requests apart, under a loose TPOT range so that many do.
    let s = app
        .get_json(&format!("/api/v1/slow-set?{window}&slow=tpot&min_ms=20"))
        .await;
    let seps = s["separators"].as_array().unwrap();
    assert!(seps.len() >= 3, "{s}");
    for x in seps {
        let attribute: Attribute = serde_json::from_value(x["attribute"].clone()).unwrap();
        let Some(value) = x["value"].as_str() else {
            continue;
        };
        let params = attribute.filter(value);
        assert!(!params.is_empty(), "{attribute:?} {value} has no filter");
        let extra: String = params
            .iter()
            .map(|(k, v)| {
                // The explorer says `version`, the API `engine_version`.
                let k = if *k == "version" { "engine_version" } else { k };
                format!("&{k}={}", urlencode(v))
            })
            .collect();
        let all = x["slow"].as_u64().unwrap() + x["rest"].as_u64().unwrap();
        assert_eq!(
            total(extra.clone()).await,
            all,
            "{attribute:?} {value}: {extra}"
        );
    }

    // The buckets, against the engines' output.
    let requests: Vec<_> = runs.iter().flat_map(|r| &r.output.requests).collect();
    let between =
        |lo: i32, hi: Option<i32>, v: u32| v as i32 >= lo && hi.is_none_or(|h| (v as i32) < h);
    for k in 0..=PROMPT_EDGES.len() {
        let lo = if k == 0 { 0 } else { PROMPT_EDGES[k - 1] };
        let hi = PROMPT_EDGES.get(k).copied();
        let want = requests
            .iter()
            .filter(|r| between(lo, hi, r.prompt_tokens))
            .count() as u64;
        let extra = format!(
            "&prompt_min={lo}{}",
            hi.map_or(String::new(), |h| format!("&prompt_max={h}"))
        );
        assert_eq!(total(extra).await, want, "prompt bucket {k}");
    }
    let none_cached = requests.iter().filter(|r| r.cached_tokens == 0).count() as u64;
    assert_eq!(total("&cached=none".into()).await, none_cached);
    let hour = ((T0 / 3_600_000_000_000) % 24) as u64;
    let in_hour = requests
        .iter()
        .filter(|r| (r.arrival_ns / 3_600_000_000_000) as u64 % 24 == hour)
        .count() as u64;
    assert_eq!(total(format!("&hour={hour}")).await, in_hour);
    for k in 0..=BATCH_EDGES.len() {
        let lo = if k == 0 { 0 } else { BATCH_EDGES[k - 1] };
        let hi = BATCH_EDGES.get(k).copied();
        // The largest batch among the instance's steps that start in the second it arrived.
        let want = runs
            .iter()
            .flat_map(|run| {
                run.output.requests.iter().filter(|r| {
                    let second = r.arrival_ns - r.arrival_ns % 1_000_000_000;
                    run.output
                        .iterations
                        .iter()
                        .filter(|i| i.start_ns - i.start_ns % 1_000_000_000 == second)
                        .map(|i| i.batch.len() as u32)
                        .max()
                        .is_some_and(|b| between(lo, hi, b))
                })
            })
            .count() as u64;
        let extra = format!(
            "&batch_min={lo}{}",
            hi.map_or(String::new(), |h| format!("&batch_max={h}"))
        );
        assert_eq!(total(extra).await, want, "batch bucket {k}");
    }
    for (q, says) in [
        ("hour=24", "is not an hour of the day"),
        ("cached=some", "is not none, under_half or half_or_more"),
        (
            "prompt_min=100&prompt_max=50",
            "the minimum below the maximum",
        ),
    ] {
        let r = app.get(&format!("/api/v1/requests?{q}")).await;
        assert_eq!(r.status(), 400, "{q}");
        assert!(r.text().await.unwrap().contains(says), "{q}");
    }
}

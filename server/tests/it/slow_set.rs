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

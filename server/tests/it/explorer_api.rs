//! What the browser's wide-angle views ask of the API: request lists sorted by any column, paged,
//! filtered by SLO and several instances, found by request or trace id; the waterfall around a
//! focused request with its culprits pulled next to it; and the comparison of two sides.

use crate::common;

use common::*;
use tokenscope::fixtures;
use tokenscope_sim as sim;

fn ids(v: &serde_json::Value) -> Vec<String> {
    v["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["request_id"].as_str().unwrap().to_string())
        .collect()
}

async fn two_instances(app: &TestApp) -> Vec<tokenscope_core::model::RequestTrace> {
    let mut grpc = app.grpc().await;
    let reqs: Vec<_> = (0..12)
        .map(|i| {
            fixtures::request(
                &format!("r{i:02}"),
                T0 + i * 700_000_000,
                3 + i as usize * 4,
                2,
                1,
                7 + i as u64,
            )
        })
        .collect();
    let (a, b) = reqs.split_at(7);
    grpc.export(export(&fixtures::resource("gpu-a"), a, &[]))
        .await
        .unwrap();
    grpc.export(export(&fixtures::resource("gpu-b"), b, &[]))
        .await
        .unwrap();
    grpc.export(export(
        &fixtures::resource("gpu-c"),
        &[fixtures::request("c0", T0, 5, 1, 1, 99)],
        &[],
    ))
    .await
    .unwrap();
    reqs
}

/// A page header must not count millions of rows: up to a cap the total is counted, past it
/// the planner's estimate is given and marked as one. The cap is small here so that 13 requests
/// cross it; the fleet benchmark shows it at 10 million.
#[tokio::test]
async fn totals_are_counted_up_to_a_cap_and_estimated_past_it() {
    use tokenscope::store::{RequestFilter, Total};
    let app = spawn_app().await;
    two_instances(&app).await;
    let store = &app.running.store;
    let mut db = <sqlx::PgConnection as sqlx::Connection>::connect(&app.database_url)
        .await
        .unwrap();
    sqlx::query("ANALYZE").execute(&mut db).await.unwrap();
    let all = RequestFilter::default();
    let exact = |count| Total {
        count,
        estimated: false,
    };
    assert_eq!(store.count_requests(&all, 100).await.unwrap(), exact(13));
    let past = store.count_requests(&all, 5).await.unwrap();
    assert!(past.estimated && past.count > 5, "{past:?}");
    let one = RequestFilter {
        instances: vec!["gpu-c".into()],
        ..all.clone()
    };
    assert_eq!(store.count_requests(&one, 5).await.unwrap(), exact(1));
    // Through the API, under the list's cap: counted, on every page, and not marked.
    for offset in [0, 5, 12] {
        let v = app
            .get_json(&format!("/api/v1/requests?limit=5&offset={offset}"))
            .await;
        assert_eq!(v["total"], 13, "{v}");
        assert!(v.get("total_estimated").is_none(), "{v}");
    }
}

#[tokio::test]
async fn lists_sort_by_every_column_both_ways_and_page_through_all_rows() {
    let app = spawn_app().await;
    two_instances(&app).await;
    let base = "/api/v1/requests?instance=gpu-a,gpu-b";
    let all = app.get_json(&format!("{base}&limit=100")).await;
    assert_eq!(all["total"], 12, "{all}");
    for (key, field) in [
        ("arrival", "arrival_ns"),
        ("ttft", "ttft_ms"),
        ("tpot", "tpot_ms"),
        ("e2e", "e2e_ms"),
        ("queue", "queue_ms"),
        ("prompt", "prompt_tokens"),
        ("output", "output_tokens"),
    ] {
        for dir in ["asc", "desc"] {
            let v = app
                .get_json(&format!("{base}&order={key}_{dir}&limit=100"))
                .await;
            let vals: Vec<f64> = v["requests"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r[field].as_f64().unwrap())
                .collect();
            assert_eq!(vals.len(), 12, "{key}_{dir}");
            let sorted = vals.windows(2).all(|w| {
                if dir == "asc" {
                    w[0] <= w[1]
                } else {
                    w[0] >= w[1]
                }
            });
            assert!(sorted, "{key}_{dir}: {vals:?}");
        }
        // Pages of five, concatenated, are the whole list in the same order.
        let whole = ids(&app
            .get_json(&format!("{base}&order={key}_desc&limit=100"))
            .await);
        let mut paged = Vec::new();
        for page in 0..3 {
            let v = app
                .get_json(&format!(
                    "{base}&order={key}_desc&limit=5&offset={}",
                    page * 5
                ))
                .await;
            assert_eq!(v["total"], 12, "the total is the same on every page");
            paged.extend(ids(&v));
        }
        assert_eq!(paged, whole, "{key}");
    }
    let past = app.get_json(&format!("{base}&limit=5&offset=40")).await;
    assert_eq!(
        (ids(&past).len(), past["total"].as_u64()),
        (0, Some(12)),
        "past the end"
    );
}

#[tokio::test]
async fn find_by_request_or_trace_id_and_filter_by_slo() {
    let app = spawn_app().await;
    let reqs = two_instances(&app).await;
    assert_eq!(
        ids(&app.get_json("/api/v1/requests?find=r03").await),
        ["r03"]
    );
    let trace = reqs[5].trace_id.clone().unwrap();
    assert_eq!(trace.len(), 32);
    let found = app
        .get_json(&format!("/api/v1/requests?find={trace}"))
        .await;
    assert_eq!(ids(&found), ["r05"], "a trace id finds its request");
    assert_eq!(
        ids(&app.get_json("/api/v1/requests?find=nobody").await),
        Vec::<String>::new()
    );

    // Every fixture TPOT is 18–27 ms: a 22 ms SLO splits them, 1 ms breaks them all.
    let tpot = |v: &serde_json::Value| -> Vec<f64> {
        v["requests"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["tpot_ms"].as_f64())
            .collect()
    };
    let breach = app
        .get_json("/api/v1/requests?slo=breach&tpot_ms=22&limit=100")
        .await;
    let met = app
        .get_json("/api/v1/requests?slo=met&tpot_ms=22&limit=100")
        .await;
    assert!(!tpot(&breach).is_empty() && !tpot(&met).is_empty());
    assert!(tpot(&breach).iter().all(|&t| t > 22.0), "{breach}");
    assert!(tpot(&met).iter().all(|&t| t <= 22.0), "{met}");
    assert_eq!(ids(&breach).len() + ids(&met).len(), 13);
    assert_eq!(
        app.get_json("/api/v1/requests?slo=breach&tpot_ms=1").await["total"],
        13
    );

    for (path, needle) in [
        ("/api/v1/requests?slo=maybe", "slo=\"maybe\""),
        ("/api/v1/requests?offset=-1", "offset=-1"),
        (
            "/api/v1/requests?order=ttft_sideways",
            "order=\"ttft_sideways\"",
        ),
        ("/api/v1/compare?a_from=monday", "a_from=\"monday\""),
        (
            "/api/v1/compare?b_from=9&b_to=5",
            "b_from must be before b_to",
        ),
    ] {
        let resp = app.get(path).await;
        assert_eq!(resp.status(), 400, "{path}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert!(
            body["error"].as_str().unwrap().contains(needle),
            "{path}: {body}"
        );
    }
}

#[tokio::test]
async fn waterfall_focus_and_compare_tell_the_prefill_interrupts_decode_story() {
    let app = spawn_app().await;
    let (runs, _) = sim::all_scenarios(T0, 60_000_000_000, 1);
    app.send_sim(&runs).await;
    let window = format!(
        "from={}&to={}",
        T0 - 3_600_000_000_000i64,
        T0 + 3_600_000_000_000i64
    );

    // The victim's culprits, pulled to the rows right below it.
    let d = app
        .get_json("/api/v1/requests/pid-victim/diagnosis?instance=sim-pid")
        .await;
    let culprits: Vec<String> = d["findings"][0]["culprits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    assert!(!culprits.is_empty(), "{d}");
    let w = app
        .get_json(&format!(
            "/api/v1/waterfall?instance=sim-pid&{window}&focus=pid-victim&pull={}&rows=5000",
            culprits.join(",")
        ))
        .await;
    let row = w["focus_row"]
        .as_u64()
        .expect("the focused request has a row") as usize;
    let tracks = w["tracks"].as_array().unwrap();
    let at = |r: usize| {
        tracks.iter().find(|t| t["row"] == r).unwrap()["request_id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(at(row), "pid-victim");
    let mut below: Vec<String> = (1..=culprits.len()).map(|i| at(row + i)).collect();
    below.sort();
    let mut expected = culprits.clone();
    expected.sort();
    assert_eq!(below, expected, "culprits sit right below the victim");
    let plain = app
        .get_json(&format!(
            "/api/v1/waterfall?instance=sim-pid&{window}&rows=5000"
        ))
        .await;
    assert_eq!(plain.get("focus_row"), None);
    assert_eq!(plain["rows"], w["rows"], "pulling moves rows, it adds none");

    // Zoomed in to two seconds, tokens are pixels apart: tracks carry their token times.
    let victim = tracks
        .iter()
        .find(|t| t["request_id"] == "pid-victim")
        .unwrap();
    let (a, f) = (
        victim["arrival_ns"].as_i64().unwrap(),
        victim["finished_ns"].as_i64().unwrap(),
    );
    assert!(
        victim.get("token_ns").is_none(),
        "a wide window sends no token times"
    );
    let zoom = app
        .get_json(&format!(
            "/api/v1/waterfall?instance=sim-pid&from={}&to={}&width_px=1200&focus=pid-victim",
            f - 2_000_000_000,
            f
        ))
        .await;
    let zoomed = zoom["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["request_id"] == "pid-victim")
        .unwrap();
    let times: Vec<i64> = zoomed["token_ns"]
        .as_array()
        .expect("token times")
        .iter()
        .map(|t| t.as_i64().unwrap())
        .collect();
    let detail = app
        .get_json("/api/v1/requests/pid-victim?instance=sim-pid")
        .await;
    let emitted: Vec<i64> = detail["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["emitted_ns"].as_i64().unwrap())
        .collect();
    assert_eq!(times, emitted);
    assert!(times.iter().all(|&t| t >= a && t <= f));

    // A PD deployment's two instances as one waterfall: each request's prefill part and decode
    // part share a track, with the KV transfer between them.
    let pd = app
        .get_json(&format!(
            "/api/v1/waterfall?instance=sim-pd-prefill,sim-pd-decode&{window}&rows=5000"
        ))
        .await;
    let pd_tracks = pd["tracks"].as_array().unwrap();
    let slow = pd_tracks
        .iter()
        .find(|t| t["request_id"] == "pd-slow")
        .expect("pd-slow has a track");
    assert_eq!(
        slow["parts"],
        serde_json::json!(["sim-pd-prefill", "sim-pd-decode"])
    );
    // Zoomed to the request, its stages are drawn in full.
    let (a, f) = (
        slow["arrival_ns"].as_i64().unwrap(),
        slow["finished_ns"].as_i64().unwrap(),
    );
    let near = app
        .get_json(&format!(
            "/api/v1/waterfall?instance=sim-pd-prefill,sim-pd-decode&from={}&to={}",
            a - 1_000_000_000,
            f + 1_000_000_000
        ))
        .await;
    let slow = near["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["request_id"] == "pd-slow")
        .unwrap();
    let kinds: Vec<&str> = slow["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    let at = |k: &str| {
        kinds
            .iter()
            .position(|x| *x == k)
            .unwrap_or_else(|| panic!("{k} in {kinds:?}"))
    };
    assert!(
        at("prefill") < at("kv_transfer") && at("kv_transfer") < at("decode"),
        "{kinds:?}"
    );
    let mut single = Vec::new();
    for i in ["sim-pd-prefill", "sim-pd-decode"] {
        let w = app
            .get_json(&format!(
                "/api/v1/waterfall?instance={i}&{window}&rows=5000"
            ))
            .await;
        single.push(w["rows"].as_u64().unwrap());
    }
    let (pre, dec) = (single[0], single[1]);
    assert_eq!(
        pd["rows"].as_u64().unwrap(),
        pre.max(dec),
        "parts share rows: {pre} + {dec} requests"
    );
    let missing = app
        .get(&format!(
            "/api/v1/waterfall?instance=sim-pd-prefill,nope&{window}"
        ))
        .await;
    assert_eq!(missing.status(), 404);
    let body: serde_json::Value = missing.json().await.unwrap();
    assert_eq!(body["error"], "no instance \"nope\"");

    // The same instance against its healthy control.
    let c = app
        .get_json(&format!(
            "/api/v1/compare?a_instance=sim-pid-control&b_instance=sim-pid&a_{}&b_{}&width_px=100",
            window.replace("&to=", "&a_to="),
            window.replace("&to=", "&b_to=")
        ))
        .await;
    assert!(
        c["a"]["requests"].as_u64().unwrap() > 0 && c["b"]["requests"].as_u64().unwrap() > 0,
        "{c}"
    );
    let causes = |side: &str| -> Vec<String> {
        c[side]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["cause"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        causes("b").contains(&"prefill_interrupted_decode".to_string()),
        "{}",
        c["b"]["causes"]
    );
    assert!(
        !causes("a").contains(&"prefill_interrupted_decode".to_string()),
        "{}",
        c["a"]["causes"]
    );
    let b_pid = c["b"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["cause"] == "prefill_interrupted_decode")
        .unwrap();
    // The counts agree with the window diagnosis of the same requests.
    let listed = app
        .get_json(&format!(
            "/api/v1/diagnosis?instance=sim-pid&{window}&limit=5000"
        ))
        .await;
    let with_cause: Vec<&str> = listed["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| {
            d["findings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["cause"] == "prefill_interrupted_decode")
        })
        .map(|d| d["request_id"].as_str().unwrap())
        .collect();
    assert!(with_cause.contains(&"pid-victim"), "{listed}");
    assert_eq!(
        b_pid["requests"].as_u64().unwrap() as usize,
        with_cause.len(),
        "{b_pid}"
    );
    let examples: Vec<&str> = b_pid["examples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(
        examples,
        with_cause[..examples.len()],
        "examples are the worst, in order"
    );
    let tpot_p99 = c["deltas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["metric"] == "tpot" && d["percentile"] == "p99")
        .unwrap();
    assert!(tpot_p99["delta_ms"].as_f64().unwrap() > 0.0, "{tpot_p99}");
    assert!(!c["headline"].as_str().unwrap().is_empty());
    assert!(!c["b"]["tpot_histogram"].as_array().unwrap().is_empty());
    let hist_total: u64 = c["a"]["ttft_histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(
        hist_total,
        c["a"]["requests"].as_u64().unwrap(),
        "every request is in one TTFT bin"
    );
    assert!(c["b"]["series"]["buckets"].as_array().unwrap().len() <= 100);
}

//! The query API: lists with filters and orders, instances, health, errors, retention.

use crate::common;

use common::*;
use tokenscope::fixtures;

#[tokio::test]
async fn lists_filter_and_order() {
    let app = spawn_app().await;
    let mut grpc = app.grpc().await;
    let mut a = fixtures::resource("gpu-a");
    a.engine = tokenscope_core::model::EngineKind::Sglang;
    let b = fixtures::resource("gpu-b");
    let reqs_a: Vec<_> = (0..5)
        .map(|i| {
            fixtures::request(
                &format!("a{i}"),
                T0 + i * 1_000_000_000,
                10 + i as usize * 5,
                2,
                1,
                i as u64,
            )
        })
        .collect();
    let reqs_b: Vec<_> = (0..3)
        .map(|i| {
            fixtures::request(
                &format!("b{i}"),
                T0 + i * 1_000_000_000 + 500_000_000,
                8,
                2,
                1,
                100 + i as u64,
            )
        })
        .collect();
    grpc.export(export(&a, &reqs_a, &[])).await.unwrap();
    grpc.export(export(&b, &reqs_b, &[])).await.unwrap();

    let ids = |v: &serde_json::Value| -> Vec<String> {
        v["requests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["request_id"].as_str().unwrap().to_string())
            .collect()
    };
    let all = app.get_json("/api/v1/requests").await;
    assert_eq!(
        ids(&all),
        ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "a4"],
        "arrival order by default"
    );
    let first = &all["requests"][0];
    for key in [
        "request_id",
        "engine",
        "instance",
        "model",
        "arrival_ns",
        "ttft_ms",
        "tpot_ms",
        "e2e_ms",
        "queue_ms",
        "prompt_tokens",
        "output_tokens",
        "finish_reason",
    ] {
        assert!(first.get(key).is_some(), "summary has {key}");
    }
    assert_eq!(
        ids(&app.get_json("/api/v1/requests?instance=gpu-b").await),
        ["b0", "b1", "b2"]
    );
    assert_eq!(
        ids(&app.get_json("/api/v1/requests?engine=sglang&limit=2").await),
        ["a0", "a1"]
    );
    let window = format!(
        "/api/v1/requests?from={}&to={}",
        T0 + 1_000_000_000,
        T0 + 2_000_000_000
    );
    assert_eq!(ids(&app.get_json(&window).await), ["a1", "b1"]);
    assert_eq!(
        ids(&app.get_json("/api/v1/requests?order=recent&limit=1").await),
        ["a4"]
    );
    let by_ttft = app.get_json("/api/v1/requests?order=ttft_desc").await;
    let ttfts: Vec<f64> = by_ttft["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["ttft_ms"].as_f64().unwrap())
        .collect();
    assert!(ttfts.windows(2).all(|w| w[0] >= w[1]), "{ttfts:?}");
    let by_tpot = app.get_json("/api/v1/requests?order=tpot_desc").await;
    let tpots: Vec<f64> = by_tpot["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["tpot_ms"].as_f64().unwrap())
        .collect();
    assert!(tpots.windows(2).all(|w| w[0] >= w[1]), "{tpots:?}");

    let instances = app.get_json("/api/v1/instances").await;
    let list = instances["instances"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["instance"], "gpu-a");
    assert_eq!(list[0]["engine"], "sglang");
    assert_eq!(list[0]["first_seen_ns"], T0);
    assert_eq!(list[1]["role"], "colocated");
}

#[tokio::test]
async fn bad_parameters_and_unknown_ids_get_clear_errors() {
    let app = spawn_app().await;
    for (path, status, needle) in [
        ("/api/v1/requests?order=fastest", 400, "order=\"fastest\""),
        ("/api/v1/requests?limit=0", 400, "limit=0"),
        ("/api/v1/requests?from=yesterday", 400, "from=\"yesterday\""),
        ("/api/v1/requests/nope", 404, "no request \"nope\""),
    ] {
        let resp = app.get(path).await;
        assert_eq!(resp.status(), status, "{path}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert!(
            body["error"].as_str().unwrap().contains(needle),
            "{path}: {body}"
        );
    }
}

#[tokio::test]
async fn health_and_readiness() {
    let app = spawn_app().await;
    assert_eq!(app.get("/healthz").await.status(), 200);
    assert_eq!(app.get("/readyz").await.status(), 200);
}

#[test]
fn the_shell_page_renders() {
    // The explorer renders on the server: on stacks like the server's (`on_server_stacks`); a
    // debug build's render outgrows a test thread's 2 MiB.
    on_server_stacks(async {
        let app = spawn_app().await;
        let resp = app.get("/").await;
        assert_eq!(resp.status(), 200);
        let html = resp.text().await.unwrap();
        assert!(html.contains("<title>tokenscope</title>"), "{html}");
        assert!(
            html.contains("/pkg/tokenscope.js"),
            "hydration script is linked"
        );
    });
}

#[tokio::test]
async fn retention_drops_whole_partitions() {
    let app = spawn_app().await;
    let day = 86_400_000_000_000i64;
    let old = fixtures::request("old", T0 - 10 * day, 5, 1, 1, 1);
    let new = fixtures::request("new", T0, 5, 1, 1, 2);
    let its = fixtures::iterations_for(&old, 2, 0);
    app.grpc()
        .await
        .export(export(&fixtures::resource("gpu-0"), &[old, new], &its))
        .await
        .unwrap();
    let store = &app.running.store;
    // Nine days back: the old day goes, except its request keys, which are kept one day longer
    // for requests that run across the cut.
    let dropped = store.drop_partitions_before(T0 - 9 * day).await.unwrap();
    assert_eq!(
        dropped,
        [
            "requests_p20261120",
            "iteration_blocks_p20261120",
            "iteration_rollups_p20261120"
        ]
    );
    let dropped = store.drop_partitions_before(T0 - 5 * day).await.unwrap();
    assert_eq!(dropped, ["request_keys_p20261120"]);
    assert_eq!(app.get("/api/v1/requests/old").await.status(), 404);
    assert_eq!(app.get("/api/v1/requests/new").await.status(), 200);
    // The old day's steps are gone from the lane too: had its rollups outlived them, one pixel
    // could not hold their count and the lane would come back as buckets.
    let reply = app
        .get_json(&format!(
            "/api/v1/waterfall?instance=gpu-0&from={}&to={T0}&width_px=1",
            T0 - 11 * day
        ))
        .await;
    assert_eq!(
        reply["lane"],
        serde_json::json!({"lod": "steps", "steps": []}),
        "{reply}"
    );
}

#[tokio::test]
async fn a_server_with_retention_drops_old_days_by_itself_and_incidents_keep_their_evidence() {
    let first = spawn_app().await;
    let day = 86_400_000_000_000i64;
    let old = fixtures::request("old", T0 - 10 * day, 5, 1, 1, 1);
    let new = fixtures::request("new", T0, 5, 1, 1, 2);
    first
        .grpc()
        .await
        .export(export(&fixtures::resource("gpu-0"), &[old, new], &[]))
        .await
        .unwrap();
    let body = serde_json::json!({"title": "old", "instance": "gpu-0", "requests": ["old"]});
    let resp = first.post_json("/api/v1/incidents", body.to_string()).await;
    assert_eq!(resp.status(), 201);
    let slug = resp.json::<serde_json::Value>().await.unwrap()["slug"]
        .as_str()
        .unwrap()
        .to_string();

    // A second server on the database, keeping what is younger than five days before T0.
    let days = ((tokenscope::clock::now_ns() - T0) / day + 5) as u32;
    let app = spawn_on(first.database_url.clone(), |c| c.retention_days = days).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while app.get("/api/v1/requests/old").await.status() != 404 {
        assert!(
            std::time::Instant::now() < deadline,
            "retention did not run on its own"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(app.get("/api/v1/requests/new").await.status(), 200);
    let incident = app.get_json(&format!("/api/v1/incidents/{slug}")).await;
    assert_eq!(
        incident["snapshot"]["requests"][0]["detail"]["request_id"],
        "old"
    );
}

//! Findings as data: the worker stores each request's diagnosis once its neighbourhood has
//! settled; what the API then reads from the rows is what it computed when asked, and a
//! culprit exported late changes its victims' stored findings within a settle period.

use std::time::{Duration, Instant};

use crate::common;

use common::*;
use tokenscope::ingest::Sink;
use tokenscope::store::Store;
use tokenscope_sim::scenarios::{self, InstanceRun};

const SETTLE: Duration = Duration::from_millis(300);
const T_MIN: i64 = 0;

/// Waits until the worker has diagnosed everything queued.
async fn settled(store: &Store) {
    findings_settled(store, Duration::from_secs(180)).await;
}

/// Every request's diagnosis through the API (four at a time), and the window's listing.
async fn every_diagnosis(app: &TestApp) -> (Vec<serde_json::Value>, serde_json::Value) {
    let listed = app
        .get_json("/api/v1/requests?order=start&limit=10000")
        .await;
    let paths: Vec<String> = listed["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}/api/v1/requests/{}/diagnosis?instance={}",
                app.http,
                r["request_id"].as_str().unwrap(),
                r["instance"].as_str().unwrap()
            )
        })
        .collect();
    let mut tasks = tokio::task::JoinSet::new();
    for (k, part) in paths.chunks(paths.len().div_ceil(4).max(1)).enumerate() {
        let (client, part) = (app.client.clone(), part.to_vec());
        tasks.spawn(async move {
            let mut out = Vec::new();
            for url in part {
                let r = client.get(&url).send().await.unwrap();
                assert!(r.status().is_success(), "{url}: {}", r.status());
                out.push(r.json::<serde_json::Value>().await.unwrap());
            }
            (k, out)
        });
    }
    let mut parts = tasks.join_all().await;
    parts.sort_by_key(|p| p.0);
    let all = parts.into_iter().flat_map(|p| p.1).collect();
    (all, app.get_json("/api/v1/diagnosis?limit=5000").await)
}

#[tokio::test]
async fn stored_findings_are_the_diagnosis_computed_when_asked() {
    // A server without the worker reads the demo's diagnoses while nothing is stored…
    let app = spawn_app().await;
    tokenscope::demo::load(&Sink::of(app.running.store.clone(), false), false)
        .await
        .unwrap();
    let (computed, computed_list) = every_diagnosis(&app).await;
    assert!(computed.len() > 1000, "{} requests", computed.len());
    let degraded = computed
        .iter()
        .filter(|d| d["verdict"] == "degraded")
        .count();
    assert!(degraded >= 10, "{degraded} degraded");

    // …then a second server on the same database stores them, and the first reads the rows.
    let worker = spawn_on(app.database_url.clone(), |c| {
        c.findings_settle = Some(SETTLE)
    })
    .await;
    settled(&worker.running.store).await;
    let db = sqlx::PgPool::connect(&app.database_url).await.unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM diagnoses")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(
        rows as usize, degraded,
        "one row per request that is not healthy"
    );
    // Ingest marked most requests healthy whatever ran beside them, and the worker passed
    // those by; only speculation, judged against the other requests in the same steps, is read
    // all the same: the collapsed and the looping speculation met their SLOs, yet their
    // findings are stored.
    let alone: Vec<String> = sqlx::query_scalar(
        "SELECT r.request_id FROM requests r JOIN diagnoses d USING (instance_id, request_id, arrival_ns)
         WHERE r.healthy_alone ORDER BY 1",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    assert_eq!(alone, ["loop-victim", "spec-victim"]);
    let marked: i64 = sqlx::query_scalar("SELECT count(*) FROM requests WHERE healthy_alone")
        .fetch_one(&db)
        .await
        .unwrap();
    assert!(
        marked as usize > computed.len() / 2
            && marked as usize + degraded - alone.len() <= computed.len(),
        "{marked} of {} healthy alone",
        computed.len()
    );
    let (stored, stored_list) = every_diagnosis(&app).await;
    assert_eq!(stored, computed);
    assert_eq!(stored_list, computed_list);
    // The worker reads requests without their vocabulary texts and puts them in only for those
    // that are not healthy: the repetition loop's stored finding still quotes the looping span.
    let looped: Vec<&str> = stored
        .iter()
        .filter(|d| d["request_id"] == "loop-victim")
        .flat_map(|d| d["findings"].as_array().unwrap())
        .filter(|f| f["cause"] == "speculation_high_acceptance")
        .map(|f| f["summary"].as_str().unwrap())
        .collect();
    assert!(
        looped
            .iter()
            .any(|s| s.contains("-token span (") && !s.contains("span ()")),
        "{looped:?}"
    );

    // Compare counts causes over the whole windows from the rows: here as the listing has them.
    let all = "a_from=0&a_to=4000000000000000000&b_from=0&b_to=4000000000000000000";
    let side = &app.get_json(&format!("/api/v1/compare?{all}")).await["a"];
    assert_eq!(side["diagnosed"], side["requests"]);
    let mut want: std::collections::BTreeMap<String, u64> = Default::default();
    for d in stored_list["diagnoses"].as_array().unwrap() {
        let causes: std::collections::BTreeSet<&str> = d["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["cause"].as_str().unwrap())
            .collect();
        for c in causes {
            *want.entry(c.to_string()).or_default() += 1;
        }
    }
    let got: std::collections::BTreeMap<String, u64> = side["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["cause"].as_str().unwrap().to_string(),
                c["requests"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, want);

    // And they are read from the rows: a row changed behind the API's back shows.
    let victim = stored_list["diagnoses"][0]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    sqlx::query(
        "UPDATE diagnoses SET diagnosis = jsonb_set(diagnosis, '{findings,0,summary}', '\"from the row\"')
         WHERE request_id = $1",
    )
    .bind(&victim)
    .execute(&db)
    .await
    .unwrap();
    let listed = app.get_json("/api/v1/diagnosis?limit=5000").await;
    assert_eq!(
        listed["diagnoses"][0]["findings"][0]["summary"],
        "from the row"
    );
    let one = app
        .get_json(&format!("/api/v1/requests/{victim}/diagnosis"))
        .await;
    assert_eq!(one["findings"][0]["summary"], "from the row", "{one}");
}

/// The prefill-interrupts-decode scenario as request spans only (no steps, so culprits come
/// from the other requests' rows alone), split into the victim's instance without the
/// culprits, and the culprits.
fn victim_then_culprits() -> (Vec<InstanceRun>, Vec<InstanceRun>, Vec<String>) {
    // Two minutes ago, so that /metrics counts it among the last hour's findings.
    let t0 = tokenscope::clock::now_ns() - 120_000_000_000;
    let s = scenarios::build("prefill-interrupts-decode", t0, 1).unwrap();
    let culprits = s.truth.culprits.clone();
    let mut first = Vec::new();
    let mut late = Vec::new();
    for mut run in s.runs {
        run.output.iterations.clear();
        for r in &mut run.output.requests {
            for t in &mut r.tokens {
                t.iteration = None;
            }
        }
        let (theirs, rest): (Vec<_>, Vec<_>) = run
            .output
            .requests
            .into_iter()
            .partition(|r| culprits.contains(&r.request_id));
        late.push(InstanceRun {
            resource: run.resource.clone(),
            output: tokenscope_sim::engine::Output {
                requests: theirs,
                iterations: Vec::new(),
                evictions: Vec::new(),
            },
        });
        run.output.requests = rest;
        first.push(run);
    }
    (first, late, culprits)
}

#[tokio::test]
async fn a_late_culprit_changes_its_victims_stored_findings_within_a_settle_period() {
    let app = spawn_app_with(|c| c.findings_settle = Some(SETTLE)).await;
    let (first, late, culprits) = victim_then_culprits();
    let store = &app.running.store;
    let victim = "/api/v1/requests/pid-victim/diagnosis?instance=sim-pid";

    app.send_sim(&first).await;
    settled(store).await;
    let before = app.get_json(victim).await;
    assert_eq!(before["verdict"], "degraded", "{before}");
    assert!(
        before["findings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["culprits"].as_array().unwrap().is_empty()),
        "nothing to blame yet: {before}"
    );

    let sent = Instant::now();
    app.send_sim(&late).await;
    // Until the stretch settles the victim's row is stale: the API computes it instead.
    let meanwhile = app.get_json(victim).await;
    let named = |d: &serde_json::Value| -> Vec<String> {
        let mut c: Vec<String> = d["findings"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|f| f["culprits"].as_array().unwrap().clone())
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        c.sort();
        c
    };
    let mut want = culprits.clone();
    want.sort();
    assert_eq!(named(&meanwhile), want);
    settled(store).await;
    let waited = sent.elapsed();
    let row: serde_json::Value =
        sqlx::query_scalar("SELECT diagnosis FROM diagnoses WHERE request_id = 'pid-victim'")
            .fetch_one(&sqlx::PgPool::connect(&app.database_url).await.unwrap())
            .await
            .unwrap();
    assert_eq!(named(&row), want, "the stored row names them now");
    assert_eq!(app.get_json(victim).await, row);
    assert!(
        waited < SETTLE * 2 + Duration::from_secs(2),
        "took {waited:?} with a {SETTLE:?} settle time"
    );

    // Which requests did a culprit hurt? The reverse of the victim's culprits.
    for culprit in &culprits {
        let hurt = app
            .get_json(&format!(
                "/api/v1/requests/{culprit}/victims?instance=sim-pid"
            ))
            .await;
        let v = hurt["victims"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["request_id"] == "pid-victim")
            .unwrap_or_else(|| panic!("{culprit} hurt pid-victim: {hurt}"));
        assert_eq!(v["causes"][0], "prefill_interrupted_decode");
        assert!(v["held_ms"].as_f64().unwrap() > 100.0, "{v}");
    }
    let none = app
        .get_json("/api/v1/requests/pid-victim/victims?instance=sim-pid")
        .await;
    assert_eq!(
        none["victims"],
        serde_json::json!([]),
        "the victim hurt no one"
    );

    // The explorer's list shows each request's stored causes and filters by them.
    let range = format!("from={}&to={}", T_MIN, i64::MAX);
    let all = app
        .get_json(&format!(
            "/api/v1/requests?instance=sim-pid&limit=100&{range}"
        ))
        .await;
    let rows = all["requests"].as_array().unwrap();
    assert!(
        rows.iter().all(|r| r["causes"].is_array()),
        "all settled: {all}"
    );
    let victim_row = rows
        .iter()
        .find(|r| r["request_id"] == "pid-victim")
        .unwrap();
    assert_eq!(victim_row["causes"][0], "prefill_interrupted_decode");
    let some = app
        .get_json(&format!(
            "/api/v1/requests?instance=sim-pid&cause=prefill_interrupted_decode&limit=100&{range}"
        ))
        .await;
    let some = some["requests"].as_array().unwrap();
    assert!(some.len() < rows.len() && some.iter().any(|r| r["request_id"] == "pid-victim"));
    assert!(some.iter().all(|r| {
        r["causes"]
            .as_array()
            .unwrap()
            .contains(&"prefill_interrupted_decode".into())
    }));
    // Paged: in arrival order, counted (from the findings alone, and through the requests when
    // a slice needs them), the pages together the whole set.
    let with_cause: Vec<&str> = rows
        .iter()
        .filter(|r| {
            r["causes"]
                .as_array()
                .unwrap()
                .contains(&"prefill_interrupted_decode".into())
        })
        .map(|r| r["request_id"].as_str().unwrap())
        .collect();
    assert!(with_cause.len() >= 3, "{with_cause:?}");
    let sliced = format!(
        "&model={}&prompt_min=0",
        urlencode(victim_row["model"].as_str().unwrap())
    );
    for extra in ["", sliced.as_str()] {
        let mut paged = Vec::new();
        for offset in (0..with_cause.len()).step_by(2) {
            let page = app
                .get_json(&format!(
                    "/api/v1/requests?instance=sim-pid&cause=prefill_interrupted_decode\
                     &limit=2&offset={offset}&{range}{extra}"
                ))
                .await;
            assert_eq!(page["total"], with_cause.len(), "{extra}: {page}");
            assert_ne!(page["total_estimated"], true, "{extra}: {page}");
            paged.extend(
                page["requests"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["request_id"].as_str().unwrap().to_string()),
            );
        }
        assert_eq!(paged, with_cause, "{extra}");
    }
    let wrong = app.get("/api/v1/requests?cause=slow").await;
    assert_eq!(wrong.status(), 400);
    let why = wrong.text().await.unwrap();
    assert!(
        why.contains("slow") && why.contains("is not one of prefill_interrupted_decode"),
        "{why}"
    );

    let metrics = app.get_text("/metrics").await;
    for line in [
        "tokenscope_findings_queued_stretches 0",
        "tokenscope_findings_lag_seconds 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    // The victim and the culprits, whose decodes interrupted one another's.
    let line =
        "tokenscope_findings_requests{instance=\"sim-pid\",cause=\"prefill_interrupted_decode\"} ";
    let n: u32 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(line))
        .unwrap_or_else(|| panic!("{line} in\n{metrics}"))
        .parse()
        .unwrap();
    assert!(n >= 1, "{n}");
}

#[tokio::test]
async fn the_list_says_up_to_when_findings_are_known_once_the_worker_is_behind() {
    // No worker: everything sent waits in the queue.
    let app = spawn_app().await;
    let s = scenarios::build("prefill-interrupts-decode", T0, 1).unwrap();
    app.send_sim(&s.runs).await;
    let list = "/api/v1/requests?instance=sim-pid&order=start&limit=1000";
    let fresh = app.get_json(list).await;
    assert!(
        fresh["requests"][0].get("causes").is_none(),
        "pending: {}",
        fresh["requests"][0]
    );
    assert!(
        fresh.get("findings_behind").is_none(),
        "within the settle time is not behind"
    );

    // The same data, waiting two minutes: the worker is behind, and the list says up to when.
    let db = sqlx::PgPool::connect(&app.database_url).await.unwrap();
    sqlx::query("UPDATE diagnosis_queue SET enqueued_at = now() - interval '2 minutes'")
        .execute(&db)
        .await
        .unwrap();
    let late = app.get_json(list).await;
    let behind = &late["findings_behind"];
    assert!(behind["waited_s"].as_f64().unwrap() >= 119.0, "{behind}");
    // Up to the start of the oldest stretch waiting: no later than the first pending request.
    let first = late["requests"][0]["arrival_ns"].as_i64().unwrap();
    let up_to = behind["up_to_ns"].as_i64().unwrap();
    let queued: i64 = sqlx::query_scalar("SELECT min(from_ns) FROM diagnosis_queue")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(up_to, queued.min(first), "{behind}");
    assert!(up_to <= first);
}

#[tokio::test]
async fn a_stretch_settled_between_the_listings_two_reads_is_listed_once() {
    // No worker: the test settles the queue itself, between the queue's read and the rows'.
    let app = spawn_app().await;
    let s = scenarios::build("prefill-interrupts-decode", T0, 1).unwrap();
    app.send_sim(&s.runs).await;
    let store = &app.running.store;
    let th = tokenscope_core::analysis::diagnosis::Thresholds::default();
    let f = tokenscope::store::RequestFilter::default();
    let window = (i64::MIN, i64::MAX);
    use tokenscope::query::diagnosis::{settled, unsettled};

    let fresh = unsettled(store, &f, None, &th, 1000)
        .await
        .unwrap()
        .expect("within the budget");
    assert!(!fresh.stretches.is_empty(), "everything sent is queued");
    tokenscope::query::findings::drain(store, &Default::default(), Duration::ZERO)
        .await
        .unwrap()
        .expect("the queue was due");
    assert_eq!(store.diagnosis_backlog().await.unwrap().1, 0);
    let rows = settled(store, None, window, 1000, &fresh.stretches)
        .await
        .unwrap();

    let mut listed: Vec<String> = fresh
        .degraded
        .iter()
        .chain(&rows)
        .map(|x| x.2.request_id.clone())
        .collect();
    listed.sort();
    let mut once = listed.clone();
    once.dedup();
    assert_eq!(listed, once, "each request once");
    // What the engine did: the victim waited on the culprits' prefills.
    for id in s.truth.victims.iter() {
        assert!(listed.contains(id), "{id} in {listed:?}");
    }
    // The same requests a quiet read lists, where the queue no longer hides the rows.
    let quiet = app.get_json("/api/v1/diagnosis?limit=1000").await;
    let mut want: Vec<String> = quiet["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["request_id"].as_str().unwrap().to_string())
        .collect();
    want.sort();
    assert_eq!(listed, want);
    // The rows of the stretches diagnosed first are there: naming them is what keeps them out.
    let all_rows = settled(store, None, window, 1000, &[]).await.unwrap();
    assert_eq!(all_rows.len(), want.len());
    assert!(!fresh.degraded.is_empty());
}

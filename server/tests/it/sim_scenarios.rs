//! Every simulator scenario, sent through ingest over gRPC, shows its symptom in the query API,
//! and its healthy control does not.

use crate::common;

use common::*;
use tokenscope_sim as sim;

fn stage_ms(d: &serde_json::Value, kind: &str) -> Vec<f64> {
    d["stages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == kind)
        .map(|s| (s["end_ns"].as_i64().unwrap() - s["start_ns"].as_i64().unwrap()) as f64 / 1e6)
        .collect()
}

#[tokio::test]
async fn scenarios_show_their_symptoms_through_the_query_api() {
    let app = spawn_app().await;
    let (runs, truths) = sim::all_scenarios(T0, 60_000_000_000, 1);
    let sent = app.send_sim(&runs).await;
    assert_eq!(sent.rejected, 0);
    assert_eq!(truths.len(), sim::scenarios::NAMES.len());
    let get = |id: &str, instance: &str| {
        let path = format!("/api/v1/requests/{id}?instance={instance}");
        let app = &app;
        async move { app.get_json(&path).await }
    };

    // prefill-interrupts-decode
    let victim = get("pid-victim", "sim-pid").await;
    assert!(
        victim["tpot_ms"].as_f64().unwrap() > 50.0,
        "victim TPOT {}",
        victim["tpot_ms"]
    );
    let control = get("pid-control", "sim-pid-control").await;
    assert!(
        control["tpot_ms"].as_f64().unwrap() < 50.0,
        "control TPOT {}",
        control["tpot_ms"]
    );
    // The stalled token names whose prefills ran while it waited; the control's tokens, though
    // chunked prefills ran beside them, never waited past the SLO.
    let waited_on = |d: &serde_json::Value| -> Vec<(f64, usize)> {
        d["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| {
                let by = t.get("prefilled_meanwhile")?.as_array()?.len();
                Some((t["latency_ms"].as_f64()?, by))
            })
            .collect()
    };
    let stalled = waited_on(&victim);
    assert!(
        stalled.iter().any(|&(ms, by)| ms > 1000.0 && by == 6),
        "victim tokens waiting on prefills: {stalled:?}"
    );
    assert!(
        waited_on(&control).iter().all(|&(ms, _)| ms < 50.0),
        "control: {:?}",
        waited_on(&control)
    );

    // long-prompt-monopolizes: five consecutive prefill iterations, then a > 2 s first-token wait
    let long = get("lpm-long", "sim-lpm").await;
    let iterations: Vec<i64> = stages_of(&long, "prefill")
        .iter()
        .map(|s| s["iteration"].as_i64().unwrap())
        .collect();
    assert_eq!(iterations.len(), 5);
    assert!(
        iterations.windows(2).all(|w| w[1] == w[0] + 1),
        "{iterations:?}"
    );
    let short = get("lpm-short", "sim-lpm").await;
    assert!(
        short["ttft_ms"].as_f64().unwrap() > 2000.0,
        "short TTFT {}",
        short["ttft_ms"]
    );
    let control = get("lpm-control", "sim-lpm-control").await;
    assert!(control["ttft_ms"].as_f64().unwrap() < 500.0);

    // low-probability-eos
    let eos = get("eos-victim", "sim-eos").await;
    let last = eos["tokens"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["special"], "eos");
    assert_eq!(last["rank"], 2);
    assert!((last["logprob"].as_f64().unwrap().exp() - 0.1).abs() < 0.005);
    let control = get("eos-control", "sim-eos").await;
    assert_eq!(
        control["tokens"].as_array().unwrap().last().unwrap()["rank"],
        1
    );

    // kv-preemption
    let kv = truths
        .iter()
        .find(|t| t.scenario == "kv-preemption")
        .unwrap();
    assert!(!kv.victims.is_empty());
    for id in &kv.victims {
        let d = get(id, "sim-kv").await;
        assert!(d["preemptions"].as_u64().unwrap() >= 1, "{id}");
        assert!(!stage_ms(&d, "preempted").is_empty(), "{id}");
    }
    for id in &kv.controls {
        assert_eq!(get(id, "sim-kv-control").await["preemptions"], 0);
    }

    // pd-kv-transfer-stall
    let slow = get("pd-slow", "sim-pd-decode").await;
    assert!(stage_ms(&slow, "kv_transfer")[0] >= 2500.0);
    assert!(slow["ttft_ms"].as_f64().unwrap() > 2500.0);
    assert_eq!(slow["role"], "decode");
    // Without an instance: one request, prefill on one instance and decode on the other.
    let joined = app.get_json("/api/v1/requests/pd-slow").await;
    assert_eq!(
        joined["instance"], "sim-pd-prefill,sim-pd-decode",
        "{joined}"
    );
    assert_eq!(joined["parts"].as_array().map(Vec::len), Some(2));
    assert!(stage_ms(&joined, "prefill").iter().sum::<f64>() > 0.0);
    assert!(stage_ms(&joined, "kv_transfer")[0] >= 2500.0);
    assert_eq!(joined["tokens"], slow["tokens"]);
    let fast = get("pd-fast", "sim-pd-decode").await;
    assert!(
        fast["ttft_ms"].as_f64().unwrap() < 1000.0,
        "fast TTFT {}",
        fast["ttft_ms"]
    );

    // speculation-collapses: the victim's tokens are nearly all the target model's own; its
    // control's are mostly accepted drafts.
    let drafted = |d: &serde_json::Value| {
        let t = d["tokens"].as_array().unwrap();
        t.iter().filter(|t| t["accepted_draft"] == true).count() as f64 / t.len() as f64
    };
    let spec = get("spec-victim", "sim-spec").await;
    let spec_control = get("spec-control", "sim-spec-control").await;
    assert!(drafted(&spec) < 0.15, "victim {}", drafted(&spec));
    assert!(
        drafted(&spec_control) > 0.4,
        "control {}",
        drafted(&spec_control)
    );

    // repetition-loop: from token 90 on, the answer is flagged as repeating a span.
    let repeated = |d: &serde_json::Value| -> Vec<u64> {
        d["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| {
                t["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|f| f == "repeated"))
            })
            .map(|t| t["index"].as_u64().unwrap())
            .collect()
    };
    let looped = repeated(&get("loop-victim", "sim-loop").await);
    let start = sim::scenarios::LOOP_START as u64;
    assert_eq!(looped, (start..600).collect::<Vec<u64>>());
    assert!(repeated(&get("loop-control", "sim-loop-control").await).is_empty());
}

// Multi-threaded: the test waits for the child process while the server must keep serving it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_command_sends_a_scenario_and_writes_its_truth() {
    let app = spawn_app().await;
    let truth = std::env::temp_dir().join(format!("ts-truth-{}.json", std::process::id()));
    let grpc = format!("http://{}", app.running.grpc_addr);
    let args = [
        "sim",
        "--scenario",
        "low-probability-eos",
        "--seed",
        "3",
        "--send",
        &grpc,
        "--truth",
    ];
    run_cli(
        args.iter()
            .map(std::ffi::OsStr::new)
            .chain([truth.as_os_str()]),
        None,
    );
    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&truth).unwrap()).unwrap();
    assert_eq!(truth[0]["cause"], "low_probability_eos");
    assert_eq!(truth[0]["victims"][0], "eos-victim");
    let d = app.get_json("/api/v1/requests/eos-victim").await;
    assert_eq!(d["tokens"].as_array().unwrap().last().unwrap()["rank"], 2);
}

#[tokio::test]
async fn waterfall_has_a_track_per_request_and_a_bounded_iteration_lane() {
    let app = spawn_app().await;
    let s = sim::scenarios::build("prefill-interrupts-decode", T0, 1).unwrap();
    app.send_sim(&s.runs).await;
    let steps = s.runs[0].output.iterations.len();
    let (from, to) = (T0, T0 + 20_000_000_000);

    let wide = app
        .get_json(&format!(
            "/api/v1/waterfall?instance=sim-pid&from={from}&to={to}&width_px=5000"
        ))
        .await;
    assert_eq!(wide["lane"]["lod"], "steps");
    assert_eq!(
        wide["lane"]["steps"].as_array().unwrap().len(),
        steps,
        "every step fits 5,000 px"
    );
    let tracks = wide["tracks"].as_array().unwrap();
    assert_eq!(tracks.len(), 7);
    assert_eq!(wide["rows"], 7);
    let victim = tracks
        .iter()
        .find(|t| t["request_id"] == "pid-victim")
        .unwrap();
    let kinds = stage_kinds(victim, "segments");
    assert!(
        kinds.iter().any(|k| k == "prefill") && kinds.iter().any(|k| k == "decode"),
        "{kinds:?}"
    );

    let narrow = app
        .get_json(&format!(
            "/api/v1/waterfall?instance=sim-pid&from={from}&to={to}&width_px=100&compact=true"
        ))
        .await;
    assert_eq!(narrow["lane"]["lod"], "buckets");
    let buckets = narrow["lane"]["buckets"].as_array().unwrap();
    assert!(buckets.len() <= 100, "{} buckets", buckets.len());
    let total: u64 = buckets.iter().map(|b| b["steps"].as_u64().unwrap()).sum();
    assert_eq!(total as usize, steps, "buckets account for every step");
    // At 200 ms a pixel short requests are drawn from their phase times, long ones in full;
    // either way every track keeps at least one segment, none narrower than a pixel.
    for t in narrow["tracks"].as_array().unwrap() {
        let segs = t["segments"].as_array().unwrap();
        assert!(!segs.is_empty(), "{t}");
        if segs.len() > 1 {
            assert!(
                segs.iter().all(|s| s["end_ns"].as_i64().unwrap()
                    - s["start_ns"].as_i64().unwrap()
                    >= 200_000_000),
                "{t}"
            );
        }
    }
    // Rows are virtualized: a viewport's worth of tracks, with the total for the scrollbar.
    let page = app
        .get_json(&format!(
            "/api/v1/waterfall?instance=sim-pid&from={from}&to={to}&first_row=4&rows=3"
        ))
        .await;
    assert_eq!(page["rows"], 7);
    let rows: Vec<u64> = page["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["row"].as_u64().unwrap())
        .collect();
    assert_eq!(rows, [4, 5, 6]);
    assert!(
        page["tracks"][0]["segments"]
            .as_array()
            .is_some_and(|s| !s.is_empty())
    );
    // Every request overlaps the victim here, so compact mode cannot share rows…
    assert_eq!(narrow["rows"], 7);
    // …but requests that follow one another share one.
    let seq: Vec<_> = (0..3)
        .map(|k| {
            tokenscope::fixtures::request(
                &format!("seq-{k}"),
                T0 + k * 10_000_000_000,
                5,
                1,
                1,
                k as u64,
            )
        })
        .collect();
    app.grpc()
        .await
        .export(export(
            &tokenscope::fixtures::resource("gpu-seq"),
            &seq,
            &[],
        ))
        .await
        .unwrap();
    let packed = app
        .get_json(&format!(
            "/api/v1/waterfall?instance=gpu-seq&from={from}&to={}&compact=1",
            T0 + 30_000_000_000
        ))
        .await;
    assert_eq!(packed["rows"], 1);
    assert_eq!(packed["tracks"].as_array().unwrap().len(), 3);
    assert_eq!(
        app.get("/api/v1/waterfall?instance=nope").await.status(),
        404
    );
    assert_eq!(app.get("/api/v1/waterfall").await.status(), 400);
}

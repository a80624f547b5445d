//! Diagnosis on the simulator's scenarios: the scenario's cause and exactly its culprits for the
//! ground truth's victims, from native iteration records, from timing alone, and from vLLM's
//! request spans alone; healthy controls and busy background traffic come out healthy.

use crate::common;

use common::vllm::{vllm_export, vllm_export_serving};
use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use tokenscope_core::analysis::metrics::request_metrics;
use tokenscope_core::model::{Nanos, RequestTrace};
use tokenscope_sim::{
    self as sim,
    scenarios::{InstanceRun, Truth},
};

async fn load(app: &TestApp, with_iterations: bool) -> Vec<Truth> {
    let (mut runs, truths) = sim::all_scenarios(T0, 60_000_000_000, 1);
    if !with_iterations {
        // The OTLP-only form: request spans with stage times, no iteration records.
        for run in &mut runs {
            run.output.iterations.clear();
            for r in &mut run.output.requests {
                for t in &mut r.tokens {
                    t.iteration = None;
                }
            }
        }
    }
    let sent = app.send_sim(&runs).await;
    assert_eq!(sent.rejected, 0);
    truths
}

async fn diagnosis(app: &TestApp, id: &str, instance: &str) -> serde_json::Value {
    app.get_json(&format!(
        "/api/v1/requests/{id}/diagnosis?instance={instance}"
    ))
    .await
}

fn finding<'a>(d: &'a serde_json::Value, cause: &str) -> Option<&'a serde_json::Value> {
    d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["cause"] == cause)
}

fn culprits(f: &serde_json::Value) -> Vec<String> {
    let mut c: Vec<String> = f["culprits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    c.sort();
    c
}

async fn check(app: &TestApp, truths: &[Truth], timing_only: bool) {
    for t in truths {
        // Causes read from what the model said, or from the steps' drafts, need more than timing.
        let timing = !matches!(
            t.cause.as_str(),
            "low_probability_eos" | "speculation_low_acceptance" | "speculation_high_acceptance"
        );
        if timing_only && !timing {
            continue;
        }
        for victim in &t.victims {
            let d = diagnosis(app, victim, &t.instance).await;
            assert_eq!(d["verdict"], "degraded", "{}: {victim}: {d}", t.scenario);
            let f = finding(&d, &t.cause)
                .unwrap_or_else(|| panic!("{}: {victim} lacks {}: {d}", t.scenario, t.cause));
            // A victim's own culprits (whom the engine preempted it for) are on its record, as
            // the engine said them: not inferred. The others are weighed from what overlapped.
            let own = t.culprits_of.get(victim);
            let mut want = own.unwrap_or(&t.culprits).clone();
            want.sort();
            assert_eq!(culprits(f), want, "{}: {victim}", t.scenario);
            assert!(!f["summary"].as_str().unwrap().is_empty());
            if timing_only && !want.is_empty() && own.is_none() {
                assert_eq!(
                    f["inferred"], true,
                    "{}: attributed without iteration records",
                    t.scenario
                );
            }
        }
        for control in &t.controls {
            let d = diagnosis(app, control, &t.control_instance).await;
            assert_eq!(
                d["verdict"], "healthy",
                "{} control {control}: {d}",
                t.scenario
            );
        }
    }
}

#[tokio::test]
async fn scenarios_from_native_iteration_records() {
    let app = spawn_app().await;
    let truths = load(&app, true).await;
    check(&app, &truths, false).await;

    let d = diagnosis(&app, "pid-victim", "sim-pid").await;
    let f = finding(&d, "prefill_interrupted_decode").unwrap();
    assert_eq!(f["inferred"], false);
    let summary = f["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("TPOT ")
            && summary.contains("> 50 ms SLO")
            && summary.contains("168,000 prompt tokens"),
        "{summary}"
    );
    let lpm = diagnosis(&app, "lpm-short", "sim-lpm").await;
    let summary = finding(&lpm, "prefill_monopolized").unwrap()["summary"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        summary.contains(
            "lpm-long's 96,000-token prefill held the engine for 5 consecutive iterations"
        ),
        "{summary}"
    );

    // Thresholds are per query: with a 1 s TPOT SLO the mean is fine, but the 7.9 s gap is still
    // a stall (a warning); with a 10 s stall threshold too, nothing is found.
    let relaxed = app
        .get_json("/api/v1/requests/pid-victim/diagnosis?instance=sim-pid&tpot_ms=1000")
        .await;
    let stall = finding(&relaxed, "prefill_interrupted_decode").unwrap();
    assert_eq!(stall["severity"], "warning");
    assert_eq!(culprits(stall).len(), 6);
    let relaxed = app
        .get_json(
            "/api/v1/requests/pid-victim/diagnosis?instance=sim-pid&tpot_ms=1000&stall_ms=10000",
        )
        .await;
    assert!(finding(&relaxed, "prefill_interrupted_decode").is_none());
    assert_eq!(
        app.get("/api/v1/requests/pid-victim/diagnosis?tpot_ms=-3")
            .await
            .status(),
        400
    );

    // The window listing: degraded requests of an instance, worst first.
    let list = app.get_json("/api/v1/diagnosis?instance=sim-pid").await;
    let ids: Vec<&str> = list["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["request_id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"pid-victim"), "{ids:?}");
    // The prompts queued behind one another are degraded too (their first tokens waited).
    assert!(ids.iter().all(|id| id.starts_with("pid-")), "{ids:?}");
    let healthy = app.get_json("/api/v1/diagnosis?instance=sim-eos").await;
    let ids: Vec<&str> = healthy["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["eos-victim"]);
}

#[tokio::test]
async fn timing_causes_from_request_spans_alone() {
    let app = spawn_app().await;
    let truths = load(&app, false).await;
    check(&app, &truths, true).await;
}

#[tokio::test]
async fn the_window_listing_agrees_with_each_request_s_own_diagnosis() {
    let app = spawn_app().await;
    load(&app, true).await;
    // Two busy instances interleaved in time, so the listing pages (256 requests at a time)
    // through requests of both and of the scenarios.
    let profile = sim::cost::profile("llama-8b-h100").unwrap();
    let mut rng = tokenscope::fixtures::Rng::new(5);
    let runs: Vec<_> = ["busy-a", "busy-b"]
        .into_iter()
        .map(|name| {
            let reqs = sim::load::poisson(name, T0, 10.0, 14.0, false, &mut rng);
            sim::traffic(name, profile, reqs, 5)
        })
        .collect();
    app.send_sim(&runs).await;

    let all = app
        .get_json("/api/v1/requests?order=start&limit=10000")
        .await;
    let all = all["requests"].as_array().unwrap();
    assert!(all.len() > 300, "{} requests", all.len());
    let mut expected = Vec::new();
    for r in all {
        let (id, instance) = (
            r["request_id"].as_str().unwrap(),
            r["instance"].as_str().unwrap(),
        );
        let d = diagnosis(&app, id, instance).await;
        if d["verdict"] == "degraded" {
            expected.push(d);
        }
    }
    let listed = app.get_json("/api/v1/diagnosis?limit=5000").await;
    let mut listed = listed["diagnoses"].as_array().unwrap().clone();
    assert!(listed.len() > 10, "{} degraded", listed.len());
    let key = |d: &serde_json::Value| d["request_id"].as_str().unwrap().to_string();
    expected.sort_by_key(key);
    listed.sort_by_key(key);
    assert_eq!(listed, expected);
}

/// Busy Azure-replay traffic on several instances (two minutes of the conversation trace each,
/// offset so they differ).
fn busy(names: &[&str]) -> Vec<InstanceRun> {
    let profile = sim::cost::profile("llama-8b-h100").unwrap();
    names
        .iter()
        .enumerate()
        .map(|(k, name)| {
            let window = sim::load::Window {
                from_s: 60.0 * k as f64,
                length_s: 120.0,
            };
            let reqs = sim::load::azure(name, sim::load::AZURE_CONV_5MIN, &window, T0).unwrap();
            sim::traffic(name, profile, reqs, 11 + k as u64)
        })
        .collect()
}

async fn send_vllm_spans(app: &TestApp, runs: &[InstanceRun]) {
    let mut client = TraceServiceClient::connect(format!("http://{}", app.running.grpc_addr))
        .await
        .unwrap();
    let reply = client.export(vllm_export(runs)).await.unwrap().into_inner();
    assert!(
        reply
            .partial_success
            .as_ref()
            .is_none_or(|p| p.rejected_spans == 0),
        "{reply:?}"
    );
}

fn longest_gap_ms(r: &RequestTrace) -> f64 {
    let t: Vec<Nanos> = r.tokens.iter().filter_map(|t| t.emitted_ns).collect();
    t.windows(2)
        .map(|w| (w[1] - w[0]) as f64 / 1e6)
        .fold(0.0, f64::max)
}

/// Timing causes some request of `runs` was diagnosed with though its numbers met every
/// threshold (TTFT and TPOT SLOs, no gap over the stall threshold, no preemption).
async fn false_findings(app: &TestApp, runs: &[InstanceRun], with_gaps: bool) -> Vec<String> {
    let mut wrong = Vec::new();
    let timing = [
        "prefill_interrupted_decode",
        "prefill_monopolized",
        "queue_backlog",
        "kv_transfer_slow",
        "decode_stalled",
    ];
    for run in runs {
        let list = app
            .get_json(&format!(
                "/api/v1/diagnosis?instance={}&limit=5000",
                run.resource.instance_id
            ))
            .await;
        for d in list["diagnoses"].as_array().unwrap() {
            let id = d["request_id"].as_str().unwrap();
            let r = run
                .output
                .requests
                .iter()
                .find(|r| r.request_id == id)
                .unwrap();
            let m = request_metrics(r);
            let fine = m.ttft_ns.is_none_or(|t| t <= 2_000_000_000)
                && m.tpot_ns.is_none_or(|t| t <= 50_000_000)
                && (!with_gaps || longest_gap_ms(r) <= 1000.0)
                && r.preemptions.is_empty();
            for f in d["findings"].as_array().unwrap() {
                if fine && timing.contains(&f["cause"].as_str().unwrap()) {
                    wrong.push(format!("{id}: {}", f["summary"]));
                }
            }
        }
    }
    wrong
}

#[tokio::test]
async fn a_long_prompt_is_named_from_vllm_request_spans_alone() {
    let app = spawn_app().await;
    let lpm = sim::scenarios::build("long-prompt-monopolizes", T0 + 200_000_000_000, 1).unwrap();
    let mut runs = busy(&["vllm-a", "vllm-b", "vllm-c"]);
    runs.extend(lpm.runs);
    send_vllm_spans(&app, &runs).await;

    let d = diagnosis(&app, "lpm-short", "sim-lpm").await;
    let f = finding(&d, "prefill_monopolized").unwrap_or_else(|| panic!("{d}"));
    assert_eq!(culprits(f), ["lpm-long"]);
    assert_eq!(f["inferred"], true);
    let summary = f["summary"].as_str().unwrap();
    assert!(
        summary.contains("lpm-long's 96,000-token prefill ran"),
        "{summary}"
    );
    assert!(finding(&d, "queue_backlog").is_none(), "{d}");
    assert_eq!(
        diagnosis(&app, "lpm-control", "sim-lpm-control").await["verdict"],
        "healthy"
    );
    // Busy traffic: nothing is found in requests whose numbers met the SLOs.
    let wrong = false_findings(&app, &runs, false).await;
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// What a prompt costs depends on the model that served it: attention over a long context weighs
/// more against a small model's linear layers than a large one's. The same spans, named as
/// served by Llama-3.1-8B, by a model the diagnosis has no shape for, and by Llama-3.1-70B: a
/// short prompt's wait is shared with the 96k-token prompt beside it, and the long prompt's
/// part shrinks in that order (attention evens the linear layers at 31k, 40k and 54k tokens).
#[tokio::test]
async fn a_long_prompt_weighs_by_the_model_that_served_it() {
    let app = spawn_app().await;
    let lpm = sim::scenarios::build("long-prompt-monopolizes", T0, 1).unwrap();
    let run = lpm
        .runs
        .iter()
        .find(|r| r.resource.instance_id == "sim-lpm")
        .unwrap();
    let models = [
        ("m8b", "meta-llama/Llama-3.1-8B-Instruct"),
        ("unlisted", "acme/house-model"),
        ("m70b", "meta-llama/Llama-3.1-70B-Instruct"),
    ];
    let mut client = TraceServiceClient::connect(format!("http://{}", app.running.grpc_addr))
        .await
        .unwrap();
    let mut held = Vec::new();
    for (instance, model) in models {
        let mut run = run.clone();
        run.resource.instance_id = instance.into();
        client
            .export(vllm_export_serving(&[run], model))
            .await
            .unwrap();
        let d = diagnosis(&app, "lpm-short", instance).await;
        let f = finding(&d, "prefill_monopolized").unwrap_or_else(|| panic!("{model}: {d}"));
        assert_eq!(culprits(f), ["lpm-long"], "{model}");
        held.push(f["evidence"]["culprits"][0]["held_ms"].as_f64().unwrap());
    }
    assert!(
        held[0] > held[1] && held[1] > held[2],
        "held by lpm-long on 8B, unlisted, 70B: {held:?}"
    );
}

#[tokio::test]
async fn a_freeze_under_a_fine_tpot_is_found_and_busy_traffic_is_not() {
    let app = spawn_app().await;
    let frz = sim::scenarios::build("prefill-freezes-decode", T0 + 200_000_000_000, 1).unwrap();
    let mut runs = busy(&["busy-a", "busy-b", "busy-c"]);
    runs.extend(frz.runs);
    app.send_sim(&runs).await;

    let d = diagnosis(&app, "frz-victim", "sim-frz").await;
    let f = finding(&d, "prefill_interrupted_decode").unwrap_or_else(|| panic!("{d}"));
    assert_eq!(culprits(f), ["frz-prompt"]);
    assert_eq!(f["severity"], "warning", "below a TPOT breach");
    let summary = f["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("The stream stopped for 1.") && summary.contains("stall threshold"),
        "{summary}"
    );
    // The threshold is per query like the others.
    let relaxed = app
        .get_json("/api/v1/requests/frz-victim/diagnosis?instance=sim-frz&stall_ms=3000")
        .await;
    assert_eq!(relaxed["verdict"], "healthy", "{relaxed}");
    assert_eq!(
        app.get("/api/v1/requests/frz-victim/diagnosis?stall_ms=0")
            .await
            .status(),
        400
    );
    let wrong = false_findings(&app, &runs, true).await;
    assert!(wrong.is_empty(), "{wrong:#?}");
}

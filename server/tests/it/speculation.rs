//! Speculative decoding: a step that keeps several tokens of one request (its accepted drafts)
//! still gives each token that step's time and the request its first-token time, so TTFT, TPOT,
//! the token view, the lane's token counts and the diagnosis hold with speculation on; each
//! token says whether it was an accepted draft.

use crate::common;

use common::*;
use tokenscope_core::model::Role;
use tokenscope_sim::engine::{self, EngineConfig, SimRequest};
use tokenscope_sim::{Rng, cost, scenarios};

#[tokio::test]
async fn steps_that_keep_several_tokens_of_a_request_time_and_diagnose_it_right() {
    let app = spawn_app().await;
    let mut cfg = EngineConfig::new(cost::profile("llama-8b-h100").unwrap());
    cfg.draft_tokens = 4;
    cfg.draft_acceptance = 0.7;
    let reqs: Vec<SimRequest> = (0..6)
        .map(|k| SimRequest::new(format!("spec-{k}"), T0 + k * 100_000_000, 500, 120))
        .collect();
    let output = engine::run(&cfg, reqs, &mut Rng::new(4), 1);
    let made: usize = output.requests.iter().map(|r| r.tokens.len()).sum();
    assert_eq!(made, 6 * 120, "every answer complete, none longer");
    let steps = output.iterations.len();
    let run = scenarios::InstanceRun {
        resource: scenarios::resource("spec", Role::Colocated),
        output,
    };
    app.send_sim(std::slice::from_ref(&run)).await;

    let mut multi = 0;
    let (mut drafted, mut kept) = (0, 0);
    for r in &run.output.requests {
        let id = &r.request_id;
        let d = app
            .get_json(&format!("/api/v1/requests/{id}?instance=spec"))
            .await;
        let first = r.tokens[0].emitted_ns.unwrap();
        let last = r.tokens.last().unwrap().emitted_ns.unwrap();
        let ttft = d["ttft_ms"].as_f64().unwrap_or_else(|| panic!("{id}: {d}"));
        let tpot = d["tpot_ms"].as_f64().unwrap_or_else(|| panic!("{id}: {d}"));
        assert!(
            (ttft - (first - r.arrival_ns) as f64 / 1e6).abs() < 1e-6,
            "{id} TTFT {ttft}"
        );
        let want = (last - first) as f64 / 1e6 / 119.0;
        assert!((tpot - want).abs() < 1e-3, "{id} TPOT {tpot}, want {want}");
        // Tokens of one step share its time: the second of them waited no time of its own.
        let tokens = d["tokens"].as_array().unwrap();
        for w in tokens.windows(2) {
            if w[0]["iteration"] == w[1]["iteration"] && w[1]["index"].as_u64() > Some(0) {
                multi += 1;
                assert_eq!(w[1]["latency_ms"].as_f64(), Some(0.0), "{id}: {:?}", w[1]);
            }
        }
        // Each token says whether it was an accepted draft, as the engine's own steps kept them:
        // the request's entry in each step gives its drafts and how many it accepted.
        let entries: Vec<_> = run
            .output
            .iterations
            .iter()
            .flat_map(|it| &it.batch)
            .filter(|e| *e.request_id == **id && e.draft.is_some())
            .collect();
        let accepted: u32 = entries.iter().map(|e| e.draft.unwrap().accepted).sum();
        let flagged = |want: bool| {
            tokens
                .iter()
                .filter(|t| t["accepted_draft"].as_bool() == Some(want))
                .count()
        };
        assert_eq!(flagged(true), accepted as usize, "{id}");
        assert_eq!(
            flagged(false),
            entries.len(),
            "{id}: one target token a step"
        );
        assert!(
            tokens[1..]
                .iter()
                .all(|t| t["step_draft"]["proposed"].as_u64() == Some(4)),
            "{id}"
        );
        drafted += 4 * entries.len();
        kept += accepted as usize;
        let dx = app
            .get_json(&format!("/api/v1/requests/{id}/diagnosis?instance=spec"))
            .await;
        assert_eq!(dx["speed"], "healthy", "{id}: {dx}");
    }
    assert!(
        multi > 100,
        "speculation kept several tokens per step ({multi} pairs)"
    );
    assert!(steps < 6 * 120, "fewer steps ({steps}) than tokens");
    // Acceptance about as configured (70 % a draft, stopping at the first rejection).
    let rate = kept as f64 / drafted as f64;
    assert!((0.3..0.7).contains(&rate), "acceptance {rate:.2}");

    // The lane counts the accepted tokens, not one per request per step.
    let (from, to) = (T0 - 1_000_000_000, T0 + 60_000_000_000);
    let wf = app
        .get_json(&format!(
            "/api/v1/waterfall?instance=spec&from={from}&to={to}&width_px=20000"
        ))
        .await;
    let lane: u64 = wf["lane"]["steps"]
        .as_array()
        .expect("every step listed")
        .iter()
        .map(|s| s["decode_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(
        lane,
        6 * 119,
        "every token after the first came from a decode step"
    );

    // The lane's speculation, per step and summed into rollup cells for a wide window: what the
    // engine's steps verified and kept.
    let entries: u64 = run
        .output
        .iterations
        .iter()
        .flat_map(|it| &it.batch)
        .filter(|e| e.draft.is_some())
        .count() as u64;
    let want = serde_json::json!({
        "entries": entries, "proposed": drafted as u64, "accepted": kept as u64
    });
    let sum = |items: &serde_json::Value| {
        let mut got = [0u64; 3];
        for x in items.as_array().unwrap() {
            for (k, key) in ["entries", "proposed", "accepted"].iter().enumerate() {
                got[k] += x["drafts"][key].as_u64().unwrap_or(0);
            }
        }
        serde_json::json!({"entries": got[0], "proposed": got[1], "accepted": got[2]})
    };
    assert_eq!(sum(&wf["lane"]["steps"]), want);
    let first = &wf["lane"]["steps"][0];
    assert!(
        first.get("drafts").is_none(),
        "a prefill-only step has none: {first}"
    );
    let (from, to) = (T0 - 3_600_000_000_000, T0 + 3_600_000_000_000);
    let wide = app
        .get_json(&format!(
            "/api/v1/waterfall?instance=spec&from={from}&to={to}&width_px=50&rows=1"
        ))
        .await;
    assert_eq!(wide["lane"]["lod"], "buckets", "{}", wide["lane"]);
    assert_eq!(sum(&wide["lane"]["buckets"]), want);
}

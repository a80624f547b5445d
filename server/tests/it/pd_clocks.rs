//! A PD request whose decode instance's clock runs behind its prefill instance's: the joined
//! request is put on one clock (never a negative stage or a TTFT shorter than the prefill), the
//! page says so, and each part is still diagnosed against its own instance's steps.

use crate::common;

use common::*;
use tokenscope_sim as sim;

#[tokio::test]
async fn a_decode_clock_behind_the_prefill_clock_is_aligned_and_said() {
    let app = spawn_app().await;
    let s = sim::scenarios::build("pd-kv-transfer-stall", T0, 1).unwrap();
    let truth_ttft = {
        let parts: Vec<&tokenscope_core::model::RequestTrace> = s
            .runs
            .iter()
            .flat_map(|r| {
                r.output
                    .requests
                    .iter()
                    .filter(|q| q.request_id == "pd-slow")
            })
            .collect();
        let joined = tokenscope_core::analysis::pd::join(&parts);
        tokenscope_core::model::metrics::request_metrics(&joined)
            .ttft_ns
            .unwrap()
    };
    // The decode instance stamps everything 3 s early: its transfer would start before the prompt
    // was prefilled, its first token before the client even arrived.
    let mut runs = s.runs;
    let skew = 3_000_000_000;
    for r in &mut runs[1].output.requests {
        r.shift(-skew);
    }
    for it in &mut runs[1].output.iterations {
        it.start_ns -= skew;
        it.end_ns -= skew;
    }
    app.send_sim(&runs).await;

    let d = app.get_json("/api/v1/requests/pd-slow").await;
    let notes = d["notes"].as_array().expect("a note").clone();
    assert_eq!(notes.len(), 1, "{d}");
    let note = notes[0].as_str().unwrap();
    assert!(
        note.contains("sim-pd-decode's clock runs at least")
            && note.contains("behind sim-pd-prefill's"),
        "{note}"
    );
    // Moved by the least that makes the order possible: the transfer starts as the prefill ends,
    // so the TTFT is never shorter than the truth's (the true skew may be larger than provable).
    let ttft = d["ttft_ms"].as_f64().unwrap();
    assert!(
        ttft > 0.0 && ttft * 1e6 <= truth_ttft as f64 + 1.0,
        "TTFT {ttft} ms, truth {truth_ttft} ns"
    );
    for s in d["stages"].as_array().unwrap() {
        assert!(s["end_ns"].as_i64() >= s["start_ns"].as_i64(), "{s}");
    }
    // Each part against its own instance: the slow transfer is still the finding.
    let dx = app.get_json("/api/v1/requests/pd-slow/diagnosis").await;
    assert_eq!(dx["findings"][0]["cause"], "kv_transfer_slow", "{dx}");
}

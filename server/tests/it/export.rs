//! A request as files over HTTP: the token table as CSV and the timeline as Chrome trace JSON,
//! from a simulated incident and from an imported response with hostile text.

use crate::common;

use common::*;
use tokenscope_sim as sim;

#[tokio::test]
async fn a_stalled_request_exports_as_csv_and_chrome_trace() {
    let app = spawn_app().await;
    let s = sim::scenarios::build("prefill-interrupts-decode", T0, 1).unwrap();
    app.send_sim(&s.runs).await;

    let resp = app
        .get("/api/v1/requests/pid-victim/tokens.csv?instance=sim-pid")
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/csv; charset=utf-8");
    assert_eq!(
        resp.headers()["content-disposition"],
        "attachment; filename=\"pid-victim.tokens.csv\""
    );
    let csv = resp.text().await.unwrap();
    let lines: Vec<&str> = csv.split("\r\n").filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 101, "a header and one row per token");
    assert!(lines[0].starts_with("index,token_id,text,"));
    let stalled: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("pid-prefill-00"))
        .collect();
    assert_eq!(stalled.len(), 1, "one token waited while the prefills ran");
    assert!(stalled[0].contains("slo_breach"));

    let resp = app
        .get("/api/v1/requests/pid-victim/trace.json?instance=sim-pid")
        .await;
    assert_eq!(resp.status(), 200);
    let trace: serde_json::Value = resp.json().await.unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let of = |ph: &str| events.iter().filter(|e| e["ph"] == ph).count();
    assert_eq!(of("i"), 100, "one instant per token");
    assert!(
        events
            .iter()
            .any(|e| e["ph"] == "X" && e["name"] == "decode" && e["dur"].as_f64().unwrap() > 7e6),
        "the decode stage lasts over 7 s (in µs)"
    );
    assert!(events.iter().all(|e| e["ts"].as_f64().unwrap() >= 0.0));
    assert_eq!(trace["metadata"]["request_id"], "pid-victim");

    let resp = app.get("/api/v1/requests/nope/trace.json").await;
    assert_eq!(resp.status(), 404);
}

#[tokio::test]
async fn hostile_text_stays_text_in_exports() {
    let app = spawn_app().await;
    let body = serde_json::json!({
        "id": "evil\"id\r\nx", "created": 1796000000, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": {"content": [
            {"token": "=HYPERLINK(\"http://x\")", "logprob": -0.1, "top_logprobs": []},
            {"token": "a,b \"c\"", "logprob": -0.2, "top_logprobs": []},
        ]}}],
    });
    let resp = app
        .post_json("/api/v1/import?format=auto", body.to_string())
        .await;
    assert_eq!(resp.status(), 200);
    let reply: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(reply["format"], "openai");
    assert_eq!(reply["requests"][0]["request_id"], "evil\"id\r\nx");

    let resp = app
        .get("/api/v1/requests/evil%22id%0D%0Ax/tokens.csv")
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-disposition"],
        "attachment; filename=\"evil_id__x.tokens.csv\""
    );
    let csv = resp.text().await.unwrap();
    assert!(
        csv.contains("\r\n0,,\"'=HYPERLINK(\"\"http://x\"\")\",none,"),
        "{csv}"
    );
    assert!(csv.contains("\r\n1,,\"a,b \"\"c\"\"\",none,"), "{csv}");
}

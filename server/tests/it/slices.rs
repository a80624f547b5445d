//! Slices: the tenant, LoRA adapter and priority each request was served with filter every
//! request list, the latency chart, compare and the window's diagnosis listing; the counts come
//! from the simulated traffic as sent, not from the server.

use std::collections::HashMap;

use crate::common;

use common::*;
use tokenscope_sim as sim;

#[tokio::test]
async fn lists_charts_compare_and_diagnoses_filter_by_tenant_adapter_and_priority() {
    let app = spawn_app().await;
    let profile = sim::cost::profile("llama-8b-h100").unwrap();
    let mut rng = tokenscope::fixtures::Rng::new(4);
    let runs: Vec<_> = ["sl-a", "sl-b"]
        .into_iter()
        .map(|name| {
            let reqs = sim::load::poisson(name, T0, 10.0, 30.0, true, &mut rng);
            sim::traffic(name, profile, reqs, 4)
        })
        .collect();
    app.send_sim(&runs).await;
    // What was sent: each request's slice.
    let sent: Vec<_> = runs.iter().flat_map(|r| &r.output.requests).collect();
    let by_tenant = |t: &str| -> Vec<&str> {
        sent.iter()
            .filter(|r| r.served.tenant.as_deref() == Some(t))
            .map(|r| r.request_id.as_str())
            .collect()
    };
    let (acme, globex) = (by_tenant("acme"), by_tenant("globex"));
    let sql_lora = sent
        .iter()
        .filter(|r| r.served.lora_adapter.as_deref() == Some("sql-lora"))
        .count();
    let low = sent.iter().filter(|r| r.served.priority == Some(1)).count();
    assert!(acme.len() > 50 && !globex.is_empty() && sql_lora > 0 && low > 0);
    let window = format!("from={T0}&to={}", T0 + 3_600_000_000_000);

    // The request list: only the slice, all of it, each row saying whose it is.
    let (app, window) = (&app, window.as_str());
    let list = |q: &'static str| async move {
        app.get_json(&format!("/api/v1/requests?{window}&limit=1000&{q}"))
            .await
    };
    let v = list("tenant=globex").await;
    assert_eq!(v["total"], globex.len(), "{v}");
    for r in v["requests"].as_array().unwrap() {
        assert_eq!(r["tenant"], "globex");
        assert!(globex.contains(&r["request_id"].as_str().unwrap()));
    }
    let v = list("adapter=sql-lora").await;
    assert_eq!(v["total"], sql_lora);
    assert!(
        v["requests"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["lora_adapter"] == "sql-lora" && r["tenant"] == "globex")
    );
    assert_eq!(list("priority=1").await["total"], low);
    assert_eq!(
        list("tenant=globex&adapter=sql-lora&instance=sl-a").await["total"],
        sent.iter()
            .filter(|r| r.served.lora_adapter.as_deref() == Some("sql-lora")
                && r.request_id.starts_with("sl-a"))
            .count()
    );
    assert_eq!(list("tenant=nobody").await["total"], 0);

    // The latency chart counts the slice's requests only.
    let series = app
        .get_json(&format!("/api/v1/latency?{window}&width_px=10&tenant=acme"))
        .await;
    let charted: u64 = series["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(charted, acme.len() as u64);

    // Compare: acme against globex over the same window, each side saying its slice.
    let c = app
        .get_json(&format!(
            "/api/v1/compare?a_tenant=acme&b_tenant=globex&a_from={T0}&a_to={to}&b_from={T0}&b_to={to}",
            to = T0 + 3_600_000_000_000
        ))
        .await;
    assert_eq!(c["a"]["requests"], acme.len(), "{}", c["a"]);
    assert_eq!(c["b"]["requests"], globex.len());
    assert_eq!(
        (c["a"]["tenant"].as_str(), c["b"]["tenant"].as_str()),
        (Some("acme"), Some("globex"))
    );
    // Without windows, two tenants compare over the same hour (the hour before the newest request).
    let c = app
        .get_json("/api/v1/compare?a_tenant=acme&b_tenant=globex")
        .await;
    assert_eq!(c["a"]["from_ns"], c["b"]["from_ns"]);
    let to = c["b"]["to_ns"].as_i64().unwrap();
    let acme_before = sent
        .iter()
        .filter(|r| r.served.tenant.as_deref() == Some("acme") && r.arrival_ns < to)
        .count();
    assert_eq!(c["a"]["requests"], acme_before);

    // The window's diagnoses: only the tenant's requests (diagnosed among all the traffic).
    let all = app
        .get_json(&format!("/api/v1/diagnosis?{window}&limit=5000"))
        .await;
    let d = app
        .get_json(&format!(
            "/api/v1/diagnosis?{window}&limit=5000&tenant=globex"
        ))
        .await;
    let tenant_of: HashMap<&str, &str> = sent
        .iter()
        .map(|r| (r.request_id.as_str(), r.served.tenant.as_deref().unwrap()))
        .collect();
    let ids = |v: &serde_json::Value| -> Vec<String> {
        v["diagnoses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["request_id"].as_str().unwrap().to_string())
            .collect()
    };
    let expected: Vec<String> = ids(&all)
        .into_iter()
        .filter(|id| tenant_of[id.as_str()] == "globex")
        .collect();
    let mut got = ids(&d);
    got.sort();
    let mut expected = expected;
    expected.sort();
    assert_eq!(got, expected);

    // A request's page reads its tenant and adapter back as the browser does (typed: a key
    // twice in its JSON would not parse).
    let one = sent
        .iter()
        .find(|r| r.served.lora_adapter.as_deref() == Some("sql-lora"))
        .unwrap();
    let body = app
        .get(&format!("/api/v1/requests/{}", one.request_id))
        .await
        .text()
        .await
        .unwrap();
    let detail: tokenscope_core::api::RequestDetail = serde_json::from_str(&body).unwrap();
    assert_eq!(detail.served.tenant.as_deref(), Some("globex"));
    assert_eq!(detail.served.lora_adapter.as_deref(), Some("sql-lora"));

    // A priority that is not a number is refused, naming the parameter.
    let resp = app.get("/api/v1/requests?priority=high").await;
    assert_eq!(resp.status(), 400);
    assert!(resp.text().await.unwrap().contains("priority"));
}

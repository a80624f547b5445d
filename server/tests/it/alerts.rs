//! Alertmanager's webhook opens incidents: a body in Alertmanager's documented format (version 4)
//! for a firing alert on a simulated instance opens an incident whose victims are the ones the
//! simulated engine hurt; the same alert sent again answers with the same incident; alerts that
//! cannot open one say why without losing the others; with a read token, the webhook needs it.

use crate::common;

use common::*;
use tokenscope_core::model::calendar::rfc3339;
use tokenscope_sim as sim;

/// A webhook body as Alertmanager sends it (prometheus.io/docs/alerting/latest/configuration/
/// #webhook_config), with three alerts: one on the scenario's instance (named by the label
/// Prometheus gives a scraped `instance` that clashes with the target's), one on a host
/// tokenscope does not know, one resolved.
fn webhook(instance: &str, starts: &str) -> serde_json::Value {
    serde_json::json!({
        "version": "4",
        "groupKey": "{}/{severity=\"page\"}:{alertname=\"TPOTHigh\"}",
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "tokenscope",
        "groupLabels": {"alertname": "TPOTHigh"},
        "commonLabels": {"alertname": "TPOTHigh", "severity": "page"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example:9093",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "TPOTHigh", "severity": "page", "instance": "10.0.0.7:8000", "exported_instance": instance},
                "annotations": {"summary": "TPOT p90 above 50 ms for 2 minutes", "description": "</title><script>alert(1)</script>"},
                "startsAt": starts,
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus.example:9090/graph?g0.expr=tpot_p90%3E0.05",
                "fingerprint": "c2e1a9d0f3b4a5e6"
            },
            {
                "status": "firing",
                "labels": {"alertname": "TPOTHigh", "severity": "page", "instance": "10.0.0.9:8000"},
                "annotations": {},
                "startsAt": starts,
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "",
                "fingerprint": "0b7d3c2a1e9f8d7c"
            },
            {
                "status": "resolved",
                "labels": {"alertname": "TTFTHigh", "exported_instance": instance},
                "annotations": {},
                "startsAt": starts,
                "endsAt": starts,
                "generatorURL": "",
                "fingerprint": "9a8b7c6d5e4f3a2b"
            }
        ]
    })
}

#[tokio::test]
async fn a_firing_alert_opens_an_incident_of_the_victims_once() {
    let app = spawn_app().await;
    let s = sim::scenarios::build("prefill-interrupts-decode", T0, 1).unwrap();
    app.send_sim(&s.runs).await;
    // The alert fires a little after the scenario began (its condition held for a while).
    let body = webhook(&s.truth.instance, &rfc3339(T0 + 2_000_000_000)).to_string();

    let resp = app
        .post_json("/api/v1/alerts/alertmanager", body.clone())
        .await;
    assert_eq!(resp.status(), 200);
    let reply: serde_json::Value = resp.json().await.unwrap();
    let opened = reply["incidents"].as_array().unwrap();
    assert_eq!(opened.len(), 1, "{reply}");
    let slug = opened[0]["slug"].as_str().unwrap();
    assert_eq!(opened[0]["fingerprint"], "c2e1a9d0f3b4a5e6");
    assert_eq!(opened[0]["reused"], false);
    assert!(
        opened[0]["url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/incidents/{slug}"))
    );
    let skipped = reply["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2);
    assert!(
        skipped[0]["reason"]
            .as_str()
            .unwrap()
            .contains("instance=\"10.0.0.9:8000\""),
        "{reply}"
    );
    assert!(skipped[1]["reason"].as_str().unwrap().contains("resolved"));

    // The incident: the engine's victims among its requests, the alert in its note.
    let i = app.get_json(&format!("/api/v1/incidents/{slug}")).await;
    assert_eq!(i["title"], format!("TPOTHigh on {}", s.truth.instance));
    let victims: Vec<&str> = i["victims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for v in &s.truth.victims {
        assert!(victims.contains(&v.as_str()), "{v} not in {victims:?}");
    }
    let md = app
        .get(&format!("/api/v1/incidents/{slug}/markdown"))
        .await
        .text()
        .await
        .unwrap();
    assert!(md.contains("TPOT p90 above 50 ms for 2 minutes"), "{md}");
    assert!(md.contains(&format!("/incidents/{slug}")));
    assert!(!md.contains("<script>"), "the annotation is text: {md}");

    // Alertmanager sends it again at its group interval: the same incident.
    let again: serde_json::Value = app
        .post_json("/api/v1/alerts/alertmanager", body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["incidents"][0]["slug"], slug);
    assert_eq!(again["incidents"][0]["reused"], true);
    assert_eq!(
        app.get_json("/api/v1/incidents").await["incidents"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // Bodies that are not a version-4 webhook are refused, saying what was wrong.
    for (bad, says) in [
        ("{\"alerts\": []}".to_string(), "version"),
        (
            webhook("x", "now")
                .to_string()
                .replace("\"version\":\"4\"", "\"version\":\"3\""),
            "version \"3\"",
        ),
        ("not json".to_string(), "not an Alertmanager webhook"),
    ] {
        let resp = app.post_json("/api/v1/alerts/alertmanager", bad).await;
        assert_eq!(resp.status(), 400);
        let err: serde_json::Value = resp.json().await.unwrap();
        assert!(err["error"].as_str().unwrap().contains(says), "{err}");
    }
    // A start that is not a time skips that alert only.
    let reply: serde_json::Value = app
        .post_json(
            "/api/v1/alerts/alertmanager",
            webhook(&s.truth.instance, "yesterday").to_string(),
        )
        .await
        .json()
        .await
        .unwrap();
    assert!(
        reply["skipped"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("startsAt \"yesterday\""),
        "{reply}"
    );
}

#[tokio::test]
async fn with_a_read_token_the_webhook_needs_it() {
    let token = "alertmanager-read-token-0123456789";
    let app = spawn_app_with(|c| c.access.read_token = Some(token.into())).await;
    let body = webhook("gpu-0", &rfc3339(T0)).to_string();
    let resp = app
        .post_json("/api/v1/alerts/alertmanager", body.clone())
        .await;
    assert_eq!(resp.status(), 401);
    let resp = app
        .client
        .post(format!("{}/api/v1/alerts/alertmanager", app.http))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

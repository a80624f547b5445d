//! `POST /api/v1/alerts/alertmanager`: Alertmanager's webhook. Each firing alert whose labels
//! name an instance opens an incident of the worst degraded requests of its window (from its
//! start, less a look-back, to its end or now); the reply lists each incident's link.

use std::collections::{BTreeMap, HashSet};

use axum::{
    Json,
    extract::{Query, State},
    http::HeaderMap,
};
use serde::Deserialize;

use tokenscope_core::api::{AlertIncident, AlertReply, AlertSkipped};
use tokenscope_core::model::calendar::{rfc3339, rfc3339_ns};
use tokenscope_core::model::{Nanos, SECOND};

use super::incidents::page_url;
use crate::error::{Error, Result};
use crate::query::alerts::{self, AlertScope, Opened};
use crate::store::Store;

/// Alertmanager's webhook body, version 4, as its documentation gives it
/// (prometheus.io/docs/alerting/latest/configuration/#webhook_config). Fields tokenscope does
/// not use (`groupKey`, `truncatedAlerts`, `groupLabels`, `commonLabels`) are not read.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Webhook {
    version: String,
    #[serde(default)]
    receiver: String,
    #[serde(default, rename = "externalURL")]
    external_url: String,
    alerts: Vec<Alert>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Alert {
    status: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    starts_at: String,
    /// Go's zero time (`0001-01-01T00:00:00Z`) while the alert fires.
    #[serde(default)]
    ends_at: String,
    #[serde(default, rename = "generatorURL")]
    generator_url: String,
    #[serde(default)]
    fingerprint: String,
}

/// The labels that may name a tokenscope instance, in the order they are tried: our own, the
/// name Prometheus gives a scraped series' `instance` label when the target has one too, and
/// `instance` itself.
const INSTANCE_LABELS: [&str; 3] = ["tokenscope_instance", "exported_instance", "instance"];

#[derive(Debug, Default, Deserialize)]
pub(super) struct AlertParams {
    /// How long before the alert's start its window begins, in seconds (default 300): an alert
    /// fires after its condition has held for a while.
    lookback_s: Option<String>,
}

pub(super) async fn alertmanager(
    State(store): State<Store>,
    Query(p): Query<AlertParams>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<AlertReply>> {
    let hook: Webhook = serde_json::from_slice(&body).map_err(|e| {
        Error::InvalidArgument(format!(
            "the body is not an Alertmanager webhook (version 4): {e}"
        ))
    })?;
    if hook.version != "4" {
        return Err(Error::InvalidArgument(format!(
            "Alertmanager webhook version {:?}: tokenscope reads version \"4\"",
            hook.version
        )));
    }
    let lookback = match super::parse_num::<f64>("lookback_s", &p.lookback_s)? {
        None => 300 * SECOND,
        Some(s) if (0.0..=86_400.0).contains(&s) => (s * 1e9) as Nanos,
        Some(s) => {
            return Err(Error::InvalidArgument(format!(
                "lookback_s={s} must be between 0 and 86400 seconds"
            )));
        }
    };
    let known: HashSet<String> = store
        .list_instances()
        .await?
        .into_iter()
        .map(|i| i.instance)
        .collect();
    let now = crate::clock::now_ns();
    let mut reply = AlertReply::default();
    // One alert's bad fields skip that alert; the others still open their incidents.
    for alert in &hook.alerts {
        let alertname = alert.labels.get("alertname").cloned().unwrap_or_default();
        let skip = |reason: String| AlertSkipped {
            fingerprint: alert.fingerprint.clone(),
            alertname: alertname.clone(),
            reason,
        };
        match scope(&hook, alert, &known, lookback, now) {
            Err(reason) => reply.skipped.push(skip(reason)),
            Ok(s) => match alerts::open(&store, s, now).await {
                Ok(Opened::Incident { slug, reused }) => reply.incidents.push(AlertIncident {
                    fingerprint: alert.fingerprint.clone(),
                    alertname,
                    url: page_url(&headers, &slug),
                    slug,
                    reused,
                }),
                Ok(Opened::NothingDegraded) => reply.skipped.push(skip(
                    "no request in the alert's window on its instance was degraded".into(),
                )),
                // The store itself failing fails the send (Alertmanager retries it); one
                // alert's incident that cannot be made skips that alert only.
                Err(e @ Error::Unavailable(_)) => return Err(e),
                Err(e) => reply.skipped.push(skip(format!("no incident: {e}"))),
            },
        }
    }
    Ok(Json(reply))
}

/// What `alert` asks about, or why it opens no incident.
fn scope(
    hook: &Webhook,
    alert: &Alert,
    known: &HashSet<String>,
    lookback: Nanos,
    now: Nanos,
) -> std::result::Result<AlertScope, String> {
    if alert.status != "firing" {
        return Err(format!(
            "status {:?}: only firing alerts open incidents",
            alert.status
        ));
    }
    let starts = rfc3339_ns(&alert.starts_at)
        .ok_or_else(|| format!("startsAt {:?} is not an RFC 3339 time", alert.starts_at))?;
    let ends = rfc3339_ns(&alert.ends_at).filter(|&e| e > starts && e < now);
    let instance = INSTANCE_LABELS
        .iter()
        .filter_map(|l| alert.labels.get(*l))
        .find(|v| known.contains(*v))
        .ok_or_else(|| {
            let named: Vec<String> = INSTANCE_LABELS
                .iter()
                .filter_map(|l| alert.labels.get(*l).map(|v| format!("{l}={v:?}")))
                .collect();
            format!(
                "no label names an instance tokenscope knows (tried {}: {})",
                INSTANCE_LABELS.join(", "),
                if named.is_empty() {
                    "none set".into()
                } else {
                    named.join(", ")
                }
            )
        })?
        .clone();
    let label = |k: &str| alert.labels.get(k).filter(|v| !v.is_empty()).cloned();
    let title: String = format!(
        "{} on {instance}",
        label("alertname").unwrap_or_else(|| "Alert".into())
    )
    .chars()
    .take(200)
    .collect();
    Ok(AlertScope {
        key: format!("{}@{}", alert.fingerprint, alert.starts_at),
        model: label("model").or_else(|| label("model_name")),
        tenant: label("tenant"),
        instance,
        from_ns: starts - lookback,
        to_ns: ends.unwrap_or(now),
        title,
        note: note(hook, alert, starts),
    })
}

/// The incident's note: what the alert said, its labels, and where it came from.
fn note(hook: &Webhook, alert: &Alert, starts: Nanos) -> String {
    let mut lines = Vec::new();
    for k in ["summary", "description"] {
        if let Some(v) = alert.annotations.get(k) {
            lines.push(v.clone());
        }
    }
    let labels: Vec<String> = alert
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    lines.push(format!(
        "Alert firing since {}: {}",
        rfc3339(starts),
        labels.join(", ")
    ));
    if !alert.generator_url.is_empty() {
        lines.push(format!("Source: {}", alert.generator_url));
    }
    let via = match (hook.receiver.as_str(), hook.external_url.as_str()) {
        ("", "") => String::new(),
        (r, "") => format!(" (receiver {r})"),
        (r, u) => format!(" (receiver {r}, {u})"),
    };
    lines.push(format!("Opened by Alertmanager{via}."));
    // The note's limit (10,000 characters), with room to spare.
    lines.join("\n").chars().take(9_000).collect()
}

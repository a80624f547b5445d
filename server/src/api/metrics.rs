//! `GET /metrics`: the server's self-metrics for Prometheus: the text format 0.0.4, or OpenMetrics
//! 1.0 with exemplars when the scraper's `Accept` asks for it (Prometheus does) and, with read
//! access on, presents a credential that sees every tenant.

use std::borrow::Cow;

use axum::{
    extract::State,
    http::{HeaderMap, header},
    response::IntoResponse,
};

use crate::error::Result;
use crate::metrics::{Gauge, label_value};
use crate::state::AppState;

/// Stored findings are counted over the requests that arrived in this last stretch of time.
const FINDINGS_OVER_NS: i64 = 3_600 * 1_000_000_000;

/// The counters, and the gauges read now: the pool, the budget, the spans OTLP holds, the
/// findings worker's backlog and the last hour's findings.
pub async fn get(State(state): State<AppState>, headers: HeaderMap) -> Result<impl IntoResponse> {
    // Exemplars carry request ids and tenant labels name tenants: with read access on, both
    // only for a reader who may see them all (give Prometheus the read token); anyone else gets
    // the text format without exemplars and each instance's histograms summed over tenants.
    let sees_all = state.read.sees_everything(&headers);
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/openmetrics-text"))
        && sees_all;
    let AppState {
        sink, otlp, budget, ..
    } = &state;
    let store = &sink.store;
    let (open, idle) = store.pool_connections();
    let in_use = (open as usize).saturating_sub(idle);
    let (lag, queued) = store.diagnosis_backlog().await?;
    let findings = store
        .findings_by_cause(crate::clock::now_ns() - FINDINGS_OVER_NS)
        .await?;
    let text = state.metrics().render(&[
        Gauge {
            name: "tokenscope_db_pool_connections",
            help: "Database connections of the pool, by state.",
            samples: vec![
                ("{state=\"in_use\"}".into(), in_use as f64),
                ("{state=\"idle\"}".into(), idle as f64),
            ],
        },
        Gauge {
            name: "tokenscope_ingest_budget_bytes",
            help: "Ingest request bodies held now, and the budget (--ingest-budget-mib).",
            samples: vec![
                ("{state=\"in_use\"}".into(), budget.in_use() as f64),
                ("{state=\"limit\"}".into(), budget.bytes() as f64),
            ],
        },
        Gauge {
            name: "tokenscope_otlp_assembler_held_spans",
            help: "OTLP spans held until their request's root span arrives (or times out).",
            samples: vec![("".into(), otlp.assembler.held_spans() as f64)],
        },
        Gauge {
            name: "tokenscope_live_pages",
            help: "Pages following new data now (open streams of /api/v1/live).",
            samples: vec![("".into(), state.live.pages() as f64)],
        },
        Gauge {
            name: "tokenscope_findings_lag_seconds",
            help: "How long the oldest stretch of new data has waited for the findings worker (the settle time included); 0 when none waits.",
            samples: vec![("".into(), lag.as_secs_f64())],
        },
        Gauge {
            name: "tokenscope_findings_diagnosed_requests",
            help: "Requests this server's findings worker has diagnosed since it started (again each time new data lands in a request's lifetime).",
            samples: vec![("".into(), crate::query::findings::diagnosed_total() as f64)],
        },
        Gauge {
            name: "tokenscope_findings_queued_stretches",
            help: "Stretches of instances' time waiting to be diagnosed.",
            samples: vec![("".into(), queued as f64)],
        },
        Gauge {
            name: "tokenscope_findings_requests",
            help: "Requests of the last hour with a stored finding, by instance and cause.",
            samples: findings
                .iter()
                .map(|(instance, cause, n)| {
                    let labels = format!(
                        "{{instance=\"{}\",cause=\"{}\"}}",
                        label_value(instance),
                        label_value(cause)
                    );
                    (Cow::Owned(labels), *n as f64)
                })
                .collect(),
        },
    ], openmetrics, sees_all);
    let content_type = if openmetrics {
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    } else {
        "text/plain; version=0.0.4; charset=utf-8"
    };
    Ok(([(header::CONTENT_TYPE, content_type)], text))
}

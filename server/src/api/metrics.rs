//! `GET /metrics`: the server's self-metrics for Prometheus (text format 0.0.4).

use axum::{extract::State, http::header, response::IntoResponse};

use crate::metrics::Gauge;
use crate::state::AppState;

/// The counters, and the gauges read now: the pool, the budget, the spans OTLP holds.
pub async fn get(State(state): State<AppState>) -> impl IntoResponse {
    let AppState {
        sink, otlp, budget, ..
    } = &state;
    let store = &sink.store;
    let (open, idle) = store.pool_connections();
    let in_use = (open as usize).saturating_sub(idle);
    let text = state.metrics().render(&[
        Gauge {
            name: "tokenscope_db_pool_connections",
            help: "Database connections of the pool, by state.",
            samples: vec![
                ("{state=\"in_use\"}", in_use as f64),
                ("{state=\"idle\"}", idle as f64),
            ],
        },
        Gauge {
            name: "tokenscope_ingest_budget_bytes",
            help: "Ingest request bodies held now, and the budget (--ingest-budget-mib).",
            samples: vec![
                ("{state=\"in_use\"}", budget.in_use() as f64),
                ("{state=\"limit\"}", budget.bytes() as f64),
            ],
        },
        Gauge {
            name: "tokenscope_otlp_assembler_held_spans",
            help: "OTLP spans held until their request's root span arrives (or times out).",
            samples: vec![("", otlp.assembler.held_spans() as f64)],
        },
    ]);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

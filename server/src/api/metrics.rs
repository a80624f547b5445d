//! `GET /metrics`: the server's self-metrics for Prometheus (text format 0.0.4).

use axum::{extract::State, http::header, response::IntoResponse};

use crate::ingest::budget::Budget;
use crate::ingest::otlp_endpoints::Otlp;
use crate::metrics::Gauge;

/// What a scrape reads besides the store's counters.
#[derive(Clone)]
pub struct Scrape {
    pub otlp: Otlp,
    pub budget: Budget,
}

pub async fn get(State(Scrape { otlp, budget }): State<Scrape>) -> impl IntoResponse {
    let (open, idle) = otlp.store.pool_connections();
    let in_use = (open as usize).saturating_sub(idle);
    let text = otlp.store.metrics().render(&[
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

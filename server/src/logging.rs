//! Logs: text for people or JSON lines for log pipelines (`--log-format`), and a request id on
//! every HTTP and gRPC request, in the reply's `x-request-id` and in the span every log line of
//! that request is written in.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::{HeaderValue, Request};
use tower_http::request_id::{MakeRequestId, RequestId};
use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    /// One JSON object per line, with the request's span fields (request id, method, path).
    Json,
}

/// Installs the global subscriber. `RUST_LOG` filters (default `info`).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx::postgres::notice=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().with_current_span(true).init(),
    }
}

/// Request ids: a random per-process prefix (replicas differ) and a counter. An id a proxy
/// already set (`x-request-id`) is kept.
#[derive(Clone)]
pub struct RequestIds {
    prefix: u32,
    next: Arc<AtomicU64>,
}

impl Default for RequestIds {
    fn default() -> Self {
        let mut bytes = [0u8; 4];
        let _ = getrandom::fill(&mut bytes);
        Self {
            prefix: u32::from_le_bytes(bytes),
            next: Arc::default(),
        }
    }
}

impl MakeRequestId for RequestIds {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        HeaderValue::from_str(&format!("{:08x}{n:08x}", self.prefix))
            .ok()
            .map(RequestId::new)
    }
}

/// The span a request's log lines are written in: its id, method and path (never the query,
/// which may hold search text, nor headers, which may hold keys).
pub fn request_span<B>(req: &Request<B>) -> tracing::Span {
    let id = req
        .extensions()
        .get::<RequestId>()
        .and_then(|id| id.header_value().to_str().ok())
        .unwrap_or("");
    tracing::info_span!(
        "request",
        request_id = %id,
        method = %req.method(),
        path = %req.uri().path(),
    )
}

//! Starts the whole server: database, HTTP (UI, JSON API, JSON and OTLP/HTTP ingest) and gRPC
//! (native and OTLP ingest on one port).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::{Router, extract::DefaultBodyLimit};
use leptos::prelude::LeptosOptions;
use leptos_axum::{LeptosRoutes, generate_route_list};
use tokio::net::TcpListener;
use tonic::codec::CompressionEncoding;
use tower_http::{
    compression::CompressionLayer,
    decompression::RequestDecompressionLayer,
    request_id::{PropagateRequestIdLayer, SetRequestIdLayer},
    trace::TraceLayer,
};

use crate::access::{AccessConfig, IngestKeys, KeyLayer, ReadAccess, Reader};
use crate::error::{Error, Result};
use crate::ingest::Sink;
use crate::ingest::budget::{Budget, BudgetLayer};
use crate::ingest::grpc::IngestService;
use crate::ingest::otlp_endpoints::{Otlp, OtlpTraceService};
use crate::logging::RequestIds;
use crate::state::AppState;
use crate::store::Store;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer;
use tokenscope_proto::v1::trace_ingest_server::TraceIngestServer;

#[derive(Debug, Clone)]
pub struct Config {
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    pub database_url: String,
    /// Directory with the built browser app (`pkg/` with wasm, js, css).
    pub site_root: String,
    /// Largest accepted ingest message, gRPC or HTTP.
    pub max_message_bytes: usize,
    /// Ingest request bodies held at once (both ports); see `ingest::budget`.
    pub ingest_budget_bytes: usize,
    /// Store no decoded token text (`--redact-text`).
    pub redact_text: bool,
    /// Drop partitions older than this many days; 0 keeps everything.
    pub retention_days: u32,
    /// How long spans of a request wait for its root span before the request is stored without it.
    pub assembly_timeout: Duration,
    /// Who may send and read; everyone by default.
    pub access: AccessConfig,
    /// Store each request's diagnosis once no data has touched its lifetime for this long
    /// (`query::findings`); `None` runs no worker (the findings are then computed when asked).
    pub findings_settle: Option<Duration>,
    /// Span attributes that name a request's tenant, before `tokenscope.tenant`, `user.id` and
    /// `enduser.id` (`--otlp-tenant-attribute`).
    pub otlp_tenant_attributes: Vec<String>,
    /// How many tenants the latency histograms of `/metrics` label by name (`--metrics-tenants`).
    pub metrics_tenants: usize,
}

/// How long a stopping server waits for requests in flight before it exits anyway.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// A started server. Its tasks run until [`Running::serve_until`] stops them, or the process
/// (or the test's runtime) ends.
pub struct Running {
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    pub store: Store,
    otlp: Otlp,
    stop: tokio::sync::watch::Sender<bool>,
    http: tokio::task::JoinHandle<std::io::Result<()>>,
    grpc: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

impl Running {
    /// Serves until `stop` resolves (SIGTERM, say), then stops cleanly: both ports stop
    /// accepting, requests in flight finish (their batches are committed and acknowledged, up to
    /// [`DRAIN_LIMIT`]), and OTLP spans still waiting for their root span are stored. An error if
    /// a listener fails first.
    pub async fn serve_until(self, stop: impl std::future::Future<Output = ()>) -> Result<()> {
        let failed = |what: &str, e: String| Error::Internal(format!("{what} server stopped: {e}"));
        let Running {
            otlp,
            stop: stop_tx,
            mut http,
            mut grpc,
            ..
        } = self;
        tokio::select! {
            r = &mut http => return r.map_err(|e| failed("HTTP", e.to_string()))?.map_err(|e| failed("HTTP", e.to_string())),
            r = &mut grpc => return r.map_err(|e| failed("gRPC", e.to_string()))?.map_err(|e| failed("gRPC", e.to_string())),
            () = stop => {}
        }
        tracing::info!("stopping: finishing the requests in flight");
        let _ = stop_tx.send(true);
        let drained = tokio::time::timeout(DRAIN_LIMIT, async {
            let _ = http.await;
            let _ = grpc.await;
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                limit_s = DRAIN_LIMIT.as_secs(),
                "requests still in flight at the drain limit were dropped"
            );
        }
        // Held spans were acknowledged when they arrived: store them rather than lose them.
        otlp.sweep(Duration::ZERO).await?;
        tracing::info!("stopped");
        Ok(())
    }
}

/// Resolves when the process is asked to stop (SIGTERM or Ctrl-C).
pub async fn stop_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

pub async fn start(config: Config) -> Result<Running> {
    if config.ingest_budget_bytes < config.max_message_bytes {
        return Err(Error::InvalidArgument(format!(
            "the ingest budget ({} MiB) must be at least the largest message (--max-message-mib {}): a message larger than the budget could never be admitted",
            config.ingest_budget_bytes >> 20,
            config.max_message_bytes >> 20
        )));
    }
    let keys = match &config.access.ingest_keys {
        Some(path) => Some(Arc::new(IngestKeys::load(path)?)),
        None => None,
    };
    let read_tokens = match &config.access.read_tokens {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Error::InvalidArgument(format!("--read-tokens {}: {e}", path.display()))
            })?;
            crate::access::scope::parse_read_tokens(&text).map_err(|e| {
                Error::InvalidArgument(format!("--read-tokens {}: {e}", path.display()))
            })?
        }
        None => Vec::new(),
    };
    let read = Arc::new(
        ReadAccess::new(
            config.access.read_token.as_deref(),
            config.access.trusted_user_header.as_deref(),
            config.access.public_incidents,
        )?
        .scoped(read_tokens, config.access.trusted_tenants_header.as_deref())?,
    );
    let store = Store::connect(&config.database_url).await?;
    crate::access::scope::use_salt(store.alias_salt().await?);
    let mut sink = Sink::of(store.clone(), config.redact_text);
    sink.metrics = Arc::new(crate::metrics::Metrics::with_tenant_labels(
        config.metrics_tenants,
    ));
    let budget = Budget::new(config.ingest_budget_bytes, sink.metrics.clone());
    let bind = |addr: SocketAddr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|e| Error::Unavailable(format!("cannot listen on {addr}: {e}")))
    };
    let http_listener = bind(config.http_addr).await?;
    let grpc_listener = bind(config.grpc_addr).await?;
    let http_addr = http_listener
        .local_addr()
        .map_err(|e| Error::Internal(e.to_string()))?;
    let grpc_addr = grpc_listener
        .local_addr()
        .map_err(|e| Error::Internal(e.to_string()))?;

    let otlp = Otlp::new(
        sink.clone(),
        crate::ingest::otlp::Mapping::with_tenant_attributes(&config.otlp_tenant_attributes),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let state = AppState {
        sink: sink.clone(),
        otlp: otlp.clone(),
        budget: budget.clone(),
        read,
        live: crate::live::Live::start(store.clone(), stopped.clone()).await?,
    };
    let app = http_app(&config, state, keys.clone(), http_addr);
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    let when_stopped = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    let http = tokio::spawn(
        axum::serve(http_listener, app)
            .with_graceful_shutdown(when_stopped())
            .into_future(),
    );

    let ingest = TraceIngestServer::new(IngestService { sink: sink.clone() })
        .max_decoding_message_size(config.max_message_bytes)
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip);
    tokio::spawn(sweep_loop(otlp.clone(), config.assembly_timeout));
    let otlp_service = TraceServiceServer::new(OtlpTraceService { otlp: otlp.clone() })
        .max_decoding_message_size(config.max_message_bytes)
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip);
    let incoming = tonic::transport::server::TcpIncoming::from(grpc_listener);
    let grpc = tokio::spawn(
        tonic::transport::Server::builder()
            // Outermost first: the request id and its span, the key, then the budget.
            .layer(
                tower::ServiceBuilder::new()
                    .layer(SetRequestIdLayer::x_request_id(RequestIds::default()))
                    .layer(PropagateRequestIdLayer::x_request_id())
                    .layer(TraceLayer::new_for_grpc().make_span_with(crate::logging::request_span))
                    .layer(KeyLayer::required(keys, sink.metrics.clone()))
                    .layer(BudgetLayer(budget))
                    .into_inner(),
            )
            .add_service(ingest)
            .add_service(otlp_service)
            .serve_with_incoming_shutdown(incoming, when_stopped()),
    );

    if config.retention_days > 0 {
        tokio::spawn(retention_loop(store.clone(), config.retention_days));
    }
    if let Some(settle) = config.findings_settle {
        tokio::spawn(crate::findings::run(store.clone(), settle));
    }
    tracing::info!(%http_addr, %grpc_addr, "tokenscope is serving");
    Ok(Running {
        http_addr,
        grpc_addr,
        store,
        otlp,
        stop,
        http,
        grpc,
    })
}

/// The HTTP port: trace ingest (ingest keys, budget), then pages and the query API (read
/// access), self-metrics and sign-in.
fn http_app(
    config: &Config,
    state: AppState,
    keys: Option<Arc<IngestKeys>>,
    addr: SocketAddr,
) -> Router {
    let leptos = LeptosOptions::builder()
        .output_name("tokenscope")
        .site_root(config.site_root.as_str())
        .site_pkg_dir("pkg")
        .site_addr(addr)
        .build();
    let routes = generate_route_list(app::App);
    let api = crate::api::router(state.clone(), keys.clone());
    let context = page_context(api.clone());
    let ui = Router::new()
        .leptos_routes_with_context(&leptos, routes, context.clone(), {
            let leptos = leptos.clone();
            move || app::shell(leptos.clone())
        })
        .fallback(leptos_axum::file_and_error_handler_with_context(
            context,
            app::shell,
        ))
        .with_state(leptos)
        .layer(axum::middleware::from_fn_with_state(
            state.sink.store.clone(),
            crate::api::incidents::gate,
        ));
    let ingest = Router::new()
        .route(
            "/api/v1/traces",
            axum::routing::post(crate::ingest::http::post_traces),
        )
        .route(
            "/v1/traces",
            axum::routing::post(crate::ingest::otlp_endpoints::post_traces),
        )
        .with_state(state.clone())
        .layer(DefaultBodyLimit::max(config.max_message_bytes))
        .layer(BudgetLayer(state.budget.clone()))
        // Outside the budget, as on the gRPC port: a sender without a valid key takes none of it.
        .layer(KeyLayer::required(keys, state.metrics().clone()));
    let metrics = Router::new()
        .route("/metrics", axum::routing::get(crate::api::metrics::get))
        .with_state(state.clone());
    let login = Router::new()
        .route(
            "/login",
            axum::routing::get(crate::access::read::login_page).post(crate::access::read::login),
        )
        .route("/logout", axum::routing::get(crate::access::read::logout))
        .with_state(state.clone());
    // Imports come in through the query API (an upload from the browser), so its bodies are
    // budgeted as well.
    let reads = api
        .layer(DefaultBodyLimit::max(config.max_message_bytes))
        .layer(BudgetLayer(state.budget.clone()))
        .merge(ui)
        .layer(axum::middleware::from_fn_with_state(
            state.read.clone(),
            crate::access::read::gate,
        ));
    // Inside decompression: the budget counts the bytes the server will hold.
    ingest
        .merge(reads)
        .layer(RequestDecompressionLayer::new())
        .merge(metrics)
        .merge(login)
        .layer(CompressionLayer::new())
        // Every response, whichever handler made it, carries the security headers.
        .layer(axum::middleware::from_fn(crate::security::headers))
        // Every request gets an id (kept when a proxy set one), logs in a span carrying it, and
        // returns it in `x-request-id`.
        .layer(TraceLayer::new_for_http().make_span_with(crate::logging::request_span))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(RequestIds::default()))
}

/// What a page's render finds in its reactive context, from the request it answers (which
/// leptos_axum provides as `Parts`): the nonce of this response's Content-Security-Policy
/// (`security::headers` made it), which the scripts Leptos writes carry; and the API as an
/// in-process client that asks as this page's reader, so pages render with their data and see
/// what the reader may see.
fn page_context(api: Router) -> impl Fn() + Clone + Send + Sync + 'static {
    use leptos::prelude::{provide_context, use_context};
    move || {
        let parts = use_context::<axum::http::request::Parts>();
        let extensions = parts.as_ref().map(|p| &p.extensions);
        if let Some(nonce) = extensions.and_then(|e| e.get::<leptos::nonce::Nonce>()) {
            provide_context(nonce.clone());
        }
        let reader = extensions.and_then(|e| e.get::<Reader>()).cloned();
        let scope = extensions
            .and_then(|e| e.get::<crate::access::Scope>())
            .cloned()
            .unwrap_or_default();
        provide_context(in_process(api.clone(), reader, scope));
    }
}

/// The API router as the UI's `ApiClient`: a GET of a path and query, answered without a socket,
/// as `reader` (the page's) when the read gate let one in.
fn in_process(
    api: Router,
    reader: Option<Reader>,
    scope: crate::access::Scope,
) -> tokenscope_core::api::ApiClient {
    use tower::ServiceExt;
    tokenscope_core::api::ApiClient(std::sync::Arc::new(move |url: String| {
        let api = api.clone();
        let (reader, scope) = (reader.clone(), scope.clone());
        Box::pin(async move {
            let mut req = axum::http::Request::get(&url)
                .body(axum::body::Body::empty())
                .map_err(|e| format!("{url}: {e}"))?;
            if let Some(reader) = reader {
                req.extensions_mut().insert(reader);
            }
            req.extensions_mut().insert(scope);
            let resp = api.oneshot(req).await.map_err(|e| format!("{url}: {e}"))?;
            let status = resp.status();
            let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            let body = String::from_utf8_lossy(&body).into_owned();
            if status.is_success() {
                Ok(body)
            } else {
                Err(tokenscope_core::api::error_text(status.as_u16(), &body))
            }
        })
    }))
}

async fn sweep_loop(otlp: Otlp, timeout: Duration) {
    let mut every = tokio::time::interval(Duration::from_secs(1).max(timeout / 10));
    loop {
        every.tick().await;
        if let Err(e) = otlp.sweep(timeout).await {
            tracing::warn!(error = %e, "storing requests without root spans failed");
        }
    }
}

async fn retention_loop(store: Store, days: u32) {
    let mut every = tokio::time::interval(Duration::from_secs(3600));
    loop {
        every.tick().await;
        match store
            .drop_older_than_days(days, crate::clock::now_ns())
            .await
        {
            Ok(dropped) if !dropped.is_empty() => {
                tracing::info!(?dropped, "retention dropped partitions")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "retention failed; will retry"),
        }
    }
}

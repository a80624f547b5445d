//! The JSON query API (`/api/v1/...`) and health probes, one file per resource; response types
//! live in `tokenscope_core::api`. This file holds the routes and the parsing every resource shares: query
//! parameters arrive as strings and are parsed here, so a bad one gets a message that names it.

use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    routing::{get, post},
};
use serde::Deserialize;

use tokenscope_core::analysis::diagnosis::{Cause, Thresholds};
use tokenscope_core::api::InstanceList;

use std::sync::Arc;

use crate::access::{IngestKeys, KeyLayer};
use crate::error::{Error, Result};
use crate::state::AppState;
use crate::store::{ORDER_KEYS, Order, RequestFilter, Store};

mod alerts;
mod compare;
mod diagnosis;
mod export;
mod fingerprints;
mod import;
pub mod incidents;
mod latency;
mod live;
mod me;
pub mod metrics;
mod requests;
mod slow_set;
mod usage;
mod waterfall;

pub const DEFAULT_LIMIT: i64 = 100;
pub const MAX_LIMIT: i64 = 10_000;

/// The query API. `keys` (when configured) decide which instances an import may write: those of
/// the key it presents, or any for a reader the read gate let in.
pub fn router(state: AppState, keys: Option<Arc<IngestKeys>>) -> Router {
    let import = Router::new()
        .route("/api/v1/import", post(import::import))
        .route_layer(KeyLayer::or_known_reader(keys, state.metrics().clone()))
        .with_state(state.clone());
    Router::new()
        .route("/api/v1/requests", get(requests::list_requests))
        .route("/api/v1/requests/{request_id}", get(requests::get_request))
        .route(
            "/api/v1/requests/{request_id}/diagnosis",
            get(diagnosis::diagnose_request),
        )
        .route(
            "/api/v1/requests/{request_id}/victims",
            get(diagnosis::victims),
        )
        .route(
            "/api/v1/requests/{request_id}/tokens.csv",
            get(export::tokens_csv),
        )
        .route(
            "/api/v1/requests/{request_id}/trace.json",
            get(export::chrome_trace),
        )
        .route(
            "/api/v1/incidents",
            get(incidents::list).post(incidents::create),
        )
        .route(
            "/api/v1/incidents/{slug}",
            get(incidents::get).delete(incidents::revoke),
        )
        .route(
            "/api/v1/incidents/{slug}/markdown",
            get(incidents::as_markdown),
        )
        .route("/incidents/{slug}/{file}", get(incidents::preview_image))
        .route("/api/v1/alerts/alertmanager", post(alerts::alertmanager))
        .route("/api/v1/diagnosis", get(diagnosis::diagnose_window))
        .route("/api/v1/waterfall", get(waterfall::waterfall))
        .route("/api/v1/live", get(live::live))
        .route("/api/v1/me", get(me::me))
        .route("/api/v1/latency", get(latency::latency))
        .route("/api/v1/usage", get(usage::usage))
        .route("/api/v1/slow-set", get(slow_set::slow_set))
        .route("/api/v1/fingerprints", get(fingerprints::fingerprints))
        .route("/api/v1/compare", get(compare::compare))
        .route("/api/v1/instances", get(list_instances))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(state)
        .merge(import)
        // Readers scoped to tenants reach only the routes that narrow to them.
        .layer(axum::middleware::from_fn(crate::access::scope::guard))
}

/// The filters of a request list (also of latency and compare).
#[derive(Debug, Default, Deserialize)]
pub struct ListParams {
    /// One instance, or several separated by commas.
    instance: Option<String>,
    engine: Option<String>,
    engine_version: Option<String>,
    model: Option<String>,
    from: Option<String>,
    to: Option<String>,
    /// A request id or a W3C trace id.
    find: Option<String>,
    /// `breach` or `met`: requests that broke, or met, the TTFT or TPOT SLO.
    slo: Option<String>,
    /// A cause of the stored findings (`queue_backlog`).
    cause: Option<String>,
    /// Slices: the tenant, LoRA adapter and priority requests were served with.
    tenant: Option<String>,
    adapter: Option<String>,
    priority: Option<String>,
    /// A prompt family: a block hash of the prompts' chains (16 hex digits).
    fingerprint: Option<String>,
    /// Buckets: prompt tokens in [prompt_min, prompt_max), `cached` (none, under_half,
    /// half_or_more), the UTC `hour` of arrival, the batch at arrival in [batch_min, batch_max).
    prompt_min: Option<String>,
    prompt_max: Option<String>,
    cached: Option<String>,
    hour: Option<String>,
    batch_min: Option<String>,
    batch_max: Option<String>,
    ttft_ms: Option<String>,
    tpot_ms: Option<String>,
    order: Option<String>,
    limit: Option<String>,
    offset: Option<String>,
}

fn parse_int(name: &str, value: Option<&str>) -> Result<Option<i64>> {
    value
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse::<i64>().map_err(|_| {
                Error::InvalidArgument(format!(
                    "{name}={v:?} is not an integer (Unix nanoseconds for from/to)"
                ))
            })
        })
        .transpose()
}

/// A view's width in pixels: `default` when absent, at most `max`.
fn width_px(value: Option<&str>, default: u32, max: u32) -> Result<u32> {
    let width = parse_int("width_px", value)?.unwrap_or(default.into());
    if !(1..=i64::from(max)).contains(&width) {
        return Err(Error::InvalidArgument(format!(
            "width_px={width} must be between 1 and {max}"
        )));
    }
    Ok(width as u32)
}

/// A comma-separated list (`gpu-7,gpu-8`); empty when absent.
fn list(v: Option<String>) -> Vec<String> {
    v.as_deref()
        .map(crate::store::split_list)
        .unwrap_or_default()
}

fn non_empty(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

/// The slice parameters (`tenant`, `adapter`, `priority`) as a request filter takes them: the
/// tenants (comma-separated), the LoRA adapter and the priority, each when given.
type Slice = (Option<Vec<String>>, Option<String>, Option<i32>);

fn slice(
    tenant: Option<String>,
    adapter: Option<String>,
    priority: &Option<String>,
) -> Result<Slice> {
    Ok((
        non_empty(tenant).map(|t| crate::store::split_list(&t)),
        non_empty(adapter),
        parse_num("priority", priority)?,
    ))
}

/// `{name}_min` and `{name}_max` as a range [min, max) of non-negative counts.
fn range(
    name: &str,
    min: &Option<String>,
    max: &Option<String>,
) -> Result<(Option<i32>, Option<i32>)> {
    let (lo, hi) = (
        parse_num::<i32>(&format!("{name}_min"), min)?,
        parse_num::<i32>(&format!("{name}_max"), max)?,
    );
    if lo.is_some_and(|v| v < 0)
        || hi.is_some_and(|v| v < 0)
        || matches!((lo, hi), (Some(a), Some(b)) if a >= b)
    {
        return Err(Error::InvalidArgument(format!(
            "{name}_min and {name}_max must be counts with the minimum below the maximum"
        )));
    }
    Ok((lo, hi))
}

/// The prefix cache's share of the prompt as the slow set buckets it.
fn cached(v: Option<String>) -> Result<Option<i32>> {
    match non_empty(v).as_deref() {
        None => Ok(None),
        Some("none") => Ok(Some(0)),
        Some("under_half") => Ok(Some(1)),
        Some("half_or_more") => Ok(Some(2)),
        Some(other) => Err(Error::InvalidArgument(format!(
            "cached={other:?} is not none, under_half or half_or_more"
        ))),
    }
}

/// A fingerprint as the store keeps block hashes: 16 lowercase hex digits.
fn fingerprint(v: Option<String>) -> Result<Option<String>> {
    match non_empty(v) {
        None => Ok(None),
        Some(f) if f.len() == 16 && f.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok(Some(f.to_ascii_lowercase()))
        }
        Some(f) => Err(Error::InvalidArgument(format!(
            "fingerprint={f:?} is not a block hash (16 hex digits)"
        ))),
    }
}

impl ListParams {
    fn into_filter(self) -> Result<RequestFilter> {
        let order = self.order.unwrap_or_else(|| "start".into());
        let order = Order::parse(&order).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "order={order:?} is not start, recent, or one of {} followed by _asc or _desc",
                ORDER_KEYS.join(", ")
            ))
        })?;
        let limit = parse_int("limit", self.limit.as_deref())?.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(Error::InvalidArgument(format!(
                "limit={limit} must be between 1 and {MAX_LIMIT}"
            )));
        }
        let offset = parse_int("offset", self.offset.as_deref())?.unwrap_or(0);
        if offset < 0 {
            return Err(Error::InvalidArgument(format!(
                "offset={offset} must not be negative"
            )));
        }
        let slo_breach = match non_empty(self.slo).as_deref() {
            None => None,
            Some("breach") => Some(true),
            Some("met") => Some(false),
            Some(other) => {
                return Err(Error::InvalidArgument(format!(
                    "slo={other:?} is not breach or met"
                )));
            }
        };
        let cause = match non_empty(self.cause) {
            Some(c) if Cause::parse(&c).is_none() => {
                return Err(Error::InvalidArgument(format!(
                    "cause={c:?} is not one of {}",
                    Cause::ALL.map(Cause::name).join(", ")
                )));
            }
            c => c,
        };
        let th = ThresholdParams {
            ttft_ms: self.ttft_ms,
            tpot_ms: self.tpot_ms,
            ..ThresholdParams::default()
        }
        .thresholds()?;
        let (tenants, lora_adapter, priority) = slice(self.tenant, self.adapter, &self.priority)?;
        Ok(RequestFilter {
            instances: list(self.instance),
            engine: non_empty(self.engine),
            engine_version: non_empty(self.engine_version),
            model: non_empty(self.model),
            from_ns: parse_int("from", self.from.as_deref())?,
            to_ns: parse_int("to", self.to.as_deref())?,
            find: non_empty(self.find).map(|f| f.trim().to_string()),
            slo_breach,
            slo_ns: ((th.ttft_ms * 1e6) as i64, (th.tpot_ms * 1e6) as i64),
            cause,
            tenants,
            lora_adapter,
            priority,
            fingerprint: fingerprint(self.fingerprint)?,
            prompt_tokens: range("prompt", &self.prompt_min, &self.prompt_max)?,
            cached_share: cached(self.cached)?,
            hour: match parse_num::<i32>("hour", &self.hour)? {
                Some(h) if !(0..24).contains(&h) => {
                    return Err(Error::InvalidArgument(format!(
                        "hour={h} is not an hour of the day (0–23, UTC)"
                    )));
                }
                h => h,
            },
            // A batch range open below starts at no batch at all.
            batch_size: match range("batch", &self.batch_min, &self.batch_max)? {
                (None, Some(max)) => (Some(0), Some(max)),
                r => r,
            },
            order,
            limit,
            offset,
        })
    }
}

/// SLOs and thresholds of a diagnosis; any left out keeps its default.
#[derive(Debug, Default, Deserialize)]
struct ThresholdParams {
    instance: Option<String>,
    from: Option<String>,
    to: Option<String>,
    limit: Option<String>,
    /// Slices of a window's listing (as a request list's).
    tenant: Option<String>,
    adapter: Option<String>,
    priority: Option<String>,
    ttft_ms: Option<String>,
    tpot_ms: Option<String>,
    eos_probability: Option<String>,
    token_probability: Option<String>,
    monopoly_iterations: Option<String>,
    kv_transfer_ms: Option<String>,
    stall_ms: Option<String>,
}

fn parse_num<T: std::str::FromStr>(name: &str, v: &Option<String>) -> Result<Option<T>> {
    v.as_deref()
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse::<T>()
                .map_err(|_| Error::InvalidArgument(format!("{name}={v:?} is not a number")))
        })
        .transpose()
}

impl ThresholdParams {
    fn thresholds(&self) -> Result<Thresholds> {
        let d = Thresholds::default();
        let positive = |name: &str, v: Option<f64>, default: f64| match v {
            Some(x) if x.is_nan() || x <= 0.0 => {
                Err(Error::InvalidArgument(format!("{name} must be positive")))
            }
            Some(x) => Ok(x),
            None => Ok(default),
        };
        Ok(Thresholds {
            ttft_ms: positive("ttft_ms", parse_num("ttft_ms", &self.ttft_ms)?, d.ttft_ms)?,
            tpot_ms: positive("tpot_ms", parse_num("tpot_ms", &self.tpot_ms)?, d.tpot_ms)?,
            eos_probability: parse_num("eos_probability", &self.eos_probability)?
                .unwrap_or(d.eos_probability),
            token_probability: parse_num("token_probability", &self.token_probability)?
                .unwrap_or(d.token_probability),
            monopoly_iterations: parse_num("monopoly_iterations", &self.monopoly_iterations)?
                .unwrap_or(d.monopoly_iterations),
            kv_transfer_ms: positive(
                "kv_transfer_ms",
                parse_num("kv_transfer_ms", &self.kv_transfer_ms)?,
                d.kv_transfer_ms,
            )?,
            stall_ms: positive(
                "stall_ms",
                parse_num("stall_ms", &self.stall_ms)?,
                d.stall_ms,
            )?,
        })
    }
}

async fn list_instances(State(store): State<Store>) -> Result<Json<InstanceList>> {
    Ok(Json(InstanceList {
        instances: crate::query::requests::instances(&store).await?,
    }))
}

async fn readyz(State(store): State<Store>) -> Result<(StatusCode, &'static str)> {
    store.ping().await?;
    Ok((StatusCode::OK, "ready"))
}

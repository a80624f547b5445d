//! The JSON query API (`/api/v1/...`) and health probes. Response types live in `app::api`.

use axum::{
    Json, Router,
    extract::{Path, Query, State},
    http::StatusCode,
    routing::{get, post},
};
use serde::Deserialize;

use app::analysis::diagnosis::{Diagnosis, Thresholds};
use app::analysis::waterfall::Waterfall;
use app::api::{InstanceList, LatencySeries, RequestDetail, RequestList};

use crate::error::{Error, Result};
use crate::ingest;
use crate::ingest::import::{Format, Options};
use crate::store::{ORDER_KEYS, Order, RequestFilter, Store};

mod compare;

pub const DEFAULT_LIMIT: i64 = 100;
pub const MAX_LIMIT: i64 = 10_000;

pub fn router(store: Store) -> Router {
    Router::new()
        .route("/api/v1/traces", post(ingest::http::post_traces))
        .route("/api/v1/import", post(import))
        .route("/api/v1/requests", get(list_requests))
        .route("/api/v1/requests/{request_id}", get(get_request))
        .route(
            "/api/v1/requests/{request_id}/diagnosis",
            get(diagnose_request),
        )
        .route("/api/v1/diagnosis", get(diagnose_window))
        .route("/api/v1/waterfall", get(waterfall))
        .route("/api/v1/latency", get(latency))
        .route("/api/v1/compare", get(compare::compare))
        .route("/api/v1/instances", get(list_instances))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(store)
}

/// Query parameters arrive as strings and are parsed here, so a bad one gets a message that
/// names it instead of a generic rejection.
#[derive(Debug, Default, Deserialize)]
pub struct ListParams {
    /// One instance, or several separated by commas.
    instance: Option<String>,
    engine: Option<String>,
    model: Option<String>,
    from: Option<String>,
    to: Option<String>,
    /// A request id or a W3C trace id.
    find: Option<String>,
    /// `breach` or `met`: requests that broke, or met, the TTFT or TPOT SLO.
    slo: Option<String>,
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

fn non_empty(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
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
        let th = ThresholdParams {
            ttft_ms: self.ttft_ms,
            tpot_ms: self.tpot_ms,
            ..ThresholdParams::default()
        }
        .thresholds()?;
        Ok(RequestFilter {
            instances: non_empty(self.instance)
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            engine: non_empty(self.engine),
            model: non_empty(self.model),
            from_ns: parse_int("from", self.from.as_deref())?,
            to_ns: parse_int("to", self.to.as_deref())?,
            find: non_empty(self.find).map(|f| f.trim().to_string()),
            slo_breach,
            slo_ns: ((th.ttft_ms * 1e6) as i64, (th.tpot_ms * 1e6) as i64),
            order,
            limit,
            offset,
        })
    }
}

async fn list_requests(
    State(store): State<Store>,
    Query(params): Query<ListParams>,
) -> Result<Json<RequestList>> {
    let filter = params.into_filter()?;
    let (requests, total) = store.list_requests(&filter).await?;
    Ok(Json(RequestList {
        requests,
        total: Some(total),
    }))
}

async fn get_request(
    State(store): State<Store>,
    Path(request_id): Path<String>,
    Query(p): Query<ThresholdParams>,
) -> Result<Json<RequestDetail>> {
    let th = p.thresholds()?;
    let instance = non_empty(p.instance.clone());
    Ok(Json(
        store
            .get_request(&request_id, instance.as_deref(), &th)
            .await?,
    ))
}

async fn list_instances(State(store): State<Store>) -> Result<Json<InstanceList>> {
    Ok(Json(InstanceList {
        instances: store.list_instances().await?,
    }))
}

#[derive(Debug, Deserialize)]
struct ImportParams {
    format: Option<String>,
    instance: Option<String>,
    model: Option<String>,
    clock_offset_s: Option<String>,
}

/// `POST /api/v1/import?format=trtllm-perf-metrics|trtllm-iteration-log|openai`: the file is the body.
async fn import(
    State(store): State<Store>,
    Query(p): Query<ImportParams>,
    body: axum::body::Bytes,
) -> Result<Json<app::api::ImportReply>> {
    let format = Format::parse(p.format.as_deref().unwrap_or(""))?;
    let clock_offset_s = non_empty(p.clock_offset_s)
        .map(|v| {
            v.parse::<f64>().map_err(|_| {
                Error::InvalidArgument(format!("clock_offset_s={v:?} is not a number of seconds"))
            })
        })
        .transpose()?;
    let opts = Options {
        instance: non_empty(p.instance).unwrap_or_else(|| format.default_instance().into()),
        model: non_empty(p.model),
        clock_offset_s,
        now_ns: crate::clock::now_ns(),
    };
    Ok(Json(
        ingest::import::import(&store, format, &body, &opts).await?,
    ))
}

/// SLOs and thresholds of a diagnosis; any left out keeps its default.
#[derive(Debug, Default, Deserialize)]
struct ThresholdParams {
    instance: Option<String>,
    from: Option<String>,
    to: Option<String>,
    limit: Option<String>,
    ttft_ms: Option<String>,
    tpot_ms: Option<String>,
    eos_probability: Option<String>,
    token_probability: Option<String>,
    monopoly_iterations: Option<String>,
    kv_transfer_ms: Option<String>,
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
        })
    }
}

async fn diagnose_request(
    State(store): State<Store>,
    Path(request_id): Path<String>,
    Query(p): Query<ThresholdParams>,
) -> Result<Json<Diagnosis>> {
    let th = p.thresholds()?;
    let instance = non_empty(p.instance.clone());
    Ok(Json(
        store
            .diagnose_request(&request_id, instance.as_deref(), &th)
            .await?,
    ))
}

#[derive(Debug, serde::Serialize)]
struct DiagnosisList {
    diagnoses: Vec<Diagnosis>,
}

async fn diagnose_window(
    State(store): State<Store>,
    Query(p): Query<ThresholdParams>,
) -> Result<Json<DiagnosisList>> {
    let th = p.thresholds()?;
    let limit = parse_int("limit", p.limit.as_deref())?.unwrap_or(500);
    if !(1..=5000).contains(&limit) {
        return Err(Error::InvalidArgument(format!(
            "limit={limit} must be between 1 and 5000"
        )));
    }
    let filter = RequestFilter {
        instances: non_empty(p.instance.clone()).into_iter().collect(),
        from_ns: parse_int("from", p.from.as_deref())?,
        to_ns: parse_int("to", p.to.as_deref())?,
        ..RequestFilter::default()
    };
    let diagnoses = store.diagnose_window(&filter, &th, limit).await?;
    Ok(Json(DiagnosisList { diagnoses }))
}

#[derive(Debug, Deserialize)]
struct WaterfallParams {
    instance: Option<String>,
    from: Option<String>,
    to: Option<String>,
    width_px: Option<String>,
    compact: Option<String>,
    first_row: Option<String>,
    rows: Option<String>,
    focus: Option<String>,
    /// Request ids, comma-separated, to show right below `focus`.
    pull: Option<String>,
}

/// `GET /api/v1/waterfall?instance=&from=&to=&width_px=&compact=&first_row=&rows=&focus=&pull=`:
/// tracks and the iteration lane.
async fn waterfall(
    State(store): State<Store>,
    Query(p): Query<WaterfallParams>,
) -> Result<Json<Waterfall>> {
    let instance = non_empty(p.instance)
        .ok_or_else(|| Error::InvalidArgument("instance= is required".into()))?;
    let width = width_px(p.width_px.as_deref(), 1200, 20_000)?;
    let compact = matches!(p.compact.as_deref(), Some("true" | "1"));
    let from = parse_int("from", p.from.as_deref())?;
    let to = parse_int("to", p.to.as_deref())?;
    let first_row = parse_int("first_row", p.first_row.as_deref())?.unwrap_or(0);
    let rows = parse_int("rows", p.rows.as_deref())?.unwrap_or(500);
    if first_row < 0 || !(1..=5000).contains(&rows) {
        return Err(Error::InvalidArgument(
            "first_row must be ≥ 0 and rows between 1 and 5000".into(),
        ));
    }
    let view = crate::store::Rows {
        first_row: first_row as u32,
        rows: rows as u32,
        focus: non_empty(p.focus),
        pull: non_empty(p.pull)
            .map(|v| v.split(',').map(str::to_string).collect())
            .unwrap_or_default(),
    };
    Ok(Json(
        store
            .waterfall(&instance, from, to, width, compact, &view)
            .await?,
    ))
}

#[derive(Debug, Deserialize)]
struct LatencyParams {
    #[serde(flatten)]
    list: ListParams,
    width_px: Option<String>,
}

/// `GET /api/v1/latency?instance=&engine=&model=&from=&to=&width_px=&ttft_ms=&tpot_ms=`:
/// TTFT/TPOT percentiles and SLO breaches over time, a bucket per pixel at most.
async fn latency(
    State(store): State<Store>,
    Query(p): Query<LatencyParams>,
) -> Result<Json<LatencySeries>> {
    let width = width_px(p.width_px.as_deref(), 600, 5_000)?;
    let filter = p.list.into_filter()?;
    // The SLOs are the diagnosis's, with the same defaults and checks.
    let slo_ms = (filter.slo_ns.0 as f64 / 1e6, filter.slo_ns.1 as f64 / 1e6);
    Ok(Json(store.latency(&filter, width, slo_ms).await?))
}

async fn readyz(State(store): State<Store>) -> Result<(StatusCode, &'static str)> {
    store.ping().await?;
    Ok((StatusCode::OK, "ready"))
}

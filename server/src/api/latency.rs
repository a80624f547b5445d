//! `GET /api/v1/latency`: TTFT/TPOT percentiles and SLO breaches over time.

use axum::{
    Json,
    extract::{Query, State},
};
use serde::Deserialize;

use tokenscope_core::api::LatencySeries;

use super::{ListParams, width_px};
use crate::access::Scope;
use crate::error::Result;
use crate::store::Store;

#[derive(Debug, Deserialize)]
pub(super) struct LatencyParams {
    #[serde(flatten)]
    list: ListParams,
    width_px: Option<String>,
}

/// `GET /api/v1/latency?instance=&engine=&model=&from=&to=&width_px=&ttft_ms=&tpot_ms=`:
/// TTFT/TPOT percentiles and SLO breaches over time, a bucket per pixel at most.
pub(super) async fn latency(
    State(store): State<Store>,
    scope: Scope,
    Query(p): Query<LatencyParams>,
) -> Result<Json<LatencySeries>> {
    let width = width_px(p.width_px.as_deref(), 600, 5_000)?;
    let mut filter = p.list.into_filter()?;
    filter.tenants = scope.narrow(filter.tenants);
    // The SLOs are the diagnosis's, with the same defaults and checks.
    let slo_ms = (filter.slo_ns.0 as f64 / 1e6, filter.slo_ns.1 as f64 / 1e6);
    Ok(Json(
        crate::query::latency::series(&store, &filter, width, slo_ms).await?,
    ))
}

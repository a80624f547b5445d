//! `GET /api/v1/slow-set`: what the slow requests of a window have in common, against the rest.

use axum::{
    Json,
    extract::{Query, State},
};
use serde::Deserialize;

use tokenscope_core::api::SlowSet;

use super::{ListParams, parse_num};
use crate::access::Scope;
use crate::error::{Error, Result};
use crate::store::{Slow, Store};

#[derive(Debug, Deserialize)]
pub(super) struct SlowSetParams {
    #[serde(flatten)]
    list: ListParams,
    /// `slo` (TTFT or TPOT over its SLO, the default), or `ttft`, `tpot`, `e2e` with a range.
    slow: Option<String>,
    /// The range of `slow`'s metric, in ms (a brushed range; `max_ms` open when left out).
    min_ms: Option<String>,
    max_ms: Option<String>,
}

/// `GET /api/v1/slow-set?<filters>&slow=slo|ttft|tpot|e2e&min_ms=&max_ms=&ttft_ms=&tpot_ms=`.
pub(super) async fn slow_set(
    State(store): State<Store>,
    scope: Scope,
    Query(p): Query<SlowSetParams>,
) -> Result<Json<SlowSet>> {
    let asked = p.slow.as_deref().filter(|s| !s.is_empty()).unwrap_or("slo");
    let slow = match ["ttft", "tpot", "e2e"].into_iter().find(|m| *m == asked) {
        Some(metric) => Some(metric),
        None if asked == "slo" => None,
        None => {
            return Err(Error::InvalidArgument(format!(
                "slow={asked:?} is not slo, ttft, tpot or e2e"
            )));
        }
    };
    let min: Option<f64> = parse_num("min_ms", &p.min_ms)?;
    let max: Option<f64> = parse_num("max_ms", &p.max_ms)?;
    let mut filter = p.list.into_filter()?;
    filter.tenants = scope.narrow(filter.tenants);
    let ns = |ms: f64| (ms * 1e6) as i64;
    let slow = match (slow, min) {
        (None, _) => Slow::Slo(filter.slo_ns.0, filter.slo_ns.1),
        (Some(metric), Some(min)) if min.is_finite() && max.is_none_or(|m| m >= min) => {
            Slow::Range(metric, ns(min), max.map_or(i64::MAX, ns))
        }
        (Some(metric), _) => {
            return Err(Error::InvalidArgument(format!(
                "slow={metric} needs min_ms (and a max_ms not below it)"
            )));
        }
    };
    Ok(Json(
        crate::query::slow_set::slow_set(&store, &filter, slow).await?,
    ))
}

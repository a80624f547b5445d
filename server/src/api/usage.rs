//! `GET /api/v1/usage`: GPU time by tenant, LoRA adapter or model over a window, as JSON or
//! (`format=csv`) the chart's rows as CSV.

use axum::{
    Json,
    extract::{Query, State},
    http::header,
    response::{IntoResponse, Response},
};
use serde::Deserialize;

use super::{ListParams, non_empty, width_px};
use crate::access::Scope;
use crate::error::{Error, Result};
use crate::store::{Store, UsageBy};

#[derive(Debug, Deserialize)]
pub(super) struct UsageParams {
    #[serde(flatten)]
    list: ListParams,
    /// `tenant` (default), `adapter` or `model`.
    by: Option<String>,
    width_px: Option<String>,
    /// `json` (default) or `csv`.
    format: Option<String>,
}

/// `GET /api/v1/usage?instance=&engine=&model=&tenant=&adapter=&from=&to=&by=&width_px=&format=`.
pub(super) async fn usage(
    State(store): State<Store>,
    scope: Scope,
    Query(p): Query<UsageParams>,
) -> Result<Response> {
    let width = width_px(p.width_px.as_deref(), 600, 5_000)?;
    let by = non_empty(p.by).unwrap_or_else(|| "tenant".into());
    let by = UsageBy::parse(&by).ok_or_else(|| {
        Error::InvalidArgument(format!("by={by:?} is not tenant, adapter or model"))
    })?;
    let csv = match non_empty(p.format).as_deref() {
        None | Some("json") => false,
        Some("csv") => true,
        Some(other) => {
            return Err(Error::InvalidArgument(format!(
                "format={other:?} is not json or csv"
            )));
        }
    };
    let mut f = p.list.into_filter()?;
    // A reader scoped to tenants sees its tenants' time only.
    f.tenants = scope.narrow(f.tenants);
    // GPU time is kept per minute by model, tenant and adapter; a request's other traits are not.
    for (name, set) in [
        ("priority", f.priority.is_some()),
        ("cause", f.cause.is_some()),
        ("slo", f.slo_breach.is_some()),
        ("find", f.find.is_some()),
    ] {
        if set {
            return Err(Error::InvalidArgument(format!(
                "{name} does not apply to GPU time (it is kept by instance, model, tenant and adapter)"
            )));
        }
    }
    let u = crate::query::usage::window(&store, &f, by, width).await?;
    if !csv {
        return Ok(Json(u).into_response());
    }
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"gpu-time-by-{}.csv\"", u.by),
            ),
        ],
        crate::export::usage_csv(&u),
    )
        .into_response())
}

//! `GET /api/v1/requests` (a filtered, ordered page) and `GET /api/v1/requests/{id}`.

use axum::{
    Json,
    extract::{Path, Query, State},
    response::Response,
};

use tokenscope_core::api::RequestList;

use super::{ListParams, ThresholdParams, list};
use crate::access::Scope;
use crate::error::Result;
use crate::store::Store;

pub(super) async fn list_requests(
    State(store): State<Store>,
    scope: Scope,
    Query(params): Query<ListParams>,
) -> Result<Json<RequestList>> {
    let mut filter = params.into_filter()?;
    filter.tenants = scope.narrow(filter.tenants);
    let (requests, total, findings_behind) = crate::query::requests::list(&store, &filter).await?;
    Ok(Json(RequestList {
        requests,
        total: Some(total.count),
        total_estimated: total.estimated,
        findings_behind,
    }))
}

/// A reader scoped to tenants gets only its own requests, other tenants' ids in it aliased.
pub(super) async fn get_request(
    State(store): State<Store>,
    scope: Scope,
    Path(request_id): Path<String>,
    Query(p): Query<ThresholdParams>,
) -> Result<Response> {
    let th = p.thresholds()?;
    let instances = list(p.instance.clone());
    let (loaded, loads) =
        crate::query::requests::load_with_steps(&store, &request_id, &instances).await?;
    let redact = scope.request(&store, &loaded).await?;
    redact.json(&crate::query::requests::detail(loaded, &loads, &th))
}

//! `GET /api/v1/requests` (a filtered, ordered page) and `GET /api/v1/requests/{id}`.

use axum::{
    Json,
    extract::{Path, Query, State},
};

use tokenscope_core::api::{RequestDetail, RequestList};

use super::{ListParams, ThresholdParams, list};
use crate::error::Result;
use crate::store::Store;

pub(super) async fn list_requests(
    State(store): State<Store>,
    Query(params): Query<ListParams>,
) -> Result<Json<RequestList>> {
    let filter = params.into_filter()?;
    let (requests, total, findings_behind) = crate::query::requests::list(&store, &filter).await?;
    Ok(Json(RequestList {
        requests,
        total: Some(total),
        findings_behind,
    }))
}

pub(super) async fn get_request(
    State(store): State<Store>,
    Path(request_id): Path<String>,
    Query(p): Query<ThresholdParams>,
) -> Result<Json<RequestDetail>> {
    let th = p.thresholds()?;
    let instances = list(p.instance.clone());
    Ok(Json(
        crate::query::requests::get(&store, &request_id, &instances, &th).await?,
    ))
}

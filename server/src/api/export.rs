//! `GET /api/v1/requests/{id}/tokens.csv` and `GET /api/v1/requests/{id}/trace.json`: a request
//! as files to download (see `crate::export` for the formats).

use axum::{
    extract::{Path, Query, State},
    http::header,
    response::IntoResponse,
};

use tokenscope_core::api::RequestDetail;

use super::{ThresholdParams, list};
use crate::access::Scope;
use crate::error::Result;
use crate::export;
use crate::store::Store;

/// The request (its instance and thresholds from the query) rendered by `render`, as an
/// attachment named `{id}.{suffix}`.
async fn download(
    store: &Store,
    scope: &Scope,
    request_id: &str,
    p: &ThresholdParams,
    suffix: &str,
    content_type: &'static str,
    render: fn(&RequestDetail) -> String,
) -> Result<impl IntoResponse + use<>> {
    let th = p.thresholds()?;
    let (loaded, loads) =
        crate::query::requests::load_with_steps(store, request_id, &list(p.instance.clone()))
            .await?;
    // A reader scoped to tenants: its own request only, other tenants' ids aliased.
    let redact = scope.request(store, &loaded).await?;
    let d = crate::query::requests::detail(loaded, &loads, &th);
    let name = format!("{}.{suffix}", export::file_stem(request_id));
    Ok((
        [
            (header::CONTENT_TYPE, content_type.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        redact.apply(&render(&d)),
    ))
}

pub(super) async fn tokens_csv(
    State(store): State<Store>,
    scope: Scope,
    Path(request_id): Path<String>,
    Query(p): Query<ThresholdParams>,
) -> Result<impl IntoResponse> {
    let csv = "text/csv; charset=utf-8";
    download(
        &store,
        &scope,
        &request_id,
        &p,
        "tokens.csv",
        csv,
        export::tokens_csv,
    )
    .await
}

pub(super) async fn chrome_trace(
    State(store): State<Store>,
    scope: Scope,
    Path(request_id): Path<String>,
    Query(p): Query<ThresholdParams>,
) -> Result<impl IntoResponse> {
    let json = "application/json";
    download(
        &store,
        &scope,
        &request_id,
        &p,
        "trace.json",
        json,
        export::chrome_trace,
    )
    .await
}

//! `GET /api/v1/requests/{id}/tokens.csv` and `GET /api/v1/requests/{id}/trace.json`: a request
//! as files to download (see `crate::export` for the formats).

use axum::{
    extract::{Path, Query, State},
    http::header,
    response::IntoResponse,
};

use tokenscope_core::api::RequestDetail;

use super::{ThresholdParams, list};
use crate::error::Result;
use crate::export;
use crate::store::Store;

/// The request (its instance and thresholds from the query) rendered by `render`, as an
/// attachment named `{id}.{suffix}`.
async fn download(
    store: &Store,
    request_id: &str,
    p: &ThresholdParams,
    suffix: &str,
    content_type: &'static str,
    render: fn(&RequestDetail) -> String,
) -> Result<impl IntoResponse + use<>> {
    let th = p.thresholds()?;
    let d = crate::query::requests::get(store, request_id, &list(p.instance.clone()), &th).await?;
    let name = format!("{}.{suffix}", export::file_stem(request_id));
    Ok((
        [
            (header::CONTENT_TYPE, content_type.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        render(&d),
    ))
}

pub(super) async fn tokens_csv(
    State(store): State<Store>,
    Path(request_id): Path<String>,
    Query(p): Query<ThresholdParams>,
) -> Result<impl IntoResponse> {
    let csv = "text/csv; charset=utf-8";
    download(
        &store,
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
    Path(request_id): Path<String>,
    Query(p): Query<ThresholdParams>,
) -> Result<impl IntoResponse> {
    let json = "application/json";
    download(
        &store,
        &request_id,
        &p,
        "trace.json",
        json,
        export::chrome_trace,
    )
    .await
}

//! `GET /api/v1/requests/{id}/tokens.csv` and `GET /api/v1/requests/{id}/trace.json`: a request
//! as files to download (see `crate::export` for the formats).

use axum::{
    extract::{Path, Query, State},
    http::header,
    response::IntoResponse,
};

use super::{ThresholdParams, non_empty};
use crate::error::Result;
use crate::export;
use crate::store::Store;

async fn detail(
    store: &Store,
    request_id: &str,
    p: &ThresholdParams,
) -> Result<app::api::RequestDetail> {
    let th = p.thresholds()?;
    let instance = non_empty(p.instance.clone());
    store
        .get_request(request_id, instance.as_deref(), &th)
        .await
}

fn attachment(content_type: &'static str, name: String, body: String) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
}

pub(super) async fn tokens_csv(
    State(store): State<Store>,
    Path(request_id): Path<String>,
    Query(p): Query<ThresholdParams>,
) -> Result<impl IntoResponse> {
    let d = detail(&store, &request_id, &p).await?;
    Ok(attachment(
        "text/csv; charset=utf-8",
        format!("{}.tokens.csv", export::file_stem(&request_id)),
        export::tokens_csv(&d),
    ))
}

pub(super) async fn chrome_trace(
    State(store): State<Store>,
    Path(request_id): Path<String>,
    Query(p): Query<ThresholdParams>,
) -> Result<impl IntoResponse> {
    let d = detail(&store, &request_id, &p).await?;
    Ok(attachment(
        "application/json",
        format!("{}.trace.json", export::file_stem(&request_id)),
        export::chrome_trace(&d),
    ))
}

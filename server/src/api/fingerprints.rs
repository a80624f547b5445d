//! `GET /api/v1/fingerprints`: a window's prompt families — requests grouped by the block-hash
//! chains of their prompts — with their cache hits and why warm ones missed.

use axum::{
    Json,
    extract::{Query, State},
};

use tokenscope_core::api::Fingerprints;

use super::ListParams;
use crate::error::Result;
use crate::store::Store;

/// `GET /api/v1/fingerprints?<filters>` (a request list's; order and paging do not apply).
pub(super) async fn fingerprints(
    State(store): State<Store>,
    Query(p): Query<ListParams>,
) -> Result<Json<Fingerprints>> {
    let filter = p.into_filter()?;
    Ok(Json(
        crate::query::fingerprints::fingerprints(&store, &filter).await?,
    ))
}

//! `GET /api/v1/fingerprints`: a window's prompt families — requests grouped by the block-hash
//! chains of their prompts — with their cache hits and why warm ones missed.

use axum::{
    extract::{Query, State},
    response::Response,
};

use tokenscope_core::api::Fingerprints;

use super::ListParams;
use crate::access::Scope;
use crate::error::Result;
use crate::store::Store;

/// `GET /api/v1/fingerprints?<filters>` (a request list's; order and paging do not apply).
/// A reader scoped to tenants sees its tenants' families; the requests whose prefills may have
/// evicted a family's blocks are named by alias when they are another tenant's.
pub(super) async fn fingerprints(
    State(store): State<Store>,
    scope: Scope,
    Query(p): Query<ListParams>,
) -> Result<Response> {
    let mut filter = p.into_filter()?;
    filter.tenants = scope.narrow(filter.tenants);
    let fp: Fingerprints = crate::query::fingerprints::fingerprints(&store, &filter).await?;
    scope.fingerprints(&store, &fp).await?.json(&fp)
}

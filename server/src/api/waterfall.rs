//! `GET /api/v1/waterfall`: an instance's tracks and iteration lane at a pixel width.

use axum::{
    extract::{Query, State},
    response::Response,
};
use serde::Deserialize;

use tokenscope_core::analysis::waterfall::{RowOrder, Waterfall};

use super::{list, non_empty, parse_int, width_px};
use crate::access::Scope;
use crate::error::{Error, Result};
use crate::store::Store;

#[derive(Debug, Deserialize)]
pub(super) struct WaterfallParams {
    instance: Option<String>,
    from: Option<String>,
    to: Option<String>,
    width_px: Option<String>,
    compact: Option<String>,
    first_row: Option<String>,
    rows: Option<String>,
    focus: Option<String>,
    /// Request ids, comma-separated, to show right below `focus`.
    pull: Option<String>,
    /// arrival (default), ttft, tpot, prompt or duration: the largest first.
    sort: Option<String>,
}

/// `GET /api/v1/waterfall?instance=&from=&to=&width_px=&compact=&first_row=&rows=&focus=&pull=&sort=`:
/// tracks and the iteration lane.
pub(super) async fn waterfall(
    State(store): State<Store>,
    scope: Scope,
    Query(p): Query<WaterfallParams>,
) -> Result<Response> {
    // Several instances (comma-separated) are drawn as one: a PD deployment's prefill and
    // decode instances, with each request's parts on one track.
    let instances = list(p.instance);
    if instances.is_empty() {
        return Err(Error::InvalidArgument("instance= is required".into()));
    }
    let width = width_px(p.width_px.as_deref(), 1200, 20_000)?;
    let compact = matches!(p.compact.as_deref(), Some("true" | "1"));
    let from = parse_int("from", p.from.as_deref())?;
    let to = parse_int("to", p.to.as_deref())?;
    let first_row = parse_int("first_row", p.first_row.as_deref())?.unwrap_or(0);
    let rows = parse_int("rows", p.rows.as_deref())?.unwrap_or(500);
    if first_row < 0 || !(1..=5000).contains(&rows) {
        return Err(Error::InvalidArgument(
            "first_row must be ≥ 0 and rows between 1 and 5000".into(),
        ));
    }
    let order = match non_empty(p.sort) {
        None => RowOrder::Arrival,
        Some(s) => RowOrder::parse(&s).ok_or_else(|| {
            let names: Vec<&str> = RowOrder::ALL.iter().map(|o| o.name()).collect();
            Error::InvalidArgument(format!("sort={s:?} is not one of {}", names.join(", ")))
        })?,
    };
    let view = crate::query::waterfall::Rows {
        first_row: first_row as u32,
        rows: rows as u32,
        focus: non_empty(p.focus),
        pull: list(p.pull),
        order,
    };
    let mut w: Waterfall =
        crate::query::waterfall::waterfall(&store, &instances, from, to, width, compact, &view)
            .await?;
    // A reader scoped to tenants sees other tenants' tracks under aliases.
    let redact = scope.waterfall(&store, &instances, &mut w).await?;
    redact.json(&w)
}

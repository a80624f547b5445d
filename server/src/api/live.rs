//! `GET /api/v1/live?instance=`: server-sent events saying that new data was stored for these
//! instances (all: none named), so an open page on "now" can read its view again. One stream per
//! page; see `crate::live` for why a slow or idle page costs next to nothing.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt};
use serde::Deserialize;

use tokenscope_core::api::LiveTick;

use super::list;
use crate::live::{Follow, Live, Said};

/// A comment this often keeps proxies from closing a quiet stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(Debug, Deserialize)]
pub(super) struct LiveParams {
    /// One instance, or several separated by commas; none: all.
    instance: Option<String>,
}

pub(super) async fn live(
    State(live): State<Live>,
    Query(p): Query<LiveParams>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let page = live.follow(list(p.instance));
    let ready = event("ready", &page.first());
    let ticks = futures_util::stream::unfold(page, |mut page: Follow| async move {
        let e = match page.next().await? {
            Said::Ready(t) => event("ready", &t),
            Said::Ingested(t) => event("ingested", &t),
        };
        Some((e, page))
    });
    Sse::new(futures_util::stream::once(async { ready }).chain(ticks))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

fn event(name: &str, tick: &LiveTick) -> Result<Event, Infallible> {
    Ok(Event::default()
        .event(name)
        .data(serde_json::to_string(tick).unwrap_or_default()))
}

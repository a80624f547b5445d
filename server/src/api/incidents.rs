//! Incidents: `POST /api/v1/incidents` freezes requests into a link, `GET` reads one or lists
//! them, `DELETE` revokes; `/markdown` is the text for a ticket; `/incidents/{slug}/preview.png`
//! and `.svg` are the link preview (the PNG is rendered once and kept).

use axum::{
    Extension, Json,
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode, header},
    response::IntoResponse,
};
use serde::Deserialize;

use tokenscope_core::api::{CreatedIncident, Incident, IncidentList, NewIncident};

use super::{non_empty, parse_int};
use crate::access::Reader;
use crate::access::Scope;
use crate::access::scope::Ids;
use crate::error::{Error, Result};
use crate::export::{markdown, preview};
use crate::query::incidents;
use crate::store::{Store, split_list};

/// A reader scoped to tenants freezes only its own requests, and the incident holds only what
/// it may see: other tenants' requests under their aliases.
pub(super) async fn create(
    State(store): State<Store>,
    scope: Scope,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<CreatedIncident>)> {
    let new: NewIncident = serde_json::from_slice(&body)
        .map_err(|e| Error::InvalidArgument(format!("the body is not a new incident: {e}")))?;
    // A scoped reader's requests are checked before anything is frozen.
    let instances = split_list(&new.instance);
    let mut ids = Ids::default();
    if scope != Scope::All {
        for id in &new.requests {
            let l = crate::query::requests::load(&store, id, &instances).await?;
            ids.extend(scope.request_ids(&store, &l).await?);
        }
    }
    let mut draft = incidents::draft(&store, &new, crate::clock::now_ns()).await?;
    if let Scope::Tenants { tenants, .. } = &scope {
        ids.extend(
            scope
                .waterfall_ids(&store, &instances, draft.waterfall_mut())
                .await?,
        );
        let redact = ids.redactor(&scope);
        draft.scope(|t| redact.apply(t), tenants.clone())?;
    }
    let slug = incidents::save(&store, draft).await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedIncident {
            path: format!("/incidents/{slug}"),
            slug,
        }),
    ))
}

#[derive(Debug, Deserialize)]
pub(super) struct ListParams {
    q: Option<String>,
    limit: Option<String>,
}

pub(super) async fn list(
    State(store): State<Store>,
    scope: Scope,
    Query(p): Query<ListParams>,
) -> Result<Json<IncidentList>> {
    let limit = parse_int("limit", p.limit.as_deref())?.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(Error::InvalidArgument(
            "limit must be between 1 and 1000".into(),
        ));
    }
    let q = non_empty(p.q);
    Ok(Json(IncidentList {
        incidents: incidents::list(&store, q.as_deref(), limit, scope.tenants()).await?,
    }))
}

/// The incident; `can_revoke` when the read gate let the reader in as a reader (not only
/// through the public link, which carries no [`Reader`]).
pub(super) async fn get(
    State(store): State<Store>,
    scope: Scope,
    Path(slug): Path<String>,
    reader: Option<Extension<Reader>>,
) -> Result<Json<Incident>> {
    let mut incident = incidents::get(&store, &slug, scope.tenants()).await?;
    // Revoking is not open to readers scoped to tenants.
    incident.can_revoke = reader.is_some() && scope == Scope::All;
    Ok(Json(incident))
}

pub(super) async fn revoke(
    State(store): State<Store>,
    Path(slug): Path<String>,
) -> Result<StatusCode> {
    store.revoke_incident(&slug, crate::clock::now_ns()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The incident page's full address as the client reached this server.
pub(super) fn page_url(headers: &HeaderMap, slug: &str) -> String {
    let origin = tokenscope_core::links::origin(|n| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    })
    .unwrap_or_else(|| "http://localhost:3000".into());
    format!("{origin}/incidents/{slug}")
}

pub(super) async fn as_markdown(
    State(store): State<Store>,
    scope: Scope,
    Path(slug): Path<String>,
    headers: HeaderMap,
) -> Result<impl IntoResponse> {
    let incident = incidents::get(&store, &slug, scope.tenants()).await?;
    Ok((
        [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
        markdown::incident(&incident, &page_url(&headers, &slug)),
    ))
}

/// `preview.png` or `preview.svg`.
pub(super) async fn preview_image(
    State(store): State<Store>,
    scope: Scope,
    Path((slug, file)): Path<(String, String)>,
) -> Result<impl IntoResponse> {
    let cache = [(header::CACHE_CONTROL, "public, max-age=3600")];
    // The cached picture is served without reading the incident: check a scoped reader first.
    if scope != Scope::All {
        incidents::get(&store, &slug, scope.tenants()).await?;
    }
    match file.as_str() {
        "preview.png" => {
            let png = match store.incident_preview(&slug).await? {
                Some(png) => png,
                None => {
                    let incident = incidents::get(&store, &slug, scope.tenants()).await?;
                    // Drawing is CPU work: off the async threads.
                    let png = tokio::task::spawn_blocking(move || preview::png(&incident))
                        .await
                        .map_err(|e| Error::Internal(format!("preview: {e}")))??;
                    store.cache_incident_preview(&slug, &png).await?;
                    png
                }
            };
            Ok(([(header::CONTENT_TYPE, "image/png")], cache, png).into_response())
        }
        "preview.svg" => {
            let incident = incidents::get(&store, &slug, scope.tenants()).await?;
            let svg = preview::svg(&incident)?;
            Ok(([(header::CONTENT_TYPE, "image/svg+xml")], cache, svg).into_response())
        }
        other => Err(Error::NotFound(format!(
            "no {other:?} for an incident: preview.png or preview.svg"
        ))),
    }
}

/// In front of the incident page: a revoked link answers 410 Gone with a page that says so
/// (the page itself would render a 200 around the API's error).
pub async fn gate(
    State(store): State<Store>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let slug = req
        .uri()
        .path()
        .strip_prefix("/incidents/")
        .filter(|s| !s.is_empty() && !s.contains('/'))
        .map(str::to_string);
    if let Some(slug) = slug
        && let Ok(Some(true)) = store.incident_revoked(&slug).await
    {
        return (
            StatusCode::GONE,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Incident revoked · tokenscope</title>\
             <link rel=\"stylesheet\" href=\"/pkg/tokenscope.css\"></head><body><main><section class=\"panel\">\
             <h1>This incident was revoked</h1><p>Whoever created it withdrew the link; its evidence is no longer kept here.</p>\
             <p><a href=\"/incidents\">All incidents</a></p></section></main></body></html>",
        )
            .into_response();
    }
    next.run(req).await
}

//! `GET /api/v1/requests/{id}/diagnosis`, `GET /api/v1/requests/{id}/victims` (whom its
//! prefill held up) and `GET /api/v1/diagnosis` (a window's degraded requests, worst first).

use axum::{
    extract::{Path, Query, State},
    response::Response,
};

use tokenscope_core::analysis::diagnosis::Diagnosis;
use tokenscope_core::api::VictimList;

use super::{ThresholdParams, list, parse_int};
use crate::access::Scope;
use crate::error::{Error, Result};
use crate::store::{RequestFilter, Store};

pub(super) async fn diagnose_request(
    State(store): State<Store>,
    scope: Scope,
    Path(request_id): Path<String>,
    Query(p): Query<ThresholdParams>,
) -> Result<Response> {
    let th = p.thresholds()?;
    let instances = list(p.instance.clone());
    let l = crate::query::requests::load(&store, &request_id, &instances).await?;
    let redact = scope.request(&store, &l).await?;
    redact.json(&crate::query::diagnosis::loaded(&store, &l, &th).await?)
}

/// `GET /api/v1/requests/{id}/victims`: the requests whose stored findings name this one as a
/// culprit.
pub(super) async fn victims(
    State(store): State<Store>,
    scope: Scope,
    Path(request_id): Path<String>,
    Query(p): Query<ThresholdParams>,
) -> Result<Response> {
    let instances = list(p.instance.clone());
    let l = crate::query::requests::load(&store, &request_id, &instances).await?;
    let redact = scope.request(&store, &l).await?;
    let v: VictimList = crate::query::findings::victims(&store, &l).await?;
    redact.json(&v)
}

#[derive(Debug, serde::Serialize)]
pub(super) struct DiagnosisList {
    diagnoses: Vec<Diagnosis>,
}

/// `GET /api/v1/diagnosis`: a scoped reader gets its tenants' requests, the others they name
/// under their aliases.
pub(super) async fn diagnose_window(
    State(store): State<Store>,
    scope: Scope,
    Query(p): Query<ThresholdParams>,
) -> Result<Response> {
    let th = p.thresholds()?;
    let limit = parse_int("limit", p.limit.as_deref())?.unwrap_or(500);
    if !(1..=5000).contains(&limit) {
        return Err(Error::InvalidArgument(format!(
            "limit={limit} must be between 1 and 5000"
        )));
    }
    let (tenants, lora_adapter, priority) =
        super::slice(p.tenant.clone(), p.adapter.clone(), &p.priority)?;
    let filter = RequestFilter {
        instances: list(p.instance.clone()),
        from_ns: parse_int("from", p.from.as_deref())?,
        to_ns: parse_int("to", p.to.as_deref())?,
        tenants: scope.narrow(tenants),
        lora_adapter,
        priority,
        ..RequestFilter::default()
    };
    let diagnoses = crate::query::diagnosis::window(&store, &filter, &th, limit).await?;
    let instances = crate::query::diagnosis::instance_ids(&store, &filter).await?;
    let redact = scope
        .diagnoses(&store, instances.as_deref(), &diagnoses)
        .await?;
    redact.json(&DiagnosisList { diagnoses })
}

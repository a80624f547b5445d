//! `POST /api/v1/import`: files engines write or return (TensorRT-LLM, OpenAI responses).

use axum::{
    Extension, Json,
    extract::{Query, State},
};
use serde::Deserialize;

use super::non_empty;
use crate::access::Grant;
use crate::error::{Error, Result};
use crate::ingest;
use crate::ingest::Sink;
use crate::ingest::import::{Format, Options};

#[derive(Debug, Deserialize)]
pub(super) struct ImportParams {
    format: Option<String>,
    instance: Option<String>,
    model: Option<String>,
    clock_offset_s: Option<String>,
}

/// `POST /api/v1/import?format=auto|openai|trtllm-perf-metrics|trtllm-iteration-log|native`:
/// the file is the body; without a format it is told apart by content.
pub(super) async fn import(
    State(sink): State<Sink>,
    Extension(grant): Extension<Grant>,
    Query(p): Query<ImportParams>,
    body: axum::body::Bytes,
) -> Result<Json<tokenscope_core::api::ImportReply>> {
    let format = Format::parse(p.format.as_deref().unwrap_or(""))?.resolve(&body)?;
    let clock_offset_s = non_empty(p.clock_offset_s)
        .map(|v| {
            v.parse::<f64>().map_err(|_| {
                Error::InvalidArgument(format!("clock_offset_s={v:?} is not a number of seconds"))
            })
        })
        .transpose()?;
    let opts = Options {
        instance: non_empty(p.instance).unwrap_or_else(|| format.default_instance().into()),
        model: non_empty(p.model),
        clock_offset_s,
        now_ns: crate::clock::now_ns(),
    };
    Ok(Json(
        ingest::import::import(&sink, format, &body, &opts, &grant).await?,
    ))
}

//! `POST /api/v1/traces`: the native schema as proto3 JSON over HTTP.

use axum::{Extension, Json, body::Bytes, extract::State};

use super::{Sink, native, store_decoded};
use crate::access::Grant;
use crate::error::{Error, Result};
use crate::metrics::Source;
use tokenscope_proto::v1;

pub async fn post_traces(
    State(sink): State<Sink>,
    Extension(grant): Extension<Grant>,
    body: Bytes,
) -> Result<Json<v1::ExportResponse>> {
    // Parsed by hand (not axum's Json extractor) so that a syntax or schema error comes back in our
    // error body, with serde's line and column, instead of as plain text.
    let export: v1::ExportRequest = serde_json::from_slice(&body).map_err(|e| {
        Error::InvalidArgument(format!(
            "body is not a valid tokenscope.v1.ExportRequest in proto3 JSON: {e}"
        ))
    })?;
    let decoded = native::decode(export);
    let reply = store_decoded(&sink, Source::NativeHttp, &grant, decoded).await?;
    Ok(Json(reply))
}

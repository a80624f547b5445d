//! OTLP endpoints: gRPC `TraceService/Export` and HTTP `POST /v1/traces` (protobuf or JSON).

use axum::{
    Extension,
    body::Bytes,
    extract::{ConnectInfo, State},
    http::{HeaderMap, header},
    response::{IntoResponse, Response},
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
    trace_service_server::TraceService,
};
use prost::Message;
use std::sync::Arc;
use std::time::Duration;

use super::otlp::assemble::Assembler;

use super::{Sink, otlp, store_decoded};
use crate::access::Grant;
use crate::error::{Error, Result};
use crate::metrics::Source;

/// Maps and stores an export; the reply follows OTLP partial success: rejected spans counted,
/// and the message lists rejections and warnings.
pub async fn export(
    otlp: &Otlp,
    req: ExportTraceServiceRequest,
    peer: Option<&str>,
    grant: &Grant,
) -> Result<ExportTraceServiceResponse> {
    let mapped = otlp::decode(req, peer, &otlp.assembler, grant, &otlp.mapping);
    store_mapped(&otlp.sink, mapped).await
}

/// Stores what an export (or the assembler's timeout sweep) mapped, and builds the OTLP reply.
/// The sender's grant was applied while mapping, before the assembler held any span.
pub async fn store_mapped(sink: &Sink, mapped: otlp::Mapped) -> Result<ExportTraceServiceResponse> {
    let rejected = mapped.decoded.rejections.len() as i64;
    let mut notes: Vec<String> = mapped
        .decoded
        .rejections
        .iter()
        .take(20)
        .map(|r| format!("{}: {}: {}", r.item, r.field, r.message))
        .collect();
    notes.extend(mapped.warnings.iter().take(20).cloned());
    let stored = store_decoded(sink, Source::Otlp, &Grant::All, mapped.decoded).await?;
    tracing::debug!(
        accepted = stored.accepted_requests,
        ignored = mapped.ignored_spans,
        "OTLP export"
    );
    Ok(ExportTraceServiceResponse {
        partial_success: (!notes.is_empty()).then(|| ExportTracePartialSuccess {
            rejected_spans: rejected,
            error_message: notes.join("; "),
        }),
    })
}

/// What OTLP ingest needs: where it stores, and the spans held until their request's root
/// arrives.
#[derive(Clone)]
pub struct Otlp {
    pub sink: Sink,
    pub assembler: Arc<Assembler>,
    pub mapping: Arc<otlp::Mapping>,
}

impl Otlp {
    pub fn new(sink: Sink, mapping: otlp::Mapping) -> Self {
        Self {
            sink,
            assembler: Arc::default(),
            mapping: Arc::new(mapping),
        }
    }

    /// Stores requests whose root span did not arrive within `timeout` (run periodically).
    pub async fn sweep(&self, timeout: Duration) -> Result<()> {
        if self.assembler.held_spans() == 0 {
            return Ok(());
        }
        let mapped = otlp::expired(&self.assembler, timeout, None, &self.mapping);
        if mapped.decoded.batches.is_empty() && mapped.decoded.rejections.is_empty() {
            return Ok(());
        }
        for w in &mapped.warnings {
            tracing::warn!("{w}");
        }
        store_mapped(&self.sink, mapped).await.map(|_| ())
    }
}

pub struct OtlpTraceService {
    pub otlp: Otlp,
}

#[tonic::async_trait]
impl TraceService for OtlpTraceService {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let peer = request.remote_addr().map(|a| a.ip().to_string());
        let grant = super::granted(&request)?;
        let reply = export(&self.otlp, request.into_inner(), peer.as_deref(), &grant).await?;
        Ok(tonic::Response::new(reply))
    }
}

/// The `google.rpc.Status` OTLP/HTTP puts in error bodies (only the fields it needs).
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// `POST /v1/traces`. Replies in the encoding of the request, errors included.
pub async fn post_traces(
    State(otlp): State<Otlp>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    Extension(grant): Extension<Grant>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let json = is_json(&headers);
    let parsed = if json {
        serde_json::from_slice::<ExportTraceServiceRequest>(&body).map_err(|e| {
            Error::InvalidArgument(format!(
                "body is not an OTLP ExportTraceServiceRequest in JSON: {e}"
            ))
        })
    } else {
        ExportTraceServiceRequest::decode(body).map_err(|e| {
            Error::InvalidArgument(format!(
                "body is not an OTLP ExportTraceServiceRequest in protobuf: {e}"
            ))
        })
    };
    let peer = peer.ip().to_string();
    let result = match parsed {
        Ok(req) => export(&otlp, req, Some(&peer), &grant).await,
        Err(e) => Err(e),
    };
    match (result, json) {
        (Ok(reply), true) => (
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_vec(&reply).unwrap_or_default(),
        )
            .into_response(),
        (Ok(reply), false) => (
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            reply.encode_to_vec(),
        )
            .into_response(),
        (Err(e), json) => {
            let status = e.http_status();
            let body = RpcStatus {
                code: e.grpc_code() as i32,
                message: e.to_string(),
            };
            if json {
                let value = serde_json::json!({"code": body.code, "message": body.message});
                (
                    status,
                    [(header::CONTENT_TYPE, "application/json")],
                    value.to_string(),
                )
                    .into_response()
            } else {
                (
                    status,
                    [(header::CONTENT_TYPE, "application/x-protobuf")],
                    body.encode_to_vec(),
                )
                    .into_response()
            }
        }
    }
}

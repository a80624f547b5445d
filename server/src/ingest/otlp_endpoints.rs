//! OTLP endpoints: gRPC `TraceService/Export` and HTTP `POST /v1/traces` (protobuf or JSON).

use axum::{
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

use super::{otlp, store_decoded};
use crate::error::{Error, Result};
use crate::store::Store;

/// Maps and stores an export; the reply follows OTLP partial success: rejected spans counted,
/// and the message lists rejections and warnings.
pub async fn export(
    store: &Store,
    req: ExportTraceServiceRequest,
    peer: Option<&str>,
) -> Result<ExportTraceServiceResponse> {
    let mapped = otlp::decode(req, peer);
    let rejected = mapped.decoded.rejections.len() as i64;
    let mut notes: Vec<String> = mapped
        .decoded
        .rejections
        .iter()
        .take(20)
        .map(|r| format!("{}: {}: {}", r.item, r.field, r.message))
        .collect();
    notes.extend(mapped.warnings.iter().take(20).cloned());
    let stored = store_decoded(store, mapped.decoded).await?;
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

pub struct OtlpTraceService {
    pub store: Store,
}

#[tonic::async_trait]
impl TraceService for OtlpTraceService {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let peer = request.remote_addr().map(|a| a.ip().to_string());
        let reply = export(&self.store, request.into_inner(), peer.as_deref()).await?;
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
    State(store): State<Store>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
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
        Ok(req) => export(&store, req, Some(&peer)).await,
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

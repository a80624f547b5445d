//! OTLP trace ingest: engines' own OpenTelemetry spans, mapped to the unified model.
//!
//! Each adapter is a pure function from a resource and its spans to model values plus warnings;
//! this module groups spans by resource, picks the adapter, and counts what was rejected.

pub mod attrs;
pub mod request_span;
pub mod tokens;

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;

use app::model::{
    EngineKind, Nanos, Resource, Role,
    validate::{self, EARLIEST_NS, FieldError, LATEST_NS},
};

use super::{Decoded, Item, ItemKind, ResourceBatch, normalize};
use attrs::Attrs;

/// An OTLP time (unsigned ns) as a model time, rejecting what no real clock produces.
pub fn nanos(t: u64, field: &str) -> Result<Nanos, FieldError> {
    match i64::try_from(t) {
        Ok(v) if (EARLIEST_NS..LATEST_NS).contains(&v) => Ok(v),
        _ => Err(FieldError::new(
            field,
            format!("{t} is not nanoseconds since the Unix epoch between 2000 and 2100"),
        )),
    }
}

/// What became of one OTLP export.
#[derive(Debug, Default)]
pub struct Mapped {
    pub decoded: Decoded,
    /// Spans that were not request spans (gateway spans, stage spans of other tools): not stored.
    pub ignored_spans: usize,
    pub warnings: Vec<String>,
}

/// Identity of the engine instance behind a resource. `peer` (the exporter's address) tells
/// apart instances that set nothing but `service.name`, as vLLM does by default.
fn resource(attrs: &Attrs, peer: Option<&str>) -> Result<Resource, FieldError> {
    let service = attrs.str("service.name")?.unwrap_or("unknown_service");
    let host = attrs.str("host.name")?.unwrap_or_default();
    let instance = match (attrs.str("service.instance.id")?, host) {
        (Some(id), _) => id.to_string(),
        (None, h) if !h.is_empty() => format!("{service}@{h}"),
        (None, _) => match peer {
            Some(p) => format!("{service}@{p}"),
            None => service.to_string(),
        },
    };
    let lower = service.to_ascii_lowercase();
    let engine = if lower.contains("vllm") {
        EngineKind::Vllm
    } else if lower.contains("sglang") {
        EngineKind::Sglang
    } else if lower.contains("trt") || lower.contains("tensorrt") {
        EngineKind::Trtllm
    } else {
        EngineKind::Other
    };
    let role = match attrs
        .str("gen_ai.serving.role")
        .ok()
        .flatten()
        .or(attrs.str("role").ok().flatten())
    {
        Some(r) => Role::parse(&r.to_ascii_lowercase()).unwrap_or_default(),
        None => Role::Colocated,
    };
    Ok(Resource {
        engine,
        engine_version: attrs
            .str("service.version")?
            .unwrap_or_default()
            .to_string(),
        model: String::new(),
        instance_id: instance,
        role,
        host: host.to_string(),
    })
}

fn label(i: usize, span: &Span) -> String {
    let id = Attrs::new(&span.attributes)
        .string_like(request_span::REQUEST_ID)
        .ok()
        .flatten()
        .unwrap_or_else(|| app::model::hex(&span.span_id));
    format!("resource_spans[{i}] span {:?} (request {id:?})", span.name)
}

/// Maps one export. Spans of one request are expected in one export here; SGLang's stage spans,
/// which arrive in several, are assembled before this is called.
pub fn decode(export: ExportTraceServiceRequest, peer: Option<&str>) -> Mapped {
    let mut out = Mapped::default();
    for (i, rs) in export.resource_spans.into_iter().enumerate() {
        let attrs_vec = rs.resource.map(|r| r.attributes).unwrap_or_default();
        let spans: Vec<Span> = rs.scope_spans.into_iter().flat_map(|s| s.spans).collect();
        let base = match resource(&Attrs::new(&attrs_vec), peer) {
            Ok(r) => r,
            Err(e) => {
                for span in &spans {
                    out.decoded.reject(
                        ItemKind::Request,
                        &label(i, span),
                        FieldError::new(format!("resource.{}", e.field), e.message.clone()),
                    );
                }
                continue;
            }
        };
        // One model per resource batch: a resource serving several models becomes several.
        let mut by_model: BTreeMap<String, ResourceBatch> = BTreeMap::new();
        for span in &spans {
            if !request_span::is_request_span(span) {
                out.ignored_spans += 1;
                continue;
            }
            let item = label(i, span);
            let mut engine = base.engine;
            if engine == EngineKind::Other && span.name == "llm_request" {
                engine = EngineKind::Vllm;
            }
            match request_span::request(span, &mut out.warnings).and_then(|mut r| {
                normalize(&mut r);
                validate::request(&r).map(|()| r)
            }) {
                Ok(r) => {
                    let model = request_span::model_of(span).unwrap_or_else(|| "unknown".into());
                    let batch = by_model
                        .entry(model.clone())
                        .or_insert_with(|| ResourceBatch {
                            resource: Resource {
                                model,
                                engine,
                                ..base.clone()
                            },
                            requests: Vec::new(),
                            iterations: Vec::new(),
                        });
                    batch.requests.push(Item {
                        label: item,
                        value: r,
                    });
                }
                Err(e) => out.decoded.reject(ItemKind::Request, &item, e),
            }
        }
        out.decoded.batches.extend(by_model.into_values());
    }
    out
}

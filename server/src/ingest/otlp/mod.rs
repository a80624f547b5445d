//! OTLP trace ingest: engines' own OpenTelemetry spans, mapped to the unified model.
//!
//! Each adapter is a pure function from a resource and its spans to model values plus warnings;
//! this module groups spans by resource, picks the adapter, and counts what was rejected.

pub mod assemble;
pub mod attrs;
pub mod request_span;
pub mod sglang;
pub mod tokens;

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;

use tokenscope_core::model::{
    EngineKind, Nanos, Resource, Role,
    validate::{self, EARLIEST_NS, FieldError, LATEST_NS},
};

use super::{Decoded, Item, ItemKind, ResourceBatch, normalize};
use crate::access::Grant;
use assemble::{Assembler, Complete};
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
        .unwrap_or_else(|| tokenscope_core::model::hex(&span.span_id));
    format!("resource_spans[{i}] span {:?} (request {id:?})", span.name)
}

/// Accumulates mapped requests per (instance, model) for one resource.
#[derive(Default)]
struct Batches(BTreeMap<(String, String), ResourceBatch>);

impl Batches {
    /// Files a mapped request under its instance and the model its span names.
    fn push(
        &mut self,
        resource: &Resource,
        span: &Span,
        label: String,
        value: tokenscope_core::model::RequestTrace,
    ) {
        let model = request_span::model_of(span).unwrap_or_else(|| "unknown".into());
        self.0
            .entry((resource.instance_id.clone(), model.clone()))
            .or_insert_with(|| ResourceBatch {
                resource: Resource {
                    model,
                    ..resource.clone()
                },
                requests: Vec::new(),
                iterations: Vec::new(),
                texts_by_id: None,
            })
            .requests
            .push(Item { label, value });
    }
}

fn finish(
    r: Result<tokenscope_core::model::RequestTrace, FieldError>,
) -> Result<tokenscope_core::model::RequestTrace, FieldError> {
    let mut r = r?;
    normalize(&mut r);
    validate::request(&r)?;
    Ok(r)
}

/// What OTLP ingest maps beyond the conventions it knows: which span attributes name whom a
/// request was served for (its tenant), the first present wins.
#[derive(Clone, Debug)]
pub struct Mapping {
    pub tenant_attributes: Vec<String>,
}

/// tokenscope's own, then OpenTelemetry's `user.id` and the older `enduser.id`.
const TENANT_ATTRIBUTES: [&str; 3] = ["tokenscope.tenant", "user.id", "enduser.id"];

impl Default for Mapping {
    fn default() -> Self {
        Self::with_tenant_attributes(&[])
    }
}

impl Mapping {
    /// `keys` (a gateway's own attribute, say) before the ones tokenscope knows.
    pub fn with_tenant_attributes(keys: &[String]) -> Self {
        let mut tenant_attributes = keys.to_vec();
        for k in TENANT_ATTRIBUTES {
            if !tenant_attributes.iter().any(|t| t == k) {
                tenant_attributes.push(k.into());
            }
        }
        Self { tenant_attributes }
    }

    fn tenant(&self, span: &Span) -> Result<Option<String>, FieldError> {
        let a = Attrs::new(&span.attributes);
        for key in &self.tenant_attributes {
            if let Some(t) = a.string_like(key)?.filter(|t| !t.is_empty()) {
                return Ok(Some(t));
            }
        }
        Ok(None)
    }

    /// `r`, mapped from `span`, with its tenant.
    fn with_tenant(
        &self,
        span: &Span,
        mut r: tokenscope_core::model::RequestTrace,
    ) -> Result<tokenscope_core::model::RequestTrace, FieldError> {
        r.served.tenant = self.tenant(span)?;
        Ok(r)
    }
}

/// Maps one export. SGLang spans go through `assembler`, which holds them until their root
/// span arrives (possibly in a later export). Spans of an instance `grant` does not cover are
/// refused here, before the assembler could hold them.
pub fn decode(
    export: ExportTraceServiceRequest,
    peer: Option<&str>,
    assembler: &Assembler,
    grant: &Grant,
    mapping: &Mapping,
) -> Mapped {
    let mut out = Mapped::default();
    let mut batches = Batches::default();
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
        if !grant.allows(&base.instance_id) {
            let why = grant.refusal(&base.instance_id);
            for span in &spans {
                out.decoded
                    .forbid(ItemKind::Request, &label(i, span), why.clone());
            }
            continue;
        }
        let (staged, plain): (Vec<Span>, Vec<Span>) =
            spans.into_iter().partition(sglang::is_sglang_span);
        for span in &plain {
            if !request_span::is_request_span(span) {
                out.ignored_spans += 1;
                continue;
            }
            let item = label(i, span);
            let mut res = base.clone();
            if res.engine == EngineKind::Other && span.name == "llm_request" {
                res.engine = EngineKind::Vllm;
            }
            let r = request_span::request(span, None, &mut out.warnings)
                .and_then(|r| mapping.with_tenant(span, r));
            match finish(r) {
                Ok(r) => batches.push(&res, span, item, r),
                Err(e) => out.decoded.reject(ItemKind::Request, &item, e),
            }
        }
        if !staged.is_empty() {
            let done = assembler.add(&base.instance_id, &attrs_vec, staged);
            map_sglang(
                done,
                &base,
                &format!("resource_spans[{i}]"),
                mapping,
                (&mut batches, &mut out),
            );
        }
    }
    out.decoded.batches.extend(batches.0.into_values());
    out
}

/// Maps assembled SGLang requests (from `decode`, or from the assembler's timeout sweep).
fn map_sglang(
    done: Vec<Complete>,
    base: &Resource,
    at: &str,
    mapping: &Mapping,
    (batches, out): (&mut Batches, &mut Mapped),
) {
    for c in done {
        let descendants: Vec<&Span> = c.spans.iter().collect();
        let synthetic;
        let root = match &c.root {
            Some(root) => root,
            None => {
                synthetic = sglang::stand_in_root(&c.spans);
                out.warnings.push(format!(
                    "SGLang request {:?}: its root span never arrived; mapped from its {} stage spans",
                    tokenscope_core::model::hex(&synthetic.span_id),
                    c.spans.len()
                ));
                &synthetic
            }
        };
        let item = label_sglang(at, root);
        match sglang::request(root, &descendants, &mut out.warnings)
            .and_then(|(r, role)| Ok((mapping.with_tenant(root, r)?, role)))
            .and_then(|(r, role)| finish(Ok(r)).map(|r| (r, role)))
        {
            Ok((r, role)) => {
                let mut res = Resource {
                    role,
                    ..base.clone()
                };
                if res.engine == EngineKind::Other {
                    res.engine = EngineKind::Sglang;
                }
                batches.push(&res, root, item, r);
            }
            Err(e) => out.decoded.reject(ItemKind::Request, &item, e),
        }
    }
}

fn label_sglang(at: &str, root: &Span) -> String {
    let rid = Attrs::new(&root.attributes)
        .string_like("rid")
        .ok()
        .flatten()
        .unwrap_or_default();
    format!("{at} SGLang request {rid:?} (root span {:?})", root.name)
}

/// Maps the groups the assembler gave up waiting for (their root never came).
pub fn expired(
    assembler: &Assembler,
    timeout: std::time::Duration,
    peer_hint: Option<&str>,
    mapping: &Mapping,
) -> Mapped {
    let mut out = Mapped::default();
    let mut batches = Batches::default();
    for c in assembler.expire(timeout) {
        let base = match resource(&Attrs::new(&c.resource), peer_hint) {
            Ok(r) => r,
            Err(_) => continue,
        };
        map_sglang(
            vec![c],
            &base,
            "held spans",
            mapping,
            (&mut batches, &mut out),
        );
    }
    out.decoded.batches.extend(batches.0.into_values());
    out
}

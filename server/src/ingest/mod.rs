//! Ingest: turns engine formats into the unified model, validates, and stores a batch.
//!
//! Engine formats are known only to the adapters in this module (`native`, `otlp`). Everything an
//! adapter produces goes through [`normalize`] and the model's validation before the store sees it.

pub mod budget;
pub mod grpc;
pub mod http;
pub mod import;
pub mod native;
pub mod otlp;
pub mod otlp_endpoints;

use tokenscope_core::analysis::diagnosis::{self, Thresholds};
use tokenscope_core::model::{RequestTrace, validate};

use crate::access::Grant;
use crate::error::{Error, Result};
use crate::metrics::{Batch, Reason, Source};
use std::sync::Arc;
use tokenscope_proto::v1;

use crate::metrics::Metrics;
use crate::store::Store;
// The write batch is the store's type: adapters fill it, the store takes it.
pub use crate::store::batch::{Item, ResourceBatch, Stored};

/// Whether the findings worker may pass a request by whatever arrives beside it
/// (`diagnosis::healthy_alone` with the default thresholds, which the worker stores findings
/// for). Judged on the request as sent; the store gives its logprobs back to within half a
/// `LOGPROB_STEP_NATS`, so the probability thresholds are raised by a whole one: a probability
/// this passes stays above the threshold once stored (never the other way round).
fn healthy_alone(r: &RequestTrace) -> bool {
    let step = crate::store::token_block::LOGPROB_STEP_NATS.exp();
    let d = Thresholds::default();
    let th = Thresholds {
        eos_probability: d.eos_probability * step,
        token_probability: d.token_probability * step,
        ..d
    };
    diagnosis::healthy_alone(r, &th)
}

/// An item that was refused, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub item: String,
    pub field: String,
    pub message: String,
    /// Whether the refused item was a request (else an iteration or a whole resource).
    pub kind: ItemKind,
    /// Refused because the sender's ingest key does not cover its instance (else invalid).
    pub forbidden: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    Request,
    Iteration,
}

/// What an adapter made of a batch.
#[derive(Debug, Default)]
pub struct Decoded {
    pub batches: Vec<ResourceBatch>,
    pub rejections: Vec<Rejection>,
}

/// Fills what the model defines as derivable: output count from the tokens, ranks from candidates.
pub fn normalize(r: &mut RequestTrace) {
    if r.output_tokens == 0 {
        r.output_tokens = r.tokens.len() as u32;
    }
    for t in &mut r.tokens {
        if t.rank.is_none() {
            t.rank = t.rank_from_candidates();
        }
    }
}

impl Decoded {
    /// Refuses an invalid item.
    pub fn reject(&mut self, kind: ItemKind, item: &str, e: validate::FieldError) {
        self.refuse(kind, item, e, false);
    }

    /// Refuses an item the sender's key does not cover.
    pub fn forbid(&mut self, kind: ItemKind, item: &str, e: validate::FieldError) {
        self.refuse(kind, item, e, true);
    }

    fn refuse(&mut self, kind: ItemKind, item: &str, e: validate::FieldError, forbidden: bool) {
        self.rejections.push(Rejection {
            item: item.to_string(),
            field: e.field,
            message: e.message,
            kind,
            forbidden,
        });
    }

    /// Moves the items of instances `grant` does not cover into the rejections.
    pub fn admit(&mut self, grant: &Grant) {
        let (kept, refused): (Vec<_>, Vec<_>) = std::mem::take(&mut self.batches)
            .into_iter()
            .partition(|b| grant.allows(&b.resource.instance_id));
        self.batches = kept;
        for b in refused {
            let why = grant.refusal(&b.resource.instance_id);
            let items = (b.requests.iter().map(|r| (ItemKind::Request, &r.label)))
                .chain(b.iterations.iter().map(|i| (ItemKind::Iteration, &i.label)));
            for (kind, label) in items {
                self.forbid(kind, label, why.clone());
            }
        }
    }
}

/// Where every ingest path stores through: the store, the self-metrics it counts into, and
/// whether decoded texts are dropped (`--redact-text`). Built once at start; cheap to clone.
#[derive(Clone)]
pub struct Sink {
    pub store: Store,
    pub metrics: Arc<Metrics>,
    pub redact_text: bool,
}

impl Sink {
    /// A sink with fresh self-metrics: the server's (shared with its layers), or a command's
    /// that stores and exits (`demo`, `import`).
    pub fn of(store: Store, redact_text: bool) -> Self {
        Self {
            store,
            metrics: Arc::default(),
            redact_text,
        }
    }
}

/// Drops every decoded text of a request (`--redact-text`): what the model generated stays
/// out of the database; ids, times and probabilities are kept.
fn redact_text(r: &mut RequestTrace) {
    for t in &mut r.tokens {
        t.text = None;
        for c in &mut t.candidates {
            c.text = None;
        }
    }
}

/// Stores the valid part of a decoded batch that `grant` covers, and builds the reply. A batch in
/// which nothing at all was valid is an error, so that a client sending only garbage hears about
/// it loudly (and one sending only for instances its key does not cover is told it may not).
pub async fn store_decoded(
    sink: &Sink,
    source: Source,
    grant: &Grant,
    mut decoded: Decoded,
) -> Result<v1::ExportResponse> {
    decoded.admit(grant);
    let Decoded {
        mut batches,
        rejections,
    } = decoded;
    if sink.redact_text {
        for b in &mut batches {
            b.texts_by_id = None;
            for r in &mut b.requests {
                redact_text(&mut r.value);
            }
        }
    }
    let count = |kind| rejections.iter().filter(|r| r.kind == kind).count() as u64;
    let invalid = |kind| {
        (rejections.iter())
            .filter(|r| r.kind == kind && !r.forbidden)
            .count() as u64
    };
    let forbidden = rejections.iter().filter(|r| r.forbidden).count();
    let metrics = &sink.metrics;
    metrics.rejected(source, Reason::InvalidRequest, invalid(ItemKind::Request));
    metrics.rejected(
        source,
        Reason::InvalidIteration,
        invalid(ItemKind::Iteration),
    );
    metrics.rejected(source, Reason::ForbiddenInstance, forbidden as u64);
    let had_items = batches
        .iter()
        .any(|b| !b.requests.is_empty() || !b.iterations.is_empty());
    if !had_items && !rejections.is_empty() {
        let listed: Vec<String> = rejections
            .iter()
            .take(10)
            .map(|r| format!("{}: {}: {}", r.item, r.field, r.message))
            .collect();
        if forbidden == rejections.len() {
            return Err(Error::Forbidden(format!(
                "no item of the batch may be stored with this ingest key ({}): {}",
                rejections.len(),
                listed.join("; ")
            )));
        }
        return Err(Error::InvalidArgument(format!(
            "every item of the batch was rejected ({}): {}",
            rejections.len(),
            listed.join("; ")
        )));
    }
    let started = std::time::Instant::now();
    let stored = sink.store.write(&batches, &healthy_alone).await?;
    metrics.committed(started.elapsed());
    metrics.stored(
        source,
        Batch {
            requests: stored.accepted_requests,
            iterations: stored.accepted_iterations,
            tokens: stored.accepted_tokens,
        },
    );
    metrics.rejected(source, Reason::DuplicateRequest, stored.duplicate_requests);
    // A batch sent again is all duplicates: not counted twice. (A batch only partly sent before
    // counts its new requests and its resent ones; the store does not say which were which.)
    let offered: u64 = batches.iter().map(|b| b.requests.len() as u64).sum();
    if stored.duplicate_requests < offered {
        let at_s = crate::clock::now_ns() as f64 / 1e9;
        for b in &batches {
            let requests = b.requests.iter().map(|i| &i.value);
            metrics
                .latency
                .observe(&b.resource.instance_id, requests, at_s);
        }
    }
    Ok(v1::ExportResponse {
        accepted_requests: stored.accepted_requests,
        duplicate_requests: stored.duplicate_requests,
        rejected_requests: count(ItemKind::Request),
        accepted_iterations: stored.accepted_iterations,
        rejected_iterations: count(ItemKind::Iteration),
        texts_missing: stored.texts_missing,
        rejections: rejections
            .into_iter()
            .map(|r| v1::Rejection {
                item: r.item,
                field: r.field,
                message: r.message,
            })
            .collect(),
    })
}

/// The grant [`crate::access::KeyLayer`] gave a gRPC request. Missing means the layer is not in
/// front of the service: refused rather than let through.
pub fn granted<T>(request: &tonic::Request<T>) -> Result<Grant, tonic::Status> {
    request
        .extensions()
        .get::<Grant>()
        .cloned()
        .ok_or_else(|| tonic::Status::internal("no ingest key check in front of this service"))
}

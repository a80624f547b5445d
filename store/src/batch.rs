//! What a write takes and what it answers: the valid items of one instance from one export
//! (each with the label a rejection names it by), and the counts of what was stored. Ingest's
//! adapters fill a [`ResourceBatch`]; the store depends on nothing of ingest.

use tokenscope_core::model::{Iteration, RequestTrace, Resource};

use super::vocab::TextsById;

/// One item of a batch with a label that names it in rejection messages.
#[derive(Debug)]
pub struct Item<T> {
    pub label: String,
    pub value: T,
}

/// The valid items of one resource (instance) in a batch.
#[derive(Debug)]
pub struct ResourceBatch {
    pub resource: Resource,
    pub requests: Vec<Item<RequestTrace>>,
    pub iterations: Vec<Item<Iteration>>,
    /// Set when the sender gave token texts by id: then the requests' tokens and candidates
    /// without a text of their own have their id's text (from here, or stored earlier).
    pub texts_by_id: Option<TextsById>,
}

/// What the store did with the valid items.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    pub accepted_requests: u64,
    pub duplicate_requests: u64,
    pub accepted_iterations: u64,
    /// Output tokens of the requests newly stored.
    pub accepted_tokens: u64,
    /// Distinct token ids (per resource) whose text was to come by id, but which neither the
    /// export nor the vocabulary had.
    pub texts_missing: u64,
}

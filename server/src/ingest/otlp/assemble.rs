//! Holds spans of requests whose root span has not arrived yet (SGLang exports stage spans as
//! they end), and hands a request's spans over when its root comes or a timeout passes.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;

/// Spans waiting for their root, per (instance, trace id).
#[derive(Default)]
pub struct Assembler {
    pending: Mutex<HashMap<(String, Vec<u8>), Pending>>,
}

struct Pending {
    resource: Vec<KeyValue>,
    spans: Vec<Span>,
    since: Instant,
}

/// A root span with every span below it, ready to map.
pub struct Complete {
    pub resource: Vec<KeyValue>,
    pub root: Option<Span>,
    pub spans: Vec<Span>,
}

/// Upper bound on held spans, so a client that never sends roots cannot exhaust memory.
const MAX_PENDING_SPANS: usize = 1_000_000;

impl Assembler {
    /// Adds an export's SGLang spans for one instance; returns the requests whose root is now
    /// known, with all their spans (from this export or earlier ones).
    pub fn add(&self, instance: &str, resource: &[KeyValue], spans: Vec<Span>) -> Vec<Complete> {
        let mut pending = self.pending.lock().expect("assembler poisoned");
        let mut traces: Vec<Vec<u8>> = Vec::new();
        for span in spans {
            let key = (instance.to_string(), span.trace_id.clone());
            if !traces.contains(&span.trace_id) {
                traces.push(span.trace_id.clone());
            }
            pending
                .entry(key)
                .or_insert_with(|| Pending {
                    resource: resource.to_vec(),
                    spans: Vec::new(),
                    since: Instant::now(),
                })
                .spans
                .push(span);
        }
        let mut out = Vec::new();
        for trace in traces {
            let key = (instance.to_string(), trace);
            let Some(p) = pending.get_mut(&key) else {
                continue;
            };
            let roots: Vec<Vec<u8>> = p
                .spans
                .iter()
                .filter(|s| super::sglang::is_root(s))
                .map(|s| s.span_id.clone())
                .collect();
            for root_id in roots {
                let taken = take_subtree(&mut p.spans, &root_id);
                let (root, spans): (Vec<Span>, Vec<Span>) =
                    taken.into_iter().partition(|s| s.span_id == root_id);
                out.push(Complete {
                    resource: p.resource.clone(),
                    root: root.into_iter().next(),
                    spans,
                });
            }
            if p.spans.is_empty() {
                pending.remove(&key);
            }
        }
        out
    }

    /// Hands over groups that waited longer than `timeout` without a root (or everything when the
    /// holding limit is exceeded), one group per missing root.
    pub fn expire(&self, timeout: Duration) -> Vec<Complete> {
        let mut pending = self.pending.lock().expect("assembler poisoned");
        let held: usize = pending.values().map(|p| p.spans.len()).sum();
        let keys: Vec<_> = pending
            .iter()
            .filter(|(_, p)| held > MAX_PENDING_SPANS || p.since.elapsed() >= timeout)
            .map(|(k, _)| k.clone())
            .collect();
        let mut out = Vec::new();
        for key in keys {
            let Some(p) = pending.remove(&key) else {
                continue;
            };
            // Without the root, the thread spans' common parent stands for it.
            let ids: HashSet<&[u8]> = p.spans.iter().map(|s| s.span_id.as_slice()).collect();
            let mut orphans: Vec<Vec<u8>> = p
                .spans
                .iter()
                .filter(|s| !ids.contains(s.parent_span_id.as_slice()))
                .map(|s| s.parent_span_id.clone())
                .collect();
            orphans.sort();
            orphans.dedup();
            let mut spans = p.spans;
            for root_id in orphans {
                let group = take_subtree_below(&mut spans, &root_id);
                out.push(Complete {
                    resource: p.resource.clone(),
                    root: None,
                    spans: group,
                });
            }
        }
        out
    }

    pub fn held_spans(&self) -> usize {
        self.pending
            .lock()
            .expect("assembler poisoned")
            .values()
            .map(|p| p.spans.len())
            .sum()
    }
}

/// Removes and returns `root_id` and every span below it.
fn take_subtree(spans: &mut Vec<Span>, root_id: &[u8]) -> Vec<Span> {
    let mut ids: HashSet<Vec<u8>> = HashSet::from([root_id.to_vec()]);
    take_where_parent_in(spans, &mut ids, true)
}

/// Removes and returns every span below `parent_id` (which is not itself held).
fn take_subtree_below(spans: &mut Vec<Span>, parent_id: &[u8]) -> Vec<Span> {
    let mut ids: HashSet<Vec<u8>> = HashSet::from([parent_id.to_vec()]);
    take_where_parent_in(spans, &mut ids, false)
}

fn take_where_parent_in(
    spans: &mut Vec<Span>,
    ids: &mut HashSet<Vec<u8>>,
    include_roots: bool,
) -> Vec<Span> {
    let mut taken = Vec::new();
    loop {
        let before = taken.len();
        let mut rest = Vec::with_capacity(spans.len());
        for s in spans.drain(..) {
            let is_root = include_roots && ids.contains(&s.span_id);
            if is_root || ids.contains(&s.parent_span_id) {
                ids.insert(s.span_id.clone());
                taken.push(s);
            } else {
                rest.push(s);
            }
        }
        *spans = rest;
        if taken.len() == before {
            return taken;
        }
    }
}

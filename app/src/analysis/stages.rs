//! Turns a request's stage timestamps into the ordered bars of its timeline.

use crate::api::{Stage, StageKind};
use crate::model::RequestTrace;

pub fn stages(r: &RequestTrace) -> Vec<Stage> {
    let mut out = Vec::new();
    let bar = |kind, start_ns, end_ns, tokens, iteration| Stage {
        kind,
        start_ns,
        end_ns,
        tokens,
        iteration,
    };
    if let Some(scheduled) = r.first_scheduled_at() {
        let queued = r.queued_ns.unwrap_or(r.arrival_ns);
        if scheduled > queued {
            out.push(bar(StageKind::Queued, queued, scheduled, None, None));
        }
    }
    if let Some(kv) = &r.kv_transfer {
        out.push(bar(
            StageKind::KvTransfer,
            kv.start_ns,
            kv.end_ns,
            None,
            None,
        ));
    }
    for c in &r.prefill_chunks {
        out.push(bar(
            StageKind::Prefill,
            c.start_ns,
            c.end_ns,
            Some(c.tokens),
            c.iteration,
        ));
    }
    for p in &r.preemptions {
        let end = p.resumed_ns.unwrap_or(r.finished_ns);
        out.push(bar(StageKind::Preempted, p.at_ns, end, None, None));
    }
    if let Some(first) = r.first_token_at() {
        out.push(bar(
            StageKind::Decode,
            first,
            r.finished_ns,
            Some(r.output_tokens),
            None,
        ));
    }
    out.sort_by_key(|s| (s.start_ns, s.end_ns));
    out
}

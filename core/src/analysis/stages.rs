//! Turns a request's stage timestamps into the ordered bars of its timeline.

use crate::model::{Nanos, RequestTrace};
use serde::{Deserialize, Serialize};

pub fn stages(r: &RequestTrace) -> Vec<Stage> {
    let mut out = Vec::new();
    let bar = |kind, start_ns, end_ns, tokens, iteration| Stage {
        kind,
        start_ns,
        end_ns,
        tokens,
        iteration,
        ..Stage::default()
    };
    if let Some(scheduled) = r.first_scheduled_at() {
        let queued = r.queued_ns.unwrap_or(r.arrival_ns);
        if scheduled > queued {
            out.push(bar(StageKind::Queued, queued, scheduled, None, None));
        }
    }
    if let Some(kv) = &r.kv_transfer {
        out.push(Stage {
            bytes: kv.bytes,
            blocks: kv.blocks,
            ..bar(StageKind::KvTransfer, kv.start_ns, kv.end_ns, None, None)
        });
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
        // Its tokens: those it will compute again; `by`: the request it made room for.
        out.push(Stage {
            by: p.aggressor.clone(),
            ..bar(StageKind::Preempted, p.at_ns, end, p.recompute_tokens, None)
        });
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

/// The bars of a request known only by its stored phase times: queued, one prefill block up to
/// the first token, decode. For tracks too narrow to show chunks, preemptions or a KV transfer,
/// where reading the full stage record would cost more than the pixels can show.
pub fn coarse_stages(
    arrival_ns: Nanos,
    finished_ns: Nanos,
    queue_ns: Option<Nanos>,
    ttft_ns: Option<Nanos>,
) -> Vec<Stage> {
    let bar = |kind, start_ns, end_ns| Stage {
        kind,
        start_ns,
        end_ns,
        tokens: None,
        iteration: None,
        ..Stage::default()
    };
    let scheduled = arrival_ns + queue_ns.unwrap_or(0).max(0);
    let first_token = ttft_ns.map(|t| arrival_ns + t);
    let mut out = Vec::new();
    if scheduled > arrival_ns {
        out.push(bar(StageKind::Queued, arrival_ns, scheduled));
    }
    match first_token {
        Some(ft) => {
            if ft > scheduled {
                out.push(bar(StageKind::Prefill, scheduled, ft));
            }
            out.push(bar(StageKind::Decode, ft, finished_ns));
        }
        None => out.push(bar(StageKind::Prefill, scheduled, finished_ns)),
    }
    out
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageKind {
    #[default]
    Queued,
    Prefill,
    Decode,
    Preempted,
    KvTransfer,
}

impl StageKind {
    /// Every kind, in the order a request lives them (legends list them so).
    pub const ALL: [StageKind; 5] = [
        StageKind::Queued,
        StageKind::Prefill,
        StageKind::Decode,
        StageKind::Preempted,
        StageKind::KvTransfer,
    ];

    /// The name people read (`KV transfer`).
    pub fn label(self) -> &'static str {
        match self {
            StageKind::Queued => "queued",
            StageKind::Prefill => "prefill",
            StageKind::Decode => "decode",
            StageKind::Preempted => "preempted",
            StageKind::KvTransfer => "KV transfer",
        }
    }
}

/// One bar of a request's timeline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    pub kind: StageKind,
    pub start_ns: Nanos,
    pub end_ns: Nanos,
    /// Prompt tokens of a prefill chunk, output tokens of the decode stage, tokens to recompute
    /// of a preemption.
    pub tokens: Option<u32>,
    pub iteration: Option<u64>,
    /// A preemption's aggressor: the request the scheduler made room for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// A KV transfer's size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::metrics::request_metrics;
    use crate::model::PrefillChunk;

    #[test]
    fn coarse_bars_match_the_full_ones_for_a_one_chunk_request() {
        let t0 = 1_700_000_000_000_000_000;
        for (queue, prefill) in [(0, 30), (5, 30), (2_000, 1), (7, 0)] {
            let ms = 1_000_000;
            let scheduled = t0 + queue * ms;
            let first_token = scheduled + prefill * ms;
            let r = RequestTrace {
                request_id: "r".into(),
                arrival_ns: t0,
                first_scheduled_ns: Some(scheduled),
                prefill_chunks: vec![PrefillChunk {
                    start_ns: scheduled,
                    end_ns: first_token,
                    tokens: 100,
                    iteration: None,
                }]
                .into_iter()
                .filter(|c| c.end_ns > c.start_ns)
                .collect(),
                first_token_ns: Some(first_token),
                finished_ns: first_token + 500 * ms,
                output_tokens: 50,
                ..RequestTrace::default()
            };
            let m = request_metrics(&r);
            let coarse = coarse_stages(r.arrival_ns, r.finished_ns, m.queue_ns, m.ttft_ns);
            let full: Vec<(StageKind, Nanos, Nanos)> = stages(&r)
                .into_iter()
                .map(|s| (s.kind, s.start_ns, s.end_ns))
                .collect();
            let coarse: Vec<_> = coarse
                .into_iter()
                .map(|s| (s.kind, s.start_ns, s.end_ns))
                .collect();
            assert_eq!(coarse, full, "queue {queue} ms, prefill {prefill} ms");
        }
    }
}

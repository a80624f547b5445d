//! A PD-disaggregated request as the client saw it: its parts (the prompt prefilled on one
//! instance, the KV cache moved, the answer decoded on another), stored under one id on each
//! instance, joined into one request.

use crate::analysis::stages::{Stage, StageKind};
use crate::model::{Nanos, RequestTrace, Role, Served};

use super::stages::stages;

/// Whether requests of one id on several instances are the parts of one PD request rather than
/// unrelated requests that happen to share an id: every part ran on a prefill or a decode
/// instance, and there is at least one of each.
pub fn is_pd(roles: &[Role]) -> bool {
    roles
        .iter()
        .all(|r| matches!(r, Role::Prefill | Role::Decode))
        && roles.contains(&Role::Prefill)
        && roles.contains(&Role::Decode)
}

/// The order parts are joined in: prefill parts first, then by arrival and finish.
pub fn part_order(role: Role, r: &RequestTrace) -> (bool, i64, i64) {
    (role != Role::Prefill, r.arrival_ns, r.finished_ns)
}

/// When the parts' clocks visibly disagree: how far a later part's clock runs behind the earlier
/// parts' (the least shift that puts its KV transfer and its first token after the prompt was
/// prefilled). A part whose clock runs ahead cannot be told from a slow hand-over, so it is not
/// corrected. Parts in `part_order`.
pub fn clock_behind(parts: &[&RequestTrace]) -> Vec<Nanos> {
    let mut done = None::<Nanos>;
    parts
        .iter()
        .map(|p| {
            // Stamped by this part's instance, they cannot precede the earlier parts' end.
            let earliest = [
                p.kv_transfer.as_ref().map(|kv| kv.start_ns),
                p.first_scheduled_at(),
                p.first_token_at(),
            ]
            .into_iter()
            .flatten()
            .min();
            let behind = match (done, earliest) {
                (Some(d), Some(e)) if e < d => d - e,
                _ => 0,
            };
            let prefilled = p.prefilled_at().unwrap_or(p.finished_ns);
            done = Some(done.map_or(prefilled + behind, |d| d.max(prefilled + behind)));
            behind
        })
        .collect()
}

/// What the request's page says when [`clock_behind`] moved parts (`behind`, per part) onto the
/// first part's clock; `None` when it moved none.
pub fn clock_note(behind: &[Nanos], instances: &[&str]) -> Option<String> {
    let first = instances.first().copied().unwrap_or("the first part");
    let notes: Vec<String> = behind
        .iter()
        .enumerate()
        .filter(|&(_, &by)| by > 0)
        .map(|(k, &by)| {
            let ms = by as f64 / 1e6;
            format!(
                "{}'s clock runs at least {ms:.1} ms behind {first}'s: it stamped its part before the prompt was prefilled, so its times are shown {ms:.1} ms later",
                instances.get(k).copied().unwrap_or("a later part"),
            )
        })
        .collect();
    (!notes.is_empty()).then(|| format!("The parts' clocks disagree: {}.", notes.join("; ")))
}

/// The request the client saw, from its parts in `part_order`: it arrived when the first part
/// arrived and waited in its queue; every part's prefill chunks and preemptions; the KV transfer;
/// the first token, the answer and its end from the last part (the decode instance streams the
/// answer; a prefill instance's own first token never reached the client).
pub fn join(parts: &[&RequestTrace]) -> RequestTrace {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return RequestTrace::default();
    };
    let mut prefill_chunks: Vec<_> = parts
        .iter()
        .flat_map(|p| p.prefill_chunks.clone())
        .collect();
    prefill_chunks.sort_by_key(|c| (c.start_ns, c.end_ns));
    let mut preemptions: Vec<_> = parts.iter().flat_map(|p| p.preemptions.clone()).collect();
    preemptions.sort_by_key(|p| p.at_ns);
    // The part that streamed the answer holds the tokens; a source that put them elsewhere
    // still shows them.
    let tokens = parts
        .iter()
        .rev()
        .find(|p| !p.tokens.is_empty())
        .map(|p| p.tokens.clone())
        .unwrap_or_default();
    RequestTrace {
        request_id: first.request_id.clone(),
        trace_id: parts.iter().find_map(|p| p.trace_id.clone()),
        parent_span_id: parts.iter().find_map(|p| p.parent_span_id.clone()),
        arrival_ns: parts
            .iter()
            .map(|p| p.arrival_ns)
            .min()
            .unwrap_or(first.arrival_ns),
        queued_ns: first.queued_ns,
        first_scheduled_ns: first.first_scheduled_at(),
        first_token_ns: last.first_token_at(),
        finished_ns: parts
            .iter()
            .map(|p| p.finished_ns)
            .max()
            .unwrap_or(last.finished_ns),
        finish_reason: last.finish_reason,
        prompt_tokens: parts.iter().map(|p| p.prompt_tokens).max().unwrap_or(0),
        output_tokens: last.output_tokens,
        cached_tokens: parts.iter().map(|p| p.cached_tokens).max().unwrap_or(0),
        prefill_chunks,
        preemptions,
        kv_transfer: parts.iter().find_map(|p| p.kv_transfer.clone()),
        sampling: last.sampling.clone(),
        tokens,
        served: Served {
            lora_adapter: parts.iter().find_map(|p| p.served.lora_adapter.clone()),
            priority: parts.iter().find_map(|p| p.served.priority),
            tenant: parts.iter().find_map(|p| p.served.tenant.clone()),
            // The prefill instance's cache served the prompt.
            prefix_cache: parts.iter().find_map(|p| p.served.prefix_cache.clone()),
        },
    }
}

/// The joined request's bars: its own (the first part's queue, every prefill chunk, the KV
/// transfer, preemptions, the answer's decode), plus each later part's wait for a slot on its
/// instance once the earlier parts were done (a decode instance too busy to take the request).
pub fn joined_stages(parts: &[&RequestTrace], joined: &RequestTrace) -> Vec<Stage> {
    let mut out = stages(joined);
    for (i, part) in parts.iter().enumerate().skip(1) {
        let handed_over = parts[..i]
            .iter()
            .map(|p| p.finished_ns)
            .chain(joined.kv_transfer.as_ref().map(|kv| kv.end_ns))
            .max()
            .unwrap_or(part.arrival_ns);
        out.extend(stages(part).into_iter().filter_map(|mut s| {
            s.start_ns = s.start_ns.max(handed_over);
            (s.kind == StageKind::Queued && s.end_ns > s.start_ns).then_some(s)
        }));
    }
    out.sort_by_key(|s| (s.start_ns, s.end_ns));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::metrics::request_metrics;
    use crate::model::{KvTransfer, PrefillChunk, Token};

    const T0: Nanos = 1_700_000_000_000_000_000;
    const MS: Nanos = 1_000_000;

    fn tokens(at_ms: &[Nanos]) -> Vec<Token> {
        at_ms
            .iter()
            .map(|t| Token {
                emitted_ns: Some(T0 + t * MS),
                ..Token::default()
            })
            .collect()
    }

    /// Prefilled on one instance (queued 10 ms, 40 ms of prefill, its own first token at 50 ms),
    /// KV moved in 300 ms, then 20 ms waiting for a slot on the decode instance and four tokens.
    fn parts() -> (RequestTrace, RequestTrace) {
        let prefill = RequestTrace {
            request_id: "r".into(),
            arrival_ns: T0,
            first_scheduled_ns: Some(T0 + 10 * MS),
            finished_ns: T0 + 50 * MS,
            prompt_tokens: 4000,
            output_tokens: 1,
            prefill_chunks: vec![PrefillChunk {
                start_ns: T0 + 10 * MS,
                end_ns: T0 + 50 * MS,
                tokens: 4000,
                iteration: None,
            }],
            tokens: tokens(&[50]),
            ..RequestTrace::default()
        };
        let decode = RequestTrace {
            request_id: "r".into(),
            trace_id: Some("ab".repeat(16)),
            arrival_ns: T0,
            queued_ns: Some(T0 + 350 * MS),
            first_scheduled_ns: Some(T0 + 370 * MS),
            finished_ns: T0 + 400 * MS,
            prompt_tokens: 4000,
            output_tokens: 4,
            kv_transfer: Some(KvTransfer {
                start_ns: T0 + 50 * MS,
                end_ns: T0 + 350 * MS,
                bytes: None,
                blocks: None,
            }),
            tokens: tokens(&[370, 380, 390, 400]),
            ..RequestTrace::default()
        };
        (prefill, decode)
    }

    #[test]
    fn a_decode_part_stamped_before_the_prefill_finished_is_moved_onto_the_prefill_clock() {
        let (p, mut d) = parts();
        // The decode instance's clock runs 200 ms behind: its transfer would start 150 ms
        // before the prompt was prefilled, and its first token 170 ms after the client arrived.
        d.shift(-200 * MS);
        let behind = clock_behind(&[&p, &d]);
        assert_eq!(behind, [0, 200 * MS]);
        let note = clock_note(&behind, &["gpu-p", "gpu-d"]).expect("the clocks disagree");
        let mut both = [p.clone(), d.clone()];
        for (part, by) in both.iter_mut().zip(behind) {
            part.shift(by);
        }
        assert!(
            note.contains("gpu-d's clock runs at least 200.0 ms behind gpu-p's"),
            "{note}"
        );
        let joined = join(&[&both[0], &both[1]]);
        // Moved by the least that makes the order possible: the transfer starts as the prefill ends.
        assert_eq!(joined.kv_transfer.as_ref().unwrap().start_ns, T0 + 50 * MS);
        assert_eq!(request_metrics(&joined).ttft_ns, Some(370 * MS));
        let bars = joined_stages(&[&both[0], &both[1]], &joined);
        assert!(bars.iter().all(|s| s.end_ns >= s.start_ns), "{bars:?}");
        // Clocks in order (or a decode clock ahead, which looks like a slow hand-over): untouched.
        let mut ahead = d.clone();
        ahead.shift(400 * MS);
        let behind = clock_behind(&[&p, &ahead]);
        assert_eq!(behind, [0, 0]);
        assert_eq!(clock_note(&behind, &["gpu-p", "gpu-d"]), None);
    }

    #[test]
    fn only_prefill_and_decode_parts_are_one_request() {
        assert!(is_pd(&[Role::Prefill, Role::Decode]));
        assert!(is_pd(&[Role::Decode, Role::Prefill, Role::Decode]));
        assert!(!is_pd(&[Role::Colocated, Role::Colocated]), "an id reused");
        assert!(!is_pd(&[Role::Prefill, Role::Colocated]));
        assert!(!is_pd(&[Role::Decode, Role::Decode]), "no prefill part");
    }

    #[test]
    fn the_client_waits_from_the_first_arrival_to_the_decode_parts_first_token() {
        let (p, d) = parts();
        let joined = join(&[&p, &d]);
        let m = request_metrics(&joined);
        assert_eq!(
            m.ttft_ns,
            Some(370 * MS),
            "not the prefill part's own 50 ms"
        );
        assert_eq!(m.tpot_ns, Some(10 * MS));
        assert_eq!(m.e2e_ns, 400 * MS);
        assert_eq!(m.queue_ns, Some(10 * MS), "the first part's queue");
        assert_eq!(
            joined.tokens.len(),
            4,
            "the answer the decode part streamed"
        );
        assert_eq!(joined.output_tokens, 4);
        assert_eq!(joined.prompt_tokens, 4000);
        assert_eq!(joined.trace_id, d.trace_id);
        assert_eq!(joined.prefill_chunks.len(), 1);
        assert!(joined.kv_transfer.is_some());
    }

    #[test]
    fn bars_run_prefill_transfer_then_the_decode_instances_queue_and_decode() {
        let (p, d) = parts();
        let joined = join(&[&p, &d]);
        let bars: Vec<(StageKind, Nanos, Nanos)> = joined_stages(&[&p, &d], &joined)
            .iter()
            .map(|s| (s.kind, (s.start_ns - T0) / MS, (s.end_ns - T0) / MS))
            .collect();
        assert_eq!(
            bars,
            vec![
                (StageKind::Queued, 0, 10),
                (StageKind::Prefill, 10, 50),
                (StageKind::KvTransfer, 50, 350),
                (StageKind::Queued, 350, 370),
                (StageKind::Decode, 370, 400),
            ]
        );
    }

    #[test]
    fn a_decode_part_that_says_it_queued_from_the_clients_arrival_waits_only_after_the_transfer() {
        let (p, mut d) = parts();
        d.queued_ns = None;
        let joined = join(&[&p, &d]);
        let queues: Vec<(Nanos, Nanos)> = joined_stages(&[&p, &d], &joined)
            .iter()
            .filter(|s| s.kind == StageKind::Queued)
            .map(|s| ((s.start_ns - T0) / MS, (s.end_ns - T0) / MS))
            .collect();
        assert_eq!(queues, vec![(0, 10), (350, 370)]);
    }
}

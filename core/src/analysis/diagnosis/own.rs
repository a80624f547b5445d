//! What the other rules leave: a request that broke an SLO is never healthy. A late first token
//! that no other request, queue or transfer explains was its own prompt's doing (`long_prompt`)
//! or is `unexplained` (the finding says what was checked); a slow decode that no other request's
//! prefill explains is `decode_slow`, with the load its steps ran under.

use super::first_token::Wait;
use super::{Cause, Context, Finding, Severity, Thresholds, duration, ms, slo_text, thousands};
use crate::model::{Nanos, OtherRequest, Phase, RequestTrace};

/// Causes that explain a late (or missing) first token.
const FIRST_TOKEN: [Cause; 5] = [
    Cause::KvTransferSlow,
    Cause::PrefillMonopolized,
    Cause::EngineSaturated,
    Cause::QueueBacklog,
    Cause::KvPreempted,
];

/// Causes that explain a slow or stalled decode.
const DECODE: [Cause; 4] = [
    Cause::PrefillInterruptedDecode,
    Cause::EngineSaturated,
    Cause::DecodeStalled,
    Cause::KvPreempted,
];

fn covered(found: &[Finding], by: &[Cause]) -> bool {
    found.iter().any(|f| by.contains(&f.cause))
}

/// The time the request's own prompt was prefilling: its prefill chunks, else first step to
/// first token.
fn own_prefill(r: &RequestTrace) -> Nanos {
    if !r.prefill_chunks.is_empty() {
        return r.prefill_chunks.iter().map(|c| c.end_ns - c.start_ns).sum();
    }
    match (r.first_scheduled_at(), r.first_token_at()) {
        (Some(s), Some(f)) if f > s => f - s,
        _ => 0,
    }
}

/// Prompt tokens per second of the other requests prefilled during its lifetime, and how many
/// there were: what this instance usually manages. Only those: the context may hold more
/// neighbours (a window's), and the answer must not depend on how many were read.
fn usual_prefill_rate(r: &RequestTrace, ctx: &Context) -> Option<(f64, usize)> {
    let (mut tokens, mut time, mut n) = (0u64, 0 as Nanos, 0);
    let around = |o: &&OtherRequest| {
        o.request_id != r.request_id
            && o.prefill
                .iter()
                .any(|&(s, e, _)| e > r.arrival_ns && s < r.finished_ns)
    };
    for o in ctx.others.iter().filter(around) {
        let t: Nanos = o.prefill.iter().map(|&(s, e, _)| e - s).sum();
        if t > 0 {
            tokens += o.prefill.iter().map(|&(_, _, k)| u64::from(k)).sum::<u64>();
            time += t;
            n += 1;
        }
    }
    (n > 0 && tokens > 0).then(|| (tokens as f64 / (time as f64 / 1e9), n))
}

/// A first-token wait past the SLO that no other finding explains.
pub(super) fn first_token_left(
    r: &RequestTrace,
    wait: Wait,
    ctx: &Context,
    th: &Thresholds,
    found: &[Finding],
) -> Option<Finding> {
    if covered(found, &FIRST_TOKEN) {
        return None;
    }
    let waited = wait.ns();
    let prefill = own_prefill(r);
    let computed = r.prompt_tokens.saturating_sub(r.cached_tokens);
    let queued = r
        .first_scheduled_at()
        .map(|s| s - r.queued_ns.unwrap_or(r.arrival_ns))
        .unwrap_or(0)
        .max(0);
    let usual = usual_prefill_rate(r, ctx);
    if prefill > 0 && prefill * 2 >= waited {
        let rate = f64::from(computed) / (prefill as f64 / 1e9);
        let cached = if r.cached_tokens > 0 {
            format!(" ({} of them cached)", thousands(r.cached_tokens.into()))
        } else {
            String::new()
        };
        let against = usual
            .map(|(u, n)| {
                format!(
                    "; the {n} other prompt{} around it prefilled at {} tokens/s",
                    if n == 1 { "" } else { "s" },
                    thousands(u as u64)
                )
            })
            .unwrap_or_default();
        return Some(Finding {
            cause: Cause::LongPrompt,
            severity: Severity::Warning,
            summary: format!(
                "{}: its own {}-token prompt{cached} took {} to prefill ({} tokens/s{against}).",
                wait.lead(th),
                thousands(r.prompt_tokens.into()),
                duration(prefill),
                thousands(rate as u64),
            ),
            culprits: Vec::new(),
            evidence: wait.evidence(serde_json::json!({
                "prefill_ms": ms(prefill),
                "prompt_tokens": r.prompt_tokens,
                "cached_tokens": r.cached_tokens,
                "prefill_tokens_per_s": rate.round(),
                "usual_prefill_tokens_per_s": usual.map(|u| u.0.round()),
                "usual_from_requests": usual.map(|u| u.1),
            })),
            inferred: ctx.iterations.is_empty(),
        });
    }
    Some(Finding {
        cause: Cause::Unexplained,
        severity: Severity::Warning,
        summary: format!(
            "{}, and no cause was found: {} queued, {} prefilling its own {}-token prompt; \
             no other prompt held the engine and no KV transfer was slow.",
            wait.lead(th),
            duration(queued),
            duration(prefill),
            thousands(r.prompt_tokens.into()),
        ),
        culprits: Vec::new(),
        evidence: wait.evidence(serde_json::json!({
            "queue_ms": ms(queued),
            "prefill_ms": ms(prefill),
            "checked": ["kv_transfer_slow", "prefill_monopolized", "queue_backlog", "kv_preempted", "long_prompt"],
        })),
        inferred: ctx.iterations.is_empty(),
    })
}

/// A decode past the TPOT SLO (or one gap past the stall threshold) that no other request's
/// prefill, stall or preemption finding explains: the load its own steps ran under.
pub(super) fn decode_left(
    r: &RequestTrace,
    tpot: Option<Nanos>,
    ctx: &Context,
    th: &Thresholds,
    found: &[Finding],
) -> Option<Finding> {
    let times: Vec<Nanos> = r.tokens.iter().filter_map(|t| t.emitted_ns).collect();
    let longest = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let slow = tpot.is_some_and(|t| ms(t) > th.tpot_ms);
    if !(slow || ms(longest) > th.stall_ms) || covered(found, &DECODE) {
        return None;
    }
    let first = r.first_token_at().unwrap_or(r.finished_ns);
    // The steps that decoded this request.
    let steps: Vec<_> = ctx
        .iterations
        .iter()
        .filter(|it| it.end_ns > first && it.start_ns < r.finished_ns)
        .filter(|it| {
            it.batch
                .iter()
                .any(|e| *e.request_id == *r.request_id && e.phase == Phase::Decode)
        })
        .collect();
    let n = steps.len();
    let batch =
        (n > 0).then(|| steps.iter().map(|s| s.batch.len()).sum::<usize>() as f64 / n as f64);
    let kv = (n > 0).then(|| {
        steps
            .iter()
            .map(|s| f64::from(s.kv_cache_usage))
            .sum::<f64>()
            / n as f64
    });
    let lead = match tpot.filter(|_| slow) {
        Some(t) => format!("TPOT {} > {} SLO", duration(t), slo_text(th.tpot_ms)),
        None => format!(
            "A gap of {} between tokens (over the {} stall threshold)",
            duration(longest),
            slo_text(th.stall_ms)
        ),
    };
    let load = match (batch, kv) {
        (Some(b), Some(k)) => format!(
            "its {n} decode steps ran with {b:.0} requests in the batch on average, KV cache {:.0} % full",
            k * 100.0
        ),
        _ => "no step records say what else the engine ran".to_string(),
    };
    Some(Finding {
        cause: Cause::DecodeSlow,
        severity: Severity::Warning,
        summary: format!("{lead}, not from other requests' prefills: {load}."),
        culprits: Vec::new(),
        evidence: serde_json::json!({
            "tpot_ms": tpot.map(ms),
            "longest_gap_ms": ms(longest),
            "decode_steps": n,
            "mean_batch_size": batch,
            "mean_kv_cache_usage": kv,
        }),
        inferred: ctx.iterations.is_empty(),
    })
}

#[cfg(test)]
mod tests {
    //! Each case builds the engine's timeline by hand (what ran, when) and expects the cause
    //! that timeline holds; none is derived from the rules.

    use std::sync::Arc;

    use super::super::{Context, Diagnosis, OtherRequest, Thresholds, Verdict, diagnose};
    use crate::model::{
        BatchEntry, FinishReason, Iteration, Nanos, Phase, Preemption, PrefillChunk, RequestTrace,
        Token,
    };

    const MS: Nanos = 1_000_000;

    fn tokens(at_ms: &[i64]) -> Vec<Token> {
        at_ms
            .iter()
            .map(|&t| Token {
                emitted_ns: Some(t * MS),
                ..Token::default()
            })
            .collect()
    }

    fn step(id: u64, from_ms: i64, to_ms: i64, batch: &[(&str, Phase, u32)], kv: f32) -> Iteration {
        Iteration {
            iteration_id: id,
            start_ns: from_ms * MS,
            end_ns: to_ms * MS,
            batch: batch
                .iter()
                .map(|&(r, phase, tokens)| BatchEntry {
                    request_id: Arc::from(r),
                    phase,
                    tokens,
                    prefill_offset: 0,
                    draft: None,
                })
                .collect(),
            running: batch.len() as u32,
            waiting: 0,
            kv_cache_usage: kv,
        }
    }

    fn run(r: &RequestTrace, iterations: &[Iteration], others: &[OtherRequest]) -> Diagnosis {
        diagnose(
            r,
            &Context::new(iterations, others, None),
            &Thresholds::default(),
        )
    }

    fn causes(d: &Diagnosis) -> Vec<(&'static str, Vec<String>)> {
        d.findings
            .iter()
            .map(|f| (f.cause.name(), f.culprits.clone()))
            .collect()
    }

    #[test]
    fn a_prompt_that_alone_took_the_first_token_time_is_named_as_the_request_s_own() {
        // Scheduled at once; its own 95,000-token prompt prefilled from 10 ms to 2,180 ms.
        let r = RequestTrace {
            request_id: "big".into(),
            arrival_ns: 0,
            queued_ns: Some(0),
            first_scheduled_ns: Some(10 * MS),
            finished_ns: 2_300 * MS,
            prompt_tokens: 95_000,
            prefill_chunks: vec![PrefillChunk {
                start_ns: 10 * MS,
                end_ns: 2_180 * MS,
                tokens: 95_000,
                iteration: None,
            }],
            tokens: tokens(&[2_180, 2_220, 2_260, 2_300]),
            output_tokens: 4,
            ..RequestTrace::default()
        };
        // One neighbour prefilled while it decoded; another a minute later, which a window's
        // read would also hold: it says nothing of this request and must not change its answer.
        let neighbour = |id: &str, from_ms: i64| OtherRequest {
            request_id: id.into(),
            prompt_tokens: 40_000,
            prefill: vec![(from_ms * MS, (from_ms + 800) * MS, 40_000)],
        };
        let d = run(&r, &[], &[neighbour("n", 2_200)]);
        assert_eq!(
            run(
                &r,
                &[],
                &[neighbour("n", 2_200), neighbour("later", 60_000)]
            ),
            d
        );
        assert_eq!(d.verdict, Verdict::Degraded);
        assert_eq!(causes(&d), [("long_prompt", vec![])]);
        let f = &d.findings[0];
        assert!(
            f.summary.starts_with(
                "TTFT 2.18 s > 2 s SLO: its own 95,000-token prompt took 2.17 s to prefill"
            ),
            "{}",
            f.summary
        );
        assert!(
            f.summary
                .contains("the 1 other prompt around it prefilled at 50,000 tokens/s"),
            "{}",
            f.summary
        );
        assert_eq!(f.evidence["usual_prefill_tokens_per_s"], 50_000.0);
    }

    #[test]
    fn a_late_first_token_nothing_explains_says_what_was_checked() {
        // 300 ms queued, a 400 ms prefill, then 1.8 s in which nothing recorded ran.
        let r = RequestTrace {
            request_id: "odd".into(),
            arrival_ns: 0,
            queued_ns: Some(0),
            first_scheduled_ns: Some(300 * MS),
            finished_ns: 2_550 * MS,
            prompt_tokens: 800,
            prefill_chunks: vec![PrefillChunk {
                start_ns: 300 * MS,
                end_ns: 700 * MS,
                tokens: 800,
                iteration: None,
            }],
            tokens: tokens(&[2_500, 2_550]),
            output_tokens: 2,
            ..RequestTrace::default()
        };
        let d = run(&r, &[], &[]);
        assert_eq!(causes(&d), [("unexplained", vec![])]);
        let s = &d.findings[0].summary;
        assert!(s.starts_with("TTFT 2.50 s > 2 s SLO, and no cause was found: 300.0 ms queued, 400.0 ms prefilling"), "{s}");
        assert_eq!(d.verdict, Verdict::Degraded);
    }

    /// A request decoding a token every 65 ms in a batch of 48 with no prefill anywhere.
    fn steady(steps: bool) -> (RequestTrace, Vec<Iteration>) {
        let at: Vec<i64> = (0..20).map(|i| 100 + 65 * i).collect();
        let r = RequestTrace {
            request_id: "slow".into(),
            arrival_ns: 0,
            queued_ns: Some(0),
            first_scheduled_ns: Some(20 * MS),
            finished_ns: *at.last().unwrap() * MS,
            prompt_tokens: 300,
            tokens: tokens(&at),
            output_tokens: 20,
            ..RequestTrace::default()
        };
        let others: Vec<String> = (0..47).map(|i| format!("d{i}")).collect();
        let its = if steps {
            at.windows(2)
                .enumerate()
                .map(|(i, w)| {
                    let mut batch = vec![("slow", Phase::Decode, 1)];
                    batch.extend(others.iter().map(|o| (o.as_str(), Phase::Decode, 1)));
                    step(i as u64, w[0], w[1], &batch, 0.91)
                })
                .collect()
        } else {
            Vec::new()
        };
        (r, its)
    }

    #[test]
    fn a_slow_decode_no_prefill_explains_is_named_with_its_load() {
        let (r, its) = steady(true);
        let d = run(&r, &its, &[]);
        assert_eq!(causes(&d), [("decode_slow", vec![])]);
        let s = &d.findings[0].summary;
        assert!(
            s.starts_with("TPOT 65.0 ms > 50 ms SLO, not from other requests' prefills: its 19 decode steps ran with 48 requests in the batch on average, KV cache 91 % full"),
            "{s}"
        );
        let (r, _) = steady(false);
        let d = run(&r, &[], &[]);
        assert_eq!(causes(&d), [("decode_slow", vec![])]);
        assert!(d.findings[0].inferred);
    }

    #[test]
    fn a_client_that_gives_up_at_once_is_no_incident() {
        let gone = RequestTrace {
            request_id: "gone".into(),
            arrival_ns: 0,
            queued_ns: Some(0),
            finished_ns: 10 * MS,
            finish_reason: FinishReason::Abort,
            prompt_tokens: 300,
            ..RequestTrace::default()
        };
        let d = run(&gone, &[], &[]);
        assert_eq!(d.verdict, Verdict::Healthy, "{:?}", d.findings);
        // Given up on after 3 s in which nothing ran: a finding, with what was checked.
        let late = RequestTrace {
            finished_ns: 3_000 * MS,
            ..gone
        };
        let d = run(&late, &[], &[]);
        assert_eq!(d.verdict, Verdict::Degraded);
    }

    #[test]
    fn overlapping_async_steps_still_name_the_prefill_that_stalled_the_decode() {
        // Async scheduling: each step is launched before the previous one's output is
        // processed, so steps overlap by 5 ms and a token appears after the next step began.
        // The third step carried `big`'s 20,000-token prefill and ran 550 ms.
        let v = |n| ("victim", Phase::Decode, n);
        let its = [
            step(1, 0, 30, &[v(1)], 0.3),
            step(2, 25, 55, &[v(1)], 0.3),
            step(3, 50, 600, &[v(1), ("big", Phase::Prefill, 20_000)], 0.5),
            step(4, 595, 625, &[v(1)], 0.5),
            step(5, 620, 650, &[v(1)], 0.5),
        ];
        let r = RequestTrace {
            request_id: "victim".into(),
            arrival_ns: 0,
            queued_ns: Some(0),
            first_scheduled_ns: Some(0),
            finished_ns: 650 * MS,
            prompt_tokens: 100,
            tokens: tokens(&[30, 55, 600, 625, 650]),
            output_tokens: 5,
            ..RequestTrace::default()
        };
        let d = run(&r, &its, &[]);
        assert_eq!(
            causes(&d),
            [("prefill_interrupted_decode", vec!["big".into()])]
        );
        // No step lies wholly inside the 55–600 ms gap: step 3 began 5 ms before it.
        assert!(
            !its.iter()
                .any(|s| s.start_ns >= 55 * MS && s.end_ns <= 600 * MS && s.batch.len() > 1)
        );
    }

    #[test]
    fn a_hiccup_no_prefill_explains_does_not_hide_the_prefill_stalls_around_it() {
        // What vLLM's scheduler on a loaded host did in the engine tests: 5 ms decode steps, one
        // decode-only step that took 60 ms (the host, not the engine's load), then five steps
        // carrying `long`'s 256-token chunks at 20 ms each. Weighed against all the stalled
        // time, the hiccup outweighed the chunks' marginal 75 ms; gap by gap, `long` stalled
        // this stream five times, and is named.
        let decode = [("victim", Phase::Decode, 1)];
        let chunk = [("victim", Phase::Decode, 1), ("long", Phase::Prefill, 256)];
        type Batch<'a> = &'a [(&'a str, Phase, u32)];
        let steps: Vec<(i64, Batch)> = [(5, &decode[..]); 6]
            .into_iter()
            .chain([(60, &decode[..]), (5, &decode[..]), (5, &decode[..])])
            .chain([(20, &chunk[..]); 5])
            .chain([(5, &decode[..]); 6])
            .collect();
        let (mut its, mut at, mut t) = (Vec::new(), vec![5], 5);
        for (id, (len, batch)) in steps.into_iter().enumerate() {
            its.push(step(id as u64 + 1, t, t + len, batch, 0.4));
            t += len;
            at.push(t);
        }
        let r = RequestTrace {
            request_id: "victim".into(),
            arrival_ns: 0,
            queued_ns: Some(0),
            first_scheduled_ns: Some(0),
            finished_ns: *at.last().unwrap() * MS,
            prompt_tokens: 40,
            tokens: tokens(&at),
            output_tokens: at.len() as u32,
            ..RequestTrace::default()
        };
        let th = Thresholds {
            tpot_ms: 50.0,
            stall_ms: 12.0,
            ..Thresholds::default()
        };
        let ctx = Context::new(&its, &[], None);
        let d = diagnose(&r, &ctx, &th);
        assert_eq!(
            causes(&d),
            [("prefill_interrupted_decode", vec!["long".into()])]
        );
        let s = &d.findings[0].summary;
        assert!(
            s.contains("(1 more gap of 60.0 ms in all no prefill explains)"),
            "{s}"
        );
    }

    #[test]
    fn a_preemption_names_the_request_the_scheduler_made_room_for() {
        let r = RequestTrace {
            request_id: "victim".into(),
            arrival_ns: 0,
            queued_ns: Some(0),
            first_scheduled_ns: Some(0),
            finished_ns: 900 * MS,
            prompt_tokens: 1000,
            tokens: tokens(&[20, 40, 800, 820, 900]),
            output_tokens: 5,
            preemptions: vec![Preemption {
                at_ns: 50 * MS,
                resumed_ns: Some(700 * MS),
                recompute: true,
                aggressor: Some("big".into()),
                recompute_tokens: Some(1002),
            }],
            ..RequestTrace::default()
        };
        let d = run(&r, &[], &[]);
        let f = d
            .findings
            .iter()
            .find(|f| f.cause.name() == "kv_preempted")
            .expect("a preemption finding");
        assert_eq!(f.culprits, ["big"]);
        assert!(
            f.summary.ends_with("losing 650.0 ms before it resumed and computing 1,002 tokens again: the scheduler made room for big."),
            "{}",
            f.summary
        );
    }
}

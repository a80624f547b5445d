//! Checks that a trace is internally consistent before it is stored; names the offending field.

use std::fmt;

use super::request::{MAX_BLOCK_HASHES, PrefixCache};
use super::{Iteration, Nanos, RequestTrace, Resource};

/// 2000-01-01 and 2100-01-01 in Unix nanoseconds: anything outside is a unit mistake
/// (seconds or microseconds sent as nanoseconds) or garbage, not a real trace.
pub const EARLIEST_NS: Nanos = 946_684_800_000_000_000;
pub const LATEST_NS: Nanos = 4_102_444_800_000_000_000;
/// No request or iteration lasts a week; a longer span means mixed-up clocks.
pub const MAX_DURATION_NS: Nanos = 7 * 24 * 3600 * 1_000_000_000;
const MAX_ID_LEN: usize = 256;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

type Check = Result<(), FieldError>;

/// A field's name in an error. Names made per token (`tokens.logprob[7]`) are given as closures,
/// so that they are formatted only when a check fails: these checks run for every token ingested.
trait FieldName {
    fn name(self) -> String;
}

impl FieldName for &str {
    fn name(self) -> String {
        self.to_string()
    }
}

impl<F: FnOnce() -> String> FieldName for F {
    fn name(self) -> String {
        self()
    }
}

fn ensure(ok: bool, field: impl FieldName, message: impl FnOnce() -> String) -> Check {
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(field.name(), message()))
    }
}

fn check_time(field: &str, t: Nanos) -> Check {
    ensure((EARLIEST_NS..LATEST_NS).contains(&t), field, || {
        format!("{t} is not nanoseconds since the Unix epoch between the years 2000 and 2100")
    })
}

/// `t` must lie in `[from, to]` (both already checked to be plausible).
fn check_within(field: impl FieldName, t: Nanos, from: Nanos, to: Nanos) -> Check {
    ensure(t >= from && t <= to, field, || {
        format!("{t} lies outside the request's lifetime [{from}, {to}]")
    })
}

fn check_id(field: impl FieldName + Copy, id: &str) -> Check {
    ensure(!id.is_empty(), field, || "must not be empty".into())?;
    ensure(id.len() <= MAX_ID_LEN, field, || {
        format!("is {} bytes long; at most {MAX_ID_LEN} allowed", id.len())
    })
}

fn check_hex(field: &str, value: &Option<String>, digits: usize) -> Check {
    match value {
        None => Ok(()),
        Some(v) => ensure(
            v.len() == digits && v.bytes().all(|b| b.is_ascii_hexdigit()),
            field,
            || {
                format!(
                    "must be {} bytes ({digits} hex digits), got {v:?}",
                    digits / 2
                )
            },
        ),
    }
}

pub fn resource(r: &Resource) -> Check {
    check_id("resource.instance_id", &r.instance_id)?;
    ensure(!r.model.is_empty(), "resource.model", || {
        "must not be empty".into()
    })
}

fn prefix_cache(p: &PrefixCache, prompt_tokens: u32) -> Check {
    let hashes = p.block_hashes.len();
    ensure(
        hashes <= MAX_BLOCK_HASHES,
        "prefix_cache.block_hashes",
        || format!("has {hashes}; at most {MAX_BLOCK_HASHES} (the chain's start) are kept"),
    )?;
    ensure(hashes <= p.blocks as usize, "prefix_cache.blocks", || {
        format!("is {} but block_hashes has {hashes}", p.blocks)
    })?;
    let served = u64::from(p.gpu_tokens) + u64::from(p.cpu_tokens) + u64::from(p.external_tokens);
    ensure(served <= u64::from(prompt_tokens), "prefix_cache", || {
        format!("serves {served} tokens from its tiers, more than prompt_tokens {prompt_tokens}")
    })
}

pub fn request(r: &RequestTrace) -> Check {
    check_id("request_id", &r.request_id)?;
    check_hex("trace_id", &r.trace_id, 32)?;
    check_hex("parent_span_id", &r.parent_span_id, 16)?;
    check_time("arrival_ns", r.arrival_ns)?;
    check_time("finished_ns", r.finished_ns)?;
    let (from, to) = (r.arrival_ns, r.finished_ns);
    ensure(to >= from, "finished_ns", || {
        format!("{to} is before arrival_ns {from}")
    })?;
    ensure(to - from <= MAX_DURATION_NS, "finished_ns", || {
        format!(
            "request lasted {} s; more than a week means mixed-up clocks",
            (to - from) / 1_000_000_000
        )
    })?;
    for (field, t) in [
        ("queued_ns", r.queued_ns),
        ("first_scheduled_ns", r.first_scheduled_ns),
        ("first_token_ns", r.first_token_ns),
    ] {
        if let Some(t) = t {
            check_within(field, t, from, to)?;
        }
    }
    ensure(r.cached_tokens <= r.prompt_tokens, "cached_tokens", || {
        format!(
            "{} exceeds prompt_tokens {}",
            r.cached_tokens, r.prompt_tokens
        )
    })?;
    for (i, c) in r.prefill_chunks.iter().enumerate() {
        check_within(
            || format!("prefill_chunks[{i}].start_ns"),
            c.start_ns,
            from,
            to,
        )?;
        check_within(
            || format!("prefill_chunks[{i}].end_ns"),
            c.end_ns,
            c.start_ns,
            to,
        )?;
    }
    for (i, p) in r.preemptions.iter().enumerate() {
        check_within(|| format!("preemptions[{i}].at_ns"), p.at_ns, from, to)?;
        if let Some(t) = p.resumed_ns {
            check_within(|| format!("preemptions[{i}].resumed_ns"), t, p.at_ns, to)?;
        }
        if let Some(a) = &p.aggressor {
            check_id(|| format!("preemptions[{i}].aggressor_request_id"), a)?;
        }
    }
    let served = &r.served;
    for (field, v) in [
        ("lora_adapter", &served.lora_adapter),
        ("tenant", &served.tenant),
    ] {
        if let Some(v) = v {
            check_id(field, v)?;
        }
    }
    if let Some(p) = &served.prefix_cache {
        prefix_cache(p, r.prompt_tokens)?;
    }
    if let Some(kv) = &r.kv_transfer {
        // A KV transfer may start before the decode instance saw the request arrive, so only
        // plausibility and order are checked.
        check_time("kv_transfer.start_ns", kv.start_ns)?;
        check_time("kv_transfer.end_ns", kv.end_ns)?;
        ensure(kv.end_ns >= kv.start_ns, "kv_transfer.end_ns", || {
            format!("{} is before start_ns {}", kv.end_ns, kv.start_ns)
        })?;
    }
    tokens(r)
}

fn tokens(r: &RequestTrace) -> Check {
    if r.tokens.is_empty() {
        return Ok(());
    }
    ensure(
        r.output_tokens as usize == r.tokens.len(),
        "output_tokens",
        || {
            format!(
                "is {} but {} tokens were sent",
                r.output_tokens,
                r.tokens.len()
            )
        },
    )?;
    let mut previous = r.arrival_ns;
    for (i, t) in r.tokens.iter().enumerate() {
        if let Some(at) = t.emitted_ns {
            check_within(
                || format!("tokens.emitted_ns[{i}]"),
                at,
                previous,
                r.finished_ns,
            )?;
            previous = at;
        }
        if let (Some(at), Some(emitted)) = (t.scheduled_ns, t.emitted_ns) {
            check_within(
                || format!("tokens.scheduled_ns[{i}]"),
                at,
                r.arrival_ns,
                emitted,
            )?;
        }
        if let Some(lp) = t.logprob {
            ensure(
                lp <= 1e-3 && !lp.is_nan(),
                || format!("tokens.logprob[{i}]"),
                || format!("{lp} is not a log-probability (must be ≤ 0)"),
            )?;
        }
        if let Some(rank) = t.rank {
            ensure(
                rank >= 1,
                || format!("tokens.rank[{i}]"),
                || "ranks start at 1".into(),
            )?;
        }
        let mut last = f32::INFINITY;
        for (k, c) in t.candidates.iter().enumerate() {
            let field = || format!("tokens.candidates[{i}][{k}].logprob");
            ensure(c.logprob <= 1e-3 && !c.logprob.is_nan(), field, || {
                format!("{} is not a log-probability (must be ≤ 0)", c.logprob)
            })?;
            ensure(c.logprob <= last, field, || {
                format!(
                    "{} is above the previous candidate's {last}: candidates must be in rank order",
                    c.logprob
                )
            })?;
            last = c.logprob;
        }
    }
    Ok(())
}

pub fn iteration(it: &Iteration) -> Check {
    check_time("start_ns", it.start_ns)?;
    check_time("end_ns", it.end_ns)?;
    ensure(it.end_ns >= it.start_ns, "end_ns", || {
        format!("{} is before start_ns {}", it.end_ns, it.start_ns)
    })?;
    ensure(it.end_ns - it.start_ns <= MAX_DURATION_NS, "end_ns", || {
        "an iteration longer than a week means mixed-up clocks".into()
    })?;
    ensure(
        (0.0..=1.0).contains(&it.kv_cache_usage),
        "kv_cache_usage",
        || format!("{} is not a fraction between 0 and 1", it.kv_cache_usage),
    )?;
    for (i, e) in it.batch.iter().enumerate() {
        check_id(|| format!("batch[{i}].request_id"), &e.request_id)?;
    }
    Ok(())
}

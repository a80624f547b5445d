//! TensorRT-LLM request performance records: `GET /perf_metrics` (worker records: `perf_metrics`
//! with `timing_metrics`, and `step_metrics` / `ctx_chunk_metrics`; the disaggregated server's
//! records, a worker record for each part), and the
//! perf-time-events JSONL (`time_breakdown_metrics` + `request_timing_metrics`) whose per-step
//! entries carry the batch context (`iter_counter`, `iter_batch_size`, `num_ctx_requests`, …).
//!
//! Times are steady-clock seconds. Token ids are not reported, so tokens carry times and batch
//! load only. Current TensorRT-LLM puts a worker record's steps in `time_breakdown_metrics`
//! beside `perf_metrics` (`tensorrt_llm/serve/_perf_metrics_schema.py`); older versions put them
//! inside `perf_metrics`. Both are read. A step's `iter` is the request's own step index; only
//! the perf-time-events log names the engine's iteration (`iter_counter`).

use std::collections::BTreeMap;

use serde::Deserialize;

use tokenscope_core::model::{
    BatchEntry, EngineKind, FinishReason, Iteration, KvTransfer, Nanos, Phase, PrefillChunk,
    RequestTrace, Role, Token,
    validate::{self, FieldError},
};

use super::{Imported, Options, json_values, resource};
use crate::error::Result;
use crate::ingest::{Item, ItemKind, ResourceBatch, normalize};

// The formats, as `tensorrt_llm/serve/_perf_metrics_schema.py` declares them (TypedDicts; `NotRequired`
// and `Optional` fields are `Option`s here, unknown fields ignored). The perf-time-events log
// reuses `StepMetrics` and `TimingMetrics` and adds the engine iteration's context to each step.

/// `StepMetrics`: one generation step of a request, or one chunk of its context.
#[derive(Debug, Default, Deserialize)]
struct StepMetrics {
    forward_start_time: Option<f64>,
    forward_end_time: Option<f64>,
    sample_end_time: Option<f64>,
    token_time: Option<f64>,
    // The perf-time-events log's iteration context.
    iter_counter: Option<u32>,
    iter_batch_size: Option<u32>,
    req_generation_token_number: Option<u32>,
    req_context_token_number: Option<u32>,
}

impl StepMetrics {
    /// When the step's output was ready: the token time, else the end of sampling or of the
    /// forward.
    fn end(&self) -> Option<f64> {
        positive(self.token_time)
            .or(positive(self.sample_end_time))
            .or(positive(self.forward_end_time))
    }

    fn start(&self) -> Option<f64> {
        positive(self.forward_start_time)
    }
}

/// `TimeBreakdownMetrics`.
#[derive(Debug, Default, Deserialize)]
struct TimeBreakdownMetrics {
    #[serde(default)]
    step_metrics: Vec<StepMetrics>,
    #[serde(default)]
    ctx_chunk_metrics: Vec<StepMetrics>,
}

/// `TimingMetrics`: steady-clock seconds.
#[derive(Debug, Default, Deserialize)]
struct TimingMetrics {
    arrival_time: Option<f64>,
    first_scheduled_time: Option<f64>,
    first_token_time: Option<f64>,
    last_token_time: Option<f64>,
    server_arrival_time: Option<f64>,
    kv_cache_size: Option<f64>,
    kv_cache_transfer_start: Option<f64>,
    kv_cache_transfer_end: Option<f64>,
}

/// `SpeculativeDecodingMetrics`.
#[derive(Debug, Default, Deserialize)]
struct SpeculativeDecodingMetrics {
    #[serde(default)]
    total_accepted_draft_tokens: i64,
}

/// `PerfMetrics`; older TensorRT-LLM also kept the step lists in it.
#[derive(Debug, Default, Deserialize)]
struct PerfMetrics {
    #[serde(default)]
    timing_metrics: TimingMetrics,
    first_iter: Option<i64>,
    last_iter: Option<i64>,
    #[serde(default)]
    speculative_decoding: SpeculativeDecodingMetrics,
    #[serde(default)]
    step_metrics: Vec<StepMetrics>,
    #[serde(default)]
    ctx_chunk_metrics: Vec<StepMetrics>,
}

/// `request_id: Union[int, str]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RequestId {
    Number(i64),
    Text(String),
}

impl RequestId {
    fn text(id: Option<&RequestId>) -> String {
        match id {
            Some(RequestId::Number(n)) => n.to_string(),
            Some(RequestId::Text(s)) => s.clone(),
            None => String::new(),
        }
    }
}

/// `WorkerPerfMetrics` (and `WorkerPerfMetricsRecord`, whose extra fields are not needed).
/// The oldest records had no `perf_metrics` object: its fields sat in the record itself.
#[derive(Debug, Deserialize)]
struct WorkerPerfMetrics {
    request_id: Option<RequestId>,
    perf_metrics: Option<PerfMetrics>,
    time_breakdown_metrics: Option<TimeBreakdownMetrics>,
    #[serde(flatten)]
    flat: PerfMetrics,
}

/// `DisaggPerfMetricsRecord`: a request as the disaggregated server saw it, with a worker
/// record for each of its parts.
#[derive(Debug, Deserialize)]
struct DisaggPerfMetricsRecord {
    ctx_server: String,
    gen_server: String,
    disagg_server_arrival_time: f64,
    disagg_request_id: Option<u64>,
    ctx_perf_metrics: Option<WorkerPerfMetrics>,
    gen_perf_metrics: Option<WorkerPerfMetrics>,
}

/// A line of the perf-time-events log.
#[derive(Debug, Deserialize)]
struct TimeEventsRecord {
    request_id: Option<RequestId>,
    #[serde(default)]
    rank: i64,
    #[serde(default)]
    request_timing_metrics: TimingMetrics,
    #[serde(default)]
    time_breakdown_metrics: TimeBreakdownMetrics,
}

/// Reads one value as `T`, naming the field that does not fit (`perf_metrics.timing_metrics.arrival_time`).
fn typed<T: serde::de::DeserializeOwned>(
    v: serde_json::Value,
    format: &str,
) -> std::result::Result<T, FieldError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let field = match e.path().to_string() {
            p if p == "." => "the record".to_string(),
            p => p,
        };
        FieldError::new(field, format!("does not fit {format}: {}", e.into_inner()))
    })
}

fn positive(x: Option<f64>) -> Option<f64> {
    x.filter(|x| *x > 0.0)
}

/// One request's record, whichever file it came from.
struct Record {
    label: String,
    request_id: String,
    /// Where a disaggregated request's part ran; `None`: the import's own instance.
    part: Option<Part>,
    rank: i64,
    timing: TimingMetrics,
    steps: Vec<StepMetrics>,
    chunks: Vec<StepMetrics>,
    first_iter: Option<i64>,
    last_iter: Option<i64>,
    accepted_draft: i64,
}

impl Record {
    /// The time the last token left: the request's end on its own clock.
    fn last_token(&self) -> Option<f64> {
        positive(self.timing.last_token_time).or(positive(self.timing.first_token_time))
    }
}

/// One part of a disaggregated request: the worker that ran it, and the client's arrival at the
/// disaggregated server, which both parts share.
#[derive(Clone)]
struct Part {
    instance: String,
    role: Role,
    client_arrival: f64,
}

impl DisaggPerfMetricsRecord {
    /// The context (prefill) and generation (decode) parts, under one request id.
    fn parts(self, at: &str) -> Vec<Record> {
        let client_arrival = self.disagg_server_arrival_time;
        let sides = [
            (
                "ctx_perf_metrics",
                self.ctx_perf_metrics,
                self.ctx_server,
                Role::Prefill,
            ),
            (
                "gen_perf_metrics",
                self.gen_perf_metrics,
                self.gen_server,
                Role::Decode,
            ),
        ];
        let mut parts: Vec<Record> = sides
            .into_iter()
            .filter_map(|(key, metrics, instance, role)| {
                let part = Part {
                    instance,
                    role,
                    client_arrival,
                };
                Some(worker(format!("{at}.{key}"), metrics?, Some(part)))
            })
            .collect();
        // The workers number the request each their own way; the disaggregated server's id, or
        // else the context worker's, names both parts.
        let shared = self
            .disagg_request_id
            .map(|id| id.to_string())
            .or_else(|| parts.first().map(|p| p.request_id.clone()))
            .unwrap_or_default();
        for p in &mut parts {
            p.request_id.clone_from(&shared);
        }
        parts
    }
}

pub fn perf_metrics(text: &str, opts: &Options) -> Result<Imported> {
    import_each(text, opts, |v, at| {
        if v.get("ctx_server").is_some() || v.get("gen_server").is_some() {
            typed::<DisaggPerfMetricsRecord>(v, "a DisaggPerfMetricsRecord").map(|d| d.parts(at))
        } else {
            typed::<WorkerPerfMetrics>(v, "a WorkerPerfMetrics record")
                .map(|w| vec![worker(at.to_string(), w, None)])
        }
    })
}

/// Each value of the file read into its records; a value that does not fit is refused by its
/// place in the file, and the rest are imported.
fn import_each(
    text: &str,
    opts: &Options,
    read: impl Fn(serde_json::Value, &str) -> std::result::Result<Vec<Record>, FieldError>,
) -> Result<Imported> {
    let mut records = Vec::new();
    let mut refused = Vec::new();
    for located in json_values(text)? {
        match read(located.value, &located.at) {
            Ok(parts) => records.extend(parts),
            Err(e) => refused.push((located.at, e)),
        }
    }
    let mut out = map(records, opts);
    for (label, e) in refused {
        out.decoded.reject(ItemKind::Request, &label, e);
    }
    Ok(out)
}

/// A worker record: `perf_metrics` with its `timing_metrics`, and the steps in
/// `time_breakdown_metrics` beside it (or, in older versions, inside `perf_metrics`).
fn worker(label: String, w: WorkerPerfMetrics, part: Option<Part>) -> Record {
    let pm = w.perf_metrics.unwrap_or(w.flat);
    let (steps, chunks) = match w.time_breakdown_metrics {
        Some(tb) if !(tb.step_metrics.is_empty() && tb.ctx_chunk_metrics.is_empty()) => {
            (tb.step_metrics, tb.ctx_chunk_metrics)
        }
        _ => (pm.step_metrics, pm.ctx_chunk_metrics),
    };
    Record {
        label,
        request_id: RequestId::text(w.request_id.as_ref()),
        part,
        rank: 0,
        timing: pm.timing_metrics,
        steps,
        chunks,
        first_iter: pm.first_iter,
        last_iter: pm.last_iter,
        accepted_draft: pm.speculative_decoding.total_accepted_draft_tokens,
    }
}

pub fn iteration_log(text: &str, opts: &Options) -> Result<Imported> {
    import_each(text, opts, |v, at| {
        let r = typed::<TimeEventsRecord>(v, "a perf-time-events record")?;
        Ok(vec![Record {
            label: at.to_string(),
            request_id: RequestId::text(r.request_id.as_ref()),
            part: None,
            rank: r.rank,
            timing: r.request_timing_metrics,
            steps: r.time_breakdown_metrics.step_metrics,
            chunks: r.time_breakdown_metrics.ctx_chunk_metrics,
            first_iter: None,
            last_iter: None,
            accepted_draft: 0,
        }])
    })
}

fn map(mut records: Vec<Record>, opts: &Options) -> Imported {
    let mut out = Imported::default();
    // Every tensor-parallel rank writes the same request; keep the lowest rank's record.
    records.sort_by_key(|r| r.rank);
    let mut seen = std::collections::HashSet::new();
    records.retain(|r| {
        let instance = r.part.as_ref().map(|p| p.instance.clone());
        r.request_id.is_empty() || seen.insert((r.request_id.clone(), instance))
    });

    let latest = records
        .iter()
        .filter_map(Record::last_token)
        .fold(f64::MIN, f64::max);
    // Offsets are applied in integer nanoseconds: seconds since the epoch as an f64 would lose
    // a few hundred nanoseconds.
    let offset_ns: Nanos = match opts.clock_offset_s {
        Some(o) => (o * 1e9).round() as Nanos,
        None if latest > 0.0 && latest < 946_684_800.0 => {
            let offset = opts.now_ns - (latest * 1e9).round() as Nanos;
            out.warnings.push(format!(
                "times are steady-clock seconds; anchored so that the latest token is at import time \
                 (offset {:.3} s). Pass the clock offset for true wall-clock times.",
                offset as f64 / 1e9
            ));
            offset
        }
        None => 0,
    };
    // Saturating: an absurd time (1e22 s) becomes one that validation refuses, naming the field.
    let ns = |s: f64| ((s * 1e9).round() as Nanos).saturating_add(offset_ns);

    // One batch per instance: the import's own, and each worker of a disaggregated request.
    let mut batches: Vec<(ResourceBatch, BTreeMap<u64, Iteration>)> = Vec::new();
    let mut estimated = 0;
    let mut reanchored = 0;
    for rec in &records {
        let label = format!("{} (request_id {:?})", rec.label, rec.request_id);
        let shift = step_clock_shift(rec);
        reanchored += usize::from(shift != 0.0);
        let step_ns = |s: f64| ns(s + shift);
        let instance = rec.part.as_ref().map_or(&opts.instance, |p| &p.instance);
        let k = match batches
            .iter()
            .position(|(b, _)| b.resource.instance_id == *instance)
        {
            Some(k) => k,
            None => {
                let mut own = resource(opts, EngineKind::Trtllm, None);
                if let Some(p) = &rec.part {
                    own.instance_id.clone_from(&p.instance);
                    own.role = p.role;
                }
                let batch = ResourceBatch {
                    resource: own,
                    requests: Vec::new(),
                    iterations: Vec::new(),
                    texts_by_id: None,
                };
                batches.push((batch, BTreeMap::new()));
                batches.len() - 1
            }
        };
        let (batch, iterations) = &mut batches[k];
        match request(rec, &ns, &step_ns, iterations, &mut estimated) {
            Ok(r) => batch.requests.push(Item { label, value: r }),
            Err(e) => out.decoded.reject(ItemKind::Request, &label, e),
        }
    }
    if reanchored > 0 {
        out.warnings.push(format!(
            "{reanchored} requests report their steps on another clock than their timing_metrics \
             (a worker's own monotonic clock): their step times were shifted so that the last step \
             ends at last_token_time"
        ));
    }
    if estimated > 0 {
        out.warnings.push(format!(
            "{estimated} requests have no per-step metrics: their output token counts are estimated \
             from first_iter/last_iter and accepted draft tokens, and they have no per-token times"
        ));
    }
    for (mut batch, iterations) in batches {
        for (id, it) in iterations {
            match validate::iteration(&it) {
                Ok(()) => batch.iterations.push(Item {
                    label: format!("iteration {id}"),
                    value: it,
                }),
                Err(e) => out
                    .decoded
                    .reject(ItemKind::Iteration, &format!("iteration {id}"), e),
            }
        }
        out.decoded.batches.push(batch);
    }
    out
}

/// How far a record's step and chunk clock lies from its `timing_metrics` clock, in seconds.
///
/// TensorRT-LLM takes step times from the worker process's monotonic clock, whose origin may
/// differ from the request times' by a constant (its own perf tooling measured offsets from a
/// second to days across the workers of one multi-node run). The last step produced the last
/// token, so when the two disagree by more than a step could explain, the steps are moved onto
/// the request's clock; within the same clock they agree to a few milliseconds.
fn step_clock_shift(rec: &Record) -> f64 {
    const SAME_CLOCK_S: f64 = 0.05;
    let last_step = rec
        .steps
        .iter()
        .chain(&rec.chunks)
        .filter_map(StepMetrics::end)
        .fold(f64::MIN, f64::max);
    match rec.last_token() {
        Some(t) if last_step > 0.0 && (t - last_step).abs() > SAME_CLOCK_S => t - last_step,
        _ => 0.0,
    }
}

fn request(
    rec: &Record,
    ns: &impl Fn(f64) -> Nanos,
    step_ns: &impl Fn(f64) -> Nanos,
    iterations: &mut BTreeMap<u64, Iteration>,
    estimated: &mut usize,
) -> Result<RequestTrace, FieldError> {
    if rec.request_id.is_empty() {
        return Err(FieldError::new("request_id", "is missing"));
    }
    let timing = &rec.timing;
    let t = |x: Option<f64>| positive(x).map(ns);
    let client_arrival = rec.part.as_ref().map(|p| ns(p.client_arrival));
    let arrival = client_arrival
        .or(t(timing.server_arrival_time))
        .or(t(timing.arrival_time))
        .ok_or_else(|| FieldError::new("timing_metrics.arrival_time", "is missing"))?;
    let first_token = t(timing.first_token_time);
    let finished = t(timing.last_token_time)
        .or(first_token)
        .ok_or_else(|| FieldError::new("timing_metrics.last_token_time", "is missing"))?;

    let mut prefill_chunks = chunks(rec, step_ns, iterations);
    let first_scheduled = t(timing.first_scheduled_time);
    let role = rec.part.as_ref().map(|p| p.role);
    // Without chunk metrics the context phase is taken to run from scheduling to the first
    // token; a generation worker received its context with the KV cache and ran none.
    let prefilled_here = role != Some(Role::Decode);
    if let (true, true, Some(s), Some(ft)) = (
        prefill_chunks.is_empty(),
        prefilled_here,
        first_scheduled,
        first_token,
    ) {
        prefill_chunks.push(PrefillChunk {
            start_ns: s,
            end_ns: ft,
            tokens: 0,
            iteration: rec.first_iter.map(|i| i as u64),
        });
    }
    let first_iteration = prefill_chunks.last().and_then(|c| c.iteration);
    let tokens = generated(rec, first_token, first_iteration, step_ns, iterations);
    let output_tokens = match (tokens.is_empty(), rec.first_iter, rec.last_iter) {
        (true, Some(a), Some(b)) if b >= a => {
            // A context worker's part emits one token by design: nothing to warn about.
            *estimated += usize::from(role != Some(Role::Prefill));
            (b - a + 1 + rec.accepted_draft) as u32
        }
        _ => 0,
    };
    let kv_transfer = match (
        t(timing.kv_cache_transfer_start),
        t(timing.kv_cache_transfer_end),
    ) {
        (Some(s), Some(e)) => Some(KvTransfer {
            start_ns: s,
            end_ns: e,
            bytes: positive(timing.kv_cache_size).map(|b| b as u64),
            blocks: None,
        }),
        _ => None,
    };
    // The worker's own arrival, when the request reached something before it. A generation
    // worker cannot schedule the request before its KV cache has arrived: it joins the queue
    // then, and the wait before is the transfer's.
    let queued_ns = client_arrival
        .or(t(timing.server_arrival_time))
        .and(t(timing.arrival_time))
        .map(|q| match (&kv_transfer, role) {
            (Some(kv), Some(Role::Decode)) => q.max(kv.end_ns),
            _ => q,
        });
    let mut r = RequestTrace {
        request_id: rec.request_id.clone(),
        arrival_ns: arrival,
        queued_ns,
        first_scheduled_ns: first_scheduled,
        first_token_ns: first_token,
        finished_ns: finished,
        finish_reason: FinishReason::Unknown,
        prompt_tokens: prefill_chunks.iter().map(|c| c.tokens).sum(),
        output_tokens,
        prefill_chunks,
        kv_transfer,
        tokens,
        ..RequestTrace::default()
    };
    normalize(&mut r);
    validate::request(&r)?;
    Ok(r)
}

/// Adds `entry` to the batch of step `id` (made from the first request that names it; steps
/// without an id are not known).
fn note(
    iterations: &mut BTreeMap<u64, Iteration>,
    id: Option<u32>,
    (start, end): (Nanos, Nanos),
    entry: BatchEntry,
    load: Option<u32>,
) {
    let Some(id) = id else { return };
    let it = iterations
        .entry(u64::from(id))
        .or_insert_with(|| Iteration {
            iteration_id: u64::from(id),
            start_ns: start,
            end_ns: end,
            batch: Vec::new(),
            running: load.unwrap_or(0),
            waiting: 0,
            kv_cache_usage: 0.0,
        });
    it.batch.push(entry);
}

/// The request's prefill chunks as its context steps report them, each noted in its step.
fn chunks(
    rec: &Record,
    step_ns: &impl Fn(f64) -> Nanos,
    iterations: &mut BTreeMap<u64, Iteration>,
) -> Vec<PrefillChunk> {
    let mut out = Vec::new();
    for c in &rec.chunks {
        let (Some(start), Some(end)) = (c.start(), c.end()) else {
            continue;
        };
        let tokens = c.req_context_token_number.unwrap_or(0);
        let (start, end) = (step_ns(start), step_ns(end));
        out.push(PrefillChunk {
            start_ns: start,
            end_ns: end,
            tokens,
            iteration: c.iter_counter.map(u64::from),
        });
        let entry = BatchEntry {
            request_id: rec.request_id.as_str().into(),
            phase: Phase::Prefill,
            tokens,
            prefill_offset: 0,
            draft: None,
        };
        note(
            iterations,
            c.iter_counter,
            (start, end),
            entry,
            c.iter_batch_size,
        );
    }
    out
}

/// The request's tokens: the context phase emits the first (at `first_token`, in step
/// `first_iteration`), every generation step one or more; each step is noted.
fn generated(
    rec: &Record,
    first_token: Option<Nanos>,
    first_iteration: Option<u64>,
    step_ns: &impl Fn(f64) -> Nanos,
    iterations: &mut BTreeMap<u64, Iteration>,
) -> Vec<Token> {
    let mut tokens = Vec::new();
    if !rec.steps.is_empty() {
        tokens.push(Token {
            emitted_ns: first_token,
            iteration: first_iteration,
            ..Token::default()
        });
    }
    for s in &rec.steps {
        let Some(end) = s.end() else { continue };
        let end_ns = step_ns(end);
        let start = s.start().map(step_ns);
        let n = s.req_generation_token_number.unwrap_or(1).max(1);
        for _ in 0..n {
            tokens.push(Token {
                emitted_ns: Some(end_ns),
                scheduled_ns: start,
                iteration: s.iter_counter.map(u64::from),
                batch_size: s.iter_batch_size,
                ..Token::default()
            });
        }
        let entry = BatchEntry {
            request_id: rec.request_id.as_str().into(),
            phase: Phase::Decode,
            tokens: n,
            prefill_offset: 0,
            draft: None,
        };
        note(
            iterations,
            s.iter_counter,
            (start.unwrap_or(end_ns), end_ns),
            entry,
            s.iter_batch_size,
        );
    }
    tokens
}

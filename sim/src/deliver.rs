//! Hands simulated traces to tokenscope: over gRPC (batched, several in flight, retried on
//! backpressure) or into a JSONL file of native export requests for `tokenscope import`.

use std::collections::HashSet;
use std::io::Write;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use prost::Message;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tonic::codegen::Bytes;
use tonic::transport::Channel;

use tokenscope_core::model::{Iteration, Nanos, RequestTrace, Resource};

use crate::{Error, Result};
use tokenscope_proto::v1;
use tokenscope_proto::wire::{intern_texts, to_wire};

use crate::encoded;
use crate::engine::Event;
use crate::scenarios::InstanceRun;

/// A batch closes at whichever comes first; the bounds keep a batch a few MB on the wire.
const REQUESTS_PER_BATCH: usize = 64;
const TOKENS_PER_BATCH: usize = 16_384;
const ITERATIONS_PER_BATCH: usize = 4000;
const ENTRIES_PER_BATCH: usize = 65_536;
const IN_FLIGHT: usize = 4;
/// Batches the simulator may run ahead of the sender.
const QUEUED: usize = 2;
const ATTEMPTS: u32 = 6;

/// A batch and the simulated time by which all it reports had happened.
pub struct Timed {
    pub at_ns: Nanos,
    pub batch: v1::ExportRequest,
}

/// Cuts what one instance reports into export batches (requests, and separately iterations),
/// converting each to the wire as soon as it is full.
pub struct Batcher {
    resource: Resource,
    requests: Vec<RequestTrace>,
    tokens: usize,
    iterations: Vec<Iteration>,
    entries: usize,
}

impl Batcher {
    pub fn new(resource: Resource) -> Self {
        Self {
            resource,
            requests: Vec::new(),
            tokens: 0,
            iterations: Vec::new(),
            entries: 0,
        }
    }

    /// Takes one event; gives back a batch when this one filled it.
    pub fn push(&mut self, e: Event) -> Option<Timed> {
        match e {
            Event::Finished(r) => {
                self.tokens += r.tokens.len();
                self.requests.push(*r);
                (self.requests.len() >= REQUESTS_PER_BATCH || self.tokens >= TOKENS_PER_BATCH)
                    .then(|| self.take_requests())
            }
            Event::Step(it) => {
                self.entries += it.batch.len();
                self.iterations.push(it);
                (self.iterations.len() >= ITERATIONS_PER_BATCH || self.entries >= ENTRIES_PER_BATCH)
                    .then(|| self.take_iterations())
            }
        }
    }

    /// What is left, as at most two batches.
    pub fn finish(mut self) -> Vec<Timed> {
        let mut out = Vec::new();
        if !self.requests.is_empty() {
            out.push(self.take_requests());
        }
        if !self.iterations.is_empty() {
            out.push(self.take_iterations());
        }
        out
    }

    /// Texts go by id, each once per batch: batches are in flight several at a time, to one
    /// server or several, so a batch cannot count on an earlier one's texts being stored yet.
    fn take_requests(&mut self) -> Timed {
        let requests = std::mem::take(&mut self.requests);
        self.tokens = 0;
        let mut traces = to_wire(&self.resource, &requests, &[]);
        intern_texts(&mut traces, &HashSet::new());
        Timed {
            at_ns: requests.iter().map(|r| r.finished_ns).max().unwrap_or(0),
            batch: v1::ExportRequest {
                resource_traces: vec![traces],
            },
        }
    }

    fn take_iterations(&mut self) -> Timed {
        let iterations = std::mem::take(&mut self.iterations);
        self.entries = 0;
        Timed {
            at_ns: iterations.iter().map(|i| i.end_ns).max().unwrap_or(0),
            batch: v1::ExportRequest {
                resource_traces: vec![to_wire(&self.resource, &[], &iterations)],
            },
        }
    }
}

/// The export requests that carry `runs`, in simulated-time order (requests as they finish).
pub fn batches(runs: &[InstanceRun]) -> Vec<Timed> {
    let mut out = Vec::new();
    for run in runs {
        let mut b = Batcher::new(run.resource.clone());
        let mut requests: Vec<&RequestTrace> = run.output.requests.iter().collect();
        requests.sort_by_key(|r| r.finished_ns);
        let events = requests
            .into_iter()
            .map(|r| Event::Finished(Box::new(r.clone())))
            .chain(run.output.iterations.iter().cloned().map(Event::Step));
        out.extend(events.filter_map(|e| b.push(e)));
        out.extend(b.finish());
    }
    out.sort_by_key(|t| t.at_ns);
    out
}

/// Runs `simulate` on a blocking thread and hands out its batches through a bounded channel as
/// they fill, so the simulator never holds more than a few batches however long the run. When the
/// receiver goes away (an export failed) the simulation is stopped. The handle gives back the
/// summary of what was simulated.
pub fn stream<F>(resource: Resource, simulate: F) -> (mpsc::Receiver<Timed>, JoinHandle<Summary>)
where
    F: FnOnce(&mut dyn FnMut(Event) -> ControlFlow<()>) -> ControlFlow<()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(QUEUED);
    let handle = tokio::task::spawn_blocking(move || {
        let mut summary = Summary::new(&resource.instance_id);
        let mut b = Batcher::new(resource);
        let flow = simulate(&mut |e| {
            if let Event::Finished(r) = &e {
                summary.add(r);
            }
            match b.push(e).map(|t| tx.blocking_send(t)) {
                Some(Err(_)) => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        });
        if flow.is_continue() {
            for t in b.finish() {
                if tx.blocking_send(t).is_err() {
                    break;
                }
            }
        }
        summary
    });
    (rx, handle)
}

/// What a run simulated: counts, and the latencies to sanity-check it at a glance.
pub struct Summary {
    pub instance: String,
    pub requests: usize,
    pub tokens: usize,
    ttft: Vec<Nanos>,
    tpot: Vec<Nanos>,
}

impl Summary {
    pub fn new(instance: &str) -> Self {
        Self {
            instance: instance.to_string(),
            requests: 0,
            tokens: 0,
            ttft: Vec::new(),
            tpot: Vec::new(),
        }
    }

    pub fn of(run: &InstanceRun) -> Self {
        let mut s = Self::new(&run.resource.instance_id);
        for r in &run.output.requests {
            s.add(r);
        }
        s
    }

    pub fn add(&mut self, r: &RequestTrace) {
        let m = tokenscope_core::analysis::metrics::request_metrics(r);
        self.requests += 1;
        self.tokens += r.tokens.len();
        self.ttft.extend(m.ttft_ns);
        self.tpot.extend(m.tpot_ns);
    }

    /// One line: median and p90 TTFT and TPOT.
    pub fn line(&mut self) -> String {
        let pick = |v: &mut Vec<Nanos>, q: f64| {
            v.sort_unstable();
            let k = ((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1));
            v.get(k).map_or(f64::NAN, |&x| x as f64 / 1e6)
        };
        let (t50, t90) = (pick(&mut self.ttft, 0.5), pick(&mut self.ttft, 0.9));
        let (p50, p90) = (pick(&mut self.tpot, 0.5), pick(&mut self.tpot, 0.9));
        format!(
            "  {:<18} {:>6} requests  TTFT p50 {t50:>8.1} ms  p90 {t90:>8.1} ms  TPOT p50 {p50:>6.1} ms  p90 {p90:>6.1} ms",
            self.instance, self.requests
        )
    }
}

#[derive(Debug, Default)]
pub struct Delivered {
    pub requests: u64,
    pub iterations: u64,
    pub tokens: u64,
    pub rejected: u64,
    pub elapsed: Duration,
}

fn tokens_in(b: &v1::ExportRequest) -> u64 {
    b.resource_traces
        .iter()
        .flat_map(|r| &r.requests)
        .filter_map(|r| r.tokens.as_ref())
        .map(|t| t.token_id.len() as u64)
        .sum()
}

/// A batch on the wire: when it is due (simulated time), its bytes and the tokens it carries.
#[derive(Clone, Debug)]
pub struct Encoded {
    pub at_ns: Nanos,
    pub body: Bytes,
    pub tokens: u64,
}

impl From<Timed> for Encoded {
    fn from(t: Timed) -> Self {
        Self {
            at_ns: t.at_ns,
            tokens: tokens_in(&t.batch),
            body: Bytes::from(t.batch.encode_to_vec()),
        }
    }
}

/// Sends the batches to a tokenscope gRPC endpoint, paced so that simulated time runs `speed`×
/// the wall clock (infinite: as fast as ingest takes them), printing progress to stderr.
pub async fn send(url: &str, batches: Vec<Timed>, speed: f64, progress: bool) -> Result<Delivered> {
    let (tx, rx) = mpsc::channel(batches.len().max(1));
    for b in batches {
        tx.try_send(b).expect("the channel holds every batch");
    }
    drop(tx);
    send_stream(url, rx, speed, progress).await
}

/// [`send`] for batches encoded beforehand (a benchmark that paces the sender and must not
/// spend the cores it measures on encoding), `in_flight` at a time (many instances export at
/// once; one sender's default is 4).
pub async fn send_encoded(
    url: &str,
    batches: Vec<Encoded>,
    speed: f64,
    in_flight: usize,
    progress: bool,
) -> Result<Delivered> {
    let (tx, rx) = mpsc::channel(batches.len().max(1));
    for b in batches {
        tx.try_send(b).expect("the channel holds every batch");
    }
    drop(tx);
    deliver(url, rx, speed, in_flight, progress).await
}

/// [`send`] for batches that arrive while they are being sent (see [`stream`]); each is encoded
/// as it is taken.
pub async fn send_stream(
    url: &str,
    mut batches: mpsc::Receiver<Timed>,
    speed: f64,
    progress: bool,
) -> Result<Delivered> {
    let (tx, rx) = mpsc::channel(1);
    let encode = tokio::spawn(async move {
        while let Some(t) = batches.recv().await {
            if tx.send(Encoded::from(t)).await.is_err() {
                break;
            }
        }
    });
    let delivered = deliver(url, rx, speed, IN_FLIGHT, progress).await;
    encode.abort();
    delivered
}

async fn deliver(
    url: &str,
    mut batches: mpsc::Receiver<Encoded>,
    speed: f64,
    width: usize,
    progress: bool,
) -> Result<Delivered> {
    let channel = Channel::from_shared(url.to_string())
        .map_err(|e| Error::InvalidArgument(format!("{url:?} is not a gRPC address: {e}")))?
        .connect()
        .await
        .map_err(|e| Error::Unavailable(format!("cannot connect to {url}: {e}")))?;
    let started = Instant::now();
    let mut stats = Delivered::default();
    let mut sim_start = None;
    let mut in_flight = JoinSet::new();
    let bar = if progress {
        indicatif::ProgressBar::new_spinner()
    } else {
        indicatif::ProgressBar::hidden()
    };
    loop {
        while in_flight.len() < width.max(1) {
            let Some(Encoded {
                at_ns,
                body,
                tokens,
            }) = batches.recv().await
            else {
                break;
            };
            let sim_start = *sim_start.get_or_insert(at_ns);
            if speed.is_finite() {
                let due = Duration::from_secs_f64((at_ns - sim_start).max(0) as f64 / 1e9 / speed);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    tokio::time::sleep(wait).await;
                }
            }
            let channel = channel.clone();
            in_flight.spawn(async move {
                let mut attempt = 0;
                loop {
                    match encoded::export(channel.clone(), body.clone()).await {
                        Ok(reply) => return Ok((reply, tokens)),
                        // Backpressure or a passing failure: the same batch is safe to resend.
                        Err(s)
                            if matches!(
                                s.code(),
                                tonic::Code::Unavailable | tonic::Code::ResourceExhausted
                            ) && attempt + 1 < ATTEMPTS =>
                        {
                            tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
                            attempt += 1;
                        }
                        Err(s) => {
                            return Err(Error::Unavailable(format!(
                                "export failed: {}",
                                s.message()
                            )));
                        }
                    }
                }
            });
        }
        let Some(joined) = in_flight.join_next().await else {
            break;
        };
        let (reply, tokens) = joined.map_err(|e| Error::Internal(e.to_string()))??;
        stats.requests += reply.accepted_requests + reply.duplicate_requests;
        stats.iterations += reply.accepted_iterations;
        stats.rejected += reply.rejected_requests + reply.rejected_iterations;
        stats.tokens += tokens;
        bar.inc(1);
        if !bar.is_hidden() {
            // indicatif draws at most 20 times a second, whatever the rate of messages.
            let secs = started.elapsed().as_secs_f64().max(1e-3);
            bar.set_message(format!(
                "sent {} batches · {} requests · {:.0} tokens/s",
                bar.position(),
                stats.requests,
                stats.tokens as f64 / secs
            ));
        }
    }
    bar.finish();
    stats.elapsed = started.elapsed();
    Ok(stats)
}

/// Writes the batches as JSON lines (proto3 JSON), the `native` import format.
pub fn write(path: &std::path::Path, batches: impl IntoIterator<Item = Timed>) -> Result<()> {
    let file = std::fs::File::create(path)
        .map_err(|e| Error::InvalidArgument(format!("cannot write {}: {e}", path.display())))?;
    let mut w = std::io::BufWriter::new(file);
    for Timed { batch, .. } in batches {
        let line = serde_json::to_string(&batch).map_err(|e| Error::Internal(e.to_string()))?;
        writeln!(w, "{line}").map_err(|e| Error::Internal(e.to_string()))?;
    }
    w.flush().map_err(|e| Error::Internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokenscope_core::model::{BatchEntry, Phase, Role};

    use super::*;

    const STEPS: usize = 10 * ITERATIONS_PER_BATCH;

    /// Streams `STEPS` one-entry steps, counting in `emitted` how many the engine produced.
    fn stream_steps(emitted: Arc<AtomicUsize>) -> (mpsc::Receiver<Timed>, JoinHandle<Summary>) {
        let resource = crate::scenarios::resource("gpu", Role::Colocated);
        stream(resource, move |emit| {
            for k in 0..STEPS {
                emitted.fetch_add(1, Ordering::SeqCst);
                emit(Event::Step(Iteration {
                    iteration_id: k as u64,
                    start_ns: k as Nanos,
                    end_ns: k as Nanos + 1,
                    batch: vec![BatchEntry {
                        request_id: "r".into(),
                        phase: Phase::Decode,
                        tokens: 1,
                        prefill_offset: 0,
                        draft: None,
                    }],
                    running: 1,
                    waiting: 0,
                    kv_cache_usage: 0.5,
                }))?;
            }
            ControlFlow::Continue(())
        })
    }

    /// How many steps the simulation had produced once it stopped producing (nobody reading).
    async fn at_rest(emitted: &AtomicUsize) -> usize {
        let mut last = usize::MAX;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = emitted.load(Ordering::SeqCst);
            if now == last {
                return now;
            }
            last = now;
        }
    }

    #[tokio::test]
    async fn a_streamed_simulation_waits_for_its_sender_instead_of_running_ahead() {
        let emitted = Arc::new(AtomicUsize::new(0));
        let (mut rx, simulation) = stream_steps(emitted.clone());
        let ahead = at_rest(&emitted).await;
        assert!(
            ahead <= (QUEUED + 2) * ITERATIONS_PER_BATCH,
            "ran {ahead} of {STEPS} steps ahead of its sender"
        );
        let mut batches = 0;
        while rx.recv().await.is_some() {
            batches += 1;
        }
        simulation.await.unwrap();
        assert_eq!(emitted.load(Ordering::SeqCst), STEPS);
        assert_eq!(batches, STEPS / ITERATIONS_PER_BATCH);
    }

    #[tokio::test]
    async fn a_streamed_simulation_stops_when_its_sender_gives_up() {
        let emitted = Arc::new(AtomicUsize::new(0));
        let (rx, simulation) = stream_steps(emitted.clone());
        let ahead = at_rest(&emitted).await;
        drop(rx);
        simulation.await.unwrap();
        let ran = emitted.load(Ordering::SeqCst);
        assert!(
            ran <= ahead + ITERATIONS_PER_BATCH,
            "ran {ran} of {STEPS} steps after the sender went away at {ahead}"
        );
    }
}

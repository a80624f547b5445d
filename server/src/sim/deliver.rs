//! Hands simulated traces to tokenscope: over gRPC (batched, several in flight, retried on
//! backpressure) or into a JSONL file of native export requests for `tokenscope import`.

use std::io::Write;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use app::model::{Nanos, RequestTrace};

use crate::error::{Error, Result};
use crate::ingest::native::to_wire;
use crate::proto::v1::{self, trace_ingest_client::TraceIngestClient};

use super::scenarios::InstanceRun;

const REQUESTS_PER_BATCH: usize = 64;
const ITERATIONS_PER_BATCH: usize = 4000;
const IN_FLIGHT: usize = 4;
const ATTEMPTS: u32 = 6;

/// A batch and the simulated time by which all it reports had happened.
pub struct Timed {
    pub at_ns: Nanos,
    pub batch: v1::ExportRequest,
}

/// The export requests that carry `runs`, in simulated-time order (requests as they finish).
pub fn batches(runs: &[InstanceRun]) -> Vec<Timed> {
    let mut out = Vec::new();
    for run in runs {
        let mut requests: Vec<&RequestTrace> = run.output.requests.iter().collect();
        requests.sort_by_key(|r| r.finished_ns);
        for chunk in requests.chunks(REQUESTS_PER_BATCH) {
            let owned: Vec<RequestTrace> = chunk.iter().map(|r| (*r).clone()).collect();
            let at_ns = owned.iter().map(|r| r.finished_ns).max().unwrap_or(0);
            out.push(Timed {
                at_ns,
                batch: v1::ExportRequest {
                    resource_traces: vec![to_wire(&run.resource, &owned, &[])],
                },
            });
        }
        for chunk in run.output.iterations.chunks(ITERATIONS_PER_BATCH) {
            let at_ns = chunk.iter().map(|i| i.end_ns).max().unwrap_or(0);
            out.push(Timed {
                at_ns,
                batch: v1::ExportRequest {
                    resource_traces: vec![to_wire(&run.resource, &[], chunk)],
                },
            });
        }
    }
    out.sort_by_key(|t| t.at_ns);
    out
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

/// Sends the batches to a tokenscope gRPC endpoint, paced so that simulated time runs `speed`×
/// the wall clock (infinite: as fast as ingest takes them), printing progress to stderr.
pub async fn send(url: &str, batches: Vec<Timed>, speed: f64, progress: bool) -> Result<Delivered> {
    let client = TraceIngestClient::connect(url.to_string())
        .await
        .map_err(|e| Error::Unavailable(format!("cannot connect to {url}: {e}")))?
        .max_encoding_message_size(256 << 20);
    let total = batches.len();
    let started = Instant::now();
    let mut stats = Delivered::default();
    let sim_start = batches.first().map_or(0, |b| b.at_ns);
    let mut pending = batches.into_iter();
    let mut in_flight = JoinSet::new();
    let mut done = 0;
    loop {
        while in_flight.len() < IN_FLIGHT {
            let Some(Timed { at_ns, batch }) = pending.next() else {
                break;
            };
            if speed.is_finite() {
                let due = Duration::from_secs_f64((at_ns - sim_start) as f64 / 1e9 / speed);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    tokio::time::sleep(wait).await;
                }
            }
            let mut client = client.clone();
            in_flight.spawn(async move {
                let tokens = tokens_in(&batch);
                let mut attempt = 0;
                loop {
                    match client.export(batch.clone()).await {
                        Ok(reply) => return Ok((reply.into_inner(), tokens)),
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
        done += 1;
        if progress {
            let secs = started.elapsed().as_secs_f64().max(1e-3);
            eprint!(
                "\r  sent {done}/{total} batches · {} requests · {:.0} tokens/s   ",
                stats.requests,
                stats.tokens as f64 / secs
            );
        }
    }
    if progress {
        eprintln!();
    }
    stats.elapsed = started.elapsed();
    Ok(stats)
}

/// Writes the batches as JSON lines (proto3 JSON), the `native` import format.
pub fn write(path: &std::path::Path, batches: &[Timed]) -> Result<()> {
    let file = std::fs::File::create(path)
        .map_err(|e| Error::InvalidArgument(format!("cannot write {}: {e}", path.display())))?;
    let mut w = std::io::BufWriter::new(file);
    for Timed { batch, .. } in batches {
        let line = serde_json::to_string(batch).map_err(|e| Error::Internal(e.to_string()))?;
        writeln!(w, "{line}").map_err(|e| Error::Internal(e.to_string()))?;
    }
    w.flush().map_err(|e| Error::Internal(e.to_string()))
}

//! Clients that send batches until each is acknowledged, whatever happens to the server (busy,
//! killed, restarting), and the audit of what the database then holds.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prost::Message;
use tokenscope::fixtures;
use tokenscope_proto::v1;
use tokenscope_sim::encoded;
use tonic::codegen::Bytes;

/// What one client sent and heard.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// Request ids whose batch was acknowledged.
    pub acked: Vec<String>,
    pub batches: u64,
    /// Refusals for the budget (`RESOURCE_EXHAUSTED`), each followed by a resend.
    pub exhausted: u64,
    /// Sends whose outcome was not known (the connection broke: the server was killed).
    pub broken: u64,
}

impl Tally {
    pub fn add(&mut self, other: Tally) {
        self.acked.extend(other.acked);
        self.batches += other.batches;
        self.exhausted += other.exhausted;
        self.broken += other.broken;
    }
}

/// The shape of the batches a client sends.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub requests: usize,
    pub tokens: usize,
    pub top_k: usize,
}

/// One batch: `shape.requests` requests named `c<client>-b<batch>-r<i>` on `instance`.
fn batch(template: &v1::ExportRequest, client: usize, n: u64) -> (v1::ExportRequest, Vec<String>) {
    let mut b = template.clone();
    let mut ids = Vec::new();
    for rt in &mut b.resource_traces {
        for (i, r) in rt.requests.iter_mut().enumerate() {
            r.request_id = format!("c{client}-b{n}-r{i}");
            ids.push(r.request_id.clone());
        }
    }
    (b, ids)
}

pub fn template(instance: &str, shape: Shape) -> v1::ExportRequest {
    let requests: Vec<_> = (0..shape.requests)
        .map(|i| {
            fixtures::request(
                "template",
                super::T0 + i as i64 * 1_000_000,
                shape.tokens,
                shape.top_k,
                1,
                i as u64 + 1,
            )
        })
        .collect();
    super::export(&fixtures::resource(instance), &requests, &[])
}

/// How long a client told to back off waits: `min_ms` plus up to `spread_ms`, spread over
/// clients so that they do not come back at once.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub min_ms: u64,
    pub spread_ms: u64,
}

/// About what `Retry-After` asks, as an OTLP exporter would wait.
pub const PATIENT: Backoff = Backoff {
    min_ms: 100,
    spread_ms: 400,
};

/// Sends batches until `stop` is set, each resent until acknowledged. The batch in hand when
/// `stop` comes is still sent to its end, so every batch begun is acknowledged.
async fn client(
    url: String,
    client_no: usize,
    template: Arc<v1::ExportRequest>,
    stop: Arc<AtomicBool>,
    backoff: Backoff,
) -> Tally {
    let mut tally = Tally::default();
    // Encoded once per batch, resent as the same bytes: a refused send costs the client nothing,
    // so what it offers is bounded by the server's answers, not by its own CPU.
    let channel = tonic::transport::Channel::from_shared(url)
        .expect("a gRPC URL")
        .connect_lazy();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let (b, ids) = batch(&template, client_no, n);
        let body = Bytes::from(b.encode_to_vec());
        n += 1;
        loop {
            match encoded::export(channel.clone(), body.clone()).await {
                Ok(_) => break,
                Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                    tally.exhausted += 1;
                    let spread = (n * 37 + client_no as u64 * 101) % (backoff.spread_ms + 1);
                    tokio::time::sleep(Duration::from_millis(backoff.min_ms + spread)).await;
                }
                Err(_) => {
                    // Cut off or refused a connection (killed, not yet restarted): again shortly.
                    tally.broken += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        tally.acked.extend(ids);
        tally.batches += 1;
    }
    tally
}

/// Clients numbered `numbers` sending `template`'s batches to `url` until [`Clients::stop`].
pub struct Clients {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Tally>>,
}

impl Clients {
    pub fn start(
        url: &str,
        numbers: std::ops::Range<usize>,
        template: &Arc<v1::ExportRequest>,
        backoff: Backoff,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = numbers
            .map(|c| {
                tokio::spawn(client(
                    url.to_string(),
                    c,
                    template.clone(),
                    stop.clone(),
                    backoff,
                ))
            })
            .collect();
        Self { stop, tasks }
    }

    /// Stops them taking new batches, waits until each batch begun is acknowledged, and sums
    /// what they heard.
    pub async fn stop(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        let mut tally = Tally::default();
        for t in self.tasks {
            tally.add(t.await.expect("a client task"));
        }
        tally
    }
}

/// What the database holds of the acknowledged requests.
#[derive(Debug, PartialEq, Eq)]
pub struct Audit {
    pub acked: usize,
    /// Acknowledged and not stored.
    pub missing: usize,
    /// Stored more than once.
    pub duplicated: usize,
}

pub async fn audit(database_url: &str, acked: &[String]) -> Audit {
    use sqlx::Connection;
    let mut db = sqlx::PgConnection::connect(database_url).await.unwrap();
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT request_id, count(*) FROM requests GROUP BY request_id")
            .fetch_all(&mut db)
            .await
            .unwrap();
    let stored: HashMap<String, i64> = rows.into_iter().collect();
    Audit {
        acked: acked.len(),
        missing: acked.iter().filter(|id| !stored.contains_key(*id)).count(),
        duplicated: stored.values().filter(|&&n| n > 1).count(),
    }
}

//! Soak: the real binary under many times the load it can store, killed with `kill -9` halfway
//! and restarted. Prints what the clients offered and got acknowledged, how often they were told
//! to back off, the server's peak resident memory against its ingest budget, and the audit:
//! acknowledged requests missing or stored twice (both must be 0). Bounded: about two minutes.
//!
//! `scripts/soak` (a throwaway durable Postgres), or `cargo bench -p tokenscope --bench soak`
//! with TOKENSCOPE_TEST_DATABASE_URL set. `SOAK_SECONDS` (90) is the overload phase's length,
//! `SOAK_CLIENTS` (64) its clients.

#[path = "../tests/it/common/mod.rs"]
#[allow(dead_code)] // the soak uses only part of the test harness
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::load::{self, Backoff, Clients, Shape, Tally};
use common::process::ServerProcess;
use prost::Message;

const BUDGET_MIB: u64 = 16;
const MAX_MESSAGE_MIB: u64 = 8;
/// Clients of the first phase, which shows the server's memory at a load it keeps up with.
const STEADY_CLIENTS: usize = 2;
const STEADY_SECONDS: u64 = 15;
/// Overloading clients come back quickly after a refusal (5–25 ms), far sooner than
/// `Retry-After` asks: what they offer is many times what is stored.
const IMPATIENT: Backoff = Backoff {
    min_ms: 5,
    spread_ms: 20,
};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `clients` for `seconds`, killing and restarting the server at `kill_at` (if any); the
/// clients' tally and how long they ran.
async fn phase(
    server: &mut ServerProcess,
    template: &Arc<tokenscope_proto::v1::ExportRequest>,
    first_client: usize,
    clients: usize,
    seconds: u64,
    mut kill_at: Option<Duration>,
    backoff: Backoff,
) -> (Tally, Duration) {
    let running = Clients::start(
        &server.grpc_url(),
        first_client..first_client + clients,
        template,
        backoff,
    );
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(seconds) {
        if let Some(at) = kill_at
            && start.elapsed() >= at
        {
            server.kill9();
            server.restart().await;
            kill_at = None;
            println!(
                "  killed with -9 at {:.1} s, restarted",
                start.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (running.stop().await, start.elapsed())
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(soak());
}

async fn soak() {
    let seconds = env_or("SOAK_SECONDS", 90);
    let clients = env_or("SOAK_CLIENTS", 64) as usize;
    let db = common::fresh_database().await;
    let mut server = ServerProcess::start(
        &db,
        &[
            "--ingest-budget-mib",
            &BUDGET_MIB.to_string(),
            "--max-message-mib",
            &MAX_MESSAGE_MIB.to_string(),
        ],
    )
    .await;
    let shape = Shape {
        requests: 16,
        tokens: 256,
        top_k: 5,
    };
    let template = Arc::new(load::template("soak-0", shape));
    let batch_bytes = template.encoded_len();
    let tokens_per_batch = (shape.requests * shape.tokens) as f64;
    println!(
        "soak: budget {BUDGET_MIB} MiB, batches of {} requests × {} tokens (top-{}), {:.2} MB each",
        shape.requests,
        shape.tokens,
        shape.top_k,
        batch_bytes as f64 / 1e6
    );

    let (steady, took) = phase(
        &mut server,
        &template,
        0,
        STEADY_CLIENTS,
        STEADY_SECONDS,
        None,
        load::PATIENT,
    )
    .await;
    let sustained = steady.batches as f64 / took.as_secs_f64();
    let steady_peak = server.peak_rss_kib();
    println!(
        "  steady ({STEADY_CLIENTS} clients, {STEADY_SECONDS} s): {sustained:.1} batches/s = {:.0}k tokens/s; peak RSS {} MiB",
        sustained * tokens_per_batch / 1e3,
        steady_peak / 1024
    );

    let (over, took) = phase(
        &mut server,
        &template,
        STEADY_CLIENTS,
        clients,
        seconds,
        Some(Duration::from_secs(seconds / 2)),
        IMPATIENT,
    )
    .await;
    let acked_rate = over.batches as f64 / took.as_secs_f64();
    let offered = (over.batches + over.exhausted + over.broken) as f64 / took.as_secs_f64();
    // Offered load: every send, including those refused and sent again after backing off,
    // against what the server stored meanwhile (its sustainable rate: it ran flat out).
    println!(
        "  overload ({clients} clients, {seconds} s, each with a batch always in flight): offered {offered:.1} sends/s = {:.1}× the {acked_rate:.1} batches/s stored",
        offered / acked_rate.max(0.1)
    );
    println!(
        "  acknowledged {acked_rate:.1} batches/s ({:.0}k tokens/s); told to back off (RESOURCE_EXHAUSTED) {} times; {} sends cut off by the kill",
        acked_rate * tokens_per_batch / 1e3,
        over.exhausted,
        over.broken
    );
    let peak = server.peak_rss_kib();
    println!(
        "  peak RSS {} MiB = budget {BUDGET_MIB} MiB + {} MiB (idle-to-steady baseline {} MiB)",
        peak / 1024,
        (peak / 1024).saturating_sub(BUDGET_MIB),
        steady_peak / 1024
    );
    let mut tally = steady;
    tally.add(over);
    let audit = load::audit(&db, &tally.acked).await;
    println!(
        "  audit: {} requests acknowledged, missing {}, duplicated {}",
        audit.acked, audit.missing, audit.duplicated
    );
    assert_eq!((audit.missing, audit.duplicated), (0, 0), "{audit:?}");
}

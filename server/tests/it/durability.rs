//! Durability: what the server acknowledged survives `kill -9` at any moment, and a batch whose
//! reply never came, sent again, is stored once. The real binary, killed three times while
//! eight clients send, each resending until acknowledged.

use std::sync::Arc;
use std::time::Duration;

use crate::common::load::{self, Clients, Shape};
use crate::common::process::ServerProcess;
use crate::common::*;
use tokenscope::fixtures::Rng;

const CLIENTS: usize = 8;
const KILLS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_batches_survive_kill_9_and_resent_ones_are_stored_once() {
    let db = fresh_database().await;
    let mut server = ServerProcess::start(&db, &[]).await;
    let shape = Shape {
        requests: 4,
        tokens: 64,
        top_k: 2,
    };
    let template = Arc::new(load::template("gpu-0", shape));
    let clients = Clients::start(&server.grpc_url(), 0..CLIENTS, &template, load::PATIENT);

    // Killed at moments of no particular phase: during a decode, a commit, or a reply.
    let mut rng = Rng::new(std::process::id() as u64);
    for _ in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(300 + rng.below(700))).await;
        server.kill9();
        tokio::time::sleep(Duration::from_millis(100)).await;
        server.restart().await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tally = clients.stop().await;

    let audit = load::audit(&db, &tally.acked).await;
    println!(
        "kill -9 ×{KILLS}: {} batches acknowledged ({} requests), {} sends cut off by a kill and resent; missing {}, duplicated {}",
        tally.batches, audit.acked, tally.broken, audit.missing, audit.duplicated
    );
    assert!(
        tally.broken > 0,
        "no send was cut off: the kills missed the ingest they are meant to interrupt"
    );
    assert!(tally.batches > 0);
    assert_eq!(audit.missing, 0, "acknowledged requests lost");
    assert_eq!(audit.duplicated, 0, "resent requests stored twice");
}

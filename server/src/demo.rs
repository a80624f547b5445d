//! `tokenscope demo`: loads a small demo dataset so a newcomer's first screen has something on it.
//!
//! A stop-gap built from the test fixtures; the engine simulator's scenarios will replace it.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::Result;
use crate::fixtures;
use crate::ingest::{native, store_decoded};
use crate::proto::v1;
use crate::store::Store;

pub async fn load(store: &Store, if_empty: bool) -> Result<()> {
    if if_empty && store.has_requests().await? {
        println!("demo: the database already has requests; nothing loaded");
        return Ok(());
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as i64;
    let start = now - 15 * 60 * 1_000_000_000;
    let mut resource_traces = Vec::new();
    for (k, instance) in ["gpu-0", "gpu-1"].into_iter().enumerate() {
        let requests: Vec<_> = (0..40)
            .map(|i| {
                let seed = (k * 1000 + i) as u64;
                let arrival = start + (i as i64) * 1_700_000_000 + (k as i64) * 400_000_000;
                let n = 20 + (fixtures::Rng::new(seed).below(400) as usize);
                fixtures::request(
                    &format!("{instance}-req-{i:03}"),
                    arrival,
                    n,
                    5,
                    (i as u64) * 10_000,
                    seed,
                )
            })
            .collect();
        let iterations: Vec<_> = requests
            .iter()
            .flat_map(|r| fixtures::iterations_for(r, 8, r.prompt_tokens / 1000))
            .collect();
        resource_traces.push(native::to_wire(
            &fixtures::resource(instance),
            &requests,
            &iterations,
        ));
    }
    let reply = store_decoded(store, native::decode(v1::ExportRequest { resource_traces })).await?;
    println!(
        "demo: loaded {} requests and {} iterations ({} rejected)",
        reply.accepted_requests,
        reply.accepted_iterations,
        reply.rejected_requests + reply.rejected_iterations
    );
    Ok(())
}

//! `tokenscope demo`: loads a demo dataset so a newcomer's first screen has something on it —
//! every simulator scenario (incident and healthy control) and five minutes of the Azure
//! conversation trace replayed on a simulated 8B/H100 instance, a fleet of four on which a
//! release candidate slowed two, and prompt families on three instances with a prefix cache.

use crate::error::Result;
use crate::ingest::{Sink, native, store_decoded};
use tokenscope_sim::{self as sim, cost, deliver, load};

const SECOND: i64 = 1_000_000_000;

pub async fn load(sink: &Sink, if_empty: bool) -> Result<()> {
    if if_empty && sink.store.has_requests().await? {
        println!("demo: the database already has requests; nothing loaded");
        return Ok(());
    }
    let now = crate::clock::now_ns();
    let (mut runs, truths) = sim::all_scenarios(now - 20 * 60 * SECOND, 60 * SECOND, 1);
    let window = load::Window {
        from_s: 0.0,
        length_s: 300.0,
    };
    let replay = load::azure(
        "azure-conv",
        load::AZURE_CONV_5MIN,
        &window,
        now - 6 * 60 * SECOND,
    )?;
    let profile = cost::profile("llama-8b-h100").expect("profile exists");
    runs.push(sim::traffic("sim-azure-conv", profile, replay, 1));
    // A fleet where a release candidate slowed two of four instances (the explorer's "what the
    // slow requests have in common" names the version).
    runs.extend(sim::fleet::regression(now - 12 * 60 * SECOND, 2.0, 90.0));
    // Prompt families on three instances with a prefix cache: a replica that joins cold, and a
    // storm of long prompts that evicts a warm family (the explorer's prompt families panel).
    runs.extend(sim::families::families(now - 10 * 60 * SECOND, 1).0);
    let (mut requests, mut iterations, mut rejected) = (0, 0, 0);
    for deliver::Timed { batch, .. } in deliver::batches(&runs) {
        let reply = store_decoded(
            sink,
            crate::metrics::Source::Demo,
            &crate::access::Grant::All,
            native::decode(batch),
        )
        .await?;
        requests += reply.accepted_requests;
        iterations += reply.accepted_iterations;
        rejected += reply.rejected_requests + reply.rejected_iterations;
    }
    println!(
        "demo: loaded {requests} requests and {iterations} iterations ({rejected} rejected) on {} instances",
        runs.len()
    );
    for t in truths {
        println!(
            "  scenario {:<26} victims {:?} on {}",
            t.scenario, t.victims, t.instance
        );
    }
    Ok(())
}

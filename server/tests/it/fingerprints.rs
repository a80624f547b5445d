//! Prompt families through the query API: a three-instance fleet with a prefix cache
//! (`sim::families`) — a system prompt most requests share, a RAG template nested in it, a replica
//! that joins cold and an instance whose family blocks a storm of long prompts evicts. The truth
//! is the simulated engines': who is in each family (the chains they were given), who computed
//! the system prompt again, and whether its blocks had never been stored on that instance or
//! had been evicted, and by whose prefills.

use serde_json::Value;

use crate::common;

use common::*;
use tokenscope_sim::families::{self, COLD_INSTANCE, Miss, STORM_INSTANCE};

fn family(fp: &Value, hash: u64) -> &Value {
    let hex = format!("{hash:016x}");
    fp["families"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["fingerprint"] == hex.as_str())
        .unwrap_or_else(|| panic!("family {hex} in {fp}"))
}

#[tokio::test]
async fn families_group_as_the_chains_say_and_warm_misses_say_why() {
    let app = spawn_app().await;
    let (runs, truth) = families::families(T0, 1);
    app.send_sim(&runs).await;
    let window = format!("from={}&to={}", T0 - 1, T0 + 3_600_000_000_000);
    let fp = app
        .get_json(&format!("/api/v1/fingerprints?{window}"))
        .await;
    let total: usize = runs.iter().map(|r| r.output.requests.len()).sum();
    assert_eq!(fp["requests"], total as u64);
    assert_eq!(fp["truncated"], false);

    // The system prompt's family is every request given it; the template's is nested in it.
    let system = family(&fp, truth.system_hash);
    let template = family(&fp, truth.template_hash);
    assert_eq!(system["requests"], truth.system.len() as u64, "{system}");
    assert_eq!(system["blocks"], families::SYSTEM_BLOCKS as u64);
    assert_eq!(system["tokens"], families::SYSTEM_BLOCKS as u64 * 16);
    assert_eq!(template["requests"], truth.template.len() as u64);
    assert_eq!(template["parent"], format!("{:016x}", truth.system_hash));
    assert_eq!(fp["families"][0]["fingerprint"], system["fingerprint"]);
    let system_hits = system["hits"].as_u64().unwrap();
    assert_eq!(
        system_hits,
        (truth.system.len() - truth.misses.len()) as u64,
        "hits are the family requests that did not compute the system prompt"
    );
    assert!(system["ttft_miss_ms"].as_f64() > system["ttft_hit_ms"].as_f64());

    // Each warm miss the engines made is listed, with the reason their caches give.
    let arrival: std::collections::HashMap<&str, i64> = runs
        .iter()
        .flat_map(|r| &r.output.requests)
        .map(|r| (r.request_id.as_str(), r.arrival_ns))
        .collect();
    let listed: Vec<&Value> = system["misses"].as_array().unwrap().iter().collect();
    let mut evicted_seen = 0;
    for (id, miss) in &truth.misses {
        let Some(m) = listed.iter().find(|m| m["request_id"] == id.as_str()) else {
            // Not listed only when nothing had computed the family yet: its first requests,
            // in the window's first second.
            assert_eq!(miss, &Miss::NeverStored, "{id} is missing from {system}");
            assert!(
                arrival[id.as_str()] < T0 + 1_000_000_000,
                "{id}: a warm miss left out"
            );
            continue;
        };
        let kind = m["why"]["kind"].as_str().unwrap();
        match miss {
            Miss::NeverStored => {
                assert!(kind == "cold_instance" || kind == "in_flight", "{id}: {m}");
                if id.starts_with(COLD_INSTANCE) && kind == "cold_instance" {
                    assert_ne!(m["why"]["warm_on"], COLD_INSTANCE);
                }
            }
            Miss::Evicted(by) => {
                evicted_seen += 1;
                assert!(id.starts_with(STORM_INSTANCE));
                assert_eq!(kind, "evicted", "{id}: {m}");
                assert!(by.iter().all(|b| truth.storm.contains(b)));
                // What the instance computed since the family's last use: the storm, named.
                let since = &m["why"]["since"];
                let top = since["top"].as_array().unwrap();
                assert_eq!(top.len(), 3, "{since}");
                for t in top {
                    let who = t[0].as_str().unwrap();
                    assert!(truth.storm.iter().any(|s| s == who), "{who} in {since}");
                }
                let storm_tokens = 12 * 768 * 16;
                assert!(since["tokens"].as_u64().unwrap() >= storm_tokens, "{since}");
            }
        }
    }
    assert!(
        evicted_seen >= 1,
        "the storm evicted the family: {:?}",
        truth.misses
    );
    assert!(
        listed.iter().any(|m| m["instance"] == COLD_INSTANCE),
        "the cold replica's first family request is a warm miss: {system}"
    );

    // One click from the explorer: the family as a filter of the request list (and the charts).
    let q = format!(
        "/api/v1/requests?{window}&fingerprint={}&limit=1",
        template["fingerprint"].as_str().unwrap()
    );
    let listing = app.get_json(&q).await;
    assert_eq!(listing["total"], truth.template.len() as u64, "{listing}");
    let err = app
        .get(&format!("/api/v1/requests?{window}&fingerprint=</td><b>"))
        .await;
    assert_eq!(err.status(), 400);
    let text = err.text().await.unwrap();
    assert!(text.contains("not a block hash"), "{text}");
}

/// The families read keeps the latest requests *that have a fingerprint*, and the compare's
/// answers read the first ones that have a prompt key: later (or earlier) requests without block
/// hashes, as from an engine that reports none, neither count toward the limit nor use it up.
#[tokio::test]
async fn the_reads_limits_count_only_requests_with_a_fingerprint() {
    let app = spawn_app().await;
    // Requests without block hashes first and last, the families' fleet between them.
    let plain = |name, t0| {
        let mut s = tokenscope_sim::scenarios::build(name, t0, 1).unwrap();
        for run in &mut s.runs {
            for r in &mut run.output.requests {
                r.served.prefix_cache = None;
            }
        }
        s.runs
    };
    let hour = 3_600_000_000_000;
    app.send_sim(&plain("prefill-interrupts-decode", T0 - hour))
        .await;
    let (runs, _) = families::families(T0, 1);
    app.send_sim(&runs).await;
    app.send_sim(&plain("long-prompt-monopolizes", T0 + 2 * hour))
        .await;

    let mut fingerprinted: Vec<i64> = runs
        .iter()
        .flat_map(|r| &r.output.requests)
        .map(|r| r.arrival_ns)
        .collect();
    fingerprinted.sort_unstable();
    let store = tokenscope::store::Store::connect(&app.database_url)
        .await
        .unwrap();
    let window = tokenscope::store::RequestFilter {
        from_ns: Some(T0 - 2 * hour),
        to_ns: Some(T0 + 4 * hour),
        ..Default::default()
    };
    let (rows, more) = store.fingerprint_rows(&window, 5).await.unwrap();
    let latest: Vec<i64> = rows.iter().map(|r| r.arrival_ns).collect();
    assert_eq!(
        latest,
        fingerprinted[fingerprinted.len() - 5..],
        "the latest five with a fingerprint"
    );
    assert!(more);
    let keys = store.prompt_keys(&window, 5).await.unwrap();
    let first: Vec<i64> = keys.iter().map(|r| r.arrival_ns).collect();
    assert_eq!(
        first,
        fingerprinted[..5],
        "the first five with a prompt key"
    );
}

//! Same prompt, different answer: the fleet's clients ask a fixed set of prompts of every
//! instance, and two instances run a release candidate whose answers end 40 % sooner
//! (`sim::fleet::regression`). Compare pairs the prompts both sides were asked and says how often
//! the answers differ and where they first part; within A, the same prompt answered twice is the
//! control. The truth is the simulated engines' answers, compared here token by token.

use std::collections::BTreeMap;

use crate::common;

use common::*;
use tokenscope_core::model::RequestTrace;
use tokenscope_sim::fleet;

/// A prompt's key as the engine's fingerprint gives it: its chain, chain length, prompt length.
type Prompt = (Vec<u64>, u32, u32);

fn prompt(r: &RequestTrace) -> Prompt {
    let p = r
        .served
        .prefix_cache
        .as_ref()
        .expect("the fleet sends fingerprints");
    (p.block_hashes.clone(), p.blocks, r.prompt_tokens)
}

fn ids(r: &RequestTrace) -> Vec<Option<u32>> {
    r.tokens.iter().map(|t| t.token_id).collect()
}

#[tokio::test]
async fn the_release_candidate_answers_the_same_prompts_shorter() {
    let app = spawn_app().await;
    let runs = fleet::regression(T0, 2.0, 90.0);
    app.send_sim(&runs).await;

    // Each side's requests by prompt, oldest first, from the engines' output.
    let mut side: [BTreeMap<Prompt, Vec<&RequestTrace>>; 2] = Default::default();
    for run in &runs {
        let s = usize::from(run.resource.engine_version == fleet::SLOW_VERSION);
        for r in &run.output.requests {
            side[s].entry(prompt(r)).or_default().push(r);
        }
    }
    for list in side.iter_mut().flat_map(|m| m.values_mut()) {
        list.sort_by_key(|r| (r.arrival_ns, r.request_id.clone()));
    }
    let mut positions = Vec::new();
    for (key, a) in &side[0] {
        let Some(b) = side[1].get(key) else { continue };
        let (x, y) = (ids(a[0]), ids(b[0]));
        let same = x.iter().zip(&y).take_while(|(p, q)| p == q).count();
        assert!(same < x.len().max(y.len()), "the candidate answered alike");
        // B says what A said, then ends: its end-of-sequence where A went on, or cut short.
        assert!(
            same + 1 == y.len() || same == y.len(),
            "B's answer is A's, ended sooner"
        );
        positions.push(same as u32);
    }
    let both = positions.len();
    assert!(both >= 30, "prompts on both sides: {both}");
    positions.sort_unstable();
    let within: usize = side[0].values().filter(|l| l.len() > 1).count();
    for l in side[0].values().filter(|l| l.len() > 1) {
        assert_eq!(ids(l[0]), ids(l[1]), "A answers a prompt alike every time");
    }

    let (from, to) = (T0 - 1, T0 + 3_600_000_000_000);
    let q = format!(
        "/api/v1/compare?a_instance=fleet-0,fleet-1&b_instance=fleet-2,fleet-3\
         &a_from={from}&a_to={to}&b_from={from}&b_to={to}"
    );
    let c = app.get_json(&q).await;
    let d = &c["answers"];
    assert_eq!(d["prompts_both"], both as u64, "{d}");
    assert_eq!(d["compared"], both.min(100) as u64);
    assert_eq!(d["differ"], both.min(100) as u64);
    assert_eq!(d["within_a_compared"], within.min(100) as u64);
    assert_eq!(d["within_a_differ"], 0);
    let median = positions[(both - 1) / 2];
    assert!(
        both <= 100,
        "every prompt compared, so the median is the truth's"
    );
    assert_eq!(d["position"][1], median, "{d}");
    let e = &d["example"];
    assert_eq!(e["position"], median);
    assert!(e["a"]["instance"].as_str().unwrap() < "fleet-2");
    assert!(e["b"]["instance"].as_str().unwrap() >= "fleet-2");
    // Its words around the parting: the same up to it, then A goes on where B ends (its
    // end-of-sequence token, or nothing).
    let at = (median - e["context_from"].as_u64().unwrap() as u32) as usize;
    let (a_ctx, b_ctx) = (
        e["a_context"].as_array().unwrap(),
        e["b_context"].as_array().unwrap(),
    );
    assert_eq!(a_ctx[..at], b_ctx[..at]);
    assert!(a_ctx.len() > at, "{e}");
    assert!(
        b_ctx.len() == at || (b_ctx.len() == at + 1 && b_ctx[at] == "<|endoftext|>"),
        "{e}"
    );
}

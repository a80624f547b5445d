//! Prompt families on a three-instance fleet with a prefix cache, and what the engines did with
//! them: a support system prompt (512 tokens) most requests start with, a RAG template (256 more)
//! nested in it, and one-off prompts. `cache-0` serves them all along; `cache-2` joins at 40 s
//! with a cold cache (its first family requests compute the system prompt); on `cache-1` the
//! family pauses from 45 s to 65 s while twelve 12k-token one-off prompts arrive at 50 s and push
//! its blocks out, so the family's first request after the pause computes them again.
//!
//! The truth is the engines' own: who missed, and whether the blocks were ever stored on that
//! instance before (a cold cache, or an earlier request still computing them) or were evicted,
//! and by whose stored prefill.

use std::collections::BTreeMap;

use tokenscope_core::model::{Nanos, Role};

use crate::engine::{self, EngineConfig, SimRequest};
use crate::prefix::{self, Eviction};
use crate::scenarios::{self, InstanceRun};
use crate::{Rng, cost, tenants};

const SECOND: Nanos = 1_000_000_000;
/// The support system prompt's and the RAG template's blocks (16 tokens each).
pub const SYSTEM_BLOCKS: usize = 32;
pub const TEMPLATE_BLOCKS: usize = 16;
/// The prefix cache of each instance, in blocks (96k tokens).
const CACHE_BLOCKS: u32 = 6_000;

pub const COLD_INSTANCE: &str = "cache-2";
pub const STORM_INSTANCE: &str = "cache-1";

/// Why a family request computed the system prompt, as the engine knows it.
#[derive(Clone, Debug, PartialEq)]
pub enum Miss {
    /// Its blocks had never been stored on its instance when it was admitted: a cold cache, or
    /// an earlier request of the family still computing them.
    NeverStored,
    /// They had been, and were evicted by these requests' stored prefills.
    Evicted(Vec<String>),
}

pub struct FamilyTruth {
    /// The chain hash ending the system prompt and the one ending the RAG template: the
    /// fingerprints of the two families.
    pub system_hash: u64,
    pub template_hash: u64,
    /// Requests whose prompt starts with the system prompt (the RAG ones among them), and those
    /// whose prompt also continues with the template.
    pub system: Vec<String>,
    pub template: Vec<String>,
    /// Family requests that computed part of the system prompt, and why.
    pub misses: BTreeMap<String, Miss>,
    /// The one-off prompts that flooded `cache-1`.
    pub storm: Vec<String>,
}

/// The fleet's traffic from `start` for 90 s, and what happened to the families.
pub fn families(start: Nanos, seed: u64) -> (Vec<InstanceRun>, FamilyTruth) {
    let system: Vec<u64> = (0..SYSTEM_BLOCKS as u64).map(|j| 1_000 + j).collect();
    let template: Vec<u64> = (0..TEMPLATE_BLOCKS as u64).map(|j| 2_000 + j).collect();
    let template_chain = prefix::chain(&[system.clone(), template.clone()].concat());
    let mut truth = FamilyTruth {
        system_hash: template_chain[SYSTEM_BLOCKS - 1],
        template_hash: template_chain[SYSTEM_BLOCKS + TEMPLATE_BLOCKS - 1],
        system: Vec::new(),
        template: Vec::new(),
        misses: BTreeMap::new(),
        storm: Vec::new(),
    };
    let profile = cost::profile("llama-8b-h100").expect("profile exists");
    let mut cfg = EngineConfig::new(profile);
    cfg.prefix_cache_blocks = CACHE_BLOCKS;
    let mut fresh = 1_000_000u64;
    let mut runs = Vec::new();
    for k in 0..3u64 {
        let name = format!("cache-{k}");
        let mut rng = Rng::new(seed * 31 + k);
        let from = if name == COLD_INSTANCE { 40.0 } else { 0.0 };
        let mut reqs = Vec::new();
        for r in crate::load::poisson(
            &format!("{name}-req"),
            start + (from * 1e9) as Nanos,
            2.0,
            90.0 - from,
            false,
            &mut rng,
        ) {
            let t = (r.arrival_ns - start) as f64 / 1e9;
            let paused = name == STORM_INSTANCE && (45.0..65.0).contains(&t);
            let kind = rng.below(100);
            let mut blocks = Vec::new();
            if kind < 80 && !paused {
                blocks.extend(&system);
                truth.system.push(r.id.clone());
                if kind >= 55 {
                    blocks.extend(&template);
                    truth.template.push(r.id.clone());
                }
            }
            let own = if blocks.is_empty() { 10 } else { 8 } + rng.below(32) as usize;
            blocks.extend((0..own).map(|_| {
                fresh += 1;
                fresh
            }));
            reqs.push(with_blocks(r, blocks, &mut rng));
        }
        if name == STORM_INSTANCE {
            for s in 0..12 {
                let id = format!("{name}-storm-{s:02}");
                let blocks = (0..768).map(|_| {
                    fresh += 1;
                    fresh
                });
                let r = SimRequest::new(&id, start + 50 * SECOND + s * SECOND / 10, 0, 40);
                reqs.push(with_blocks(r, blocks.collect(), &mut rng));
                truth.storm.push(id);
            }
        }
        let first_iteration = 1 + rng.below(1000) * 1000;
        let mut output = engine::run(&cfg, reqs, &mut rng, first_iteration);
        let mut words = Rng::new(seed ^ k);
        for r in &mut output.requests {
            scenarios::answer(r, &mut words);
            tenants::serve(r);
        }
        let system_chain = &template_chain[..SYSTEM_BLOCKS];
        for r in &output.requests {
            let family = truth.system.contains(&r.request_id);
            if family && (r.cached_tokens as usize) < SYSTEM_BLOCKS * 16 {
                let first_missing = system_chain[r.cached_tokens as usize / 16];
                let miss = why_missed(&output.evictions, first_missing, r.arrival_ns);
                truth.misses.insert(r.request_id.clone(), miss);
            }
        }
        runs.push(InstanceRun {
            resource: scenarios::resource(&name, Role::Colocated),
            output,
        });
    }
    (runs, truth)
}

/// A request whose prompt is `blocks` full blocks and a part-filled last one.
fn with_blocks(r: SimRequest, blocks: Vec<u64>, rng: &mut Rng) -> SimRequest {
    SimRequest {
        prompt_tokens: blocks.len() as u32 * 16 + 1 + rng.below(15) as u32,
        prompt_blocks: blocks,
        ..r
    }
}

/// Whether `hash` had been evicted on the instance before `at` (by whom, every time since it was
/// last stored), or never stored there.
fn why_missed(evictions: &[Eviction], hash: u64, at: Nanos) -> Miss {
    let by: Vec<String> = evictions
        .iter()
        .filter(|e| e.hash == hash && e.at_ns <= at)
        .map(|e| e.by.clone())
        .collect();
    if by.is_empty() {
        Miss::NeverStored
    } else {
        Miss::Evicted(by)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cold_instance_and_the_storm_make_the_misses_they_plant() {
        let (runs, t) = families(0, 1);
        assert!(
            t.system.len() > 200 && t.template.len() > 60,
            "{}",
            t.system.len()
        );
        let on = |i: &str| t.misses.keys().filter(|id| id.starts_with(i)).count();
        // Warm all along: no family request on cache-0 computes the system prompt after the first.
        assert!(on("cache-0") <= 2, "{:?}", t.misses);
        assert!(on(COLD_INSTANCE) >= 1);
        let evicted: Vec<_> = t
            .misses
            .iter()
            .filter_map(|(id, m)| match m {
                Miss::Evicted(by) => Some((id, by)),
                Miss::NeverStored => None,
            })
            .collect();
        assert!(!evicted.is_empty(), "{:?}", t.misses);
        for (id, by) in evicted {
            assert!(id.starts_with(STORM_INSTANCE), "{id}");
            assert!(by.iter().all(|b| t.storm.contains(b)), "{by:?}");
        }
        // Most family requests hit: the prefix cache works.
        let hits = runs
            .iter()
            .flat_map(|r| &r.output.requests)
            .filter(|r| t.system.contains(&r.request_id) && r.cached_tokens >= 512)
            .count();
        assert!(
            hits * 10 > t.system.len() * 9,
            "{hits} of {}",
            t.system.len()
        );
    }
}

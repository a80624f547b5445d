//! `tokenscope sim`: a simulated LLM serving engine that emits the traces a real one would.
//!
//! `cost` models step times, `engine` runs continuous batching over requests, `content` gives
//! tokens real vocabulary ids and texts, and `scenarios` reproduces named incidents with ground
//! truth. Everything here is deterministic for a seed and does no IO.

pub mod cli;
pub mod content;
pub mod cost;
pub mod deliver;
pub mod engine;
pub mod load;
pub mod scenarios;

use app::model::{Nanos, Role};

use crate::fixtures::Rng;
use engine::{EngineConfig, SimRequest};
use scenarios::{InstanceRun, Truth};

/// Runs synthetic or replayed traffic through one engine instance.
pub fn traffic(
    instance: &str,
    profile: &'static cost::Profile,
    reqs: Vec<SimRequest>,
    seed: u64,
) -> InstanceRun {
    let mut rng = Rng::new(seed);
    let cfg = EngineConfig::new(profile);
    scenarios::simulate_run(instance, Role::Colocated, &cfg, reqs, &mut rng)
}

/// Every named scenario, starting `gap` apart from `start`, with their ground truths.
pub fn all_scenarios(start: Nanos, gap: Nanos, seed: u64) -> (Vec<InstanceRun>, Vec<Truth>) {
    let mut runs = Vec::new();
    let mut truths = Vec::new();
    for (k, name) in scenarios::NAMES.iter().enumerate() {
        let s = scenarios::build(name, start + k as Nanos * gap, seed + k as u64)
            .expect("named scenario exists");
        runs.extend(s.runs);
        truths.push(s.truth);
    }
    (runs, truths)
}

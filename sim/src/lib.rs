//! A simulated LLM serving engine that emits the traces a real one would: the demo data, a load
//! generator (`tokenscope sim`), and scenarios whose ground truth the diagnosis tests check.
//!
//! `cost` models step times, `engine` runs continuous batching over requests, `content` gives
//! tokens real vocabulary ids and texts, and `scenarios` reproduces named incidents with ground
//! truth; all deterministic for a seed, with no IO. `deliver` sends (gRPC) or writes (JSONL) what
//! they produce; `run` is the command.

// Phases, not long functions: no function here over 120 lines (clippy.toml).
#![warn(clippy::too_many_lines)]

pub mod accuracy;
mod args;
pub mod content;
pub mod cost;
pub mod deliver;
pub mod encoded;
pub mod engine;
mod error;
pub mod families;
pub mod fleet;
pub mod ledger;
pub mod load;
pub mod prefix;
mod rng;
mod run;
pub mod scenarios;
pub mod tenants;

pub use args::SimArgs;
pub use error::{Error, Result};
pub use rng::Rng;
pub use run::run;

use std::ops::ControlFlow;

use tokenscope_core::model::{Nanos, Role};

use engine::{EngineConfig, Event, Output, SimRequest};
use scenarios::{InstanceRun, Truth};

/// Runs synthetic or replayed traffic through one engine instance.
pub fn traffic(
    instance: &str,
    profile: &'static cost::Profile,
    reqs: Vec<SimRequest>,
    seed: u64,
) -> InstanceRun {
    let mut output = Output {
        requests: Vec::new(),
        iterations: Vec::new(),
        evictions: Vec::new(),
    };
    // Collecting never asks the engine to stop.
    let _ = traffic_events(profile, reqs, seed, &mut |e| {
        match e {
            Event::Step(it) => output.iterations.push(it),
            Event::Finished(r) => output.requests.push(*r),
        }
        ControlFlow::Continue(())
    });
    InstanceRun {
        resource: scenarios::resource(instance, Role::Colocated),
        output,
    }
}

/// Runs synthetic or replayed traffic through one engine instance, handing out each step and each
/// finished request, with its words, as the engine produces them (see `engine::stream`, also for
/// stopping early).
pub fn traffic_events(
    profile: &'static cost::Profile,
    reqs: Vec<SimRequest>,
    seed: u64,
    emit: &mut dyn FnMut(Event) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let mut rng = Rng::new(seed);
    // The words draw from their own generator, so that they do not depend on when requests finish.
    let mut words = Rng::new(seed ^ 0x5745_5244);
    let cfg = EngineConfig::new(profile);
    let first_iteration = 1 + rng.below(1000) * 1000;
    engine::stream(&cfg, reqs, &mut rng, first_iteration, &mut |mut e| {
        if let Event::Finished(r) = &mut e {
            scenarios::answer(r, &mut words);
            tenants::serve(r);
        }
        emit(e)
    })
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
    for r in runs.iter_mut().flat_map(|r| &mut r.output.requests) {
        tenants::serve(r);
    }
    (runs, truths)
}

//! A fleet whose slow requests share a cause that is not an incident on one instance: four
//! instances share the traffic and two of them run a release candidate whose steps pay 52 ms of
//! overhead instead of 2.5 ms (a scheduler regression: each step waits on the CPU), so their
//! decode runs past a 50 ms TPOT SLO while the others' stays near 8 ms; and its answers reach
//! their end-of-sequence token sooner (40 % fewer tokens: the words changed too).
//! Clients ask a fixed set of prompts, so each version answers the same ones.
//! The truth is the engine's own output: which requests were slow, and on which version.

use tokenscope_core::model::Nanos;

use crate::{cost, load, scenarios::InstanceRun};

/// Prompts the fleet's clients ask, each many times on every instance (a fixed set of questions,
/// as an evaluation or a product's canned prompts would): the same prompt gets the same answer
/// from the same build, so the two versions' answers to it can be compared word for word.
pub const PROMPTS: u64 = 40;

/// Gives each request one of the [`PROMPTS`] (its blocks, length and answer length).
fn ask_from_pool(reqs: &mut [crate::engine::SimRequest], rng: &mut crate::Rng) {
    for r in reqs {
        let k = rng.below(PROMPTS);
        let blocks = 8 + (k * 53) % 120;
        r.prompt_blocks = (0..blocks).map(|j| 7_000_000 + k * 1_000 + j).collect();
        r.prompt_tokens = blocks as u32 * 16 + 5;
        r.output_tokens = 40 + ((k * 97) % 400) as u32;
    }
}

/// The release candidate's version, as its instances report it.
pub const SLOW_VERSION: &str = "0.12.0-rc1";

/// Instances `fleet-0` … `fleet-3` at `rate` requests/s each for `seconds` from `start`; the last
/// two on [`SLOW_VERSION`].
pub fn regression(start: Nanos, rate: f64, seconds: f64) -> Vec<InstanceRun> {
    let base = cost::profile("llama-8b-h100").expect("profile exists");
    let slower: &'static cost::Profile = Box::leak(Box::new(cost::Profile {
        overhead_ns: 52.0e6,
        ..base.clone()
    }));
    (0..4u64)
        .map(|k| {
            let name = format!("fleet-{k}");
            let mut rng = crate::Rng::new(40 + k);
            let mut reqs = load::poisson(
                &format!("{name}-req"),
                start,
                rate,
                seconds,
                false,
                &mut rng,
            );
            ask_from_pool(&mut reqs, &mut rng);
            let on_rc = k >= 2;
            if on_rc {
                for r in &mut reqs {
                    r.output_tokens = (r.output_tokens * 3 / 5).max(2);
                }
            }
            let mut run = crate::traffic(&name, if on_rc { slower } else { base }, reqs, 90 + k);
            if on_rc {
                run.resource.engine_version = SLOW_VERSION.into();
            }
            run
        })
        .collect()
}

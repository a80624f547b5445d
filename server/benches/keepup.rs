//! Keeping up (issue 31, item 4): native ingest sent in real time at a steady rate into the real
//! server with its findings worker on (settle 5 s), the worker's lag sampled twice a second. For
//! each rate: what was offered and stored, how far the oldest waiting stretch got past the settle
//! time (the worker's lag: 0 means it kept up), how long it took to catch up after the last
//! batch, and how busy the two cores were.
//!
//! The traffic: simulated 8B/H100 instances at a steady Poisson rate each, as many as the rate
//! needs, every instance exporting once per second of its time (as the plugins do), encoded
//! before the clock starts so that the sender does not take the cores it measures. How busy
//! each instance is sets how many requests break an SLO, which the worker diagnoses again when
//! their neighbourhood changes (the others it passes by): `TOKENSCOPE_KEEPUP_PER_INSTANCE`
//! requests a second (6: a busy instance whose requests nearly all meet their SLOs).
//!
//! `scripts/bench keepup`, or `cargo bench -p tokenscope --bench keepup` with
//! TOKENSCOPE_TEST_DATABASE_URL set. `TOKENSCOPE_KEEPUP_RATES` (output tokens/s, comma-separated;
//! 100000,200000,300000,400000), `TOKENSCOPE_KEEPUP_SECONDS` (40) of sending at each.

/// The allocator the `tokenscope` binary runs with (`server/src/main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../tests/it/common/mod.rs"]
#[allow(dead_code)] // the benches use only part of the test harness
mod common;
#[path = "support/settings.rs"]
mod settings;

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokenscope_core::analysis::diagnosis::{Thresholds, healthy_alone};
use tokenscope_core::model::{Nanos, Role};
use tokenscope_sim as sim;
use tokenscope_sim::deliver::{Batcher, Encoded};
use tokenscope_sim::engine::Event;

const START: Nanos = 1_796_022_000_000_000_000;
const SECOND: Nanos = 1_000_000_000;
const SETTLE: Duration = Duration::from_secs(5);
/// Requests a second on each instance by default: a busy 8B on an H100 (about 2,000 output
/// tokens/s).
const PER_INSTANCE: f64 = 6.0;
/// Simulated before the measured seconds, so that every instance is busy from the first.
const WARM_S: f64 = 20.0;

/// One instance's export batches, encoded, the output tokens it made, and its requests (those
/// finished in the measured seconds) and how many of them are not healthy whatever ran beside
/// them (`healthy_alone`: the ones the worker reads again).
struct Instance {
    batches: Vec<Encoded>,
    tokens: u64,
    requests: u64,
    not_alone: u64,
}

#[tokio::main]
async fn main() {
    let rates: Vec<f64> = std::env::var("TOKENSCOPE_KEEPUP_RATES")
        .unwrap_or_else(|_| "100000,200000,300000,400000".into())
        .split(',')
        .filter_map(|r| r.trim().parse().ok())
        .collect();
    let seconds: f64 = settings::env_or("TOKENSCOPE_KEEPUP_SECONDS", 40.0);
    let per_instance: f64 = settings::env_or("TOKENSCOPE_KEEPUP_PER_INSTANCE", PER_INSTANCE);
    let most = rates.iter().copied().fold(0.0, f64::max);

    let t = Instant::now();
    let mut instances: Vec<Instance> = Vec::new();
    while (instances.iter().map(|i| i.tokens).sum::<u64>() as f64) < most * seconds {
        instances.push(simulate(instances.len(), seconds, per_instance));
    }
    println!(
        "keep-up: {} instances simulated and encoded in {:.0} s ({:.0} output tokens/s each)",
        instances.len(),
        t.elapsed().as_secs_f64(),
        instances.iter().map(|i| i.tokens).sum::<u64>() as f64 / instances.len() as f64 / seconds
    );
    for rate in rates {
        measure(&instances, rate, seconds).await;
    }
}

/// `WARM_S + seconds` of one instance, cut into a batch of requests and one of steps per second
/// of its time; only the measured seconds are kept (the warm-up is how its queue filled).
fn simulate(k: usize, seconds: f64, per_instance: f64) -> Instance {
    let name = format!("keepup-{k:03}");
    let profile = sim::cost::profile("llama-8b-h100").unwrap();
    let mut rng = sim::Rng::new(500 + k as u64);
    let reqs = sim::load::poisson(
        &format!("{name}-req"),
        START - (WARM_S as Nanos) * SECOND,
        per_instance,
        WARM_S + seconds,
        false,
        &mut rng,
    );
    let resource = sim::scenarios::resource(&name, Role::Colocated);
    let mut b = Batcher::new(resource.clone());
    let (mut cut, mut out, mut tokens) = (START, Vec::new(), 0u64);
    let (mut requests, mut not_alone) = (0, 0);
    let th = Thresholds::default();
    let _ = sim::traffic_events(profile, reqs, 500 + k as u64, &mut |e| {
        let at = match &e {
            Event::Step(it) => it.end_ns,
            Event::Finished(r) => r.finished_ns,
        };
        if at >= cut {
            let full = std::mem::replace(&mut b, Batcher::new(resource.clone()));
            out.extend(full.finish().into_iter().filter(|t| t.at_ns >= START));
            cut = at - at % SECOND + SECOND;
        }
        if let (Event::Finished(r), true) = (&e, at >= START) {
            tokens += r.tokens.len() as u64;
            requests += 1;
            not_alone += u64::from(!healthy_alone(r, &th));
        }
        out.extend(b.push(e).filter(|t| t.at_ns >= START));
        ControlFlow::Continue(())
    });
    out.extend(b.finish());
    Instance {
        batches: out.into_iter().map(Encoded::from).collect(),
        tokens,
        requests,
        not_alone,
    }
}

/// The first instances that together make `rate`, sent in real time into a fresh server.
async fn measure(instances: &[Instance], rate: f64, seconds: f64) {
    let (mut n, mut tokens) = (0, 0u64);
    while n < instances.len() && (tokens as f64) < rate * seconds {
        tokens += instances[n].tokens;
        n += 1;
    }
    let used = &instances[..n];
    let not_alone = used.iter().map(|i| i.not_alone).sum::<u64>() as f64
        / used.iter().map(|i| i.requests).sum::<u64>().max(1) as f64;
    let mut batches: Vec<Encoded> = used.iter().flat_map(|i| i.batches.clone()).collect();
    batches.sort_by_key(|b| b.at_ns);
    // The simulated span sent: answers still running at the end finish after `seconds`.
    let span = match (batches.first(), batches.last()) {
        (Some(a), Some(b)) => (b.at_ns - a.at_ns) as f64 / 1e9,
        _ => 0.0,
    };

    let app = common::spawn_app_with(|c| c.findings_settle = Some(SETTLE)).await;
    // The worst lag seen, in ms: how far the oldest waiting stretch was past its settle time.
    let worst = Arc::new(AtomicU64::new(0));
    let sampling = tokio::spawn({
        let (store, worst) = (app.running.store.clone(), worst.clone());
        async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let (oldest, _) = store.diagnosis_backlog().await.unwrap();
                let past = oldest.saturating_sub(SETTLE).as_millis() as u64;
                worst.fetch_max(past, Ordering::Relaxed);
            }
        }
    });
    let (cpu, diagnosed) = (Cpu::now(), tokenscope::query::findings::diagnosed_total());
    let url = format!("http://{}", app.running.grpc_addr);
    // One export in flight per instance, as when each exports on its own.
    let sent = sim::deliver::send_encoded(&url, batches, 1.0, used.len(), false)
        .await
        .unwrap();
    assert_eq!(sent.rejected, 0, "the server rejected batches");
    let caught_up = common::findings_settled(&app.running.store, Duration::MAX)
        .await
        .as_secs_f64();
    let busy = cpu.busy_since();
    let diagnosed = tokenscope::query::findings::diagnosed_total() - diagnosed;
    sampling.abort();
    let worst = worst.load(Ordering::Relaxed) as f64 / 1e3;
    let took = sent.elapsed.as_secs_f64();
    println!(
        "  {:>9.0} tokens/s offered ({} instances): {} requests ({:.0} % not healthy alone), {tokens} tokens sent in {took:.1} s ({span:.1} s of their time, {:.0} tokens/s); \
         findings lag past settle at most {:.1} s, caught up {caught_up:.1} s after the last batch, each request diagnosed {:.1} times; cores {:.0} % busy",
        tokens as f64 / seconds,
        used.len(),
        sent.requests,
        not_alone * 100.0,
        tokens as f64 / took,
        worst,
        diagnosed as f64 / sent.requests.max(1) as f64,
        busy * 100.0
    );
}

/// The machine's CPU time from `/proc/stat` (all cores): busy and total jiffies.
struct Cpu(u64, u64);

impl Cpu {
    fn now() -> Self {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let fields: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
        let total: u64 = fields.iter().take(8).sum();
        let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
        Self(total - idle, total)
    }

    /// The share of the cores busy since `self`.
    fn busy_since(&self) -> f64 {
        let now = Self::now();
        (now.0 - self.0) as f64 / (now.1 - self.1).max(1) as f64
    }
}

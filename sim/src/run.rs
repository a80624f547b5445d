//! `tokenscope sim`: simulates the requested traffic and sends it or writes it. Scenarios are
//! built whole (they are small and carry ground truth); rate and replay traffic streams, sent
//! while it is simulated, so memory stays bounded however long the run.

use tokenscope_core::model::{Nanos, Role};

use crate::deliver::{self, Delivered, Summary};
use crate::engine::SimRequest;
use crate::{Error, Result, SimArgs, cost, load, scenarios};

const SECOND: Nanos = 1_000_000_000;

/// Runs the command; `now_ns` is the wall clock (the default traffic ends about then).
pub async fn run(args: SimArgs, now_ns: Nanos) -> Result<()> {
    let profile = cost::profile(&args.profile).ok_or_else(|| {
        let names: Vec<&str> = cost::PROFILES.iter().map(|p| p.name).collect();
        Error::InvalidArgument(format!(
            "--profile {:?} is not one of {}",
            args.profile,
            names.join(", ")
        ))
    })?;
    if args.out.is_none() && (args.speed.is_nan() || args.speed <= 0.0) {
        return Err(Error::InvalidArgument("--speed must be positive".into()));
    }
    match (&args.scenario, args.rate, &args.replay) {
        (Some(name), _, _) => scenario(&args, name, now_ns).await,
        (None, Some(rate), _) => {
            let start = args
                .start_ns
                .unwrap_or(now_ns - (args.duration_s * 1e9) as Nanos);
            let mut rng = crate::Rng::new(args.seed);
            let reqs = load::poisson(
                &format!("{}-req", args.instance),
                start,
                rate,
                args.duration_s,
                args.bursty,
                &mut rng,
            );
            traffic(&args, profile, reqs).await
        }
        (None, None, Some(source)) => {
            let text = if source == "azure-conv-5min" {
                load::AZURE_CONV_5MIN.to_string()
            } else {
                std::fs::read_to_string(source)
                    .map_err(|e| Error::InvalidArgument(format!("cannot read {source}: {e}")))?
            };
            let w = load::Window {
                from_s: args.window_start_s,
                length_s: args.window_s,
            };
            let start = args
                .start_ns
                .unwrap_or(now_ns - (w.length_s * 1e9) as Nanos);
            let prefix = format!("{}-req", args.instance);
            let reqs = if text.trim_start().starts_with('{') {
                load::mooncake(&prefix, &text, &w, start)?
            } else {
                load::azure(&prefix, &text, &w, start)?
            };
            traffic(&args, profile, reqs).await
        }
        (None, None, None) => Err(Error::InvalidArgument(
            "say what to simulate: --scenario NAME|all, --rate R, or --replay FILE".into(),
        )),
    }
}

/// A named scenario (or all of them), with its ground truth.
async fn scenario(args: &SimArgs, name: &str, now_ns: Nanos) -> Result<()> {
    let start = args.start_ns.unwrap_or(now_ns - 10 * 60 * SECOND);
    let (runs, truths) = if name == "all" {
        crate::all_scenarios(start, 60 * SECOND, args.seed)
    } else {
        let s = scenarios::build(name, start, args.seed).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "--scenario {name:?} is not one of all, {}",
                scenarios::NAMES
                    .iter()
                    .chain(&scenarios::EXTRA)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        (s.runs, vec![s.truth])
    };
    let mut summaries: Vec<Summary> = runs.iter().map(Summary::of).collect();
    print_summaries(&mut summaries);
    if let Some(path) = &args.truth {
        let json =
            serde_json::to_string_pretty(&truths).map_err(|e| Error::Internal(e.to_string()))?;
        std::fs::write(path, json)
            .map_err(|e| Error::InvalidArgument(format!("cannot write {}: {e}", path.display())))?;
    }
    let batches = deliver::batches(&runs);
    match &args.out {
        Some(path) => deliver::write(path, batches),
        None => {
            let d = deliver::send(&args.send, batches, args.speed, true).await?;
            print_delivered(&d);
            Ok(())
        }
    }
}

/// Rate or replay traffic on one instance, sent (or written) while it is simulated.
async fn traffic(
    args: &SimArgs,
    profile: &'static cost::Profile,
    reqs: Vec<SimRequest>,
) -> Result<()> {
    let seed = args.seed;
    let mut resource = scenarios::resource(&args.instance, Role::Colocated);
    // The profile's own model, whose shape the diagnosis then knows by its name.
    resource.model = profile.model.into();
    let (rx, simulation) = deliver::stream(resource, move |emit| {
        crate::traffic_events(profile, reqs, seed, emit)
    });
    let delivered = match &args.out {
        Some(path) => {
            let path = path.clone();
            let mut rx = rx;
            let batches = std::iter::from_fn(move || rx.blocking_recv());
            tokio::task::spawn_blocking(move || deliver::write(&path, batches))
                .await
                .map_err(|e| Error::Internal(e.to_string()))?
                .map(|()| None)
        }
        None => deliver::send_stream(&args.send, rx, args.speed, true)
            .await
            .map(Some),
    };
    // When sending failed the simulation stops at its next batch, so this wait is short.
    let summary = simulation
        .await
        .map_err(|e| Error::Internal(e.to_string()))?;
    print_summaries(&mut [summary]);
    if let Some(d) = delivered? {
        print_delivered(&d);
    }
    Ok(())
}

fn print_summaries(summaries: &mut [Summary]) {
    let requests: usize = summaries.iter().map(|s| s.requests).sum();
    let tokens: usize = summaries.iter().map(|s| s.tokens).sum();
    eprintln!(
        "simulated {requests} requests, {tokens} tokens on {} instances",
        summaries.len()
    );
    for s in summaries {
        eprintln!("{}", s.line());
    }
}

fn print_delivered(d: &Delivered) {
    eprintln!(
        "sent {} requests and {} iterations in {:.1} s ({:.0} tokens/s); {} rejected",
        d.requests,
        d.iterations,
        d.elapsed.as_secs_f64(),
        d.tokens as f64 / d.elapsed.as_secs_f64().max(1e-3),
        d.rejected
    );
}

//! `tokenscope sim`: builds the requested traffic, then sends it or writes it.

use app::model::Nanos;

use super::{cost, deliver, load, scenarios};
use crate::cli::SimArgs;
use crate::clock::now_ns;
use crate::error::{Error, Result};

const SECOND: Nanos = 1_000_000_000;

pub async fn run(args: SimArgs) -> Result<()> {
    let profile = cost::profile(&args.profile).ok_or_else(|| {
        let names: Vec<&str> = cost::PROFILES.iter().map(|p| p.name).collect();
        Error::InvalidArgument(format!(
            "--profile {:?} is not one of {}",
            args.profile,
            names.join(", ")
        ))
    })?;
    let mut runs = Vec::new();
    let mut truths = Vec::new();
    match (&args.scenario, args.rate, &args.replay) {
        (Some(name), _, _) => {
            let start = args.start_ns.unwrap_or_else(|| now_ns() - 10 * 60 * SECOND);
            if name == "all" {
                let (r, t) = super::all_scenarios(start, 60 * SECOND, args.seed);
                runs = r;
                truths = t;
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
                runs = s.runs;
                truths.push(s.truth);
            }
        }
        (None, Some(rate), _) => {
            let start = args
                .start_ns
                .unwrap_or_else(|| now_ns() - (args.duration_s * 1e9) as Nanos);
            let mut rng = crate::fixtures::Rng::new(args.seed);
            let reqs = load::poisson(
                &format!("{}-req", args.instance),
                start,
                rate,
                args.duration_s,
                args.bursty,
                &mut rng,
            );
            runs.push(super::traffic(&args.instance, profile, reqs, args.seed));
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
                .unwrap_or_else(|| now_ns() - (w.length_s * 1e9) as Nanos);
            let prefix = format!("{}-req", args.instance);
            let reqs = if text.trim_start().starts_with('{') {
                load::mooncake(&prefix, &text, &w, start)?
            } else {
                load::azure(&prefix, &text, &w, start)?
            };
            runs.push(super::traffic(&args.instance, profile, reqs, args.seed));
        }
        (None, None, None) => {
            return Err(Error::InvalidArgument(
                "say what to simulate: --scenario NAME|all, --rate R, or --replay FILE".into(),
            ));
        }
    }
    let requests: usize = runs.iter().map(|r| r.output.requests.len()).sum();
    let tokens: usize = runs
        .iter()
        .flat_map(|r| &r.output.requests)
        .map(|r| r.tokens.len())
        .sum();
    eprintln!(
        "simulated {requests} requests, {tokens} tokens on {} instances",
        runs.len()
    );
    print_summary(&runs);
    if let Some(path) = &args.truth {
        let json =
            serde_json::to_string_pretty(&truths).map_err(|e| Error::Internal(e.to_string()))?;
        std::fs::write(path, json)
            .map_err(|e| Error::InvalidArgument(format!("cannot write {}: {e}", path.display())))?;
    }
    let batches = deliver::batches(&runs);
    match &args.out {
        Some(path) => deliver::write(path, &batches),
        None => {
            if args.speed.is_nan() || args.speed <= 0.0 {
                return Err(Error::InvalidArgument("--speed must be positive".into()));
            }
            let d = deliver::send(&args.send, batches, args.speed, true).await?;
            eprintln!(
                "sent {} requests and {} iterations in {:.1} s ({:.0} tokens/s); {} rejected",
                d.requests,
                d.iterations,
                d.elapsed.as_secs_f64(),
                d.tokens as f64 / d.elapsed.as_secs_f64().max(1e-3),
                d.rejected
            );
            Ok(())
        }
    }
}

/// Median TTFT and TPOT per instance, so a run can be sanity-checked at a glance.
fn print_summary(runs: &[scenarios::InstanceRun]) {
    for run in runs {
        let mut ttft = Vec::new();
        let mut tpot = Vec::new();
        for r in &run.output.requests {
            let m = app::analysis::metrics::request_metrics(r);
            ttft.extend(m.ttft_ns);
            tpot.extend(m.tpot_ns);
        }
        let median = |v: &mut Vec<Nanos>| {
            v.sort_unstable();
            v.get(v.len() / 2).map_or(f64::NAN, |&x| x as f64 / 1e6)
        };
        let p90 = |v: &Vec<Nanos>| {
            v.get(v.len() * 9 / 10)
                .map_or(f64::NAN, |&x| x as f64 / 1e6)
        };
        let (m_ttft, m_tpot) = (median(&mut ttft), median(&mut tpot));
        eprintln!(
            "  {:<18} {:>6} requests  TTFT p50 {:>8.1} ms  p90 {:>8.1} ms  TPOT p50 {:>6.1} ms  p90 {:>6.1} ms",
            run.resource.instance_id,
            run.output.requests.len(),
            m_ttft,
            p90(&ttft),
            m_tpot,
            p90(&tpot)
        );
    }
}

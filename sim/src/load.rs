//! Arrival sources: Poisson (optionally bursty) synthetic traffic, and replay of real traces —
//! Azure LLM 2023 (CSV) and Mooncake FAST'25 (JSONL with prefix-block hashes).

use std::collections::HashSet;

use tokenscope_core::model::Nanos;

use crate::Rng;
use crate::engine::SimRequest;
use crate::{Error, Result};

/// Mooncake hashes prompts in 512-token blocks; a block seen before is a prefix-cache hit.
const MOONCAKE_BLOCK_TOKENS: u32 = 512;

/// Poisson arrivals at `rate` per second for `duration_s`; with `bursty`, the rate alternates
/// between 3× and ⅓× every ten seconds. Prompts 100–4,000 tokens, outputs 20–600.
pub fn poisson(
    prefix: &str,
    start: Nanos,
    rate: f64,
    duration_s: f64,
    bursty: bool,
    rng: &mut Rng,
) -> Vec<SimRequest> {
    let mut out = Vec::new();
    let mut t = 0.0f64;
    while t < duration_s && rate > 0.0 {
        let factor = if bursty && ((t / 10.0) as u64).is_multiple_of(2) {
            3.0
        } else if bursty {
            1.0 / 3.0
        } else {
            1.0
        };
        let u = (rng.below(1_000_000) as f64 + 0.5) / 1_000_000.0;
        t += -u.ln() / (rate * factor);
        if t >= duration_s {
            break;
        }
        let arrival = start + (t * 1e9) as Nanos;
        out.push(SimRequest::new(
            format!("{prefix}-{:06}", out.len()),
            arrival,
            100 + rng.below(3900) as u32,
            20 + rng.below(580) as u32,
        ));
    }
    out
}

/// A window of a trace, replayed from `start` with the trace's own spacing. (How fast it is
/// delivered is the sender's business: see `deliver::send`.)
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub from_s: f64,
    pub length_s: f64,
}

fn window_row(w: &Window, t: f64, start: Nanos) -> Option<Nanos> {
    (t >= w.from_s && t < w.from_s + w.length_s).then(|| start + ((t - w.from_s) * 1e9) as Nanos)
}

/// Seconds since midnight of an Azure `TIMESTAMP` ("2023-11-16 18:15:46.6805900").
fn azure_seconds(ts: &str) -> Option<f64> {
    let time = ts.split_whitespace().nth(1)?;
    let mut parts = time.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}

/// Azure LLM inference trace CSV: `TIMESTAMP,ContextTokens,GeneratedTokens`.
pub fn azure(prefix: &str, csv: &str, w: &Window, start: Nanos) -> Result<Vec<SimRequest>> {
    let mut out = Vec::new();
    let mut first = None;
    for (n, line) in csv.lines().enumerate().skip(1) {
        let bad = || {
            Error::InvalidArgument(format!(
                "azure trace line {}: expected TIMESTAMP,ContextTokens,GeneratedTokens",
                n + 1
            ))
        };
        let mut cols = line.split(',');
        let t = cols.next().and_then(azure_seconds).ok_or_else(bad)?;
        let prompt: u32 = cols
            .next()
            .and_then(|c| c.trim().parse().ok())
            .ok_or_else(bad)?;
        let output: u32 = cols
            .next()
            .and_then(|c| c.trim().parse().ok())
            .ok_or_else(bad)?;
        let t0 = *first.get_or_insert(t);
        if let Some(arrival) = window_row(w, t - t0, start) {
            out.push(SimRequest::new(
                format!("{prefix}-{:06}", out.len()),
                arrival,
                prompt.max(1),
                output.max(1),
            ));
        }
    }
    Ok(out)
}

/// One line of a Mooncake trace (FAST'25 "Mooncake: A KVCache-centric Disaggregated
/// Architecture for LLM Serving", `mooncake_trace.jsonl`): when it arrived, its prompt and answer
/// lengths, and the hashes of its prompt's 512-token blocks (equal hashes, equal prefixes).
#[derive(serde::Deserialize)]
struct MooncakeLine {
    /// Milliseconds from the trace's start.
    timestamp: u64,
    input_length: u32,
    output_length: u32,
    #[serde(default)]
    hash_ids: Vec<u64>,
}

/// Mooncake trace JSONL (`MooncakeLine` per line).
pub fn mooncake(prefix: &str, jsonl: &str, w: &Window, start: Nanos) -> Result<Vec<SimRequest>> {
    let mut out = Vec::new();
    let mut seen: HashSet<u64> = HashSet::new();
    for (n, line) in jsonl
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: MooncakeLine = serde_json::from_str(line)
            .map_err(|e| Error::InvalidArgument(format!("mooncake trace line {}: {e}", n + 1)))?;
        // The prefix cache hits the leading blocks seen before.
        let hits = v.hash_ids.iter().take_while(|h| seen.contains(h)).count() as u32;
        seen.extend(v.hash_ids);
        if let Some(arrival) = window_row(w, v.timestamp as f64 / 1000.0, start) {
            let prompt = v.input_length;
            out.push(SimRequest {
                cached_tokens: (hits * MOONCAKE_BLOCK_TOKENS).min(prompt.saturating_sub(1)),
                ..SimRequest::new(
                    format!("{prefix}-{:06}", out.len()),
                    arrival,
                    prompt.max(1),
                    v.output_length.max(1),
                )
            });
        }
    }
    Ok(out)
}

/// The bundled five-minute slice of the Azure conversation trace.
pub const AZURE_CONV_5MIN: &str = include_str!("../data/azure_conv_5min.csv");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn azure_slice_replays_in_its_window() {
        let w = Window {
            from_s: 30.0,
            length_s: 60.0,
        };
        let reqs = azure("az", AZURE_CONV_5MIN, &w, 0).unwrap();
        assert!(reqs.len() > 100, "{}", reqs.len());
        assert!(
            reqs.iter().all(|r| r.arrival_ns < 60_000_000_000),
            "the window's minute"
        );
        assert!(
            reqs.iter()
                .all(|r| r.prompt_tokens > 0 && r.output_tokens > 0)
        );
    }

    #[test]
    fn mooncake_prefix_blocks_become_cache_hits() {
        let lines = "{\"timestamp\": 0, \"input_length\": 2000, \"output_length\": 5, \"hash_ids\": [1, 2, 3, 4]}\n\
                     {\"timestamp\": 10, \"input_length\": 3000, \"output_length\": 5, \"hash_ids\": [1, 2, 9, 10, 11, 12]}";
        let w = Window {
            from_s: 0.0,
            length_s: 1.0,
        };
        let reqs = mooncake("mc", lines, &w, 0).unwrap();
        assert_eq!(reqs[0].cached_tokens, 0);
        assert_eq!(reqs[1].cached_tokens, 1024);
        assert!(mooncake("mc", "{\"timestamp\": 1}", &w, 0).is_err());
    }

    #[test]
    fn poisson_rate_is_about_right() {
        let reqs = poisson("p", 0, 20.0, 100.0, false, &mut Rng::new(3));
        assert!((1800..2200).contains(&reqs.len()), "{}", reqs.len());
    }
}

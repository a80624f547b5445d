//! The prompt as a strip of KV blocks: what the prefix cache served (by tier, when the engine
//! said) and what the engine computed, with the time computing it took.

use leptos::prelude::*;

use crate::api::{RequestDetail, StageKind};
use crate::ui::format::{duration_ms, thousands};

/// Tokens per block when the engine did not say (vLLM's and SGLang's default page of 16).
const DEFAULT_BLOCK: u32 = 16;

/// The strip, when the prefix cache served part of the prompt (or the engine reported its
/// cache at all); None for a prompt computed whole with nothing said about a cache.
pub fn strip(d: &RequestDetail) -> Option<impl IntoView + use<>> {
    let prompt = d.summary.prompt_tokens;
    let cache = d.served.prefix_cache.as_ref();
    if prompt == 0 || (d.cached_tokens == 0 && cache.is_none()) {
        return None;
    }
    let cached = d.cached_tokens.min(prompt);
    // By tier when the engine said; the tiers never add up to more than what was cached.
    let mut parts: Vec<(&str, &str, u32)> = match cache {
        Some(c) if c.gpu_tokens + c.cpu_tokens + c.external_tokens > 0 => vec![
            ("gpu", "GPU cache", c.gpu_tokens),
            ("cpu", "CPU cache", c.cpu_tokens),
            ("external", "external cache", c.external_tokens),
        ],
        _ => vec![("cached", "cache", cached)],
    };
    let mut left = cached;
    for p in &mut parts {
        p.2 = p.2.min(left);
        left -= p.2;
    }
    parts.push(("computed", "computed", prompt - cached));
    parts.retain(|p| p.2 > 0);
    let computed_ms = computed_ms(d);
    let block = cache.map_or(DEFAULT_BLOCK, |c| c.block_size.max(1));
    let blocks = prompt.div_ceil(block);
    let segments = parts
        .iter()
        .map(|&(tier, name, n)| {
            let style = format!("flex-grow:{n}");
            let title = format!("{name}: {} tokens", thousands(n.into()));
            view! { <span class=format!("seg {tier}") data-tier=tier style=style title=title></span> }
        })
        .collect_view();
    let legend = parts
        .iter()
        .map(|&(tier, name, n)| {
            let took = if tier == "computed" && computed_ms > 0.0 {
                format!(" in {}", duration_ms(computed_ms))
            } else {
                String::new()
            };
            view! { <span class="part"><i class=format!("sw {tier}")></i>{format!("{name} {}{took}", thousands(n.into()))}</span> }
        })
        .collect_view();
    // Block edges drawn over the strip, one every `block` tokens (too fine to draw past 400).
    let edges = format!("--blocks:{}", blocks.min(400));
    Some(view! {
        <div class="prompt-strip" data-testid="prompt-strip">
            <div class="strip" style=edges>{segments}</div>
            <p class="muted">{format!("Prompt: {} tokens in {} blocks of {block} · ", thousands(prompt.into()), thousands(blocks.into()))}{legend}</p>
        </div>
    })
}

/// How long computing the prompt took: its prefill chunks, or without them, from the end of its
/// wait in the queue to its first token.
fn computed_ms(d: &RequestDetail) -> f64 {
    let of = |kind: StageKind| d.stages.iter().filter(move |s| s.kind == kind);
    let chunks: f64 = of(StageKind::Prefill)
        .map(|s| (s.end_ns - s.start_ns) as f64 / 1e6)
        .sum();
    if chunks > 0.0 {
        return chunks;
    }
    let scheduled = of(StageKind::Queued)
        .map(|s| s.end_ns)
        .next()
        .unwrap_or(d.summary.arrival_ns);
    of(StageKind::Decode)
        .map(|s| (s.start_ns - scheduled).max(0) as f64 / 1e6)
        .next()
        .unwrap_or(0.0)
}

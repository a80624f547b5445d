//! The prompt families of a window: the store's chains grouped by `analysis::fingerprint`, and
//! for each listed miss whose blocks had been computed on its instance, what that instance
//! computed since (whose allocations pushed them out).

use tokenscope_core::analysis::fingerprint::{self, Fingerprints, MissWhy, Pressure, PromptRow};

use crate::error::Result;
use crate::store::{RequestFilter, Store};

/// The latest this many requests of the window are read (those with a fingerprint grouped).
const MAX_ROWS: i64 = 50_000;
/// Families listed, largest first.
const MAX_FAMILIES: usize = 40;
/// The evicted misses whose pressure is looked up, in the listed order (one query each).
const MAX_PRESSURE_LOOKUPS: usize = 40;

pub async fn fingerprints(store: &Store, f: &RequestFilter) -> Result<Fingerprints> {
    let (rows, truncated) = store.fingerprint_rows(f, MAX_ROWS).await?;
    let rows: Vec<PromptRow> = rows
        .into_iter()
        .map(|r| PromptRow {
            prefilled_ns: r.ttft_ns.map(|t| r.arrival_ns + t),
            request_id: r.request_id,
            instance: r.instance,
            arrival_ns: r.arrival_ns,
            ttft_ns: r.ttft_ns,
            cached_tokens: r.cached_tokens,
            block_size: r.prefix_cache.block_size,
            chain: r.prefix_cache.block_hashes,
        })
        .collect();
    let from = f
        .from_ns
        .or(rows.first().map(|r| r.arrival_ns))
        .unwrap_or(0);
    let to = f
        .to_ns
        .or(rows.last().map(|r| r.arrival_ns + 1))
        .unwrap_or(from + 1);
    let mut fp = fingerprint::describe(&rows, from, to, truncated);
    fp.families.truncate(MAX_FAMILIES);
    let evicted = fp
        .families
        .iter_mut()
        .flat_map(|f| &mut f.misses)
        .filter_map(|m| match &mut m.why {
            MissWhy::Evicted { last_ns, since, .. } => {
                Some((m.instance.clone(), *last_ns, m.arrival_ns, since))
            }
            _ => None,
        })
        .take(MAX_PRESSURE_LOOKUPS);
    for (instance, last_ns, at, since) in evicted {
        let c = store.computed_prompts(&instance, last_ns, at, 3).await?;
        *since = Some(Pressure {
            tokens: c.tokens,
            requests: c.requests,
            top: c.top,
        });
    }
    Ok(fp)
}

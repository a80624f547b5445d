//! Prompt families: requests grouped by the block-hash chains of their prompts. A chain's hash
//! at depth d names the whole prefix up to d, so the chains of a window form a trie; a family is
//! a node of it that two or more requests pass through and where they part (some end, or they
//! continue differently) — the trie with its single-child runs compressed. A system prompt is a
//! family, a RAG template after it a family nested in it, each conversation another.
//!
//! For each family: how often its prefix came from the cache, the TTFT with and without, and for
//! each request that computed the prefix although an earlier one had it, what the data says
//! about why — its instance had never computed it (a cold instance), an earlier request was still
//! computing it, or it had and the blocks were gone (evicted: by whose prefills, the query layer
//! adds from the requests computed on that instance since).

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::model::Nanos;

/// Fewer requests than this through a node is no family.
pub const MIN_REQUESTS: usize = 2;
/// At most this many warm misses are listed per family (the count has them all).
pub const MAX_MISSES: usize = 20;
/// A family's hits and misses over the window, in this many cells.
pub const CELLS: usize = 24;

/// A node of the compressed trie: the prefix ending at `depth` (blocks) with hash `hash`, and
/// the requests (indices into the chains given) whose prompt starts with it.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub hash: u64,
    pub depth: usize,
    /// The family it is nested in (an index into the same list).
    pub parent: Option<usize>,
    pub members: Vec<usize>,
}

/// The families of `chains` (each a prompt's block hashes, from the first block), largest first
/// and, at equal size, shallowest first.
pub fn families(chains: &[&[u64]]) -> Vec<Node> {
    // How many chains pass through each node, keyed by (depth, hash) folded into one u64 (one
    // key to hash instead of a pair). Two nodes share a key only if their hashes differ by exactly
    // the XOR of two depths' multipliers: for an engine's 64-bit block hashes, 2^-64 a pair.
    let key = |d: usize, h: u64| h ^ (d as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut through: foldhash::HashMap<u64, u32> = foldhash::HashMap::default();
    through.reserve(chains.iter().map(|c| c.len()).sum::<usize>() / 4);
    for chain in chains {
        for (d, &h) in chain.iter().enumerate() {
            *through.entry(key(d, h)).or_default() += 1;
        }
    }
    let mut nodes: Vec<Node> = Vec::new();
    let mut index: foldhash::HashMap<u64, usize> = foldhash::HashMap::default();
    let mut counts: Vec<u32> = Vec::new();
    for (i, chain) in chains.iter().enumerate() {
        counts.clear();
        counts.extend(chain.iter().enumerate().map(|(d, &h)| through[&key(d, h)]));
        let mut parent = None;
        for (d, &h) in chain.iter().enumerate() {
            let n = counts[d];
            // Everyone here goes on to the same next block: not a place where prompts part.
            let runs_on = counts.get(d + 1) == Some(&n);
            if (n as usize) < MIN_REQUESTS || runs_on {
                continue;
            }
            let k = *index.entry(key(d, h)).or_insert_with(|| {
                nodes.push(Node {
                    hash: h,
                    depth: d + 1,
                    parent,
                    members: Vec::new(),
                });
                nodes.len() - 1
            });
            nodes[k].members.push(i);
            parent = Some(k);
        }
    }
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by_key(|&k| (std::cmp::Reverse(nodes[k].members.len()), nodes[k].depth));
    let mut new_index = vec![0; nodes.len()];
    for (new, &old) in order.iter().enumerate() {
        new_index[old] = new;
    }
    order
        .iter()
        .map(|&k| Node {
            parent: nodes[k].parent.map(|p| new_index[p]),
            ..nodes[k].clone()
        })
        .collect()
}

/// What the store says of one request with a fingerprint.
#[derive(Clone, Debug)]
pub struct PromptRow {
    pub request_id: String,
    pub instance: String,
    pub arrival_ns: Nanos,
    /// When its prompt had been computed (its first token), if it was.
    pub prefilled_ns: Option<Nanos>,
    pub ttft_ns: Option<Nanos>,
    pub cached_tokens: u32,
    pub block_size: u32,
    pub chain: Vec<u64>,
}

/// The prompt families of a window (`GET /api/v1/fingerprints`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Fingerprints {
    pub from_ns: Nanos,
    pub to_ns: Nanos,
    /// Requests with a fingerprint read, and whether the window had more (the latest are read).
    pub requests: u64,
    pub truncated: bool,
    pub families: Vec<Family>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Family {
    /// The chain's hash where the family's prefix ends, 16 hex digits: the explorer's
    /// `fingerprint` filter.
    pub fingerprint: String,
    /// The family it is nested in.
    pub parent: Option<String>,
    pub blocks: u32,
    pub tokens: u32,
    pub requests: u64,
    /// Requests whose whole prefix came from the cache.
    pub hits: u64,
    pub instances: Vec<String>,
    /// Median TTFT of the hits and of the others, in ms.
    pub ttft_hit_ms: Option<f64>,
    pub ttft_miss_ms: Option<f64>,
    /// Its first and last request's arrival, and its hits and misses in [`CELLS`] equal cells of
    /// that span (a family seen for a minute of a day still shows how its hits went).
    pub first_ns: Nanos,
    pub last_ns: Nanos,
    pub cells: Vec<HitCell>,
    /// Misses after the family had been computed somewhere: how many, and the first few.
    pub warm_misses: u64,
    pub misses: Vec<WarmMiss>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HitCell {
    pub hits: u32,
    pub misses: u32,
}

/// A request that computed its family's prefix although an earlier request had it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WarmMiss {
    pub request_id: String,
    pub instance: String,
    pub arrival_ns: Nanos,
    pub cached_tokens: u32,
    pub why: MissWhy,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MissWhy {
    /// No earlier request of the family had computed it on this instance; `warm_on` had.
    ColdInstance { warm_on: String },
    /// An earlier request on this instance was still computing it.
    InFlight { earlier: String },
    /// It had been computed here (last by `last_by`, done at `last_ns`), and was gone: evicted.
    /// `since`: what the instance computed in between (whose allocations pushed it out).
    Evicted {
        last_by: String,
        last_ns: Nanos,
        since: Option<Pressure>,
    },
}

/// Prompt tokens an instance computed in an interval, and the requests that computed the most.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pressure {
    pub tokens: u64,
    pub requests: u64,
    pub top: Vec<(String, u64)>,
}

/// The families of `rows` (in arrival order) over [from, to), with every statistic but the
/// evictions' pressure (the query layer's, from the store).
pub fn describe(rows: &[PromptRow], from_ns: Nanos, to_ns: Nanos, truncated: bool) -> Fingerprints {
    let chains: Vec<&[u64]> = rows.iter().map(|r| &r.chain[..]).collect();
    let nodes = families(&chains);
    let families = nodes
        .iter()
        .map(|n| {
            let parent = n.parent.map(|p| hex(nodes[p].hash));
            family(rows, n, parent)
        })
        .collect();
    Fingerprints {
        from_ns,
        to_ns,
        requests: rows.len() as u64,
        truncated,
        families,
    }
}

fn hex(h: u64) -> String {
    format!("{h:016x}")
}

fn family(rows: &[PromptRow], n: &Node, parent: Option<String>) -> Family {
    let members: Vec<&PromptRow> = n.members.iter().map(|&i| &rows[i]).collect();
    let from_ns = members.iter().map(|r| r.arrival_ns).min().unwrap_or(0);
    let to_ns = members.iter().map(|r| r.arrival_ns).max().unwrap_or(0) + 1;
    let hit = |r: &PromptRow| r.cached_tokens as usize >= n.depth * r.block_size.max(1) as usize;
    let mut cells = vec![HitCell::default(); CELLS];
    let span = (to_ns - from_ns).max(1) as i128;
    let (mut ttft_hit, mut ttft_miss) = (Vec::new(), Vec::new());
    let mut instances: Vec<String> = Vec::new();
    for r in &members {
        let cell = (((r.arrival_ns - from_ns) as i128 * CELLS as i128) / span)
            .clamp(0, CELLS as i128 - 1) as usize;
        if hit(r) {
            cells[cell].hits += 1;
            ttft_hit.extend(r.ttft_ns);
        } else {
            cells[cell].misses += 1;
            ttft_miss.extend(r.ttft_ns);
        }
        if !instances.contains(&r.instance) {
            instances.push(r.instance.clone());
        }
    }
    instances.sort();
    let (warm_misses, misses) = warm_misses(&members, hit);
    let block_size = members.first().map_or(16, |r| r.block_size);
    Family {
        fingerprint: hex(n.hash),
        parent,
        blocks: n.depth as u32,
        tokens: n.depth as u32 * block_size,
        requests: members.len() as u64,
        hits: cells.iter().map(|c| u64::from(c.hits)).sum(),
        instances,
        ttft_hit_ms: median_ms(&mut ttft_hit),
        ttft_miss_ms: median_ms(&mut ttft_miss),
        first_ns: from_ns,
        last_ns: to_ns - 1,
        cells,
        warm_misses,
        misses,
    }
}

/// The misses of a family after an earlier request had its prefix — how many, and the first
/// [`MAX_MISSES`] with why — in one pass over its members in arrival order (a family whose every
/// request misses, on an engine without prefix caching, is as cheap as one that hits).
fn warm_misses(members: &[&PromptRow], hit: impl Fn(&PromptRow) -> bool) -> (u64, Vec<WarmMiss>) {
    // Per instance: when each earlier member's prompt was computed, and the latest to arrive.
    let mut done: HashMap<&str, BTreeSet<(Nanos, usize)>> = HashMap::new();
    let mut latest: HashMap<&str, usize> = HashMap::new();
    // The earliest any earlier member's prompt was computed, anywhere.
    let mut first_done: Option<(Nanos, usize)> = None;
    let (mut count, mut listed) = (0u64, Vec::new());
    for (k, r) in members.iter().enumerate() {
        let here = r.instance.as_str();
        if !hit(r) {
            let evicted = done
                .get(here)
                .and_then(|d| d.range(..=(r.arrival_ns, usize::MAX)).next_back())
                .map(|&(at, m)| MissWhy::Evicted {
                    last_by: members[m].request_id.clone(),
                    last_ns: at,
                    since: None,
                });
            let why = evicted
                .or_else(|| {
                    latest.get(here).map(|&m| MissWhy::InFlight {
                        earlier: members[m].request_id.clone(),
                    })
                })
                .or_else(|| {
                    first_done
                        .filter(|&(at, _)| at <= r.arrival_ns)
                        .map(|(_, m)| MissWhy::ColdInstance {
                            warm_on: members[m].instance.clone(),
                        })
                });
            if let Some(why) = why {
                count += 1;
                if listed.len() < MAX_MISSES {
                    listed.push(WarmMiss {
                        request_id: r.request_id.clone(),
                        instance: r.instance.clone(),
                        arrival_ns: r.arrival_ns,
                        cached_tokens: r.cached_tokens,
                        why,
                    });
                }
            }
        }
        latest.insert(here, k);
        if let Some(at) = r.prefilled_ns {
            done.entry(here).or_default().insert((at, k));
            if first_done.is_none_or(|(t, _)| at < t) {
                first_done = Some((at, k));
            }
        }
    }
    (count, listed)
}

fn median_ms(v: &mut [Nanos]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[v.len() / 2] as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chain of a prompt whose blocks hold `content`: each hash covers its block and all
    /// before it (a stand-in for the engine's hash).
    fn chain(content: &[u64]) -> Vec<u64> {
        let mut h = 17u64;
        content
            .iter()
            .map(|c| {
                h = h.wrapping_mul(1_000_003).wrapping_add(*c);
                h
            })
            .collect()
    }

    fn shape(nodes: &[Node]) -> Vec<(usize, Option<usize>, Vec<usize>)> {
        nodes
            .iter()
            .map(|n| (n.depth, n.parent.map(|p| nodes[p].depth), n.members.clone()))
            .collect()
    }

    #[test]
    fn families_are_where_chains_part_at_any_depth() {
        // A system prompt S (3 blocks); a template T after it (2 more); conversations.
        let s = [1, 2, 3];
        let st = [1, 2, 3, 4, 5];
        let prompts: Vec<Vec<u64>> = vec![
            [&s[..], &[10]].concat(),          // 0: S + own question
            [&s[..], &[11, 12]].concat(),      // 1: S + own question
            [&st[..], &[20]].concat(),         // 2: S T + own
            [&st[..], &[21, 22, 23]].concat(), // 3: S T + own
            st.to_vec(),                       // 4: S T exactly (ends where the family ends)
            vec![9, 8],                        // 5: shares nothing
            vec![9, 8, 7, 6],                  // 6: a second turn of 5's conversation
            vec![1, 2],                        // 7: shorter than S: shares S's first two blocks
        ];
        let chains: Vec<Vec<u64>> = prompts.iter().map(|p| chain(p)).collect();
        let refs: Vec<&[u64]> = chains.iter().map(|c| &c[..]).collect();
        let got = shape(&families(&refs));
        assert_eq!(
            got,
            vec![
                // The first two blocks: everyone starting with 1, 2 (7 ends there).
                (2, None, vec![0, 1, 2, 3, 4, 7]),
                // S: the parting point of the question-only and the template prompts.
                (3, Some(2), vec![0, 1, 2, 3, 4]),
                // S T: three requests, one of which ends there.
                (5, Some(3), vec![2, 3, 4]),
                // The conversation: turn two extends turn one's whole chain.
                (2, None, vec![5, 6]),
            ]
        );
    }

    #[test]
    fn identical_prompts_are_one_family_and_singletons_none() {
        let a = chain(&[1, 2, 3]);
        let b = chain(&[4, 5]);
        let refs: Vec<&[u64]> = vec![&a, &a, &b, &[]];
        let got = families(&refs);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].depth, &got[0].members), (3, &vec![0, 1]));
    }

    fn row(id: &str, instance: &str, at_s: i64, cached: u32) -> PromptRow {
        let s = 1_000_000_000;
        PromptRow {
            request_id: id.into(),
            instance: instance.into(),
            arrival_ns: at_s * s,
            prefilled_ns: Some(at_s * s + s / 2),
            ttft_ns: Some(if cached > 0 { s / 10 } else { s / 2 }),
            cached_tokens: cached,
            block_size: 16,
            chain: chain(&[1, 2, id.len() as u64 * 1000 + at_s as u64]),
        }
    }

    #[test]
    fn a_warm_family_s_misses_say_why() {
        let rows = vec![
            row("first", "a", 0, 0),  // the family's first: no warm miss
            row("racing", "a", 0, 0), // arrived with it, before it was computed (same second, later)
            row("hit", "a", 2, 32),
            row("new-replica", "b", 3, 0), // b never computed it; a had
            row("gone", "a", 10, 0),       // a had, last at 2.5 s
        ];
        let mut rows = rows;
        rows[1].arrival_ns += 1;
        let fp = describe(&rows, 0, 12_000_000_000, false);
        assert_eq!(fp.families.len(), 1);
        let f = &fp.families[0];
        assert_eq!((f.requests, f.hits, f.blocks, f.tokens), (5, 1, 2, 32));
        assert_eq!((f.ttft_hit_ms, f.ttft_miss_ms), (Some(100.0), Some(500.0)));
        let whys: Vec<(&str, &MissWhy)> = f
            .misses
            .iter()
            .map(|m| (m.request_id.as_str(), &m.why))
            .collect();
        assert_eq!(
            whys,
            vec![
                (
                    "racing",
                    &MissWhy::InFlight {
                        earlier: "first".into()
                    }
                ),
                (
                    "new-replica",
                    &MissWhy::ColdInstance {
                        warm_on: "a".into()
                    }
                ),
                (
                    "gone",
                    &MissWhy::Evicted {
                        last_by: "hit".into(),
                        last_ns: 2_500_000_000,
                        since: None
                    }
                ),
            ]
        );
        assert_eq!(f.cells.iter().map(|c| c.misses).sum::<u32>(), 4);
    }
}

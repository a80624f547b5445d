//! The engine's prefix cache: a prompt's full KV blocks named by a chain of hashes (each covers
//! its block and every block before it, as vLLM's and SGLang's do), looked up when a request is
//! admitted and stored when its prefill completes, the least recently used evicted beyond a
//! capacity — and a log of who evicted what, the truth a "why did it miss" answer is checked
//! against.
//!
//! Simplification: blocks in use are not pinned (a real engine cannot evict a block a running
//! request holds); scenarios that plant evictions do it while the family is idle, where the two
//! agree.

use std::collections::{BTreeMap, HashMap};

use tokenscope_core::model::Nanos;

/// The chain of a prompt whose full blocks hold `contents` (one content id per block: equal ids
/// at equal positions after equal prefixes are equal tokens).
pub fn chain(contents: &[u64]) -> Vec<u64> {
    let mut h = 0x6a09_e667_f3bc_c908u64;
    contents
        .iter()
        .map(|&c| {
            h = mix(h ^ mix(c));
            h
        })
        .collect()
}

/// SplitMix64's finaliser: a fixed, well-spread 64-bit mix.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One block dropped to make room: when, which, and whose stored prefill pushed it out.
#[derive(Clone, Debug, PartialEq)]
pub struct Eviction {
    pub at_ns: Nanos,
    pub hash: u64,
    pub by: String,
}

/// An LRU set of block hashes holding at most `capacity`.
#[derive(Default)]
pub struct PrefixLru {
    capacity: usize,
    tick: u64,
    last_used: HashMap<u64, u64>,
    by_age: BTreeMap<u64, u64>,
    pub evictions: Vec<Eviction>,
}

impl PrefixLru {
    pub fn new(capacity: u32) -> Self {
        Self {
            capacity: capacity as usize,
            ..Self::default()
        }
    }

    /// How many leading blocks of `chain` are cached.
    pub fn hits(&self, chain: &[u64]) -> usize {
        chain
            .iter()
            .take_while(|h| self.last_used.contains_key(h))
            .count()
    }

    /// Stores (or refreshes) every block of `chain`, computed for request `by`, evicting the
    /// least recently used beyond the capacity. The tail is touched first so that a chain's head
    /// outlives its tail, as in vLLM's free-block queue.
    pub fn store(&mut self, chain: &[u64], by: &str, now: Nanos) {
        for &h in chain.iter().rev() {
            self.tick += 1;
            if let Some(old) = self.last_used.insert(h, self.tick) {
                self.by_age.remove(&old);
            }
            self.by_age.insert(self.tick, h);
        }
        while self.last_used.len() > self.capacity {
            let Some((_, h)) = self.by_age.pop_first() else {
                break;
            };
            self.last_used.remove(&h);
            self.evictions.push(Eviction {
                at_ns: now,
                hash: h,
                by: by.to_string(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_share_exactly_their_common_prefix() {
        let a = chain(&[1, 2, 3, 4]);
        let b = chain(&[1, 2, 9, 4]);
        assert_eq!(a[..2], b[..2]);
        assert_ne!(a[2], b[2]);
        // Equal content after a different prefix is a different block.
        assert_ne!(a[3], b[3]);
    }

    #[test]
    fn the_least_recently_used_go_first_and_the_evictor_is_named() {
        let mut lru = PrefixLru::new(4);
        let family = chain(&[1, 2]);
        lru.store(&family, "warm", 0);
        assert_eq!(lru.hits(&chain(&[1, 2, 3])), 2);
        lru.store(&chain(&[7, 8, 9]), "storm", 5);
        // Five blocks for four places: the family's tail went first, its head stays.
        assert_eq!(lru.hits(&family), 1);
        assert_eq!(
            lru.evictions,
            vec![Eviction {
                at_ns: 5,
                hash: family[1],
                by: "storm".into()
            }]
        );
    }
}

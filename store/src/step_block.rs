//! An instance's engine steps stored many to a row (`iteration_blocks`): the steps of one batch
//! that start in the same second, as columns.
//!
//! A row per step cost Postgres about 2.5 µs whatever its bytes (the heap tuple and its primary
//! key entry), which at a step per 16 tokens was a third of its ingest work (docs/BENCHMARKS.md,
//! 2026-12-02). A block of a second's steps is one row and a few TOAST chunks.
//!
//! Layout, big-endian so that SQL can write it (`int8send`; the migration that made the table
//! converted the stored steps this way):
//!
//! ```text
//! version u8: 1 = the body as is, 2 = the body in one zstd frame (what the writer stores)
//! body: steps u32, then one column after another, `steps` values each:
//!       iteration_id i64, start_ns i64, end_ns i64, running i32, waiting i32,
//!       kv_cache_usage f32, batch_size i32, prefill_tokens i32, decode_tokens i32,
//!       batch length i32; then the batches (batch_block.rs) one after another
//! ```
//!
//! Readers select blocks by `second_ns` (every step in a block starts in that second) and keep
//! the steps in their range.

use std::ops::Range;

use bytes::Bytes;

use tokenscope_core::model::{Iteration, Nanos, Phase};

use super::bytes::Reader;
use super::token_block::{compress, inflate};
use crate::error::{Error, Result};

/// Steps are blocked by the second their start falls in: it divides a day, so a block never
/// straddles a daily partition.
pub const SECOND_NS: Nanos = 1_000_000_000;

const RAW: u8 = 1;
const ZSTD: u8 = 2;

/// Fixed bytes per step besides its batch: three 64-bit columns and seven 32-bit ones (the last
/// is the batch's length).
const STEP_BYTES: usize = 3 * 8 + 7 * 4;

/// A step's columns as stored (signed, as Postgres's integers are).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    pub iteration_id: i64,
    pub start_ns: Nanos,
    pub end_ns: Nanos,
    pub running: i32,
    pub waiting: i32,
    pub kv_cache_usage: f32,
    pub batch_size: i32,
    pub prefill_tokens: i32,
    pub decode_tokens: i32,
}

impl Step {
    /// An iteration's columns; counts past `i32::MAX` are stored as `i32::MAX`.
    pub fn of(it: &Iteration) -> Self {
        let int = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
        Step {
            iteration_id: it.iteration_id as i64,
            start_ns: it.start_ns,
            end_ns: it.end_ns,
            running: int(it.running),
            waiting: int(it.waiting),
            kv_cache_usage: it.kv_cache_usage,
            batch_size: int(u32::try_from(it.batch.len()).unwrap_or(u32::MAX)),
            prefill_tokens: int(it.tokens_in(Phase::Prefill)),
            decode_tokens: int(it.decoded()),
        }
    }
}

/// The second a step starting at `start_ns` is stored under.
pub fn second_of(start_ns: Nanos) -> Nanos {
    start_ns.div_euclid(SECOND_NS) * SECOND_NS
}

/// Encodes steps with their encoded batches (`batches[k]` is `steps[k]`'s).
pub fn encode(steps: &[Step], batches: &[Vec<u8>]) -> Vec<u8> {
    debug_assert_eq!(steps.len(), batches.len());
    let batch_bytes: usize = batches.iter().map(Vec::len).sum();
    let mut body = Vec::with_capacity(4 + steps.len() * STEP_BYTES + batch_bytes);
    body.extend_from_slice(&(steps.len() as u32).to_be_bytes());
    let mut column = |f: &dyn Fn(&Step) -> [u8; 8], width: usize| {
        for s in steps {
            body.extend_from_slice(&f(s)[8 - width..]);
        }
    };
    let wide = |v: i64| v.to_be_bytes();
    let narrow = |v: i32| (i64::from(v) as u64 & 0xFFFF_FFFF).to_be_bytes();
    column(&|s| wide(s.iteration_id), 8);
    column(&|s| wide(s.start_ns), 8);
    column(&|s| wide(s.end_ns), 8);
    column(&|s| narrow(s.running), 4);
    column(&|s| narrow(s.waiting), 4);
    column(&|s| u64::from(s.kv_cache_usage.to_bits()).to_be_bytes(), 4);
    column(&|s| narrow(s.batch_size), 4);
    column(&|s| narrow(s.prefill_tokens), 4);
    column(&|s| narrow(s.decode_tokens), 4);
    for b in batches {
        body.extend_from_slice(&(b.len() as u32).to_be_bytes());
    }
    for b in batches {
        body.extend_from_slice(b);
    }
    let mut block = vec![ZSTD];
    block.extend_from_slice(&compress(&body));
    block
}

/// A decoded block: its steps, and each one's encoded batch as a range of `batches`.
#[derive(Debug, Default)]
pub struct Decoded {
    pub steps: Vec<Step>,
    pub batch_ranges: Vec<Range<usize>>,
    pub batches: Bytes,
}

impl Decoded {
    /// The encoded batch (batch_block.rs) of step `k`.
    pub fn batch(&self, k: usize) -> &[u8] {
        &self.batches[self.batch_ranges[k].clone()]
    }

    /// The same, sharing the block's buffer rather than copying it.
    pub fn batch_bytes(&self, k: usize) -> Bytes {
        self.batches.slice(self.batch_ranges[k].clone())
    }
}

/// Decodes a block, either version.
pub fn decode(block: &[u8]) -> Result<Decoded> {
    let (&version, rest) = block.split_first().ok_or_else(corrupt)?;
    // One buffer owns the body; the batches are a slice of it, never copied again.
    let body = match version {
        RAW => Bytes::copy_from_slice(rest),
        ZSTD => Bytes::from(inflate(rest)?),
        _ => return Err(Error::Internal("step block has an unknown version".into())),
    };
    let mut r = Reader::new(&body, "step block");
    let n = be_u32(r.bytes(4)?) as usize;
    // Checked before anything is allocated: a corrupt count must not reserve gigabytes.
    if n.checked_mul(STEP_BYTES)
        .is_none_or(|need| need > body.len())
    {
        return Err(corrupt());
    }
    let mut wide = || -> Result<Vec<i64>> {
        let bytes = r.bytes(8 * n)?;
        Ok(bytes
            .chunks_exact(8)
            .map(|c| i64::from_be_bytes(c.try_into().expect("8 bytes")))
            .collect())
    };
    let (ids, starts, ends) = (wide()?, wide()?, wide()?);
    let mut narrow =
        || -> Result<Vec<u32>> { Ok(r.bytes(4 * n)?.chunks_exact(4).map(be_u32).collect()) };
    let (running, waiting, kv) = (narrow()?, narrow()?, narrow()?);
    let (batch_size, prefill, decode_tokens) = (narrow()?, narrow()?, narrow()?);
    let lengths = narrow()?;
    let rest = r.rest();
    let batches_at = body.len() - rest.len();
    let mut batch_ranges = Vec::with_capacity(n);
    let mut at = 0usize;
    for len in lengths {
        let end = at.checked_add(len as usize).ok_or_else(corrupt)?;
        batch_ranges.push(at..end);
        at = end;
    }
    if at != rest.len() {
        return Err(corrupt());
    }
    let steps = (0..n)
        .map(|k| Step {
            iteration_id: ids[k],
            start_ns: starts[k],
            end_ns: ends[k],
            running: running[k] as i32,
            waiting: waiting[k] as i32,
            kv_cache_usage: f32::from_bits(kv[k]),
            batch_size: batch_size[k] as i32,
            prefill_tokens: prefill[k] as i32,
            decode_tokens: decode_tokens[k] as i32,
        })
        .collect();
    Ok(Decoded {
        steps,
        batch_ranges,
        batches: body.slice(batches_at..),
    })
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b.try_into().expect("4 bytes"))
}

fn corrupt() -> Error {
    Error::Internal("stored step block is corrupt".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(k: i64) -> Step {
        Step {
            iteration_id: 1_000 + k,
            start_ns: 1_796_022_000_000_000_000 + k * 12_000_000,
            end_ns: 1_796_022_000_000_000_000 + k * 12_000_000 + 11_000_000,
            running: 16,
            waiting: k as i32 % 3,
            kv_cache_usage: 0.25 + k as f32 / 100.0,
            batch_size: 16,
            prefill_tokens: if k % 7 == 0 { 512 } else { 0 },
            decode_tokens: 15,
        }
    }

    #[test]
    fn round_trips() {
        let steps: Vec<Step> = (0..80).map(step).collect();
        let batches: Vec<Vec<u8>> = (0..80).map(|k| vec![k as u8; k % 5]).collect();
        let block = encode(&steps, &batches);
        let back = decode(&block).unwrap();
        assert_eq!(back.steps, steps);
        for (k, b) in batches.iter().enumerate() {
            assert_eq!(back.batch(k), &b[..]);
        }
    }

    #[test]
    fn the_raw_version_is_the_body_as_is() {
        let steps = [step(1), step(2)];
        let batches = [vec![2, 0], vec![]];
        let block = encode(&steps, &batches);
        let body = inflate(&block[1..]).unwrap();
        let mut raw = vec![RAW];
        raw.extend_from_slice(&body);
        // Column by column: the count, then the two ids.
        assert_eq!(&raw[1..5], &2u32.to_be_bytes());
        assert_eq!(&raw[5..13], &1_001i64.to_be_bytes());
        let back = decode(&raw).unwrap();
        assert_eq!(back.steps, steps);
        assert_eq!(back.batch(0), &[2, 0]);
        assert!(back.batch(1).is_empty());
    }

    #[test]
    fn corrupt_blocks_are_errors() {
        let block = encode(&[step(1)], &[vec![1, 2, 3]]);
        let body = inflate(&block[1..]).unwrap();
        for cut in 0..body.len() {
            let mut raw = vec![RAW];
            raw.extend_from_slice(&body[..cut]);
            assert!(decode(&raw).is_err(), "cut at {cut}");
        }
        let mut huge = vec![RAW];
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode(&huge).is_err());
        assert!(decode(&[]).is_err());
        assert!(decode(&[9]).is_err());
    }

    #[test]
    fn seconds_divide_a_day() {
        assert_eq!(super::super::partitions::DAY_NS % SECOND_NS, 0);
        assert_eq!(second_of(2_500_000_000), 2_000_000_000);
    }
}

//! Reading stored engine steps: the blocks of the seconds a time range touches, decoded, and the
//! steps that start in the range.

use std::ops::Range;

use bytes::Bytes;

use tokenscope_core::model::Nanos;

use super::Store;
use super::step_block::{self, Step};
use crate::error::Result;

/// A stored step and its encoded batch (batch_block.rs), a slice of its block's buffer.
pub struct StoredStep {
    pub step: Step,
    pub batch: Bytes,
}

impl Store {
    /// The steps of the instances `ids` that start in `range`, by start time (then id).
    pub async fn steps_in(&self, ids: &[i32], range: Range<Nanos>) -> Result<Vec<StoredStep>> {
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let blocks = sqlx::query_scalar!(
            "SELECT block FROM iteration_blocks
             WHERE instance_id = ANY($1) AND second_ns >= $2 AND second_ns < $3
                   AND last_start_ns >= $4 AND first_start_ns < $3",
            ids,
            step_block::second_of(range.start),
            range.end,
            range.start,
        )
        .fetch_all(&self.pool)
        .await?;
        steps_of_blocks(&blocks, range)
    }

    /// The keys of an instance's step blocks that may hold steps starting in `range`. Blocks are
    /// only ever added (steps stored later for a second already stored make a block of their
    /// own, and a stored step is never stored again), so these keys say what was added to a
    /// range since they were last read.
    pub async fn step_block_keys(
        &self,
        instance_id: i32,
        range: Range<Nanos>,
    ) -> Result<Vec<BlockKey>> {
        if range.is_empty() {
            return Ok(Vec::new());
        }
        Ok(sqlx::query_as!(
            BlockKey,
            "SELECT second_ns, first_start_ns, first_iteration_id FROM iteration_blocks
             WHERE instance_id = $1 AND second_ns >= $2 AND second_ns < $3
                   AND last_start_ns >= $4 AND first_start_ns < $3",
            instance_id,
            step_block::second_of(range.start),
            range.end,
            range.start,
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// The steps of these blocks of an instance that start in `range`, by start time (then id).
    pub async fn steps_of(
        &self,
        instance_id: i32,
        keys: &[BlockKey],
        range: Range<Nanos>,
    ) -> Result<Vec<StoredStep>> {
        let (Some(first), Some(last)) = (
            keys.iter().map(|k| k.second_ns).min(),
            keys.iter().map(|k| k.second_ns).max(),
        ) else {
            return Ok(Vec::new());
        };
        let column = |f: fn(&BlockKey) -> i64| keys.iter().map(f).collect::<Vec<i64>>();
        // The seconds' bounds spelled out: they pick the partitions.
        let blocks = sqlx::query_scalar!(
            "SELECT b.block FROM iteration_blocks b
             JOIN UNNEST($2::bigint[], $3::bigint[], $4::bigint[]) AS k(second_ns, first_start_ns, first_iteration_id)
               ON b.second_ns = k.second_ns AND b.first_start_ns = k.first_start_ns
                  AND b.first_iteration_id = k.first_iteration_id
             WHERE b.instance_id = $1 AND b.second_ns >= $5 AND b.second_ns <= $6",
            instance_id,
            &column(|k| k.second_ns),
            &column(|k| k.first_start_ns),
            &column(|k| k.first_iteration_id),
            first,
            last,
        )
        .fetch_all(&self.pool)
        .await?;
        steps_of_blocks(&blocks, range)
    }
}

/// A stored block of steps by its key (its instance aside).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockKey {
    pub second_ns: Nanos,
    pub first_start_ns: Nanos,
    pub first_iteration_id: i64,
}

/// The blocks' steps that start in `range`, by start time (then id).
fn steps_of_blocks(blocks: &[Vec<u8>], range: Range<Nanos>) -> Result<Vec<StoredStep>> {
    let mut steps = Vec::new();
    for block in blocks {
        let block = step_block::decode(block)?;
        for (k, step) in block.steps.iter().enumerate() {
            if range.contains(&step.start_ns) {
                steps.push(StoredStep {
                    step: *step,
                    batch: block.batch_bytes(k),
                });
            }
        }
    }
    steps.sort_by_key(|s| (s.step.start_ns, s.step.iteration_id));
    Ok(steps)
}

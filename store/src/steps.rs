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
        let mut steps = Vec::new();
        for block in blocks {
            let block = step_block::decode(&block)?;
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
}

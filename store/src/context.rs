//! Reads what a diagnosis looks at around a request: its instance's iterations with their
//! batches, and the other requests whose lifetime overlaps it.

use std::ops::Range;

use tokenscope_core::model::{Iteration, Nanos, OtherRequest};

use super::steps::{BlockKey, StoredStep};
use super::{REQUEST_LOOKBACK_NS, Store, batch_block, read::count, write::Detail};
use crate::error::Result;

impl Store {
    /// An instance's iterations that start within [from, to], with their batches, by start time.
    pub async fn iterations_between(
        &self,
        instance_id: i32,
        from: Nanos,
        to: Nanos,
    ) -> Result<Vec<Iteration>> {
        let rows = self
            .steps_in(&[instance_id], from..to.saturating_add(1))
            .await?;
        self.iterations_of(rows).await
    }

    /// The steps of these blocks of an instance (`step_block_keys`) that start in `range`, with
    /// their batches, by start time.
    pub async fn iterations_in_blocks(
        &self,
        instance_id: i32,
        keys: &[BlockKey],
        range: Range<Nanos>,
    ) -> Result<Vec<Iteration>> {
        let rows = self.steps_of(instance_id, keys, range).await?;
        self.iterations_of(rows).await
    }

    async fn iterations_of(&self, rows: Vec<StoredStep>) -> Result<Vec<Iteration>> {
        let batches = rows
            .iter()
            .map(|r| batch_block::decode(&r.batch))
            .collect::<Result<Vec<_>>>()?;
        let batches = self.resolve_batches(batches).await?;
        Ok(rows
            .into_iter()
            .zip(batches)
            .map(|(r, batch)| Iteration {
                iteration_id: r.step.iteration_id as u64,
                start_ns: r.step.start_ns,
                end_ns: r.step.end_ns,
                batch,
                running: count(r.step.running),
                waiting: count(r.step.waiting),
                kv_cache_usage: r.step.kv_cache_usage,
            })
            .collect())
    }

    /// Requests on the instance whose lifetime overlaps [from, to], with their prefill intervals.
    pub async fn overlapping_requests(
        &self,
        instance_id: i32,
        from: Nanos,
        to: Nanos,
    ) -> Result<Vec<OtherRequest>> {
        let rows = sqlx::query!(
            "SELECT request_id, prompt_tokens, detail FROM requests
             WHERE instance_id = $1 AND arrival_ns >= $2 AND arrival_ns <= $3 AND finished_ns >= $4",
            instance_id,
            from - REQUEST_LOOKBACK_NS,
            to,
            from
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                let detail = Detail::parse(r.detail)?;
                Ok(OtherRequest::from_chunks(
                    r.request_id,
                    count(r.prompt_tokens),
                    &detail.prefill_chunks,
                ))
            })
            .collect()
    }

    /// The requests of an instance alive at some time in [from, to] and their tenants: whose
    /// requests a reply about one request may mention.
    pub async fn tenants_alive(
        &self,
        instance_id: i32,
        from: Nanos,
        to: Nanos,
    ) -> Result<Vec<(String, Option<String>)>> {
        let rows = sqlx::query!(
            "SELECT request_id, tenant FROM requests
             WHERE instance_id = $1 AND arrival_ns >= $2 AND arrival_ns <= $3 AND finished_ns >= $4",
            instance_id,
            from - REQUEST_LOOKBACK_NS,
            to,
            from
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|r| (r.request_id, r.tenant)).collect())
    }
}

impl Store {
    /// The tenants of the requests with these ids (on `instances`, or any): whose requests a
    /// listing that names them (a window's culprits) mentions. An id stored on several
    /// instances appears once per row.
    pub async fn tenants_of(
        &self,
        instances: Option<&[i32]>,
        ids: &[String],
    ) -> Result<Vec<(String, Option<String>)>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query!(
            "SELECT request_id, tenant FROM requests
             WHERE request_id = ANY($1) AND ($2::int4[] IS NULL OR instance_id = ANY($2))",
            ids,
            instances as Option<&[i32]>
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|r| (r.request_id, r.tenant)).collect())
    }
}

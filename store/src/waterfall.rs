//! Reads what a waterfall is drawn from: the instances, the requests of a window (their extents
//! from cheap columns), the stage records of the visible ones, and the iteration lane's rollup
//! cells. The query layer (`crate::query::waterfall`) lays them out.

use std::collections::HashMap;

use tokenscope_core::model::{DraftSums, Nanos, RequestTrace};

use super::{REQUEST_LOOKBACK_NS, Store, read::count, token_block, write::Detail};
use crate::error::{Error, Result};

/// Instances looked up by key: their ids, each id's key, and when the latest last reported.
pub struct InstanceSet {
    pub ids: Vec<i32>,
    pub keys: HashMap<i32, String>,
    pub last_seen_ns: Nanos,
}

/// A request of a window on one instance, from the columns derived at ingest.
pub struct Extent {
    pub instance_id: i32,
    pub request_id: String,
    pub arrival_ns: Nanos,
    pub finished_ns: Nanos,
    pub queue_ns: Option<Nanos>,
    pub ttft_ns: Option<Nanos>,
    pub tpot_ns: Option<Nanos>,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

/// A stored request by its primary key.
pub struct RowKey {
    pub instance_id: i32,
    pub request_id: String,
    pub arrival_ns: Nanos,
}

/// Rollup cells summed into a bucket (`start_ns` is the bucket's).
pub struct BucketSum {
    pub start_ns: Nanos,
    pub end_ns: Nanos,
    pub steps: u32,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
    pub max_batch_size: u32,
    pub drafts: DraftSums,
}

impl Store {
    /// The instances' ids and keys (each must exist), and when the latest of them last reported.
    pub async fn resolve_instances(&self, instances: &[String]) -> Result<InstanceSet> {
        let found = sqlx::query!(
            "SELECT id, instance_key, last_seen_ns FROM instances WHERE instance_key = ANY($1)",
            instances
        )
        .fetch_all(&self.pool)
        .await?;
        if let Some(missing) = instances
            .iter()
            .find(|i| !found.iter().any(|f| &f.instance_key == *i))
        {
            return Err(Error::NotFound(format!("no instance {missing:?}")));
        }
        Ok(InstanceSet {
            last_seen_ns: found.iter().map(|f| f.last_seen_ns).max().unwrap_or(0),
            ids: found.iter().map(|f| f.id).collect(),
            keys: found.into_iter().map(|f| (f.id, f.instance_key)).collect(),
        })
    }

    /// The requests of the instances alive in [from, to), by arrival.
    pub async fn extents(&self, ids: &[i32], from: Nanos, to: Nanos) -> Result<Vec<Extent>> {
        let rows = sqlx::query!(
            "SELECT instance_id, request_id, arrival_ns, finished_ns, queue_ns, ttft_ns, tpot_ns,
                    prompt_tokens, output_tokens FROM requests
             WHERE instance_id = ANY($1) AND arrival_ns >= $2 AND arrival_ns < $3 AND finished_ns >= $4
             ORDER BY arrival_ns",
            ids,
            from - REQUEST_LOOKBACK_NS,
            to,
            from
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| Extent {
                instance_id: r.instance_id,
                request_id: r.request_id,
                arrival_ns: r.arrival_ns,
                finished_ns: r.finished_ns,
                queue_ns: r.queue_ns,
                ttft_ns: r.ttft_ns,
                tpot_ns: r.tpot_ns,
                prompt_tokens: count(r.prompt_tokens),
                output_tokens: count(r.output_tokens),
            })
            .collect())
    }

    /// The stored requests `keys` with their stage record applied (no token texts); their tokens'
    /// times too when `with_tokens`. The first token's time comes from the stored TTFT when the
    /// tokens are not read.
    pub async fn stage_records(
        &self,
        keys: &[RowKey],
        with_tokens: bool,
    ) -> Result<Vec<RequestTrace>> {
        let instance_ids: Vec<i32> = keys.iter().map(|k| k.instance_id).collect();
        let request_ids: Vec<String> = keys.iter().map(|k| k.request_id.clone()).collect();
        let arrivals: Vec<Nanos> = keys.iter().map(|k| k.arrival_ns).collect();
        // Looked up by primary key, one probe per part: a generic plan for
        // `request_id = ANY($ids)` filters every request of the window against the whole list
        // instead (measured 125 ms for 500 of 10,000 rows; this is under 1 ms).
        let rows = sqlx::query!(
            "SELECT r.request_id, r.arrival_ns, r.finished_ns, r.ttft_ns, r.prompt_tokens, r.output_tokens,
                    r.cached_tokens, r.detail,
                    CASE WHEN $4 THEN r.tokens END AS tokens
             FROM UNNEST($1::int[], $2::text[], $3::bigint[]) AS v (instance_id, request_id, arrival_ns)
             JOIN requests r ON r.instance_id = v.instance_id AND r.request_id = v.request_id
                            AND r.arrival_ns = v.arrival_ns",
            &instance_ids,
            &request_ids,
            &arrivals,
            with_tokens
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                let mut trace = RequestTrace {
                    request_id: r.request_id,
                    arrival_ns: r.arrival_ns,
                    finished_ns: r.finished_ns,
                    prompt_tokens: count(r.prompt_tokens),
                    output_tokens: count(r.output_tokens),
                    cached_tokens: count(r.cached_tokens),
                    ..RequestTrace::default()
                };
                Detail::parse(r.detail)?.apply(&mut trace);
                trace.first_token_ns = trace.first_token_ns.or(r.ttft_ns.map(|t| r.arrival_ns + t));
                if let Some(block) = &r.tokens {
                    trace.tokens = token_block::decode(block, r.arrival_ns)?.0;
                }
                Ok(trace)
            })
            .collect()
    }

    /// The rollup cells of `resolution` in [origin, to), summed into buckets of `bucket_ns`
    /// counted from `origin`.
    pub async fn rollup_buckets(
        &self,
        ids: &[i32],
        resolution_ns: Nanos,
        origin_ns: Nanos,
        to: Nanos,
        bucket_ns: Nanos,
    ) -> Result<Vec<BucketSum>> {
        let rows = sqlx::query!(
            r#"SELECT $3 + (cell_ns - $3) / $5 * $5 AS "start_ns!", max(end_ns) AS "end_ns!",
                      sum(steps)::int AS "steps!", sum(prefill_tokens)::bigint AS "prefill_tokens!",
                      sum(decode_tokens)::bigint AS "decode_tokens!", max(max_batch_size) AS "max_batch_size!",
                      sum(draft_entries)::bigint AS "draft_entries!", sum(draft_proposed)::bigint AS "draft_proposed!",
                      sum(draft_accepted)::bigint AS "draft_accepted!"
               FROM iteration_rollups
               WHERE instance_id = ANY($1) AND resolution_ns = $2 AND cell_ns >= $3 AND cell_ns < $4
               GROUP BY 1 ORDER BY 1"#,
            ids,
            resolution_ns,
            origin_ns,
            to,
            bucket_ns
        )
        .fetch_all(&self.pool)
        .await?;
        // Sums of counts: never negative.
        Ok(rows
            .into_iter()
            .map(|r| BucketSum {
                start_ns: r.start_ns,
                end_ns: r.end_ns,
                steps: count(r.steps),
                prefill_tokens: u64::try_from(r.prefill_tokens).unwrap_or(0),
                decode_tokens: u64::try_from(r.decode_tokens).unwrap_or(0),
                max_batch_size: count(r.max_batch_size),
                drafts: DraftSums {
                    entries: u64::try_from(r.draft_entries).unwrap_or(0),
                    proposed: u64::try_from(r.draft_proposed).unwrap_or(0),
                    accepted: u64::try_from(r.draft_accepted).unwrap_or(0),
                },
            })
            .collect())
    }
}

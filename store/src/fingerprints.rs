//! Reads prompt fingerprints: the block-hash chains (`requests.prefix_cache`) of a window's
//! requests with what the families view needs beside them, and the prompt tokens an instance
//! computed in an interval (whose allocations could have evicted a family's blocks).

use tokenscope_core::model::{Nanos, PrefixCache};

use super::{RequestFilter, Store};
use crate::error::Result;

/// A request with a fingerprint.
pub struct FingerprintRow {
    pub request_id: String,
    pub instance: String,
    pub arrival_ns: Nanos,
    pub ttft_ns: Option<Nanos>,
    pub cached_tokens: u32,
    pub prefix_cache: PrefixCache,
}

/// Prompt tokens computed on an instance in an interval: in all, by how many requests, and the
/// requests that computed the most.
pub struct Computed {
    pub tokens: u64,
    pub requests: u64,
    pub top: Vec<(String, u64)>,
}

impl Store {
    /// The latest `limit` requests of `f`'s window that have a fingerprint, in arrival order, and
    /// whether the window had more (requests without one, as from an engine that reports no block
    /// hashes, neither count nor use up the limit). The latest are found by their arrival alone (a
    /// narrow sort), then read without sorting their JSON: sorting whole rows spilled 124 MB to
    /// disk at 100,000 requests and took twice as long (docs/BENCHMARKS.md).
    pub async fn fingerprint_rows(
        &self,
        f: &RequestFilter,
        limit: i64,
    ) -> Result<(Vec<FingerprintRow>, bool)> {
        let rows = sqlx::query!(
            r#"WITH cut AS (
                 SELECT r.arrival_ns
                 FROM requests r JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
                 WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1)) AND ($2::text IS NULL OR i.engine = $2)
                   AND ($9::text IS NULL OR i.engine_version = $9) AND ($3::text IS NULL OR m.name = $3)
                   AND ($6::text[] IS NULL OR r.tenant = ANY($6)) AND ($7::text IS NULL OR r.lora_adapter = $7)
                   AND ($8::int IS NULL OR r.priority = $8) AND r.arrival_ns >= $4 AND r.arrival_ns < $5
                   AND ($11::text IS NULL OR (r.prefix_cache -> 'block_hashes') ? $11) AND ($12::int IS NULL OR r.prompt_tokens >= $12) AND ($13::int IS NULL OR r.prompt_tokens < $13) AND ($14::int IS NULL OR (CASE WHEN r.cached_tokens = 0 THEN 0 WHEN r.cached_tokens * 2 < r.prompt_tokens THEN 1 ELSE 2 END) = $14) AND ($15::int IS NULL OR ((r.arrival_ns / 3600000000000) % 24)::int = $15) AND ($16::int IS NULL OR EXISTS (SELECT 1 FROM iteration_rollups c1 WHERE c1.instance_id = r.instance_id AND c1.resolution_ns = 1000000000 AND c1.cell_ns = r.arrival_ns - r.arrival_ns % 1000000000 AND c1.max_batch_size >= $16 AND ($17::int IS NULL OR c1.max_batch_size < $17)))
                   AND r.prefix_cache IS NOT NULL
                 ORDER BY r.arrival_ns DESC OFFSET $10 LIMIT 1)
               SELECT r.request_id, i.instance_key, r.arrival_ns, r.ttft_ns, r.cached_tokens,
                      r.prefix_cache AS "prefix_cache!: sqlx::types::Json<PrefixCache>", (SELECT arrival_ns FROM cut) IS NOT NULL AS "more!"
               FROM requests r JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
               WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1)) AND ($2::text IS NULL OR i.engine = $2)
                 AND ($9::text IS NULL OR i.engine_version = $9) AND ($3::text IS NULL OR m.name = $3)
                 AND ($6::text[] IS NULL OR r.tenant = ANY($6)) AND ($7::text IS NULL OR r.lora_adapter = $7)
                 AND ($8::int IS NULL OR r.priority = $8) AND r.arrival_ns >= $4 AND r.arrival_ns < $5
                 AND ($11::text IS NULL OR (r.prefix_cache -> 'block_hashes') ? $11) AND ($12::int IS NULL OR r.prompt_tokens >= $12) AND ($13::int IS NULL OR r.prompt_tokens < $13) AND ($14::int IS NULL OR (CASE WHEN r.cached_tokens = 0 THEN 0 WHEN r.cached_tokens * 2 < r.prompt_tokens THEN 1 ELSE 2 END) = $14) AND ($15::int IS NULL OR ((r.arrival_ns / 3600000000000) % 24)::int = $15) AND ($16::int IS NULL OR EXISTS (SELECT 1 FROM iteration_rollups c1 WHERE c1.instance_id = r.instance_id AND c1.resolution_ns = 1000000000 AND c1.cell_ns = r.arrival_ns - r.arrival_ns % 1000000000 AND c1.max_batch_size >= $16 AND ($17::int IS NULL OR c1.max_batch_size < $17)))
                 AND r.prefix_cache IS NOT NULL
                 AND ((SELECT arrival_ns FROM cut) IS NULL OR r.arrival_ns > (SELECT arrival_ns FROM cut))"#,
            f.instance_list(),
            f.engine,
            f.model,
            f.from_ns.unwrap_or(Nanos::MIN),
            f.to_ns.unwrap_or(Nanos::MAX),
            f.tenants.as_deref(),
            f.lora_adapter,
            f.priority,
            f.engine_version,
            limit,
            f.fingerprint,
            f.prompt_tokens.0,
            f.prompt_tokens.1,
            f.cached_share,
            f.hour,
            f.batch_size.0,
            f.batch_size.1,
        )
        .fetch_all(&self.pool)
        .await?;
        let more = rows.first().is_some_and(|r| r.more);
        let mut out = rows
            .into_iter()
            .map(|r| FingerprintRow {
                request_id: r.request_id,
                instance: r.instance_key,
                arrival_ns: r.arrival_ns,
                ttft_ns: r.ttft_ns,
                cached_tokens: super::read::count(r.cached_tokens),
                prefix_cache: r.prefix_cache.0,
            })
            .collect::<Vec<_>>();
        out.sort_by(|a, b| (a.arrival_ns, &a.request_id).cmp(&(b.arrival_ns, &b.request_id)));
        Ok((out, more))
    }

    /// Prompt tokens computed (prompt less cached) by requests that arrived on `instance` in
    /// [from, to), and the `top` requests that computed the most.
    pub async fn computed_prompts(
        &self,
        instance: &str,
        from_ns: Nanos,
        to_ns: Nanos,
        top: i64,
    ) -> Result<Computed> {
        let rows = sqlx::query!(
            r#"SELECT r.request_id, (r.prompt_tokens - r.cached_tokens)::bigint AS "tokens!",
                      sum(r.prompt_tokens - r.cached_tokens) OVER () AS "all!",
                      count(*) OVER () AS "requests!"
               FROM requests r JOIN instances i ON i.id = r.instance_id
               WHERE i.instance_key = $1 AND r.arrival_ns >= $2 AND r.arrival_ns < $3
               ORDER BY 2 DESC, r.request_id LIMIT $4"#,
            instance,
            from_ns,
            to_ns,
            top,
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(Computed {
            tokens: rows.first().map_or(0, |r| r.all.max(0) as u64),
            requests: rows.first().map_or(0, |r| r.requests.max(0) as u64),
            top: rows
                .into_iter()
                .map(|r| (r.request_id, r.tokens.max(0) as u64))
                .collect(),
        })
    }
}

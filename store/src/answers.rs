//! Reads what compare needs to set answers side by side: the requests of a window keyed by their
//! prompt (its block-hash chain, chain length and prompt length: equal keys, equal prompts as far
//! as the engine's hashes tell), and the token ids of chosen requests' answers.

use tokenscope_core::model::Nanos;

use super::{RequestFilter, Store, token_block};
use crate::error::Result;

/// A request with a known prompt.
pub struct PromptKeyRow {
    pub key: String,
    pub instance_id: i32,
    pub instance: String,
    pub request_id: String,
    pub arrival_ns: Nanos,
}

/// A request's answer as token ids (`None` for tokens stored without one).
pub struct AnswerRow {
    pub instance_id: i32,
    pub request_id: String,
    pub arrival_ns: Nanos,
    pub token_ids: Vec<Option<u32>>,
}

impl Store {
    /// The first `limit` answered requests of `f`'s window that have a fingerprint, oldest first,
    /// each with its prompt's key (requests without one do not use up the limit). The first are
    /// found by their arrival alone (a narrow sort), then read without sorting: ordering whole
    /// rows made Postgres carry each one's `detail` through the sort (to hash it after the limit)
    /// and spill it to disk. `prefix_cache IS NOT NULL` (implied by the key) lets the walk use
    /// the fingerprinted requests' own index.
    pub async fn prompt_keys(&self, f: &RequestFilter, limit: i64) -> Result<Vec<PromptKeyRow>> {
        let mut rows = sqlx::query_as!(
            PromptKeyRow,
            r#"WITH cut AS (
                 SELECT r.arrival_ns
                 FROM requests r JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
                 WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1)) AND ($2::text IS NULL OR i.engine = $2)
                   AND ($9::text IS NULL OR i.engine_version = $9) AND ($3::text IS NULL OR m.name = $3)
                   AND ($6::text[] IS NULL OR r.tenant = ANY($6)) AND ($7::text IS NULL OR r.lora_adapter = $7)
                   AND ($8::int IS NULL OR r.priority = $8) AND r.arrival_ns >= $4 AND r.arrival_ns < $5
                   AND ($11::text IS NULL OR (r.prefix_cache -> 'block_hashes') ? $11) AND ($12::int IS NULL OR r.prompt_tokens >= $12) AND ($13::int IS NULL OR r.prompt_tokens < $13) AND ($14::int IS NULL OR (CASE WHEN r.cached_tokens = 0 THEN 0 WHEN r.cached_tokens * 2 < r.prompt_tokens THEN 1 ELSE 2 END) = $14) AND ($15::int IS NULL OR ((r.arrival_ns / 3600000000000) % 24)::int = $15) AND ($16::int IS NULL OR EXISTS (SELECT 1 FROM iteration_rollups c1 WHERE c1.instance_id = r.instance_id AND c1.resolution_ns = 1000000000 AND c1.cell_ns = r.arrival_ns - r.arrival_ns % 1000000000 AND c1.max_batch_size >= $16 AND ($17::int IS NULL OR c1.max_batch_size < $17))) AND r.output_tokens > 0
                   AND r.prefix_cache IS NOT NULL AND r.prompt_key IS NOT NULL
                 ORDER BY r.arrival_ns OFFSET $10::bigint - 1 LIMIT 1)
               SELECT r.prompt_key AS "key!",
                      r.instance_id, i.instance_key AS instance, r.request_id, r.arrival_ns
               FROM requests r JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
               WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1)) AND ($2::text IS NULL OR i.engine = $2)
                 AND ($9::text IS NULL OR i.engine_version = $9) AND ($3::text IS NULL OR m.name = $3)
                 AND ($6::text[] IS NULL OR r.tenant = ANY($6)) AND ($7::text IS NULL OR r.lora_adapter = $7)
                 AND ($8::int IS NULL OR r.priority = $8) AND r.arrival_ns >= $4 AND r.arrival_ns < $5
                 AND ($11::text IS NULL OR (r.prefix_cache -> 'block_hashes') ? $11) AND ($12::int IS NULL OR r.prompt_tokens >= $12) AND ($13::int IS NULL OR r.prompt_tokens < $13) AND ($14::int IS NULL OR (CASE WHEN r.cached_tokens = 0 THEN 0 WHEN r.cached_tokens * 2 < r.prompt_tokens THEN 1 ELSE 2 END) = $14) AND ($15::int IS NULL OR ((r.arrival_ns / 3600000000000) % 24)::int = $15) AND ($16::int IS NULL OR EXISTS (SELECT 1 FROM iteration_rollups c1 WHERE c1.instance_id = r.instance_id AND c1.resolution_ns = 1000000000 AND c1.cell_ns = r.arrival_ns - r.arrival_ns % 1000000000 AND c1.max_batch_size >= $16 AND ($17::int IS NULL OR c1.max_batch_size < $17)))
                 AND r.prefix_cache IS NOT NULL AND r.prompt_key IS NOT NULL AND r.output_tokens > 0
                 AND ((SELECT arrival_ns FROM cut) IS NULL OR r.arrival_ns <= (SELECT arrival_ns FROM cut))"#,
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
        // Arrivals equal to the cut's can take the count past `limit`.
        rows.sort_by(|a, b| (a.arrival_ns, &a.request_id).cmp(&(b.arrival_ns, &b.request_id)));
        rows.truncate(usize::try_from(limit).unwrap_or(0));
        Ok(rows)
    }

    /// The answers of the requests `keys` names (instance id, request id, arrival), as token ids.
    pub async fn answer_tokens(&self, keys: &[(i32, String, Nanos)]) -> Result<Vec<AnswerRow>> {
        let (ids, names, arrivals): (Vec<i32>, Vec<String>, Vec<Nanos>) =
            keys.iter().cloned().collect();
        let rows = sqlx::query!(
            r#"SELECT r.instance_id, r.request_id, r.arrival_ns, r.tokens
               FROM requests r JOIN UNNEST($1::int[], $2::text[], $3::bigint[]) AS k (instance_id, request_id, arrival_ns)
                 ON r.instance_id = k.instance_id AND r.request_id = k.request_id AND r.arrival_ns = k.arrival_ns"#,
            &ids,
            &names,
            &arrivals,
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                let token_ids = match &r.tokens {
                    Some(block) => token_block::decode(block, r.arrival_ns)?
                        .0
                        .into_iter()
                        .map(|t| t.token_id)
                        .collect(),
                    None => Vec::new(),
                };
                Ok(AnswerRow {
                    instance_id: r.instance_id,
                    request_id: r.request_id,
                    arrival_ns: r.arrival_ns,
                    token_ids,
                })
            })
            .collect()
    }
}

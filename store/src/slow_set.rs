//! Tallies a window's requests by each attribute that may set slow requests apart (instance,
//! engine version, model, tenant, adapter, priority, prompt length, cached share, prompt start,
//! batch at arrival, hour), slow ones and all, in one scan with grouping sets: the requests never
//! leave the database. Buckets are grouped as integers and named as text only in the few rows
//! out (hashing text keys cost 15 % of the query at 100,000 requests).

use tokenscope_core::model::Nanos;

use super::{RequestFilter, Store};
use crate::error::Result;

/// Which requests count as slow.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Slow {
    /// TTFT over the first or TPOT over the second SLO.
    Slo(Nanos, Nanos),
    /// `metric` (`ttft`, `tpot` or `e2e`) within [min, max] (a range brushed on a chart).
    Range(&'static str, Nanos, Nanos),
}

/// How many requests have one value of one attribute (`instance`, `engine_version`, `model`,
/// `tenant`, `adapter`, `priority`, `prompt_length`, `cached_share`, `prompt_start`,
/// `batch_at_arrival`, `hour`), and how many of them are slow. Bucketed attributes hold the
/// bucket's number (`width_bucket` over the edges asked for; cached share 0 none, 1 under half,
/// 2 half or more; the hour 0–23 UTC); `None`: the request has no value.
pub struct TallyRow {
    pub attribute: String,
    pub value: Option<String>,
    pub slow: u64,
    pub all: u64,
}

/// Where the prompt-length and batch-size buckets start.
pub struct Buckets<'a> {
    pub prompt_tokens: &'a [i32],
    pub batch_size: &'a [i32],
}

impl Store {
    /// `f`'s requests in its window (order, paging, find, cause and SLO filter do not apply):
    /// how many are slow by `slow`, of how many, and the tallies of every attribute value.
    pub async fn slow_set_tallies(
        &self,
        f: &RequestFilter,
        slow: Slow,
        buckets: Buckets<'_>,
    ) -> Result<(u64, u64, Vec<TallyRow>)> {
        let (kind, a, b) = match slow {
            Slow::Slo(ttft, tpot) => ("slo", ttft, tpot),
            Slow::Range(metric, min, max) => (metric, min, max),
        };
        let (from, to) = (
            f.from_ns.unwrap_or(Nanos::MIN),
            f.to_ns.unwrap_or(Nanos::MAX),
        );
        let rows = sqlx::query!(
            r#"WITH w AS (
                 SELECT i.instance_key, i.engine_version, m.name AS model, r.tenant, r.lora_adapter,
                        r.priority,
                        width_bucket(r.prompt_tokens, $13::int[]) AS prompt_length,
                        (CASE WHEN r.cached_tokens = 0 THEN 0
                              WHEN r.cached_tokens * 2 < r.prompt_tokens THEN 1 ELSE 2 END) AS cached_share,
                        r.prompt_start,
                        width_bucket(c.max_batch_size, $14::int[]) AS batch_at_arrival,
                        ((r.arrival_ns / 3600000000000) % 24)::int AS hour,
                        CASE $10::text
                          WHEN 'slo' THEN COALESCE(r.ttft_ns > $11, false) OR COALESCE(r.tpot_ns > $12, false)
                          ELSE COALESCE((CASE $10::text WHEN 'ttft' THEN r.ttft_ns WHEN 'tpot' THEN r.tpot_ns
                                                        ELSE r.e2e_ns END) BETWEEN $11 AND $12, false)
                        END AS slow
                 FROM requests r JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
                 LEFT JOIN iteration_rollups c
                   ON c.instance_id = r.instance_id AND c.resolution_ns = 1000000000
                  AND c.cell_ns = r.arrival_ns - r.arrival_ns % 1000000000
                  AND c.cell_ns >= $15 AND c.cell_ns < $5
                 WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1)) AND ($2::text IS NULL OR i.engine = $2)
                   AND ($9::text IS NULL OR i.engine_version = $9) AND ($3::text IS NULL OR m.name = $3)
                   AND ($6::text[] IS NULL OR r.tenant = ANY($6)) AND ($7::text IS NULL OR r.lora_adapter = $7) AND ($16::text IS NULL OR (r.prefix_cache -> 'block_hashes') ? $16) AND ($17::int IS NULL OR r.prompt_tokens >= $17) AND ($18::int IS NULL OR r.prompt_tokens < $18) AND ($19::int IS NULL OR (CASE WHEN r.cached_tokens = 0 THEN 0 WHEN r.cached_tokens * 2 < r.prompt_tokens THEN 1 ELSE 2 END) = $19) AND ($20::int IS NULL OR ((r.arrival_ns / 3600000000000) % 24)::int = $20) AND ($21::int IS NULL OR EXISTS (SELECT 1 FROM iteration_rollups c1 WHERE c1.instance_id = r.instance_id AND c1.resolution_ns = 1000000000 AND c1.cell_ns = r.arrival_ns - r.arrival_ns % 1000000000 AND c1.max_batch_size >= $21 AND ($22::int IS NULL OR c1.max_batch_size < $22)))
                   AND ($8::int IS NULL OR r.priority = $8) AND r.arrival_ns >= $4 AND r.arrival_ns < $5
               )
               SELECT CASE WHEN GROUPING(instance_key) = 0 THEN 'instance'
                           WHEN GROUPING(engine_version) = 0 THEN 'engine_version'
                           WHEN GROUPING(model) = 0 THEN 'model'
                           WHEN GROUPING(tenant) = 0 THEN 'tenant'
                           WHEN GROUPING(lora_adapter) = 0 THEN 'adapter'
                           WHEN GROUPING(priority) = 0 THEN 'priority'
                           WHEN GROUPING(prompt_length) = 0 THEN 'prompt_length'
                           WHEN GROUPING(cached_share) = 0 THEN 'cached_share'
                           WHEN GROUPING(prompt_start) = 0 THEN 'prompt_start'
                           WHEN GROUPING(batch_at_arrival) = 0 THEN 'batch_at_arrival'
                           WHEN GROUPING(hour) = 0 THEN 'hour'
                           ELSE 'all' END AS "attribute!",
                      COALESCE(instance_key, engine_version, model, tenant, lora_adapter, priority::text,
                               prompt_length::text, cached_share::text, prompt_start,
                               batch_at_arrival::text, hour::text) AS value,
                      count(*) FILTER (WHERE slow) AS "slow!", count(*) AS "all!"
               FROM w
               GROUP BY GROUPING SETS ((instance_key), (engine_version), (model), (tenant), (lora_adapter),
                                       (priority), (prompt_length), (cached_share), (prompt_start),
                                       (batch_at_arrival), (hour), ())"#,
            f.instance_list(),
            f.engine,
            f.model,
            from,
            to,
            f.tenants.as_deref(),
            f.lora_adapter,
            f.priority,
            f.engine_version,
            kind,
            a,
            b,
            buckets.prompt_tokens,
            buckets.batch_size,
            from.saturating_sub(1_000_000_000),
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
        let (mut slow, mut all, mut tallies) = (0, 0, Vec::new());
        for r in rows {
            let (s, n) = (r.slow as u64, r.all as u64);
            if r.attribute == "all" {
                (slow, all) = (s, n);
            } else {
                tallies.push(TallyRow {
                    attribute: r.attribute,
                    value: r.value,
                    slow: s,
                    all: n,
                });
            }
        }
        Ok((slow, all, tallies))
    }
}

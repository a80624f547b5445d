//! Reads latency over time and over a set of requests: TTFT/TPOT percentiles, SLO breaches and
//! histogram bins, computed where the data is from the per-request columns derived at ingest (no
//! token block is read).

use tokenscope_core::model::Nanos;
use tokenscope_core::model::metrics::WordSums;

use super::{RequestFilter, Store, read::count};
use crate::error::Result;

/// The 50th, 90th and 99th percentile of a column (`None` when no request has it).
#[derive(Clone, Copy, Debug, Default)]
pub struct Quantiles {
    pub p50: Option<Nanos>,
    pub p90: Option<Nanos>,
    pub p99: Option<Nanos>,
}

/// The requests of one time bucket.
pub struct LatencyRow {
    pub start_ns: Nanos,
    pub requests: u32,
    pub ttft: Quantiles,
    pub tpot: Quantiles,
    pub ttft_over: u32,
    pub tpot_over: u32,
}

/// A whole set of requests.
pub struct SetStats {
    pub requests: u64,
    pub ttft: Quantiles,
    pub tpot: Quantiles,
    pub queue: Quantiles,
    pub e2e: Quantiles,
    /// The word-choice sums (`detail.words`) of its requests that have them.
    pub words: WordSums,
}

/// Requests in one histogram bin of `metric` (`ttft` or `tpot`).
pub struct BinRow {
    pub metric: String,
    pub bin: i32,
    pub requests: u32,
}

fn q(p50: Option<Nanos>, p90: Option<Nanos>, p99: Option<Nanos>) -> Quantiles {
    Quantiles { p50, p90, p99 }
}

impl Store {
    /// `f`'s instances, engine, model in [from, to), in buckets of `bucket_ns` from `from`, with
    /// how many broke the TTFT and TPOT SLOs `slo_ns`; its order, paging, find and SLO filter do
    /// not apply.
    pub async fn latency_buckets(
        &self,
        f: &RequestFilter,
        (from, to): (Nanos, Nanos),
        bucket_ns: Nanos,
        slo_ns: (Nanos, Nanos),
    ) -> Result<Vec<LatencyRow>> {
        let rows = sqlx::query!(
            r#"SELECT (r.arrival_ns - $4) / $6 AS "k!", count(*)::int AS "requests!",
                      percentile_disc(0.5) WITHIN GROUP (ORDER BY r.ttft_ns) AS ttft_p50,
                      percentile_disc(0.9) WITHIN GROUP (ORDER BY r.ttft_ns) AS ttft_p90,
                      percentile_disc(0.99) WITHIN GROUP (ORDER BY r.ttft_ns) AS ttft_p99,
                      percentile_disc(0.5) WITHIN GROUP (ORDER BY r.tpot_ns) AS tpot_p50,
                      percentile_disc(0.9) WITHIN GROUP (ORDER BY r.tpot_ns) AS tpot_p90,
                      percentile_disc(0.99) WITHIN GROUP (ORDER BY r.tpot_ns) AS tpot_p99,
                      count(*) FILTER (WHERE r.ttft_ns > $7)::int AS "ttft_over!",
                      count(*) FILTER (WHERE r.tpot_ns > $8)::int AS "tpot_over!"
               FROM requests r JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
               WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1)) AND ($2::text IS NULL OR i.engine = $2) AND ($9::text IS NULL OR i.engine_version = $9)
                 AND ($3::text IS NULL OR m.name = $3) AND ($10::text[] IS NULL OR r.tenant = ANY($10)) AND ($11::text IS NULL OR r.lora_adapter = $11) AND ($13::text IS NULL OR (r.prefix_cache -> 'block_hashes') ? $13) AND ($14::int IS NULL OR r.prompt_tokens >= $14) AND ($15::int IS NULL OR r.prompt_tokens < $15) AND ($16::int IS NULL OR (CASE WHEN r.cached_tokens = 0 THEN 0 WHEN r.cached_tokens * 2 < r.prompt_tokens THEN 1 ELSE 2 END) = $16) AND ($17::int IS NULL OR ((r.arrival_ns / 3600000000000) % 24)::int = $17) AND ($18::int IS NULL OR EXISTS (SELECT 1 FROM iteration_rollups c1 WHERE c1.instance_id = r.instance_id AND c1.resolution_ns = 1000000000 AND c1.cell_ns = r.arrival_ns - r.arrival_ns % 1000000000 AND c1.max_batch_size >= $18 AND ($19::int IS NULL OR c1.max_batch_size < $19))) AND ($12::int IS NULL OR r.priority = $12) AND r.arrival_ns >= $4 AND r.arrival_ns < $5
               GROUP BY 1 ORDER BY 1"#,
            f.instance_list(),
            f.engine,
            f.model,
            from,
            to,
            bucket_ns,
            slo_ns.0,
            slo_ns.1,
            f.engine_version,
            f.tenants.as_deref(),
            f.lora_adapter,
            f.priority,
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
        Ok(rows
            .into_iter()
            .map(|r| LatencyRow {
                start_ns: from + r.k * bucket_ns,
                requests: count(r.requests),
                ttft: q(r.ttft_p50, r.ttft_p90, r.ttft_p99),
                tpot: q(r.tpot_p50, r.tpot_p90, r.tpot_p99),
                ttft_over: count(r.ttft_over),
                tpot_over: count(r.tpot_over),
            })
            .collect())
    }

    /// Percentiles over all the requests that match `f`'s instances, engine, model and window,
    /// and their word-choice sums.
    pub async fn set_stats(&self, f: &RequestFilter) -> Result<SetStats> {
        let s = sqlx::query!(
            r#"SELECT count(*) AS "requests!",
                      percentile_disc(0.5) WITHIN GROUP (ORDER BY r.ttft_ns) AS ttft_p50,
                      percentile_disc(0.9) WITHIN GROUP (ORDER BY r.ttft_ns) AS ttft_p90,
                      percentile_disc(0.99) WITHIN GROUP (ORDER BY r.ttft_ns) AS ttft_p99,
                      percentile_disc(0.5) WITHIN GROUP (ORDER BY r.tpot_ns) AS tpot_p50,
                      percentile_disc(0.9) WITHIN GROUP (ORDER BY r.tpot_ns) AS tpot_p90,
                      percentile_disc(0.99) WITHIN GROUP (ORDER BY r.tpot_ns) AS tpot_p99,
                      percentile_disc(0.5) WITHIN GROUP (ORDER BY r.queue_ns) AS queue_p50,
                      percentile_disc(0.9) WITHIN GROUP (ORDER BY r.queue_ns) AS queue_p90,
                      percentile_disc(0.99) WITHIN GROUP (ORDER BY r.queue_ns) AS queue_p99,
                      percentile_disc(0.5) WITHIN GROUP (ORDER BY r.e2e_ns) AS e2e_p50,
                      percentile_disc(0.9) WITHIN GROUP (ORDER BY r.e2e_ns) AS e2e_p90,
                      percentile_disc(0.99) WITHIN GROUP (ORDER BY r.e2e_ns) AS e2e_p99,
                      count(*) FILTER (WHERE r.detail ? 'words') AS "answers!",
                      sum(r.output_tokens::float8) FILTER (WHERE r.detail ? 'words') AS answer_tokens,
                      sum((r.detail #>> '{words,tokens}')::float8) AS word_tokens,
                      sum((r.detail #>> '{words,probability_sum}')::float8) AS probability_sum,
                      sum((r.detail #>> '{words,entropy_tokens}')::float8) AS entropy_tokens,
                      sum((r.detail #>> '{words,entropy_sum}')::float8) AS entropy_sum,
                      count(*) FILTER (WHERE (r.detail #>> '{words,eos}')::bool) AS "eos!",
                      sum((r.detail #>> '{words,unlikely}')::float8) AS unlikely
               FROM requests r JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
               WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1)) AND ($2::text IS NULL OR i.engine = $2) AND ($6::text IS NULL OR i.engine_version = $6)
                 AND ($3::text IS NULL OR m.name = $3) AND ($7::text[] IS NULL OR r.tenant = ANY($7)) AND ($8::text IS NULL OR r.lora_adapter = $8) AND ($10::text IS NULL OR (r.prefix_cache -> 'block_hashes') ? $10) AND ($11::int IS NULL OR r.prompt_tokens >= $11) AND ($12::int IS NULL OR r.prompt_tokens < $12) AND ($13::int IS NULL OR (CASE WHEN r.cached_tokens = 0 THEN 0 WHEN r.cached_tokens * 2 < r.prompt_tokens THEN 1 ELSE 2 END) = $13) AND ($14::int IS NULL OR ((r.arrival_ns / 3600000000000) % 24)::int = $14) AND ($15::int IS NULL OR EXISTS (SELECT 1 FROM iteration_rollups c1 WHERE c1.instance_id = r.instance_id AND c1.resolution_ns = 1000000000 AND c1.cell_ns = r.arrival_ns - r.arrival_ns % 1000000000 AND c1.max_batch_size >= $15 AND ($16::int IS NULL OR c1.max_batch_size < $16))) AND ($9::int IS NULL OR r.priority = $9) AND r.arrival_ns >= $4 AND r.arrival_ns < $5"#,
            f.instance_list(),
            f.engine,
            f.model,
            f.from_ns.unwrap_or(Nanos::MIN),
            f.to_ns.unwrap_or(Nanos::MAX),
            f.engine_version,
            f.tenants.as_deref(),
            f.lora_adapter,
            f.priority,
            f.fingerprint,
            f.prompt_tokens.0,
            f.prompt_tokens.1,
            f.cached_share,
            f.hour,
            f.batch_size.0,
            f.batch_size.1,
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(SetStats {
            requests: s.requests as u64,
            ttft: q(s.ttft_p50, s.ttft_p90, s.ttft_p99),
            tpot: q(s.tpot_p50, s.tpot_p90, s.tpot_p99),
            queue: q(s.queue_p50, s.queue_p90, s.queue_p99),
            e2e: q(s.e2e_p50, s.e2e_p90, s.e2e_p99),
            words: WordSums {
                answers: s.answers as u64,
                answer_tokens: s.answer_tokens.unwrap_or(0.0),
                tokens: s.word_tokens.unwrap_or(0.0),
                probability_sum: s.probability_sum.unwrap_or(0.0),
                entropy_tokens: s.entropy_tokens.unwrap_or(0.0),
                entropy_sum: s.entropy_sum.unwrap_or(0.0),
                eos: s.eos as u64,
                unlikely: s.unlikely.unwrap_or(0.0),
            },
        })
    }

    /// Requests per bin of TTFT and of TPOT, the bins `bins_per_octave` to a doubling of the
    /// milliseconds (bin 0 starts at 1 ms).
    pub async fn histogram(&self, f: &RequestFilter, bins_per_octave: f64) -> Result<Vec<BinRow>> {
        let rows = sqlx::query!(
            r#"SELECT h.metric AS "metric!", floor($6::float8 * ln(greatest(h.ns, 1000)::float8 / 1e6) / ln(2))::int AS "bin!",
                      count(*)::int AS "requests!"
               FROM requests r JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
               CROSS JOIN LATERAL (VALUES ('ttft', r.ttft_ns), ('tpot', r.tpot_ns)) AS h (metric, ns)
               WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1)) AND ($2::text IS NULL OR i.engine = $2) AND ($7::text IS NULL OR i.engine_version = $7)
                 AND ($3::text IS NULL OR m.name = $3) AND ($8::text[] IS NULL OR r.tenant = ANY($8)) AND ($9::text IS NULL OR r.lora_adapter = $9) AND ($11::text IS NULL OR (r.prefix_cache -> 'block_hashes') ? $11) AND ($12::int IS NULL OR r.prompt_tokens >= $12) AND ($13::int IS NULL OR r.prompt_tokens < $13) AND ($14::int IS NULL OR (CASE WHEN r.cached_tokens = 0 THEN 0 WHEN r.cached_tokens * 2 < r.prompt_tokens THEN 1 ELSE 2 END) = $14) AND ($15::int IS NULL OR ((r.arrival_ns / 3600000000000) % 24)::int = $15) AND ($16::int IS NULL OR EXISTS (SELECT 1 FROM iteration_rollups c1 WHERE c1.instance_id = r.instance_id AND c1.resolution_ns = 1000000000 AND c1.cell_ns = r.arrival_ns - r.arrival_ns % 1000000000 AND c1.max_batch_size >= $16 AND ($17::int IS NULL OR c1.max_batch_size < $17))) AND ($10::int IS NULL OR r.priority = $10) AND r.arrival_ns >= $4 AND r.arrival_ns < $5
                 AND h.ns IS NOT NULL
               GROUP BY 1, 2 ORDER BY 1, 2"#,
            f.instance_list(),
            f.engine,
            f.model,
            f.from_ns.unwrap_or(Nanos::MIN),
            f.to_ns.unwrap_or(Nanos::MAX),
            bins_per_octave,
            f.engine_version,
            f.tenants.as_deref(),
            f.lora_adapter,
            f.priority,
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
        Ok(rows
            .into_iter()
            .map(|r| BinRow {
                metric: r.metric,
                bin: r.bin,
                requests: count(r.requests),
            })
            .collect())
    }

    /// Arrival of the newest request that matches `f`'s instances, engine and model (any time).
    /// Walked from the newest down the arrival index: `max()` over the joins seq-scanned
    /// 10 M requests (14 s cold) where this reads one row.
    pub async fn newest_arrival(&self, f: &RequestFilter) -> Result<Option<Nanos>> {
        Ok(sqlx::query_scalar!(
            r#"SELECT r.arrival_ns AS newest
               FROM requests r JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
               WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1)) AND ($2::text IS NULL OR i.engine = $2) AND ($4::text IS NULL OR i.engine_version = $4)
                 AND ($3::text IS NULL OR m.name = $3) AND ($5::text[] IS NULL OR r.tenant = ANY($5)) AND ($6::text IS NULL OR r.lora_adapter = $6) AND ($8::text IS NULL OR (r.prefix_cache -> 'block_hashes') ? $8) AND ($9::int IS NULL OR r.prompt_tokens >= $9) AND ($10::int IS NULL OR r.prompt_tokens < $10) AND ($11::int IS NULL OR (CASE WHEN r.cached_tokens = 0 THEN 0 WHEN r.cached_tokens * 2 < r.prompt_tokens THEN 1 ELSE 2 END) = $11) AND ($12::int IS NULL OR ((r.arrival_ns / 3600000000000) % 24)::int = $12) AND ($13::int IS NULL OR EXISTS (SELECT 1 FROM iteration_rollups c1 WHERE c1.instance_id = r.instance_id AND c1.resolution_ns = 1000000000 AND c1.cell_ns = r.arrival_ns - r.arrival_ns % 1000000000 AND c1.max_batch_size >= $13 AND ($14::int IS NULL OR c1.max_batch_size < $14))) AND ($7::int IS NULL OR r.priority = $7)
               ORDER BY r.arrival_ns DESC LIMIT 1"#,
            f.instance_list(),
            f.engine,
            f.model,
            f.engine_version,
            f.tenants.as_deref(),
            f.lora_adapter,
            f.priority,
            f.fingerprint,
            f.prompt_tokens.0,
            f.prompt_tokens.1,
            f.cached_share,
            f.hour,
            f.batch_size.0,
            f.batch_size.1,
        )
        .fetch_optional(&self.pool)
        .await?)
    }
}

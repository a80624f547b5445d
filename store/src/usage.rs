//! Usage cells (`usage_cells`): an instance's GPU time per minute by the model, tenant and LoRA
//! adapter of the requests it served; the requests a recomputation needs, the write that
//! replaces a stretch of cells, and the window's sums by one of those keys.

use tokenscope_core::model::Nanos;

use super::{REQUEST_LOOKBACK_NS, Store, partitions::day_of, read::RequestFilter};
use crate::error::Result;

/// A request as usage needs it: when it was served and for whom.
#[derive(Clone, Debug, PartialEq)]
pub struct UsageRequest {
    pub request_id: String,
    pub model_id: i32,
    pub tenant: Option<String>,
    pub lora_adapter: Option<String>,
    pub arrival_ns: Nanos,
    pub first_scheduled_ns: Option<Nanos>,
    pub first_token_ns: Option<Nanos>,
    pub finished_ns: Nanos,
    pub prompt_tokens: i32,
    pub cached_tokens: i32,
    pub output_tokens: i32,
}

/// One stored cell of one group.
#[derive(Clone, Debug, PartialEq)]
pub struct UsageRow {
    pub cell_ns: Nanos,
    /// 0: the steps' request has no record.
    pub model_id: i32,
    /// '' for none.
    pub tenant: String,
    pub lora_adapter: String,
    pub estimated: bool,
    pub gpu_ns: i64,
    pub prefill_tokens: i64,
    pub decode_tokens: i64,
}

/// A window's usage of one group in one bucket (`Store::usage_sums`).
#[derive(Clone, Debug, PartialEq)]
pub struct UsageSum {
    pub bucket: i64,
    /// The tenant, adapter or model name; `None`: none, or (`unstored`) unknown.
    pub key: Option<String>,
    pub unstored: bool,
    pub gpu_ns: f64,
    pub estimated_ns: f64,
    pub prefill_tokens: i64,
    pub decode_tokens: i64,
}

/// What usage is summed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UsageBy {
    Tenant,
    Adapter,
    Model,
}

impl UsageBy {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "tenant" => Some(Self::Tenant),
            "adapter" => Some(Self::Adapter),
            "model" => Some(Self::Model),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::Tenant => "tenant",
            Self::Adapter => "adapter",
            Self::Model => "model",
        }
    }
}

impl Store {
    /// The requests of an instance alive in `[from, to]`, as usage needs them.
    pub async fn usage_requests(
        &self,
        instance_id: i32,
        from: Nanos,
        to: Nanos,
    ) -> Result<Vec<UsageRequest>> {
        Ok(sqlx::query_as!(
            UsageRequest,
            r#"SELECT request_id, model_id, tenant, lora_adapter, arrival_ns,
                      (detail ->> 'first_scheduled_ns')::bigint AS first_scheduled_ns,
                      (detail ->> 'first_token_ns')::bigint AS first_token_ns,
                      finished_ns, prompt_tokens, cached_tokens, output_tokens
               FROM requests
               WHERE instance_id = $1 AND arrival_ns >= $2 AND arrival_ns <= $3 AND finished_ns >= $4"#,
            instance_id,
            from - REQUEST_LOOKBACK_NS,
            to,
            from
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Replaces an instance's cells in `[from, to)` with `rows`, in one transaction.
    pub async fn put_usage(
        &self,
        instance_id: i32,
        (from, to): (Nanos, Nanos),
        rows: &[UsageRow],
    ) -> Result<()> {
        self.caches
            .partitions
            .ensure(
                &self.pool,
                "usage_cells",
                rows.iter().map(|r| day_of(r.cell_ns)),
            )
            .await?;
        let mut tx = self.pool.begin().await?;
        sqlx::query!(
            "DELETE FROM usage_cells WHERE instance_id = $1 AND cell_ns >= $2 AND cell_ns < $3",
            instance_id,
            from,
            to
        )
        .execute(&mut *tx)
        .await?;
        let col = |f: fn(&UsageRow) -> i64| rows.iter().map(f).collect::<Vec<_>>();
        sqlx::query!(
            "INSERT INTO usage_cells (instance_id, cell_ns, model_id, tenant, lora_adapter, estimated,
                 gpu_ns, prefill_tokens, decode_tokens)
             SELECT $1, * FROM UNNEST($2::bigint[], $3::int[], $4::text[], $5::text[], $6::bool[],
                 $7::bigint[], $8::bigint[], $9::bigint[])",
            instance_id,
            &col(|r| r.cell_ns),
            &rows.iter().map(|r| r.model_id).collect::<Vec<_>>(),
            &rows.iter().map(|r| r.tenant.clone()).collect::<Vec<_>>(),
            &rows
                .iter()
                .map(|r| r.lora_adapter.clone())
                .collect::<Vec<_>>(),
            &rows.iter().map(|r| r.estimated).collect::<Vec<_>>(),
            &col(|r| r.gpu_ns),
            &col(|r| r.prefill_tokens),
            &col(|r| r.decode_tokens),
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The usage of the cells in `[from, to)` that `f` matches (instances, engine, version,
    /// model, tenant, adapter), summed by `by` per bucket of `bucket_ns` from `from`.
    pub async fn usage_sums(
        &self,
        f: &RequestFilter,
        (from, to): (Nanos, Nanos),
        bucket_ns: Nanos,
        by: UsageBy,
    ) -> Result<Vec<UsageSum>> {
        Ok(sqlx::query_as!(
            UsageSum,
            r#"SELECT (u.cell_ns - $1) / $3 AS "bucket!",
                      CASE $4 WHEN 'tenant' THEN NULLIF(u.tenant, '')
                              WHEN 'adapter' THEN NULLIF(u.lora_adapter, '')
                              ELSE m.name END AS key,
                      u.model_id = 0 AS "unstored!",
                      sum(u.gpu_ns)::float8 AS "gpu_ns!",
                      COALESCE(sum(u.gpu_ns) FILTER (WHERE u.estimated), 0)::float8 AS "estimated_ns!",
                      sum(u.prefill_tokens)::bigint AS "prefill_tokens!",
                      sum(u.decode_tokens)::bigint AS "decode_tokens!"
               FROM usage_cells u JOIN instances i ON i.id = u.instance_id
                    LEFT JOIN models m ON m.id = u.model_id
               WHERE u.cell_ns >= $1 AND u.cell_ns < $2
                 AND ($5::text[] IS NULL OR i.instance_key = ANY($5)) AND ($6::text IS NULL OR i.engine = $6)
                 AND ($7::text IS NULL OR i.engine_version = $7) AND ($8::text IS NULL OR m.name = $8)
                 AND ($9::text[] IS NULL OR u.tenant = ANY($9)) AND ($10::text IS NULL OR u.lora_adapter = $10)
               GROUP BY 1, 2, 3 ORDER BY 1"#,
            from,
            to,
            bucket_ns,
            by.name(),
            f.instance_list(),
            f.engine,
            f.engine_version,
            f.model,
            f.tenants.as_deref(),
            f.lora_adapter,
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// The latest cell with usage that `f`'s instances have, for a window that ends at "now".
    pub async fn newest_usage(&self, f: &RequestFilter) -> Result<Option<Nanos>> {
        Ok(sqlx::query_scalar!(
            "SELECT max(u.cell_ns) FROM usage_cells u JOIN instances i ON i.id = u.instance_id
             WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1))",
            f.instance_list()
        )
        .fetch_one(&self.pool)
        .await?)
    }
}

//! Postgres storage, the only crate that speaks SQL: what a write takes (`batch`), one
//! transaction per batch (`write`), the compact encodings of tokens, steps and batches, and
//! readers that return model values and rows. It imports nothing from ingest, analysis or the
//! API; the server's query layer makes views of what it returns.

mod answers;
pub mod batch;
pub mod batch_block;
mod bytes;
mod context;
mod diagnoses;
mod error;
mod fingerprints;
mod incidents;
mod latency;
mod latency_cells;
mod list;
mod live;
mod partitions;
mod read;
mod secrets;
mod slow_set;
pub mod step_block;
mod steps;
pub mod token_block;
mod usage;
pub mod vocab;
mod waterfall;
mod write;

use std::sync::Arc;
use std::time::Duration;

use sqlx::{PgPool, postgres::PgPoolOptions};

use tokenscope_core::model::Nanos;

pub use answers::{AnswerRow, PromptKeyRow};
pub use diagnoses::{Alive, DiagnosisRow, Due, Stored, WorkerLock};
pub use error::{Error, Result};
pub use fingerprints::{Computed, FingerprintRow};

pub use incidents::IncidentRow;
pub use latency::{BinRow, LatencyRow, Quantiles, SetStats};
pub use latency_cells::CellRow;
pub use list::{EXACT_UP_TO, Total};
pub use live::{IngestListener, Ingested};
pub use partitions::DAY_NS;
pub use read::{
    InstanceRow, Loaded, ORDER_KEYS, Order, RequestFilter, RequestRow, TextsLater, count,
    split_list,
};
pub use slow_set::{Buckets, Slow, TallyRow};
pub use steps::{BlockKey, StoredStep};
pub use usage::{UsageBy, UsageRequest, UsageRow, UsageSum};
pub use waterfall::{BucketSum, Extent, InstanceSet, RowKey};
pub use write::{ById, HealthyAlone, Lacking, encode_tokens};

/// Key spaces of our advisory locks (so they cannot collide with another application's): writers
/// of one instance's requests and steps, and of one model's vocabulary.
const INSTANCE_LOCKS: i32 = 0x7453;
const VOCAB_LOCKS: i32 = 0x7454;

/// Resolutions at which the store sums an instance's steps as they are ingested
/// (`iteration_rollups`), ascending. Each divides a day (so a cell never straddles a daily
/// partition); the migration that created the table back-fills exactly these.
pub const ROLLUP_NS: [Nanos; 4] = [100_000_000, 1_000_000_000, 10_000_000_000, 100_000_000_000];

/// Requests are assumed to last less than this when looking back for ones that overlap a window
/// (their rows are found by arrival time, which partitions the table).
const REQUEST_LOOKBACK_NS: Nanos = 3600 * 1_000_000_000;

pub use tokenscope_core::model::CLOCK_SLACK_NS;

#[derive(Clone)]
pub struct Store {
    pool: PgPool,
    caches: Arc<Caches>,
}

#[derive(Default)]
struct Caches {
    partitions: partitions::Partitions,
    vocab: vocab::VocabCache,
    models: std::sync::Mutex<std::collections::HashMap<String, i32>>,
}

impl Store {
    /// Connects and brings the schema up to date (migrations are embedded in the binary).
    pub async fn connect(database_url: &str) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(10))
            .connect(database_url)
            .await?;
        sqlx::migrate!("../migrations")
            .run(&pool)
            .await
            .map_err(|e| Error::Internal(format!("database migration failed: {e}")))?;
        Ok(Self {
            pool,
            caches: Arc::default(),
        })
    }

    /// Open connections of the pool, and how many of them are idle.
    pub fn pool_connections(&self) -> (u32, usize) {
        (self.pool.size(), self.pool.num_idle())
    }

    /// Whether the database answers (for `/readyz`).
    pub async fn ping(&self) -> Result<()> {
        sqlx::query_scalar!("SELECT 1 AS \"one!\"")
            .fetch_one(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn has_requests(&self) -> Result<bool> {
        Ok(
            sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM requests) AS "exists!""#)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Drops the daily partitions that end before `cutoff_ns`; returns their names.
    pub async fn drop_partitions_before(&self, cutoff_ns: Nanos) -> Result<Vec<String>> {
        self.caches
            .partitions
            .drop_before(&self.pool, cutoff_ns)
            .await
    }

    /// Retention: drops the partitions older than `keep_days` days before `now_ns`.
    pub async fn drop_older_than_days(&self, keep_days: u32, now_ns: Nanos) -> Result<Vec<String>> {
        let cutoff = now_ns - i64::from(keep_days) * DAY_NS;
        self.drop_partitions_before(cutoff).await
    }

    /// Stored size of all token blocks and their token count (for the storage benchmark).
    pub async fn token_storage(&self) -> Result<(i64, i64)> {
        let row = sqlx::query!(
            r#"SELECT COALESCE(SUM(octet_length(tokens)), 0)::bigint AS "bytes!",
                      COALESCE(SUM(output_tokens), 0)::bigint AS "tokens!"
               FROM requests WHERE tokens IS NOT NULL"#
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((row.bytes, row.tokens))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_rollup_resolution_divides_a_day() {
        for r in super::ROLLUP_NS {
            assert_eq!(super::DAY_NS % r, 0, "{r} does not divide a day");
        }
        assert!(super::ROLLUP_NS.is_sorted());
    }
}

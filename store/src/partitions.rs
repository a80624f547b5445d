//! Daily time partitions of `requests`, `diagnoses`, `iteration_blocks`, their rollups, request keys, usage and latency cells: created on demand, dropped for retention.

use std::collections::HashSet;
use std::sync::Mutex;

use sqlx::PgPool;

use tokenscope_core::model::Nanos;
use tokenscope_core::model::calendar::{civil_from_days, days_from_civil};

use crate::error::Result;

pub const DAY_NS: Nanos = 86_400 * 1_000_000_000;
pub const TABLES: [&str; 8] = [
    "requests",
    "diagnoses",
    "iteration_blocks",
    "iteration_rollups",
    "request_keys",
    "usage_cells",
    "latency_cells",
    "latency_cells_fleet",
];

/// Day number since the Unix epoch of an instant.
pub fn day_of(t: Nanos) -> i64 {
    t.div_euclid(DAY_NS)
}

/// `requests_p20261130` for the day containing 2026-11-30.
pub fn partition_name(table: &str, day: i64) -> String {
    let (y, m, d) = civil_from_days(day);
    format!("{table}_p{y:04}{m:02}{d:02}")
}

/// Remembers which partitions exist so the hot path asks the database only for new days.
#[derive(Default)]
pub struct Partitions {
    known: Mutex<HashSet<(&'static str, i64)>>,
}

impl Partitions {
    pub async fn ensure(
        &self,
        pool: &PgPool,
        table: &'static str,
        days: impl IntoIterator<Item = i64>,
    ) -> Result<()> {
        // A batch spans a day or two: deduplicate before asking the cache, once per day.
        let mut missing: Vec<i64> = days.into_iter().collect();
        missing.sort_unstable();
        missing.dedup();
        {
            let known = self.known.lock().expect("partition cache poisoned");
            missing.retain(|d| !known.contains(&(table, *d)));
        }
        for day in missing {
            let name = partition_name(table, day);
            let sql = format!(
                "CREATE TABLE IF NOT EXISTS {name} PARTITION OF {table} FOR VALUES FROM ({}) TO ({})",
                day * DAY_NS,
                (day + 1) * DAY_NS
            );
            // The name and bounds are made from integers here, never from input text.
            // Two writers may race to create the same day; the loser's error is harmless if the
            // partition now exists.
            if let Err(e) = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(pool).await {
                let exists = sqlx::query_scalar::<_, bool>("SELECT to_regclass($1) IS NOT NULL")
                    .bind(&name)
                    .fetch_one(pool)
                    .await?;
                if !exists {
                    return Err(e.into());
                }
            }
            self.known
                .lock()
                .expect("partition cache poisoned")
                .insert((table, day));
        }
        Ok(())
    }

    /// Drops every partition whose day ends at or before `cutoff_ns`; returns the dropped names.
    pub async fn drop_before(&self, pool: &PgPool, cutoff_ns: Nanos) -> Result<Vec<String>> {
        let mut dropped = Vec::new();
        for table in TABLES {
            let parts: Vec<String> = sqlx::query_scalar(
                "SELECT c.relname::text FROM pg_inherits i \
                 JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent \
                 WHERE p.relname = $1 ORDER BY 1",
            )
            .bind(table)
            .fetch_all(pool)
            .await?;
            for name in parts {
                let Some(day) = parse_day(table, &name) else {
                    continue;
                };
                // Keys outlive their day by one more: a request that runs across the cut is
                // still named by iterations that are kept.
                let grace = if table == "request_keys" { DAY_NS } else { 0 };
                if (day + 1) * DAY_NS + grace <= cutoff_ns {
                    sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {name}")))
                        .execute(pool)
                        .await?;
                    self.known
                        .lock()
                        .expect("partition cache poisoned")
                        .remove(&(table, day));
                    dropped.push(name);
                }
            }
        }
        Ok(dropped)
    }
}

fn parse_day(table: &str, name: &str) -> Option<i64> {
    let digits = name.strip_prefix(table)?.strip_prefix("_p")?;
    if digits.len() != 8 {
        return None;
    }
    let (y, m, d): (i64, u32, u32) = (
        digits[..4].parse().ok()?,
        digits[4..6].parse().ok()?,
        digits[6..].parse().ok()?,
    );
    Some(days_from_civil(y, m, d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_days_round_trip() {
        // 2026-11-30T07:29:28Z
        let t = 1_796_023_768_000_000_000;
        let day = day_of(t);
        assert_eq!(partition_name("requests", day), "requests_p20261130");
        for d in [0, day, -1, 10_957, 47_482] {
            assert_eq!(
                parse_day("requests", &partition_name("requests", d)),
                Some(d)
            );
        }
        assert_eq!(
            partition_name("iteration_blocks", 0),
            "iteration_blocks_p19700101"
        );
    }
}

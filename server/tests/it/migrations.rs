//! Schema upgrades keep what users stored: a database created by the first migration, holding
//! iterations, gets their rollups back-filled and its steps moved into blocks when the server
//! migrates it to the current schema.

use crate::common;

use std::borrow::Cow;

use common::*;
use sqlx::{Connection, PgConnection};
use tokenscope::store::step_block::{self, Step};

#[tokio::test]
async fn the_rollup_migration_back_fills_stored_iterations() {
    let url = fresh_database().await;
    let mut db = PgConnection::connect(&url).await.unwrap();
    let mut first = sqlx::migrate!("../migrations");
    first.migrations = Cow::Owned(first.migrations[..1].to_vec());
    first.run(&mut db).await.unwrap();

    // 250 steps of 12 ms from T0 (2026-11-30) as the first schema stored them.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE iterations_p20261130 PARTITION OF iterations FOR VALUES FROM ({}) TO ({})",
        T0 - T0.rem_euclid(86_400_000_000_000),
        T0 - T0.rem_euclid(86_400_000_000_000) + 86_400_000_000_000
    )))
    .execute(&mut db)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO iterations (instance_id, iteration_id, start_ns, end_ns, running, waiting, kv_cache_usage,
             batch_size, prefill_tokens, decode_tokens, batch)
         SELECT 1, k, $1 + k * 12000000, $1 + k * 12000000 + 11000000, 4, 0, 0.5, 4, (k % 3)::int, 4, ''::bytea
         FROM generate_series(0::bigint, 249::bigint) AS k",
    )
    .bind(T0)
    .execute(&mut db)
    .await
    .unwrap();

    sqlx::migrate!("../migrations").run(&mut db).await.unwrap();
    let sums: Vec<(i64, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT resolution_ns, count(*), sum(steps)::bigint, sum(prefill_tokens)::bigint,
                max(end_ns) FROM iteration_rollups_p20261130 GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    let prefill: i64 = (0..250).map(|k| k % 3).sum();
    let last_end = T0 + 249 * 12_000_000 + 11_000_000;
    // 3 s of steps: 30 cells of 0.1 s, 3 of 1 s, one of 10 s and one of 100 s.
    assert_eq!(
        sums,
        [
            (100_000_000, 30, 250, prefill, last_end),
            (1_000_000_000, 3, 250, prefill, last_end),
            (10_000_000_000, 1, 250, prefill, last_end),
            (100_000_000_000, 1, 250, prefill, last_end),
        ]
    );

    // The same steps were moved into blocks: one per second, each step's columns intact.
    let blocks: Vec<(i64, i64, i32, Vec<u8>)> = sqlx::query_as(
        "SELECT second_ns, first_start_ns, steps, block FROM iteration_blocks ORDER BY second_ns",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    let second = |t: i64| t - t % 1_000_000_000;
    assert_eq!(
        blocks.iter().map(|b| b.0).collect::<Vec<_>>(),
        [
            second(T0),
            second(T0) + 1_000_000_000,
            second(T0) + 2_000_000_000
        ]
    );
    let mut steps = Vec::new();
    for (second_ns, first_start_ns, count, block) in &blocks {
        let block = step_block::decode(block).unwrap();
        assert_eq!(block.steps.len(), *count as usize);
        assert_eq!(block.steps[0].start_ns, *first_start_ns);
        assert!(block.steps.iter().all(|s| second(s.start_ns) == *second_ns));
        assert!((0..block.steps.len()).all(|k| block.batch(k).is_empty()));
        steps.extend(block.steps);
    }
    let expected: Vec<Step> = (0..250)
        .map(|k| Step {
            iteration_id: k,
            start_ns: T0 + k * 12_000_000,
            end_ns: T0 + k * 12_000_000 + 11_000_000,
            running: 4,
            waiting: 0,
            kv_cache_usage: 0.5,
            batch_size: 4,
            prefill_tokens: (k % 3) as i32,
            decode_tokens: 4,
        })
        .collect();
    assert_eq!(steps, expected);
}

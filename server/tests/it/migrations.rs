//! Schema upgrades keep what users stored: a database created by the first migration, holding
//! iterations, gets their rollups back-filled and its steps moved into blocks when the server
//! migrates it to the current schema; requests stored with their prefix cache inside `detail`
//! get it moved to its own column, and read back the same.

use crate::common;

use std::borrow::Cow;

use common::*;
use sqlx::{Connection, PgConnection};
use tokenscope::store::Store;
use tokenscope::store::step_block::{self, Step};
use tokenscope_core::model::PrefixCache;

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

#[tokio::test]
async fn the_prefix_cache_moves_out_of_detail_and_reads_back_the_same() {
    let url = fresh_database().await;
    let mut db = PgConnection::connect(&url).await.unwrap();
    let mut before = sqlx::migrate!("../migrations");
    let last = before
        .migrations
        .iter()
        .position(|m| m.description.contains("prefix cache column"))
        .expect("the prefix cache migration");
    before.migrations = Cow::Owned(before.migrations[..last].to_vec());
    before.run(&mut db).await.unwrap();

    // Two requests as the schema before stored them: one with a prefix cache inside `detail`
    // (beside its tenant), one without.
    let day = T0 - T0.rem_euclid(86_400_000_000_000);
    for statement in [
        format!(
            "CREATE TABLE requests_p20261130 PARTITION OF requests FOR VALUES FROM ({day}) TO ({})",
            day + 86_400_000_000_000
        ),
        "INSERT INTO models (name) VALUES ('m')".to_string(),
        "INSERT INTO instances (instance_key, engine, engine_version, model_id, role, host, first_seen_ns,
             last_seen_ns) VALUES ('gpu-0', 'vllm', '0.11', 1, 'colocated', 'h', 0, 0)"
            .to_string(),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut db)
            .await
            .unwrap();
    }
    let cache = PrefixCache {
        gpu_tokens: 32,
        cpu_tokens: 0,
        external_tokens: 0,
        block_size: 16,
        block_hashes: vec![u64::MAX, 7, 1 << 63],
        blocks: 40,
    };
    let detail = |with: bool| {
        let mut d = serde_json::json!({
            "queued_ns": null, "first_scheduled_ns": null, "first_token_ns": null,
            "kv_transfer": null, "sampling": {}, "tenant": "acme"
        });
        if with {
            d["prefix_cache"] = serde_json::to_value(&cache).unwrap();
        }
        d
    };
    for (k, with) in [(0, true), (1, false)] {
        sqlx::query(
            "INSERT INTO requests (instance_id, model_id, request_id, arrival_ns, finished_ns, e2e_ns,
                 prompt_tokens, output_tokens, cached_tokens, finish_reason, detail)
             VALUES (1, 1, $1, $2, $2 + 1000000000, 1000000000, 640, 10, 32, 'stop', $3)",
        )
        .bind(format!("old-{k}"))
        .bind(T0 + k)
        .bind(detail(with))
        .execute(&mut db)
        .await
        .unwrap();
    }

    let store = Store::connect(&url).await.unwrap();
    let read = |id: &'static str| {
        let store = &store;
        async move {
            let loaded = store.load_request_rows(id, &[]).await.unwrap();
            loaded[0].trace.served.clone()
        }
    };
    let with = read("old-0").await;
    assert_eq!(with.prefix_cache.as_ref(), Some(&cache));
    assert_eq!(with.tenant.as_deref(), Some("acme"));
    let without = read("old-1").await;
    assert_eq!(without.prefix_cache, None);
    assert_eq!(without.tenant.as_deref(), Some("acme"));
    let columns: Vec<(String, bool, bool, Option<String>)> = sqlx::query_as(
        "SELECT request_id, detail ? 'prefix_cache', prefix_cache IS NOT NULL, tenant
         FROM requests ORDER BY request_id",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    assert_eq!(
        columns,
        [
            ("old-0".into(), false, true, Some("acme".into())),
            ("old-1".into(), false, false, Some("acme".into())),
        ]
    );
    // The prompt's key is kept for the request with a chain, and only for it.
    let keys: Vec<Option<String>> =
        sqlx::query_scalar("SELECT prompt_key FROM requests ORDER BY request_id")
            .fetch_all(&mut db)
            .await
            .unwrap();
    assert!(keys[0].as_ref().is_some_and(|k| k.len() == 32), "{keys:?}");
    assert_eq!(keys[1], None);
    // So is the prompt's start (the slow set's tally), as the chain's first hash.
    let starts: Vec<Option<String>> =
        sqlx::query_scalar("SELECT prompt_start FROM requests ORDER BY request_id")
            .fetch_all(&mut db)
            .await
            .unwrap();
    assert_eq!(starts, [Some("ffffffffffffffff".to_string()), None]);
}

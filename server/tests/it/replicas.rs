//! Server replicas are stateless: two servers on one database, sent the same requests and
//! iterations at the same time, store each once and count each step once in the rollups.

use sqlx::{Connection, PgConnection};

use crate::common::*;
use tokenscope::fixtures;

const BATCHES: usize = 12;
const REQUESTS: usize = 8;

#[tokio::test]
async fn two_replicas_ingesting_the_same_batches_store_each_item_once() {
    let a = spawn_app().await;
    let b = spawn_on(a.database_url.clone(), |_| {}).await;
    let batches: Vec<_> = (0..BATCHES)
        .map(|k| {
            let requests: Vec<_> = (0..REQUESTS)
                .map(|i| {
                    let n = k * REQUESTS + i;
                    let at = T0 + n as i64 * 50_000_000;
                    fixtures::request(&format!("r-{n}"), at, 30, 2, n as u64 * 100 + 1, n as u64)
                })
                .collect();
            let its = fixtures::shared_iterations(&requests, 2);
            // Two instances, so writers of different instances also interleave.
            let instance = format!("gpu-{}", k % 2);
            export(&fixtures::resource(&instance), &requests, &its)
        })
        .collect();
    let iterations: usize = batches
        .iter()
        .map(|e| e.resource_traces[0].iterations.len())
        .sum();

    // Every batch to both replicas at once, all batches in flight together.
    let (mut ga, mut gb) = (a.grpc().await, b.grpc().await);
    let sends = batches.iter().map(|batch| {
        let (mut ga, mut gb) = (ga.clone(), gb.clone());
        let batch = batch.clone();
        async move {
            let (ra, rb) = tokio::join!(ga.export(batch.clone()), gb.export(batch));
            let (ra, rb) = (ra.unwrap().into_inner(), rb.unwrap().into_inner());
            // Between them, each request was stored by exactly one replica.
            assert_eq!(ra.accepted_requests + rb.accepted_requests, REQUESTS as u64);
            assert_eq!(
                ra.duplicate_requests + rb.duplicate_requests,
                REQUESTS as u64
            );
            ra.accepted_iterations + rb.accepted_iterations
        }
    });
    let stored_iterations: u64 = futures_sum(sends).await;
    assert_eq!(
        stored_iterations as usize, iterations,
        "each step stored once"
    );

    // And once more to each, in turn: all duplicates.
    for batch in &batches {
        let r = ga.export(batch.clone()).await.unwrap().into_inner();
        assert_eq!((r.accepted_requests, r.accepted_iterations), (0, 0));
        let r = gb.export(batch.clone()).await.unwrap().into_inner();
        assert_eq!((r.accepted_requests, r.accepted_iterations), (0, 0));
    }

    let mut db = PgConnection::connect(&a.database_url).await.unwrap();
    let count = |sql: &'static str| sqlx::query_scalar::<_, i64>(sql);
    let requests = count("SELECT count(*) FROM requests")
        .fetch_one(&mut db)
        .await;
    assert_eq!(requests.unwrap() as usize, BATCHES * REQUESTS);
    let distinct = count("SELECT count(DISTINCT (instance_id, request_id)) FROM requests")
        .fetch_one(&mut db)
        .await;
    assert_eq!(distinct.unwrap() as usize, BATCHES * REQUESTS);
    assert_eq!(stored_steps(&mut db).await.len(), iterations);
    // The rollups at every resolution sum each step once.
    let rolled: Vec<i64> = sqlx::query_scalar(
        "SELECT sum(steps)::bigint FROM iteration_rollups GROUP BY resolution_ns ORDER BY resolution_ns",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    assert!(!rolled.is_empty());
    assert!(
        rolled.iter().all(|&s| s as usize == iterations),
        "{rolled:?}"
    );
    let keys = count("SELECT count(*) FROM request_keys")
        .fetch_one(&mut db)
        .await;
    assert_eq!(
        keys.unwrap() as usize,
        BATCHES * REQUESTS,
        "one key per request"
    );
}

#[tokio::test]
async fn a_step_twice_in_one_batch_is_stored_and_rolled_up_once() {
    let app = spawn_app().await;
    let requests = [fixtures::request("twice", T0, 20, 0, 1, 1)];
    let mut its = fixtures::shared_iterations(&requests, 0);
    let steps = its.len();
    its.push(its[3].clone());
    let batch = export(&fixtures::resource("gpu-0"), &requests, &its);
    let r = app.grpc().await.export(batch).await.unwrap().into_inner();
    assert_eq!(r.accepted_iterations as usize, steps);

    let mut db = PgConnection::connect(&app.database_url).await.unwrap();
    let stored = stored_steps(&mut db).await;
    assert_eq!(stored.len(), steps);
    let rolled: Vec<(i64, i64, i64)> = sqlx::query_as(
        "SELECT sum(steps)::bigint, sum(decode_tokens)::bigint, sum(prefill_tokens)::bigint \
         FROM iteration_rollups GROUP BY resolution_ns",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    let raw = (
        stored.len() as i64,
        stored.iter().map(|s| i64::from(s.1.decode_tokens)).sum(),
        stored.iter().map(|s| i64::from(s.1.prefill_tokens)).sum(),
    );
    assert_eq!(rolled.len(), 4, "every resolution");
    assert!(rolled.iter().all(|&r| r == raw), "{rolled:?} vs {raw:?}");
}

#[tokio::test]
async fn a_token_another_replica_stored_first_with_another_text_keeps_its_own_text() {
    let a = spawn_app().await;
    let b = spawn_on(a.database_url.clone(), |_| {}).await;
    // The same model on two instances; b's engine decodes every token differently from a's.
    let first = fixtures::request("first", T0, 40, 3, 1, 7);
    let mut second = fixtures::request("second", T0 + 1_000_000, 40, 3, 1, 7);
    decoded_differently(&mut second);
    for (app, instance, r) in [(&a, "gpu-a", &first), (&b, "gpu-b", &second)] {
        let batch = export(&fixtures::resource(instance), std::slice::from_ref(r), &[]);
        let reply = app.grpc().await.export(batch).await.unwrap().into_inner();
        assert_eq!(reply.accepted_requests, 1);
    }

    let mut db = PgConnection::connect(&a.database_url).await.unwrap();
    let tilde: i64 = sqlx::query_scalar("SELECT count(*) FROM vocab WHERE text LIKE '~%'")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(tilde, 0, "the vocabulary keeps the first replica's texts");
    for (app, sent) in [(&a, &first), (&b, &second), (&a, &second), (&b, &first)] {
        let detail: tokenscope_core::api::RequestDetail = serde_json::from_value(
            app.get_json(&format!("/api/v1/requests/{}", sent.request_id))
                .await,
        )
        .unwrap();
        let got: Vec<_> = detail.tokens.iter().map(|t| t.text.clone()).collect();
        let want: Vec<_> = sent.tokens.iter().map(|t| t.text.clone()).collect();
        assert_eq!(got, want, "{}: its own token texts", sent.request_id);
        let got: Vec<_> = detail
            .tokens
            .iter()
            .flat_map(|t| t.candidates.iter().map(|c| c.text.clone()))
            .collect();
        let want: Vec<_> = sent
            .tokens
            .iter()
            .flat_map(|t| t.candidates.iter().map(|c| c.text.clone()))
            .collect();
        assert_eq!(got, want, "{}: its own candidate texts", sent.request_id);
    }
}

/// Runs the futures concurrently and adds up their results.
async fn futures_sum<F>(futures: impl Iterator<Item = F>) -> u64
where
    F: std::future::Future<Output = u64> + Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut total = 0;
    for h in handles {
        total += h.await.unwrap();
    }
    total
}

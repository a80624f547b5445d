//! The waterfall's iteration lane against the raw steps: buckets summed from the ingest-time
//! rollups (or from raw rows, for narrow windows) equal the steps bucketed on the same grid, a
//! resent batch is not summed twice, and a window whose steps fit the width lists every one.

use crate::common;

use common::*;
use sqlx::Connection;
use tokenscope_core::analysis::waterfall::{Lane, Step, bucketize, grid};
use tokenscope_core::model::Phase;
use tokenscope_sim as sim;

#[tokio::test]
async fn lane_buckets_equal_the_raw_steps_bucketed_on_the_same_grid() {
    let app = spawn_app().await;
    let mut rng = tokenscope::fixtures::Rng::new(3);
    let reqs = sim::load::poisson("lane", T0, 3.0, 150.0, false, &mut rng);
    let profile = sim::cost::profile("llama-8b-h100").unwrap();
    let run = sim::traffic("lane-gpu", profile, reqs, 3);
    let mut steps: Vec<Step> = run
        .output
        .iterations
        .iter()
        .map(|i| Step {
            start_ns: i.start_ns,
            end_ns: i.end_ns,
            prefill_tokens: i.tokens_in(Phase::Prefill),
            decode_tokens: i.tokens_in(Phase::Decode),
            batch_size: i.batch.len() as u32,
            drafts: i.drafts(),
        })
        .collect();
    steps.sort_by_key(|s| s.start_ns);
    assert!(steps.len() > 10_000, "{} steps", steps.len());
    let url = format!("http://{}", app.running.grpc_addr);
    // The second delivery is all duplicates: the rollups must not sum it again.
    for _ in 0..2 {
        sim::deliver::send(
            &url,
            sim::deliver::batches(std::slice::from_ref(&run)),
            f64::INFINITY,
            false,
        )
        .await
        .unwrap();
    }
    // Batches name requests by key: one key per request, however many deliveries named it.
    let mut db = sqlx::PgConnection::connect(&app.database_url)
        .await
        .unwrap();
    let (keys, named): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT (instance_id, request_id)) FROM request_keys",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(keys, named);
    assert_eq!(keys as usize, run.output.requests.len());
    let end = steps.last().unwrap().start_ns + 1;
    let s = 1_000_000_000;
    // (from, to, width, the rollup the grid should read)
    let cases = [
        (T0, end, 60, Some(s)),
        (T0 + 123_456_789, end, 700, Some(s / 10)),
        (T0 + 10 * s, T0 + 40 * s, 1000, None),
        (T0 + 10 * s + 7, T0 + 12 * s, 1000, None),
    ];
    for (from, to, width, rollup) in cases {
        let reply = app
            .get_json(&format!(
                "/api/v1/waterfall?instance=lane-gpu&from={from}&to={to}&width_px={width}"
            ))
            .await;
        let lane: Lane = serde_json::from_value(reply["lane"].clone()).unwrap();
        let g = grid(from, to, width, &tokenscope::store::ROLLUP_NS);
        assert_eq!(g.rollup_ns, rollup, "{from}..{to} at {width}px");
        let inside = |lo| -> Vec<Step> {
            steps
                .iter()
                .filter(|x| x.start_ns >= lo && x.start_ns < to)
                .copied()
                .collect()
        };
        let expected = if inside(from).len() <= width as usize {
            Lane::Steps {
                steps: inside(from),
            }
        } else {
            Lane::Buckets {
                bucket_ns: g.bucket_ns,
                buckets: bucketize(&inside(g.origin_ns), g.origin_ns, g.bucket_ns),
            }
        };
        assert_eq!(lane, expected, "{from}..{to} at {width}px");
        if let Lane::Buckets { buckets, .. } = &lane {
            assert!(buckets.len() <= width as usize);
        }
    }

    // Packed at 2.5 s a pixel, most requests are slivers: runs of them come back as clusters,
    // and every request is either a track or counted in exactly one cluster.
    let packed = app
        .get_json(&format!(
            "/api/v1/waterfall?instance=lane-gpu&from={T0}&to={end}&width_px=60&compact=true"
        ))
        .await;
    let tracks = packed["tracks"].as_array().unwrap().len();
    let clusters = packed["clusters"].as_array().unwrap();
    let clustered: u64 = clusters
        .iter()
        .map(|c| c["requests"].as_u64().unwrap())
        .sum();
    assert!(!clusters.is_empty(), "{packed}");
    assert_eq!(tracks + clustered as usize, run.output.requests.len());
    assert!(
        tracks + clusters.len() < run.output.requests.len(),
        "{tracks} tracks and {} clusters for {} requests",
        clusters.len(),
        run.output.requests.len()
    );
}

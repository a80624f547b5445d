//! Fleet-scale reads (issue 31, item 3): a day of Poisson traffic on 100 simulated 8B/H100
//! instances, about 10 million requests, stored over native gRPC into the real server with its
//! findings worker running, then the reads an SRE makes during an incident, each timed over HTTP
//! (p50/p95 of repeated runs), with Postgres's plan of every statement they ran.
//!
//! Answers are a twentieth of the usual length (2–30 tokens, mean 16): at 300 tokens a request
//! the day would be 3 billion tokens, more than this machine's disk; the reads measured here read
//! requests, findings, rollups and steps, not the tokens. Instances run at 0.5–1.5× the mean rate
//! (spread by their number), so there is a busiest instance, hour and minute to look at.
//!
//! `TOKENSCOPE_FLEET_DATABASE_URL` keeps the database: a later run finds the fleet stored and only
//! measures (`scripts/bench fleet` keeps one under `target/fleet-pg`). Without it, a fresh database
//! on `TOKENSCOPE_TEST_DATABASE_URL`. `TOKENSCOPE_FLEET_REQUESTS` (10,000,000),
//! `TOKENSCOPE_FLEET_INSTANCES` (100) and `TOKENSCOPE_FLEET_HOURS` (24) make it smaller;
//! `TOKENSCOPE_FLEET_RUNS` (20) sets how often each read is timed.

/// The allocator the `tokenscope` binary runs with (`server/src/main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../tests/it/common/mod.rs"]
#[allow(dead_code)] // the benches use only part of the test harness
mod common;
#[path = "support/settings.rs"]
mod settings;
#[path = "support/timed_reads.rs"]
mod timed_reads;

use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};

use tokenscope_core::model::{Nanos, Role};
use tokenscope_sim as sim;

/// 2026-11-02 00:00 UTC: the simulated day.
const START: Nanos = 1_793_577_600 * 1_000_000_000;
const SECOND: Nanos = 1_000_000_000;
/// Instances simulated and sent at once (the simulator is one thread per instance).
const AT_ONCE: usize = 2;

#[tokio::main]
async fn main() {
    let requests: f64 = settings::env_or("TOKENSCOPE_FLEET_REQUESTS", 10_000_000.0);
    let instances: usize = settings::env_or("TOKENSCOPE_FLEET_INSTANCES", 100);
    let hours: f64 = settings::env_or("TOKENSCOPE_FLEET_HOURS", 24.0);
    let end = START + (hours * 3600.0) as Nanos * SECOND;
    let database_url = match std::env::var("TOKENSCOPE_FLEET_DATABASE_URL") {
        Ok(url) => url,
        Err(_) => common::fresh_database().await,
    };
    let app = common::spawn_on(database_url.clone(), |c| {
        c.findings_settle = Some(Duration::from_secs(5));
    })
    .await;
    let mut db = PgConnection::connect(&database_url).await.unwrap();
    let stored: i64 =
        sqlx::query_scalar("SELECT count(*) FROM instances WHERE instance_key LIKE 'fleet-%'")
            .fetch_one(&mut db)
            .await
            .unwrap();
    if stored == 0 {
        load(&app, requests, instances, hours).await;
        wait_for_findings(&app).await;
        let t = Instant::now();
        sqlx::query("VACUUM ANALYZE")
            .execute(&mut db)
            .await
            .unwrap();
        println!("  VACUUM ANALYZE in {:.0} s", t.elapsed().as_secs_f64());
    } else {
        println!("the fleet is stored already ({stored} instances): measuring only");
        wait_for_findings(&app).await;
    }
    print_sizes(&mut db).await;
    let cases = cases(&app.http, &mut db, end).await;
    for (name, url) in &cases {
        measure(&app.client, name, url).await;
    }
    if std::env::var_os("TOKENSCOPE_FLEET_EXPLAIN").is_some() {
        explain(&database_url, &mut db, &app.http, &cases).await;
    }
}

/// Each read once more on a second server whose connections run `auto_explain`: Postgres logs
/// the plan of every statement with its timings and buffers (after the timed runs, which the
/// instrumentation would slow), each case's preceded by a `fleet case:` line.
async fn explain(
    database_url: &str,
    db: &mut PgConnection,
    first_base: &str,
    cases: &[(String, String)],
) {
    let name: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(&mut *db)
        .await
        .unwrap();
    let settings = [
        "session_preload_libraries = 'auto_explain'",
        "auto_explain.log_min_duration = 0",
        "auto_explain.log_analyze = on",
        "auto_explain.log_buffers = on",
        "auto_explain.log_nested_statements = on",
    ];
    for s in settings {
        let sql = format!("ALTER DATABASE \"{name}\" SET {s}");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut *db)
            .await
            .unwrap();
    }
    let second = common::spawn_on(database_url.into(), |_| {}).await;
    for (case, url) in cases {
        let marker = format!(
            "DO $$ BEGIN RAISE LOG 'fleet case: {}'; END $$",
            case.replace('\'', "''")
        );
        sqlx::query(sqlx::AssertSqlSafe(marker))
            .execute(&mut *db)
            .await
            .unwrap();
        let url = url.replacen(first_base, &second.http, 1);
        let response = second.client.get(&url).send().await.unwrap();
        assert!(response.status().is_success(), "{url}");
        response.bytes().await.unwrap();
    }
    let sql = format!("ALTER DATABASE \"{name}\" RESET ALL");
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(&mut *db)
        .await
        .unwrap();
}

/// Simulates and sends each instance's day, [`AT_ONCE`] at a time; prints how long it took and
/// how far the findings worker was behind after each pair.
async fn load(app: &common::TestApp, requests: f64, instances: usize, hours: f64) {
    let mean_rate = requests / instances as f64 / (hours * 3600.0);
    let url = format!("http://{}", app.running.grpc_addr);
    let profile = sim::cost::profile("llama-8b-h100").unwrap();
    let t = Instant::now();
    let (mut sent, mut tokens) = (0u64, 0u64);
    for first in (0..instances).step_by(AT_ONCE) {
        let pair: Vec<_> = (first..(first + AT_ONCE).min(instances))
            .map(|k| {
                // 0.5× to 1.5× the mean rate, by instance number.
                let spread = if instances > 1 {
                    k as f64 / (instances - 1) as f64
                } else {
                    0.5
                };
                let rate = mean_rate * (0.5 + spread);
                let name = format!("fleet-{k:03}");
                let mut rng = sim::Rng::new(1_000 + k as u64);
                let mut reqs = sim::load::poisson(
                    &format!("{name}-req"),
                    START,
                    rate,
                    hours * 3600.0,
                    false,
                    &mut rng,
                );
                for r in &mut reqs {
                    r.output_tokens = (r.output_tokens / 20).max(2);
                }
                let resource = sim::scenarios::resource(&name, Role::Colocated);
                let seed = 1_000 + k as u64;
                let (rx, simulation) = sim::deliver::stream(resource, move |emit| {
                    sim::traffic_events(profile, reqs, seed, emit)
                });
                let url = url.clone();
                tokio::spawn(async move {
                    let d = sim::deliver::send_stream(&url, rx, f64::INFINITY, false)
                        .await
                        .unwrap();
                    simulation.await.unwrap();
                    d
                })
            })
            .collect();
        for d in pair {
            let d = d.await.unwrap();
            assert_eq!(d.rejected, 0, "the server rejected batches");
            sent += d.requests;
            tokens += d.tokens;
        }
        let (oldest, queued) = app.running.store.diagnosis_backlog().await.unwrap();
        println!(
            "  {:>3} of {instances} instances: {sent} requests, {tokens} tokens in {:.0} s; findings queue {queued} stretches, oldest {:.0} s",
            (first + AT_ONCE).min(instances),
            t.elapsed().as_secs_f64(),
            oldest.as_secs_f64()
        );
    }
    let took = t.elapsed().as_secs_f64();
    println!(
        "stored {sent} requests ({tokens} output tokens) on {instances} instances in {took:.0} s: {:.0} requests/s, {:.0} tokens/s",
        sent as f64 / took,
        tokens as f64 / took
    );
}

/// Waits until the server's findings worker has diagnosed everything queued; prints how long.
async fn wait_for_findings(app: &common::TestApp) {
    let took = common::findings_settled(&app.running.store, Duration::MAX).await;
    println!(
        "  findings worker caught up {:.0} s after the last batch",
        took.as_secs_f64()
    );
}

async fn print_sizes(db: &mut PgConnection) {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT relname::text, pg_total_relation_size(oid) FROM pg_class
         WHERE relkind IN ('r', 'p') AND relnamespace = 'public'::regnamespace
         ORDER BY 2 DESC LIMIT 8",
    )
    .fetch_all(&mut *db)
    .await
    .unwrap();
    let requests: i64 = sqlx::query_scalar("SELECT count(*) FROM requests")
        .fetch_one(&mut *db)
        .await
        .unwrap();
    let all: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(&mut *db)
        .await
        .unwrap();
    println!(
        "  {requests} requests stored; database {:.1} GB ({:.0} bytes a request)",
        all as f64 / 1e9,
        all as f64 / requests.max(1) as f64
    );
    for (name, bytes) in rows {
        println!("    {name:<24} {:>8.2} GB", bytes as f64 / 1e9);
    }
}

/// The busiest instance (most requests), its busiest minute, and the busiest hour of the fleet.
async fn busiest(db: &mut PgConnection) -> (String, Nanos, Nanos) {
    let (instance, minute): (String, i64) = sqlx::query_as(
        "SELECT i.instance_key, r.arrival_ns / 60000000000 AS m FROM requests r
         JOIN instances i ON i.id = r.instance_id
         WHERE r.instance_id = (SELECT instance_id FROM requests GROUP BY 1 ORDER BY count(*) DESC LIMIT 1)
         GROUP BY 1, 2 ORDER BY count(*) DESC LIMIT 1",
    )
    .fetch_one(&mut *db)
    .await
    .unwrap();
    let hour: i64 = sqlx::query_scalar(
        "SELECT arrival_ns / 3600000000000 AS h FROM requests GROUP BY 1 ORDER BY count(*) DESC LIMIT 1",
    )
    .fetch_one(&mut *db)
    .await
    .unwrap();
    (instance, minute * 60 * SECOND, hour * 3600 * SECOND)
}

/// The reads, each with the URL that makes it: the explorer (no filter, an instance, a cause,
/// slowest first), the day's latency chart, compare, a window diagnosis, a waterfall, find by id.
async fn cases(base: &str, db: &mut PgConnection, end: Nanos) -> Vec<(String, String)> {
    let (instance, minute, hour) = busiest(db).await;
    // A request from the middle of the day, as a ticket would name one.
    let some_id: String = sqlx::query_scalar(
        "SELECT request_id FROM requests WHERE arrival_ns >= $1 ORDER BY arrival_ns LIMIT 1",
    )
    .bind(START + (end - START) / 2)
    .fetch_one(&mut *db)
    .await
    .unwrap();
    let cause: String = sqlx::query_scalar(
        "SELECT c FROM diagnoses, unnest(causes) AS c GROUP BY c ORDER BY count(*) DESC LIMIT 1",
    )
    .fetch_one(&mut *db)
    .await
    .unwrap_or_else(|_| "queue_backlog".into());
    let day = format!("from={START}&to={end}");
    let six = 6 * 3600 * SECOND;
    vec![
        (
            "explorer first page, whole day".to_string(),
            format!("{base}/api/v1/requests?{day}&limit=100"),
        ),
        (
            format!("explorer, instance {instance}"),
            format!("{base}/api/v1/requests?{day}&instance={instance}&limit=100"),
        ),
        (
            format!("explorer, cause {cause}"),
            format!("{base}/api/v1/requests?{day}&cause={cause}&limit=100"),
        ),
        (
            "explorer, slowest TTFT first".into(),
            format!("{base}/api/v1/requests?{day}&order=ttft_desc&limit=100"),
        ),
        (
            "latency chart, 24 h".into(),
            format!("{base}/api/v1/latency?{day}&width_px=1160"),
        ),
        (
            "compare two 6 h windows".into(),
            format!(
                "{base}/api/v1/compare?a_from={START}&a_to={}&b_from={}&b_to={}",
                START + six,
                START + six,
                START + 2 * six
            ),
        ),
        (
            "window diagnosis, busiest hour".into(),
            format!(
                "{base}/api/v1/diagnosis?from={hour}&to={}&limit=500",
                hour + 3600 * SECOND
            ),
        ),
        (
            format!("waterfall, {instance}'s busiest minute"),
            format!(
                "{base}/api/v1/waterfall?instance={instance}&from={minute}&to={}&width_px=1200",
                minute + 60 * SECOND
            ),
        ),
        (
            "find by id".into(),
            format!("{base}/api/v1/requests?{day}&find={some_id}&limit=100"),
        ),
        (
            "a request by id".into(),
            format!("{base}/api/v1/requests/{some_id}"),
        ),
    ]
}

/// The query `TOKENSCOPE_FLEET_RUNS` times (20).
async fn measure(client: &reqwest::Client, name: &str, url: &str) {
    timed_reads::measure(
        client,
        name,
        url,
        settings::env_or("TOKENSCOPE_FLEET_RUNS", 20),
    )
    .await;
}

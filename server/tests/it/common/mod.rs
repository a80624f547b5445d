//! Test harness: a fresh database per test on the test cluster, and the real server on loopback.

pub mod load;
pub mod process;
pub mod vllm;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use sqlx::{Connection, PgConnection};
use tokenscope::server::{self, Config, Running};
use tokenscope::store::step_block::{self, Step};
use tokenscope_core::model::{Iteration, RequestTrace, Resource};
use tokenscope_proto::v1::{self, trace_ingest_client::TraceIngestClient};
use tokenscope_proto::wire::to_wire;

pub struct TestApp {
    pub running: Running,
    pub http: String,
    pub client: reqwest::Client,
    pub database_url: String,
}

/// The admin URL of the test cluster; `scripts/test` starts one and sets it.
fn admin_url() -> String {
    std::env::var("TOKENSCOPE_TEST_DATABASE_URL").expect(
        "TOKENSCOPE_TEST_DATABASE_URL is not set: run `scripts/test`, which starts a throwaway Postgres \
         and sets it, or point it at a cluster where you may create databases",
    )
}

/// Creates an empty database with a name unique to this test run.
pub async fn fresh_database() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let admin = admin_url();
    let name = format!(
        "ts_test_{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let mut conn = PgConnection::connect(&admin)
        .await
        .expect("connect to the test cluster");
    drop_stale(&mut conn).await;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .expect("create test database");
    let (base, _) = admin.rsplit_once('/').expect("database URL has a path");
    format!("{base}/{name}")
}

/// Drops, once per test process, the databases of test processes that are gone: each test makes
/// one (about 9 MB) and nothing drops it when the test ends, so on a long-lived cluster (a
/// developer's, not CI's throwaway one) they piled up by the thousand. A database whose process
/// is alive (this one, or another test binary running now) is kept.
async fn drop_stale(conn: &mut PgConnection) {
    static SWEPT: AtomicBool = AtomicBool::new(false);
    if SWEPT.swap(true, Ordering::SeqCst) {
        return;
    }
    let names: Vec<String> =
        sqlx::query_scalar(r"SELECT datname FROM pg_database WHERE datname LIKE 'ts\_test\_%'")
            .fetch_all(&mut *conn)
            .await
            .unwrap_or_default();
    for name in names {
        let Some(pid) = name.split('_').nth(2).and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let drop = format!("DROP DATABASE IF EXISTS \"{name}\"");
        let _ = sqlx::query(sqlx::AssertSqlSafe(drop))
            .execute(&mut *conn)
            .await;
    }
}

/// Runs `test` on worker threads built like the binary's (`main.rs`): rendering a page needs
/// larger stacks in a debug build than a test thread has.
pub fn on_server_stacks<F: std::future::Future>(test: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(16 << 20)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(test)
}

/// Waits until the findings worker has diagnosed everything queued; how long that took. Fails
/// past `within`.
pub async fn findings_settled(
    store: &tokenscope::store::Store,
    within: std::time::Duration,
) -> std::time::Duration {
    let started = std::time::Instant::now();
    loop {
        let (_, waiting) = store.diagnosis_backlog().await.unwrap();
        if waiting == 0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{waiting} stretches still queued after {within:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Starts the real server (HTTP + gRPC on ephemeral loopback ports) on a fresh database.
pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// [`spawn_app`] with some of the server's settings changed.
pub async fn spawn_app_with(change: impl FnOnce(&mut Config)) -> TestApp {
    spawn_on(fresh_database().await, change).await
}

/// The configuration tests start from: loopback on any free ports, budgets as in production.
pub fn spawn_config(database_url: String) -> Config {
    Config {
        http_addr: "127.0.0.1:0".parse().unwrap(),
        grpc_addr: "127.0.0.1:0".parse().unwrap(),
        database_url,
        site_root: "target/site".into(),
        max_message_bytes: 64 << 20,
        ingest_budget_bytes: 256 << 20,
        redact_text: false,
        retention_days: 0,
        assembly_timeout: std::time::Duration::from_secs(2),
        access: Default::default(),
        // Off unless a test turns it on: the others read diagnoses computed when asked.
        findings_settle: None,
        otlp_tenant_attributes: Vec::new(),
        metrics_tenants: 0,
    }
}

/// Starts a server on an existing database (a second replica, say).
pub async fn spawn_on(database_url: String, change: impl FnOnce(&mut Config)) -> TestApp {
    let mut config = spawn_config(database_url.clone());
    change(&mut config);
    let running = server::start(config).await.expect("server starts");
    let http = format!("http://{}", running.http_addr);
    TestApp {
        running,
        http,
        // A reply that never ends fails its test in two minutes (with the server's panics in
        // its output) instead of holding CI until its limit.
        client: reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(120))
            .build()
            .expect("an HTTP client"),
        database_url,
    }
}

impl TestApp {
    /// Sends simulated instances' traces to this server over native gRPC, as fast as it takes them.
    pub async fn send_sim(
        &self,
        runs: &[tokenscope_sim::scenarios::InstanceRun],
    ) -> tokenscope_sim::deliver::Delivered {
        let url = format!("http://{}", self.running.grpc_addr);
        let batches = tokenscope_sim::deliver::batches(runs);
        tokenscope_sim::deliver::send(&url, batches, f64::INFINITY, false)
            .await
            .expect("the simulator's traces are delivered")
    }

    pub async fn grpc(&self) -> TraceIngestClient<tonic::transport::Channel> {
        TraceIngestClient::connect(format!("http://{}", self.running.grpc_addr))
            .await
            .expect("gRPC connects")
            .max_encoding_message_size(64 << 20)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(format!("{}{path}", self.http))
            .send()
            .await
            .expect("GET")
    }

    /// The body of a 200 reply as text.
    pub async fn get_text(&self, path: &str) -> String {
        let resp = self.get(path).await;
        let status = resp.status();
        let text = resp.text().await.expect("body");
        assert_eq!(status, 200, "GET {path}: {text}");
        text
    }

    pub async fn get_json(&self, path: &str) -> serde_json::Value {
        serde_json::from_str(&self.get_text(path).await).expect("JSON body")
    }

    /// `GET /metrics`, its samples by series (name and labels as written).
    pub async fn metrics(&self) -> std::collections::HashMap<String, f64> {
        let resp = self.get("/metrics").await;
        assert_eq!(resp.status(), 200);
        let kind = resp.headers()["content-type"].to_str().unwrap().to_string();
        assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
        let text = resp.text().await.unwrap();
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                let (series, value) = l.rsplit_once(' ').expect("series and value");
                (series.to_string(), value.parse().expect("a number"))
            })
            .collect()
    }

    pub async fn post_json(&self, path: &str, body: impl Into<reqwest::Body>) -> reqwest::Response {
        self.client
            .post(format!("{}{path}", self.http))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("POST")
    }
}

pub fn export(
    resource: &Resource,
    requests: &[RequestTrace],
    iterations: &[Iteration],
) -> v1::ExportRequest {
    v1::ExportRequest {
        resource_traces: vec![to_wire(resource, requests, iterations)],
    }
}

/// Every stored step, with its instance key and encoded batch, by (instance, start, id): the
/// blocks of `iteration_blocks` decoded.
pub async fn stored_steps(db: &mut PgConnection) -> Vec<(String, Step, Vec<u8>)> {
    let blocks: Vec<(String, Vec<u8>)> = sqlx::query_as(
        "SELECT i.instance_key, b.block FROM iteration_blocks b JOIN instances i ON i.id = b.instance_id",
    )
    .fetch_all(&mut *db)
    .await
    .unwrap();
    let mut steps = Vec::new();
    for (instance, block) in blocks {
        let block = step_block::decode(&block).unwrap();
        for (k, step) in block.steps.iter().enumerate() {
            steps.push((instance.clone(), *step, block.batch(k).to_vec()));
        }
    }
    steps.sort_by(|a, b| {
        (&a.0, a.1.start_ns, a.1.iteration_id).cmp(&(&b.0, b.1.start_ns, b.1.iteration_id))
    });
    steps
}

/// Every token and candidate text of `r` changed, as by an engine that decodes differently
/// (prefixed with `~`).
pub fn decoded_differently(r: &mut RequestTrace) {
    for t in &mut r.tokens {
        let texts =
            std::iter::once(&mut t.text).chain(t.candidates.iter_mut().map(|c| &mut c.text));
        for text in texts.flatten() {
            text.insert(0, '~');
        }
    }
}

/// 2026-11-30T07:00:00Z in Unix nanoseconds.
pub const T0: i64 = 1_796_022_000_000_000_000;

/// The stages of one kind in a request detail (`prefill`, `decode`, `kv_transfer`, …).
pub fn stages_of<'a>(d: &'a serde_json::Value, kind: &str) -> Vec<&'a serde_json::Value> {
    d["stages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == kind)
        .collect()
}

/// Each token's latency in a request detail, in order.
pub fn latencies_ms(d: &serde_json::Value) -> Vec<f64> {
    d["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["latency_ms"].as_f64().unwrap())
        .collect()
}

/// The kinds of a request's (or track's) stages, in order: `d[field]` is a list of stages.
pub fn stage_kinds(d: &serde_json::Value, field: &str) -> Vec<String> {
    d[field]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap().to_string())
        .collect()
}

/// A file in the temporary directory, removed when dropped (a key file, say).
pub struct TempFile(pub std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub fn temp_file(text: &str) -> TempFile {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("tokenscope-test-{}-{n}", std::process::id()));
    std::fs::write(&path, text).expect("a temporary file");
    TempFile(path)
}

/// Runs the `tokenscope` binary with `args` (and `DATABASE_URL` when given), asserts that it
/// succeeded, and returns what it printed on standard output.
pub fn run_cli<I, S>(args: I, database_url: Option<&str>) -> Vec<u8>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tokenscope"));
    cmd.args(args);
    if let Some(url) = database_url {
        cmd.env("DATABASE_URL", url);
    }
    let out = cmd.output().expect("tokenscope runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A query parameter's value, percent-encoded.
pub fn urlencode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

//! The `tokenscope` binary as a child process on loopback, for what an in-process server cannot
//! show: `kill -9` and restart, and the memory the process really holds.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A `tokenscope serve` process on fixed loopback ports, so that it can be restarted where its
/// clients expect it.
pub struct ServerProcess {
    child: Option<Child>,
    pub http_port: u16,
    pub grpc_port: u16,
    database_url: String,
    args: Vec<String>,
    /// `RUST_LOG` of the process.
    log_filter: String,
    /// Where its output (logs) goes, appended across restarts.
    pub log: PathBuf,
    peak_rss_kib: u64,
    pub starts: u32,
}

/// A loopback port for a child to listen on, taken below the kernel's ephemeral range. A port
/// from `bind(127.0.0.1:0)` comes from that range, and so do the ports every parallel test's
/// servers and connections are given between our pick and the child's bind (and between a
/// `kill -9` and the restart): CI once saw the child fail with "Address already in use". Below the
/// range only an explicit bind takes a port, and the counter keeps this binary's picks distinct.
fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const SPAN: u32 = 10_000;
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    if low < 1_024 + SPAN {
        return ephemeral_port();
    }
    let start = std::process::id() % SPAN;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (low - SPAN + (start + n) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    ephemeral_port()
}

fn ephemeral_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

impl ServerProcess {
    /// Starts the binary on `database_url` with `args` added to `serve`, and waits until ready.
    pub async fn start(database_url: &str, args: &[&str]) -> Self {
        Self::start_logging(database_url, args, "warn").await
    }

    /// [`Self::start`], logging what `log_filter` (a `RUST_LOG`) lets through to [`Self::log`].
    pub async fn start_logging(database_url: &str, args: &[&str], log_filter: &str) -> Self {
        let http_port = free_port();
        let mut p = Self {
            child: None,
            http_port,
            grpc_port: free_port(),
            database_url: database_url.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            log_filter: log_filter.into(),
            log: std::env::temp_dir().join(format!("tokenscope-child-{http_port}.log")),
            peak_rss_kib: 0,
            starts: 0,
        };
        p.restart().await;
        p
    }

    pub fn grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    /// Starts it again (after [`Self::kill9`]) and waits until it answers `/readyz`.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("child log");
        let child = Command::new(env!("CARGO_BIN_EXE_tokenscope"))
            .arg("serve")
            .args(["--database-url", &self.database_url])
            .args(["--http-addr", &format!("127.0.0.1:{}", self.http_port)])
            .args(["--grpc-addr", &format!("127.0.0.1:{}", self.grpc_port)])
            .args(&self.args)
            .env("RUST_LOG", &self.log_filter)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("child log"))
            .stderr(log)
            .spawn()
            .expect("tokenscope starts");
        self.child = Some(child);
        self.starts += 1;
        let ready = format!("http://127.0.0.1:{}/readyz", self.http_port);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = reqwest::get(&ready).await
                && r.status().is_success()
            {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "tokenscope exited at start ({status}): {}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "tokenscope not ready in 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The running process's peak resident memory in KiB, as the kernel keeps it (`VmHWM`).
    fn current_peak_kib(&self) -> Option<u64> {
        let pid = self.child.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    /// The highest resident memory of any of its runs so far, in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        self.peak_rss_kib.max(self.current_peak_kib().unwrap_or(0))
    }

    /// SIGKILL: no drain, no flush, nothing it did not commit survives.
    pub fn kill9(&mut self) {
        self.peak_rss_kib = self.peak_rss_kib();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_file(&self.log);
    }
}

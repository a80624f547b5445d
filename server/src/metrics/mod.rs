//! Self-metrics in the Prometheus text format (0.0.4, or OpenMetrics when the scraper asks for
//! it): what ingest stored and refused, by source, how long batches took to commit, and the
//! stored requests' TTFT and TPOT (`latency`). Counters are atomics in the `Sink` every ingest
//! path holds; gauges (pool, assembler) are read when `/metrics` is scraped.

pub mod latency;

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Where a batch came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    NativeGrpc,
    NativeHttp,
    /// OTLP over gRPC or HTTP, and requests the assembler stored after their root span's timeout.
    Otlp,
    Import,
    Demo,
}

impl Source {
    const ALL: [Source; 5] = [
        Source::NativeGrpc,
        Source::NativeHttp,
        Source::Otlp,
        Source::Import,
        Source::Demo,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Source::NativeGrpc => "native_grpc",
            Source::NativeHttp => "native_http",
            Source::Otlp => "otlp",
            Source::Import => "import",
            Source::Demo => "demo",
        }
    }
}

/// Why an item was not stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    InvalidRequest,
    InvalidIteration,
    /// Already stored (same instance and request id): a resend.
    DuplicateRequest,
    /// For an instance the sender's ingest key does not cover.
    ForbiddenInstance,
}

impl Reason {
    const ALL: [Reason; 4] = [
        Reason::InvalidRequest,
        Reason::InvalidIteration,
        Reason::DuplicateRequest,
        Reason::ForbiddenInstance,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidRequest => "invalid_request",
            Reason::InvalidIteration => "invalid_iteration",
            Reason::DuplicateRequest => "duplicate_request",
            Reason::ForbiddenInstance => "forbidden_instance",
        }
    }
}

const SOURCES: usize = Source::ALL.len();
const REASONS: usize = Reason::ALL.len();

/// Upper bounds of the commit-latency buckets, in seconds.
const COMMIT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// What one stored batch added.
#[derive(Clone, Copy, Debug, Default)]
pub struct Batch {
    pub requests: u64,
    pub iterations: u64,
    /// Output tokens of the newly stored requests.
    pub tokens: u64,
}

#[derive(Default)]
pub struct Metrics {
    requests: [AtomicU64; SOURCES],
    iterations: [AtomicU64; SOURCES],
    tokens: [AtomicU64; SOURCES],
    rejected: [[AtomicU64; REASONS]; SOURCES],
    /// Per bucket (not cumulative; summed when rendered), then the overflow.
    commit_buckets: [AtomicU64; COMMIT_BUCKETS.len() + 1],
    commit_count: AtomicU64,
    commit_micros: AtomicU64,
    over_budget: AtomicU64,
    unauthenticated: AtomicU64,
    /// The stored requests' TTFT and TPOT histograms.
    pub latency: latency::LatencyMetrics,
}

/// A Prometheus label value: backslash, double quote and newline escaped (instance ids are the
/// senders' text).
pub fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A value read at scrape time: name, help, one sample per label set.
pub struct Gauge<'a> {
    pub name: &'a str,
    pub help: &'a str,
    pub samples: Vec<(std::borrow::Cow<'a, str>, f64)>,
}

impl Metrics {
    /// Self-metrics whose latency histograms label at most `tenants` tenants by name.
    pub fn with_tenant_labels(tenants: usize) -> Self {
        Self {
            latency: latency::LatencyMetrics::new(tenants),
            ..Self::default()
        }
    }

    pub fn stored(&self, source: Source, batch: Batch) {
        let s = source as usize;
        self.requests[s].fetch_add(batch.requests, Relaxed);
        self.iterations[s].fetch_add(batch.iterations, Relaxed);
        self.tokens[s].fetch_add(batch.tokens, Relaxed);
    }

    pub fn rejected(&self, source: Source, reason: Reason, n: u64) {
        self.rejected[source as usize][reason as usize].fetch_add(n, Relaxed);
    }

    /// An ingest request refused because the budget was in use (`ingest::budget`).
    pub fn over_budget(&self) {
        self.over_budget.fetch_add(1, Relaxed);
    }

    /// An ingest request refused for want of a valid key (`access::keys`).
    pub fn unauthenticated(&self) {
        self.unauthenticated.fetch_add(1, Relaxed);
    }

    pub fn committed(&self, took: Duration) {
        let secs = took.as_secs_f64();
        let bucket = COMMIT_BUCKETS
            .iter()
            .position(|&le| secs <= le)
            .unwrap_or(COMMIT_BUCKETS.len());
        self.commit_buckets[bucket].fetch_add(1, Relaxed);
        self.commit_count.fetch_add(1, Relaxed);
        self.commit_micros
            .fetch_add(took.as_micros().min(u128::from(u64::MAX)) as u64, Relaxed);
    }

    /// The text exposition format (version 0.0.4), or OpenMetrics 1.0 (`openmetrics`: the
    /// latency histograms' exemplars, `# EOF`), with `gauges` appended; the latency histograms
    /// by tenant only for a reader who may see every tenant (`tenants`).
    pub fn render(&self, gauges: &[Gauge<'_>], openmetrics: bool, tenants: bool) -> String {
        let mut out = String::new();
        let om = openmetrics;
        let by_source = |out: &mut String, name: &str, help: &str, values: &[AtomicU64]| {
            family(out, name, help, "counter", om);
            for source in Source::ALL {
                let v = values[source as usize].load(Relaxed);
                let _ = writeln!(out, "{name}{{source=\"{}\"}} {v}", source.as_str());
            }
        };
        by_source(
            &mut out,
            "tokenscope_ingest_requests_total",
            "Requests newly stored.",
            &self.requests,
        );
        by_source(
            &mut out,
            "tokenscope_ingest_iterations_total",
            "Engine iterations newly stored.",
            &self.iterations,
        );
        by_source(
            &mut out,
            "tokenscope_ingest_tokens_total",
            "Output tokens of the requests newly stored.",
            &self.tokens,
        );
        let name = "tokenscope_ingest_rejected_total";
        family(
            &mut out,
            name,
            "Items not stored: invalid, already stored (a resend), or for an instance the sender's key does not cover.",
            "counter",
            om,
        );
        for source in Source::ALL {
            for reason in Reason::ALL {
                let v = self.rejected[source as usize][reason as usize].load(Relaxed);
                let _ = writeln!(
                    out,
                    "{name}{{source=\"{}\",reason=\"{}\"}} {v}",
                    source.as_str(),
                    reason.as_str()
                );
            }
        }
        let name = "tokenscope_ingest_commit_seconds";
        family(
            &mut out,
            name,
            "Time to store one batch, from the start of its writes to its commit.",
            "histogram",
            om,
        );
        let mut cumulative = 0;
        for (i, le) in COMMIT_BUCKETS.iter().enumerate() {
            cumulative += self.commit_buckets[i].load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        cumulative += self.commit_buckets[COMMIT_BUCKETS.len()].load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let sum = self.commit_micros.load(Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {}", self.commit_count.load(Relaxed));
        counter(
            &mut out,
            "tokenscope_ingest_over_budget_total",
            "Ingest requests refused because the budget was in use (429 / RESOURCE_EXHAUSTED).",
            &self.over_budget,
            om,
        );
        counter(
            &mut out,
            "tokenscope_ingest_unauthenticated_total",
            "Ingest requests refused for want of a valid ingest key (401 / UNAUTHENTICATED).",
            &self.unauthenticated,
            om,
        );
        self.latency.render(&mut out, om, tenants);
        for g in gauges {
            family(&mut out, g.name, g.help, "gauge", om);
            for (labels, v) in &g.samples {
                let _ = writeln!(out, "{}{labels} {v}", g.name);
            }
        }
        if om {
            out.push_str("# EOF\n");
        }
        out
    }
}

/// A family's `# HELP` and `# TYPE` lines. OpenMetrics names a counter's family without the
/// `_total` its samples carry.
fn family(out: &mut String, name: &str, help: &str, kind: &str, openmetrics: bool) {
    let name = match (openmetrics, kind) {
        (true, "counter") => name.strip_suffix("_total").unwrap_or(name),
        _ => name,
    };
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A counter without labels.
fn counter(out: &mut String, name: &str, help: &str, value: &AtomicU64, openmetrics: bool) {
    family(out, name, help, "counter", openmetrics);
    let _ = writeln!(out, "{name} {}", value.load(Relaxed));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_the_histogram_render_by_label() {
        let m = Metrics::default();
        m.stored(
            Source::NativeGrpc,
            Batch {
                requests: 2,
                iterations: 3,
                tokens: 40,
            },
        );
        m.rejected(Source::Otlp, Reason::InvalidRequest, 1);
        m.committed(Duration::from_millis(7));
        m.committed(Duration::from_secs(60));
        m.over_budget();
        m.unauthenticated();
        m.rejected(Source::NativeHttp, Reason::ForbiddenInstance, 2);
        let gauges = [Gauge {
            name: "tokenscope_db_pool_connections",
            help: "Connections.",
            samples: vec![("{state=\"idle\"}".into(), 3.0)],
        }];
        let text = m.render(&gauges, false, true);
        let om = m.render(&gauges, true, true);
        assert!(om.contains("# TYPE tokenscope_ingest_over_budget counter\n"));
        assert!(om.contains("\ntokenscope_ingest_over_budget_total 1\n"));
        assert!(om.ends_with("# EOF\n") && !text.contains("# EOF"));
        assert_eq!(label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        for line in [
            "tokenscope_ingest_requests_total{source=\"native_grpc\"} 2",
            "tokenscope_ingest_iterations_total{source=\"native_grpc\"} 3",
            "tokenscope_ingest_tokens_total{source=\"native_grpc\"} 40",
            "tokenscope_ingest_tokens_total{source=\"otlp\"} 0",
            "tokenscope_ingest_rejected_total{source=\"otlp\",reason=\"invalid_request\"} 1",
            "tokenscope_ingest_commit_seconds_bucket{le=\"0.005\"} 0",
            "tokenscope_ingest_commit_seconds_bucket{le=\"0.01\"} 1",
            "tokenscope_ingest_commit_seconds_bucket{le=\"10\"} 1",
            "tokenscope_ingest_commit_seconds_bucket{le=\"+Inf\"} 2",
            "tokenscope_ingest_commit_seconds_count 2",
            "tokenscope_ingest_commit_seconds_sum 60.007",
            "# TYPE tokenscope_ingest_over_budget_total counter",
            "tokenscope_ingest_over_budget_total 1",
            "tokenscope_ingest_unauthenticated_total 1",
            "tokenscope_ingest_rejected_total{source=\"native_http\",reason=\"forbidden_instance\"} 2",
            "# TYPE tokenscope_db_pool_connections gauge",
            "tokenscope_db_pool_connections{state=\"idle\"} 3",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}

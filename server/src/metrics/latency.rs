//! TTFT and TPOT histograms per instance (and per tenant, for at most `--metrics-tenants` of
//! them), each bucket with an exemplar: the last request that fell in it, so that a Grafana panel
//! of these histograms opens that request's page. Observed as ingest stores the requests.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;
use std::sync::Mutex;

use tokenscope_core::analysis::metrics::request_metrics;
use tokenscope_core::model::RequestTrace;

use super::{family, label_value};

/// Upper bounds of the buckets, in seconds.
const TTFT_BUCKETS: [f64; 10] = [0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
const TPOT_BUCKETS: [f64; 10] = [0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0];
/// The bounds and then `+Inf`.
const SLOTS: usize = TTFT_BUCKETS.len() + 1;
/// OpenMetrics caps an exemplar's labels at 128 characters (names and values).
const EXEMPLAR_CHARS: usize = 128;
/// The tenant label of tenants past the `--metrics-tenants` first ones, and of requests without one.
const OTHER: &str = "other";

struct Exemplar {
    request_id: String,
    value: f64,
    /// Unix seconds it was observed.
    at_s: f64,
}

#[derive(Default)]
struct Histogram {
    /// Per slot, not cumulative (summed when rendered).
    counts: [u64; SLOTS],
    sum: f64,
    exemplars: [Option<Exemplar>; SLOTS],
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], value: f64, request_id: &str, at_s: f64) {
        let slot = bounds
            .iter()
            .position(|&le| value <= le)
            .unwrap_or(bounds.len());
        self.counts[slot] += 1;
        self.sum += value;
        if "request_id".len() + request_id.chars().count() <= EXEMPLAR_CHARS {
            self.exemplars[slot] = Some(Exemplar {
                request_id: request_id.to_string(),
                value,
                at_s,
            });
        }
    }
}

#[derive(Default)]
struct Inner {
    /// The tenants with a label of their own, first come.
    tenants: HashSet<String>,
    /// (instance, tenant or "") → TTFT, TPOT.
    series: BTreeMap<(String, String), [Histogram; 2]>,
}

#[derive(Default)]
pub struct LatencyMetrics {
    /// How many tenants get a label of their own (0: no tenant label).
    tenant_labels: usize,
    inner: Mutex<Inner>,
}

impl LatencyMetrics {
    pub fn new(tenant_labels: usize) -> Self {
        Self {
            tenant_labels,
            inner: Mutex::default(),
        }
    }

    /// Counts `requests` of `instance`, newly stored at `at_s` (Unix seconds).
    pub fn observe<'a>(
        &self,
        instance: &str,
        requests: impl IntoIterator<Item = &'a RequestTrace>,
        at_s: f64,
    ) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for r in requests {
            let tenant = self.tenant_label(&mut inner.tenants, r.served.tenant.as_deref());
            let [ttft, tpot] = inner
                .series
                .entry((instance.to_string(), tenant))
                .or_default();
            let m = request_metrics(r);
            let secs = |ns: i64| ns as f64 / 1e9;
            if let Some(v) = m.ttft_ns {
                ttft.observe(&TTFT_BUCKETS, secs(v), &r.request_id, at_s);
            }
            if let Some(v) = m.tpot_ns {
                tpot.observe(&TPOT_BUCKETS, secs(v), &r.request_id, at_s);
            }
        }
    }

    fn tenant_label(&self, known: &mut HashSet<String>, tenant: Option<&str>) -> String {
        if self.tenant_labels == 0 {
            return String::new();
        }
        match tenant {
            Some(t) if known.contains(t) => t.to_string(),
            Some(t) if known.len() < self.tenant_labels => {
                known.insert(t.to_string());
                t.to_string()
            }
            _ => OTHER.to_string(),
        }
    }

    /// Both histograms' families; exemplars only in OpenMetrics (the 0.0.4 text format has none).
    /// Without `tenants` (a reader who may not see every tenant), each instance's histograms are
    /// summed over its tenants, and no tenant is named.
    pub fn render(&self, out: &mut String, openmetrics: bool, tenants: bool) {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for (k, (name, help, bounds)) in [
            (
                "tokenscope_request_ttft_seconds",
                "Time to first token of the requests stored since start, by instance (and tenant with --metrics-tenants); exemplars name a request.",
                &TTFT_BUCKETS,
            ),
            (
                "tokenscope_request_tpot_seconds",
                "Mean time per output token after the first, of the requests stored since start; exemplars name a request.",
                &TPOT_BUCKETS,
            ),
        ]
        .into_iter()
        .enumerate()
        {
            family(out, name, help, "histogram", openmetrics);
            if tenants || self.tenant_labels == 0 {
                for ((instance, tenant), pair) in &inner.series {
                    let mut labels = format!("instance=\"{}\"", label_value(instance));
                    if self.tenant_labels > 0 {
                        let _ = write!(labels, ",tenant=\"{}\"", label_value(tenant));
                    }
                    write_histogram(out, name, bounds, &labels, &pair[k], openmetrics);
                }
            } else {
                let mut summed: BTreeMap<&str, Histogram> = BTreeMap::new();
                for ((instance, _), pair) in &inner.series {
                    let s = summed.entry(instance).or_default();
                    for (a, b) in s.counts.iter_mut().zip(pair[k].counts) {
                        *a += b;
                    }
                    s.sum += pair[k].sum;
                }
                for (instance, h) in &summed {
                    let labels = format!("instance=\"{}\"", label_value(instance));
                    write_histogram(out, name, bounds, &labels, h, false);
                }
            }
        }
    }
}

/// One histogram's series: cumulative buckets (with their exemplars when asked), sum and count.
fn write_histogram(
    out: &mut String,
    name: &str,
    bounds: &[f64],
    labels: &str,
    h: &Histogram,
    exemplars: bool,
) {
    let mut cumulative = 0;
    for (slot, count) in h.counts.iter().enumerate() {
        cumulative += count;
        let le = bounds
            .get(slot)
            .map_or("+Inf".to_string(), |b| b.to_string());
        let _ = write!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        if let (true, Some(e)) = (exemplars, &h.exemplars[slot]) {
            let _ = write!(
                out,
                " # {{request_id=\"{}\"}} {} {:.3}",
                label_value(&e.request_id),
                e.value,
                e.at_s
            );
        }
        out.push('\n');
    }
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
    let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenscope_core::model::{FinishReason, Served, Token};

    fn request(id: &str, tenant: &str, ttft_ms: i64) -> RequestTrace {
        let at = |ms: i64| ms * 1_000_000;
        RequestTrace {
            request_id: id.into(),
            arrival_ns: 0,
            first_token_ns: Some(at(ttft_ms)),
            finished_ns: at(ttft_ms + 40),
            finish_reason: FinishReason::Stop,
            output_tokens: 3,
            tokens: (0..3)
                .map(|k| Token {
                    emitted_ns: Some(at(ttft_ms + 20 * k)),
                    ..Token::default()
                })
                .collect(),
            served: Served {
                tenant: Some(tenant.into()),
                ..Served::default()
            },
            ..RequestTrace::default()
        }
    }

    #[test]
    fn buckets_count_each_request_once_and_the_last_one_is_the_exemplar() {
        let m = LatencyMetrics::new(1);
        let reqs = [
            request("a", "acme", 80),
            request("b", "acme", 90),
            request("c", "globex", 3_000),
        ];
        m.observe("gpu-0", &reqs, 1_700_000_000.5);
        let mut om = String::new();
        m.render(&mut om, true, true);
        let lines: Vec<&str> = om.lines().collect();
        for want in [
            "# TYPE tokenscope_request_ttft_seconds histogram",
            "tokenscope_request_ttft_seconds_bucket{instance=\"gpu-0\",tenant=\"acme\",le=\"0.05\"} 0",
            "tokenscope_request_ttft_seconds_bucket{instance=\"gpu-0\",tenant=\"acme\",le=\"0.1\"} 2 # {request_id=\"b\"} 0.09 1700000000.500",
            "tokenscope_request_ttft_seconds_bucket{instance=\"gpu-0\",tenant=\"acme\",le=\"+Inf\"} 2",
            // One tenant label allowed: globex counts as other.
            "tokenscope_request_ttft_seconds_bucket{instance=\"gpu-0\",tenant=\"other\",le=\"5\"} 1 # {request_id=\"c\"} 3 1700000000.500",
            "tokenscope_request_ttft_seconds_count{instance=\"gpu-0\",tenant=\"other\"} 1",
            "tokenscope_request_tpot_seconds_bucket{instance=\"gpu-0\",tenant=\"acme\",le=\"0.02\"} 2 # {request_id=\"b\"} 0.02 1700000000.500",
        ] {
            assert!(lines.contains(&want), "{want} in\n{om}");
        }
        let mut plain = String::new();
        m.render(&mut plain, false, true);
        assert!(!plain.contains(" # {"), "no exemplars in the 0.0.4 format");

        // For a reader who may not see every tenant: each instance summed, no tenant named.
        let mut narrowed = String::new();
        m.render(&mut narrowed, false, false);
        assert!(
            !narrowed.contains("tenant=") && !narrowed.contains("acme"),
            "{narrowed}"
        );
        let lines: Vec<&str> = narrowed.lines().collect();
        for want in [
            "tokenscope_request_ttft_seconds_bucket{instance=\"gpu-0\",le=\"0.1\"} 2",
            "tokenscope_request_ttft_seconds_bucket{instance=\"gpu-0\",le=\"5\"} 3",
            "tokenscope_request_ttft_seconds_count{instance=\"gpu-0\"} 3",
        ] {
            assert!(lines.contains(&want), "{want} in\n{narrowed}");
        }
        let untenanted = LatencyMetrics::new(0);
        untenanted.observe("gpu-0", &reqs, 0.0);
        let mut out = String::new();
        untenanted.render(&mut out, true, false);
        assert!(
            out.contains("tokenscope_request_ttft_seconds_count{instance=\"gpu-0\"} 3"),
            "{out}"
        );
    }
}

//! Request-level latency metrics, defined once: TTFT, TPOT, end-to-end and queue time.

use crate::model::Nanos;
use serde::{Deserialize, Serialize};

pub use crate::model::metrics::{RequestMetrics, request_metrics};

/// Latency over time (`GET /api/v1/latency`): the requests that arrived in each bucket of a
/// window, their TTFT and TPOT percentiles and how many broke each SLO. Buckets without
/// requests are left out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencySeries {
    pub from_ns: Nanos,
    pub to_ns: Nanos,
    pub bucket_ns: Nanos,
    pub ttft_slo_ms: f64,
    pub tpot_slo_ms: f64,
    pub buckets: Vec<LatencyBucket>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyBucket {
    pub start_ns: Nanos,
    pub requests: u32,
    /// `null` when no request of the bucket has a first token (or, for TPOT, a second one).
    pub ttft_ms: Option<Percentiles>,
    pub tpot_ms: Option<Percentiles>,
    pub ttft_over_slo: u32,
    pub tpot_over_slo: u32,
}

/// Nearest-rank percentiles: each is a latency some request actually had.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

impl Percentiles {
    /// From nanoseconds as SQL computes them; `None` when there was nothing to rank.
    pub fn from_ns(p50: Option<Nanos>, p90: Option<Nanos>, p99: Option<Nanos>) -> Option<Self> {
        Some(Self {
            p50: crate::model::ms(p50?),
            p90: crate::model::ms(p90?),
            p99: crate::model::ms(p99?),
        })
    }
}

//! Request-level latency metrics, defined once: TTFT, TPOT, end-to-end and queue time. The store
//! keeps them as columns (derived at ingest) and the analysis reads them from here.

use super::{Nanos, RequestTrace};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestMetrics {
    /// First token − arrival.
    pub ttft_ns: Option<Nanos>,
    /// (finished − first token) / (output tokens − 1); needs at least two output tokens.
    pub tpot_ns: Option<Nanos>,
    /// Finished − arrival.
    pub e2e_ns: Nanos,
    /// First scheduled − queued (arrival when the queue entry time is unknown).
    pub queue_ns: Option<Nanos>,
}

pub fn request_metrics(r: &RequestTrace) -> RequestMetrics {
    let first_token = r.first_token_at();
    let tpot_ns = match (first_token, r.output_tokens) {
        (Some(ft), n) if n >= 2 => Some((r.finished_ns - ft) / Nanos::from(n - 1)),
        _ => None,
    };
    RequestMetrics {
        ttft_ns: first_token.map(|t| t - r.arrival_ns),
        tpot_ns,
        e2e_ns: r.finished_ns - r.arrival_ns,
        queue_ns: r
            .first_scheduled_at()
            .map(|s| s - r.queued_ns.unwrap_or(r.arrival_ns)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Token;

    const T0: Nanos = 1_700_000_000_000_000_000;

    #[test]
    fn metrics_follow_the_definitions() {
        let r = RequestTrace {
            request_id: "r".into(),
            arrival_ns: T0,
            queued_ns: Some(T0 + 1_000_000),
            first_scheduled_ns: Some(T0 + 5_000_000),
            finished_ns: T0 + 230_000_000,
            output_tokens: 3,
            tokens: [30_000_000, 130_000_000, 230_000_000]
                .iter()
                .map(|d| Token {
                    emitted_ns: Some(T0 + d),
                    ..Token::default()
                })
                .collect(),
            ..RequestTrace::default()
        };
        let m = request_metrics(&r);
        assert_eq!(m.ttft_ns, Some(30_000_000));
        assert_eq!(m.tpot_ns, Some(100_000_000));
        assert_eq!(m.e2e_ns, 230_000_000);
        assert_eq!(m.queue_ns, Some(4_000_000));
    }

    #[test]
    fn single_token_has_no_tpot() {
        let r = RequestTrace {
            arrival_ns: T0,
            first_token_ns: Some(T0 + 10),
            finished_ns: T0 + 10,
            output_tokens: 1,
            ..RequestTrace::default()
        };
        assert_eq!(request_metrics(&r).tpot_ns, None);
        assert_eq!(request_metrics(&r).ttft_ns, Some(10));
    }
}

//! Reads one side of a comparison: percentiles over the whole side and latency histograms,
//! computed where the data is from the per-request columns derived at ingest, plus the causes
//! the diagnosis finds among the side's first requests.

use std::collections::{BTreeMap, BTreeSet};

use tokenscope_core::analysis::compare::{BINS_PER_OCTAVE, bin};
use tokenscope_core::analysis::diagnosis::{Cause, Thresholds};
use tokenscope_core::api::{CauseCount, CompareSide, HistogramBin, Percentiles};
use tokenscope_core::model::Nanos;

use super::{RequestFilter, Store, read::count};
use crate::error::Result;

/// Requests whose causes are counted per side: a diagnosis decodes every token block, so a
/// side's count covers its first few thousand requests (`diagnosed` says how many).
const DIAGNOSED: i64 = 2000;

/// The worst requests named per cause.
const EXAMPLES: usize = 3;

impl Store {
    /// `f`'s window must be set (the API resolves defaults before calling).
    pub async fn compare_side(
        &self,
        f: &RequestFilter,
        width_px: u32,
        th: &Thresholds,
    ) -> Result<CompareSide> {
        let instances = f.instance_list();
        let (from, to) = (
            f.from_ns.unwrap_or(Nanos::MIN),
            f.to_ns.unwrap_or(Nanos::MAX),
        );
        let s = sqlx::query!(
            r#"SELECT count(*) AS "requests!",
                      percentile_disc(0.5) WITHIN GROUP (ORDER BY r.ttft_ns) AS ttft_p50,
                      percentile_disc(0.9) WITHIN GROUP (ORDER BY r.ttft_ns) AS ttft_p90,
                      percentile_disc(0.99) WITHIN GROUP (ORDER BY r.ttft_ns) AS ttft_p99,
                      percentile_disc(0.5) WITHIN GROUP (ORDER BY r.tpot_ns) AS tpot_p50,
                      percentile_disc(0.9) WITHIN GROUP (ORDER BY r.tpot_ns) AS tpot_p90,
                      percentile_disc(0.99) WITHIN GROUP (ORDER BY r.tpot_ns) AS tpot_p99,
                      percentile_disc(0.5) WITHIN GROUP (ORDER BY r.queue_ns) AS queue_p50,
                      percentile_disc(0.9) WITHIN GROUP (ORDER BY r.queue_ns) AS queue_p90,
                      percentile_disc(0.99) WITHIN GROUP (ORDER BY r.queue_ns) AS queue_p99,
                      percentile_disc(0.5) WITHIN GROUP (ORDER BY r.e2e_ns) AS e2e_p50,
                      percentile_disc(0.9) WITHIN GROUP (ORDER BY r.e2e_ns) AS e2e_p90,
                      percentile_disc(0.99) WITHIN GROUP (ORDER BY r.e2e_ns) AS e2e_p99
               FROM requests r JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
               WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1)) AND ($2::text IS NULL OR i.engine = $2) AND ($6::text IS NULL OR i.engine_version = $6)
                 AND ($3::text IS NULL OR m.name = $3) AND r.arrival_ns >= $4 AND r.arrival_ns < $5"#,
            instances,
            f.engine,
            f.model,
            from,
            to,
            f.engine_version,
        )
        .fetch_one(&self.pool)
        .await?;
        let (ttft_histogram, tpot_histogram) = self.histograms(f).await?;
        let causes = self.cause_counts(f, th).await?;
        Ok(CompareSide {
            instances: f.instances.clone(),
            engine: f.engine.clone(),
            engine_version: f.engine_version.clone(),
            model: f.model.clone(),
            from_ns: from,
            to_ns: to,
            requests: s.requests as u64,
            ttft_ms: Percentiles::from_ns(s.ttft_p50, s.ttft_p90, s.ttft_p99),
            tpot_ms: Percentiles::from_ns(s.tpot_p50, s.tpot_p90, s.tpot_p99),
            queue_ms: Percentiles::from_ns(s.queue_p50, s.queue_p90, s.queue_p99),
            e2e_ms: Percentiles::from_ns(s.e2e_p50, s.e2e_p90, s.e2e_p99),
            series: self.latency(f, width_px, (th.ttft_ms, th.tpot_ms)).await?,
            ttft_histogram,
            tpot_histogram,
            causes,
            diagnosed: (s.requests as u64).min(DIAGNOSED as u64),
        })
    }

    /// Requests per quarter-octave bin of TTFT and of TPOT.
    async fn histograms(
        &self,
        f: &RequestFilter,
    ) -> Result<(Vec<HistogramBin>, Vec<HistogramBin>)> {
        let instances = f.instance_list();
        let rows = sqlx::query!(
            r#"SELECT h.metric AS "metric!", floor($6::float8 * ln(greatest(h.ns, 1000)::float8 / 1e6) / ln(2))::int AS "bin!",
                      count(*)::int AS "requests!"
               FROM requests r JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
               CROSS JOIN LATERAL (VALUES ('ttft', r.ttft_ns), ('tpot', r.tpot_ns)) AS h (metric, ns)
               WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1)) AND ($2::text IS NULL OR i.engine = $2) AND ($7::text IS NULL OR i.engine_version = $7)
                 AND ($3::text IS NULL OR m.name = $3) AND r.arrival_ns >= $4 AND r.arrival_ns < $5
                 AND h.ns IS NOT NULL
               GROUP BY 1, 2 ORDER BY 1, 2"#,
            instances,
            f.engine,
            f.model,
            f.from_ns.unwrap_or(Nanos::MIN),
            f.to_ns.unwrap_or(Nanos::MAX),
            BINS_PER_OCTAVE,
            f.engine_version,
        )
        .fetch_all(&self.pool)
        .await?;
        let (mut ttft, mut tpot) = (Vec::new(), Vec::new());
        for r in rows {
            let b = bin(r.bin, count(r.requests));
            if r.metric == "ttft" {
                ttft.push(b);
            } else {
                tpot.push(b);
            }
        }
        Ok((ttft, tpot))
    }

    /// Degraded requests per cause among the side's first `DIAGNOSED` requests.
    async fn cause_counts(&self, f: &RequestFilter, th: &Thresholds) -> Result<Vec<CauseCount>> {
        // Worst first, so the first examples of each cause are its worst.
        let diagnoses = self.diagnose_window(f, th, DIAGNOSED).await?;
        let mut by: BTreeMap<Cause, CauseCount> = BTreeMap::new();
        for d in diagnoses {
            // Two findings of one cause on one request count once.
            let causes: BTreeSet<Cause> = d.findings.iter().map(|x| x.cause).collect();
            for cause in causes {
                let c = by.entry(cause).or_insert_with(|| CauseCount {
                    cause,
                    requests: 0,
                    examples: Vec::new(),
                });
                c.requests += 1;
                if c.examples.len() < EXAMPLES {
                    c.examples.push(d.request_id.clone());
                }
            }
        }
        let mut causes: Vec<CauseCount> = by.into_values().collect();
        causes.sort_by(|a, b| b.requests.cmp(&a.requests).then(a.cause.cmp(&b.cause)));
        Ok(causes)
    }
}

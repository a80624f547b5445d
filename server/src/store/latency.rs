//! Reads latency over time: per-bucket TTFT/TPOT percentiles and SLO breaches, computed where the
//! data is from the per-request columns derived at ingest (no token block is read).

use tokenscope_core::api::{LatencyBucket, LatencySeries, Percentiles};
use tokenscope_core::model::Nanos;

use super::{RequestFilter, Store, read::count};
use crate::error::{Error, Result};

/// Without a window: the hour before the newest request that matches.
const DEFAULT_WINDOW_NS: Nanos = 3600 * 1_000_000_000;

impl Store {
    /// `f`'s instances, engine, model and window; its order, paging, find and SLO filter do not
    /// apply.
    pub async fn latency(
        &self,
        f: &RequestFilter,
        width_px: u32,
        (ttft_slo_ms, tpot_slo_ms): (f64, f64),
    ) -> Result<LatencySeries> {
        let instances = f.instance_list();
        let to = match f.to_ns {
            Some(to) => to,
            None => self
                .newest_arrival(f)
                .await?
                .map_or_else(crate::clock::now_ns, |t| t + 1),
        };
        let from = f.from_ns.unwrap_or(to - DEFAULT_WINDOW_NS);
        if from >= to {
            return Err(Error::InvalidArgument(format!(
                "from={from} must be before to={to}"
            )));
        }
        let bucket = tokenscope_core::analysis::waterfall::bucket_ns(from, to, width_px);
        let slo_ns = |slo_ms: f64| (slo_ms * 1e6) as Nanos;
        let rows = sqlx::query!(
            r#"SELECT (r.arrival_ns - $4) / $6 AS "k!", count(*)::int AS "requests!",
                      percentile_disc(0.5) WITHIN GROUP (ORDER BY r.ttft_ns) AS ttft_p50,
                      percentile_disc(0.9) WITHIN GROUP (ORDER BY r.ttft_ns) AS ttft_p90,
                      percentile_disc(0.99) WITHIN GROUP (ORDER BY r.ttft_ns) AS ttft_p99,
                      percentile_disc(0.5) WITHIN GROUP (ORDER BY r.tpot_ns) AS tpot_p50,
                      percentile_disc(0.9) WITHIN GROUP (ORDER BY r.tpot_ns) AS tpot_p90,
                      percentile_disc(0.99) WITHIN GROUP (ORDER BY r.tpot_ns) AS tpot_p99,
                      count(*) FILTER (WHERE r.ttft_ns > $7)::int AS "ttft_over!",
                      count(*) FILTER (WHERE r.tpot_ns > $8)::int AS "tpot_over!"
               FROM requests r JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
               WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1)) AND ($2::text IS NULL OR i.engine = $2) AND ($9::text IS NULL OR i.engine_version = $9)
                 AND ($3::text IS NULL OR m.name = $3) AND r.arrival_ns >= $4 AND r.arrival_ns < $5
               GROUP BY 1 ORDER BY 1"#,
            instances,
            f.engine,
            f.model,
            from,
            to,
            bucket,
            slo_ns(ttft_slo_ms),
            slo_ns(tpot_slo_ms),
            f.engine_version,
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(LatencySeries {
            from_ns: from,
            to_ns: to,
            bucket_ns: bucket,
            ttft_slo_ms,
            tpot_slo_ms,
            buckets: rows
                .into_iter()
                .map(|r| LatencyBucket {
                    start_ns: from + r.k * bucket,
                    requests: count(r.requests),
                    ttft_ms: Percentiles::from_ns(r.ttft_p50, r.ttft_p90, r.ttft_p99),
                    tpot_ms: Percentiles::from_ns(r.tpot_p50, r.tpot_p90, r.tpot_p99),
                    ttft_over_slo: count(r.ttft_over),
                    tpot_over_slo: count(r.tpot_over),
                })
                .collect(),
        })
    }

    /// Arrival of the newest request that matches `f`'s instances, engine and model (any time).
    pub async fn newest_arrival(&self, f: &RequestFilter) -> Result<Option<Nanos>> {
        let instances = f.instance_list();
        Ok(sqlx::query_scalar!(
            r#"SELECT max(r.arrival_ns) AS newest
               FROM requests r JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
               WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1)) AND ($2::text IS NULL OR i.engine = $2) AND ($4::text IS NULL OR i.engine_version = $4)
                 AND ($3::text IS NULL OR m.name = $3)"#,
            instances,
            f.engine,
            f.model,
            f.engine_version,
        )
        .fetch_one(&self.pool)
        .await?)
    }
}

//! Reads what a diagnosis looks at: an instance's iterations and its other requests around a
//! request, then runs the pure diagnosis from `app::analysis::diagnosis`.

use app::analysis::diagnosis::{
    Context, Diagnosis, OtherRequest, Severity, Thresholds, Verdict, diagnose,
};
use app::analysis::metrics::request_metrics;
use app::model::{Iteration, Nanos, RequestTrace};

use super::{REQUEST_LOOKBACK_NS, Store, batch_block, read::count, write::Detail};
use crate::error::Result;

impl Store {
    /// An instance's iterations that start within [from, to], with their batches, by start time.
    pub async fn iterations_between(
        &self,
        instance_id: i32,
        from: Nanos,
        to: Nanos,
    ) -> Result<Vec<Iteration>> {
        let rows = sqlx::query!(
            "SELECT iteration_id, start_ns, end_ns, running, waiting, kv_cache_usage, batch FROM iterations
             WHERE instance_id = $1 AND start_ns >= $2 AND start_ns <= $3 ORDER BY start_ns",
            instance_id,
            from,
            to
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                Ok(Iteration {
                    iteration_id: r.iteration_id as u64,
                    start_ns: r.start_ns,
                    end_ns: r.end_ns,
                    batch: batch_block::decode(&r.batch)?,
                    running: count(r.running),
                    waiting: count(r.waiting),
                    kv_cache_usage: r.kv_cache_usage,
                })
            })
            .collect()
    }

    /// Requests on the instance whose lifetime overlaps [from, to], with their prefill intervals.
    pub async fn overlapping_requests(
        &self,
        instance_id: i32,
        from: Nanos,
        to: Nanos,
    ) -> Result<Vec<OtherRequest>> {
        let rows = sqlx::query!(
            "SELECT request_id, prompt_tokens, detail FROM requests
             WHERE instance_id = $1 AND arrival_ns >= $2 AND arrival_ns <= $3 AND finished_ns >= $4",
            instance_id,
            from - REQUEST_LOOKBACK_NS,
            to,
            from
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                let detail = Detail::parse(r.detail)?;
                Ok(OtherRequest {
                    request_id: r.request_id,
                    prompt_tokens: count(r.prompt_tokens),
                    prefill: detail
                        .prefill_chunks
                        .iter()
                        .map(|c| (c.start_ns, c.end_ns, c.tokens))
                        .collect(),
                })
            })
            .collect()
    }

    async fn diagnose_loaded(
        &self,
        trace: &RequestTrace,
        instance_id: i32,
        th: &Thresholds,
    ) -> Result<Diagnosis> {
        let iterations = self
            .iterations_between(
                instance_id,
                trace.arrival_ns - 1_000_000_000,
                trace.finished_ns,
            )
            .await?;
        let others = self
            .overlapping_requests(instance_id, trace.arrival_ns, trace.finished_ns)
            .await?;
        Ok(diagnose(
            trace,
            &Context {
                iterations: &iterations,
                others: &others,
            },
            th,
        ))
    }

    pub async fn diagnose_request(
        &self,
        request_id: &str,
        instance: Option<&str>,
        th: &Thresholds,
    ) -> Result<Diagnosis> {
        let loaded = self.load_request(request_id, instance).await?;
        self.diagnose_loaded(&loaded.trace, loaded.instance_id, th)
            .await
    }

    /// The degraded requests among the first `limit` in a window, worst first.
    pub async fn diagnose_window(
        &self,
        instance: Option<&str>,
        from: Option<Nanos>,
        to: Option<Nanos>,
        th: &Thresholds,
        limit: i64,
    ) -> Result<Vec<Diagnosis>> {
        let filter = super::RequestFilter {
            instance: instance.map(str::to_string),
            from_ns: from,
            to_ns: to,
            order: "start".into(),
            limit,
            ..Default::default()
        };
        let mut out = Vec::new();
        for s in self.list_requests(&filter).await? {
            let loaded = self.load_request(&s.request_id, Some(&s.instance)).await?;
            let d = self
                .diagnose_loaded(&loaded.trace, loaded.instance_id, th)
                .await?;
            if d.verdict == Verdict::Degraded {
                let m = request_metrics(&loaded.trace);
                let excess = [
                    m.ttft_ns.map_or(0.0, |t| t as f64 / 1e6 / th.ttft_ms),
                    m.tpot_ns.map_or(0.0, |t| t as f64 / 1e6 / th.tpot_ms),
                ]
                .into_iter()
                .fold(0.0, f64::max);
                let worst = d
                    .findings
                    .iter()
                    .map(|f| f.severity)
                    .max()
                    .unwrap_or(Severity::Info);
                out.push((worst, excess, d));
            }
        }
        out.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.total_cmp(&a.1)));
        Ok(out.into_iter().map(|(_, _, d)| d).collect())
    }
}

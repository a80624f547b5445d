//! Reads what a diagnosis looks at: an instance's iterations and its other requests around a
//! request, then runs the pure diagnosis from `tokenscope_core::analysis::diagnosis`.

use tokenscope_core::analysis::diagnosis::{
    Context, Diagnosis, OtherRequest, Severity, Thresholds, Verdict, diagnose, merge,
};
use tokenscope_core::analysis::metrics::request_metrics;
use tokenscope_core::model::{Iteration, Nanos, RequestTrace};

use std::collections::BTreeMap;

use super::{
    CLOCK_SLACK_NS, REQUEST_LOOKBACK_NS, RequestFilter, Store, batch_block,
    read::{Loaded, count},
    write::Detail,
};
use crate::error::Result;

/// Requests diagnosed together from one read of their surroundings (`GET /api/v1/diagnosis`).
const PAGE: i64 = 256;

impl Store {
    /// An instance's iterations that start within [from, to], with their batches, by start time.
    pub async fn iterations_between(
        &self,
        instance_id: i32,
        from: Nanos,
        to: Nanos,
    ) -> Result<Vec<Iteration>> {
        let rows = self
            .steps_in(&[instance_id], from..to.saturating_add(1))
            .await?;
        let batches = rows
            .iter()
            .map(|r| batch_block::decode(&r.batch))
            .collect::<Result<Vec<_>>>()?;
        let batches = self.resolve_batches(batches).await?;
        Ok(rows
            .into_iter()
            .zip(batches)
            .map(|(r, batch)| Iteration {
                iteration_id: r.step.iteration_id as u64,
                start_ns: r.step.start_ns,
                end_ns: r.step.end_ns,
                batch,
                running: count(r.step.running),
                waiting: count(r.step.waiting),
                kv_cache_usage: r.step.kv_cache_usage,
            })
            .collect())
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

    /// Diagnoses requests of one instance (`traces` in arrival order) from one read of the
    /// iterations and neighbours around all of them, instead of three queries per request.
    pub(super) async fn diagnose_together(
        &self,
        instance_id: i32,
        traces: &[&RequestTrace],
        th: &Thresholds,
    ) -> Result<Vec<Diagnosis>> {
        let (Some(from), Some(to)) = (
            traces.iter().map(|t| t.arrival_ns).min(),
            traces.iter().map(|t| t.finished_ns).max(),
        ) else {
            return Ok(Vec::new());
        };
        // From a little before arrival: the step that admitted a request may start just before
        // it (engine and gateway clocks differ).
        let iterations = self
            .iterations_between(instance_id, from - CLOCK_SLACK_NS, to)
            .await?;
        let others = self.overlapping_requests(instance_id, from, to).await?;
        Ok(traces
            .iter()
            .map(|t| {
                // The iterations are sorted by start: each request reads its own slice.
                let lo =
                    iterations.partition_point(|it| it.start_ns < t.arrival_ns - CLOCK_SLACK_NS);
                let hi = iterations.partition_point(|it| it.start_ns <= t.finished_ns);
                // Neighbours outside the request's lifetime are harmless: every rule looks only
                // at prefill inside the request's own intervals.
                diagnose(
                    t,
                    &Context {
                        iterations: &iterations[lo..hi],
                        others: &others,
                    },
                    th,
                )
            })
            .collect())
    }

    pub async fn diagnose_request(
        &self,
        request_id: &str,
        instances: &[String],
        th: &Thresholds,
    ) -> Result<Diagnosis> {
        let loaded = self.load_request(request_id, instances).await?;
        self.diagnose_loaded(&loaded, th).await
    }

    /// A loaded request's diagnosis; a PD request's parts each against their own instance's
    /// steps and neighbours (its prefill waited on one engine, its answer on another), merged.
    pub(super) async fn diagnose_loaded(&self, l: &Loaded, th: &Thresholds) -> Result<Diagnosis> {
        if l.parts.is_empty() {
            let mut one = self
                .diagnose_together(l.instance_id, &[&l.trace], th)
                .await?;
            return Ok(one.remove(0));
        }
        let mut each = Vec::with_capacity(l.parts.len());
        for p in &l.parts {
            each.push(
                self.diagnose_together(p.instance_id, &[&p.trace], th)
                    .await?
                    .remove(0),
            );
        }
        Ok(merge(&l.trace.request_id, each))
    }

    /// The degraded requests among the first `limit` that match `f` (its instances, engine,
    /// model and window), worst first.
    pub async fn diagnose_window(
        &self,
        f: &RequestFilter,
        th: &Thresholds,
        limit: i64,
    ) -> Result<Vec<Diagnosis>> {
        let mut out = Vec::new();
        let (mut after, mut left) = (None, limit);
        // A page of neighbours in arrival order at a time: one read of their surroundings per
        // instance, and memory bounded by a page's tokens rather than the whole window's.
        while left > 0 {
            let page = self.load_window(f, after.as_ref(), left.min(PAGE)).await?;
            left -= page.len() as i64;
            after = page
                .last()
                .map(|l| (l.trace.arrival_ns, l.trace.request_id.clone()));
            let mut by_instance: BTreeMap<i32, Vec<&RequestTrace>> = BTreeMap::new();
            for l in &page {
                by_instance.entry(l.instance_id).or_default().push(&l.trace);
            }
            for (instance_id, traces) in by_instance {
                let diagnoses = self.diagnose_together(instance_id, &traces, th).await?;
                for (trace, d) in traces.into_iter().zip(diagnoses) {
                    if d.verdict != Verdict::Degraded {
                        continue;
                    }
                    let m = request_metrics(trace);
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
            if page.len() < PAGE as usize {
                break;
            }
        }
        out.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.total_cmp(&a.1)));
        Ok(out.into_iter().map(|(_, _, d)| d).collect())
    }
}

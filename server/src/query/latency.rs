//! Latency over time (`GET /api/v1/latency`) and one side of a comparison: percentiles and
//! histograms from the latency cells where they answer (wide windows, `cells`) or the store's
//! per-request columns, and the causes of the side's stored findings (or, with other thresholds,
//! of its first requests diagnosed on the spot).

use std::collections::{BTreeMap, BTreeSet};

use tokenscope_core::analysis::compare::{BINS_PER_OCTAVE, WordChoice, bin};
use tokenscope_core::analysis::diagnosis::{Cause, Diagnosis, Thresholds};
use tokenscope_core::analysis::usage::{CELL_NS, cell_of};
use tokenscope_core::analysis::waterfall::{Grid, bucket_ns};
use tokenscope_core::api::{
    CauseCount, CompareSide, HistogramBin, LatencyBucket, LatencySeries, Percentiles,
};
use tokenscope_core::model::Nanos;
use tokenscope_core::model::latency_cells::{
    BINS_PER_OCTAVE as CELL_BINS_PER_OCTAVE, Cell, Histogram,
};

use super::cells;
use crate::error::{Error, Result};
use crate::store::{Quantiles, RequestFilter, SetStats, Store, UsageBy};

/// Without a window: the hour before the newest request that matches.
const DEFAULT_WINDOW_NS: Nanos = 3600 * 1_000_000_000;

/// Requests whose causes are counted per side: a diagnosis decodes every token block, so a
/// side's count covers its first few thousand requests (`diagnosed` says how many).
const DIAGNOSED: i64 = 2000;

/// The worst requests named per cause.
const EXAMPLES: usize = 3;

fn percentiles(q: Quantiles) -> Option<Percentiles> {
    Percentiles::from_ns(q.p50, q.p90, q.p99)
}

/// Widest a minute may be drawn for the chart to read minutes: a 6 h window at 600 pixels
/// reads them (a point every 1.7 pixels), an hour does not (10 pixels a point; it scans).
const MINUTE_PX: i64 = 4;

/// Buckets of whole minutes for a chart of `[from, to)` `width_px` wide: as many minutes as a
/// pixel-wide bucket needs, rounded up, from the minute `from` is in; `None` for a narrow
/// window.
fn minute_grid(from: Nanos, to: Nanos, width_px: u32) -> Option<Grid> {
    let minutes = (to - from) / CELL_NS;
    if minutes * MINUTE_PX < i64::from(width_px) {
        return None;
    }
    let per_bucket = ((bucket_ns(from, to, width_px) + CELL_NS - 1) / CELL_NS).max(1);
    Some(Grid {
        rollup_ns: Some(CELL_NS),
        origin_ns: cell_of(from),
        bucket_ns: per_bucket * CELL_NS,
    })
}

/// The percentiles of a cell's histogram (within a bin of the exact ones).
fn of_bins(h: &Histogram) -> Quantiles {
    Quantiles {
        p50: h.quantile(0.5),
        p90: h.quantile(0.9),
        p99: h.quantile(0.99),
    }
}

fn count(n: i64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A side's set statistics and histograms: from the latency cells when they can answer (the
/// percentiles then within a bin of the exact ones, the counts exact), else from the requests.
async fn side_stats(
    store: &Store,
    f: &RequestFilter,
) -> Result<(SetStats, Vec<HistogramBin>, Vec<HistogramBin>)> {
    let window = (
        f.from_ns.unwrap_or(Nanos::MIN),
        f.to_ns.unwrap_or(Nanos::MAX),
    );
    let origin = cell_of(window.0);
    let whole = (window.1 - origin).max(CELL_NS);
    let cells = if f.from_ns.is_some() && f.to_ns.is_some() {
        cells::window(store, f, window, (origin, whole)).await?
    } else {
        None
    };
    if let Some(cells) = cells {
        let mut c = Cell::default();
        for part in cells.values() {
            c.merge(part);
        }
        let bins = |h: &Histogram| {
            h.coarse(CELL_BINS_PER_OCTAVE / BINS_PER_OCTAVE as i32)
                .into_iter()
                .map(|(k, n)| bin(k, count(i64::from(n))))
                .collect::<Vec<_>>()
        };
        let stats = SetStats {
            requests: c.requests.max(0) as u64,
            ttft: of_bins(&c.ttft),
            tpot: of_bins(&c.tpot),
            queue: of_bins(&c.queue),
            e2e: of_bins(&c.e2e),
            words: c.words,
        };
        return Ok((stats, bins(&c.ttft), bins(&c.tpot)));
    }
    let s = store.set_stats(f).await?;
    let (mut ttft_histogram, mut tpot_histogram) = (Vec::new(), Vec::new());
    for r in store.histogram(f, BINS_PER_OCTAVE).await? {
        let b = bin(r.bin, r.requests);
        if r.metric == "ttft" {
            ttft_histogram.push(b);
        } else {
            tpot_histogram.push(b);
        }
    }
    Ok((s, ttft_histogram, tpot_histogram))
}

/// `f`'s instances, engine, model and window, a bucket per pixel at most; its order, paging,
/// find and SLO filter do not apply.
pub async fn series(
    store: &Store,
    f: &RequestFilter,
    width_px: u32,
    (ttft_slo_ms, tpot_slo_ms): (f64, f64),
) -> Result<LatencySeries> {
    let to = match f.to_ns {
        Some(to) => to,
        None => store
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
    let slo_ns = |slo_ms: f64| (slo_ms * 1e6) as Nanos;
    // A wide window (a minute at most `MINUTE_PX` pixels wide): buckets of whole minutes from
    // the latency cells, when they can answer.
    if let Some(g) = minute_grid(from, to, width_px) {
        let f = RequestFilter {
            slo_ns: (slo_ns(ttft_slo_ms), slo_ns(tpot_slo_ms)),
            ..f.clone()
        };
        if let Some(cells) =
            cells::window(store, &f, (from, to), (g.origin_ns, g.bucket_ns)).await?
        {
            return Ok(LatencySeries {
                from_ns: from,
                to_ns: to,
                bucket_ns: g.bucket_ns,
                ttft_slo_ms,
                tpot_slo_ms,
                buckets: cells
                    .into_iter()
                    .filter(|(_, c)| c.requests > 0)
                    .map(|(k, c)| LatencyBucket {
                        start_ns: g.origin_ns + k * g.bucket_ns,
                        requests: count(c.requests),
                        ttft_ms: percentiles(of_bins(&c.ttft)),
                        tpot_ms: percentiles(of_bins(&c.tpot)),
                        ttft_over_slo: count(c.ttft_over),
                        tpot_over_slo: count(c.tpot_over),
                    })
                    .collect(),
            });
        }
    }
    let bucket = bucket_ns(from, to, width_px);
    let rows = store
        .latency_buckets(
            f,
            (from, to),
            bucket,
            (slo_ns(ttft_slo_ms), slo_ns(tpot_slo_ms)),
        )
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
                start_ns: r.start_ns,
                requests: r.requests,
                ttft_ms: percentiles(r.ttft),
                tpot_ms: percentiles(r.tpot),
                ttft_over_slo: r.ttft_over,
                tpot_over_slo: r.tpot_over,
            })
            .collect(),
    })
}

/// One side of `GET /api/v1/compare`; `f`'s window must be set (the API resolves defaults
/// before calling).
pub async fn compare_side(
    store: &Store,
    f: &RequestFilter,
    width_px: u32,
    th: &Thresholds,
) -> Result<CompareSide> {
    let (s, ttft_histogram, tpot_histogram) = side_stats(store, f).await?;
    let stored = if *th == Thresholds::default() {
        stored_cause_counts(store, f).await?
    } else {
        None
    };
    let (causes, diagnosed) = match stored {
        Some(counts) => (counts, s.requests),
        None => (
            cause_counts(store, f, th).await?,
            s.requests.min(DIAGNOSED as u64),
        ),
    };
    // Tenants' GPU time; the side's priority, if any, is not a key of usage.
    let usage_filter = RequestFilter {
        priority: None,
        ..f.clone()
    };
    let usage = super::usage::window(store, &usage_filter, UsageBy::Tenant, width_px).await?;
    Ok(CompareSide {
        instances: f.instances.clone(),
        engine: f.engine.clone(),
        engine_version: f.engine_version.clone(),
        model: f.model.clone(),
        tenant: f.tenants.as_ref().map(|t| t.join(",")),
        lora_adapter: f.lora_adapter.clone(),
        priority: f.priority,
        fingerprint: f.fingerprint.clone(),
        from_ns: f.from_ns.unwrap_or(Nanos::MIN),
        to_ns: f.to_ns.unwrap_or(Nanos::MAX),
        requests: s.requests,
        ttft_ms: percentiles(s.ttft),
        tpot_ms: percentiles(s.tpot),
        queue_ms: percentiles(s.queue),
        e2e_ms: percentiles(s.e2e),
        series: series(store, f, width_px, (th.ttft_ms, th.tpot_ms)).await?,
        ttft_histogram,
        tpot_histogram,
        causes,
        diagnosed,
        usage: usage.groups,
        busy_s: usage.busy_s,
        words: WordChoice::of(s.words),
    })
}

/// Requests per cause over the whole side: the stored findings, and the requests that data still
/// waiting for the findings worker touches, diagnosed here; `None` when more than `DIAGNOSED`
/// of those wait (the worker is far behind, or none runs).
async fn stored_cause_counts(store: &Store, f: &RequestFilter) -> Result<Option<Vec<CauseCount>>> {
    let th = Thresholds::default();
    let instances = super::diagnosis::instance_ids(store, f).await?;
    // The queue first: the stored counts then leave out exactly what was diagnosed here.
    let Some(mut fresh) =
        super::diagnosis::unsettled(store, f, instances.as_deref(), &th, DIAGNOSED as usize)
            .await?
    else {
        return Ok(None);
    };
    let mut by: BTreeMap<Cause, CauseCount> = BTreeMap::new();
    for (name, n, examples) in store
        .cause_counts(f, EXAMPLES as i64, &fresh.stretches)
        .await?
    {
        let cause = Cause::parse(&name)
            .ok_or_else(|| Error::Internal(format!("a stored finding has the cause {name:?}")))?;
        by.insert(
            cause,
            CauseCount {
                cause,
                requests: n as u32,
                examples,
            },
        );
    }
    fresh
        .degraded
        .sort_by(|a, b| b.0.cmp(&a.0).then(b.1.total_cmp(&a.1)));
    Ok(Some(tally(by, fresh.degraded.into_iter().map(|x| x.2))))
}

/// Adds each diagnosis to its causes' counts (two findings of one cause on one request count
/// once; the first diagnoses of a cause are its examples), most requests first.
fn tally(
    mut by: BTreeMap<Cause, CauseCount>,
    diagnoses: impl IntoIterator<Item = Diagnosis>,
) -> Vec<CauseCount> {
    for d in diagnoses {
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
    causes
}

/// Degraded requests per cause among the side's first `DIAGNOSED` requests (thresholds other
/// than the stored findings' defaults).
async fn cause_counts(
    store: &Store,
    f: &RequestFilter,
    th: &Thresholds,
) -> Result<Vec<CauseCount>> {
    // Worst first, so the first examples of each cause are its worst.
    let diagnoses = super::diagnosis::window(store, f, th, DIAGNOSED).await?;
    Ok(tally(BTreeMap::new(), diagnoses))
}

//! Reads the waterfall of one instance (or several as one, joining the parts of a request served
//! by more than one) over a window: the visible rows' request tracks at the pixel's level of
//! detail, and the iteration lane, summed from the rollups (or raw rows, for
//! narrow windows) to the pixel width when the steps outnumber the pixels.

use std::collections::HashMap;

use tokenscope_core::analysis::stages::{coarse_stages, stages};
use tokenscope_core::analysis::waterfall::{self, Bucket, Lane, Step, Track, Waterfall};
use tokenscope_core::model::{Nanos, RequestTrace, ms};

use super::{REQUEST_LOOKBACK_NS, Store, read::count, token_block, write::Detail};
use crate::error::{Error, Result};

const DEFAULT_WINDOW_NS: Nanos = 5 * 60 * 1_000_000_000;

/// Tracks narrower than this many pixels show only queue, prefill and decode.
const DETAIL_PX: Nanos = 4;

/// In compact mode, tracks narrower than this many pixels are folded into clusters of at most
/// `CLUSTER_PX` per row.
const NARROW_PX: Nanos = 2;
const CLUSTER_PX: Nanos = 8;

/// The rows the client shows (virtualized: a viewport's worth at a time), and the request it
/// focuses on with the requests it wants next to it.
#[derive(Clone, Debug, Default)]
pub struct Rows {
    pub first_row: u32,
    pub rows: u32,
    pub focus: Option<String>,
    /// Moved to the rows right below the focused request (not in compact mode).
    pub pull: Vec<String>,
    /// What the rows are sorted by (not in compact mode).
    pub order: waterfall::RowOrder,
}

/// A request's part on one instance. A request served by several instances in view
/// (PD disaggregation: prefill on one, decode on another) has a part on each, on one track.
struct Part {
    instance_id: i32,
    arrival_ns: Nanos,
    finished_ns: Nanos,
    queue_ns: Option<Nanos>,
    ttft_ns: Option<Nanos>,
}

impl Store {
    /// The waterfall of one instance, or of several (comma-separated keys) drawn as one, where
    /// the parts of a request that ran on several of them share its track.
    pub async fn waterfall(
        &self,
        instances: &[String],
        from: Option<Nanos>,
        to: Option<Nanos>,
        width_px: u32,
        compact: bool,
        view: &Rows,
    ) -> Result<Waterfall> {
        let (ids, keys, last_seen) = self.resolve_instances(instances).await?;
        // Without a window: the last five minutes the instances reported.
        let to = to.unwrap_or(last_seen);
        let from = from.unwrap_or(to - DEFAULT_WINDOW_NS);
        if from >= to {
            return Err(Error::InvalidArgument(format!(
                "from={from} must be before to={to}"
            )));
        }
        // Requests closer than a pixel would look joined, so compact mode keeps them apart.
        let gap = waterfall::bucket_ns(from, to, width_px);
        let (placed, parts) = self.extents(&ids, &keys, from, to).await?;
        let (mut placed, rows) = waterfall::tracks(placed, compact, gap);
        if !compact {
            waterfall::sort_rows(&mut placed, view.order);
        }
        let focus_row = match &view.focus {
            Some(focus) if !compact => waterfall::pull_next_to(&mut placed, focus, &view.pull),
            Some(focus) => placed
                .iter()
                .find(|t| &t.request_id == focus)
                .map(|t| t.row),
            None => None,
        };
        let tracks: Vec<Track> = placed
            .into_iter()
            .filter(|t| t.row >= view.first_row && t.row < view.first_row + view.rows)
            .collect();
        let (tracks, clusters) = self.segments(tracks, &parts, compact, gap).await?;
        let lane = self.lane(&ids, from, to, width_px).await?;
        Ok(Waterfall {
            instance: instances.join(","),
            from_ns: from,
            to_ns: to,
            width_px,
            rows,
            first_row: view.first_row,
            focus_row,
            tracks,
            clusters,
            lane,
        })
    }

    /// The instances' ids and keys (each must exist), and when the latest of them last reported.
    async fn resolve_instances(
        &self,
        instances: &[String],
    ) -> Result<(Vec<i32>, HashMap<i32, String>, Nanos)> {
        let found = sqlx::query!(
            "SELECT id, instance_key, last_seen_ns FROM instances WHERE instance_key = ANY($1)",
            instances
        )
        .fetch_all(&self.pool)
        .await?;
        if let Some(missing) = instances
            .iter()
            .find(|i| !found.iter().any(|f| &f.instance_key == *i))
        {
            return Err(Error::NotFound(format!("no instance {missing:?}")));
        }
        let last_seen = found.iter().map(|f| f.last_seen_ns).max().unwrap_or(0);
        let ids = found.iter().map(|f| f.id).collect();
        let keys = found.into_iter().map(|f| (f.id, f.instance_key)).collect();
        Ok((ids, keys, last_seen))
    }

    /// Every request of the window as a track without segments (its extent only, from cheap
    /// columns), and its parts. Only the visible rows' stages are read later: the reply grows
    /// with the viewport, not with the window.
    async fn extents(
        &self,
        ids: &[i32],
        keys: &HashMap<i32, String>,
        from: Nanos,
        to: Nanos,
    ) -> Result<(Vec<Track>, HashMap<String, Vec<Part>>)> {
        let spans = sqlx::query!(
            "SELECT instance_id, request_id, arrival_ns, finished_ns, queue_ns, ttft_ns, tpot_ns,
                    prompt_tokens, output_tokens FROM requests
             WHERE instance_id = ANY($1) AND arrival_ns >= $2 AND arrival_ns < $3 AND finished_ns >= $4
             ORDER BY arrival_ns",
            ids,
            from - REQUEST_LOOKBACK_NS,
            to,
            from
        )
        .fetch_all(&self.pool)
        .await?;
        let mut parts: HashMap<String, Vec<Part>> = HashMap::new();
        let mut tracks: HashMap<String, Track> = HashMap::new();
        for r in spans {
            let t = tracks.entry(r.request_id.clone()).or_insert_with(|| Track {
                request_id: r.request_id.clone(),
                arrival_ns: r.arrival_ns,
                finished_ns: r.finished_ns,
                ..Track::default()
            });
            t.arrival_ns = t.arrival_ns.min(r.arrival_ns);
            t.finished_ns = t.finished_ns.max(r.finished_ns);
            // The part that finished last made the tokens (a PD request's decode part); its
            // prefill part, the first, saw the whole prompt.
            t.prompt_tokens = t.prompt_tokens.max(count(r.prompt_tokens));
            if r.finished_ns >= t.finished_ns {
                t.output_tokens = count(r.output_tokens);
                t.tpot_ms = r.tpot_ns.map(ms);
                t.ttft_ms = r.ttft_ns.map(|v| ms(v + r.arrival_ns - t.arrival_ns));
            }
            parts.entry(r.request_id).or_default().push(Part {
                instance_id: r.instance_id,
                arrival_ns: r.arrival_ns,
                finished_ns: r.finished_ns,
                queue_ns: r.queue_ns,
                ttft_ns: r.ttft_ns,
            });
        }
        for (id, p) in parts.iter_mut() {
            p.sort_by_key(|p| (p.arrival_ns, p.finished_ns));
            if ids.len() > 1 {
                let t = tracks.get_mut(id).expect("every part has its track");
                t.parts = p.iter().map(|p| keys[&p.instance_id].clone()).collect();
            }
        }
        Ok((tracks.into_values().collect(), parts))
    }

    /// The visible tracks' segments at the pixel's level of detail (and, in compact mode, the
    /// runs of sliver-thin tracks folded into clusters).
    async fn segments(
        &self,
        mut tracks: Vec<Track>,
        parts: &HashMap<String, Vec<Part>>,
        compact: bool,
        gap: Nanos,
    ) -> Result<(Vec<Track>, Vec<waterfall::Cluster>)> {
        // Narrow tracks are drawn from their stored phase times; only tracks wide enough to show
        // chunks, preemptions or a KV transfer read the stage record.
        let detailed = |t: &Track| t.finished_ns - t.arrival_ns >= DETAIL_PX * gap;
        for t in tracks.iter_mut().filter(|t| !detailed(t)) {
            // Queued on the first part's instance; first token on the last part's.
            let p = &parts[&t.request_id];
            let (first, last) = (&p[0], &p[p.len() - 1]);
            let ttft = last.ttft_ns.map(|v| v + last.arrival_ns - t.arrival_ns);
            t.segments = coarse_stages(t.arrival_ns, t.finished_ns, first.queue_ns, ttft);
        }
        // Packed rows of short requests would be thousands of slivers: they become clusters,
        // which bounds a compact reply by rows × width rather than by requests.
        let clusters;
        (tracks, clusters) = if compact {
            waterfall::cluster(tracks, NARROW_PX * gap, CLUSTER_PX * gap)
        } else {
            (tracks, Vec::new())
        };
        for t in tracks.iter_mut().filter(|t| !detailed(t)) {
            t.segments = waterfall::visible_segments(std::mem::take(&mut t.segments), gap);
        }
        // Looked up by primary key, one probe per part: a generic plan for
        // `request_id = ANY($ids)` filters every request of the window against the whole list
        // instead (measured 125 ms for 500 of 10,000 rows; this is under 1 ms).
        let wide: Vec<(&String, &Part)> = tracks
            .iter()
            .filter(|t| detailed(t))
            .flat_map(|t| parts[&t.request_id].iter().map(move |p| (&t.request_id, p)))
            .collect();
        let instance_ids: Vec<i32> = wide.iter().map(|w| w.1.instance_id).collect();
        let request_ids: Vec<String> = wide.iter().map(|w| w.0.clone()).collect();
        let arrivals: Vec<Nanos> = wide.iter().map(|w| w.1.arrival_ns).collect();
        // Zoomed in far enough that tokens are pixels apart, tracks carry their token times.
        let ticks = gap <= waterfall::TOKEN_TICK_PX_NS;
        let details = sqlx::query!(
            "SELECT r.request_id, r.arrival_ns, r.finished_ns, r.ttft_ns, r.prompt_tokens, r.output_tokens, r.detail,
                    CASE WHEN $4 THEN r.tokens END AS tokens
             FROM UNNEST($1::int[], $2::text[], $3::bigint[]) AS v (instance_id, request_id, arrival_ns)
             JOIN requests r ON r.instance_id = v.instance_id AND r.request_id = v.request_id
                            AND r.arrival_ns = v.arrival_ns",
            &instance_ids,
            &request_ids,
            &arrivals,
            ticks
        )
        .fetch_all(&self.pool)
        .await?;
        let mut found: HashMap<String, (Vec<tokenscope_core::api::Stage>, Vec<Nanos>)> =
            HashMap::new();
        for r in details {
            let mut trace = RequestTrace {
                request_id: r.request_id,
                arrival_ns: r.arrival_ns,
                finished_ns: r.finished_ns,
                prompt_tokens: count(r.prompt_tokens),
                output_tokens: count(r.output_tokens),
                ..RequestTrace::default()
            };
            Detail::parse(r.detail)?.apply(&mut trace);
            // Tokens are not read here; the first token's time is in the stored TTFT.
            trace.first_token_ns = trace.first_token_ns.or(r.ttft_ns.map(|t| r.arrival_ns + t));
            let slot = found.entry(trace.request_id.clone()).or_default();
            slot.0.extend(stages(&trace));
            if let Some(block) = &r.tokens {
                let tokens = token_block::decode(block, r.arrival_ns)?.0;
                slot.1.extend(tokens.iter().filter_map(|t| t.emitted_ns));
            }
        }
        for t in &mut tracks {
            if let Some((mut s, mut token_ns)) = found.remove(&t.request_id) {
                // The parts of a request, in time order: queue and prefill, transfer, decode.
                s.sort_by_key(|s| (s.start_ns, s.end_ns));
                token_ns.sort_unstable();
                t.segments = waterfall::visible_segments(s, gap);
                t.token_ns = token_ns;
            }
        }
        Ok((tracks, clusters))
    }

    /// The iteration lane: buckets summed from the coarsest rollup that still gives a bucket per
    /// pixel (a wide window reads thousands of cells, not every step), or from the steps of a
    /// narrow window; every step instead when the buckets say they fit the width.
    async fn lane(&self, ids: &[i32], from: Nanos, to: Nanos, width_px: u32) -> Result<Lane> {
        let g = waterfall::grid(from, to, width_px);
        let rows: Vec<BucketRow> = match g.rollup_ns {
            Some(resolution) => sqlx::query_as!(
                BucketRow,
                r#"SELECT $3 + (cell_ns - $3) / $5 * $5 AS "start_ns!", max(end_ns) AS "end_ns!",
                          sum(steps)::int AS "steps!", sum(prefill_tokens)::bigint AS "prefill_tokens!",
                          sum(decode_tokens)::bigint AS "decode_tokens!", max(max_batch_size) AS "max_batch_size!"
                   FROM iteration_rollups
                   WHERE instance_id = ANY($1) AND resolution_ns = $2 AND cell_ns >= $3 AND cell_ns < $4
                   GROUP BY 1 ORDER BY 1"#,
                ids,
                resolution,
                g.origin_ns,
                to,
                g.bucket_ns
            )
            .fetch_all(&self.pool)
            .await?,
            // A narrow window (under a few minutes): its steps are read once, summed here, and
            // listed if they fit.
            None => {
                // (Without a rollup the grid starts at `from`.)
                let steps = self.lane_steps(ids, g.origin_ns..to).await?;
                if steps.len() > width_px as usize {
                    return Ok(Lane::Buckets {
                        bucket_ns: g.bucket_ns,
                        buckets: waterfall::bucketize(&steps, g.origin_ns, g.bucket_ns),
                    });
                }
                return Ok(Lane::Steps { steps });
            }
        };
        // The buckets may count a few steps from before `from` (the first cell starts at or
        // before it), so this errs towards buckets, never towards an unbounded list.
        let rows: Vec<Bucket> = rows.into_iter().map(Bucket::from).collect();
        let counted: u64 = rows.iter().map(|b| u64::from(b.steps)).sum();
        if counted > u64::from(width_px) {
            return Ok(Lane::Buckets {
                bucket_ns: g.bucket_ns,
                buckets: rows,
            });
        }
        Ok(Lane::Steps {
            steps: self.lane_steps(ids, from..to).await?,
        })
    }

    /// The steps of the instances starting in `range`, as the lane draws them.
    async fn lane_steps(&self, ids: &[i32], range: std::ops::Range<Nanos>) -> Result<Vec<Step>> {
        Ok(self
            .steps_in(ids, range)
            .await?
            .into_iter()
            .map(|s| Step {
                start_ns: s.step.start_ns,
                end_ns: s.step.end_ns,
                prefill_tokens: count(s.step.prefill_tokens),
                decode_tokens: count(s.step.decode_tokens),
                batch_size: count(s.step.batch_size),
            })
            .collect())
    }
}

/// A bucket as SQL sums it (signed types; never negative, since it adds counts).
struct BucketRow {
    start_ns: Nanos,
    end_ns: Nanos,
    steps: i32,
    prefill_tokens: i64,
    decode_tokens: i64,
    max_batch_size: i32,
}

impl From<BucketRow> for Bucket {
    fn from(r: BucketRow) -> Self {
        Bucket {
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            steps: count(r.steps),
            prefill_tokens: u64::try_from(r.prefill_tokens).unwrap_or(0),
            decode_tokens: u64::try_from(r.decode_tokens).unwrap_or(0),
            max_batch_size: count(r.max_batch_size),
        }
    }
}

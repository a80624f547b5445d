//! Reads the waterfall of one instance over a window: the visible rows' request tracks at the
//! pixel's level of detail, and the iteration lane, summed from the rollups (or raw rows, for
//! narrow windows) to the pixel width when the steps outnumber the pixels.

use std::collections::HashMap;

use app::analysis::stages::{coarse_stages, stages};
use app::analysis::waterfall::{self, Bucket, Lane, Step, Track, Waterfall};
use app::model::{Nanos, RequestTrace};

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
}

impl Store {
    pub async fn waterfall(
        &self,
        instance: &str,
        from: Option<Nanos>,
        to: Option<Nanos>,
        width_px: u32,
        compact: bool,
        view: &Rows,
    ) -> Result<Waterfall> {
        let inst = sqlx::query!(
            "SELECT id, last_seen_ns FROM instances WHERE instance_key = $1",
            instance
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no instance {instance:?}")))?;
        // Without a window: the last five minutes the instance reported.
        let to = to.unwrap_or(inst.last_seen_ns);
        let from = from.unwrap_or(to - DEFAULT_WINDOW_NS);
        if from >= to {
            return Err(Error::InvalidArgument(format!(
                "from={from} must be before to={to}"
            )));
        }
        // Rows are laid out from every request's extent (cheap columns), then only the visible
        // rows' stages are read: the reply grows with the viewport, not with the window.
        let spans = sqlx::query!(
            "SELECT request_id, arrival_ns, finished_ns, queue_ns, ttft_ns FROM requests
             WHERE instance_id = $1 AND arrival_ns >= $2 AND arrival_ns < $3 AND finished_ns >= $4",
            inst.id,
            from - REQUEST_LOOKBACK_NS,
            to,
            from
        )
        .fetch_all(&self.pool)
        .await?;
        // Requests closer than a pixel would look joined, so compact mode keeps them apart.
        let gap = waterfall::bucket_ns(from, to, width_px);
        let mut phases: HashMap<String, (Option<Nanos>, Option<Nanos>)> = HashMap::new();
        let placed: Vec<Track> = spans
            .into_iter()
            .map(|r| {
                phases.insert(r.request_id.clone(), (r.queue_ns, r.ttft_ns));
                Track {
                    row: 0,
                    request_id: r.request_id,
                    arrival_ns: r.arrival_ns,
                    finished_ns: r.finished_ns,
                    segments: Vec::new(),
                    token_ns: Vec::new(),
                }
            })
            .collect();
        let (mut placed, rows) = waterfall::tracks(placed, compact, gap);
        let focus_row = match &view.focus {
            Some(focus) if !compact => waterfall::pull_next_to(&mut placed, focus, &view.pull),
            Some(focus) => placed
                .iter()
                .find(|t| &t.request_id == focus)
                .map(|t| t.row),
            None => None,
        };
        let mut tracks: Vec<Track> = placed
            .into_iter()
            .filter(|t| t.row >= view.first_row && t.row < view.first_row + view.rows)
            .collect();
        // Narrow tracks are drawn from their stored phase times; only tracks wide enough to show
        // chunks, preemptions or a KV transfer read the stage record.
        let detailed = |t: &Track| t.finished_ns - t.arrival_ns >= DETAIL_PX * gap;
        for t in tracks.iter_mut().filter(|t| !detailed(t)) {
            let (queue, ttft) = phases.get(&t.request_id).copied().unwrap_or_default();
            t.segments = coarse_stages(t.arrival_ns, t.finished_ns, queue, ttft);
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
        // Looked up by primary key, one probe per track: a generic plan for
        // `request_id = ANY($ids)` filters every request of the window against the whole list
        // instead (measured 125 ms for 500 of 10,000 rows; this is under 1 ms).
        let wide: Vec<&Track> = tracks.iter().filter(|t| detailed(t)).collect();
        let ids: Vec<String> = wide.iter().map(|t| t.request_id.clone()).collect();
        let arrivals: Vec<Nanos> = wide.iter().map(|t| t.arrival_ns).collect();
        // Zoomed in far enough that tokens are pixels apart, tracks carry their token times.
        let ticks = gap <= waterfall::TOKEN_TICK_PX_NS;
        let details = sqlx::query!(
            "SELECT r.request_id, r.arrival_ns, r.finished_ns, r.ttft_ns, r.prompt_tokens, r.output_tokens, r.detail,
                    CASE WHEN $4 THEN r.tokens END AS tokens
             FROM UNNEST($2::text[], $3::bigint[]) AS v (request_id, arrival_ns)
             JOIN requests r ON r.instance_id = $1 AND r.request_id = v.request_id AND r.arrival_ns = v.arrival_ns",
            inst.id,
            &ids,
            &arrivals,
            ticks
        )
        .fetch_all(&self.pool)
        .await?;
        let mut segments: HashMap<String, (Vec<app::api::Stage>, Vec<Nanos>)> = HashMap::new();
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
            let token_ns = match &r.tokens {
                Some(block) => token_block::decode(block, r.arrival_ns)?
                    .0
                    .iter()
                    .filter_map(|t| t.emitted_ns)
                    .collect(),
                None => Vec::new(),
            };
            segments.insert(
                trace.request_id.clone(),
                (waterfall::visible_segments(stages(&trace), gap), token_ns),
            );
        }
        for t in &mut tracks {
            if let Some((s, token_ns)) = segments.remove(&t.request_id) {
                t.segments = s;
                t.token_ns = token_ns;
            }
        }

        let lane = self.lane(inst.id, from, to, width_px).await?;
        Ok(Waterfall {
            instance: instance.to_string(),
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

    /// The iteration lane: buckets summed from the coarsest rollup that still gives a bucket per
    /// pixel (a wide window reads thousands of cells, not every step), or from the raw rows of a
    /// narrow window; every step instead when the buckets say they fit the width.
    async fn lane(&self, instance_id: i32, from: Nanos, to: Nanos, width_px: u32) -> Result<Lane> {
        let g = waterfall::grid(from, to, width_px);
        let rows: Vec<BucketRow> = match g.rollup_ns {
            Some(resolution) => sqlx::query_as!(
                BucketRow,
                r#"SELECT $3 + (cell_ns - $3) / $5 * $5 AS "start_ns!", max(end_ns) AS "end_ns!",
                          sum(steps)::int AS "steps!", sum(prefill_tokens)::bigint AS "prefill_tokens!",
                          sum(decode_tokens)::bigint AS "decode_tokens!", max(max_batch_size) AS "max_batch_size!"
                   FROM iteration_rollups
                   WHERE instance_id = $1 AND resolution_ns = $2 AND cell_ns >= $3 AND cell_ns < $4
                   GROUP BY 1 ORDER BY 1"#,
                instance_id,
                resolution,
                g.origin_ns,
                to,
                g.bucket_ns
            )
            .fetch_all(&self.pool)
            .await?,
            // A narrow window (under a few minutes): summing its raw steps is cheap.
            None => sqlx::query_as!(
                BucketRow,
                r#"SELECT $2 + (start_ns - $2) / $4 * $4 AS "start_ns!", max(end_ns) AS "end_ns!",
                          count(*)::int AS "steps!", sum(prefill_tokens)::bigint AS "prefill_tokens!",
                          sum(decode_tokens)::bigint AS "decode_tokens!", max(batch_size) AS "max_batch_size!"
                   FROM iterations WHERE instance_id = $1 AND start_ns >= $2 AND start_ns < $3
                   GROUP BY 1 ORDER BY 1"#,
                instance_id,
                g.origin_ns,
                to,
                g.bucket_ns
            )
            .fetch_all(&self.pool)
            .await?,
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
        let steps: Vec<Step> = sqlx::query!(
            "SELECT start_ns, end_ns, prefill_tokens, decode_tokens, batch_size FROM iterations
             WHERE instance_id = $1 AND start_ns >= $2 AND start_ns < $3 ORDER BY start_ns",
            instance_id,
            from,
            to
        )
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(|r| Step {
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            prefill_tokens: count(r.prefill_tokens),
            decode_tokens: count(r.decode_tokens),
            batch_size: count(r.batch_size),
        })
        .collect();
        Ok(Lane::Steps { steps })
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

//! The waterfall of one instance (or several as one, joining the parts of a request served by
//! more than one) over a window: the visible rows' request tracks at the pixel's level of detail,
//! and the iteration lane, summed from the rollups (or raw steps, for narrow windows) to the
//! pixel width when the steps outnumber the pixels.

use std::collections::HashMap;

use tokenscope_core::analysis::stages::{coarse_stages, stages};
use tokenscope_core::analysis::waterfall::{self, Bucket, Lane, Step, Track, Waterfall};
use tokenscope_core::api::Stage;
use tokenscope_core::model::{Nanos, RequestTrace, ms};

use crate::error::{Error, Result};
use crate::store::{Extent, RowKey, Store, batch_block, count};

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

/// The waterfall of one instance, or of several (comma-separated keys) drawn as one, where the
/// parts of a request that ran on several of them share its track.
pub async fn waterfall(
    store: &Store,
    instances: &[String],
    from: Option<Nanos>,
    to: Option<Nanos>,
    width_px: u32,
    compact: bool,
    view: &Rows,
) -> Result<Waterfall> {
    let set = store.resolve_instances(instances).await?;
    // Without a window: the last five minutes the instances reported.
    let to = to.unwrap_or(set.last_seen_ns);
    let from = from.unwrap_or(to - DEFAULT_WINDOW_NS);
    if from >= to {
        return Err(Error::InvalidArgument(format!(
            "from={from} must be before to={to}"
        )));
    }
    // Requests closer than a pixel would look joined, so compact mode keeps them apart.
    let gap = waterfall::bucket_ns(from, to, width_px);
    let extents = store.extents(&set.ids, from, to).await?;
    let (placed, parts) = tracks_of(extents, &set.keys, set.ids.len() > 1);
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
    let (tracks, clusters) = segments(store, tracks, &parts, compact, gap).await?;
    let lane = lane(store, &set.ids, from, to, width_px).await?;
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

/// Every request of the window as a track without segments (its extent only), and its parts
/// in time order. A request served by several instances in view (PD disaggregation: prefill on
/// one, decode on another) has a part on each, on one track.
fn tracks_of(
    extents: Vec<Extent>,
    keys: &HashMap<i32, String>,
    several: bool,
) -> (Vec<Track>, HashMap<String, Vec<Extent>>) {
    let mut parts: HashMap<String, Vec<Extent>> = HashMap::new();
    let mut tracks: HashMap<String, Track> = HashMap::new();
    for r in extents {
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
        t.prompt_tokens = t.prompt_tokens.max(r.prompt_tokens);
        if r.finished_ns >= t.finished_ns {
            t.output_tokens = r.output_tokens;
            t.tpot_ms = r.tpot_ns.map(ms);
            t.ttft_ms = r.ttft_ns.map(|v| ms(v + r.arrival_ns - t.arrival_ns));
        }
        parts.entry(r.request_id.clone()).or_default().push(r);
    }
    for (id, p) in parts.iter_mut() {
        p.sort_by_key(|p| (p.arrival_ns, p.finished_ns));
        if several {
            let t = tracks.get_mut(id).expect("every part has its track");
            t.parts = p.iter().map(|p| keys[&p.instance_id].clone()).collect();
        }
    }
    (tracks.into_values().collect(), parts)
}

/// The visible tracks' segments at the pixel's level of detail (and, in compact mode, the runs
/// of sliver-thin tracks folded into clusters).
async fn segments(
    store: &Store,
    mut tracks: Vec<Track>,
    parts: &HashMap<String, Vec<Extent>>,
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
    // Packed rows of short requests would be thousands of slivers: they become clusters, which
    // bounds a compact reply by rows × width rather than by requests.
    let clusters;
    (tracks, clusters) = if compact {
        waterfall::cluster(tracks, NARROW_PX * gap, CLUSTER_PX * gap)
    } else {
        (tracks, Vec::new())
    };
    for t in tracks.iter_mut().filter(|t| !detailed(t)) {
        t.segments = waterfall::visible_segments(std::mem::take(&mut t.segments), gap);
    }
    let wide: Vec<RowKey> = tracks
        .iter()
        .filter(|t| detailed(t))
        .flat_map(|t| parts[&t.request_id].iter())
        .map(|p| RowKey {
            instance_id: p.instance_id,
            request_id: p.request_id.clone(),
            arrival_ns: p.arrival_ns,
        })
        .collect();
    // Zoomed in far enough that tokens are pixels apart, tracks carry their token times.
    let ticks = gap <= waterfall::TOKEN_TICK_PX_NS;
    let mut found: HashMap<String, Found> = HashMap::new();
    for mut trace in store.stage_records(&wide, ticks).await? {
        let slot = found.entry(trace.request_id.clone()).or_default();
        slot.stages.extend(stages(&trace));
        slot.token_ns
            .extend(trace.tokens.iter().filter_map(|t| t.emitted_ns));
        trace.tokens = Vec::new();
        slot.parts.push(trace);
    }
    for t in &mut tracks {
        if let Some(Found {
            stages: mut s,
            mut token_ns,
            parts: traces,
        }) = found.remove(&t.request_id)
        {
            // The parts of a request, in time order: queue and prefill, transfer, decode.
            s.sort_by_key(|s| (s.start_ns, s.end_ns));
            token_ns.sort_unstable();
            t.segments = waterfall::visible_segments(s, gap);
            t.token_ns = token_ns;
            // Who asked is the client's, on any part; the cache served the first part's prompt.
            let first = traces.iter().min_by_key(|r| r.arrival_ns);
            t.tenant = traces.iter().find_map(|r| r.served.tenant.clone());
            t.lora_adapter = traces.iter().find_map(|r| r.served.lora_adapter.clone());
            t.priority = traces.iter().find_map(|r| r.served.priority);
            t.cached_tokens = first.map_or(0, |r| r.cached_tokens);
        }
    }
    Ok((tracks, clusters))
}

/// A wide track's stage record: its parts' stages, token times, and the parts themselves.
#[derive(Default)]
struct Found {
    stages: Vec<Stage>,
    token_ns: Vec<Nanos>,
    parts: Vec<RequestTrace>,
}

/// The iteration lane: buckets summed from the coarsest rollup that still gives a bucket per
/// pixel (a wide window reads thousands of cells, not every step), or from the steps of a narrow
/// window; every step instead when the buckets say they fit the width.
async fn lane(store: &Store, ids: &[i32], from: Nanos, to: Nanos, width_px: u32) -> Result<Lane> {
    let g = waterfall::grid(from, to, width_px, &crate::store::ROLLUP_NS);
    let Some(resolution) = g.rollup_ns else {
        // A narrow window (under a few minutes): its steps are read once, summed here, and
        // listed if they fit. (Without a rollup the grid starts at `from`.)
        let steps = lane_steps(store, ids, g.origin_ns..to).await?;
        if steps.len() > width_px as usize {
            return Ok(Lane::Buckets {
                bucket_ns: g.bucket_ns,
                buckets: waterfall::bucketize(&steps, g.origin_ns, g.bucket_ns),
            });
        }
        return Ok(Lane::Steps { steps });
    };
    let buckets: Vec<Bucket> = store
        .rollup_buckets(ids, resolution, g.origin_ns, to, g.bucket_ns)
        .await?
        .into_iter()
        .map(|b| Bucket {
            start_ns: b.start_ns,
            end_ns: b.end_ns,
            steps: b.steps,
            prefill_tokens: b.prefill_tokens,
            decode_tokens: b.decode_tokens,
            max_batch_size: b.max_batch_size,
            drafts: b.drafts,
        })
        .collect();
    // The buckets may count a few steps from before `from` (the first cell starts at or before
    // it), so this errs towards buckets, never towards an unbounded list.
    let counted: u64 = buckets.iter().map(|b| u64::from(b.steps)).sum();
    if counted > u64::from(width_px) {
        return Ok(Lane::Buckets {
            bucket_ns: g.bucket_ns,
            buckets,
        });
    }
    Ok(Lane::Steps {
        steps: lane_steps(store, ids, from..to).await?,
    })
}

/// The steps of the instances starting in `range`, as the lane draws them.
async fn lane_steps(
    store: &Store,
    ids: &[i32],
    range: std::ops::Range<Nanos>,
) -> Result<Vec<Step>> {
    store
        .steps_in(ids, range)
        .await?
        .into_iter()
        .map(|s| {
            Ok(Step {
                start_ns: s.step.start_ns,
                end_ns: s.step.end_ns,
                prefill_tokens: count(s.step.prefill_tokens),
                decode_tokens: count(s.step.decode_tokens),
                batch_size: count(s.step.batch_size),
                drafts: batch_block::draft_sums(&s.batch)?,
            })
        })
        .collect()
}

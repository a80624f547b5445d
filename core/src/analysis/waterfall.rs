//! The wide-angle view's data: one track per request (or packed tracks in compact mode) with
//! its stage segments, and the iteration lane — every engine step when they fit the pixel
//! width, else per-pixel buckets, so the payload never grows with the number of iterations.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

use crate::analysis::stages::{Stage, StageKind};
use crate::model::{DraftSums, Nanos};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Track {
    /// Row on screen (0 = top). In compact mode requests that do not overlap share a row.
    pub row: u32,
    pub request_id: String,
    pub arrival_ns: Nanos,
    pub finished_ns: Nanos,
    /// Its size and speed, for the row's label: prompt tokens (of its first part), output tokens,
    /// TTFT from its arrival and TPOT (of its last part).
    #[serde(default)]
    pub prompt_tokens: u32,
    #[serde(default)]
    pub output_tokens: u32,
    #[serde(default)]
    pub ttft_ms: Option<f64>,
    #[serde(default)]
    pub tpot_ms: Option<f64>,
    pub segments: Vec<Stage>,
    /// When each output token was emitted, once the window is zoomed in far enough that tokens
    /// are pixels apart (`TOKEN_TICK_PX_NS`); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub token_ns: Vec<Nanos>,
    /// When the view has several instances: the ones this request ran on, in time order (a
    /// PD-disaggregated request's prefill instance, then its decode instance); its parts share
    /// this track.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<String>,
    /// Who asked, and what the prefix cache served: read with the stage record, so only for
    /// tracks wide enough to read it (what the hover shows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_adapter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(default, skip_serializing_if = "crate::model::is_zero")]
    pub cached_tokens: u32,
}

/// Pixels no wider than this (2 ms) put a typical 10–50 ms decode step several pixels apart:
/// tracks then carry their token times, and the view draws a tick per token.
pub const TOKEN_TICK_PX_NS: Nanos = 2_000_000;

/// One engine step as the lane draws it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub start_ns: Nanos,
    pub end_ns: Nanos,
    pub prefill_tokens: u32,
    pub decode_tokens: u32,
    pub batch_size: u32,
    /// Speculative decoding in the step (absent without).
    #[serde(default, skip_serializing_if = "DraftSums::is_empty")]
    pub drafts: DraftSums,
}

/// Steps aggregated over one bucket of time (about a pixel).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    pub start_ns: Nanos,
    pub end_ns: Nanos,
    pub steps: u32,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
    pub max_batch_size: u32,
    /// Speculative decoding in the bucket's steps (absent without).
    #[serde(default, skip_serializing_if = "DraftSums::is_empty")]
    pub drafts: DraftSums,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "lod", rename_all = "snake_case")]
pub enum Lane {
    Steps {
        steps: Vec<Step>,
    },
    Buckets {
        bucket_ns: Nanos,
        buckets: Vec<Bucket>,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Waterfall {
    pub instance: String,
    pub from_ns: Nanos,
    pub to_ns: Nanos,
    pub width_px: u32,
    /// Rows in the whole window; `tracks` holds those from `first_row` on, a viewport's worth.
    pub rows: u32,
    pub first_row: u32,
    /// The row of the request asked for with `focus=`, when it is in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub focus_row: Option<u32>,
    pub tracks: Vec<Track>,
    /// Compact mode only: runs of requests too narrow to draw one by one, summarised.
    #[serde(default)]
    pub clusters: Vec<Cluster>,
    pub lane: Lane,
}

impl Lane {
    /// Speculative decoding over every step the lane holds.
    pub fn drafts(&self) -> DraftSums {
        let mut sums = DraftSums::default();
        match self {
            Lane::Steps { steps } => steps.iter().for_each(|s| sums.merge(s.drafts)),
            Lane::Buckets { buckets, .. } => buckets.iter().for_each(|b| sums.merge(b.drafts)),
        }
        sums
    }
}

/// Requests of one packed row too narrow to draw one by one, that follow each other closely:
/// how many, and how their time split between phases, so the view draws density coloured by
/// phase instead of thousands of one-pixel slivers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    pub row: u32,
    pub start_ns: Nanos,
    pub end_ns: Nanos,
    pub requests: u32,
    /// Time the cluster's requests spent in each phase, summed over them.
    pub queued_ns: Nanos,
    pub prefill_ns: Nanos,
    pub decode_ns: Nanos,
}

/// Rows for intervals `(start, end)` so that no two in a row come closer than `gap`: greedy by
/// start time onto the row that freed up first, which uses the fewest rows possible.
pub fn pack(intervals: &[(Nanos, Nanos)], gap: Nanos) -> (Vec<u32>, u32) {
    let mut order: Vec<usize> = (0..intervals.len()).collect();
    order.sort_by_key(|&i| intervals[i]);
    let mut free: BinaryHeap<Reverse<(Nanos, u32)>> = BinaryHeap::new();
    let mut rows = vec![0; intervals.len()];
    let mut used = 0;
    for i in order {
        let (start, end) = intervals[i];
        let row = match free.peek() {
            Some(&Reverse((until, row))) if until.saturating_add(gap) <= start => {
                free.pop();
                row
            }
            _ => {
                used += 1;
                used - 1
            }
        };
        rows[i] = row;
        free.push(Reverse((end, row)));
    }
    (rows, used)
}

/// Aggregates steps into buckets of `bucket_ns` from `from` (steps by start time).
pub fn bucketize(steps: &[Step], from: Nanos, bucket_ns: Nanos) -> Vec<Bucket> {
    let mut out: Vec<Bucket> = Vec::new();
    for s in steps {
        let k = (s.start_ns - from).div_euclid(bucket_ns.max(1));
        let start = from + k * bucket_ns;
        match out.last_mut() {
            Some(b) if b.start_ns == start => {
                b.steps += 1;
                b.end_ns = b.end_ns.max(s.end_ns);
                b.prefill_tokens += u64::from(s.prefill_tokens);
                b.decode_tokens += u64::from(s.decode_tokens);
                b.max_batch_size = b.max_batch_size.max(s.batch_size);
                b.drafts.merge(s.drafts);
            }
            _ => out.push(Bucket {
                start_ns: start,
                end_ns: s.end_ns,
                steps: 1,
                prefill_tokens: u64::from(s.prefill_tokens),
                decode_tokens: u64::from(s.decode_tokens),
                max_batch_size: s.batch_size,
                drafts: s.drafts,
            }),
        }
    }
    out
}

/// Nanoseconds per pixel of a window, rounded up so the window fits in `width_px` buckets.
pub fn bucket_ns(from: Nanos, to: Nanos, width_px: u32) -> Nanos {
    let (span, w) = ((to - from).max(1), Nanos::from(width_px.max(1)));
    (span + w - 1) / w
}

/// How a window's steps are summed into at most `width_px` buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    /// The rollup resolution to read, or `None` to sum the raw iterations (narrow windows).
    pub rollup_ns: Option<Nanos>,
    /// Start of bucket 0: at or before the window's start, on the rollup's cell grid.
    pub origin_ns: Nanos,
    pub bucket_ns: Nanos,
}

/// The coarsest of the store's rollup resolutions `rollups_ns` (ascending) with at least two
/// cells per pixel-wide bucket, and buckets made of whole cells. Aligning buckets to cells keeps every sum exact (no cell is split between buckets);
/// the price is a bucket wider than a pixel by less than two cells (so at most twice, and for
/// any real width about 1.5 times as wide), and a first bucket that may start before the window.
pub fn grid(from: Nanos, to: Nanos, width_px: u32, rollups_ns: &[Nanos]) -> Grid {
    let wanted = bucket_ns(from, to, width_px);
    match rollups_ns.iter().rev().find(|&&r| 2 * r <= wanted) {
        None => Grid {
            rollup_ns: None,
            origin_ns: from,
            bucket_ns: wanted,
        },
        Some(&r) => {
            let origin = from.div_euclid(r) * r;
            let cells = (bucket_ns(origin, to, width_px) + r - 1) / r;
            Grid {
                rollup_ns: Some(r),
                origin_ns: origin,
                bucket_ns: cells * r,
            }
        }
    }
}

/// A track's segments as pixels `px_ns` wide can show them. Neighbours of one kind less than a
/// pixel apart merge when either is narrower than a pixel (a run of small prefill chunks becomes
/// one block; chunks wide enough to see stay apart); what is still narrower than a pixel is
/// dropped, unless nothing would be left, when the longest stays so that every track keeps its
/// colour. At low zoom this is most of a reply's bytes; at high zoom it changes nothing.
pub fn visible_segments(segments: Vec<Stage>, px_ns: Nanos) -> Vec<Stage> {
    let width = |s: &Stage| s.end_ns - s.start_ns;
    let mut merged: Vec<Stage> = Vec::with_capacity(segments.len());
    for s in segments {
        match merged.last_mut() {
            Some(m)
                if m.kind == s.kind
                    && s.start_ns - m.end_ns < px_ns
                    && (width(m) < px_ns || width(&s) < px_ns) =>
            {
                m.end_ns = m.end_ns.max(s.end_ns);
                m.tokens = match (m.tokens, s.tokens) {
                    (None, None) => None,
                    (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
                };
                m.iteration = None;
            }
            _ => merged.push(s),
        }
    }
    let longest = merged.iter().max_by_key(|s| width(s)).cloned();
    merged.retain(|s| width(s) >= px_ns);
    if merged.is_empty() {
        merged.extend(longest);
    }
    merged
}

/// Folds the tracks narrower than `narrow_ns` of each row into clusters at most `span_ns` wide
/// (so a row holds at most one cluster per `span_ns` of time); a cluster of one stays a track.
/// The tracks must still carry all their segments, since the clusters sum their phases. Tracks
/// come back in arrival order.
pub fn cluster(
    mut tracks: Vec<Track>,
    narrow_ns: Nanos,
    span_ns: Nanos,
) -> (Vec<Track>, Vec<Cluster>) {
    tracks.sort_by(|a, b| {
        (a.row, a.arrival_ns, &a.request_id).cmp(&(b.row, b.arrival_ns, &b.request_id))
    });
    let mut kept = Vec::new();
    let mut clusters = Vec::new();
    let mut run: Vec<Track> = Vec::new();
    let flush = |run: &mut Vec<Track>, kept: &mut Vec<Track>, clusters: &mut Vec<Cluster>| {
        if run.len() == 1 {
            kept.append(run);
        } else if let Some(first) = run.first() {
            let mut c = Cluster {
                row: first.row,
                start_ns: first.arrival_ns,
                end_ns: first.finished_ns,
                requests: run.len() as u32,
                queued_ns: 0,
                prefill_ns: 0,
                decode_ns: 0,
            };
            for s in run.drain(..).flat_map(|t| t.segments) {
                c.end_ns = c.end_ns.max(s.end_ns);
                let slot = match s.kind {
                    StageKind::Queued => &mut c.queued_ns,
                    StageKind::Prefill => &mut c.prefill_ns,
                    StageKind::Decode => &mut c.decode_ns,
                    StageKind::Preempted | StageKind::KvTransfer => continue,
                };
                *slot += s.end_ns - s.start_ns;
            }
            clusters.push(c);
        }
    };
    for t in tracks {
        let narrow = t.finished_ns - t.arrival_ns < narrow_ns;
        let joins = narrow
            && run
                .first()
                .is_some_and(|f| f.row == t.row && t.finished_ns - f.arrival_ns <= span_ns);
        if !joins {
            flush(&mut run, &mut kept, &mut clusters);
        }
        if narrow {
            run.push(t);
        } else {
            kept.push(t);
        }
    }
    flush(&mut run, &mut kept, &mut clusters);
    kept.sort_by(|a, b| (a.arrival_ns, &a.request_id).cmp(&(b.arrival_ns, &b.request_id)));
    (kept, clusters)
}

/// Lays out tracks: arrival order, one row each, or packed when `compact`.
pub fn tracks(mut tracks: Vec<Track>, compact: bool, gap: Nanos) -> (Vec<Track>, u32) {
    tracks.sort_by(|a, b| (a.arrival_ns, &a.request_id).cmp(&(b.arrival_ns, &b.request_id)));
    if !compact {
        let n = tracks.len() as u32;
        for (i, t) in tracks.iter_mut().enumerate() {
            t.row = i as u32;
        }
        return (tracks, n);
    }
    let spans: Vec<(Nanos, Nanos)> = tracks
        .iter()
        .map(|t| (t.arrival_ns, t.finished_ns))
        .collect();
    let (rows, used) = pack(&spans, gap);
    for (t, r) in tracks.iter_mut().zip(rows) {
        t.row = r;
    }
    (tracks, used)
}

/// What the rows of a waterfall are sorted by (not in compact mode, where packing decides).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RowOrder {
    /// Arrival, oldest first.
    #[default]
    Arrival,
    /// The rest: largest first, the requests without the value last, ties by arrival.
    Ttft,
    Tpot,
    Prompt,
    Duration,
}

impl RowOrder {
    pub const ALL: [RowOrder; 5] = [
        RowOrder::Arrival,
        RowOrder::Ttft,
        RowOrder::Tpot,
        RowOrder::Prompt,
        RowOrder::Duration,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RowOrder::Arrival => "arrival",
            RowOrder::Ttft => "ttft",
            RowOrder::Tpot => "tpot",
            RowOrder::Prompt => "prompt",
            RowOrder::Duration => "duration",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == s)
    }

    fn key(self, t: &Track) -> Option<f64> {
        match self {
            RowOrder::Arrival => None,
            RowOrder::Ttft => t.ttft_ms,
            RowOrder::Tpot => t.tpot_ms,
            RowOrder::Prompt => Some(f64::from(t.prompt_tokens)),
            RowOrder::Duration => Some((t.finished_ns - t.arrival_ns) as f64),
        }
    }
}

/// Rows renumbered in `order` (tracks laid out one per row, by arrival).
pub fn sort_rows(tracks: &mut [Track], order: RowOrder) {
    if order == RowOrder::Arrival {
        return;
    }
    tracks.sort_by(|a, b| match (order.key(a), order.key(b)) {
        (Some(x), Some(y)) => y.total_cmp(&x).then(a.row.cmp(&b.row)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.row.cmp(&b.row),
    });
    for (i, t) in tracks.iter_mut().enumerate() {
        t.row = i as u32;
    }
}

/// Moves the tracks of `pull` (a request's culprits, say) to the rows right below `focus`'s,
/// keeping every other track in its order; returns the focused row. Tracks must have one row
/// each (not packed).
pub fn pull_next_to(tracks: &mut [Track], focus: &str, pull: &[String]) -> Option<u32> {
    tracks.sort_by_key(|t| t.row);
    let at = tracks.iter().position(|t| t.request_id == focus)?;
    let pulled = |t: &Track| t.request_id != focus && pull.contains(&t.request_id);
    // Stable partitions on both sides of the focus keep the others in arrival order.
    tracks[..at].sort_by_key(|t| pulled(t));
    let moved_up = tracks[..at].iter().filter(|t| pulled(t)).count();
    tracks[at - moved_up..]
        .sort_by_key(|t| (t.request_id != focus, !pulled(t) && t.request_id != focus));
    for (i, t) in tracks.iter_mut().enumerate() {
        t.row = i as u32;
    }
    Some((at - moved_up) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_sort_slowest_first_with_unknowns_last() {
        let mut t: Vec<Track> = [Some(20.0), None, Some(90.0), Some(20.0)]
            .into_iter()
            .enumerate()
            .map(|(i, tpot)| Track {
                row: i as u32,
                request_id: format!("r{i}"),
                tpot_ms: tpot,
                ..Track::default()
            })
            .collect();
        sort_rows(&mut t, RowOrder::Tpot);
        let order: Vec<&str> = t.iter().map(|t| t.request_id.as_str()).collect();
        assert_eq!(order, ["r2", "r0", "r3", "r1"], "ties keep arrival order");
        assert!(t.iter().enumerate().all(|(i, t)| t.row == i as u32));
        assert_eq!(RowOrder::parse("prompt"), Some(RowOrder::Prompt));
        assert_eq!(RowOrder::parse("fastest"), None);
    }

    #[test]
    fn pulled_tracks_sit_right_below_the_focus_and_the_rest_keep_their_order() {
        let mut t: Vec<Track> = ["a", "c1", "b", "v", "d", "c2", "e"]
            .iter()
            .enumerate()
            .map(|(i, id)| Track {
                row: i as u32,
                request_id: id.to_string(),
                arrival_ns: i as Nanos,
                finished_ns: i as Nanos + 10,
                ..Track::default()
            })
            .collect();
        let row = pull_next_to(&mut t, "v", &["c1".into(), "c2".into(), "gone".into()]);
        let order: Vec<&str> = t.iter().map(|t| t.request_id.as_str()).collect();
        assert_eq!(order, ["a", "b", "v", "c1", "c2", "d", "e"]);
        assert_eq!(row, Some(2));
        assert!(t.iter().enumerate().all(|(i, t)| t.row == i as u32));
        assert_eq!(pull_next_to(&mut t, "nobody", &[]), None);
    }

    /// Deterministic pseudo-random intervals (no crate needed for a property check).
    fn intervals(seed: u64, n: usize) -> Vec<(Nanos, Nanos)> {
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let start = (x >> 33) as Nanos % 10_000;
                let len = 1 + (x >> 13) as Nanos % 500;
                (start, start + len)
            })
            .collect()
    }

    #[test]
    fn packing_never_overlaps_and_uses_the_fewest_rows() {
        for seed in 0..200 {
            let iv = intervals(seed, 1 + (seed as usize * 7) % 300);
            let gap = (seed % 3) as Nanos * 5;
            let (rows, used) = pack(&iv, gap);
            for r in 0..used {
                let mut mine: Vec<_> = iv
                    .iter()
                    .zip(&rows)
                    .filter(|(_, x)| **x == r)
                    .map(|(i, _)| *i)
                    .collect();
                mine.sort();
                assert!(
                    mine.windows(2).all(|w| w[0].1 + gap <= w[1].0),
                    "seed {seed} row {r}"
                );
            }
            // Optimal: as many rows as the most intervals alive at once (widened by the gap).
            let max_overlap = iv
                .iter()
                .map(|&(s, _)| iv.iter().filter(|&&(a, b)| a <= s && s < b + gap).count())
                .max()
                .unwrap_or(0);
            assert_eq!(used as usize, max_overlap, "seed {seed}");
        }
    }

    #[test]
    fn grids_fit_the_width_and_are_made_of_whole_cells() {
        // The store's resolutions (`tokenscope::store::ROLLUP_NS`).
        const ROLLUP_NS: [Nanos; 4] = [100_000_000, 1_000_000_000, 10_000_000_000, 100_000_000_000];
        let day = 86_400 * 1_000_000_000;
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let from = 1_796_000_000_000_000_000 + (x >> 20) as Nanos % day;
            // Windows from a millisecond to about three days.
            let span = 1_000_000 + (x >> 7) as Nanos % (3 * day);
            let width = 1 + (x >> 45) as u32 % 4000;
            let to = from + span;
            let g = grid(from, to, width, &ROLLUP_NS);
            let wanted = bucket_ns(from, to, width);
            let buckets = (to - g.origin_ns + g.bucket_ns - 1) / g.bucket_ns;
            assert!(buckets <= Nanos::from(width), "{g:?} {width}px");
            assert!(g.origin_ns <= from && g.bucket_ns >= wanted, "{g:?}");
            match g.rollup_ns {
                None => assert!(wanted < 2 * ROLLUP_NS[0] && g.origin_ns == from),
                Some(r) => {
                    assert_eq!(g.origin_ns % r, 0);
                    assert_eq!(g.bucket_ns % r, 0);
                    assert!(g.bucket_ns < wanted + 2 * r, "{g:?} {wanted}");
                    // A bounded number of cells is read per bucket.
                    assert!(g.bucket_ns / r <= 21 || r == ROLLUP_NS[3], "{g:?}");
                }
            }
        }
    }

    #[test]
    fn visible_segments_are_a_pixel_wide_and_change_nothing_at_full_zoom() {
        use crate::analysis::stages::StageKind;
        let kinds = [
            StageKind::Queued,
            StageKind::Prefill,
            StageKind::Prefill,
            StageKind::Decode,
            StageKind::Preempted,
        ];
        for seed in 0..300 {
            let mut segs: Vec<Stage> = intervals(seed, 1 + seed as usize % 12)
                .into_iter()
                .enumerate()
                .map(|(k, (s, e))| Stage {
                    kind: kinds[k % kinds.len()],
                    start_ns: s,
                    end_ns: e,
                    tokens: Some(k as u32),
                    iteration: Some(k as u64),
                    ..Stage::default()
                })
                .collect();
            segs.sort_by_key(|s| (s.start_ns, s.end_ns));
            // One nanosecond per pixel: every segment is visible, nothing merges.
            assert_eq!(visible_segments(segs.clone(), 1), segs, "seed {seed}");
            let px = 1 + (seed as Nanos * 13) % 700;
            let out = visible_segments(segs.clone(), px);
            assert!(!out.is_empty() && out.len() <= segs.len(), "seed {seed}");
            assert!(
                out.len() == 1 || out.iter().all(|s| s.end_ns - s.start_ns >= px),
                "seed {seed}: {out:?}"
            );
            // Merging never invents time or tokens.
            let tokens = |v: &[Stage]| v.iter().filter_map(|s| s.tokens).sum::<u32>();
            assert!(tokens(&out) <= tokens(&segs));
            let (lo, hi) = (
                segs[0].start_ns,
                segs.iter().map(|s| s.end_ns).max().unwrap(),
            );
            assert!(out.iter().all(|s| s.start_ns >= lo && s.end_ns <= hi));
        }
    }

    #[test]
    fn clusters_account_for_every_narrow_request_and_its_phases() {
        for seed in 0..100 {
            let iv = intervals(seed, 50 + seed as usize * 3);
            let (rows, _) = pack(&iv, 5);
            let tracks: Vec<Track> = iv
                .iter()
                .zip(rows)
                .enumerate()
                .map(|(k, (&(s, e), row))| Track {
                    row,
                    request_id: format!("r{k}"),
                    arrival_ns: s,
                    finished_ns: e,
                    segments: vec![
                        Stage {
                            kind: StageKind::Queued,
                            start_ns: s,
                            end_ns: s + (e - s) / 3,
                            tokens: None,
                            iteration: None,
                            ..Stage::default()
                        },
                        Stage {
                            kind: StageKind::Decode,
                            start_ns: s + (e - s) / 3,
                            end_ns: e,
                            tokens: None,
                            iteration: None,
                            ..Stage::default()
                        },
                    ],
                    ..Track::default()
                })
                .collect();
            let narrow = 1 + (seed as Nanos * 7) % 200;
            let (kept, clusters) = cluster(tracks.clone(), narrow, 4 * narrow);
            let clustered: u32 = clusters.iter().map(|c| c.requests).sum();
            assert_eq!(kept.len() + clustered as usize, tracks.len(), "seed {seed}");
            assert!(clusters.iter().all(|c| c.requests >= 2));
            assert!(kept.windows(2).all(|w| w[0].arrival_ns <= w[1].arrival_ns));
            // The clusters' phases are exactly those of the requests they replaced.
            let phase = |v: &[Track], kind| -> Nanos {
                v.iter()
                    .flat_map(|t| &t.segments)
                    .filter(|s| s.kind == kind)
                    .map(|s| s.end_ns - s.start_ns)
                    .sum()
            };
            for (kind, summed) in [
                (
                    StageKind::Queued,
                    clusters.iter().map(|c| c.queued_ns).sum::<Nanos>(),
                ),
                (
                    StageKind::Decode,
                    clusters.iter().map(|c| c.decode_ns).sum(),
                ),
            ] {
                assert_eq!(
                    phase(&kept, kind) + summed,
                    phase(&tracks, kind),
                    "seed {seed}"
                );
            }
            // Only narrow requests are folded, and each cluster covers its members.
            for c in &clusters {
                let members: Vec<&Track> = tracks
                    .iter()
                    .filter(|t| {
                        t.row == c.row && t.arrival_ns >= c.start_ns && t.finished_ns <= c.end_ns
                    })
                    .filter(|t| !kept.iter().any(|k| k.request_id == t.request_id))
                    .collect();
                assert_eq!(members.len() as u32, c.requests, "seed {seed}: {c:?}");
                assert!(
                    members
                        .iter()
                        .all(|t| t.finished_ns - t.arrival_ns < narrow)
                );
            }
        }
    }

    #[test]
    fn buckets_conserve_steps_and_tokens_and_stay_within_the_width() {
        for seed in 0..50 {
            let mut steps: Vec<Step> = intervals(seed, 5000)
                .into_iter()
                .map(|(s, e)| Step {
                    start_ns: s,
                    end_ns: e,
                    prefill_tokens: (s % 7) as u32,
                    decode_tokens: (e % 5) as u32,
                    batch_size: (s % 40) as u32,
                    drafts: DraftSums {
                        entries: (s % 3) as u64,
                        proposed: (s % 3 * 4) as u64,
                        accepted: (e % 3) as u64,
                    },
                })
                .collect();
            steps.sort_by_key(|s| s.start_ns);
            let width = 1 + (seed as u32 * 37) % 1200;
            let b = bucketize(&steps, 0, bucket_ns(0, 10_500, width));
            assert!(
                b.len() as u32 <= width,
                "seed {seed}: {} buckets for {width} px",
                b.len()
            );
            assert_eq!(
                b.iter().map(|x| x.steps as usize).sum::<usize>(),
                steps.len()
            );
            assert_eq!(
                b.iter().map(|x| x.prefill_tokens).sum::<u64>(),
                steps
                    .iter()
                    .map(|s| u64::from(s.prefill_tokens))
                    .sum::<u64>()
            );
            let mut drafts = DraftSums::default();
            steps.iter().for_each(|s| drafts.merge(s.drafts));
            let mut summed = DraftSums::default();
            b.iter().for_each(|x| summed.merge(x.drafts));
            assert_eq!(summed, drafts, "seed {seed}: speculation is conserved too");
            assert!(b.windows(2).all(|w| w[0].start_ns < w[1].start_ns));
        }
    }
}

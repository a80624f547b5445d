//! Reads the waterfall of one instance over a window: request tracks and the iteration lane,
//! aggregated in SQL to the pixel width when the steps outnumber the pixels.

use app::analysis::stages::stages;
use app::analysis::waterfall::{self, Bucket, Lane, Step, Track, Waterfall};
use app::model::{Nanos, RequestTrace};

use super::{REQUEST_LOOKBACK_NS, Store, read::count, write::Detail};
use crate::error::{Error, Result};

const DEFAULT_WINDOW_NS: Nanos = 5 * 60 * 1_000_000_000;

/// The rows the client shows (virtualized: a viewport's worth at a time).
#[derive(Clone, Copy, Debug)]
pub struct Rows {
    pub first_row: u32,
    pub rows: u32,
}

impl Store {
    pub async fn waterfall(
        &self,
        instance: &str,
        from: Option<Nanos>,
        to: Option<Nanos>,
        width_px: u32,
        compact: bool,
        view: Rows,
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
            "SELECT request_id, arrival_ns, finished_ns FROM requests
             WHERE instance_id = $1 AND arrival_ns >= $2 AND arrival_ns < $3 AND finished_ns >= $4",
            inst.id,
            from - REQUEST_LOOKBACK_NS,
            to,
            from
        )
        .fetch_all(&self.pool)
        .await?;
        let bucket = waterfall::bucket_ns(from, to, width_px);
        let placed: Vec<Track> = spans
            .into_iter()
            .map(|r| Track {
                row: 0,
                request_id: r.request_id,
                arrival_ns: r.arrival_ns,
                finished_ns: r.finished_ns,
                segments: Vec::new(),
            })
            .collect();
        let (placed, rows) = waterfall::tracks(placed, compact, bucket);
        let visible: Vec<Track> = placed
            .into_iter()
            .filter(|t| t.row >= view.first_row && t.row < view.first_row + view.rows)
            .collect();
        let ids: Vec<String> = visible.iter().map(|t| t.request_id.clone()).collect();
        let details = sqlx::query!(
            "SELECT request_id, arrival_ns, finished_ns, ttft_ns, prompt_tokens, output_tokens, detail FROM requests
             WHERE instance_id = $1 AND request_id = ANY($2) AND arrival_ns >= $3 AND arrival_ns < $4",
            inst.id,
            &ids,
            from - REQUEST_LOOKBACK_NS,
            to
        )
        .fetch_all(&self.pool)
        .await?;
        let mut segments: std::collections::HashMap<String, Vec<app::api::Stage>> =
            std::collections::HashMap::new();
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
            segments.insert(trace.request_id.clone(), stages(&trace));
        }
        let tracks: Vec<Track> = visible
            .into_iter()
            .map(|mut t| {
                t.segments = segments.remove(&t.request_id).unwrap_or_default();
                t
            })
            .collect();

        let steps = sqlx::query_scalar!(
            r#"SELECT count(*) AS "n!" FROM iterations WHERE instance_id = $1 AND start_ns >= $2 AND start_ns < $3"#,
            inst.id,
            from,
            to
        )
        .fetch_one(&self.pool)
        .await?;
        let lane = if steps <= i64::from(width_px) {
            let rows = sqlx::query!(
                "SELECT start_ns, end_ns, prefill_tokens, decode_tokens, batch_size FROM iterations
                 WHERE instance_id = $1 AND start_ns >= $2 AND start_ns < $3 ORDER BY start_ns",
                inst.id,
                from,
                to
            )
            .fetch_all(&self.pool)
            .await?;
            let n = |v: i32| u32::try_from(v).unwrap_or(0);
            Lane::Steps {
                steps: rows
                    .into_iter()
                    .map(|r| Step {
                        start_ns: r.start_ns,
                        end_ns: r.end_ns,
                        prefill_tokens: n(r.prefill_tokens),
                        decode_tokens: n(r.decode_tokens),
                        batch_size: n(r.batch_size),
                    })
                    .collect(),
            }
        } else {
            // Aggregated where the data is: the reply has at most `width_px` buckets.
            let rows = sqlx::query!(
                r#"SELECT (start_ns - $2) / $4 AS "k!", count(*)::int AS "steps!", max(end_ns) AS "end_ns!",
                          sum(prefill_tokens)::bigint AS "prefill!", sum(decode_tokens)::bigint AS "decode!",
                          max(batch_size) AS "max_batch!"
                   FROM iterations WHERE instance_id = $1 AND start_ns >= $2 AND start_ns < $3
                   GROUP BY 1 ORDER BY 1"#,
                inst.id,
                from,
                to,
                bucket
            )
            .fetch_all(&self.pool)
            .await?;
            Lane::Buckets {
                bucket_ns: bucket,
                buckets: rows
                    .into_iter()
                    .map(|r| Bucket {
                        start_ns: from + r.k * bucket,
                        end_ns: r.end_ns,
                        steps: u32::try_from(r.steps).unwrap_or(0),
                        prefill_tokens: u64::try_from(r.prefill).unwrap_or(0),
                        decode_tokens: u64::try_from(r.decode).unwrap_or(0),
                        max_batch_size: u32::try_from(r.max_batch).unwrap_or(0),
                    })
                    .collect(),
            }
        };
        Ok(Waterfall {
            instance: instance.to_string(),
            from_ns: from,
            to_ns: to,
            width_px,
            rows,
            first_row: view.first_row,
            tracks,
            lane,
        })
    }
}

//! Stored diagnoses and the queue of what is to be (re)diagnosed: ingest marks the stretch of an
//! instance's time each batch touched; once no data has come for the settle time the worker
//! (the server's `findings`) diagnoses every request alive in it and replaces their rows.

use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, Postgres};

use tokenscope_core::model::{Nanos, PrefixCache};

use super::read::{Loaded, RequestFilter, StoredRequest, TextsLater};
use super::{REQUEST_LOOKBACK_NS, Store, partitions::day_of};
use crate::error::Result;

/// Key of the advisory lock that makes one server of several the diagnosing one.
const WORKER_LOCK: i64 = 0x7453_0001;

/// Stretches waiting in the queue.
#[derive(Clone, Debug, PartialEq)]
pub struct Due {
    pub ids: Vec<i64>,
    /// By instance, merged where they overlap, in time order.
    pub ranges: Vec<(i32, Nanos, Nanos)>,
}

/// A request's stored diagnosis, as rows hold it.
#[derive(Clone, Debug, PartialEq)]
pub struct DiagnosisRow {
    pub request_id: String,
    pub arrival_ns: Nanos,
    pub finished_ns: Nanos,
    pub speed_degraded: bool,
    pub words_degraded: bool,
    pub worst: i16,
    pub excess: f64,
    pub causes: Vec<String>,
    pub culprits: Vec<String>,
    pub diagnosis: serde_json::Value,
}

/// What is stored for one request.
#[derive(Clone, Debug, PartialEq)]
pub enum Stored {
    /// Data touching its lifetime arrived after it was last diagnosed (or it never was).
    Pending,
    /// Diagnosed since its neighbourhood last changed: its row (none: healthy).
    Settled(Option<serde_json::Value>),
}

/// The lock a diagnosing server holds on its own connection (closed, and the lock with it, when
/// this is dropped).
pub struct WorkerLock(#[allow(dead_code)] PgConnection);

/// A cursor over the requests of an instance alive in a stretch (`Store::alive`).
pub struct Alive<'s> {
    store: &'s Store,
    instance_id: i32,
    span: (Nanos, Nanos),
    page: i64,
    after: Option<(Nanos, String)>,
    done: bool,
    skip_healthy_alone: bool,
}

impl Alive<'_> {
    /// Leaves out the requests ingest found healthy whatever ran beside them
    /// (`requests.healthy_alone`) and which no step that verified drafts served: their
    /// diagnosis with the default thresholds is healthy, so there is nothing to store.
    pub fn unless_healthy_alone(mut self) -> Self {
        self.skip_healthy_alone = true;
        self
    }

    /// The next page, without the vocabulary's texts (see [`TextsLater`]) and with the last
    /// token's candidates only (`token_block::Candidates::Last`: for diagnosing); `None` after the
    /// last.
    pub async fn next(&mut self) -> Result<Option<Vec<(Loaded, TextsLater)>>> {
        if self.done {
            return Ok(None);
        }
        let (from, to) = self.span;
        let page = self
            .store
            .load_alive(
                self.instance_id,
                (from, to),
                self.after.as_ref(),
                self.page,
                self.skip_healthy_alone,
            )
            .await?;
        match page.last() {
            Some((l, _)) if page.len() as i64 == self.page => {
                self.after = Some((l.trace.arrival_ns, l.trace.request_id.clone()))
            }
            _ => self.done = true,
        }
        Ok((!page.is_empty()).then_some(page))
    }
}

/// Merges overlapping stretches of each instance.
fn merge(mut ranges: Vec<(i32, Nanos, Nanos)>) -> Vec<(i32, Nanos, Nanos)> {
    ranges.sort_unstable();
    let mut out: Vec<(i32, Nanos, Nanos)> = Vec::with_capacity(ranges.len());
    for (instance, from, to) in ranges {
        match out.last_mut() {
            Some(last) if last.0 == instance && from <= last.2 => last.2 = last.2.max(to),
            _ => out.push((instance, from, to)),
        }
    }
    out
}

impl Store {
    /// Marks `[from, to]` of an instance as touched by new data (inside the batch's transaction).
    pub(crate) async fn enqueue_diagnosis(
        tx: &mut PgConnection,
        instance_id: i32,
        from: Nanos,
        to: Nanos,
    ) -> Result<()> {
        sqlx::query!(
            "INSERT INTO diagnosis_queue (instance_id, from_ns, to_ns) VALUES ($1, $2, $3)",
            instance_id,
            from,
            to
        )
        .execute(tx)
        .await?;
        Ok(())
    }

    /// The diagnosing lock, when no other server holds it.
    pub async fn try_diagnosis_lock(&self) -> Result<Option<WorkerLock>> {
        let mut conn: PoolConnection<Postgres> = self.pool.acquire().await?;
        let got = sqlx::query_scalar!(r#"SELECT pg_try_advisory_lock($1) AS "got!""#, WORKER_LOCK)
            .fetch_one(&mut *conn)
            .await?;
        // Detached: a session lock must not go back to the pool with its connection.
        Ok(got.then(|| WorkerLock(conn.detach())))
    }

    /// Stretches that have had no new data for `settle` (at most `limit` queue rows).
    pub async fn due_for_diagnosis(&self, settle: Duration, limit: i64) -> Result<Due> {
        let rows = sqlx::query!(
            "SELECT id, instance_id, from_ns, to_ns FROM diagnosis_queue
             WHERE enqueued_at <= now() - make_interval(secs => $1)
             ORDER BY id LIMIT $2",
            settle.as_secs_f64(),
            limit
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(Due {
            ids: rows.iter().map(|r| r.id).collect(),
            ranges: merge(
                rows.into_iter()
                    .map(|r| (r.instance_id, r.from_ns, r.to_ns))
                    .collect(),
            ),
        })
    }

    /// Removes diagnosed stretches from the queue.
    pub async fn diagnosed(&self, ids: &[i64]) -> Result<()> {
        sqlx::query!("DELETE FROM diagnosis_queue WHERE id = ANY($1)", ids)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// How long the oldest stretch has waited, and how many wait.
    pub async fn diagnosis_backlog(&self) -> Result<(Duration, i64)> {
        let row = sqlx::query!(
            r#"SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(enqueued_at))::float8, 0) AS "oldest_s!",
                      count(*) AS "n!"
               FROM diagnosis_queue"#
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((Duration::from_secs_f64(row.oldest_s.max(0.0)), row.n))
    }

    /// Stretches of these instances (all: `None`) waiting to be diagnosed that overlap
    /// `[from, to]`, merged: (instance id, instance key, from, to).
    pub async fn pending_diagnosis(
        &self,
        instances: Option<&[i32]>,
        from: Nanos,
        to: Nanos,
    ) -> Result<Vec<(i32, String, Nanos, Nanos)>> {
        let rows = sqlx::query!(
            "SELECT q.instance_id, i.instance_key, q.from_ns, q.to_ns
             FROM diagnosis_queue q JOIN instances i ON i.id = q.instance_id
             WHERE ($1::int[] IS NULL OR q.instance_id = ANY($1)) AND q.from_ns <= $3 AND q.to_ns >= $2",
            instances,
            from,
            to
        )
        .fetch_all(&self.pool)
        .await?;
        let keys: std::collections::HashMap<i32, String> = rows
            .iter()
            .map(|r| (r.instance_id, r.instance_key.clone()))
            .collect();
        Ok(merge(
            rows.into_iter()
                .map(|r| (r.instance_id, r.from_ns, r.to_ns))
                .collect(),
        )
        .into_iter()
        .map(|(id, from, to)| (id, keys[&id].clone(), from, to))
        .collect())
    }

    /// The requests of an instance alive in `[from, to]`, read `page` at a time in arrival
    /// order.
    pub fn alive(&self, instance_id: i32, from: Nanos, to: Nanos, page: i64) -> Alive<'_> {
        Alive {
            store: self,
            instance_id,
            span: (from, to),
            page,
            after: None,
            done: false,
            skip_healthy_alone: false,
        }
    }

    /// Up to `limit` requests of an instance alive in `[from, to]`, in arrival order after
    /// `after`.
    async fn load_alive(
        &self,
        instance_id: i32,
        (from, to): (Nanos, Nanos),
        after: Option<&(Nanos, String)>,
        limit: i64,
        skip_healthy_alone: bool,
    ) -> Result<Vec<(Loaded, TextsLater)>> {
        // Speculation is judged against the other requests in the same steps: a request served
        // by steps that verified drafts is read whatever ingest found (the rollups' 10 s cells
        // say so without reading a step; a step starts in the cell it is counted in).
        let cell = super::ROLLUP_NS[2];
        let rows = sqlx::query_as!(
            StoredRequest,
            r#"SELECT r.request_id, r.instance_id, i.engine, i.instance_key, i.role, r.model_id, m.name AS model,
                      r.arrival_ns, r.finished_ns, r.prompt_tokens, r.output_tokens, r.cached_tokens,
                      r.finish_reason, r.trace_id, r.parent_span_id, r.detail, r.tokens,
                      NULL::jsonb AS "prefix_cache: sqlx::types::Json<PrefixCache>" -- the diagnosis does not read the chains
               FROM requests r JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
               WHERE r.instance_id = $1 AND r.arrival_ns >= $2 AND r.arrival_ns <= $3 AND r.finished_ns >= $4
                 AND ($5::bigint IS NULL OR (r.arrival_ns, r.request_id) > ($5, $6::text))
                 AND NOT ($8 AND r.healthy_alone AND NOT EXISTS (
                     SELECT 1 FROM iteration_rollups u
                     WHERE u.instance_id = r.instance_id AND u.resolution_ns = $9
                       AND u.cell_ns > r.arrival_ns - $9 - $10 AND u.cell_ns <= r.finished_ns
                       AND u.draft_entries > 0))
               ORDER BY r.arrival_ns, r.request_id
               LIMIT $7"#,
            instance_id,
            from - REQUEST_LOOKBACK_NS,
            to,
            from,
            after.map(|a| a.0),
            after.map(|a| a.1.as_str()),
            limit,
            skip_healthy_alone,
            cell,
            super::CLOCK_SLACK_NS
        )
        .fetch_all(&self.pool)
        .await?;
        // Diagnosed only: the last token's candidates are all the diagnosis reads.
        let keep = super::token_block::Candidates::Last;
        rows.into_iter()
            .map(|row| super::read::decode_untexted(row, keep))
            .collect()
    }

    /// Replaces the stored diagnoses of `requests` (request id, arrival) of an instance with
    /// `rows` (the ones that are not healthy), in one transaction.
    pub async fn put_diagnoses(
        &self,
        instance_id: i32,
        requests: &[(String, Nanos)],
        rows: &[DiagnosisRow],
    ) -> Result<()> {
        self.caches
            .partitions
            .ensure(
                &self.pool,
                "diagnoses",
                rows.iter().map(|r| day_of(r.arrival_ns)),
            )
            .await?;
        let (ids, arrivals): (Vec<String>, Vec<Nanos>) = requests.iter().cloned().unzip();
        let mut tx = self.pool.begin().await?;
        sqlx::query!(
            "DELETE FROM diagnoses d USING UNNEST($2::text[], $3::bigint[]) AS k(request_id, arrival_ns)
             WHERE d.instance_id = $1 AND d.request_id = k.request_id AND d.arrival_ns = k.arrival_ns",
            instance_id,
            &ids,
            &arrivals
        )
        .execute(&mut *tx)
        .await?;
        for r in rows {
            sqlx::query!(
                "INSERT INTO diagnoses (instance_id, request_id, arrival_ns, finished_ns, speed_degraded,
                     words_degraded, worst, excess, causes, culprits, diagnosis)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                instance_id,
                r.request_id,
                r.arrival_ns,
                r.finished_ns,
                r.speed_degraded,
                r.words_degraded,
                r.worst,
                r.excess,
                &r.causes,
                &r.culprits,
                r.diagnosis
            )
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// A request's stored diagnosis, or `Pending` when data touching its lifetime is waiting.
    pub async fn stored_diagnosis(
        &self,
        instance_id: i32,
        request_id: &str,
        arrival_ns: Nanos,
        finished_ns: Nanos,
    ) -> Result<Stored> {
        if !self
            .pending_diagnosis(Some(&[instance_id]), arrival_ns, finished_ns)
            .await?
            .is_empty()
        {
            return Ok(Stored::Pending);
        }
        let row = sqlx::query_scalar!(
            "SELECT diagnosis FROM diagnoses WHERE instance_id = $1 AND request_id = $2 AND arrival_ns = $3",
            instance_id,
            request_id,
            arrival_ns
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(Stored::Settled(row))
    }

    /// The stored diagnoses of requests that arrived in `[from, to)` on these instances (all:
    /// `None`), worst first, at most `limit`, leaving out those alive in `except`: the stretches
    /// (instance, from, to) the caller diagnosed itself. The caller names them, rather than this
    /// reading the queue again, so that a stretch the worker settles in between is counted once.
    pub async fn stored_diagnoses(
        &self,
        instances: Option<&[i32]>,
        (from, to): (Nanos, Nanos),
        limit: i64,
        except: &[(i32, Nanos, Nanos)],
    ) -> Result<Vec<DiagnosisRow>> {
        let (ids, froms, tos) = columns(except);
        Ok(sqlx::query_as!(
            DiagnosisRow,
            "SELECT request_id, arrival_ns, finished_ns, speed_degraded, words_degraded,
                    worst, excess, causes, culprits, diagnosis
             FROM diagnoses d
             WHERE ($1::int[] IS NULL OR instance_id = ANY($1)) AND arrival_ns >= $2 AND arrival_ns < $3
               AND NOT EXISTS (SELECT 1 FROM unnest($5::int[], $6::bigint[], $7::bigint[]) AS q(instance_id, from_ns, to_ns)
                               WHERE q.instance_id = d.instance_id
                                 AND q.from_ns <= d.finished_ns AND q.to_ns >= d.arrival_ns)
             ORDER BY worst DESC, excess DESC, request_id
             LIMIT $4",
            instances,
            from,
            to,
            limit,
            &ids,
            &froms,
            &tos
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Stored diagnoses of requests that arrived since `since_ns`, by instance and cause (a
    /// request with two causes counts under each): (instance key, cause, requests).
    pub async fn findings_by_cause(&self, since_ns: Nanos) -> Result<Vec<(String, String, i64)>> {
        let rows = sqlx::query!(
            r#"SELECT i.instance_key, c.cause AS "cause!", count(*) AS "n!"
               FROM diagnoses d JOIN instances i ON i.id = d.instance_id, unnest(d.causes) AS c(cause)
               WHERE d.arrival_ns >= $1
               GROUP BY 1, 2 ORDER BY 1, 2"#,
            since_ns
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| (r.instance_key, r.cause, r.n))
            .collect())
    }

    /// Requests with a stored finding of each cause among those `f` matches (instances, engine,
    /// version, model, slices, window; a request with two causes counts under each), most
    /// first: (cause, requests, the `examples` worst of them). Requests alive in `except` (the
    /// stretches the caller diagnosed itself) are left out.
    pub async fn cause_counts(
        &self,
        f: &RequestFilter,
        examples: i64,
        except: &[(i32, Nanos, Nanos)],
    ) -> Result<Vec<(String, i64, Vec<String>)>> {
        let (ids, froms, tos) = columns(except);
        let rows = sqlx::query!(
            r#"SELECT c.cause AS "cause!", count(*) AS "n!",
                      (array_agg(d.request_id ORDER BY d.worst DESC, d.excess DESC, d.request_id))[1:$7] AS "examples!"
               FROM diagnoses d JOIN instances i ON i.id = d.instance_id, unnest(d.causes) AS c(cause)
               WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1)) AND ($2::text IS NULL OR i.engine = $2)
                 AND ($3::text IS NULL OR i.engine_version = $3)
                 AND (($4::text IS NULL AND $8::text[] IS NULL AND $9::text IS NULL AND $10::int IS NULL AND $14::text IS NULL AND $15::int IS NULL AND $16::int IS NULL AND $17::int IS NULL AND $18::int IS NULL AND $19::int IS NULL)
                      OR EXISTS (SELECT 1 FROM requests r JOIN models m ON m.id = r.model_id
                        WHERE r.instance_id = d.instance_id AND r.request_id = d.request_id
                          AND r.arrival_ns = d.arrival_ns AND ($4 IS NULL OR m.name = $4)
                          AND ($8 IS NULL OR r.tenant = ANY($8)) AND ($9 IS NULL OR r.lora_adapter = $9) AND ($14::text IS NULL OR (r.prefix_cache -> 'block_hashes') ? $14) AND ($15::int IS NULL OR r.prompt_tokens >= $15) AND ($16::int IS NULL OR r.prompt_tokens < $16) AND ($17::int IS NULL OR (CASE WHEN r.cached_tokens = 0 THEN 0 WHEN r.cached_tokens * 2 < r.prompt_tokens THEN 1 ELSE 2 END) = $17) AND ($18::int IS NULL OR ((r.arrival_ns / 3600000000000) % 24)::int = $18) AND ($19::int IS NULL OR EXISTS (SELECT 1 FROM iteration_rollups c1 WHERE c1.instance_id = r.instance_id AND c1.resolution_ns = 1000000000 AND c1.cell_ns = r.arrival_ns - r.arrival_ns % 1000000000 AND c1.max_batch_size >= $19 AND ($20::int IS NULL OR c1.max_batch_size < $20)))
                          AND ($10 IS NULL OR r.priority = $10)))
                 AND d.arrival_ns >= $5 AND d.arrival_ns < $6
                 AND NOT EXISTS (SELECT 1 FROM unnest($11::int[], $12::bigint[], $13::bigint[]) AS q(instance_id, from_ns, to_ns)
                                 WHERE q.instance_id = d.instance_id
                                   AND q.from_ns <= d.finished_ns AND q.to_ns >= d.arrival_ns)
               GROUP BY 1 ORDER BY 2 DESC, 1"#,
            f.instance_list(),
            f.engine,
            f.engine_version,
            f.model,
            f.from_ns.unwrap_or(Nanos::MIN),
            f.to_ns.unwrap_or(Nanos::MAX),
            examples as i32,
            f.tenants.as_deref(),
            f.lora_adapter,
            f.priority,
            &ids,
            &froms,
            &tos,
            f.fingerprint,
            f.prompt_tokens.0,
            f.prompt_tokens.1,
            f.cached_share,
            f.hour,
            f.batch_size.0,
            f.batch_size.1,
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| (r.cause, r.n, r.examples))
            .collect())
    }

    /// The stored diagnoses on an instance that name `culprit` (alive from `arrival_ns` to
    /// `finished_ns`) as a culprit: requests alive at the same time, at most `limit`.
    pub async fn victims_of(
        &self,
        instance_id: i32,
        culprit: &str,
        arrival_ns: Nanos,
        finished_ns: Nanos,
        limit: i64,
    ) -> Result<Vec<DiagnosisRow>> {
        Ok(sqlx::query_as!(
            DiagnosisRow,
            "SELECT request_id, arrival_ns, finished_ns, speed_degraded, words_degraded, worst, excess,
                    causes, culprits, diagnosis
             FROM diagnoses
             WHERE instance_id = $1 AND culprits @> ARRAY[$2::text]
               AND arrival_ns >= $3 AND arrival_ns <= $4 AND finished_ns >= $5
             ORDER BY worst DESC, excess DESC, request_id
             LIMIT $6",
            instance_id,
            culprit,
            arrival_ns - REQUEST_LOOKBACK_NS,
            finished_ns,
            arrival_ns,
            limit
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Ids of instances by key (unknown keys are left out).
    pub async fn instance_ids(&self, keys: &[String]) -> Result<Vec<i32>> {
        Ok(sqlx::query_scalar!(
            "SELECT id FROM instances WHERE instance_key = ANY($1)",
            keys
        )
        .fetch_all(&self.pool)
        .await?)
    }
}

/// Stretches as the three arrays a query unnests.
fn columns(stretches: &[(i32, Nanos, Nanos)]) -> (Vec<i32>, Vec<Nanos>, Vec<Nanos>) {
    let mut out = (Vec::new(), Vec::new(), Vec::new());
    for &(id, from, to) in stretches {
        out.0.push(id);
        out.1.push(from);
        out.2.push(to);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::merge;

    #[test]
    fn stretches_merge_per_instance_where_they_overlap() {
        let got = merge(vec![
            (2, 5, 9),
            (1, 10, 20),
            (1, 0, 10),
            (1, 30, 40),
            (2, 1, 3),
        ]);
        assert_eq!(got, [(1, 0, 20), (1, 30, 40), (2, 1, 3), (2, 5, 9)]);
    }
}

//! Latency cells (`latency_cells`, `latency_cells_fleet`): a minute of an instance's requests
//! per model as counts, and the same minutes summed over an engine release's instances. The
//! worker's reads and writes of a stretch, and the window reads of the chart and compare.

use std::collections::BTreeMap;

use sqlx::types::Json;

use tokenscope_core::model::Nanos;
use tokenscope_core::model::latency_cells::{Cell, CellInput, Histogram};
use tokenscope_core::model::metrics::{WordStats, WordSums};

use super::list::{FILTER, bind_filter};
use super::{REQUEST_LOOKBACK_NS, Store, partitions::day_of, read::RequestFilter};
use crate::error::Result;

/// A stored cell: its minute, its model, its counts.
#[derive(Clone, Debug, PartialEq)]
pub struct CellRow {
    pub cell_ns: Nanos,
    pub model_id: i32,
    pub cell: Cell,
}

/// The columns of a stored cell as sqlx reads them.
#[derive(sqlx::FromRow)]
struct Stored {
    cell_ns: i64,
    model_id: i32,
    requests: i32,
    ttft_over: i32,
    tpot_over: i32,
    ttft_lo: i32,
    ttft: Vec<i32>,
    tpot_lo: i32,
    tpot: Vec<i32>,
    queue_lo: i32,
    queue: Vec<i32>,
    e2e_lo: i32,
    e2e: Vec<i32>,
    answers: i32,
    answer_tokens: f64,
    word_tokens: f64,
    probability_sum: f64,
    entropy_tokens: f64,
    entropy_sum: f64,
    eos: i32,
    unlikely: f64,
}

impl From<Stored> for CellRow {
    fn from(s: Stored) -> Self {
        let h = |lo, counts| Histogram { lo, counts };
        CellRow {
            cell_ns: s.cell_ns,
            model_id: s.model_id,
            cell: Cell {
                requests: i64::from(s.requests),
                ttft_over: i64::from(s.ttft_over),
                tpot_over: i64::from(s.tpot_over),
                ttft: h(s.ttft_lo, s.ttft),
                tpot: h(s.tpot_lo, s.tpot),
                queue: h(s.queue_lo, s.queue),
                e2e: h(s.e2e_lo, s.e2e),
                words: WordSums {
                    answers: s.answers as u64,
                    answer_tokens: s.answer_tokens,
                    tokens: s.word_tokens,
                    probability_sum: s.probability_sum,
                    entropy_tokens: s.entropy_tokens,
                    entropy_sum: s.entropy_sum,
                    eos: s.eos as u64,
                    unlikely: s.unlikely,
                },
            },
        }
    }
}

/// The stored columns a read takes, in the order of [`Stored`].
const COLUMNS: &str =
    "cell_ns, model_id, requests, ttft_over, tpot_over, ttft_lo, ttft, tpot_lo, tpot,
    queue_lo, queue, e2e_lo, e2e, answers, answer_tokens, word_tokens, probability_sum,
    entropy_tokens, entropy_sum, eos, unlikely";

/// [`COLUMNS`] of the table aliased `c`.
fn qualified() -> String {
    let columns: Vec<String> = COLUMNS
        .split(',')
        .map(|c| format!("c.{}", c.trim()))
        .collect();
    columns.join(", ")
}

/// A request's columns as a cell counts them.
#[derive(sqlx::FromRow)]
struct InputRow {
    model_id: i32,
    arrival_ns: i64,
    ttft_ns: Option<i64>,
    tpot_ns: Option<i64>,
    queue_ns: Option<i64>,
    e2e_ns: i64,
    output_tokens: i32,
    words: Option<Json<WordStats>>,
}

impl InputRow {
    fn input(self) -> (i32, CellInput) {
        (
            self.model_id,
            CellInput {
                arrival_ns: self.arrival_ns,
                ttft_ns: self.ttft_ns,
                tpot_ns: self.tpot_ns,
                queue_ns: self.queue_ns,
                e2e_ns: self.e2e_ns,
                output_tokens: self.output_tokens.max(0) as u32,
                words: self.words.map(|w| w.0),
            },
        )
    }
}

const INPUT_COLUMNS: &str = "r.model_id, r.arrival_ns, r.ttft_ns, r.tpot_ns, r.queue_ns, r.e2e_ns,
    r.output_tokens, r.detail -> 'words' AS words";

/// `rows`' columns as arrays, to insert with one UNNEST; a histogram's bins go as the text of
/// a Postgres array (`{1,0,3}`): arrays of arrays must be rectangular.
#[derive(Default)]
struct Columns {
    cell_ns: Vec<i64>,
    model_id: Vec<i32>,
    requests: Vec<i32>,
    over: [Vec<i32>; 2],
    lo: [Vec<i32>; 4],
    bins: [Vec<String>; 4],
    answers: Vec<i32>,
    eos: Vec<i32>,
    sums: [Vec<f64>; 6],
}

fn int(v: impl TryInto<i32>) -> i32 {
    v.try_into().unwrap_or(i32::MAX)
}

impl Columns {
    fn of(rows: &[CellRow]) -> Self {
        let mut c = Columns::default();
        for r in rows {
            let (x, w) = (&r.cell, &r.cell.words);
            c.cell_ns.push(r.cell_ns);
            c.model_id.push(r.model_id);
            c.requests.push(int(x.requests));
            c.over[0].push(int(x.ttft_over));
            c.over[1].push(int(x.tpot_over));
            for (i, h) in [&x.ttft, &x.tpot, &x.queue, &x.e2e].into_iter().enumerate() {
                c.lo[i].push(h.lo);
                let text: Vec<String> = h.counts.iter().map(i32::to_string).collect();
                c.bins[i].push(format!("{{{}}}", text.join(",")));
            }
            c.answers.push(int(w.answers));
            c.eos.push(int(w.eos));
            let sums = [
                w.answer_tokens,
                w.tokens,
                w.probability_sum,
                w.entropy_tokens,
                w.entropy_sum,
                w.unlikely,
            ];
            for (col, v) in c.sums.iter_mut().zip(sums) {
                col.push(v);
            }
        }
        c
    }
}

impl Store {
    /// The earliest arrival among an instance's requests alive in `[from, to]` (what a stretch
    /// changed), looking back at most as far as the diagnosis does.
    pub async fn earliest_alive(
        &self,
        instance_id: i32,
        from: Nanos,
        to: Nanos,
    ) -> Result<Option<Nanos>> {
        Ok(sqlx::query_scalar!(
            "SELECT min(arrival_ns) FROM requests
             WHERE instance_id = $1 AND arrival_ns >= $2 AND arrival_ns <= $3 AND finished_ns >= $4",
            instance_id,
            from - REQUEST_LOOKBACK_NS,
            to,
            from
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// An instance's requests that arrived in `[from, to)`, with their model, as cells count
    /// them.
    pub async fn cell_inputs(
        &self,
        instance_id: i32,
        (from, to): (Nanos, Nanos),
    ) -> Result<Vec<(i32, CellInput)>> {
        let sql = format!(
            "SELECT {INPUT_COLUMNS} FROM requests r
             WHERE r.instance_id = $1 AND r.arrival_ns >= $2 AND r.arrival_ns < $3"
        );
        let rows: Vec<InputRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(instance_id)
            .bind(from)
            .bind(to)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(InputRow::input).collect())
    }

    /// The requests `f` matches (its instances, engine, release, model and window), as cells
    /// count them: the parts of a window its cells do not cover.
    pub async fn cell_inputs_matching(&self, f: &RequestFilter) -> Result<Vec<CellInput>> {
        let sql = format!("SELECT {INPUT_COLUMNS} FROM requests r {FILTER}");
        let rows: Vec<InputRow> = bind_filter(sqlx::query_as(sqlx::AssertSqlSafe(sql)), f)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(|r| r.input().1).collect())
    }

    /// Replaces an instance's cells in `[from, to)` with `rows`, in one transaction.
    pub async fn put_latency_cells(
        &self,
        instance_id: i32,
        (from, to): (Nanos, Nanos),
        rows: &[CellRow],
    ) -> Result<()> {
        self.caches
            .partitions
            .ensure(
                &self.pool,
                "latency_cells",
                rows.iter().map(|r| day_of(r.cell_ns)),
            )
            .await?;
        let mut tx = self.pool.begin().await?;
        sqlx::query!(
            "DELETE FROM latency_cells WHERE instance_id = $1 AND cell_ns >= $2 AND cell_ns < $3",
            instance_id,
            from,
            to
        )
        .execute(&mut *tx)
        .await?;
        let c = Columns::of(rows);
        sqlx::query!(
            "INSERT INTO latency_cells (instance_id, cell_ns, model_id, requests, ttft_over, tpot_over,
                 ttft_lo, ttft, tpot_lo, tpot, queue_lo, queue, e2e_lo, e2e, answers, answer_tokens,
                 word_tokens, probability_sum, entropy_tokens, entropy_sum, eos, unlikely)
             SELECT $1, c, m, n, o1, o2, l1, b1::int[], l2, b2::int[], l3, b3::int[], l4, b4::int[],
                    a, s1, s2, s3, s4, s5, e, s6
             FROM UNNEST($2::bigint[], $3::int[], $4::int[], $5::int[], $6::int[],
                         $7::int[], $8::text[], $9::int[], $10::text[], $11::int[], $12::text[],
                         $13::int[], $14::text[], $15::int[], $16::int[], $17::float8[],
                         $18::float8[], $19::float8[], $20::float8[], $21::float8[], $22::float8[])
                  AS u (c, m, n, o1, o2, l1, b1, l2, b2, l3, b3, l4, b4, a, e, s1, s2, s3, s4, s5, s6)",
            instance_id,
            &c.cell_ns,
            &c.model_id,
            &c.requests,
            &c.over[0],
            &c.over[1],
            &c.lo[0],
            &c.bins[0],
            &c.lo[1],
            &c.bins[1],
            &c.lo[2],
            &c.bins[2],
            &c.lo[3],
            &c.bins[3],
            &c.answers,
            &c.eos,
            &c.sums[0],
            &c.sums[1],
            &c.sums[2],
            &c.sums[3],
            &c.sums[4],
            &c.sums[5],
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Each of these instances with its engine and release (`''` for none).
    pub async fn releases_of(&self, instance_ids: &[i32]) -> Result<Vec<(i32, (String, String))>> {
        Ok(sqlx::query!(
            r#"SELECT id, engine, COALESCE(engine_version, '') AS "version!" FROM instances
               WHERE id = ANY($1)"#,
            instance_ids
        )
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(|r| (r.id, (r.engine, r.version)))
        .collect())
    }

    /// Recomputes a release's fleet cells in `[from, to)`: the sums of its instances' cells.
    pub async fn sum_fleet_cells(
        &self,
        (engine, version): (&str, &str),
        (from, to): (Nanos, Nanos),
    ) -> Result<()> {
        let sql = format!(
            "SELECT {} FROM latency_cells c JOIN instances i ON i.id = c.instance_id
             WHERE i.engine = $1 AND COALESCE(i.engine_version, '') = $2
               AND c.cell_ns >= $3 AND c.cell_ns < $4",
            qualified()
        );
        let parts: Vec<Stored> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(engine)
            .bind(version)
            .bind(from)
            .bind(to)
            .fetch_all(&self.pool)
            .await?;
        let mut sums: BTreeMap<(Nanos, i32), Cell> = BTreeMap::new();
        for p in parts.into_iter().map(CellRow::from) {
            sums.entry((p.cell_ns, p.model_id))
                .or_default()
                .merge(&p.cell);
        }
        let rows: Vec<CellRow> = sums
            .into_iter()
            .map(|((cell_ns, model_id), cell)| CellRow {
                cell_ns,
                model_id,
                cell,
            })
            .collect();
        self.caches
            .partitions
            .ensure(
                &self.pool,
                "latency_cells_fleet",
                rows.iter().map(|r| day_of(r.cell_ns)),
            )
            .await?;
        let mut tx = self.pool.begin().await?;
        sqlx::query!(
            "DELETE FROM latency_cells_fleet
             WHERE engine = $1 AND engine_version = $2 AND cell_ns >= $3 AND cell_ns < $4",
            engine,
            version,
            from,
            to
        )
        .execute(&mut *tx)
        .await?;
        let c = Columns::of(&rows);
        sqlx::query!(
            "INSERT INTO latency_cells_fleet (engine, engine_version, cell_ns, model_id, requests,
                 ttft_over, tpot_over, ttft_lo, ttft, tpot_lo, tpot, queue_lo, queue, e2e_lo, e2e,
                 answers, answer_tokens, word_tokens, probability_sum, entropy_tokens, entropy_sum,
                 eos, unlikely)
             SELECT $1, $2, c, m, n, o1, o2, l1, b1::int[], l2, b2::int[], l3, b3::int[], l4,
                    b4::int[], a, s1, s2, s3, s4, s5, e, s6
             FROM UNNEST($3::bigint[], $4::int[], $5::int[], $6::int[], $7::int[],
                         $8::int[], $9::text[], $10::int[], $11::text[], $12::int[], $13::text[],
                         $14::int[], $15::text[], $16::int[], $17::int[], $18::float8[],
                         $19::float8[], $20::float8[], $21::float8[], $22::float8[], $23::float8[])
                  AS u (c, m, n, o1, o2, l1, b1, l2, b2, l3, b3, l4, b4, a, e, s1, s2, s3, s4, s5, s6)",
            engine,
            version,
            &c.cell_ns,
            &c.model_id,
            &c.requests,
            &c.over[0],
            &c.over[1],
            &c.lo[0],
            &c.bins[0],
            &c.lo[1],
            &c.bins[1],
            &c.lo[2],
            &c.bins[2],
            &c.lo[3],
            &c.bins[3],
            &c.answers,
            &c.eos,
            &c.sums[0],
            &c.sums[1],
            &c.sums[2],
            &c.sums[3],
            &c.sums[4],
            &c.sums[5],
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The cells of the minutes in `[from, to)` that `f` matches: an instance's own with an
    /// instance filter, else the releases' sums (engine, release and model narrow both).
    pub async fn latency_cells(
        &self,
        f: &RequestFilter,
        (from, to): (Nanos, Nanos),
    ) -> Result<Vec<CellRow>> {
        let columns = qualified();
        let models = "($4::text IS NULL OR c.model_id IN (SELECT id FROM models WHERE name = $4))";
        let sql = match f.instance_list() {
            Some(_) => format!(
                "SELECT {columns} FROM latency_cells c JOIN instances i ON i.id = c.instance_id
                 WHERE i.instance_key = ANY($1) AND ($2::text IS NULL OR i.engine = $2)
                   AND ($3::text IS NULL OR i.engine_version = $3) AND {models}
                   AND c.cell_ns >= $5 AND c.cell_ns < $6"
            ),
            None => format!(
                "SELECT {columns} FROM latency_cells_fleet c
                 WHERE $1::text[] IS NULL AND ($2::text IS NULL OR c.engine = $2)
                   AND ($3::text IS NULL OR c.engine_version = $3) AND {models}
                   AND c.cell_ns >= $5 AND c.cell_ns < $6"
            ),
        };
        let rows: Vec<Stored> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(f.instance_list())
            .bind(&f.engine)
            .bind(&f.engine_version)
            .bind(&f.model)
            .bind(from)
            .bind(to)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(CellRow::from).collect())
    }

    /// Where the data still waiting for the findings worker begins, for `f`'s instances (its
    /// instance filter, engine and release): the cells before it are up to date.
    pub async fn cells_pending_from(&self, f: &RequestFilter) -> Result<Option<Nanos>> {
        Ok(sqlx::query_scalar!(
            "SELECT min(q.from_ns) FROM diagnosis_queue q JOIN instances i ON i.id = q.instance_id
             WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1)) AND ($2::text IS NULL OR i.engine = $2)
               AND ($3::text IS NULL OR i.engine_version = $3)",
            f.instance_list(),
            f.engine,
            f.engine_version
        )
        .fetch_one(&self.pool)
        .await?)
    }
}

//! The request list at fleet scale: a page in an order an index can give (a top-N of 10 million
//! rows sorted whole took seconds), and how many match, counted exactly while that is cheap and
//! estimated by the planner beyond it, the reply saying which (issue 31: "about 1.2 M").
//!
//! The SQL is assembled here rather than written out per variant: the order's column must be
//! in the text for Postgres to walk an index in it, and seven columns, two directions and the
//! cause filter would be 28 copies of one query. Only constants and our own integers are
//! formatted into it; every value from a request is a bound parameter.

use serde::Deserialize;
use sqlx::Postgres;
use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;

use tokenscope_core::model::{FinishReason, Nanos};

use super::Store;
use super::read::{RequestFilter, RequestRow, count, engine, trace_id_bytes};
use crate::error::Result;

/// Up to this many matches the total is counted; past it, the planner's estimate is given.
/// Counting 50,000 rows through the list's joins takes tens of milliseconds; 10 million, seconds.
pub const EXACT_UP_TO: u64 = 50_000;

/// The tables a list reads, and the filter, with parameters $1–$21 bound by [`bind_filter`] and
/// $22 the cause when there is one. `FROM` is a placeholder for the driving table.
pub(super) const FILTER: &str = "
    JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
    WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1))
      AND ($2::text IS NULL OR i.engine = $2) AND ($11::text IS NULL OR i.engine_version = $11)
      AND ($3::text IS NULL OR m.name = $3) AND ($12::text[] IS NULL OR r.tenant = ANY($12))
      AND ($13::text IS NULL OR r.lora_adapter = $13) AND ($14::int IS NULL OR r.priority = $14)
      AND ($15::text IS NULL OR (r.prefix_cache -> 'block_hashes') ? $15)
      AND ($16::int IS NULL OR r.prompt_tokens >= $16) AND ($17::int IS NULL OR r.prompt_tokens < $17)
      AND ($18::int IS NULL OR (CASE WHEN r.cached_tokens = 0 THEN 0
                                     WHEN r.cached_tokens * 2 < r.prompt_tokens THEN 1 ELSE 2 END) = $18)
      AND ($19::int IS NULL OR ((r.arrival_ns / 3600000000000) % 24)::int = $19)
      AND ($20::int IS NULL OR EXISTS (SELECT 1 FROM iteration_rollups c1
            WHERE c1.instance_id = r.instance_id AND c1.resolution_ns = 1000000000
              AND c1.cell_ns = r.arrival_ns - r.arrival_ns % 1000000000
              AND c1.max_batch_size >= $20 AND ($21::int IS NULL OR c1.max_batch_size < $21)))
      AND r.arrival_ns >= $4 AND r.arrival_ns < $5
      AND ($6::text IS NULL OR r.request_id = $6 OR r.trace_id = $7)
      AND ($8::bool IS NULL OR $8 = (COALESCE(r.ttft_ns > $9, false) OR COALESCE(r.tpot_ns > $10, false)))";

/// The driving table: every request, or (with a cause) the stored findings that have it, a few
/// of the window's requests (probing `diagnoses` for each request cost 0.8 s at 78k), each
/// looked up in `requests` on its own (`LATERAL … LIMIT 1`). A plain join of the two on
/// their three key columns is estimated at one row in all (Postgres multiplies the columns'
/// selectivities), so the planner joined every finding of the day (62k, 0.6–7 s) to sort them
/// for a page of 100; looked up one by one, the findings are walked in arrival order and the
/// walk stops at the page. The findings' instance filter is applied before the lookups.
fn from(f: &RequestFilter) -> &'static str {
    match f.cause {
        None => "FROM requests r",
        Some(_) => {
            "FROM diagnoses d JOIN instances di ON di.id = d.instance_id
               AND ($1::text[] IS NULL OR di.instance_key = ANY($1))
               AND ($2::text IS NULL OR di.engine = $2) AND ($11::text IS NULL OR di.engine_version = $11)
             CROSS JOIN LATERAL (SELECT * FROM requests r0 WHERE r0.instance_id = d.instance_id
               AND r0.request_id = d.request_id AND r0.arrival_ns = d.arrival_ns LIMIT 1) r"
        }
    }
}

/// With a cause, the findings' own conditions (the `FILTER` ends in a `WHERE`).
fn cause_condition(f: &RequestFilter) -> &'static str {
    match f.cause {
        None => "",
        Some(_) => " AND d.causes @> ARRAY[$22::text] AND d.arrival_ns >= $4 AND d.arrival_ns < $5",
    }
}

/// The page's order. In arrival order with a cause, the findings' own arrival (the same value)
/// so that their index gives it: the looked-up request's column is opaque to the planner.
fn inner_order(f: &RequestFilter) -> String {
    if f.cause.is_some() && order_column(f) == "arrival_ns" {
        order_by(f, "d")
    } else {
        order_by(f, "r")
    }
}

/// Whether counting `f`'s matches needs the requests themselves: without a slice, a search or
/// an SLO or model filter, a cause's findings are counted alone (36 ms for the fleet's 62k
/// where their requests' heap pages took 0.5–7 s).
fn counted_from_findings(f: &RequestFilter) -> bool {
    f.cause.is_some()
        && !f.sliced()
        && f.model.is_none()
        && f.find.is_none()
        && f.slo_breach.is_none()
}

/// The list's order as SQL: the column, then arrival in the same direction, then the keys.
/// Requests without the value come last either way (`NULLS LAST`, as the indexes are built).
fn order_by(f: &RequestFilter, table: &str) -> String {
    let column = order_column(f);
    let dir = if f.order.descending { "DESC" } else { "ASC" };
    format!(
        "{table}.{column} {dir} NULLS LAST, {table}.arrival_ns {dir}, {table}.request_id, {table}.instance_id"
    )
}

/// The column the list is ordered by.
fn order_column(f: &RequestFilter) -> &'static str {
    match f.order.key {
        "ttft" => "ttft_ns",
        "tpot" => "tpot_ns",
        "e2e" => "e2e_ns",
        "queue" => "queue_ns",
        "prompt" => "prompt_tokens",
        "output" => "output_tokens",
        _ => "arrival_ns",
    }
}

/// Binds the filter's $1–$21 (and $22, the cause, when there is one).
pub(super) fn bind_filter<'q, O>(
    q: QueryAs<'q, Postgres, O, PgArguments>,
    f: &'q RequestFilter,
) -> QueryAs<'q, Postgres, O, PgArguments> {
    let trace = f.find.as_deref().and_then(trace_id_bytes);
    let q = q
        .bind(f.instance_list())
        .bind(&f.engine)
        .bind(&f.model)
        .bind(f.from_ns.unwrap_or(Nanos::MIN))
        .bind(f.to_ns.unwrap_or(Nanos::MAX))
        .bind(&f.find)
        .bind(trace)
        .bind(f.slo_breach)
        .bind(f.slo_ns.0)
        .bind(f.slo_ns.1)
        .bind(&f.engine_version)
        .bind(f.tenants.as_deref())
        .bind(&f.lora_adapter)
        .bind(f.priority)
        .bind(&f.fingerprint)
        .bind(f.prompt_tokens.0)
        .bind(f.prompt_tokens.1)
        .bind(f.cached_share)
        .bind(f.hour)
        .bind(f.batch_size.0)
        .bind(f.batch_size.1);
    match &f.cause {
        Some(c) => q.bind(c),
        None => q,
    }
}

/// What a count reads: the requests through the list's filter, or a cause's findings alone.
#[derive(Clone, Copy)]
enum Counted {
    Requests,
    Findings,
}

/// A cause's findings in the window, on the instances asked for ($1 cause, $2–$3 the window,
/// $4 the instances, $5 the engine, $6 its version).
const FINDINGS: &str = "SELECT 1 FROM diagnoses d JOIN instances i ON i.id = d.instance_id
    WHERE d.causes @> ARRAY[$1::text] AND d.arrival_ns >= $2 AND d.arrival_ns < $3
      AND ($4::text[] IS NULL OR i.instance_key = ANY($4))
      AND ($5::text IS NULL OR i.engine = $5) AND ($6::text IS NULL OR i.engine_version = $6)";

fn bind_count<'q, O>(
    q: QueryAs<'q, Postgres, O, PgArguments>,
    f: &'q RequestFilter,
    how: Counted,
) -> QueryAs<'q, Postgres, O, PgArguments> {
    match how {
        Counted::Requests => bind_filter(q, f),
        Counted::Findings => q
            .bind(&f.cause)
            .bind(f.from_ns.unwrap_or(Nanos::MIN))
            .bind(f.to_ns.unwrap_or(Nanos::MAX))
            .bind(f.instance_list())
            .bind(&f.engine)
            .bind(&f.engine_version),
    }
}

/// A row of the page; the instance id and finish are the outer query's keys for the page's
/// causes and pending state.
#[derive(sqlx::FromRow)]
struct ListRow {
    request_id: String,
    engine: String,
    instance_key: String,
    model: String,
    arrival_ns: i64,
    ttft_ns: Option<i64>,
    tpot_ns: Option<i64>,
    e2e_ns: i64,
    queue_ns: Option<i64>,
    prompt_tokens: i32,
    output_tokens: i32,
    finish_reason: String,
    tenant: Option<String>,
    lora_adapter: Option<String>,
    causes: Option<Vec<String>>,
    pending: bool,
}

/// How many requests a list matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Total {
    pub count: u64,
    /// The planner's estimate (more than [`EXACT_UP_TO`] matched), not a count.
    pub estimated: bool,
}

/// `EXPLAIN (FORMAT JSON)`'s reply, as far as the estimate goes.
#[derive(Deserialize)]
struct Explained {
    #[serde(rename = "Plan")]
    plan: PlanNode,
}

#[derive(Deserialize)]
struct PlanNode {
    #[serde(rename = "Plan Rows")]
    rows: f64,
}

impl Store {
    /// A page of the requests that match `f`, in its order, and how many match in all. The
    /// page first, then its stored causes: only the page's rows are looked up.
    pub async fn list_requests(&self, f: &RequestFilter) -> Result<(Vec<RequestRow>, Total)> {
        let sql = format!(
            "SELECT page.*,
               (SELECT d.causes FROM diagnoses d WHERE d.instance_id = page.instance_id
                  AND d.request_id = page.request_id AND d.arrival_ns = page.arrival_ns) AS causes,
               EXISTS (SELECT 1 FROM diagnosis_queue q WHERE q.instance_id = page.instance_id
                  AND q.from_ns <= page.finished_ns AND q.to_ns >= page.arrival_ns) AS pending
             FROM (
               SELECT r.request_id, r.instance_id, r.finished_ns, i.engine, i.instance_key,
                      m.name AS model, r.arrival_ns, r.ttft_ns, r.tpot_ns, r.e2e_ns, r.queue_ns,
                      r.prompt_tokens, r.output_tokens, r.finish_reason, r.tenant, r.lora_adapter
               {from} {FILTER}{cause}
               ORDER BY {inner} LIMIT {limit} OFFSET {offset}) page
             ORDER BY {outer}",
            from = from(f),
            cause = cause_condition(f),
            inner = inner_order(f),
            outer = order_by(f, "page"),
            limit = f.limit.max(0),
            offset = f.offset.max(0),
        );
        let rows: Vec<ListRow> = bind_filter(sqlx::query_as(sqlx::AssertSqlSafe(sql)), f)
            .fetch_all(&self.pool)
            .await?;
        let total = if f.offset == 0 && (rows.len() as i64) < f.limit {
            Total {
                count: rows.len() as u64,
                estimated: false,
            }
        } else {
            self.count_requests(f, EXACT_UP_TO).await?
        };
        let page = rows
            .into_iter()
            .map(|r| RequestRow {
                request_id: r.request_id,
                engine: engine(&r.engine),
                instance: r.instance_key,
                model: r.model,
                arrival_ns: r.arrival_ns,
                ttft_ns: r.ttft_ns,
                tpot_ns: r.tpot_ns,
                e2e_ns: r.e2e_ns,
                queue_ns: r.queue_ns,
                prompt_tokens: count(r.prompt_tokens),
                output_tokens: count(r.output_tokens),
                finish_reason: FinishReason::parse(&r.finish_reason).unwrap_or_default(),
                causes: (!r.pending).then(|| r.causes.unwrap_or_default()),
                tenant: r.tenant,
                lora_adapter: r.lora_adapter,
            })
            .collect();
        Ok((page, total))
    }

    /// How many requests match `f`: the planner's estimate first (a plan, no rows read), then
    /// a count capped just past `exact_up_to` ([`EXACT_UP_TO`] for the list) unless the
    /// estimate is far beyond it.
    pub async fn count_requests(&self, f: &RequestFilter, exact_up_to: u64) -> Result<Total> {
        let how = if counted_from_findings(f) {
            Counted::Findings
        } else {
            Counted::Requests
        };
        let matching = match how {
            Counted::Findings => FINDINGS.to_string(),
            Counted::Requests => format!("SELECT 1 {} {FILTER}{}", from(f), cause_condition(f)),
        };
        let explain = format!("EXPLAIN (FORMAT JSON) {matching}");
        let (plan,): (sqlx::types::Json<Vec<Explained>>,) =
            bind_count(sqlx::query_as(sqlx::AssertSqlSafe(explain)), f, how)
                .fetch_one(&self.pool)
                .await?;
        let estimate = plan.0.first().map_or(0.0, |e| e.plan.rows).max(0.0) as u64;
        // The estimate can be off by a few times (joins, correlated filters): count unless
        // it is well past what counting affords.
        if estimate <= 4 * exact_up_to {
            let n = self
                .count_matching(f, how, &format!("{matching} LIMIT {}", exact_up_to + 1))
                .await?;
            if n <= exact_up_to {
                return Ok(Total {
                    count: n,
                    estimated: false,
                });
            }
            if estimate < n {
                // The planner was wrong by more than the cap (at 10 M requests it put a common
                // cause's 62k findings at one row): its figure is no estimate; count them all.
                return Ok(Total {
                    count: self.count_matching(f, how, &matching).await?,
                    estimated: false,
                });
            }
        }
        Ok(Total {
            count: estimate,
            estimated: true,
        })
    }

    /// The rows `matching` (a `SELECT` over the list's filter) returns, counted.
    async fn count_matching(&self, f: &RequestFilter, how: Counted, matching: &str) -> Result<u64> {
        let sql = format!("SELECT count(*) FROM ({matching}) matching");
        let (n,): (i64,) = bind_count(sqlx::query_as(sqlx::AssertSqlSafe(sql)), f, how)
            .fetch_one(&self.pool)
            .await?;
        Ok(n.max(0) as u64)
    }
}

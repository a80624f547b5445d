//! Writing a batch's iterations: the request keys their batches name, the steps not stored yet
//! (a block per second they start in, `step_block.rs`), and the rollup cells those steps add
//! to. Runs inside the batch's transaction, under the instance's advisory lock, which is what
//! makes the duplicate check exact.

use std::collections::HashSet;

use tokenscope_core::model::{DraftSums, Iteration, Nanos};

use crate::batch::ResourceBatch;
use crate::batch_block;
use crate::error::Result;
use crate::step_block::{self, Step};

/// Maps keyed by request id, looked up once per batch entry (a token's worth of work each, at
/// small batches): foldhash hashes a 40-byte id several times faster than the standard SipHash,
/// seeded per process like it (measured: docs/BENCHMARKS.md, 2026-12-02).
type IdMap<'a, V> = foldhash::HashMap<&'a str, V>;
type KeyMap = foldhash::HashMap<String, i64>;

/// Stores the batch's iterations that the instance does not have yet and adds them to the
/// rollups; returns how many were new.
///
/// The check for stored ones runs before a plain `INSERT` rather than as `ON CONFLICT DO
/// NOTHING … RETURNING` feeding the rollups in SQL: with every writer of the instance holding
/// its lock, the check is exact, and the two together cost Postgres about 40 % less per step
/// (docs/BENCHMARKS.md, 2026-12-02).
pub(super) async fn insert(
    tx: &mut sqlx::PgConnection,
    instance_id: i32,
    batch: &ResourceBatch,
) -> Result<u64> {
    let offered: Vec<&Iteration> = batch.iterations.iter().map(|i| &i.value).collect();
    if offered.is_empty() {
        return Ok(0);
    }
    let stored = stored_steps(tx, instance_id, &offered).await?;
    let mut seen = HashSet::new();
    // A step is its (start, id): the table's key. The first copy in the batch wins, as it did
    // with ON CONFLICT.
    let new: Vec<&Iteration> = offered
        .into_iter()
        .filter(|i| {
            let key = (i.start_ns, i.iteration_id as i64);
            !stored.contains(&key) && seen.insert(key)
        })
        .collect();
    if new.is_empty() {
        return Ok(0);
    }
    let keys = request_keys(tx, instance_id, &new).await?;
    let rows = StepRows::new(&new, &keys)?;
    insert_blocks(tx, instance_id, &Blocks::of(&rows)).await?;
    add_to_rollups(tx, instance_id, &Cells::of(&rows)).await?;
    Ok(new.len() as u64)
}

/// The new steps, a block per second they start in, with a plain `INSERT`: none of them is
/// stored (checked under the lock).
async fn insert_blocks(
    tx: &mut sqlx::PgConnection,
    instance_id: i32,
    blocks: &Blocks,
) -> Result<()> {
    sqlx::query!(
        r#"INSERT INTO iteration_blocks (instance_id, second_ns, first_start_ns, first_iteration_id,
               last_start_ns, steps, block)
           SELECT $1::int, * FROM UNNEST($2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[],
               $6::int[], $7::bytea[])"#,
        instance_id,
        &blocks.second_ns,
        &blocks.first_start_ns,
        &blocks.first_iteration_id,
        &blocks.last_start_ns,
        &blocks.steps,
        &blocks.block,
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Adds the new steps' sums to their cells; a cell another batch started is added to.
async fn add_to_rollups(
    tx: &mut sqlx::PgConnection,
    instance_id: i32,
    cells: &Cells,
) -> Result<()> {
    sqlx::query!(
        r#"INSERT INTO iteration_rollups AS r (instance_id, resolution_ns, cell_ns, steps, end_ns,
               prefill_tokens, decode_tokens, max_batch_size, draft_entries, draft_proposed, draft_accepted)
           SELECT $1::int, * FROM UNNEST($2::bigint[], $3::bigint[], $4::int[], $5::bigint[], $6::bigint[],
               $7::bigint[], $8::int[], $9::bigint[], $10::bigint[], $11::bigint[])
           ON CONFLICT (instance_id, resolution_ns, cell_ns) DO UPDATE SET
               steps = r.steps + EXCLUDED.steps, end_ns = GREATEST(r.end_ns, EXCLUDED.end_ns),
               prefill_tokens = r.prefill_tokens + EXCLUDED.prefill_tokens,
               decode_tokens = r.decode_tokens + EXCLUDED.decode_tokens,
               max_batch_size = GREATEST(r.max_batch_size, EXCLUDED.max_batch_size),
               draft_entries = r.draft_entries + EXCLUDED.draft_entries,
               draft_proposed = r.draft_proposed + EXCLUDED.draft_proposed,
               draft_accepted = r.draft_accepted + EXCLUDED.draft_accepted"#,
        instance_id,
        &cells.resolution_ns,
        &cells.cell_ns,
        &cells.steps,
        &cells.end_ns,
        &cells.prefill_tokens,
        &cells.decode_tokens,
        &cells.max_batch_size,
        &cells.draft_entries,
        &cells.draft_proposed,
        &cells.draft_accepted,
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The (start, id) keys of `offered` steps the instance already has.
///
/// An exporter sends its steps in order, so usually the instance has no step starting at or
/// after the first offered one, and one probe of the primary key says so: then none of them can
/// be stored (a step's start is part of its key). Otherwise the blocks of the seconds the offered
/// steps start in are read and their steps listed.
async fn stored_steps(
    tx: &mut sqlx::PgConnection,
    instance_id: i32,
    offered: &[&Iteration],
) -> Result<HashSet<(Nanos, i64)>> {
    let first = offered
        .iter()
        .map(|i| i.start_ns)
        .min()
        .unwrap_or(Nanos::MAX);
    let any_later = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM iteration_blocks
               WHERE instance_id = $1 AND second_ns >= $2 AND last_start_ns >= $3) AS "any!""#,
        instance_id,
        step_block::second_of(first),
        first
    )
    .fetch_one(&mut *tx)
    .await?;
    if !any_later {
        return Ok(HashSet::new());
    }
    let mut seconds: Vec<Nanos> = offered
        .iter()
        .map(|i| step_block::second_of(i.start_ns))
        .collect();
    seconds.sort_unstable();
    seconds.dedup();
    let blocks = sqlx::query_scalar!(
        "SELECT block FROM iteration_blocks WHERE instance_id = $1 AND second_ns = ANY($2)",
        instance_id,
        &seconds
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut stored = HashSet::new();
    for block in blocks {
        let block = step_block::decode(&block)?;
        stored.extend(block.steps.iter().map(|s| (s.start_ns, s.iteration_id)));
    }
    Ok(stored)
}

/// The new steps in (start, id) order, with their batches encoded.
struct StepRows {
    steps: Vec<Step>,
    batches: Vec<Vec<u8>>,
    /// Each step's speculative decoding (the rollups sum it).
    drafts: Vec<DraftSums>,
}

impl StepRows {
    fn new(its: &[&Iteration], keys: &KeyMap) -> Result<Self> {
        let mut its = its.to_vec();
        its.sort_by_key(|i| (i.start_ns, i.iteration_id));
        Ok(Self {
            steps: its.iter().map(|i| Step::of(i)).collect(),
            drafts: its.iter().map(|i| i.drafts()).collect(),
            batches: its
                .iter()
                .map(|i| batch_block::encode(&i.batch, keys))
                .collect::<Result<_>>()?,
        })
    }
}

/// The new steps as a block per second they start in, as parallel arrays for `UNNEST`.
#[derive(Default)]
struct Blocks {
    second_ns: Vec<i64>,
    first_start_ns: Vec<i64>,
    first_iteration_id: Vec<i64>,
    last_start_ns: Vec<i64>,
    steps: Vec<i32>,
    block: Vec<Vec<u8>>,
}

impl Blocks {
    fn of(rows: &StepRows) -> Self {
        let mut blocks = Blocks::default();
        let mut from = 0;
        let same_second = |a: &Step, b: &Step| {
            step_block::second_of(a.start_ns) == step_block::second_of(b.start_ns)
        };
        for steps in rows.steps.chunk_by(same_second) {
            let batches = &rows.batches[from..from + steps.len()];
            from += steps.len();
            blocks
                .second_ns
                .push(step_block::second_of(steps[0].start_ns));
            blocks.first_start_ns.push(steps[0].start_ns);
            blocks.first_iteration_id.push(steps[0].iteration_id);
            blocks.last_start_ns.push(steps[steps.len() - 1].start_ns);
            blocks.steps.push(steps.len() as i32);
            blocks.block.push(step_block::encode(steps, batches));
        }
        blocks
    }
}

/// What newly stored steps add to each rollup cell they fall in, at every resolution, as
/// parallel arrays for `UNNEST`. Sums the same columns the readers sum from raw steps.
#[derive(Default)]
struct Cells {
    resolution_ns: Vec<i64>,
    cell_ns: Vec<i64>,
    steps: Vec<i32>,
    end_ns: Vec<i64>,
    prefill_tokens: Vec<i64>,
    decode_tokens: Vec<i64>,
    max_batch_size: Vec<i32>,
    draft_entries: Vec<i64>,
    draft_proposed: Vec<i64>,
    draft_accepted: Vec<i64>,
}

impl Cells {
    fn of(rows: &StepRows) -> Self {
        #[derive(Clone, Copy)]
        struct Sum {
            steps: i32,
            end_ns: i64,
            prefill: i64,
            decode: i64,
            max_batch: i32,
            drafts: DraftSums,
        }
        // Ordered, so that concurrent writers of one instance (serialised by its lock anyway)
        // and the tests see one order.
        let mut sums = std::collections::BTreeMap::<(i64, i64), Sum>::new();
        for (step, drafts) in rows.steps.iter().zip(&rows.drafts) {
            for res in super::super::ROLLUP_NS {
                // Starts are validated to lie in 2000–2100, so they are positive and division
                // truncates as Postgres's does.
                let cell = step.start_ns / res * res;
                let s = sums.entry((res, cell)).or_insert(Sum {
                    steps: 0,
                    end_ns: i64::MIN,
                    prefill: 0,
                    decode: 0,
                    max_batch: i32::MIN,
                    drafts: DraftSums::default(),
                });
                s.steps += 1;
                s.end_ns = s.end_ns.max(step.end_ns);
                s.prefill += i64::from(step.prefill_tokens);
                s.decode += i64::from(step.decode_tokens);
                s.max_batch = s.max_batch.max(step.batch_size);
                s.drafts.merge(*drafts);
            }
        }
        let mut cells = Cells::default();
        for ((res, cell), s) in sums {
            cells.resolution_ns.push(res);
            cells.cell_ns.push(cell);
            cells.steps.push(s.steps);
            cells.end_ns.push(s.end_ns);
            cells.prefill_tokens.push(s.prefill);
            cells.decode_tokens.push(s.decode);
            cells.max_batch_size.push(s.max_batch);
            let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            cells.draft_entries.push(int(s.drafts.entries));
            cells.draft_proposed.push(int(s.drafts.proposed));
            cells.draft_accepted.push(int(s.drafts.accepted));
        }
        cells
    }
}

/// Keys (`request_keys`) of every request the new steps' batches name, handed out for the new
/// ones. Runs under the instance's lock, so two writers never race for one id.
async fn request_keys(
    tx: &mut sqlx::PgConnection,
    instance_id: i32,
    its: &[&Iteration],
) -> Result<KeyMap> {
    // Each id with the start of the first step that names it (its key's partition).
    let mut seen: IdMap<Nanos> = IdMap::default();
    for it in its {
        for e in &it.batch {
            let at = seen.entry(&*e.request_id).or_insert(it.start_ns);
            *at = (*at).min(it.start_ns);
        }
    }
    if seen.is_empty() {
        return Ok(KeyMap::default());
    }
    let (names, seen_ns): (Vec<&str>, Vec<Nanos>) = seen.into_iter().unzip();
    // Data-modifying CTEs share one snapshot: `existing` cannot see what `added` inserts, so each
    // id comes back exactly once, from one side or the other.
    let rows = sqlx::query!(
        r#"WITH wanted AS (SELECT * FROM UNNEST($2::text[], $3::bigint[]) AS w (request_id, seen_ns)),
           existing AS (
               SELECT k.key, k.request_id FROM wanted w
               JOIN request_keys k ON k.instance_id = $1 AND k.request_id = w.request_id
           ),
           added AS (
               INSERT INTO request_keys (instance_id, request_id, seen_ns)
               SELECT $1, w.request_id, w.seen_ns FROM wanted w
               WHERE NOT EXISTS (SELECT 1 FROM existing e WHERE e.request_id = w.request_id)
               RETURNING key, request_id
           )
           SELECT key AS "key!", request_id AS "request_id!" FROM existing
           UNION ALL
           SELECT key, request_id FROM added"#,
        instance_id,
        &names as &[&str],
        &seen_ns
    )
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows.into_iter().map(|r| (r.request_id, r.key)).collect())
}

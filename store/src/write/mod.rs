//! The write path: one transaction per batch, committed before the batch is acknowledged.

mod iterations;

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use tokenscope_core::model::metrics::{WordStats, request_metrics, word_stats};
use tokenscope_core::model::{
    KvTransfer, Nanos, Preemption, PrefillChunk, RequestTrace, Resource, SamplingParams, Served,
    unhex,
};

use super::token_block::{self, StoredText};
use super::vocab::{TextsById, Vocab};
use super::{Store, partitions::day_of};
use crate::batch::{ResourceBatch, Stored};
use crate::error::{Error, Result};

/// The small, rarely filtered parts of a request, kept as JSON in `requests.detail` (the prefix
/// cache, large, in its own column `requests.prefix_cache`).
#[derive(Serialize, Deserialize)]
pub(super) struct Detail {
    pub queued_ns: Option<Nanos>,
    pub first_scheduled_ns: Option<Nanos>,
    pub first_token_ns: Option<Nanos>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefill_chunks: Vec<PrefillChunk>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preemptions: Vec<Preemption>,
    pub kv_transfer: Option<KvTransfer>,
    pub sampling: SamplingParams,
    #[serde(flatten)]
    pub served: Served,
    /// The answer's word choice, summed (`model::metrics::word_stats`): compare reads each
    /// side's sums in SQL. Absent for timing-only sources and requests stored before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub words: Option<WordStats>,
}

impl Detail {
    pub fn parse(value: serde_json::Value) -> Result<Self> {
        serde_json::from_value(value).map_err(|e| {
            crate::Error::Internal(format!("stored request detail is unreadable: {e}"))
        })
    }

    /// Puts the stage times and details back into a request read from its row (without its
    /// prefix cache: the caller reads `requests.prefix_cache`).
    pub fn apply(self, r: &mut RequestTrace) {
        r.queued_ns = self.queued_ns;
        r.first_scheduled_ns = self.first_scheduled_ns;
        r.first_token_ns = self.first_token_ns;
        r.prefill_chunks = self.prefill_chunks;
        r.preemptions = self.preemptions;
        r.kv_transfer = self.kv_transfer;
        r.sampling = self.sampling;
        r.served = self.served;
    }
}

/// Whether a request's diagnosis is healthy whatever is stored beside it: the query layer's
/// judgement (`diagnosis::healthy_alone`), which the store keeps with the request
/// (`requests.healthy_alone`) so that the findings worker can pass it by.
pub type HealthyAlone<'a> = &'a (dyn Fn(&RequestTrace) -> bool + Sync);

impl Store {
    /// Stores the batches' new requests and steps; `healthy_alone` judges each new request.
    pub async fn write(
        &self,
        batches: &[ResourceBatch],
        healthy_alone: HealthyAlone<'_>,
    ) -> Result<Stored> {
        let mut stored = Stored::default();
        for batch in batches {
            if batch.requests.is_empty() && batch.iterations.is_empty() {
                continue;
            }
            let s = self.write_resource(batch, healthy_alone).await?;
            stored.accepted_requests += s.accepted_requests;
            stored.duplicate_requests += s.duplicate_requests;
            stored.accepted_iterations += s.accepted_iterations;
            stored.accepted_tokens += s.accepted_tokens;
            stored.texts_missing += s.texts_missing;
        }
        Ok(stored)
    }

    async fn model_id(&self, name: &str) -> Result<i32> {
        if let Some(&id) = self
            .caches
            .models
            .lock()
            .expect("model cache poisoned")
            .get(name)
        {
            return Ok(id);
        }
        // DO UPDATE (a no-op) rather than DO NOTHING so that RETURNING yields the existing id too.
        let id = sqlx::query_scalar!(
            "INSERT INTO models (name) VALUES ($1) ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name RETURNING id",
            name
        )
        .fetch_one(&self.pool)
        .await?;
        self.caches
            .models
            .lock()
            .expect("model cache poisoned")
            .insert(name.to_string(), id);
        Ok(id)
    }

    /// Encodes the rows of `requests` under the vocabulary cache's read lock (no await inside),
    /// noting what the vocabulary lacked.
    fn encode_rows<'r>(
        &self,
        model_id: i32,
        requests: &[&'r RequestTrace],
        healthy_alone: &[bool],
        by_id: Option<&ById<'r>>,
    ) -> (RequestRows, Lacking<'r>) {
        self.caches.vocab.with(model_id, |vocab| {
            let mut rows = RequestRows::default();
            let mut lacking = Lacking::default();
            for (r, &alone) in requests.iter().zip(healthy_alone) {
                let block =
                    (!r.tokens.is_empty()).then(|| encode_tokens(r, &vocab, by_id, &mut lacking));
                rows.push(r, block, alone);
            }
            (rows, lacking)
        })
    }

    /// Stores the texts an export gave by id that the vocabulary lacks (the first text stored
    /// for an id stays: another writer's wins) and finds those that differ from it: tokens with
    /// such an id store the export's text themselves.
    async fn texts_by_id<'t>(&self, model_id: i32, texts: &'t TextsById) -> Result<ById<'t>> {
        let vocab = &self.caches.vocab;
        let entries = || texts.0.iter().map(|(id, text)| (*id, text.as_str()));
        let new: Vec<_> = vocab.with(model_id, |v| {
            entries().filter(|(id, _)| !v.knows(*id)).collect()
        });
        vocab.store(&self.pool, model_id, new).await?;
        let own = vocab.with(model_id, |v| {
            entries()
                .filter(|(id, text)| v.matches(*id, text) != Some(true))
                .collect()
        });
        Ok(ById { own })
    }

    /// Of `ids` (texts by id the cache did not have), how many distinct ones the vocabulary
    /// lacks; their tokens refer to it all the same, and show the text once it arrives.
    async fn texts_missing(&self, model_id: i32, mut ids: Vec<u32>) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        ids.sort_unstable();
        ids.dedup();
        let vocab = &self.caches.vocab;
        vocab
            .load(&self.pool, model_id, ids.iter().copied())
            .await?;
        Ok(vocab.with(model_id, |v| {
            ids.iter().filter(|&&id| !v.knows(id)).count() as u64
        }))
    }

    async fn write_resource(
        &self,
        batch: &ResourceBatch,
        healthy_alone: HealthyAlone<'_>,
    ) -> Result<Stored> {
        let resource = &batch.resource;
        let model_id = self.model_id(&resource.model).await?;
        let requests: Vec<&RequestTrace> = batch.requests.iter().map(|i| &i.value).collect();
        let alone: Vec<bool> = requests.iter().map(|r| healthy_alone(r)).collect();

        // Everything that needs no transaction happens first: partitions (idempotent DDL), the
        // CPU work of encoding, and vocabulary (idempotent).
        let parts = &self.caches.partitions;
        parts
            .ensure(
                &self.pool,
                "requests",
                requests.iter().map(|r| day_of(r.arrival_ns)),
            )
            .await?;
        for table in ["iteration_blocks", "iteration_rollups", "request_keys"] {
            parts
                .ensure(
                    &self.pool,
                    table,
                    batch.iterations.iter().map(|i| day_of(i.value.start_ns)),
                )
                .await?;
        }
        let by_id = match &batch.texts_by_id {
            Some(texts) => Some(self.texts_by_id(model_id, texts).await?),
            None => None,
        };
        let (mut rows, mut lacking) = self.encode_rows(model_id, &requests, &alone, by_id.as_ref());
        // Texts of ids the vocabulary does not know yet (a new model's first batches) are stored
        // first and the batch encoded again, so its blocks refer to them. Steady state: one pass.
        if self
            .caches
            .vocab
            .store(&self.pool, model_id, lacking.unknown)
            .await?
        {
            (rows, lacking) = self.encode_rows(model_id, &requests, &alone, by_id.as_ref());
        }
        let texts_missing = self.texts_missing(model_id, lacking.unresolved).await?;
        let (first_seen, last_seen) = seen_range(batch);

        let mut tx = self.pool.begin().await?;
        let instance_id =
            upsert_instance(&mut tx, resource, model_id, first_seen, last_seen).await?;
        // Serialises writers of one instance, so the duplicate check below cannot race.
        sqlx::query!(
            "SELECT pg_advisory_xact_lock($1, $2)",
            super::INSTANCE_LOCKS,
            instance_id
        )
        .execute(&mut *tx)
        .await?;
        let existing: HashSet<String> = sqlx::query_scalar!(
            "SELECT request_id FROM requests WHERE instance_id = $1 AND request_id = ANY($2)",
            instance_id,
            &rows.request_id
        )
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
        let offered = rows.request_id.len() as u64;
        rows.retain_new(&existing);
        let tokens: i64 = rows.output_tokens.iter().map(|&n| i64::from(n)).sum();
        let inserted = sqlx::query!(
            r#"INSERT INTO requests (instance_id, model_id, request_id, arrival_ns, finished_ns, ttft_ns, tpot_ns,
                   e2e_ns, queue_ns, prompt_tokens, output_tokens, cached_tokens, finish_reason, trace_id,
                   parent_span_id, detail, tokens, prefix_cache, healthy_alone)
               SELECT $1::int, $2::int, * FROM UNNEST($3::text[], $4::bigint[], $5::bigint[], $6::bigint[],
                   $7::bigint[], $8::bigint[], $9::bigint[], $10::int[], $11::int[], $12::int[], $13::text[],
                   $14::bytea[], $15::bytea[], $16::jsonb[], $17::bytea[], $18::jsonb[], $19::bool[])
               ON CONFLICT DO NOTHING"#,
            instance_id,
            model_id,
            &rows.request_id,
            &rows.arrival_ns,
            &rows.finished_ns,
            &rows.ttft_ns as &[Option<i64>],
            &rows.tpot_ns as &[Option<i64>],
            &rows.e2e_ns,
            &rows.queue_ns as &[Option<i64>],
            &rows.prompt_tokens,
            &rows.output_tokens,
            &rows.cached_tokens,
            &rows.finish_reason,
            &rows.trace_id as &[Option<Vec<u8>>],
            &rows.parent_span_id as &[Option<Vec<u8>>],
            &rows.detail,
            &rows.tokens as &[Option<Vec<u8>>],
            &rows.prefix_cache as &[Option<serde_json::Value>],
            &rows.healthy_alone,
        )
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let iterations = iterations::insert(&mut tx, instance_id, batch).await?;
        if inserted > 0 || iterations > 0 {
            // What was diagnosed around this stretch may change: the worker takes it again.
            Store::enqueue_diagnosis(&mut tx, instance_id, first_seen, last_seen).await?;
            // Open live pages follow it, once committed.
            let notice = serde_json::to_string(&crate::live::Ingested {
                instance: resource.instance_id.clone(),
                newest_ns: last_seen,
            })
            .map_err(|e| Error::Internal(e.to_string()))?;
            sqlx::query_scalar!(
                "SELECT 1 AS \"sent!\" FROM pg_notify($1, $2)",
                crate::live::CHANNEL,
                notice
            )
            .fetch_one(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(Stored {
            accepted_requests: inserted,
            duplicate_requests: offered - inserted,
            accepted_iterations: iterations,
            accepted_tokens: tokens as u64,
            texts_missing,
        })
    }
}

async fn upsert_instance(
    tx: &mut sqlx::PgConnection,
    r: &Resource,
    model_id: i32,
    first_seen: Nanos,
    last_seen: Nanos,
) -> Result<i32> {
    // The latest report wins for descriptive fields (an instance may be redeployed with a new
    // engine version or model); the seen range only widens.
    Ok(sqlx::query_scalar!(
        "INSERT INTO instances (instance_key, engine, engine_version, model_id, role, host, first_seen_ns, last_seen_ns)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (instance_key) DO UPDATE SET
             engine = EXCLUDED.engine, engine_version = EXCLUDED.engine_version, model_id = EXCLUDED.model_id,
             role = EXCLUDED.role, host = EXCLUDED.host,
             first_seen_ns = LEAST(instances.first_seen_ns, EXCLUDED.first_seen_ns),
             last_seen_ns = GREATEST(instances.last_seen_ns, EXCLUDED.last_seen_ns)
         RETURNING id",
        r.instance_id,
        r.engine.as_str(),
        r.engine_version,
        model_id,
        r.role.as_str(),
        r.host,
        first_seen,
        last_seen
    )
    .fetch_one(&mut *tx)
    .await?)
}

fn seen_range(batch: &ResourceBatch) -> (Nanos, Nanos) {
    let requests = batch
        .requests
        .iter()
        .map(|r| (r.value.arrival_ns, r.value.finished_ns));
    let iterations = batch
        .iterations
        .iter()
        .map(|i| (i.value.start_ns, i.value.end_ns));
    requests
        .chain(iterations)
        .fold((Nanos::MAX, Nanos::MIN), |(lo, hi), (a, b)| {
            (lo.min(a), hi.max(b))
        })
}

/// How the tokens of a batch whose texts came by id store them.
pub struct ById<'t> {
    /// Ids whose text in the export is not the vocabulary's (another writer stored another, or
    /// the text cannot be stored there): their tokens store the export's text.
    pub own: foldhash::HashMap<u32, &'t str>,
}

/// What the vocabulary lacked while blocks were encoded.
#[derive(Default)]
pub struct Lacking<'r> {
    /// Texts sent with their tokens whose ids the vocabulary has no text for.
    pub unknown: Vec<(u32, &'r str)>,
    /// Ids of texts by id that neither the export nor the cached vocabulary has.
    pub unresolved: Vec<u32>,
}

/// A request's token block as the write path encodes it (public for the benches): a text is
/// stored as a reference when it is the vocabulary's text of its id, or came by id.
pub fn encode_tokens<'r>(
    r: &'r RequestTrace,
    vocab: &Vocab<'_>,
    by_id: Option<&ById<'r>>,
    lacking: &mut Lacking<'r>,
) -> Vec<u8> {
    token_block::encode(&r.tokens, r.arrival_ns, |id, text| {
        match (id, text, by_id) {
            (Some(id), None, Some(by_id)) => match by_id.own.get(&id) {
                Some(text) => StoredText::Inline(text),
                None => {
                    if !vocab.knows(id) {
                        lacking.unresolved.push(id);
                    }
                    StoredText::Vocab
                }
            },
            (_, None, _) => StoredText::None,
            (Some(id), Some(text), _) => match vocab.matches(id, text) {
                Some(true) => StoredText::Vocab,
                Some(false) => StoredText::Inline(text),
                None => {
                    lacking.unknown.push((id, text));
                    StoredText::Inline(text)
                }
            },
            (None, Some(text), _) => StoredText::Inline(text),
        }
    })
}

/// Requests as parallel arrays, the shape `UNNEST` inserts in one statement.
#[derive(Default)]
struct RequestRows {
    request_id: Vec<String>,
    arrival_ns: Vec<i64>,
    finished_ns: Vec<i64>,
    ttft_ns: Vec<Option<i64>>,
    tpot_ns: Vec<Option<i64>>,
    e2e_ns: Vec<i64>,
    queue_ns: Vec<Option<i64>>,
    prompt_tokens: Vec<i32>,
    output_tokens: Vec<i32>,
    cached_tokens: Vec<i32>,
    finish_reason: Vec<String>,
    trace_id: Vec<Option<Vec<u8>>>,
    parent_span_id: Vec<Option<Vec<u8>>>,
    detail: Vec<serde_json::Value>,
    tokens: Vec<Option<Vec<u8>>>,
    prefix_cache: Vec<Option<serde_json::Value>>,
    healthy_alone: Vec<bool>,
}

impl RequestRows {
    fn push(&mut self, r: &RequestTrace, tokens: Option<Vec<u8>>, healthy_alone: bool) {
        let m = request_metrics(r);
        // The chain is stored in its own column (`requests.prefix_cache`), not in detail: listed
        // field by field so it is not copied only to be dropped.
        let served = Served {
            lora_adapter: r.served.lora_adapter.clone(),
            priority: r.served.priority,
            tenant: r.served.tenant.clone(),
            prefix_cache: None,
        };
        let detail = Detail {
            queued_ns: r.queued_ns,
            first_scheduled_ns: r.first_scheduled_ns,
            first_token_ns: r.first_token_ns,
            prefill_chunks: r.prefill_chunks.clone(),
            preemptions: r.preemptions.clone(),
            kv_transfer: r.kv_transfer.clone(),
            sampling: r.sampling.clone(),
            served,
            words: word_stats(r),
        };
        self.request_id.push(r.request_id.clone());
        self.arrival_ns.push(r.arrival_ns);
        self.finished_ns.push(r.finished_ns);
        self.ttft_ns.push(m.ttft_ns);
        self.tpot_ns.push(m.tpot_ns);
        self.e2e_ns.push(m.e2e_ns);
        self.queue_ns.push(m.queue_ns);
        // Counts are validated u32s far below 2^31 in practice; saturate rather than wrap.
        let int = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
        self.prompt_tokens.push(int(r.prompt_tokens));
        self.output_tokens.push(int(r.output_tokens));
        self.cached_tokens.push(int(r.cached_tokens));
        self.finish_reason
            .push(r.finish_reason.as_str().to_string());
        self.trace_id.push(r.trace_id.as_deref().and_then(unhex));
        self.parent_span_id
            .push(r.parent_span_id.as_deref().and_then(unhex));
        self.detail
            .push(serde_json::to_value(detail).expect("Detail serializes to JSON"));
        self.tokens.push(tokens);
        self.prefix_cache.push(
            r.served
                .prefix_cache
                .as_ref()
                .map(|p| serde_json::to_value(p).expect("PrefixCache serializes to JSON")),
        );
        self.healthy_alone.push(healthy_alone);
    }

    /// Keeps the rows not stored yet: not in `existing`, and not repeated earlier in this batch.
    fn retain_new(&mut self, existing: &HashSet<String>) {
        let mut seen = HashSet::new();
        let keep: Vec<bool> = self
            .request_id
            .iter()
            .map(|id| !existing.contains(id) && seen.insert(id.clone()))
            .collect();
        fn filter<T>(v: &mut Vec<T>, keep: &[bool]) {
            let mut k = keep.iter();
            v.retain(|_| *k.next().unwrap_or(&false));
        }
        filter(&mut self.request_id, &keep);
        filter(&mut self.arrival_ns, &keep);
        filter(&mut self.finished_ns, &keep);
        filter(&mut self.ttft_ns, &keep);
        filter(&mut self.tpot_ns, &keep);
        filter(&mut self.e2e_ns, &keep);
        filter(&mut self.queue_ns, &keep);
        filter(&mut self.prompt_tokens, &keep);
        filter(&mut self.output_tokens, &keep);
        filter(&mut self.cached_tokens, &keep);
        filter(&mut self.finish_reason, &keep);
        filter(&mut self.trace_id, &keep);
        filter(&mut self.parent_span_id, &keep);
        filter(&mut self.detail, &keep);
        filter(&mut self.tokens, &keep);
        filter(&mut self.prefix_cache, &keep);
        filter(&mut self.healthy_alone, &keep);
    }
}

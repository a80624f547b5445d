//! The read path: request rows, a request with its tokens decoded, the load of its steps,
//! instances. Rows come back as the model has them; the query layer (`crate::query`) makes pages.

use std::collections::HashMap;
use std::sync::Arc;

use tokenscope_core::model::{
    BatchEntry, EngineKind, FinishReason, Nanos, Phase, PrefixCache, RequestTrace, Role, StepLoad,
};

use super::{Store, batch_block, token_block, write::Detail};
use crate::error::Result;

/// A stored request and the instance it ran on.
pub struct Loaded {
    pub trace: RequestTrace,
    pub instance_id: i32,
    pub instance: String,
    pub engine: EngineKind,
    pub role: Role,
    pub model: String,
    /// A PD request's parts as stored, in join order; `trace` is then their join, `instance`
    /// their instances comma-separated, the rest the last part's. The store reads each part on
    /// its own (this is empty); the query layer joins them (`query::requests::load`).
    pub parts: Vec<Loaded>,
    /// What the query layer noted joining the parts (clocks that disagree); empty here.
    pub notes: Vec<String>,
    /// How far the query layer moved this part's times onto the first part's clock (0 here).
    pub clock_shift_ns: Nanos,
}

/// The texts a request's token block takes from its model's vocabulary, not yet put in
/// ([`Store::fill_texts`]): reading them is most of a request's decoding, and the diagnosis
/// quotes them only in the findings of requests that are not healthy.
pub struct TextsLater {
    model_id: i32,
    refs: Vec<token_block::VocabRef>,
}

/// A `requests` row with its instance and model, as the loaders select it.
pub(crate) struct StoredRequest {
    pub(crate) request_id: String,
    pub(crate) instance_id: i32,
    pub(crate) engine: String,
    pub(crate) instance_key: String,
    pub(crate) role: String,
    pub(crate) model_id: i32,
    pub(crate) model: String,
    pub(crate) arrival_ns: Nanos,
    pub(crate) finished_ns: Nanos,
    pub(crate) prompt_tokens: i32,
    pub(crate) output_tokens: i32,
    pub(crate) cached_tokens: i32,
    pub(crate) finish_reason: String,
    pub(crate) trace_id: Option<Vec<u8>>,
    pub(crate) parent_span_id: Option<Vec<u8>>,
    pub(crate) detail: serde_json::Value,
    pub(crate) tokens: Option<Vec<u8>>,
    pub(crate) prefix_cache: Option<sqlx::types::Json<PrefixCache>>,
}

/// A request of a list: the columns derived at ingest, no tokens.
pub struct RequestRow {
    pub request_id: String,
    pub engine: EngineKind,
    pub instance: String,
    pub model: String,
    pub arrival_ns: Nanos,
    pub ttft_ns: Option<Nanos>,
    pub tpot_ns: Option<Nanos>,
    pub e2e_ns: Nanos,
    pub queue_ns: Option<Nanos>,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    pub finish_reason: FinishReason,
    /// The stored diagnosis's causes (empty: healthy); `None` while data touching the request
    /// waits for the findings worker.
    pub causes: Option<Vec<String>>,
    pub tenant: Option<String>,
    pub lora_adapter: Option<String>,
}

/// An instance as it last reported.
pub struct InstanceRow {
    pub instance: String,
    pub engine: EngineKind,
    pub engine_version: String,
    pub model: String,
    pub role: Role,
    pub host: String,
    pub first_seen_ns: Nanos,
    pub last_seen_ns: Nanos,
}

/// Filters of `GET /api/v1/requests` (and of the latency and compare views); empty or `None`
/// means "any".
#[derive(Debug, Default, Clone)]
pub struct RequestFilter {
    /// Any of these instances.
    pub instances: Vec<String>,
    pub engine: Option<String>,
    /// The engine's version as its instances report it (`0.11.0`).
    pub engine_version: Option<String>,
    pub model: Option<String>,
    pub from_ns: Option<Nanos>,
    pub to_ns: Option<Nanos>,
    /// A request id, or a W3C trace id (32 hex digits) that finds every request of the trace.
    pub find: Option<String>,
    /// Only requests that broke (`Some(true)`) or met (`Some(false)`) an SLO.
    pub slo_breach: Option<bool>,
    /// TTFT and TPOT SLOs, in nanoseconds, for `slo_breach`.
    pub slo_ns: (Nanos, Nanos),
    /// Only requests whose stored diagnosis has this cause (`queue_backlog`).
    pub cause: Option<String>,
    /// Slices: any of these tenants (an empty list matches none: a reader scoped to tenants
    /// asking for another's), the LoRA adapter and priority the request was served with.
    pub tenants: Option<Vec<String>>,
    pub lora_adapter: Option<String>,
    pub priority: Option<i32>,
    /// Requests whose prompt's block-hash chain holds this hash (16 hex digits): a prompt family.
    pub fingerprint: Option<String>,
    /// Buckets of what slow requests may have in common: prompt tokens in [min, max), the
    /// prefix cache's share of the prompt (0 none, 1 under half, 2 half or more), the UTC hour
    /// of arrival, and the largest batch in the second of arrival in [min, max).
    pub prompt_tokens: (Option<i32>, Option<i32>),
    pub cached_share: Option<i32>,
    pub hour: Option<i32>,
    pub batch_size: (Option<i32>, Option<i32>),
    pub order: Order,
    pub limit: i64,
    pub offset: i64,
}

impl RequestFilter {
    /// The instances to match, or `None` for any (as the queries take them).
    pub fn instance_list(&self) -> Option<&[String]> {
        (!self.instances.is_empty()).then_some(&self.instances[..])
    }

    /// Whether a tenant, adapter, priority, fingerprint or a bucket narrows the requests.
    pub fn sliced(&self) -> bool {
        self.tenants.is_some()
            || self.lora_adapter.is_some()
            || self.priority.is_some()
            || self.fingerprint.is_some()
            || self.prompt_tokens != (None, None)
            || self.cached_share.is_some()
            || self.hour.is_some()
            || self.batch_size.0.is_some()
    }
}

/// A comma-separated list (`gpu-7,gpu-8`), as query parameters and incidents name instances.
pub fn split_list(v: &str) -> Vec<String> {
    v.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The columns a request list can be sorted by.
pub const ORDER_KEYS: [&str; 7] = [
    "arrival", "ttft", "tpot", "e2e", "queue", "prompt", "output",
];

/// A list's order: a column of `ORDER_KEYS` and a direction. Requests without the value (no
/// first token, say) come last either way; ties are broken by arrival and id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    pub key: &'static str,
    pub descending: bool,
}

impl Default for Order {
    fn default() -> Self {
        Self {
            key: "arrival",
            descending: false,
        }
    }
}

impl Order {
    /// `ttft_desc`, `e2e_asc`, `prompt` (ascending); `start` and `recent` as before.
    pub fn parse(s: &str) -> Option<Self> {
        let (key, descending) = match s {
            "start" => ("arrival", false),
            "recent" => ("arrival", true),
            _ => match s.rsplit_once('_') {
                Some((k, "desc")) => (k, true),
                Some((k, "asc")) => (k, false),
                _ => (s, false),
            },
        };
        let key = ORDER_KEYS.iter().find(|&&k| k == key)?;
        Some(Self { key, descending })
    }
}

pub(crate) fn engine(s: &str) -> EngineKind {
    EngineKind::parse(s).unwrap_or_default()
}

/// A stored count (int4, never negative) as the model's `u32`.
pub fn count(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

/// A W3C trace id as bytes, when `s` is one (32 hex digits).
pub(crate) fn trace_id_bytes(s: &str) -> Option<Vec<u8>> {
    (s.len() == 32)
        .then(|| tokenscope_core::model::unhex(s))
        .flatten()
}

impl Store {
    /// The stored requests with this id on one of `instances` (any when empty), newest first:
    /// usually one; a PD request's parts (one per instance); at most ten.
    pub async fn load_request_rows(
        &self,
        request_id: &str,
        instances: &[String],
    ) -> Result<Vec<Loaded>> {
        let rows = sqlx::query_as!(
            StoredRequest,
            r#"SELECT r.request_id, r.instance_id, i.engine, i.instance_key, i.role, r.model_id, m.name AS model,
                      r.arrival_ns, r.finished_ns, r.prompt_tokens, r.output_tokens, r.cached_tokens,
                      r.finish_reason, r.trace_id, r.parent_span_id, r.detail, r.tokens,
                      r.prefix_cache AS "prefix_cache: sqlx::types::Json<PrefixCache>"
               FROM requests r JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
               WHERE r.request_id = $1 AND ($2::text[] IS NULL OR i.instance_key = ANY($2))
               ORDER BY r.arrival_ns DESC
               LIMIT 10"#,
            request_id,
            (!instances.is_empty()).then_some(instances),
        )
        .fetch_all(&self.pool)
        .await?;
        self.decode_requests(rows).await
    }

    /// A page of the stored requests that match `f`'s instances, engine, model and window, oldest
    /// first: at most `limit`, after the (arrival, request id) `after` when given (keyset paging).
    pub async fn load_window(
        &self,
        f: &RequestFilter,
        after: Option<&(Nanos, String)>,
        limit: i64,
    ) -> Result<Vec<Loaded>> {
        let instances = f.instance_list();
        let rows = sqlx::query_as!(
            StoredRequest,
            r#"SELECT r.request_id, r.instance_id, i.engine, i.instance_key, i.role, r.model_id, m.name AS model,
                      r.arrival_ns, r.finished_ns, r.prompt_tokens, r.output_tokens, r.cached_tokens,
                      r.finish_reason, r.trace_id, r.parent_span_id, r.detail, r.tokens,
                      r.prefix_cache AS "prefix_cache: sqlx::types::Json<PrefixCache>"
               FROM requests r JOIN instances i ON i.id = r.instance_id JOIN models m ON m.id = r.model_id
               WHERE ($1::text[] IS NULL OR i.instance_key = ANY($1)) AND ($2::text IS NULL OR i.engine = $2) AND ($9::text IS NULL OR i.engine_version = $9)
                 AND ($3::text IS NULL OR m.name = $3) AND ($10::text[] IS NULL OR r.tenant = ANY($10)) AND ($11::text IS NULL OR r.lora_adapter = $11) AND ($13::text IS NULL OR (r.prefix_cache -> 'block_hashes') ? $13) AND ($14::int IS NULL OR r.prompt_tokens >= $14) AND ($15::int IS NULL OR r.prompt_tokens < $15) AND ($16::int IS NULL OR (CASE WHEN r.cached_tokens = 0 THEN 0 WHEN r.cached_tokens * 2 < r.prompt_tokens THEN 1 ELSE 2 END) = $16) AND ($17::int IS NULL OR ((r.arrival_ns / 3600000000000) % 24)::int = $17) AND ($18::int IS NULL OR EXISTS (SELECT 1 FROM iteration_rollups c1 WHERE c1.instance_id = r.instance_id AND c1.resolution_ns = 1000000000 AND c1.cell_ns = r.arrival_ns - r.arrival_ns % 1000000000 AND c1.max_batch_size >= $18 AND ($19::int IS NULL OR c1.max_batch_size < $19))) AND ($12::int IS NULL OR r.priority = $12) AND r.arrival_ns >= $4 AND r.arrival_ns < $5
                 AND ($6::bigint IS NULL OR (r.arrival_ns, r.request_id) > ($6, $7::text))
               ORDER BY r.arrival_ns, r.request_id
               LIMIT $8"#,
            instances,
            f.engine,
            f.model,
            f.from_ns.unwrap_or(Nanos::MIN),
            f.to_ns.unwrap_or(Nanos::MAX),
            after.map(|a| a.0),
            after.map(|a| a.1.as_str()),
            limit,
            f.engine_version,
            f.tenants.as_deref(),
            f.lora_adapter,
            f.priority,
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
        self.decode_requests(rows).await
    }

    /// Stored rows as the model, in their order.
    pub(crate) async fn decode_requests(&self, rows: Vec<StoredRequest>) -> Result<Vec<Loaded>> {
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            out.push(self.decode_request(row).await?);
        }
        Ok(out)
    }

    /// A stored row as the model: the detail applied, the token block decoded, texts from the
    /// model's vocabulary filled in.
    async fn decode_request(&self, row: StoredRequest) -> Result<Loaded> {
        let (mut loaded, later) = decode_untexted(row, token_block::Candidates::All)?;
        self.fill_texts(&mut loaded.trace, later).await?;
        Ok(loaded)
    }

    /// Puts the vocabulary texts a request's token block refers to into its tokens.
    pub async fn fill_texts(&self, trace: &mut RequestTrace, later: TextsLater) -> Result<()> {
        if later.refs.is_empty() {
            return Ok(());
        }
        let vocab = &self.caches.vocab;
        let ids = later.refs.iter().map(|r| r.token_id);
        vocab.load(&self.pool, later.model_id, ids).await?;
        vocab.with(later.model_id, |v| {
            token_block::fill_vocab(&mut trace.tokens, &later.refs, |id| v.text(id));
        });
        Ok(())
    }

    /// The instance's steps over the request's lifetime: the load of those that produced its
    /// tokens, and whose prefills ran while it waited for each.
    pub async fn step_loads(&self, instance_id: i32, r: &RequestTrace) -> Result<Vec<StepLoad>> {
        if r.tokens
            .iter()
            .all(|t| t.emitted_ns.is_none() && t.iteration.is_none())
        {
            return Ok(Vec::new());
        }
        let rows = self
            .steps_in(
                &[instance_id],
                r.arrival_ns - super::CLOCK_SLACK_NS..r.finished_ns.saturating_add(1),
            )
            .await?;
        // The request's own entry in each step (its draft tokens, with speculative decoding) is
        // found by its key, so that only the prefills' keys are looked up, not those of every
        // speculative entry in every batch.
        let own_keys: Vec<i64> = sqlx::query_scalar!(
            "SELECT key FROM request_keys WHERE instance_id = $1 AND request_id = $2",
            instance_id,
            r.request_id
        )
        .fetch_all(&self.pool)
        .await?;
        let is_own = |who: &batch_block::Who| match who {
            batch_block::Who::Key(k) => own_keys.contains(k),
            batch_block::Who::Id(id) => *id == r.request_id,
        };
        let mut own_drafts = Vec::with_capacity(rows.len());
        let prefills = rows
            .iter()
            .map(|row| {
                let entries = batch_block::decode(&row.batch)?;
                own_drafts.push(
                    entries
                        .iter()
                        .find(|e| e.draft.is_some() && is_own(&e.who))
                        .and_then(|e| e.draft),
                );
                Ok(entries
                    .into_iter()
                    .filter(|e| e.phase == Phase::Prefill)
                    .collect())
            })
            .collect::<Result<Vec<Vec<_>>>>()?;
        let prefills = self.resolve_batches(prefills).await?;
        rows.into_iter()
            .zip(prefills)
            .zip(own_drafts)
            .map(|((row, prefill), own_draft)| {
                let s = row.step;
                Ok(StepLoad {
                    iteration_id: s.iteration_id as u64,
                    start_ns: s.start_ns,
                    end_ns: s.end_ns,
                    batch_size: count(s.batch_size),
                    waiting: count(s.waiting),
                    prefill_tokens: count(s.prefill_tokens),
                    decode_tokens: count(s.decode_tokens),
                    prefill_requests: prefill
                        .into_iter()
                        .map(|e| e.request_id.to_string())
                        .collect(),
                    own_draft,
                })
            })
            .collect()
    }

    /// Decoded batches with their request ids: every key of every batch looked up in one query.
    pub(super) async fn resolve_batches(
        &self,
        batches: Vec<Vec<batch_block::Stored>>,
    ) -> Result<Vec<Vec<BatchEntry>>> {
        let mut keys: Vec<i64> = batch_block::keys(batches.iter().flatten()).collect();
        keys.sort_unstable();
        keys.dedup();
        let ids: HashMap<i64, Arc<str>> = if keys.is_empty() {
            HashMap::new()
        } else {
            sqlx::query!(
                "SELECT key, request_id FROM request_keys WHERE key = ANY($1)",
                &keys
            )
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(|r| (r.key, Arc::from(r.request_id)))
            .collect()
        };
        batches
            .into_iter()
            .map(|b| batch_block::resolve(b, &ids))
            .collect()
    }

    pub async fn list_instances(&self) -> Result<Vec<InstanceRow>> {
        let rows = sqlx::query!(
            "SELECT i.instance_key, i.engine, i.engine_version, m.name AS model, i.role, i.host,
                    i.first_seen_ns, i.last_seen_ns
             FROM instances i JOIN models m ON m.id = i.model_id
             ORDER BY i.instance_key"
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| InstanceRow {
                instance: r.instance_key,
                engine: engine(&r.engine),
                engine_version: r.engine_version,
                model: r.model,
                role: Role::parse(&r.role).unwrap_or_default(),
                host: r.host,
                first_seen_ns: r.first_seen_ns,
                last_seen_ns: r.last_seen_ns,
            })
            .collect())
    }
}

/// A stored row as the model, as `Store::decode_request` reads it but without the vocabulary's
/// texts (tokens that are a vocabulary entry have their id and no text); what they would be is
/// handed back. `keep` says whose top-k candidates are decoded.
pub(crate) fn decode_untexted(
    row: StoredRequest,
    keep: token_block::Candidates,
) -> Result<(Loaded, TextsLater)> {
    let detail = Detail::parse(row.detail)?;
    let (tokens, refs) = match &row.tokens {
        None => (Vec::new(), Vec::new()),
        Some(block) => token_block::decode_keeping(block, row.arrival_ns, keep)?,
    };
    let later = TextsLater {
        model_id: row.model_id,
        refs,
    };
    let mut trace = RequestTrace {
        request_id: row.request_id,
        trace_id: row.trace_id.as_deref().map(tokenscope_core::model::hex),
        parent_span_id: row
            .parent_span_id
            .as_deref()
            .map(tokenscope_core::model::hex),
        arrival_ns: row.arrival_ns,
        finished_ns: row.finished_ns,
        finish_reason: FinishReason::parse(&row.finish_reason).unwrap_or_default(),
        prompt_tokens: count(row.prompt_tokens),
        output_tokens: count(row.output_tokens),
        cached_tokens: count(row.cached_tokens),
        tokens,
        ..RequestTrace::default()
    };
    detail.apply(&mut trace);
    trace.served.prefix_cache = row.prefix_cache.map(|p| p.0);
    Ok((
        Loaded {
            trace,
            instance_id: row.instance_id,
            instance: row.instance_key,
            engine: engine(&row.engine),
            role: Role::parse(&row.role).unwrap_or_default(),
            model: row.model,
            parts: Vec::new(),
            notes: Vec::new(),
            clock_shift_ns: 0,
        },
        later,
    ))
}

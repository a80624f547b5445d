//! Incidents: freezing a view (the window's waterfall, the victims' requests and diagnoses) into
//! one row with an unguessable slug, reading it back, listing, revoking, and caching its preview.
//!
//! The snapshot keeps each victim as the model has it — its tokens in the same token-block
//! encoding as the `requests` table (texts inline), the load of its instance's steps, its
//! diagnosis — and the window's waterfall; the page is rebuilt from these by the same code that
//! builds a live request's page (`read::detail`). Stored as one zstd frame: a JSON header, then
//! the token blocks.

use serde::{Deserialize, Serialize};

use tokenscope_core::analysis::diagnosis::{Diagnosis, Thresholds};
use tokenscope_core::analysis::token_view::StepLoad;
use tokenscope_core::analysis::waterfall::{RowOrder, Waterfall};
use tokenscope_core::api::{
    Incident, IncidentRequest, IncidentSnapshot, IncidentSummary, NewIncident, RequestPart, Stage,
};
use tokenscope_core::model::{EngineKind, Nanos, RequestTrace, Role};

use super::read::{Loaded, detail};
use super::{Rows, Store, token_block};
use crate::error::{Error, Result};

/// The preview's width in pixels: the waterfall is frozen at the size chat tools unfurl.
pub const SNAPSHOT_WIDTH_PX: u32 = 1200;
/// Tracks frozen around the victims (the preview draws fewer).
const SNAPSHOT_ROWS: u32 = 200;
const SECOND: Nanos = 1_000_000_000;

/// 128 bits from the operating system's random source, as 32 hex digits.
fn new_slug() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::Internal(format!("the OS random source failed: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A victim as frozen: the request without its tokens (they follow as a token block), where it
/// ran, the load of the steps over its lifetime, and its diagnosis.
#[derive(Serialize, Deserialize)]
struct FrozenRequest {
    trace: RequestTrace,
    instance: String,
    engine: EngineKind,
    role: Role,
    model: String,
    steps: Vec<StepLoad>,
    diagnosis: Diagnosis,
    /// A PD request's parts and its joined bars (the parts' traces are not frozen).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    parts: Vec<RequestPart>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    stages: Vec<Stage>,
}

#[derive(Serialize, Deserialize)]
struct Frozen {
    waterfall: Waterfall,
    requests: Vec<FrozenRequest>,
}

fn bad(what: &str) -> Error {
    Error::Internal(format!("incident snapshot: {what}"))
}

/// `u32 length · JSON header · (u32 length · token block)*`, zstd-compressed.
fn compress(frozen: &Frozen, blocks: &[Vec<u8>]) -> Result<Vec<u8>> {
    let json = serde_json::to_vec(frozen).map_err(|e| bad(&e.to_string()))?;
    let mut raw = Vec::with_capacity(json.len() + blocks.iter().map(Vec::len).sum::<usize>() + 64);
    for part in std::iter::once(&json).chain(blocks) {
        raw.extend_from_slice(&(part.len() as u32).to_le_bytes());
        raw.extend_from_slice(part);
    }
    zstd::bulk::compress(&raw, 9).map_err(|e| bad(&e.to_string()))
}

fn decompress(bytes: &[u8]) -> Result<(Frozen, Vec<Vec<u8>>)> {
    let raw = zstd::stream::decode_all(bytes).map_err(|e| bad(&e.to_string()))?;
    let mut parts = Vec::new();
    let mut rest = raw.as_slice();
    while !rest.is_empty() {
        let (len, tail) = rest.split_at_checked(4).ok_or_else(|| bad("truncated"))?;
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let (part, tail) = tail.split_at_checked(len).ok_or_else(|| bad("truncated"))?;
        parts.push(part.to_vec());
        rest = tail;
    }
    let mut parts = parts.into_iter();
    let json = parts.next().ok_or_else(|| bad("empty"))?;
    let frozen: Frozen = serde_json::from_slice(&json).map_err(|e| bad(&e.to_string()))?;
    Ok((frozen, parts.collect()))
}

/// The snapshot as the API gives it: each victim's page rebuilt from what was frozen.
fn thaw(bytes: &[u8]) -> Result<IncidentSnapshot> {
    let (frozen, blocks) = decompress(bytes)?;
    if blocks.len() != frozen.requests.len() {
        return Err(bad("token blocks do not match the requests"));
    }
    let th = Thresholds::default();
    let requests = frozen
        .requests
        .into_iter()
        .zip(blocks)
        .map(|(f, block)| {
            let mut trace = f.trace;
            trace.tokens = token_block::decode(&block, trace.arrival_ns)?.0;
            let loaded = Loaded {
                trace,
                instance_id: 0,
                instance: f.instance,
                engine: f.engine,
                role: f.role,
                model: f.model,
                parts: Vec::new(),
            };
            let mut detail = detail(loaded, &f.steps, &th);
            if !f.parts.is_empty() {
                detail.parts = f.parts;
                detail.stages = f.stages;
            }
            Ok(IncidentRequest {
                detail,
                diagnosis: f.diagnosis,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(IncidentSnapshot {
        waterfall: frozen.waterfall,
        requests,
    })
}

fn check(new: &NewIncident) -> Result<()> {
    let bad = |m: &str| Err(Error::InvalidArgument(m.into()));
    if new.title.trim().is_empty() {
        return bad("title is empty: say what happened, in a few words");
    }
    if new.title.chars().count() > 200 {
        return bad("title is longer than 200 characters");
    }
    if new.note.chars().count() > 10_000 {
        return bad("note is longer than 10,000 characters");
    }
    if new.instance.trim().is_empty() {
        return bad("instance is empty");
    }
    if new.requests.is_empty() || new.requests.len() > 20 {
        return bad("requests must name 1 to 20 request ids");
    }
    if let (Some(a), Some(b)) = (new.from_ns, new.to_ns)
        && b <= a
    {
        return bad("to_ns must be after from_ns");
    }
    Ok(())
}

struct Row {
    slug: String,
    title: String,
    note: String,
    created_ns: i64,
    revoked_ns: Option<i64>,
    instances: Vec<String>,
    from_ns: i64,
    to_ns: i64,
    victims: Vec<String>,
    culprits: Vec<String>,
    headline: String,
}

impl Row {
    fn summary(self) -> (IncidentSummary, String) {
        (
            IncidentSummary {
                slug: self.slug,
                title: self.title,
                created_ns: self.created_ns,
                revoked: self.revoked_ns.is_some(),
                instances: self.instances,
                from_ns: self.from_ns,
                to_ns: self.to_ns,
                victims: self.victims,
                culprits: self.culprits,
                headline: self.headline,
            },
            self.note,
        )
    }
}

impl Store {
    /// Freezes the requests' view: their details and diagnoses, and the waterfall of the window
    /// around them with the first victim's culprits pulled next to it.
    pub async fn create_incident(&self, new: &NewIncident, now_ns: Nanos) -> Result<String> {
        check(new)?;
        let th = Thresholds::default();
        // One instance, or a PD request's instances drawn as one.
        let instances = super::split_list(&new.instance);
        let mut requests = Vec::new();
        let mut blocks = Vec::new();
        for id in &new.requests {
            let (loaded, steps) = self.load_with_steps(id, &instances).await?;
            // Diagnosed from the request just loaded, not loaded again.
            let diagnosis = self.diagnose_loaded(&loaded, &th).await?;
            // A PD request's bars come from its parts, which are not frozen.
            let (parts, stages) = if loaded.parts.is_empty() {
                (Vec::new(), Vec::new())
            } else {
                (loaded.part_summaries(), loaded.stages())
            };
            let Loaded {
                mut trace,
                instance,
                engine,
                role,
                model,
                ..
            } = loaded;
            blocks.push(token_block::encode(
                &trace.tokens,
                trace.arrival_ns,
                token_block::own_texts(|_, _| false),
            ));
            trace.tokens = Vec::new();
            requests.push(FrozenRequest {
                trace,
                instance,
                engine,
                role,
                model,
                steps,
                diagnosis,
                parts,
                stages,
            });
        }
        let first = requests.iter().map(|r| r.trace.arrival_ns).min();
        let last = requests.iter().map(|r| r.trace.finished_ns).max();
        let (Some(first), Some(last)) = (first, last) else {
            return Err(Error::InvalidArgument("requests is empty".into()));
        };
        let span = last - first;
        let from = new.from_ns.unwrap_or(first - (span / 2).max(2 * SECOND));
        let to = new.to_ns.unwrap_or(last + (span / 4).max(SECOND));
        let mut culprits: Vec<String> = requests
            .iter()
            .flat_map(|r| r.diagnosis.findings.iter().flat_map(|f| f.culprits.clone()))
            .filter(|c| !new.requests.contains(c))
            .collect();
        culprits.sort();
        culprits.dedup();
        let view = Rows {
            first_row: 0,
            rows: SNAPSHOT_ROWS,
            focus: Some(new.requests[0].clone()),
            pull: culprits.clone(),
            order: RowOrder::Arrival,
        };
        let waterfall = self
            .waterfall(
                &instances,
                Some(from),
                Some(to),
                SNAPSHOT_WIDTH_PX,
                false,
                &view,
            )
            .await?;
        let headline = requests
            .iter()
            .flat_map(|r| r.diagnosis.findings.first())
            .map(|f| f.summary.clone())
            .next()
            .unwrap_or_else(|| "No finding: the requests met their SLOs.".into());
        let snapshot = compress(
            &Frozen {
                waterfall,
                requests,
            },
            &blocks,
        )?;
        let slug = new_slug()?;
        sqlx::query!(
            "INSERT INTO incidents (slug, title, note, created_ns, instances, from_ns, to_ns, victims, culprits, headline, snapshot)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            slug,
            new.title.trim(),
            new.note,
            now_ns,
            &instances,
            from,
            to,
            &new.requests,
            &culprits,
            headline,
            snapshot,
        )
        .execute(&self.pool)
        .await?;
        Ok(slug)
    }

    /// The incident; `Gone` once revoked (its evidence is deleted then).
    pub async fn get_incident(&self, slug: &str) -> Result<Incident> {
        let row = sqlx::query!(
            "SELECT slug, title, note, created_ns, revoked_ns, instances, from_ns, to_ns, victims, culprits, headline, snapshot
             FROM incidents WHERE slug = $1",
            slug
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no incident {slug:?}")))?;
        if row.revoked_ns.is_some() {
            return Err(Error::Gone(format!(
                "incident {slug:?} was revoked: its link no longer shows anything"
            )));
        }
        let snapshot = thaw(&row.snapshot)?;
        let (summary, note) = Row {
            slug: row.slug,
            title: row.title,
            note: row.note,
            created_ns: row.created_ns,
            revoked_ns: row.revoked_ns,
            instances: row.instances,
            from_ns: row.from_ns,
            to_ns: row.to_ns,
            victims: row.victims,
            culprits: row.culprits,
            headline: row.headline,
        }
        .summary();
        Ok(Incident {
            summary,
            note,
            snapshot,
            // The store does not know who reads; the API handler says.
            can_revoke: false,
        })
    }

    /// Newest first; `q` matches title, headline, note, instance or request ids (case-insensitive).
    pub async fn list_incidents(
        &self,
        q: Option<&str>,
        limit: i64,
    ) -> Result<Vec<IncidentSummary>> {
        let pattern = q.map(|q| {
            let escaped = q
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_");
            format!("%{escaped}%")
        });
        let rows = sqlx::query!(
            "SELECT slug, title, note, created_ns, revoked_ns, instances, from_ns, to_ns, victims, culprits, headline
             FROM incidents
             WHERE $1::text IS NULL OR title ILIKE $1 OR headline ILIKE $1 OR note ILIKE $1
                OR EXISTS (SELECT 1 FROM unnest(instances || victims) AS x WHERE x ILIKE $1)
             ORDER BY created_ns DESC LIMIT $2",
            pattern,
            limit
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                Row {
                    slug: r.slug,
                    title: r.title,
                    note: r.note,
                    created_ns: r.created_ns,
                    revoked_ns: r.revoked_ns,
                    instances: r.instances,
                    from_ns: r.from_ns,
                    to_ns: r.to_ns,
                    victims: r.victims,
                    culprits: r.culprits,
                    headline: r.headline,
                }
                .summary()
                .0
            })
            .collect())
    }

    /// Revokes the link: the row stays (so the slug answers 410, not 404) but its evidence and
    /// preview are dropped.
    pub async fn revoke_incident(&self, slug: &str, now_ns: Nanos) -> Result<()> {
        let done = sqlx::query!(
            "UPDATE incidents SET revoked_ns = COALESCE(revoked_ns, $2), snapshot = '', preview_png = NULL, note = ''
             WHERE slug = $1",
            slug,
            now_ns
        )
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(Error::NotFound(format!("no incident {slug:?}")));
        }
        Ok(())
    }

    /// `None` when there is no such incident, else whether it was revoked.
    pub async fn incident_revoked(&self, slug: &str) -> Result<Option<bool>> {
        Ok(sqlx::query_scalar!(
            "SELECT revoked_ns IS NOT NULL AS \"revoked!\" FROM incidents WHERE slug = $1",
            slug
        )
        .fetch_optional(&self.pool)
        .await?)
    }

    pub async fn incident_preview(&self, slug: &str) -> Result<Option<Vec<u8>>> {
        Ok(sqlx::query_scalar!(
            "SELECT preview_png FROM incidents WHERE slug = $1 AND revoked_ns IS NULL",
            slug
        )
        .fetch_optional(&self.pool)
        .await?
        .flatten())
    }

    pub async fn cache_incident_preview(&self, slug: &str, png: &[u8]) -> Result<()> {
        sqlx::query!(
            "UPDATE incidents SET preview_png = $2 WHERE slug = $1 AND revoked_ns IS NULL",
            slug,
            png
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_128_random_bits() {
        let a = new_slug().unwrap();
        let b = new_slug().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}

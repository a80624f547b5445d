//! Incidents: freezing a view (the window's waterfall, the victims' requests and diagnoses) into
//! one row with an unguessable slug, and reading it back.
//!
//! The snapshot keeps each victim as the model has it — its tokens in the same token-block
//! encoding as the `requests` table (texts inline), the load of its instance's steps, its
//! diagnosis — and the window's waterfall; the page is rebuilt from these by the same code that
//! builds a live request's page (`requests::detail`). Stored as one zstd frame: a JSON header,
//! then the token blocks.

use serde::{Deserialize, Serialize};

use tokenscope_core::analysis::diagnosis::{Diagnosis, Thresholds};
use tokenscope_core::analysis::waterfall::{RowOrder, Waterfall};
use tokenscope_core::api::{
    Incident, IncidentRequest, IncidentSnapshot, IncidentSummary, NewIncident, RequestPart, Stage,
};
use tokenscope_core::model::{EngineKind, Nanos, RequestTrace, Role, StepLoad};

use super::requests::{self, detail};
use super::waterfall::Rows;
use crate::error::{Error, Result};
use crate::store::{IncidentRow, Loaded, Store, split_list, token_block};

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
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
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
                notes: f.notes,
                clock_shift_ns: 0,
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

fn summary(r: IncidentRow) -> IncidentSummary {
    IncidentSummary {
        slug: r.slug,
        title: r.title,
        created_ns: r.created_ns,
        revoked: r.revoked_ns.is_some(),
        instances: r.instances,
        from_ns: r.from_ns,
        to_ns: r.to_ns,
        victims: r.victims,
        culprits: r.culprits,
        headline: r.headline,
    }
}

/// An incident made but not stored yet: what a reader scoped to tenants may rewrite (other
/// tenants' ids into aliases) before it is kept.
pub struct Draft {
    frozen: Frozen,
    blocks: Vec<Vec<u8>>,
    row: IncidentRow,
}

impl Draft {
    /// The frozen waterfall, to hide other tenants' tracks.
    pub fn waterfall_mut(&mut self) -> &mut Waterfall {
        &mut self.frozen.waterfall
    }

    /// Rewrites every text of the snapshot (as JSON), the culprits and the headline with `f`,
    /// and marks the incident as readable only within `tenants`. The token blocks are the
    /// victims' own and stay.
    pub fn scope(&mut self, f: impl Fn(&str) -> String, tenants: Vec<String>) -> Result<()> {
        let json = serde_json::to_string(&self.frozen).map_err(|e| bad(&e.to_string()))?;
        self.frozen = serde_json::from_str(&f(&json)).map_err(|e| bad(&e.to_string()))?;
        for c in &mut self.row.culprits {
            *c = f(c);
        }
        self.row.headline = f(&self.row.headline);
        self.row.tenants = Some(tenants);
        Ok(())
    }
}

/// Freezes the requests' view and keeps it; returns the slug.
pub async fn create(store: &Store, new: &NewIncident, now_ns: Nanos) -> Result<String> {
    save(store, draft(store, new, now_ns).await?).await
}

/// Keeps a draft under a new slug.
pub async fn save(store: &Store, mut d: Draft) -> Result<String> {
    d.row.snapshot = compress(&d.frozen, &d.blocks)?;
    d.row.slug = new_slug()?;
    store.insert_incident(&d.row).await?;
    Ok(d.row.slug)
}

/// Freezes the requests' view: their details and diagnoses, and the waterfall of the window
/// around them with the first victim's culprits pulled next to it.
pub async fn draft(store: &Store, new: &NewIncident, now_ns: Nanos) -> Result<Draft> {
    check(new)?;
    let th = Thresholds::default();
    // One instance, or a PD request's instances drawn as one.
    let instances = split_list(&new.instance);
    let mut requests = Vec::new();
    let mut blocks = Vec::new();
    for id in &new.requests {
        let (loaded, steps) = requests::load_with_steps(store, id, &instances).await?;
        // Diagnosed from the request just loaded, not loaded again.
        let diagnosis = super::diagnosis::loaded(store, &loaded, &th).await?;
        // A PD request's bars come from its parts, which are not frozen.
        let (parts, stages) = if loaded.parts.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            (
                requests::part_summaries(&loaded),
                requests::stages_of(&loaded),
            )
        };
        let Loaded {
            mut trace,
            instance,
            engine,
            role,
            model,
            notes,
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
            notes,
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
    let waterfall = super::waterfall::waterfall(
        store,
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
    Ok(Draft {
        frozen: Frozen {
            waterfall,
            requests,
        },
        blocks,
        row: IncidentRow {
            slug: String::new(),
            title: new.title.trim().to_string(),
            note: new.note.clone(),
            created_ns: now_ns,
            revoked_ns: None,
            instances,
            from_ns: from,
            to_ns: to,
            victims: new.requests.clone(),
            culprits,
            headline,
            snapshot: Vec::new(),
            tenants: None,
        },
    })
}

/// Whether a reader who sees `within` (all: `None`) may read an incident made within `made`.
fn readable(made: Option<&[String]>, within: Option<&[String]>) -> bool {
    match (made, within) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(m), Some(w)) => m.iter().all(|t| w.contains(t)),
    }
}

/// The incident; `Gone` once revoked (its evidence is deleted then). A reader who sees only
/// `within` tenants finds only incidents made within them ("not found" otherwise).
pub async fn get(store: &Store, slug: &str, within: Option<&[String]>) -> Result<Incident> {
    let mut row = store.incident(slug).await?;
    if !readable(row.tenants.as_deref(), within) {
        return Err(Error::NotFound(format!("no incident {slug:?}")));
    }
    if row.revoked_ns.is_some() {
        return Err(Error::Gone(format!(
            "incident {slug:?} was revoked: its link no longer shows anything"
        )));
    }
    let snapshot = thaw(&std::mem::take(&mut row.snapshot))?;
    let note = std::mem::take(&mut row.note);
    Ok(Incident {
        summary: summary(row),
        note,
        snapshot,
        // The query does not know who reads; the API handler says.
        can_revoke: false,
    })
}

/// Newest first; `q` matches title, headline, note, instance or request ids (case-insensitive);
/// for a reader who sees only `within` tenants, those made within them.
pub async fn list(
    store: &Store,
    q: Option<&str>,
    limit: i64,
    within: Option<&[String]>,
) -> Result<Vec<IncidentSummary>> {
    Ok(store
        .list_incidents(q, limit, within)
        .await?
        .into_iter()
        .map(summary)
        .collect())
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
